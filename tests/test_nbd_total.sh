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
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
X=$BIN/xsegctl
T=$(mktemp -d /tmp/test-nbd-total-XXXXXX)
SEG=tnbdtot$$
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

$X create --size 160M --static-ports 4 --dynamic-ports 16 --requests 1024 \
	$SEG >/dev/null || die "create segment"
for bad in "--nbd-total-inflight-bytes 0" "--nbd-total-inflight-bytes 3Q"; do
	$BIN/vlmc -g $SEG -p 3 --next-port 1 --nbd-socket none \
		--ctl-socket $T/ctl2 $bad >$T/bad.log 2>&1
	[ $? -eq 2 ] && echo "ok: vlmc $bad refused" ||
		{ echo "FAIL: vlmc $bad: $(cat $T/bad.log)"; exit 1; }
done
$BIN/test_vlmc_store -g $SEG -p 1 -t 2 >$T/store.log 2>&1 &
PIDS="$!"
$BIN/vlmc -g $SEG -p 2 -t 2 --next-port 1 --nbd-socket $T/nbd.sock \
	--ctl-socket $T/ctl --nbd-max-conns 5 >$T/vlmc.log 2>&1 &
PIDS="$! $PIDS"
for _ in $(seq 300); do [ -S $T/ctl ] && [ -S $T/nbd.sock ] && break; sleep 0.1; done
[ -S $T/nbd.sock ] || die "vlmc did not start"
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
kill ${PIDS%% *}
wait ${PIDS%% *}
rc=$?
PIDS=${PIDS#* }
[ $rc -eq 0 ] || die "vlmc exit $rc"
echo PASS
