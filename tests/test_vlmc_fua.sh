#!/bin/bash
# SPDX-License-Identifier: MIT
# NBD TRIM and WRITE_ZEROES with FUA are durable when acknowledged (review
# finding V1): a whole object zeroed is sent on as a DELETE, which carries
# no FUA, so vlmc must follow the parts with a FLUSH that reaches the store
# before it replies. The store is noop --store, whose "flushes" counter
# (requests served, read from its port's statistics area with `xsegctl
# stats --json`, refreshed every second) must grow across each FUA
# zeroing, and not across a zeroing without FUA (the blocker's own count
# also includes its periodic syncs). Also: the zeroed range reads back as
# zeroes, and vlmc's own counters (ios, object requests) are published.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init vlmc-fua python3

stack_conf stack "segment_size = 256M" "cache_size = 32M" "store = noop"
$X stack start $T/stack/stack.conf >$T/start.log 2>&1 || die "stack start: $(cat $T/start.log)"
SEG=$(seg_of $D)
$X volume --dir $D create v 8M || die "create"

python3 - "$X" "$SEG" "$D/run/nbd.sock" <<'PY'
import sys
from nbd_testlib import CMD_DISC, command, connect, request
from shell_checks import Checks, fresh_counters, port_stats
xsegctl, seg, path = sys.argv[1:4]
check = Checks()

def flushes_now():
    """The store's (noop on port 1) flush count, from a publication made
    after this call started (so it covers everything completed before)."""
    return fresh_counters(xsegctl, seg, 1, tries=100)["flushes"]

s = connect(path, "v", timeout=30)
cookie = 0
def cmd(typ, off, ln, flags=0, data=b""):
    global cookie
    cookie += 1
    return command(s, typ, cookie, off, ln, data, flags)

OBJ = 4 << 20
READ, WRITE, FLUSH, TRIM, ZEROES, FUA = 0, 1, 3, 4, 6, 1
for o in (0, OBJ):
    check(cmd(WRITE, o, 65536, 0, b"\xa5" * 65536)[0] == 0, f"write at {o}")
check(cmd(FLUSH, 0, 0)[0] == 0, "flush")

f0 = flushes_now()
check(cmd(TRIM, 0, OBJ)[0] == 0, "TRIM of a whole object without FUA")
f1 = flushes_now()
check(f1 == f0, f"no FLUSH reaches the store without FUA ({f0} -> {f1})")
check(cmd(WRITE, 0, 65536, 0, b"\x5a" * 65536)[0] == 0, "rewrite object 0")
check(cmd(FLUSH, 0, 0)[0] == 0, "flush")

f0 = flushes_now()
check(cmd(TRIM, 0, OBJ, FUA)[0] == 0, "TRIM of a whole object with FUA")
f1 = flushes_now()
check(f1 > f0, f"a FLUSH reached the store before TRIM+FUA was acknowledged ({f0} -> {f1})")
err, d = cmd(READ, 0, 65536)
check(err == 0 and d == b"\0" * 65536, "trimmed object reads as zeroes")

f0 = flushes_now()
check(cmd(ZEROES, OBJ, OBJ, FUA)[0] == 0, "WRITE_ZEROES of a whole object with FUA")
f1 = flushes_now()
check(f1 > f0, f"a FLUSH reached the store before WRITE_ZEROES+FUA was acknowledged ({f0} -> {f1})")
err, d = cmd(READ, OBJ, 65536)
check(err == 0 and d == b"\0" * 65536, "zeroed object reads as zeroes")

# vlmc publishes its own counters (port 3 in the default stack): the
# commands above were counted
check(port_stats(xsegctl, seg, 3)["peer_type"] == "vlmc", "port 3 is vlmc")
# a publication made after the last command
cnt = fresh_counters(xsegctl, seg, 3, tries=100)
check(cnt.get("ios", 0) >= 8 and cnt.get("object_requests", 0) >= 8
      and cnt.get("failed_ios", 1) == 0,
      f"vlmc statistics: {cnt.get('ios')} ios, {cnt.get('object_requests')} "
      f"object requests, {cnt.get('failed_ios')} failed")

s.sendall(request(CMD_DISC, 99, 0, 0))
sys.exit(check.exit_status())
PY
[ $? -eq 0 ] || fail "FUA checks"
finish "test_vlmc_fua: ok"
