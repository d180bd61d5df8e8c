#!/bin/bash
# SPDX-License-Identifier: MIT
# `xsegctl stack stop` and `start` never report lost write-back data as a
# clean stop (review9 R9-3, R9-5(b); docs/operations.md "Stop and
# write-back losses"). Each case writes through NBD without a FLUSH, so
# write-back cached holds acknowledged data only it has, then kills the
# supervisor (so nothing restarts what dies) and:
#   1. SIGKILLs the store: stop restarts the store, cached flushes into
#      it, stop exits 0 and removes the segment; after a new start the
#      data reads back identical (it used to print "stack stopped", exit
#      0, and the data read back as zeroes);
#   2. SIGKILLs cached: stop exits 1 saying what was lost, keeps the
#      segment (xsegctl info shows the loss), writes it to
#      DIR/run/stack.log; the next start reports the old segment's loss
#      before it replaces it, and its own stop is clean again;
#   3. SIGKILLs the store and makes it impossible to restart (a stand-in
#      blocker that exits 1): cached gives up flushing (--flush-timeout
#      2s through a wrapper) and keeps its redirect; stop exits 1 naming
#      the loss, the kept redirect and cached's log line;
#   4. (no loss) a store that opens refusing writes: start and status say so;
#   5. SIGKILLs the store while cached flushes into it: stop restarts it
#      during its wait for cached, which then flushes, and exits 0;
#   7. SIGSTOPs cached: unredirect is refused, unplug-cached completes
#      (it sends SIGCONT), the data reads back;
#   8. a dead cached's port held mid-bind by a noop stopped by gdb
#      (skipped without gdb): the supervisor's give-up and unplug-cached
#      say so, once, naming it; the supervisor unplugs once it is gone.
# Also: the config key dead_peer_wait reaches vlmc's command line.
# Every wait is a bound on an event, never a timing assertion.
# Exit 77 (skip) only when nbdcopy or the blocker peer is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init stack-stop nbdcopy
[ -x $BIN/blocker ] || { echo "SKIP: blocker peer not built"; exit 77; }

# alive flag ("true"/"false") of a role's port
alive() { status_json $1 | python3 -c '
import json, sys
print(str([p for p in json.load(sys.stdin)["peers"] if p["role"] == sys.argv[1]][0]["alive"]).lower())' $2; }
# volume vol (1 MiB) written without a FLUSH: cached holds it
lossy_write() {
	$X volume --dir $1 create vol 1M || { echo "create vol"; return 1; }
	nbdcopy $T/pat "nbd+unix:///vol?socket=$1/run/nbd.sock" || { echo "nbdcopy"; return 1; }
	[ "$(cached_unflushed $1)" -gt 0 ] || { echo "unflushed $(cached_unflushed $1)"; return 1; }
}
readback() {
	rm -f $T/back
	nbdcopy "nbd+unix:///vol?socket=$1/run/nbd.sock" $T/back && cmp -s $T/pat $T/back
}
# stop the supervisor of stack DIR: nothing restarts what dies
stop_supervisor() {
	local sup
	sup=$(pid_of $1 supervisor)
	[ -n "$sup" ] && kill $sup
	for _ in $(seq 100); do kill -0 $sup 2>/dev/null || break; sleep 0.1; done
	! kill -0 $sup 2>/dev/null
}
# stop the supervisor, then SIGKILL ROLE
kill_role() {
	stop_supervisor $1 || return 1
	kill -9 $(pid_of $1 $2) || return 1
	for _ in $(seq 100); do [ "$(alive $1 $2)" = false ] && return 0; sleep 0.1; done
	return 1
}
head -c 1M /dev/urandom > $T/pat

# ---- 1. the store dead at stop: restarted, cached flushes, clean stop ----
new_stack s1 "dead_peer_wait = 45s"
D1=$D
$X stack start $T/s1/stack.conf >/dev/null || die "start s1"
SEG1=$(seg_of $D1)
cmdline_of $D1 vlmc | grep -q -- '--dead-peer-wait=45s' &&
	ok "dead_peer_wait passed to vlmc" || fail "no --dead-peer-wait=45s on vlmc's command line"
lossy_write $D1 && ok "s1: 1 MiB acknowledged, held unflushed by cached" || fail "s1: lossy write"
kill_role $D1 store && ok "s1: supervisor stopped, store killed" || die "s1: kill store"
# a start naming this directory and another segment (review11 N-A):
# refused before it writes or stops anything (it used to overwrite
# run/stack.conf and stop this stack's supervisor)
printf 'dir = %s\nsegment = other-%s\n' $D1 $$ > $T/s1/other.conf
$X stack start $T/s1/other.conf >/dev/null 2>$T/s1/other.err; rc=$?
[ $rc -eq 1 ] && grep -q "already running in $D1 on segment $SEG1" $T/s1/other.err &&
	[ "$(seg_of $D1)" = "$SEG1" ] && [ ! -e /dev/shm/other-$$ ] &&
	[ "$(alive $D1 vlmc)" = true ] &&
	ok "s1: a start on the running stack's dir under another segment refused" ||
	fail "s1: other-segment start rc $rc: $(cat $T/s1/other.err)"
$X stack stop --dir $D1 >$T/s1/out 2>$T/s1/err; rc=$?
[ $rc -eq 0 ] && grep -q "^stack stopped" $T/s1/out && ! grep -q "LOSS" $T/s1/err &&
	ok "s1: stop with a dead store exits 0" || fail "s1: stop rc $rc: $(cat $T/s1/out $T/s1/err)"
grep -q "store (port 1) is down; restarting it" $T/s1/err &&
	grep -q "store (port 1) is down; restarting it" $D1/run/stack.log &&
	ok "s1: stop says it restarted the store (stderr, stack.log)" || fail "s1: $(cat $T/s1/err)"
[ ! -e /dev/shm/$SEG1 ] && no_process_left $D1 && ok "s1: no segment, no process left" ||
	fail "s1: segment or processes left"
$X stack start $T/s1/stack.conf >/dev/null 2>$T/s1/err2 || die "restart s1"
readback $D1 && ok "s1: the unflushed writes reached the store: data intact after restart" ||
	fail "s1: data lost"
! grep -q "write-back loss" $T/s1/err2 && ok "s1: the next start reports nothing" ||
	fail "s1: start reported: $(cat $T/s1/err2)"
$X stack stop --dir $D1 >/dev/null 2>&1 && [ ! -e /dev/shm/$SEG1 ] &&
	ok "s1: clean stop with a live store: exit 0, segment removed" || fail "s1: second stop"

# ---- 2. cached dead holding writes: stop fails, keeps the record ----
new_stack s2
D2=$D
$X stack start $T/s2/stack.conf >/dev/null || die "start s2"
SEG2=$(seg_of $D2)
lossy_write $D2 || fail "s2: lossy write"
kill_role $D2 cached && ok "s2: supervisor stopped, dirty cached killed" || die "s2: kill cached"
$X stack stop --dir $D2 >$T/s2/out 2>$T/s2/err; rc=$?
[ $rc -eq 1 ] && ! grep -q "^stack stopped:" $T/s2/out && grep -q "WITH DATA LOSS" $T/s2/err &&
	ok "s2: stop exits 1 and says data was lost" || fail "s2: stop rc $rc: $(cat $T/s2/out $T/s2/err)"
grep -q "records 1 write-back loss" $T/s2/err &&
	grep -q "still redirected to port 2 (cached)" $T/s2/err &&
	ok "s2: stop names the loss count and the kept redirect" || fail "s2: $(cat $T/s2/err)"
grep -q "xsegctl destroy $SEG2" $T/s2/err && ok "s2: stop says how to remove the segment" ||
	fail "s2: no removal hint"
grep -q "WITH DATA LOSS" $D2/run/stack.log && grep -q "records 1 write-back loss" $D2/run/stack.log &&
	ok "s2: the loss is in DIR/run/stack.log" || fail "s2: stack.log: $(cat $D2/run/stack.log)"
[ -e /dev/shm/$SEG2 ] && $X info $SEG2 | grep -q "^write-back losses: 1" &&
	ok "s2: segment kept, xsegctl info shows the loss" || fail "s2: segment: $($X info $SEG2 2>&1 | head -3)"
no_process_left $D2 && ok "s2: every peer stopped" || fail "s2: processes left"
$X stack stop --dir $D2 >/dev/null 2>&1 && fail "s2: a second stop succeeded" ||
	ok "s2: a second stop still fails (the record is kept)"
# the next start tells of the old segment's loss before replacing it
$X stack start $T/s2/stack.conf >$T/s2/out2 2>$T/s2/err2 || die "restart s2: $(cat $T/s2/err2)"
grep -q "records 1 write-back loss(es) since it was created" $T/s2/err2 &&
	grep -q "removing segment $SEG2" $T/s2/err2 &&
	grep -q "removing segment $SEG2" $D2/run/stack.log &&
	ok "s2: start reports the old segment's loss (stderr, stack.log)" ||
	fail "s2: start: $(cat $T/s2/err2)"
[ "$(losses $D2)" = 0 ] &&
	ok "s2: the new segment starts with no loss" || fail "s2: losses after restart"
$X stack stop --dir $D2 >/dev/null 2>$T/s2/err3 && [ ! -e /dev/shm/$SEG2 ] &&
	ok "s2: the new stack stops cleanly" || fail "s2: last stop: $(cat $T/s2/err3)"

# wrap_bin DIR TIMEOUT: a bin dir whose cached runs with --flush-timeout
# TIMEOUT, the other peers the real ones
wrap_bin() {
	bin_with $1 cached "$(printf '#!/bin/sh\nexec %s/cached --flush-timeout=%s "$@"' $BIN $2)"
}

# ---- 3. the store cannot come back: cached gives up, stop says so ----
W=$T/wrap
W2=$T/wrap-nostore
wrap_bin $W 2s
mkdir -p $W2
# a store that cannot start: writes its pid file (so the wait sees it die)
printf '#!/bin/sh\nfor a; do case $a in --pidfile=*) echo $$ > ${a#--pidfile=};; esac; done\necho "stand-in store: cannot start" >&2\nexit 1\n' > $W2/blocker
chmod +x $W2/blocker
ln -s $W/cached $W2/cached
ln -s $BIN/vlmc $W2/vlmc
new_stack s3 "store = blocker"
D3=$D
AC_BIN_DIR=$W $X stack start $T/s3/stack.conf >/dev/null || die "start s3"
SEG3=$(seg_of $D3)
lossy_write $D3 || fail "s3: lossy write"
kill_role $D3 store || die "s3: kill store"
AC_BIN_DIR=$W2 $X stack stop --dir $D3 >$T/s3/out 2>$T/s3/err; rc=$?
[ $rc -eq 1 ] && grep -q "WITH DATA LOSS" $T/s3/err &&
	ok "s3: store not restartable: stop exits 1 with the loss" || fail "s3: stop rc $rc: $(cat $T/s3/out $T/s3/err)"
grep -q "the store did not come back" $T/s3/err && ok "s3: stop says the store did not come back" ||
	fail "s3: $(cat $T/s3/err)"
grep -q "records 1 write-back loss" $T/s3/err && grep -q "still redirected to port 2" $T/s3/err &&
	ok "s3: cached's release counted the loss; its kept redirect is reported" || fail "s3: $(cat $T/s3/err)"
grep -q "cached.log: .*flush timeout" $T/s3/err && ok "s3: stop points at cached's flush-timeout line" ||
	fail "s3: no cached log line in: $(cat $T/s3/err)"
[ -e /dev/shm/$SEG3 ] && no_process_left $D3 && ok "s3: peers gone, segment kept" ||
	fail "s3: segment or processes"
$X destroy $SEG3 >/dev/null && [ ! -e /dev/shm/$SEG3 ] && ok "s3: removed as the message says" ||
	fail "s3: destroy"

# ---- 5. the store dies during cached's flush: stop restarts it ----
# The store is SIGSTOPped before the stop (cached's flush cannot drain)
# and SIGKILLed once cached says it is flushing: stop must restart it
# while it waits for cached (the supervisor is gone), so cached's retries
# reach it. Before, stop restarted a dead store only before cached's
# stop: cached gave up after its --flush-timeout (60 s through a wrapper)
# and the stop exited 1 with the data lost (only the old code waits
# those 60 s: the new one never needs them).
W5=$T/wrap5
wrap_bin $W5 60s
new_stack s5 "store = blocker"
D5=$D
AC_BIN_DIR=$W5 $X stack start $T/s5/stack.conf >/dev/null || die "start s5"
SEG5=$(seg_of $D5)
lossy_write $D5 || fail "s5: lossy write"
stop_supervisor $D5 || die "s5: supervisor"
store5=$(pid_of $D5 store)
kill -STOP $store5 || die "s5: SIGSTOP store"
AC_BIN_DIR=$W5 $X stack stop --dir $D5 >$T/s5/out 2>$T/s5/err &
stop5=$!
for _ in $(seq 600); do
	grep -q "stopping: write-through, flushing [1-9]" $D5/run/cached.log 2>/dev/null && break
	sleep 0.1
done
grep -q "stopping: write-through, flushing [1-9]" $D5/run/cached.log &&
	ok "s5: cached flushes into a stopped store" || fail "s5: cached did not start flushing"
kill -9 $store5
wait $stop5; rc=$?
[ $rc -eq 0 ] && grep -q "^stack stopped" $T/s5/out && ! grep -q "LOSS" $T/s5/err &&
	grep -q "store (port 1) is down; restarting it" $T/s5/err &&
	ok "s5: the store killed during the flush is restarted; stop exits 0" ||
	fail "s5: stop rc $rc: $(cat $T/s5/out $T/s5/err)"
[ ! -e /dev/shm/$SEG5 ] && no_process_left $D5 && ok "s5: no segment, no process left" ||
	fail "s5: segment or processes left"
$X stack start $T/s5/stack.conf >/dev/null 2>&1 || die "restart s5"
readback $D5 && ok "s5: the flushed writes are in the store after a restart" || fail "s5: data lost"
$X stack stop --dir $D5 >/dev/null 2>&1 || fail "s5: last stop"

# ---- 4. a store that opens refusing writes: start and status say so ----
# (review11 N-F: the first sign used to be an ENOSPC at the first write.)
# DIR/sync_error (a log fsync failed in an earlier run; an empty file is
# enough) makes the blocker open degraded with EIO until it is cleared.
new_stack s4 "store = blocker"
D4=$D
$X stack start $T/s4/stack.conf >/dev/null 2>$T/s4/err0 || die "start s4"
! grep -q "refuses writes" $T/s4/err0 && ok "s4: a healthy store: no warning" ||
	fail "s4: warned: $(cat $T/s4/err0)"
$X stack stop --dir $D4 >/dev/null 2>&1 || fail "s4: stop"
touch $D4/store/sync_error
$X stack start $T/s4/stack.conf >/dev/null 2>$T/s4/err; rc=$?
[ $rc -eq 0 ] && grep -q "warning: the store refuses writes (Input/output error); reads are served" $T/s4/err &&
	grep -q "store.log: .*degraded" $T/s4/err &&
	ok "s4: start warns that the store refuses writes, with its log line" ||
	fail "s4: start rc $rc: $(cat $T/s4/err)"
$X stack status --dir $D4 2>/dev/null | grep -q "^store: DEGRADED, writes refused (Input/output error)" &&
	[ "$(status_json $D4 | python3 -c 'import json,sys; print(json.load(sys.stdin)["store_degraded_errno"])')" = 5 ] &&
	ok "s4: status shows the degraded store (text and JSON)" || fail "s4: status: $($X stack status --dir $D4 2>&1)"
$X stack stop --dir $D4 >/dev/null 2>&1 || fail "s4: second stop"

# ---- 6. a write-through cached dead in the path: kept record, no loss ----
# Its writes all reached the store, so nothing is lost; the redirect to the
# dead cached is still the record to keep, but stop must not call it data
# loss (review17 F5: it said WITH DATA LOSS whatever kept the segment).
new_stack s6 "write_policy = writethrough"
D6=$D
$X stack start $T/s6/stack.conf >/dev/null || die "start s6"
SEG6=$(seg_of $D6)
$X volume --dir $D6 create vol 1M >/dev/null || die "s6: create vol"
nbdcopy $T/pat "nbd+unix:///vol?socket=$D6/run/nbd.sock" || fail "s6: write"
kill_role $D6 cached && ok "s6: supervisor stopped, write-through cached killed" || die "s6: kill cached"
$X stack stop --dir $D6 >$T/s6/out 2>$T/s6/err; rc=$?
[ $rc -eq 1 ] && grep -q "WITH THE STORE STILL REDIRECTED (no write-back loss counted)" $T/s6/err &&
	! grep -q "DATA LOSS" $T/s6/err && grep -q "still redirected to port 2 (cached)" $T/s6/err &&
	[ -e /dev/shm/$SEG6 ] &&
	ok "s6: stop exits 1, keeps the segment, says redirected, not data loss" ||
	fail "s6: stop rc $rc: $(cat $T/s6/out $T/s6/err)"
$X destroy $SEG6 >/dev/null 2>&1 || fail "s6: destroy"

# ---- 7. a stopped (SIGSTOP) cached holding unflushed data ----
# Only cached takes itself out of the path (safety20 F1): `xsegctl
# unredirect` of it is refused, naming the way out; `unplug-cached` sends
# SIGCONT after its SIGTERM (review20), so the stopped cached still
# flushes and unplugs, and nothing is lost.
new_stack s7
D7=$D
$X stack start $T/s7/stack.conf >/dev/null || die "start s7"
SEG7=$(seg_of $D7)
lossy_write $D7 && ok "s7: 1 MiB acknowledged, held unflushed by cached" || fail "s7: lossy write"
stop_supervisor $D7 || fail "s7: stop the supervisor"
C7=$(pid_of $D7 cached)
kill -STOP $C7 || fail "s7: SIGSTOP cached"
$X unredirect $SEG7 1 >/dev/null 2>$T/s7/err1; rc=$?
[ $rc -eq 1 ] && grep -q "holds unflushed write-back data\|is a running cache" $T/s7/err1 &&
	ok "s7: unredirect of the stopped cached refused" || fail "s7: unredirect rc $rc: $(cat $T/s7/err1)"
$X stack unplug-cached --dir $D7 >$T/s7/out 2>$T/s7/err; rc=$?
[ $rc -eq 0 ] && ! kill -0 $C7 2>/dev/null &&
	ok "s7: unplug-cached of a SIGSTOPped cached completes" ||
	fail "s7: unplug-cached rc $rc: $(cat $T/s7/out $T/s7/err)"
[ "$($X list --json $SEG7 2>/dev/null | python3 -c '
import json, sys
print([p for p in json.load(sys.stdin)["ports"] if p["port"] == 1][0]["path_next"])')" = None ] &&
	ok "s7: the store is no longer redirected" || fail "s7: $($X list $SEG7 2>&1)"
readback $D7 && ok "s7: the data cached held reads back from the store" || fail "s7: data lost"
$X stack stop --dir $D7 >/dev/null 2>&1 || fail "s7: stop"

# ---- 8. a dead cached's port held mid-bind by another process ----
# Between the check that cached is not running and the removal of its
# redirect, another process may take its port: a process binding or
# reclaiming it (its owner word marked RECLAIM: -EBUSY), or a cached
# running there again (-EPERM). Made to hold here, with no timing: a noop
# peer binding port 2, stopped by gdb inside the bind's cleanup of the
# port (the owner word is the noop's, RECLAIM).
#   - the supervisor's restarts of cached fail to bind (3 failed starts),
#     its give-up cannot unplug, says why, and retries (review20 F1-C);
#   - unplug-cached fails with one message naming the port and the pid
#     that holds it, not two (review20b A5);
#   - the binder killed there, the supervisor's retry reclaims the port
#     and unplugs cached.
port2() { $X list --all --json $SEG8 2>/dev/null | python3 -c '
import json, sys
p = [p for p in json.load(sys.stdin)["ports"] if p["port"] == 2][0]
print(p["state"], p["owner_pid"])'; }
# gdb must be able to run a program under ptrace here (yama's
# ptrace_scope, a container's seccomp profile may forbid it)
if ! command -v gdb >/dev/null; then
	echo "SKIP: case 8: gdb not installed"
elif ! gdb -q -nx -batch -ex run --args /bin/true 2>&1 |
	grep -q 'exited normally'; then
	echo "SKIP: case 8: gdb cannot run a program under ptrace here"
else
	new_stack s8
	D8=$D
	$X stack start $T/s8/stack.conf >/dev/null || die "start s8"
	SEG8=$(seg_of $D8)
	SUP8=$(pid_of $D8 supervisor)
	# the supervisor must not restart cached before the binder holds
	# its port
	# (continued by the cleanup too, should the test end meanwhile)
	suspend_pid $SUP8 || fail "s8: SIGSTOP the supervisor"
	kill -9 $(pid_of $D8 cached) || fail "s8: kill cached"
	# reclaimed by this reap or by a peer's periodic one
	wait_until 300 eval '$X reap $SEG8 >/dev/null 2>&1; [ "$(port2)" = "free 0" ]' ||
		fail "s8: cached's port not reclaimed: $(port2)"
	# LeakSanitizer does not run under ptrace; leaks are not what this
	# case is about
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 gdb -q -nx -batch \
		-ex 'break xseg_port_cleanup' -ex run \
		-ex "shell while [ ! -e $T/s8/go ] && kill -0 $$ 2>/dev/null; do sleep 0.1; done" \
		--args $BIN/noop -g $SEG8 -p 2 >$T/s8/gdb.out 2>&1 &
	GDB8=$!
	track_pid $GDB8
	wait_until 600 eval '[ "$(port2 | cut -d" " -f1)" = reclaiming ]' &&
		HOLDER=$(port2 | cut -d" " -f2) && [ "$HOLDER" -gt 0 ] &&
		ok "s8: a noop (pid $HOLDER) holds cached's port mid-bind" ||
		die "s8: port 2: $(port2); gdb: $(tail -5 $T/s8/gdb.out)"
	track_pid $HOLDER
	resume_pid $SUP8
	SUPLOG=$D8/run/supervisor.log
	wait_until 1200 grep -q "cached is not unplugged yet" $SUPLOG &&
		grep -q "cached failed to start 3 times in a row: giving up" $SUPLOG &&
		grep -q "cached is not unplugged yet: another process binds or reclaims port 2 (retrying until that is done)" $SUPLOG &&
		ok "s8: the supervisor's give-up cannot unplug yet, says why, retries" ||
		fail "s8: supervisor: $(tail -5 $SUPLOG)"
	$X stack unplug-cached --dir $D8 >$T/s8/out 2>$T/s8/err; rc=$?
	[ $rc -eq 1 ] &&
		grep -q "^xsegctl: stack: unplug failed: port 2 is being bound or reclaimed by another process (pid $HOLDER): cached stays plugged; retry unplug-cached" $T/s8/err &&
		[ "$(grep -c 'unplug failed' $T/s8/err)" -eq 1 ] &&
		[ "$(grep -c '^xsegctl: stack: ' $T/s8/err)" -eq 2 ] &&
		ok "s8: unplug-cached refused with one message naming the binder" ||
		fail "s8: unplug-cached rc $rc: $(cat $T/s8/out $T/s8/err)"
	# a binder dead mid-bind is reclaimed like any dead owner
	kill -9 $HOLDER
	untrack_pid $HOLDER
	touch $T/s8/go
	wait_until 1200 grep -q "cached unplugged: volumes go to the store directly" $SUPLOG &&
		ok "s8: the binder killed, the supervisor's retry unplugs cached" ||
		fail "s8: supervisor: $(tail -5 $SUPLOG)"
	wait_until 600 eval '! kill -0 $GDB8 2>/dev/null' && untrack_pid $GDB8 ||
		fail "s8: gdb still runs: $(tail -5 $T/s8/gdb.out)"
	$X stack stop --dir $D8 >/dev/null 2>$T/s8/stop.err ||
		fail "s8: stop: $(cat $T/s8/stop.err)"
fi

check_sanitizers "a log" $T/*/data/run/*.log
finish "stack stop test passed"
