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
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-stop python3
SLOT_WAIT=${NBD_STOP_SLOT_WAIT:-0}
SLOT_OPTS=
[ "$SLOT_WAIT" = 1 ] && SLOT_OPTS="--nbd-inflight 1"
SEG=tnbdstop$$
seg_create $SEG 128M 512
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 1 --hang-reads --drain-timeout 1s
# The connection given up keeps its I/Os and their memory on purpose (the
# store still holds their requests): no leak check for this vlmc.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
	start_vlmc $T $SEG -t 1 --nbd-stop-timeout 2s $SLOT_OPTS
$X volume --ctl $T/ctl create v 8M || die "create v"

# the client sends its commands, and tells us (a line on stdout) when the
# WRITE is answered and the READ sent; it then waits for vlmc to close
python3 - "$T/nbd.sock" "$SLOT_WAIT" > $T/client.out <<'PY' &
import sys
from nbd_testlib import CMD_READ, CMD_WRITE, command, connect, request
s = connect(sys.argv[1], "v", timeout=120)
err, _ = command(s, CMD_WRITE, 1, 0, 4096, b"\x33" * 4096)
assert err == 0, err
s.sendall(request(CMD_READ, 2, 0, 4096))
if sys.argv[2] == "1":  # waits for the slot READ 2 holds
    s.sendall(request(CMD_READ, 3, 0, 4096))
print("sent", flush=True)
try:
    d = s.recv(16)
    print("closed" if not d else "answered")
except OSError:
    print("closed")
PY
CLIENT=$!
track_pid $CLIENT
wait_until 600 grep -q sent $T/client.out || die "client: $(cat $T/client.out)"
# "sent" means in the socket: the stop must come once the store holds the
# READ (before, vlmc would drop it unread, have nothing in flight, and
# exit without the message this test looks for)
wait_until 600 grep -q "holding a READ" $T/store.log ||
	die "the store never took the READ: $(cat $T/store.log)"

stop_bounded $VLMC # vlmc leaves its waits within seconds
[ "$status" = 0 ] && ok "vlmc exited 0 with a command never answered" ||
	fail "vlmc did not exit cleanly (status '${status:-still running}')"
grep -q "never answered by port 1" $T/vlmc.log && ok "vlmc says why" ||
	fail "no message in the vlmc log"
wait $CLIENT
untrack_pid $CLIENT
[ "$(tail -n 1 $T/client.out)" = closed ] && ok "the client saw the connection close" ||
	fail "client: $(cat $T/client.out)"
check_sanitizers "vlmc's log" $T/vlmc.log
finish "test_nbd_stop: ok"
