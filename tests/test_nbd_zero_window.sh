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
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
X=$BIN/xsegctl
T=$(mktemp -d /tmp/test-zwin-XXXXXX)
FAILS=0
# trim_all runs in a command substitution (a subshell): it records its
# processes and segments in files, for its own end and for this trap
cleanup() {
	for p in $(cat $T/pids 2>/dev/null); do kill -9 $p 2>/dev/null; done
	for s in $(cat $T/segs 2>/dev/null); do $X destroy $s >/dev/null 2>&1; done
	rm -rf $T
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }

# trim_all FAIL_DELETES -> prints "REPLY err=E" or "HANG"
trim_all() {
	local n=$1 seg=zwin$$-$1 d=$T/$1
	mkdir -p $d
	$X create --size 128M --static-ports 4 --dynamic-ports 16 --requests 512 $seg >/dev/null || return 2
	echo $seg >> $T/segs
	$BIN/test_vlmc_store -g $seg -p 1 -t 1 --fail-deletes $n >$d/store.log 2>&1 &
	echo $! >> $T/pids
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
	$BIN/vlmc -g $seg -p 2 -t 1 --next-port 1 --nbd-socket $d/nbd.sock \
		--ctl-socket $d/ctl --object-size 64K --nbd-stop-timeout 2s >$d/vlmc.log 2>&1 &
	echo $! >> $T/pids
	for _ in $(seq 300); do [ -S $d/ctl ] && [ -S $d/nbd.sock ] && break; sleep 0.1; done
	$X volume --ctl $d/ctl create v 4M >/dev/null || { cat $d/vlmc.log; return 2; }
	timeout 150 python3 - "$d/nbd.sock" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(sys.argv[1])
def recvn(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b
assert recvn(18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))  # fixed newstyle, no zeroes
s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 7) + struct.pack(">I", 1) + b"v" + struct.pack(">H", 0))
while True:  # NBD_OPT_GO replies until NBD_REP_ACK
    magic, o, t, l = struct.unpack(">QIII", recvn(20)); recvn(l)
    assert t < (1 << 31), t
    if t == 1: break
def cmd(typ, cookie, off, length):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, typ, cookie, off, length))
    try:
        magic, err, c = struct.unpack(">IIQ", recvn(16))
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
recvn(4096) if r == 0 else None
PY
	# this trial's peers go now, not at the end of the script
	for p in $(cat $T/pids); do kill -9 $p 2>/dev/null; done
	$X destroy $seg >/dev/null 2>&1
}

out=$(trim_all 0); echo "$out" | grep -q "REPLY err=0" && echo "$out" | grep -q "READ err=0" &&
	ok "TRIM of 64 objects, no failure: answered without error" || fail "control: $out"
for n in 1 20; do
	out=$(trim_all $n)
	echo "$out" | grep -q "REPLY err=[1-9]" && echo "$out" | grep -q "READ err=0" &&
		ok "TRIM of 64 objects, $n DELETE(s) failing: answered with an error, vlmc still serves" ||
		fail "$n failing DELETE(s): $out"
done
if grep -l "ERROR: AddressSanitizer\|WARNING: ThreadSanitizer\|runtime error:" $T/*/vlmc.log 2>/dev/null; then
	fail "sanitizer report in vlmc's log"
fi
[ $FAILS -eq 0 ] || exit 1
echo "zero window test passed"
