#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc's NBD handshake limits (review12 F1), on a private segment with vlmc
# over test_vlmc_store:
#   16 sockets stay in the handshake, each sending one byte of its client
#   flags every second (a per-read timeout never fires); a new client is
#   still served (the oldest handshake is closed to make room), and every
#   trickling socket is closed by vlmc within its handshake deadline
#   (10 s; the test only asserts "eventually", within 90 s).
# Exit 77 (skip) only when python3 is missing.
set -u
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
X=$BIN/xsegctl
T=$(mktemp -d /tmp/test-nbd-hs-XXXXXX)
SEG=tnbdhs$$
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
$BIN/test_vlmc_store -g $SEG -p 1 -t 2 >$T/store.log 2>&1 &
PIDS="$!"
$BIN/vlmc -g $SEG -p 2 -t 2 --next-port 1 --nbd-socket $T/nbd.sock \
	--ctl-socket $T/ctl >$T/vlmc.log 2>&1 &
PIDS="$! $PIDS"
for _ in $(seq 300); do [ -S $T/ctl ] && [ -S $T/nbd.sock ] && break; sleep 0.1; done
[ -S $T/nbd.sock ] || die "vlmc did not start"
$X volume --ctl $T/ctl create v 64M || die "create v"

python3 - "$T/nbd.sock" <<'PY' || die "python part"
import socket, struct, sys, threading, time
from nbd_testlib import *
path = sys.argv[1]
closed = []
def trickle(i):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    s.connect(path)
    try:
        recvn(s, 18)
        # valid client flags, then NBD_OPT_LIST after NBD_OPT_LIST, one
        # byte a second
        stream = struct.pack(">I", FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES) + \
            struct.pack(">QII", OPT_MAGIC, 3, 0) * 100
        t0 = time.monotonic()
        k = 0
        while time.monotonic() - t0 < 90:
            s.sendall(stream[k:k + 1])
            k += 1
            s.settimeout(1)
            try:
                if s.recv(1) == b"":
                    break
            except socket.timeout:
                pass
        else:
            return
    except (OSError, EOFError):
        pass
    closed.append(i)
    s.close()
ts = []
for i in range(16):
    t = threading.Thread(target=trickle, args=(i,))
    t.start()
    ts.append(t)
time.sleep(2)  # not a timing assertion: the 16 are in the handshake
# a new client is served although 16 handshakes are held
c = connect(path, "v", timeout=60)
err, _ = command(c, CMD_READ, 1, 0, 4096)
print("new client served, READ err", err)
c.sendall(request(CMD_DISC, 2, 0, 0))
c.close()
for t in ts:
    t.join()
print("trickling sockets closed by vlmc:", len(closed), "of 16")
sys.exit(0 if err == 0 and len(closed) == 16 else 1)
PY
grep -q "handshake(s) closed: not done within" $T/vlmc.log ||
	die "no handshake deadline logged"
echo "ok: handshakes have a deadline; a new client is not locked out"
kill ${PIDS%% *}
wait ${PIDS%% *}
rc=$?
PIDS=${PIDS#* }
[ $rc -eq 0 ] || die "vlmc exit $rc"
echo PASS
