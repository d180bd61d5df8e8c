#!/bin/bash
# SPDX-License-Identifier: MIT
# A zeroing NBD command over more objects than vlmc sends at once (its
# window is 16 object requests) must be answered when one of its DELETEs
# fails: with an error, not never (review 5, R5-1: parts past two windows
# were neither submitted nor counted as done, the reply never came).
# vlmc over test_vlmc_store --fail-deletes N; a 4 MiB volume of 64 KiB
# objects; an NBD TRIM of all 64 objects from a raw-socket client.
#   N=0: answered, no error (control); N=1 and N=20 (the whole first
#   window and more fail): answered with an error; and vlmc still serves.
# The client waits up to 60 s for each reply: no reply is a hang (FAIL).
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init zwin

# trim_all FAIL_DELETES -> prints "REPLY err=E" or "HANG"; it runs in a
# command substitution (a subshell): the library records its processes and
# segments in files, for its own end and for the cleanup
trim_all() {
	local n=$1 seg=zwin$$-$1 d=$T/$1
	mkdir -p $d
	seg_create $seg 128M 512
	start_bg $1/store $BIN/test_vlmc_store -g $seg -p 1 -t 1 --fail-deletes $n
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		start_vlmc $d $seg -t 1 --object-size 64K --nbd-stop-timeout 2s
	$X volume --ctl $d/ctl create v 4M >/dev/null || { cat $d/vlmc.log; return 2; }
	timeout 150 python3 - "$d/nbd.sock" <<'PY'
import socket, sys
from nbd_testlib import connect, recvn, request, simple_reply
s = connect(sys.argv[1], "v", timeout=60)
def cmd(typ, cookie, off, length):
    s.sendall(request(typ, cookie, off, length))
    try:
        err, c = simple_reply(s)
    except socket.timeout:
        return None
    assert c == cookie, c
    return err
err = cmd(4, 7, 0, 4 << 20)          # TRIM of all 64 objects
if err is None:
    print("HANG"); sys.exit(0)
print("REPLY err=%d" % err)
r = cmd(0, 8, 0, 4096)               # READ: still served
print("READ %s" % ("HANG" if r is None else "err=%d" % r))
recvn(s, 4096) if r == 0 else None
PY
	# this trial's peers go now, not at the end of the script
	stop_pids -9 $(cat $T/pids)
	seg_destroy $seg
}

out=$(trim_all 0); echo "$out" | grep -q "REPLY err=0" && echo "$out" | grep -q "READ err=0" &&
	ok "TRIM of 64 objects, no failure: answered without error" || fail "control: $out"
for n in 1 20; do
	out=$(trim_all $n)
	echo "$out" | grep -q "REPLY err=[1-9]" && echo "$out" | grep -q "READ err=0" &&
		ok "TRIM of 64 objects, $n DELETE(s) failing: answered with an error, vlmc still serves" ||
		fail "$n failing DELETE(s): $out"
done
check_sanitizers "vlmc's log" $T/*/vlmc.log
finish "zero window test passed"
