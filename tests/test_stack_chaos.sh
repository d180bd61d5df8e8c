#!/bin/bash
# SPDX-License-Identifier: MIT
# Crash at any instant: the default stack (xsegctl stack start: blocker
# store, write-back cached plugged, vlmc, supervisor) under NBD load while
# its peers are SIGKILLed at random instants; the promise checked is "an
# acknowledged-and-flushed write survives a crash of any peer at any
# instant; wrong data is never returned" (tests/chaos_client.py has the
# model and the checks):
#   - a client (CHAOS_CONNS=2: two, see below) keeps up to 8 commands
#     in flight on a 32 MiB volume (4 KiB writes at random offsets, half
#     in a hot MiB, 10% FUA; reads; TRIM and WRITE_ZEROES of a block, now
#     and then of a whole 1 MiB object; a FLUSH every 2..128 writes by
#     stretches), reconnecting after a broken connection or an error
#     reply and reading a sample then;
#   - a killer SIGKILLs store, cached or vlmc 8 times (CHAOS_KILLS), each
#     at a random instant once the last one killed serves again, and a
#     quarter of the time (CHAOS_STARTUP) its successor again within
#     0.3 s of its start, most often before it serves;
#   - every read, and the whole volume at the end after a FLUSH: every
#     sector a valid sector of a version issued for its block, at or above
#     the block's durable floor and the connection's own acknowledged write;
#   - an EIO reply only with a write-back loss counted (a cached killed
#     holding acknowledged, unflushed writes may lose them: allowed, and
#     counted); no other error reply;
#   - stack stop exits 1 saying WITH DATA LOSS exactly when the stack
#     counted a loss (review9 R9-3), else 0; after a new start the whole
#     volume, now read from the store, still meets every floor;
#   - the checker itself: four blocks damaged through NBD behind the
#     model's back (stale, misplaced sector, flipped byte, never issued)
#     are all reported.
# Variants (tests/stack.cmake registers them with these set):
#   CHAOS_POLICY=writethrough  cached in write-through (stack key
#       write_policy): the floor is every acknowledged write, at once; a
#       kill of any peer loses nothing acknowledged, so no error reply, no
#       write-back loss counted, stop exits 0;
#   CHAOS_UNPLUGS=N  N `stack unplug-cached` at random instants between
#       the kills, each followed later by a `plug-cached`, half of them
#       with a kill while the command runs (cached while it unplugs and
#       flushes, the store under an unplug or a plug, cached while it
#       plugs). Accepted: an unplug or plug with no kill during it, and
#       an unplug with the store killed during it, succeed; an unplug
#       with cached killed during it may fail saying "unplug failed", and
#       a second unplug-cached must then take the dead cached out of the
#       path (a loss it held is counted, write-back only); a plug with a
#       kill during it may fail saying why, and is run again until cached
#       serves plugged; after an unplug status shows cached unplugged and
#       not running. A successful unplug makes every write-back write
#       acknowledged since the last kill of cached durable (it is in the
#       store): the floor rises;
#   CHAOS_CONNS=2  two clients at once, each on its own connection,
#       writing its own half of the objects, reading everything;
#   CHAOS_VOLOPS=N  N rounds of volume operations at random instants
#       between the kills, half of the commands with vlmc, the store or
#       cached SIGKILLed 0..0.3 s into them (one of the CHAOS_KILLS), and
#       one round after the load, with no kill, which must succeed: a
#       `volume snapshot vol vol@i`; the whole of an acknowledged snapshot
#       read: every block a version at or above its durable floor when
#       the snapshot was sent (and the newest write acknowledged then,
#       unless cached was killed since it was sent) and not above the
#       newest version issued when it was answered, and from then on
#       exactly what it read
#       first (across every kill, at the end, after the stop and start);
#       a failed snapshot may be listed or not (docs/vlmc.md, "If the
#       rewrite fails too"), and when listed reads within those bounds;
#       `clone vol@i C`, writes to C (FUA, FLUSH) read back at or above
#       C's floor (the snapshot's data where C has no durable write);
#       `remove C`: once acknowledged, C is never listed again; the
#       snapshot read again after it. CHAOS_BREAK=snapshot makes the model
#       expect the source's newest version in a snapshot (as if it
#       followed its source): the checker must report it.
# The seed is printed (CHAOS_SEED=N reproduces the kill schedule and the
# commands). Every wait is a bound on an event (a hang detector), never a
# timing assertion. Exit 77 (skip) only when python3 is missing.
set -u
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
X=$BIN/xsegctl
export X
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
CLIENT=$HERE/chaos_client.py
T=$(mktemp -d /tmp/test-stack-chaos-XXXXXX)
FAILS=0
. "$(dirname "$0")/stack_testlib.sh"
trap 'exit 143' TERM INT

# dead_peer_wait well above a restart under a loaded sanitizer build: an
# EIO is then a fence, never a resend that gave up
POLICY=${CHAOS_POLICY:-writeback}
case $POLICY in
writeback | writethrough) ;;
*) echo "FAIL: CHAOS_POLICY=$POLICY: writeback or writethrough"; exit 1 ;;
esac
new_stack chaos "dead_peer_wait = 90s" "object_size = 1M" "write_policy = $POLICY"
$X stack start $T/chaos/stack.conf >/dev/null || die "stack start"
SEG=$(seg_of $D)
$X volume --dir $D create vol 32M || die "volume create"
losses() { $X stack status --dir $D --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["writeback_losses"])'; }

python3 "$CLIENT" run $D $T/state.json
[ $? -eq 0 ] && ok "load with kills: every read right" || fail "load with kills (see above)"
[ -f $T/state.json ] || die "no client state: nothing more to check"
n=$(losses)

# stop: exit 1 with the loss exactly when one was counted
$X stack stop --dir $D >$T/stop.out 2>$T/stop.err; rc=$?
if [ "$POLICY" = writethrough ] && [ "$n" -gt 0 ]; then
	fail "write-through: $n write-back loss(es) counted"
fi
if [ "$n" -gt 0 ]; then
	[ $rc -eq 1 ] && grep -q "WITH DATA LOSS" $T/stop.err && [ -e /dev/shm/$SEG ] &&
		ok "stop after $n write-back loss(es): exit 1, segment kept" ||
		fail "stop after $n loss(es): rc $rc: $(cat $T/stop.out $T/stop.err)"
else
	[ $rc -eq 0 ] && ! grep -q "LOSS" $T/stop.err && [ ! -e /dev/shm/$SEG ] &&
		ok "stop with no write-back loss: exit 0, segment removed" ||
		fail "stop with no loss: rc $rc: $(cat $T/stop.out $T/stop.err)"
fi
[ "$(pgrep -f -- "$D/run|--dir=$D" | wc -l)" -eq 0 ] && ok "stop leaves no process" ||
	fail "processes left after stop"

# a new start (it replaces a kept segment): the store's data meets the floors
$X stack start $T/chaos/stack.conf >/dev/null 2>$T/start.err || die "restart: $(cat $T/start.err)"
python3 "$CLIENT" verify $D $T/state.json && ok "after stop and start: every durable write there" ||
	fail "verify after restart"
python3 "$CLIENT" selftest $D $T/state.json && ok "the checker catches damaged blocks" ||
	fail "checker self-test"
$X stack stop --dir $D >/dev/null 2>$T/stop2.err && [ ! -e /dev/shm/$SEG ] &&
	ok "the restarted stack stops cleanly" || fail "second stop: $(cat $T/stop2.err)"

if grep -l "ERROR: AddressSanitizer\|WARNING: ThreadSanitizer\|runtime error:\|ERROR: LeakSanitizer" \
	$D/run/*.log 2>/dev/null; then
	fail "sanitizer report in a log"
fi
if [ $FAILS -ne 0 ]; then
	# CHAOS_LOGDIR=DIR keeps the peers' logs and the model for a finding
	[ -n "${CHAOS_LOGDIR:-}" ] && mkdir -p "$CHAOS_LOGDIR" &&
		cp $D/run/*.log $T/state.json "$CHAOS_LOGDIR"/ 2>/dev/null
	tail -n 30 $D/run/*.log
	echo "$FAILS failure(s)"
	exit 1
fi
echo "stack chaos test passed"
