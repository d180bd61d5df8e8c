#!/bin/bash
# SPDX-License-Identifier: MIT
# `xsegctl stack start` reports a peer that fails its start-up as that
# peer's failure, with its log, and stops what it started (review11 N-B,
# N-H). A peer binds its port before its init (the blocker opens its
# store there, vlmc starts NBD there), so a bound port is not "up": start
# waits until the peer has published its statistics, which the framework
# does first right after init.
#   1. vlmc's NBD TCP port is taken: start used to say "stack started"
#      (exit 0) with nothing serving; now exit 1, "vlmc did not come up",
#      vlmc's "Address already in use".
#   2. the store's log is cut below its durable mark: start used to blame
#      vlmc ("no control socket"); now exit 1, "store did not come up",
#      the store's "Structure needs cleaning".
# In both, no peer process and no segment is left. Every wait is a bound
# on an event, never a timing assertion. Exit 77 (skip) only when nbdcopy
# or the blocker peer is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init stack-start nbdcopy
[ -x $BIN/blocker ] || { echo "SKIP: blocker peer not built"; exit 77; }

nothing_left() { [ ! -e /dev/shm/$2 ] && no_process_left $1; }

# ---- 1. vlmc cannot start NBD ----
# a listener holds a loopback TCP port (the kernel picks it)
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(600)' > $T/port &
LISTENER=$!
track_pid $LISTENER
wait_until 100 [ -s $T/port ]
PORT=$(cat $T/port)
[ -n "$PORT" ] || die "no listener port"
new_stack s1 "store = blocker" "nbd_tcp = $PORT"
D1=$D
$X stack start $T/s1/stack.conf >$T/s1/out 2>$T/s1/err; rc=$?
SEG1=$(seg_of $D1)
[ $rc -eq 1 ] && ! grep -q "stack started" $T/s1/out &&
	grep -q "vlmc did not come up on port 3" $T/s1/err &&
	grep -q "Address already in use" $T/s1/err &&
	ok "1: vlmc failing its start-up fails the start, with vlmc's log" ||
	fail "1: start rc $rc: $(cat $T/s1/out $T/s1/err)"
[ ! -e $D1/run/vlmc.ctl ] && [ ! -e $D1/run/nbd.sock ] &&
	ok "1: the failed vlmc removed its sockets" || fail "1: sockets left: $(ls $D1/run)"
nothing_left $D1 $SEG1 && ok "1: no process, no segment left" ||
	fail "1: left: $(pgrep -af -- "$D1/run|--dir=$D1") $(ls /dev/shm | grep "$SEG1")"
stop_pids $LISTENER

# ---- 2. the store's log damaged below its durable mark ----
new_stack s2 "store = blocker"
D2=$D
$X stack start $T/s2/stack.conf >/dev/null || die "start s2"
SEG2=$(seg_of $D2)
$X volume --dir $D2 create v 16M || die "create v"
head -c 4M /dev/urandom > $T/pat
nbdcopy $T/pat "nbd+unix:///v?socket=$D2/run/nbd.sock" || die "nbdcopy"
$X stack stop --dir $D2 >/dev/null || die "stop s2"
size=$(stat -c %s $D2/store/log.000000)
[ "$size" -gt 1048576 ] || die "log only $size bytes"
truncate -s $((size / 2)) $D2/store/log.000000
$X stack start $T/s2/stack.conf >$T/s2/out 2>$T/s2/err; rc=$?
[ $rc -eq 1 ] && grep -q "store did not come up on port 1" $T/s2/err &&
	grep -q "Structure needs cleaning" $T/s2/err &&
	! grep -q "vlmc: no control socket" $T/s2/err &&
	ok "2: a damaged store fails the start as the store's failure, with its log" ||
	fail "2: start rc $rc: $(cat $T/s2/out $T/s2/err)"
nothing_left $D2 $SEG2 && ok "2: no process, no segment left" ||
	fail "2: left: $(pgrep -af -- "$D2/run|--dir=$D2")"

check_sanitizers "a log" $T/*/data/run/*.log
finish "stack start test passed"
