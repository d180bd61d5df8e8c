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
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
X=$BIN/xsegctl
T=$(mktemp -d /tmp/test-vlmc-fua-XXXXXX)
cleanup() {
	$X stack stop --dir $T/stack >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT

cat > $T/stack.conf <<CONF
dir = $T/stack
segment_size = 256M
cache_size = 32M
store = noop
CONF
$X stack start $T/stack.conf >$T/start.log 2>&1 || { cat $T/start.log $T/stack/run/*.log; exit 1; }
SEG=$(sed -n 's/^segment = //p' $T/stack/run/stack.conf)
$X volume --dir $T/stack create v 8M || { echo "FAIL: create"; exit 1; }

python3 - "$X" "$SEG" "$T/stack/run/nbd.sock" <<'PY'
import json, socket, struct, subprocess, sys, time
xsegctl, seg, path = sys.argv[1:4]
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: fails += 1

def store_stats():  # noop on port 1
    out = subprocess.run([xsegctl, "stats", seg, "1", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["peer_stats"]

def flushes_now():
    """The blocker's flush count, from a publication made after this call
    started (so it covers everything completed before)."""
    first = store_stats()["publications"]
    for _ in range(100):
        st = store_stats()
        if st["publications"] >= first + 2:
            return st["counters"]["flushes"]
        time.sleep(0.1)
    raise RuntimeError("blocker statistics not refreshed")

def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b

s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(path)
assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes
name = b"v"
s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 4 + len(name) + 2) +
          struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
while True:  # NBD_OPT_GO replies until ACK
    magic, o, t, l = struct.unpack(">QIII", recvn(s, 20)); recvn(s, l)
    assert magic == 0x3e889045565a9 and t < (1 << 31), t
    if t == 1: break

cookie = 0
def cmd(typ, off, ln, flags=0, data=b""):
    global cookie
    cookie += 1
    s.sendall(struct.pack(">IHHQQI", 0x25609513, flags, typ, cookie, off, ln) + data)
    magic, err, c = struct.unpack(">IIQ", recvn(s, 16))
    assert magic == 0x67446698 and c == cookie
    return err, (recvn(s, ln) if typ == 0 and not err else b"")

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
def port_stats(port):
    out = subprocess.run([xsegctl, "stats", seg, str(port), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
vs = port_stats(3)
check(vs["peer_type"] == "vlmc", "port 3 is vlmc")
first = (vs.get("peer_stats") or {}).get("publications", 0)
for _ in range(100):  # a publication made after the last command
    vs = port_stats(3)
    if (vs.get("peer_stats") or {}).get("publications", 0) >= first + 2:
        break
    time.sleep(0.1)
cnt = (vs.get("peer_stats") or {}).get("counters", {})
check(cnt.get("ios", 0) >= 8 and cnt.get("object_requests", 0) >= 8
      and cnt.get("failed_ios", 1) == 0,
      f"vlmc statistics: {cnt.get('ios')} ios, {cnt.get('object_requests')} "
      f"object requests, {cnt.get('failed_ios')} failed")

s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 99, 0, 0))  # DISC
sys.exit(1 if fails else 0)
PY
rc=$?
[ $rc -eq 0 ] && echo "test_vlmc_fua: ok" || echo "test_vlmc_fua: FAILED"
exit $rc
