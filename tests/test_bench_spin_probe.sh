#!/bin/bash
# SPDX-License-Identifier: MIT
# bench_spin_probe facing what it cannot measure (review20b), through the
# LD_PRELOAD shim tests/spin_probe_fault.c:
#   - getrusage(RUSAGE_THREAD) fails: exit 1 with a message naming it,
#     nothing on stdout (it used to time the failing call and print its
#     figures as the check's cost);
#   - a clock that never moves (every batch 0 ns): the output is still
#     valid JSON, the 0/0 ratio null (it used to print "nan").
# A fault counts only if the shim answered the call (its mark file): a
# definition that comes before LD_PRELOAD's and does not pass the call on
# (one in the executable itself, which a static sanitizer runtime may
# add) leaves the case unjudged, and the test is skipped (77) naming it
# (review21b F3); where the shim's definition comes first (its
# mark.interposed) a missing mark fails instead (review22s F6).
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init spin-probe python3
SHIM=${SPIN_PROBE_SHIM:?SPIN_PROBE_SHIM not set}
# the shim comes before a sanitizer's runtime in the library list
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
probe() {
	rm -f $T/mark $T/mark.interposed
	SPIN_PROBE_FAULT=$1 SPIN_PROBE_MARK=$T/mark LD_PRELOAD=$SHIM \
		$BIN/bench_spin_probe 3 100 >$T/out 2>$T/err
}
# took FAULT: the last probe's fault was the shim's; if not, the case is
# noted for the skip
UNJUDGED=
took() {
	[ -e $T/mark ] && return 0
	# the shim's definition came first, yet was not called: the
	# program no longer makes the call the case judges (review22s F6)
	if [ -e $T/mark.interposed ]; then
		fail "the shim is interposed but bench_spin_probe never called its $1"
		return 1
	fi
	echo "not judged: the shim's $1 fault did not take effect"
	UNJUDGED="$UNJUDGED $1"
	return 1
}

probe getrusage; rc=$?
took getrusage && {
	[ $rc -eq 1 ] && [ ! -s $T/out ] &&
		grep -q "^bench_spin_probe: getrusage(RUSAGE_THREAD): Function not implemented" $T/err &&
		ok "a failing getrusage: exit 1, said, no JSON" ||
		fail "failing getrusage: rc $rc: $(cat $T/out $T/err)"
}

probe clock; rc=$?
took clock && {
	[ $rc -eq 0 ] && python3 -c '
import json, sys
def bad(c):
    sys.exit("not JSON: " + c)
d = json.load(open(sys.argv[1]), parse_constant=bad)
assert d["getrusage_vs_null_syscall"] is None, d
assert d["results"]["null_syscall"]["ns_per_call"] == 0, d
' $T/out && ok "a clock that never moves: valid JSON, the ratio null" ||
		fail "still clock: rc $rc: $(cat $T/out $T/err)"
}

probe none; rc=$?
[ $rc -eq 0 ] && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]), parse_constant=lambda c: sys.exit(c))
assert d["getrusage_vs_null_syscall"] > 0, d
' $T/out && ok "without a fault: figures as before" ||
	fail "no fault: rc $rc: $(cat $T/out $T/err)"
if [ $FAILS -eq 0 ] && [ -n "$UNJUDGED" ]; then
	echo "SKIP: LD_PRELOAD=$SHIM did not take effect for:$UNJUDGED (a" \
		"definition before the shim's answered the call: one in" \
		"$BIN/bench_spin_probe itself, e.g. a static sanitizer runtime's)"
	exit 77
fi
finish "bench_spin_probe test passed"
