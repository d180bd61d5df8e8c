#!/bin/bash
# SPDX-License-Identifier: MIT
# A command larger than a connection's share of vlmc's NBD budget over all
# connections is not starved by other connections keeping the total full
# (docs/vlmc.md, "No starvation of large commands"). vlmc
# --nbd-total-inflight-bytes 32M --nbd-max-conns 8 (share 2 MiB) over
# test_vlmc_store; five clients each keep 48 1 MiB READs in flight (240 MiB
# asked for: each reply's bytes are taken at once by a READ waiting).
# Meanwhile:
#   a 30 MiB READ (over half the total) and then a 12 MiB READ (under half)
#   each get their reply, data as written, while the five go on; before
#   the fix the 30 MiB READ waited for a moment when 30 MiB were free,
#   which the stream did not leave;
#   a client that sends a 30 MiB READ and closes at once (its reader waits
#   for the total) does not keep a later 12 MiB READ waiting;
#   the five clients' READs all succeed;
#   vlmc stops cleanly while a READ waits in the queue for good (a client
#   that reads no reply pins the total).
# Starved: the other clients complete OVERTAKE (2500) READs before the
# large READ's reply comes (with the queue, 50 to 260 of them, the ones
# in flight draining; before it, the bound was hit every time); a hang
# detector, NBD_FAIR_BOUND (60 s), backs it. Neither is a timing.
# Exit 77 (skip) only when python3 is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-fair python3
SEG=tnbdfair$$
seg_create $SEG 160M 1024
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
start_vlmc $T $SEG -t 2 --nbd-max-conns 8 --nbd-total-inflight-bytes 32M
$X volume --ctl $T/ctl create v 256M || die "create v"

python3 - "$T/nbd.sock" "${NBD_FAIR_BOUND:-60}" <<'PY' || die "python part"
import os, select, sys, threading, time
from nbd_testlib import *
path, bound = sys.argv[1], float(sys.argv[2])
M = 1 << 20
DEPTH = 48
OVERTAKE = 2500

w = connect(path, "v")
data = os.urandom(30 * M)
err, _ = command(w, CMD_WRITE, 1, 0, 30 * M, data)
if err:
    sys.exit("30 MiB WRITE alone failed: err %d" % err)
w.sendall(request(CMD_DISC, 9, 0, 0))
w.close()

stop = threading.Event()
bad = []
replies = [0] * 5
started = threading.Barrier(6)

def stream(k):
    """DEPTH 1 MiB READs in flight until stop, each reply answered by the
    next READ; then the rest drained."""
    s = connect(path, "v")
    sent = 0
    def send():
        nonlocal sent
        off = (64 + 32 * k + sent % 32) * M
        s.sendall(request(CMD_READ, sent, off, M))
        sent += 1
    try:
        for _ in range(DEPTH):
            send()
        waited = False
        while replies[k] < sent:
            err, cookie = simple_reply(s)
            if err:
                bad.append((k, cookie, err))
            else:
                recvn(s, M)
            replies[k] += 1
            if replies[k] == 32 and not waited:
                started.wait()
                waited = True
            if not stop.is_set():
                send()
        s.sendall(request(CMD_DISC, 9, 0, 0))
    except Exception as e:
        bad.append((k, repr(e)))
        if not waited:
            started.abort()
    s.close()

ts = [threading.Thread(target=stream, args=(k,), daemon=True)
      for k in range(5)]
for t in ts:
    t.start()
started.wait()  # all five streams going: the total is full
print("5 clients streaming 1 MiB READs")

def big(n, cookie):
    """An n MiB READ of the written data on a new connection. Starved:
    the others complete OVERTAKE READs (OVERTAKE MiB) before its reply
    comes; hung: no reply within bound seconds."""
    s = connect(path, "v")
    s.sendall(request(CMD_READ, cookie, 0, n * M))
    base = sum(replies)
    t0 = time.monotonic()
    while not select.select([s], [], [], 0.1)[0]:
        passed = sum(replies) - base
        if passed > OVERTAKE or time.monotonic() - t0 > bound:
            stop.set()
            sys.exit("FAIL: %d MiB READ starved: not answered while the "
                     "others completed %d READs (%s)" % (n, passed, replies))
    err, got = simple_reply(s)
    passed = sum(replies) - base
    if err or got != cookie:
        stop.set()
        sys.exit("FAIL: %d MiB READ: err %d cookie %d" % (n, err, got))
    if recvn(s, n * M) != data[:n * M]:
        stop.set()
        sys.exit("FAIL: %d MiB READ: data differs" % n)
    s.sendall(request(CMD_DISC, 9, 0, 0))
    s.close()
    print("%d MiB READ answered while the others completed %d READs" %
          (n, passed))

big(30, 11)
big(12, 12)
q = connect(path, "v")
q.sendall(request(CMD_READ, 13, 0, 30 * M))
q.close()
print("a client sent a 30 MiB READ and closed")
big(12, 14)
stop.set()
for t in ts:
    t.join(bound)
print("streams:", replies, "failures:", bad)
sys.exit(1 if bad or any(t.is_alive() for t in ts) else 0)
PY
echo "ok: large READs are served while other clients keep the total full"

# vlmc stops while a reader waits in the queue: a client that does not
# read pins 30 MiB (its second READ waits on its own replies), so a
# 12 MiB READ queues for the total for good; SIGTERM must still stop
# vlmc cleanly (the waiter leaves the queue as its connection closes).
python3 - "$T/nbd.sock" >$T/client.out 2>&1 <<'PY' &
import sys, time
from nbd_testlib import *
M = 1 << 20
hog = connect(sys.argv[1], "v")
hog.sendall(request(CMD_READ, 1, 0, 30 * M) + request(CMD_READ, 2, 0, 30 * M))
big = connect(sys.argv[1], "v")
big.sendall(request(CMD_READ, 3, 0, 12 * M))
time.sleep(1)  # not a timing assertion: lets the READ reach the queue
print("sent", flush=True)
try:
    print("answered" if big.recv(16) else "closed")
except OSError:
    print("closed")
PY
CLIENT=$!
track_pid $CLIENT
wait_until 600 grep -q sent $T/client.out || die "client: $(cat $T/client.out)"
kill -TERM $VLMC
status=
for _ in $(seq 1200); do # a hang detector: vlmc leaves waits within 1 s
	if ! kill -0 $VLMC 2>/dev/null; then wait $VLMC; status=$?; break; fi
	sleep 0.1
done
[ -n "$status" ] && untrack_pid $VLMC
[ "$status" = 0 ] && ok "vlmc stopped while a READ waited in the queue" ||
	fail "vlmc did not exit cleanly (status '${status:-still running}')"
wait $CLIENT
untrack_pid $CLIENT
[ "$(tail -n 1 $T/client.out)" = closed ] && ok "the client saw the connection close" ||
	fail "client: $(cat $T/client.out)"
check_sanitizers vlmc $T/vlmc.log
finish PASS
