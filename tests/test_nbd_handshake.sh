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
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-hs python3
SEG=tnbdhs$$
seg_create $SEG 128M 512
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
start_vlmc $T $SEG -t 2
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
stop_wait $VLMC || die "vlmc exit $?"
echo PASS
