#!/bin/bash
# SPDX-License-Identifier: MIT
# The stack supervisor (xseg/xsegctl_supervise.c): peers of a running
# stack that die are restarted, and data written and flushed through NBD
# before the kill reads back identical afterwards.
#   - SIGKILL cached, the store, vlmc: each comes back on its port, cached
#     plugged again, the volume reads back identical;
#   - an unplugged cached is not restarted; a plugged one killed five
#     times in a row is given up on and unplugged, volumes keep working;
#     plug-cached by hand makes it supervised again;
#   - unplug-cached of a dead cached removes its redirect (with the
#     supervisor stopped, so nothing restarts it meanwhile);
#   - write-back losses (docs/operations.md): a cached killed after a
#     FLUSH counts none; one killed holding unflushed writes counts one
#     (status shows it, the supervisor logs that the restart followed a
#     loss); an unplug of a dead cached holding writes counts it too;
#   - stack stop stops the supervisor too: no process left; the losses
#     above make it exit 1 and keep the segment (review9 R9-3);
#   - starts that fail (cached through a wrapper): a start that succeeds
#     ends a run of failed ones; 3 in a row (each stalling until
#     start_timeout kills it, so the burst rule never fires) are given up
#     on like a burst (log, state, status, cached unplugged); restart-peer
#     supervises it afresh, a new run of 3 before the next give-up;
#   - stack stop of a SIGSTOPped supervisor continues it and succeeds.
# Exit 77 (skip) only when nbdcopy is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init supervise nbdcopy

stack_conf s "segment_size = 256M" "requests = 2048" "cache_size = 32M" \
	"nbd_spin = 10us" "spin_policy = fixed" "cpus = 0" \
	"snapshot_drain_wait = 90s" "cache_max_objects = 5000" \
	"cached_spin = 150us"
# launcher keys with vlmc's and blocker's bounds: refused at parse time
# (a value the peer refuses would fail every restart), nothing started
for bad in "nbd_max_conns = 0" "nbd_max_conns = 4097" "nbd_inflight_bytes = 2T" \
	"gc_threshold = 101" "supervise = maybe" "nbd_spin = 2s" "nbd_spin = x" \
	"spin = x" "spin_policy = sometimes" "spin_policy = " \
	"cached_spin = 2s" "cached_spin = x" "cached_spin = " \
	"vlmc_spin = 2s" "vlmc_spin = x" "vlmc_spin = " \
	"store_threads = 0" "cached_threads = 1025" "vlmc_threads = x" \
	"dead_peer_wait = 3601s" "dead_peer_wait = 2h" "dead_peer_wait = soon" \
	"dead_peer_wait = -1" "dead_peer_wait = " "cpus = x" "cpus = 3-1" \
	"cpus = 0," "cpus = " "snapshot_drain_wait = 0" \
	"snapshot_drain_wait = 2h" "snapshot_drain_wait = soon" \
	"object_size = 256k" "object_size = 4k" "cache_max_objects = 0" \
	"cache_max_objects = x" "cache_max_objects = 2000000000"; do
	printf 'dir = %s\n%s\n' $D "$bad" > $T/bad.conf
	$X stack start $T/bad.conf 2>/dev/null; rc=$?
	[ $rc -eq 2 ] && [ ! -e $D/run/stack.conf ] && ok "config '$bad' refused" ||
		fail "config '$bad': rc $rc"
done
$X stack start $T/s/stack.conf >/dev/null || die "stack start"
SEG=$(sed -n 's/^segment = //p' $D/run/stack.conf)
# a second start in this directory, under another segment name, is
# refused while the supervisor runs (review11 N-A); nothing changed
printf 'dir = %s\nsegment = other-%s\n' $D $$ > $T/other.conf
SUP=$(cat $D/run/supervisor.pid)
$X stack start $T/other.conf >/dev/null 2>$T/other.err; rc=$?
[ $rc -eq 1 ] && grep -q "already running in $D (its supervisor is pid $SUP)" $T/other.err &&
	[ "$(sed -n 's/^segment = //p' $D/run/stack.conf)" = "$SEG" ] &&
	kill -0 $SUP && [ ! -e /dev/shm/other-$$ ] &&
	ok "a start in the running stack's dir refused" ||
	fail "start in a running stack's dir: rc $rc: $(cat $T/other.err)"
STORE=$(sed -n 's/^store = //p' $D/run/stack.conf)
U="nbd+unix:///vol?socket=$D/run/nbd.sock"
# vlmc refuses objects larger than cached's (review9 R9-10)
cmdline_of $D vlmc | grep -q -- '--max-object-size=4M' &&
	! $X volume --dir $D create bigobj 64M 8M 2>$T/bigobj.err &&
	grep -q "above this stack's limit" $T/bigobj.err &&
	! $X volume --dir $D list | grep -q bigobj &&
	ok "a volume with objects above cached's refused" ||
	fail "max object size: $(cat $T/bigobj.err)"
cmdline_of $D vlmc | grep -q -- '--nbd-spin=10us' &&
	ok "nbd_spin passed to vlmc" || fail "nbd_spin not on vlmc's command line"
cmdline_of $D cached | grep -q -- '--max-objects=5000' &&
	ok "cache_max_objects passed to cached" ||
	fail "cache_max_objects not on cached's command line"
cmdline_of $D vlmc | grep -q -- '--snapshot-drain-wait=90s' &&
	ok "snapshot_drain_wait passed to vlmc" ||
	fail "snapshot_drain_wait not on vlmc's command line"
# the embedded default's spin = 0 reaches every peer (the config has none)
# but cached, which gets cached_spin instead (poll mode), and vlmc, which
# gets the embedded default's vlmc_spin = 20us; the config's spin_policy
# reaches every peer
for r in store cached vlmc; do
	want=0
	[ $r = cached ] && want=150us
	[ $r = vlmc ] && want=20us
	cmdline_of $D $r | grep -q -- "--spin=$want " &&
		[ "$(cmdline_of $D $r | grep -o -- '--spin=[^ ]*' | wc -l)" = 1 ] &&
		ok "$r started with --spin=$want only" ||
		fail "$r: not --spin=$want alone: $(cmdline_of $D $r)"
	cmdline_of $D $r | grep -q -- '--spin-policy=fixed ' &&
		ok "$r started with --spin-policy=fixed" ||
		fail "$r: no --spin-policy=fixed on its command line"
	# cpus = 0: every thread of the peer may run only on CPU 0
	for st in /proc/$(pid_of $D $r)/task/*/status; do
		grep -q '^Cpus_allowed_list:[[:space:]]*0$' $st ||
			{ fail "$r: $(grep Cpus_allowed_list $st) in $st"; break; }
	done
done
# "PID ALIVE" of a role's port, from stack status
port_of() { $X stack status --dir $D 2>/dev/null | awk -v r=$1 '$1 == r { print $4, $5 }'; }
plugged() { $X stack status --dir $D 2>/dev/null | grep -q 'redirect: port 1 -> 2'; }
# wait_back ROLE OLDPID: a new live process of ROLE bound its port and
# serves: a peer binds its port before its init (vlmc's NBD socket,
# cached's pre-faulted pool), and says "serving ... pid N" when it is done;
# a read before that found vlmc's socket refusing (seen under load)
wait_back() {
	for _ in $(seq 300); do
		set -- $1 $2 $(port_of $1)
		[ "${4:-}" = yes ] && [ "$3" != "$2" ] && [ "$3" != 0 ] &&
			grep -q "serving segment .* pid $3\$" $D/run/$1.log && return 0
		sleep 0.1
	done
	return 1
}
readback() { rm -f $T/back; nbdcopy "$U" $T/back && cmp -s $T/pat $T/back; }
# writes to volume $1 (1 MiB) left in cached (no FLUSH): its count goes up
lossy_write() {
	$X volume --dir $D create $1 1M || { echo "lossy_write: create $1"; return 1; }
	head -c 1M /dev/urandom > $T/lossy
	nbdcopy $T/lossy "nbd+unix:///$1?socket=$D/run/nbd.sock" ||
		{ echo "lossy_write: nbdcopy failed"; return 1; }
	[ "$(cached_unflushed $D)" -gt 0 ] ||
		{ echo "lossy_write: cached's unflushed count is $(cached_unflushed $D)"; return 1; }
}

$X stack status --dir $D | grep -q "^supervisor: pid [0-9]*, restarts: store 0, cached 0, vlmc 0" &&
	ok "start runs a supervisor" || fail "no supervisor in status: $($X stack status --dir $D | tail -1)"
$X stack status --dir $D --json | python3 -c '
import json, sys
s = json.load(sys.stdin)["supervisor"]
assert s["running"] and s["pid"] > 0, s
assert [p["role"] for p in s["peers"]] == ["store", "cached", "vlmc"], s
assert not any(p["restarts"] or p["gave_up"] for p in s["peers"]), s
' && ok "status --json: supervisor running, no restarts" || fail "status --json supervisor"
$X volume --dir $D create vol 8M || die "volume create"
head -c 8M /dev/urandom > $T/pat
nbdcopy --flush $T/pat "$U" || die "nbdcopy write"

# cached
old=$(pid_of $D cached)
kill -9 $old
wait_back cached $old && plugged && ok "killed cached restarted and plugged again" ||
	fail "cached not back: $(port_of cached)"
cmdline_of $D cached | grep -q -- '--spin=150us ' &&
	ok "the restarted cached keeps cached_spin" ||
	fail "restarted cached: $(cmdline_of $D cached)"
readback && ok "flushed data intact after cached restart" || fail "data after cached restart"
[ "$(losses $D)" = 0 ] && ok "cached killed after a FLUSH: no write-back loss" ||
	fail "write-back losses after a clean kill: $(losses $D)"


# the store
if [ "$STORE" = blocker ]; then
	old=$(pid_of $D store)
	kill -9 $old
	wait_back store $old && ok "killed store restarted" || fail "store not back"
	# through cached's RAM and straight from the store
	readback && ok "data intact after store restart (cached)" || fail "data after store restart"
	$X stack unplug-cached --dir $D >/dev/null || fail "unplug for a store read"
	readback && ok "data intact read from the restarted store" || fail "data from the store"
	$X stack plug-cached --dir $D >/dev/null || fail "replug"
else
	echo "note: store is noop (blocker not built): store restart not checked"
fi

# vlmc
old=$(pid_of $D vlmc)
kill -9 $old
wait_back vlmc $old && ok "killed vlmc restarted" || fail "vlmc not back"
readback && ok "NBD serves the volume again after the vlmc restart" || fail "NBD after vlmc restart"

# unplugged: not restarted
$X stack unplug-cached --dir $D >/dev/null || fail "unplug-cached"
sleep 2 # four supervisor rounds
[ "$(port_of cached | cut -d' ' -f2)" = no ] && ! plugged &&
	ok "an unplugged cached is not restarted" || fail "unplugged cached came back"
readback && ok "volume served without cached" || fail "read without cached"

# dies over and over: given up and unplugged. The supervisor gives up on
# a peer whose 5 last restarts fall within 60 s. restart-peer (cached is
# unplugged and down: the supervisor restarts and plugs it, restart 2)
# starts that count afresh, so the burst below is 5 restarts within
# seconds whatever the time since cached's first restart above (18 s
# before the give-up on a loaded box; were it over 60 s, the fifth kill
# would be a sixth restart, not a give-up).
$X stack restart-peer cached --dir $D >$T/rp 2>&1 && plugged ||
	fail "restart-peer cached: $(cat $T/rp)"
for i in 1 2 3 4 5; do
	old=$(pid_of $D cached)
	kill -9 $old
	[ $i -lt 5 ] && { wait_back cached $old || fail "restart $i"; }
done
for _ in $(seq 100); do
	$X stack status --dir $D | grep -q "cached 6 (gave up)" && break
	sleep 0.1
done
$X stack status --dir $D | grep -q "cached 6 (gave up)" && ! plugged &&
	ok "cached killed 5 times: given up on, unplugged" ||
	fail "give-up: $($X stack status --dir $D | tail -2)"
grep -q "giving up on it" $D/run/supervisor.log || fail "give-up not logged"
$X stack status --dir $D --json | python3 -c '
import json, sys
p = {p["role"]: p for p in json.load(sys.stdin)["supervisor"]["peers"]}
assert p["cached"]["gave_up"] and p["cached"]["restarts"] == 6, p
' && ok "status --json: gave up on cached" || fail "status --json after give-up"
readback && ok "volume served after giving up on cached" || fail "read after give-up"
$X stack plug-cached --dir $D >/dev/null || fail "plug after give-up"
old=$(pid_of $D cached)
kill -9 $old
wait_back cached $old && plugged && ok "plugged by hand after a give-up: supervised again" ||
	fail "not supervised after plug-cached"
readback || fail "read after re-supervised restart"

# cached killed holding acknowledged, unflushed writes: a counted loss
lossy_write lossy && ok "unflushed writes counted in cached's port" ||
	fail "lossy write: unflushed $(cached_unflushed $D)"
old=$(pid_of $D cached)
kill -9 $old
wait_back cached $old && plugged && ok "cached restarted after a loss" || fail "cached not back after a loss"
[ "$(losses $D)" = 1 ] && ok "status --json: writeback_losses 1" || fail "writeback_losses: $(losses $D)"
$X stack status --dir $D | grep -q "^write-back losses: 1 " && ok "status shows the loss" ||
	fail "status text: $($X stack status --dir $D | head -3)"
grep -q "is down; restart [0-9]* (after a write-back loss)" $D/run/supervisor.log &&
	grep -q "write-back loss: .*loss counter 0 -> 1" $D/run/supervisor.log &&
	ok "supervisor log: restart after a write-back loss" ||
	fail "supervisor log: $(tail -5 $D/run/supervisor.log)"
[ "$(cached_unflushed $D)" = 0 ] && ok "the restarted cached starts clean" || fail "unflushed after restart"
readback && ok "other volume intact after the loss" || fail "read after the loss"

# unplug of a dead cached, supervisor stopped
kill $(pid_of $D supervisor)
for _ in $(seq 100); do $X stack status --dir $D | grep -q "supervisor: not running" && break; sleep 0.1; done
$X stack status --dir $D | grep -q "supervisor: not running" && ok "status: supervisor not running" ||
	fail "status after the supervisor stopped"
n0=$(losses $D)
lossy_write lossy2 || fail "lossy write before the dead unplug"
old=$(pid_of $D cached)
kill -9 $old
for _ in $(seq 100); do [ "$(port_of cached | cut -d' ' -f2)" = no ] && break; sleep 0.1; done
$X stack unplug-cached --dir $D 2>$T/err >/dev/null && ! plugged && grep -q "removing its redirect" $T/err &&
	ok "unplug of a dead cached removes its redirect" || fail "unplug dead cached: $(cat $T/err)"
# counted by whoever reclaimed the dead port first (vlmc's reaper, or the
# unplug itself), at the latest before the redirect went
[ "$(losses $D)" = $((n0 + 1)) ] && ok "unplug of a dead dirty cached: loss counted" ||
	fail "losses after the dead unplug: $n0 -> $(losses $D)"
readback && ok "volume served after unplugging a dead cached" || fail "read after dead unplug"
# unplug's goal already holds: not an error (review11 N-I)
$X stack unplug-cached --dir $D >$T/out 2>&1 && grep -q "cached is not plugged" $T/out &&
	ok "unplug of an absent, unplugged cached: exit 0, not plugged" ||
	fail "second unplug: $(cat $T/out)"

# stop: every process gone; the segment records the losses above, so
# stop fails and keeps it (tests/test_stack_stop.sh has the clean stop)
$X stack stop --dir $D >/dev/null 2>$T/err; rc=$?
[ $rc -eq 1 ] && grep -q "WITH DATA LOSS" $T/err && [ -e /dev/shm/$SEG ] &&
	ok "stop after losses: exit 1, segment kept" || fail "stack stop: rc $rc: $(cat $T/err)"
no_process_left $D && ok "stop leaves no process" ||
	fail "after stop: $(pgrep -f -- "$D/run|--dir=$D" | wc -l) processes"
$X destroy $SEG >/dev/null && [ ! -e /dev/shm/$SEG ] &&
	ok "the kept segment removed with xsegctl destroy" || fail "destroy $SEG"
# ---- starts that fail: a run of STACK_SUP_FAILED_STARTS (3) ends it ----
# cached through a wrapper that fails its start at once while $T/fail
# holds a count above 0 (counting it down), and otherwise, while
# $T/stall exists, stalls (a sleep: no CPU, no I/O) until start_timeout
# kills it. Before, only the burst rule (5 deaths within 60 s) gave up,
# and a start that stalls lasts start_timeout: with the default 120 s,
# restarted forever. The test's start_timeout = 3 keeps it short; the
# burst rule would then give up too, after the 5th restart: the count
# (3) and the log line tell the rules apart.
W=$T/wrap-fail
bin_with $W cached "$(printf '#!/bin/sh
n=$(cat %s/fail 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then
	echo $((n - 1)) >%s/fail
	echo "wrapper: this start of cached fails"
	exit 1
fi
if [ -e %s/stall ]; then
	sleep 600 &
	echo $! >>%s/sleepers
	wait $!
fi
exec %s/cached "$@"' $T $T $T $T $BIN)"
sup_state() { sed -n "s/^$2 //p" $1/run/supervisor.state 2>/dev/null; }
# a: a start that succeeds ends the run. One failed start, then back; two
# more, then back: still supervised (counted on from the first, the
# second failure in a row would have been the third)
new_stack fa "start_timeout = 3"
AC_BIN_DIR=$W $X stack start $T/fa/stack.conf >/dev/null 2>$T/fa/err ||
	die "start fa: $(cat $T/fa/err)"
for n in 1 2; do
	echo $n >$T/fail
	old=$(pid_of $D cached)
	kill -9 $old
	wait_back cached $old && plugged && [ "$(cat $T/fail)" = 0 ] ||
		fail "a: cached not back after $n failed start(s): $(tail -3 $D/run/supervisor.log)"
done
[ "$(sup_state $D cached)" = "5 ok" ] &&
	[ "$(grep -c 'cached did not come back: it exited during its start-up (retrying)' $D/run/supervisor.log)" = 3 ] &&
	ok "a: 1, then 2 failed starts, each run ended by a start that succeeded: supervised" ||
	fail "a: state '$(sup_state $D cached)': $(tail -5 $D/run/supervisor.log)"
AC_BIN_DIR=$W $X stack stop --dir $D >/dev/null 2>$T/fa/stop.err ||
	fail "a: stop: $(cat $T/fa/stop.err)"

# b: every start stalls: given up on after 3, with the burst rule's
# consequences (log, state, status, cached unplugged, volumes served)
new_stack fb "start_timeout = 3"
AC_BIN_DIR=$W $X stack start $T/fb/stack.conf >/dev/null 2>$T/fb/err ||
	die "start fb: $(cat $T/fb/err)"
U="nbd+unix:///vol?socket=$D/run/nbd.sock"
$X volume --dir $D create vol 4M || die "b: volume create"
head -c 4M /dev/urandom >$T/pat
nbdcopy --flush $T/pat "$U" || die "b: nbdcopy write"
touch $T/stall
kill -9 $(pid_of $D cached)
# bounded (3 stalls take about 3 x 4 s)
wait_until 1200 eval '[ "$(sup_state $D cached)" = "3 gave-up" ]' &&
	grep -q "cached failed to start 3 times in a row: giving up on it" $D/run/supervisor.log &&
	[ "$(grep -c 'cached did not come up on port 2: .* killed it (start_timeout)' $D/run/supervisor.log)" = 3 ] &&
	ok "b: cached whose starts stall: given up on after 3 failed starts" ||
	fail "b: no give-up: state '$(sup_state $D cached)': $(tail -5 $D/run/supervisor.log)"
$X stack status --dir $D | grep -q "cached 3 (gave up)" && ! plugged &&
	ok "b: status shows the give-up; cached unplugged" ||
	fail "b: status: $($X stack status --dir $D | tail -2)"
readback && ok "b: volume served after giving up on cached" || fail "b: read after give-up"
for p in $(cat $T/sleepers); do
	wait_until 100 gone $p || fail "b: the stalled start's sleep $p left running"
done

# c: restart-peer supervises it afresh, the run too: still stalling, it
# fails 3 times again (not once) before the supervisor gives up, and
# restart-peer waits for that and says so (exit 1)
$X stack restart-peer cached --dir $D >$T/fb/rp1 2>&1; rc=$?
n=$(awk '/restart-peer cached: asked again/ { n = 0 }
	/cached did not come up on port 2: .* killed it \(start_timeout\)/ { n++ }
	END { print n }' $D/run/supervisor.log)
[ $rc -eq 1 ] && grep -q "cached failed again and the supervisor gave up" $T/fb/rp1 &&
	[ "$n" = 3 ] && [ "$(sup_state $D cached)" = "6 gave-up" ] &&
	ok "c: restart-peer while it still stalls: 3 more failed starts, given up, exit 1" ||
	fail "c: rc $rc, $n failed starts, state '$(sup_state $D cached)': $(cat $T/fb/rp1)"
# fixed: back, plugged, supervised
rm $T/stall
$X stack restart-peer cached --dir $D >$T/fb/rp2 2>&1 && grep -q "cached is back" $T/fb/rp2 &&
	plugged && [ "$(sup_state $D cached)" = "7 ok" ] &&
	ok "c: restart-peer after the fix: cached back, plugged, supervised" ||
	fail "c: restart-peer fixed: $(cat $T/fb/rp2); state '$(sup_state $D cached)'"
readback && ok "c: volume reads back identical through cached" || fail "c: read back"
# a stopped supervisor (SIGSTOP, a debugger, a test killed mid-case) is
# continued by stop, not waited for until the stop gives up (review22s F5)
suspend_pid $(cat $D/run/supervisor.pid)
AC_BIN_DIR=$W $X stack stop --dir $D >/dev/null 2>$T/fb/stop.err &&
	ok "c: stop of a SIGSTOPped supervisor: continued, stopped" ||
	fail "c: stop: $(cat $T/fb/stop.err)"

check_sanitizers "a log" $T/*/data/run/*.log
finish "supervisor test passed"
