#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc stops even when the store never answers an NBD command: over
# test_vlmc_store --hang-reads (a READ is taken and never answered), a
# client's WRITE completes and its READ stays in flight; SIGTERM to vlmc
# (--nbd-stop-timeout 2s) makes it give the connection up, say so in its
# log, and exit 0, instead of waiting for ever (it used to: `xsegctl stack
# stop` then hung on vlmc). The waits below are bounds on events, not
# timing assertions.
# NBD_STOP_SLOT_WAIT=1 (test_nbd_stop_slotwait, review 5 R5-2): vlmc runs
# with --nbd-inflight 1 and the client sends a second READ, which leaves
# vlmc's reader waiting for the slot the unanswered READ holds; that wait
# used to ignore the stop, and vlmc hung for ever.
# Exit 77 (skip) only when python3 is missing.
set -u
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
X=$BIN/xsegctl
SLOT_WAIT=${NBD_STOP_SLOT_WAIT:-0}
SLOT_OPTS=
[ "$SLOT_WAIT" = 1 ] && SLOT_OPTS="--nbd-inflight 1"
T=$(mktemp -d /tmp/test-nbd-stop-XXXXXX)
SEG=tnbdstop$$
PIDS=
cleanup() {
	for p in $PIDS; do kill $p 2>/dev/null; done
	for p in $PIDS; do
		for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
		kill -9 $p 2>/dev/null
	done
	$X destroy $SEG >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT
die() { echo "FAIL: $*"; tail -n 20 $T/*.log; exit 1; }

$X create --size 128M --static-ports 4 --dynamic-ports 16 --requests 512 \
	$SEG >/dev/null || die "create segment"
$BIN/test_vlmc_store -g $SEG -p 1 -t 1 --hang-reads --drain-timeout 1s \
	>$T/store.log 2>&1 &
STORE=$!
PIDS="$STORE"
# The connection given up keeps its I/Os and their memory on purpose (the
# store still holds their requests): no leak check for this vlmc.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
$BIN/vlmc -g $SEG -p 2 -t 1 --next-port 1 --nbd-socket $T/nbd.sock \
	--ctl-socket $T/ctl --nbd-stop-timeout 2s $SLOT_OPTS >$T/vlmc.log 2>&1 &
VLMC=$!
PIDS="$VLMC $PIDS"
for _ in $(seq 300); do [ -S $T/ctl ] && [ -S $T/nbd.sock ] && break; sleep 0.1; done
[ -S $T/nbd.sock ] || die "vlmc did not start"
$X volume --ctl $T/ctl create v 8M || die "create v"

# the client sends its commands, and tells us (a line on stdout) when the
# WRITE is answered and the READ sent; it then waits for vlmc to close
python3 - "$T/nbd.sock" "$SLOT_WAIT" > $T/client.out <<'PY' &
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(120); s.connect(sys.argv[1])
def recvn(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b
assert recvn(18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))
s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 7) + struct.pack(">I", 1) + b"v" + struct.pack(">H", 0))
while True:
    magic, o, t, l = struct.unpack(">QIII", recvn(20)); recvn(l)
    assert t < (1 << 31), t
    if t == 1: break
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 1, 1, 0, 4096) + b"\x33" * 4096)
magic, err, c = struct.unpack(">IIQ", recvn(16))
assert magic == 0x67446698 and err == 0 and c == 1, (err, c)
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 2, 0, 4096))
if sys.argv[2] == "1":  # waits for the slot READ 2 holds
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 3, 0, 4096))
print("sent", flush=True)
try:
    d = s.recv(16)
    print("closed" if not d else "answered")
except OSError:
    print("closed")
PY
CLIENT=$!
PIDS="$CLIENT $PIDS"
for _ in $(seq 600); do grep -q sent $T/client.out && break; sleep 0.1; done
grep -q sent $T/client.out || die "client: $(cat $T/client.out)"

rc=0
kill -TERM $VLMC
status=
for _ in $(seq 1200); do  # vlmc's own bound is 2 s (+ the drain)
	if ! kill -0 $VLMC 2>/dev/null; then wait $VLMC; status=$?; break; fi
	sleep 0.1
done
if [ "$status" = 0 ]; then
	echo "ok: vlmc exited 0 with a command never answered"
else
	echo "FAIL: vlmc did not exit cleanly (status '${status:-still running}')"; rc=1
fi
grep -q "never answered by port 1" $T/vlmc.log && echo "ok: vlmc says why" ||
	{ echo "FAIL: no message in the vlmc log"; rc=1; }
wait $CLIENT
[ "$(tail -n 1 $T/client.out)" = closed ] && echo "ok: the client saw the connection close" ||
	{ echo "FAIL: client: $(cat $T/client.out)"; rc=1; }
if grep -l "ERROR: AddressSanitizer\|WARNING: ThreadSanitizer\|runtime error:\|ERROR: LeakSanitizer" \
	$T/vlmc.log 2>/dev/null; then
	echo "FAIL: sanitizer report in vlmc's log"; rc=1
fi
[ $rc -eq 0 ] && echo "test_nbd_stop: ok" || { tail -n 20 $T/vlmc.log; echo "test_nbd_stop: FAILED"; }
exit $rc
