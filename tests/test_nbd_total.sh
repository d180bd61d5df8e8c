#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc's NBD budget over all connections (review12 F2), on a private segment
# whose heap is smaller than the per-connection budgets added up (vlmc
# --nbd-max-conns 5, default 64 MiB per connection, 160 MiB segment):
#   three clients each pipeline four 16 MiB READs (64 MiB, within their own
#   budget) and read no reply; another client's 4 MiB WRITE and READ then
#   still succeed and read back exactly (without the total budget the three
#   pinned the whole heap and it failed with ENOMEM); once the three read
#   their replies (all at once: one may wait for budget another's replies
#   free), every one of them is a success;
#   --nbd-total-inflight-bytes 0 / garbage are refused at start.
# Exit 77 (skip) only when python3 is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-total python3
SEG=tnbdtot$$
seg_create $SEG 160M 1024
vlmc_refuses $SEG "--nbd-total-inflight-bytes 0" "--nbd-total-inflight-bytes 3Q"
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
start_vlmc $T $SEG -t 2 --nbd-max-conns 5
$X volume --ctl $T/ctl create v 256M || die "create v"
grep -q "bytes in flight at most on all connections" $T/vlmc.log ||
	die "vlmc does not log its total budget"

python3 - "$T/nbd.sock" <<'PY' || die "python part"
import os, sys, time
from nbd_testlib import *
path = sys.argv[1]
M = 1 << 20
hogs = []
for h in range(3):
    s = connect(path, "v")
    s.sendall(b"".join(request(CMD_READ, 100 * h + i, (64 * h + 16 * i) * M,
                               16 * M) for i in range(4)))
    hogs.append(s)
time.sleep(1)  # not a timing assertion: lets the hogs pin what they can
o = connect(path, "v")
data = os.urandom(4 * M)
err, _ = command(o, CMD_WRITE, 1, 200 * M, 4 * M, data)
print("other client: 4 MiB WRITE err", err)
if err:
    sys.exit(1)
err, got = command(o, CMD_READ, 2, 200 * M, 4 * M)
print("other client: 4 MiB READ err", err, "same", got == data)
if err or got != data:
    sys.exit(1)
# The hogs read their replies at once: one of them may wait for budget
# that only another's replies free.
import threading
bad = []
def drain(h, s):
    try:
        for i in range(4):
            err, cookie = simple_reply(s)
            if err == 0:
                recvn(s, 16 * M)
            else:
                bad.append((h, cookie, err))
        s.sendall(request(CMD_DISC, 9, 0, 0))
    except Exception as e:
        bad.append((h, repr(e)))
    s.close()
ts = [threading.Thread(target=drain, args=(h, s)) for h, s in enumerate(hogs)]
for t in ts: t.start()
for t in ts: t.join()
print("hogs' replies: failures", bad)
o.sendall(request(CMD_DISC, 9, 0, 0))
o.close()
sys.exit(1 if bad else 0)
PY
echo "ok: a client is served while others pin their budgets"
stop_wait $VLMC || die "vlmc exit $?"
echo PASS
