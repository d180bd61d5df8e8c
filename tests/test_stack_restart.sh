#!/bin/bash
# SPDX-License-Identifier: MIT
# Bringing peers back, and start failures that are quick and clear
# (review11 N-I, N-F):
#   1. `xsegctl stack restart-peer store` brings back a store the
#      supervisor gave up on ("store failed to start 3 times in a row",
#      each start failing at once): while the cause is still there it
#      fails again with the store's own lines and exit 1; once fixed,
#      the store is back, supervised again, and the volume written before
#      reads back identical. restart-peer of a running peer leaves it
#      alone; restart-peer cached after an unplug plugs it again. The
#      stack keys store_segment_size and store_reserve reach the blocker
#      (its published statistics).
#   2. A peer that exits during its start-up fails `stack start` at once
#      as that peer's exit (not "did not come up" after 30 s), and the
#      log tail printed holds only this start's lines.
#   3. restart-peer (no supervisor) trusts run/NAME.pid only for a process
#      given this stack's --pidfile: a stranger with the same program name
#      (a reused pid) is neither waited for nor killed.
# Every wait is a bound on an event, never a timing assertion. Exit 77
# (skip) only when nbdcopy or the blocker peer is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init stack-restart nbdcopy
[ -x $BIN/blocker ] || { echo "SKIP: blocker peer not built"; exit 77; }

# the supervisor's recorded state of a peer: "ok" or "gave-up"
sup_state() { sed -n "s/^$2 [0-9]* //p" $1/run/supervisor.state 2>/dev/null; }
# wait (bounded) until the supervisor records state $3 for peer $2 in $1
wait_sup_state() {
	for _ in $(seq 600); do
		[ "$(sup_state $1 $2)" = "$3" ] && return 0
		sleep 0.1
	done
	return 1
}
stat_of() { $X stats "$1" "$2" | awk -v k="$3" '$1 == k { print $2 }'; }

# ---- 1. a store given up on, brought back by restart-peer ----
new_stack r "store = blocker" "store_segment_size = 2M" "store_reserve = 1M"
DR=$D
$X stack start $T/r/stack.conf >$T/r/out 2>&1 || die "start r: $(cat $T/r/out)"
SEG=$(seg_of $DR)
URI="nbd+unix:///v?socket=$DR/run/nbd.sock"
[ "$(stat_of $SEG 1 segment_size)" = 2097152 ] &&
	[ "$(stat_of $SEG 1 reserve_target)" = 1048576 ] &&
	ok "1: store_segment_size and store_reserve reach the blocker" ||
	fail "1: store stats: $($X stats $SEG 1 | grep -E 'segment_size|reserve')"
$X volume --dir $DR create v 16M || die "create v"
head -c 4M /dev/urandom > $T/pat
nbdcopy $T/pat "$URI" || die "nbdcopy in"

# the store's directory replaced by a file: every restart fails
mv $DR/store $DR/store.real
touch $DR/store
kill -9 "$(cat $DR/run/store.pid)"
wait_sup_state $DR store gave-up && grep -q "store failed to start 3 times in a row" $DR/run/supervisor.log &&
	ok "1: the supervisor gave up on a store that keeps failing" ||
	die "1: no give-up: $(tail -5 $DR/run/supervisor.log)"
$X stack status --dir $DR | grep -q "store [0-9]* (gave up)" ||
	fail "1: status does not show the give-up"

# the cause is still there: it fails again, saying why
$X stack restart-peer store --dir $DR >$T/r/rp1 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "store failed again and the supervisor gave up" $T/r/rp1 &&
	grep -q "Not a directory" $T/r/rp1 &&
	ok "1: restart-peer while still broken: exit 1 with the store's reason" ||
	fail "1: restart-peer broken: rc $rc: $(cat $T/r/rp1)"
[ "$(sup_state $DR store)" = gave-up ] || fail "1: not given up again"

# fixed: back, supervised again, data intact
rm $DR/store
mv $DR/store.real $DR/store
$X stack restart-peer store --dir $DR >$T/r/rp2 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "store is back (pid [0-9]*)" $T/r/rp2 &&
	[ "$(sup_state $DR store)" = ok ] &&
	grep -q "restart-peer store: asked again by the operator after the give-up" $DR/run/supervisor.log &&
	ok "1: restart-peer after the fix: store back, supervised again" ||
	fail "1: restart-peer fixed: rc $rc: $(cat $T/r/rp2)"
nbdcopy "$URI" $T/back && cmp -s $T/pat <(head -c 4M $T/back) &&
	ok "1: the volume reads back identical" || fail "1: read back differs"
$X stack restart-peer store --dir $DR >$T/r/rp3 2>&1 &&
	grep -q "store is running (pid [0-9]*): nothing to restart" $T/r/rp3 &&
	ok "1: restart-peer of a running store leaves it alone" ||
	fail "1: restart-peer running: $(cat $T/r/rp3)"
# supervised again: a later death is restarted, not ignored
old=$(cat $DR/run/store.pid)
kill -9 $old
for _ in $(seq 600); do
	new=$(cat $DR/run/store.pid 2>/dev/null)
	[ -n "$new" ] && [ "$new" != "$old" ] &&
		$X stack status --dir $DR >/dev/null && break
	sleep 0.1
done
$X stack status --dir $DR >/dev/null && ok "1: the store is supervised again" ||
	fail "1: store not restarted after restart-peer: $(tail -3 $DR/run/supervisor.log)"

# cached unplugged by the operator: restart-peer plugs it again
$X stack unplug-cached --dir $DR >/dev/null || fail "1: unplug-cached"
$X stack restart-peer cached --dir $DR >$T/r/rp4 2>&1 &&
	grep -q "cached is back" $T/r/rp4 &&
	$X stack status --dir $DR | grep -q "cached plugged" &&
	ok "1: restart-peer cached plugs it again" ||
	fail "1: restart-peer cached: $(cat $T/r/rp4)"
nbdcopy "$URI" $T/back2 && cmp -s $T/pat <(head -c 4M $T/back2) ||
	fail "1: read back after the replug differs"
$X stack stop --dir $DR >/dev/null 2>$T/r/stop || fail "1: stop: $(cat $T/r/stop)"

# ---- 2. a peer exiting during its start-up; only this start's lines ----
# a bin dir whose blocker exits at once, after one line naming its run
mkdir $T/bin
for p in $BIN/*; do ln -s $p $T/bin/; done
rm $T/bin/blocker
cat > $T/bin/blocker <<EOF
#!/bin/bash
n=\$(( \$(cat $T/runs 2>/dev/null || echo 0) + 1 ))
echo \$n > $T/runs
echo "fake blocker: refusing to start (run \$n)"
exit 1
EOF
chmod +x $T/bin/blocker
new_stack f "store = blocker" "supervise = off"
DF=$D
for n in 1 2; do
	AC_BIN_DIR=$T/bin $X stack start $T/f/stack.conf >$T/f/out$n 2>$T/f/err$n
	echo $? > $T/f/rc$n
done
[ "$(cat $T/f/rc2)" = 1 ] &&
	grep -q "store did not come up on port 1: it (pid [0-9]*) exited during its start-up" $T/f/err2 &&
	ok "2: a store exiting during its start-up fails the start as such" ||
	fail "2: start rc $(cat $T/f/rc2): $(cat $T/f/err2)"
grep -q "refusing to start (run 2)" $T/f/err2 && ! grep -q "(run 1)" $T/f/err2 &&
	ok "2: the log tail holds only this start's lines" ||
	fail "2: log tail: $(cat $T/f/err2)"
[ ! -e /dev/shm/$(seg_of $DF) ] || fail "2: segment left"

# ---- 3. a pid file is trusted only for this stack's peer ----
# No supervisor; the store killed, and its pid file then names a process
# of the same program name that is not this stack's store (its pid
# reused, here a copy of sleep named blocker): restart-peer starts a new
# store, neither waiting for that process nor killing it (before, it
# waited for it as "starting" and, since start_timeout, killed it).
new_stack p "store = blocker" "supervise = off" "start_timeout = 10"
DP=$D
$X stack start $T/p/stack.conf >/dev/null 2>$T/p/err || die "3: start: $(cat $T/p/err)"
SP=$(pid_of $DP store)
kill -KILL $SP
wait_until 300 gone $SP || die "3: store $SP not gone"
mkdir -p $T/imp && cp "$(command -v sleep)" $T/imp/blocker
$T/imp/blocker 600 &
IMP=$!
track_pid $IMP
# until it has exec'd, its name is bash's: the build before would then
# not take it for a store either, and pass
wait_until 100 grep -qx blocker /proc/$IMP/comm || die "3: stranger not named blocker"
echo $IMP >$DP/run/store.pid
$X stack restart-peer store --dir $DP >$T/p/rp 2>&1; rc=$?
[ $rc -eq 0 ] && ! grep -q "is starting" $T/p/rp &&
	[ "$(pid_of $DP store)" != $IMP ] && kill -0 $IMP &&
	ok "3: restart-peer started a new store, the stranger left alone" ||
	fail "3: restart-peer rc $rc: $(cat $T/p/rp)"
kill $IMP
untrack_pid $IMP
$X stack stop --dir $DP >/dev/null 2>$T/p/stop.err || fail "3: stop: $(cat $T/p/stop.err)"

check_sanitizers "a log" $T/*/data/run/*.log
finish "stack restart test passed"
