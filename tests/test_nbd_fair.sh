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
# vlmc publishes its statistics once a second: on a fast machine the part
# above ends before the waits reach the published copy (it read 0, then
# 220 two seconds later); wait for them, bounded
total_waits() { $X stats $SEG 2 | awk '$1 == "nbd_total_waits" { print $2 }'; }
wait_until 100 eval '[ "$(total_waits)" -gt 0 ] 2>/dev/null'
WAITS=$(total_waits)
[ "${WAITS:-0}" -gt 0 ] && ok "nbd_total_waits $WAITS" ||
	fail "nbd_total_waits '${WAITS:-}' after READs that queued for the total"

# A granted head gives up its claim before anything that can block on its
# own client (review-nbdfair F1). c sends 256 KiB READs one at a time and
# reads none, until a reply does not arrive whole within 2 s: vlmc's write
# to c blocks (c's socket is full; the 2 s only decide when to go on: a
# slow reply taken for a blocked one makes this check weaker, never fail).
# c then sends a 40 MiB WRITE_ZEROES with NO_HOLE|FAST_ZERO: it does not
# fit the total (claim 40 MiB), queues, is granted (256 KiB in flight) and
# is refused ENOTSUP, a reply that cannot be written. d's 4 MiB READ (over
# the 2 MiB share, 4 MiB of 32 free) must be answered while c stays stuck;
# before the fix the claim stood for as long as c did, and d waited.
python3 - "$T/nbd.sock" $SEG "${NBD_FAIR_BOUND:-60}" <<'PY' || fail "granted head blocked on its own client (F1)"
import select, sys, time
from nbd_testlib import *
path, seg, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
M, K = 1 << 20, 256 << 10
WRITE_ZEROES, NO_HOLE, FAST_ZERO = 6, 2, 16
c = connect(path, "v")
n = 0
while True:
    before = unread(c)
    c.sendall(request(CMD_READ, 100 + n, 0, K))
    n += 1
    t0 = time.monotonic()
    while unread(c) < before + K + 16 and time.monotonic() - t0 < 2:
        time.sleep(0.02)
    if unread(c) < before + K + 16:
        break
    if n > 4096:
        sys.exit("FAIL: vlmc's writes to a client that reads nothing "
                 "never block (%d bytes unread)" % unread(c))
print("c: %d 256 KiB READs unread (%d bytes), vlmc's write to c blocks" %
      (n, unread(c)))
waits = peer_stat(seg, 2, "nbd_total_waits")
c.sendall(request(WRITE_ZEROES, 200, 0, 40 * M, NO_HOLE | FAST_ZERO))
wait_stat_above(seg, 2, "nbd_total_waits", waits, bound)
print("c: the 40 MiB WRITE_ZEROES NO_HOLE|FAST_ZERO queued for the total")
d = connect(path, "v")
d.sendall(request(CMD_READ, 300, 0, 4 * M))
expect_read_reply(d, 300, 4 * M, bound, "d's 4 MiB READ",
                  "while c's refused command holds the claim")
print("d: 4 MiB READ answered while c's reply write stays blocked")
d.close()
c.close()
PY

# A granted WRITE passes its claim on before its payload, which the
# client may stall (review-nbdfair scenario B). h's 12 MiB READ is in
# flight and h reads none of it; w's 30 MiB WRITE then does not fit the
# total (12 + 30 > 32): it queues and, the head with the total at most
# half full, is granted. w sends 8 MiB of its payload and stalls: vlmc
# takes them all (more than the reader's buffer and the socket hold, so
# w's reader is in the payload) and waits for the rest. h reads its
# reply. d's 4 MiB READ (over the 2 MiB share, nothing else in flight)
# must be answered while w stays connected, stalled and unanswered, and
# go without queueing for the total: nbd_total_waits, fresh before h and
# after d's reply, went up by w's wait alone. Before the fix w kept its
# 30 MiB claim until its payload was all in: d queued behind it
# (0 + 4 + 30 > 32) and went when the claim lapsed (2 s after w came).
# Counted events; the bound is a hang detector.
python3 - "$T/nbd.sock" $SEG "${NBD_FAIR_BOUND:-60}" <<'PY' || fail "a stalled WRITE payload kept its claim (review-nbdfair scenario B)"
import fcntl, os, select, struct, sys, termios, time
from nbd_testlib import *
from shell_checks import fresh_counters
path, seg, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
M = 1 << 20

def unsent(s):
    """Bytes s sent that the peer has not read yet (TIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ,
                                          b"\0\0\0\0"))[0]

def total_waits():
    return fresh_counters(os.environ["X"], seg, 2)["nbd_total_waits"]

h = connect(path, "v")
w = connect(path, "v")
d = connect(path, "v")
waits = total_waits()
h.sendall(request(CMD_READ, 1, 0, 12 * M))
if not select.select([h], [], [], bound)[0]:
    sys.exit("FAIL: h's 12 MiB READ alone not answered in %d s" % bound)
w.settimeout(bound)
w.sendall(request(CMD_WRITE, 2, 128 * M, 30 * M) + bytes(8 * M))
t0 = time.monotonic()
while unsent(w):
    if time.monotonic() - t0 > bound:
        sys.exit("FAIL: vlmc did not take the first 8 MiB of w's 30 MiB "
                 "WRITE in %d s (%d bytes unread)" % (bound, unsent(w)))
    time.sleep(0.01)
print("h pins its 12 MiB READ; w's 30 MiB WRITE went, 8 MiB of its "
      "payload taken, the rest stalls")
err, got = simple_reply(h)
if err or got != 1 or len(recvn(h, 12 * M)) != 12 * M:
    sys.exit("FAIL: h's 12 MiB READ: err %d cookie %d" % (err, got))
d.sendall(request(CMD_READ, 3, 0, 4 * M))
expect_read_reply(d, 3, 4 * M, bound, "d's 4 MiB READ",
                  "while w stalls mid-payload")
if select.select([w], [], [], 0)[0]:
    sys.exit("FAIL: w, its payload stalled, got a reply or was closed")
queued = total_waits() - waits
if queued == 0:
    sys.exit("FAIL: w's 30 MiB WRITE did not queue for the total behind "
             "h's 12 MiB (nbd_total_waits unchanged): nothing tested")
if queued > 1:
    sys.exit("FAIL: d's 4 MiB READ queued for the total with nothing in "
             "flight (nbd_total_waits +%d, w's wait and d's): w's WRITE, "
             "stalled mid-payload, kept its claim" % queued)
print("d: 4 MiB READ answered without queueing while w's payload stalls")
for s in (d, w, h):
    s.close()
PY

# A claim that cannot be met does not lock the others out (review-nbdfair
# F2). x's 20 MiB READ goes alone and x reads none of its reply (more than
# the socket holds: the 20 MiB stay in flight); y's 16 MiB READ then
# queues as the head and can never go (20 + 16 > 32 and 20 > 16). w's
# 4 MiB READ (20 + 4 <= 32, the old rule lets it go) must be answered
# while x and y wait: the claim lapses after the head has waited 2 s.
# Before the fix w waited for as long as x pinned the total.
python3 - "$T/nbd.sock" $SEG "${NBD_FAIR_BOUND:-60}" <<'PY' || fail "a claim that cannot be met locked the others out (F2)"
import select, sys, time
from nbd_testlib import *
path, seg, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
M = 1 << 20
x = connect(path, "v")
x.sendall(request(CMD_READ, 1, 0, 20 * M))
if not select.select([x], [], [], bound)[0]:
    sys.exit("FAIL: x's 20 MiB READ alone not answered in %d s" % bound)
waits = peer_stat(seg, 2, "nbd_total_waits")
y = connect(path, "v")
y.sendall(request(CMD_READ, 2, 0, 16 * M))
wait_stat_above(seg, 2, "nbd_total_waits", waits, bound)
print("x pins its 20 MiB READ, y's 16 MiB READ queued for the total")
w = connect(path, "v")
w.sendall(request(CMD_READ, 3, 0, 4 * M))
expect_read_reply(w, 3, 4 * M, bound, "w's 4 MiB READ",
                  "behind a claim that cannot be met")
if select.select([y], [], [], 0)[0]:
    sys.exit("FAIL: y's 16 MiB READ answered while 20 MiB are pinned")
print("w: 4 MiB READ answered while x pins the total and y waits")
for s in (w, y, x):
    s.close()
PY
wait_until 600 grep -q "claim lapses" $T/vlmc.log &&
	ok "vlmc logged the head's lapsed claim" ||
	fail "no 'claim lapses' line in vlmc.log"

# vlmc stops while a reader waits in the queue: a client that does not
# read pins 30 MiB (its second READ waits on its own replies), so a
# 12 MiB READ queues for the total for good; SIGTERM must still stop
# vlmc cleanly (the waiter leaves the queue as its connection closes).
python3 - "$T/nbd.sock" $SEG >$T/client.out 2>&1 <<'PY' &
import select, sys
from nbd_testlib import *
M = 1 << 20
hog = connect(sys.argv[1], "v")
hog.sendall(request(CMD_READ, 1, 0, 30 * M) + request(CMD_READ, 2, 0, 30 * M))
# hog's first READ is in flight (its reply began) before big comes
select.select([hog], [], [], 60)
waits = peer_stat(sys.argv[2], 2, "nbd_total_waits")
big = connect(sys.argv[1], "v")
big.sendall(request(CMD_READ, 3, 0, 12 * M))
# the READ is in the queue (a hang detector's bound, no timing)
wait_stat_above(sys.argv[2], 2, "nbd_total_waits", waits, 60)
print("sent", flush=True)
try:
    print("answered" if big.recv(16) else "closed")
except OSError:
    print("closed")
PY
CLIENT=$!
track_pid $CLIENT
wait_until 600 grep -q sent $T/client.out || die "client: $(cat $T/client.out)"
stop_bounded $VLMC # vlmc leaves its waits within seconds
[ "$status" = 0 ] && ok "vlmc stopped while a READ waited in the queue" ||
	fail "vlmc did not exit cleanly (status '${status:-still running}')"
wait $CLIENT
untrack_pid $CLIENT
[ "$(tail -n 1 $T/client.out)" = closed ] && ok "the client saw the connection close" ||
	fail "client: $(cat $T/client.out)"
check_sanitizers vlmc $T/vlmc.log
finish PASS
