# SPDX-License-Identifier: MIT
# The shell tests' library (sourced, not run): start-up, bookkeeping and
# cleanup for the tests that drive the built programs, either whole stacks
# (`xsegctl stack`) or a private segment with test_vlmc_store and vlmc.
#
# Use:
#   set -u
#   . "$(dirname "$0")/stack_testlib.sh"
#   testlib_init NAME [TOOL...]   # BIN, X, T=/tmp/test-NAME-XXXXXX, FAILS=0;
#                                 # exit 77 (SKIP) when a TOOL is missing
# Tests that set BIN (the programs), X ($BIN/xsegctl), T (their temp dir)
# and FAILS=0 themselves before sourcing, as the first users did, work as
# before.
#
# Every exit runs stack_cleanup (the EXIT trap set here): the processes
# suspended with suspend_pid are continued, those started with start_bg /
# start_vlmc are stopped, the segments made with
# seg_create destroyed, every stack dir in DIRS stopped (its leftover peers
# killed, its segment destroyed), $T removed.

DIRS=
FAILS=${FAILS:-0}

# testlib_init NAME [TOOL...]: the usual start of a test
testlib_init() {
	local name=$1 tool
	shift
	BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
	for tool in "$@"; do
		command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
	done
	X=$BIN/xsegctl
	export X
	# the shared NBD client pieces (tests/nbd_testlib.py); no __pycache__
	# in the source tree
	export PYTHONPATH="$TESTLIB_DIR${PYTHONPATH:+:$PYTHONPATH}"
	export PYTHONDONTWRITEBYTECODE=1
	T=$(mktemp -d /tmp/test-$name-XXXXXX)
	FAILS=0
}
TESTLIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# proc_stat PID (/proc/PID/stat whatever the process's name holds)
. "$TESTLIB_DIR/../scripts/lib_proc_stat.sh"

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
# every log of the test (peers, stacks), last lines
show_logs() {
	[ -n "${T:-}" ] || return 0
	find $T -name '*.log' -type f 2>/dev/null | sort | xargs -r tail -n ${1:-30}
}
die() { echo "FAIL: $*"; show_logs; exit 1; }
# wait_until TRIES CMD...: CMD every 0.1 s until it succeeds, at most
# TRIES times (a bound on an event, not a timing assertion)
wait_until() {
	local n=$1
	shift
	for _ in $(seq $n); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}
# check_sanitizers WHAT FILE...: a sanitizer report in any FILE is a failure
check_sanitizers() {
	local what=$1
	shift
	if grep -l "ERROR: AddressSanitizer\|WARNING: ThreadSanitizer\|runtime error:\|ERROR: LeakSanitizer" \
		"$@" 2>/dev/null; then
		fail "sanitizer report in $what"
	fi
}
# finish MESSAGE: exit 1 with the logs after a failure, else print MESSAGE
finish() {
	[ $FAILS -eq 0 ] || { show_logs 20; echo "$FAILS failure(s)"; exit 1; }
	echo "$*"
	exit 0
}

# ---- processes and segments of a private set-up ----
# The pids go to $T/pids (not a variable), so that a function run in a
# subshell (a command substitution) records them for the cleanup too.

# track_pid PID: stopped at exit (unless stop_pids or untrack_pid did)
track_pid() { echo $1 >>$T/pids; }
untrack_pid() { [ -f $T/pids ] && sed -i "/^$1\$/d" $T/pids; return 0; }
# start_bg LOG CMD...: CMD in the background (stdin /dev/null), stdout and
# stderr to $T/LOG.log (LOG may be DIR/NAME); its pid in BG_PID
start_bg() {
	local log=$T/$1.log
	shift
	"$@" >$log 2>&1 &
	BG_PID=$!
	track_pid $BG_PID
}
# suspend_pid PID: SIGSTOP until resume_pid; the cleanup sends SIGCONT
# first, so that a test killed meanwhile leaves nothing stopped (a
# stopped supervisor would also hold the cleanup's stack stop for its
# 60 s; review21c F9). Recorded before the stop: a CONT to a process
# that was never stopped does nothing.
suspend_pid() { echo $1 >>$T/stopped; kill -STOP $1; }
resume_pid() {
	local rc
	kill -CONT $1
	rc=$?
	[ -f $T/stopped ] && sed -i "/^$1\$/d" $T/stopped
	return $rc
}
# stop_pids [-9] PID...: SIGTERM (or SIGKILL with -9), then wait until
# each is gone, SIGKILL after 30 s; they leave $T/pids
stop_pids() {
	local sig=TERM p
	[ "${1:-}" = -9 ] && { sig=KILL; shift; }
	for p in "$@"; do kill -$sig $p 2>/dev/null; done
	for p in "$@"; do
		wait_until 300 eval "! kill -0 $p 2>/dev/null" || kill -9 $p 2>/dev/null
		untrack_pid $p
	done
	return 0
}
# stop_wait PID: SIGTERM to a child of this shell; its exit status
stop_wait() {
	local rc
	kill $1
	wait $1
	rc=$?
	untrack_pid $1
	return $rc
}
# stop_bounded PID: SIGTERM to a child of this shell; sets status to its
# exit status once it exits, or to "" if it still runs after 120 s (a hang
# detector, not a timing check)
stop_bounded() {
	local i
	status=
	kill -TERM $1
	for i in $(seq 1200); do
		if ! kill -0 $1 2>/dev/null; then wait $1; status=$?; break; fi
		sleep 0.1
	done
	[ -n "$status" ] && untrack_pid $1
	return 0
}
# seg_create NAME SIZE REQUESTS [DYNAMIC_PORTS]: a segment with 4 static
# ports (16 dynamic by default), destroyed at exit; dies if it cannot
seg_create() {
	$X create --size $2 --static-ports 4 --dynamic-ports ${4:-16} --requests $3 \
		$1 >/dev/null || die "create segment $1"
	echo $1 >>$T/segs
}
# seg_destroy NAME: a segment of seg_create gone now
seg_destroy() {
	$X destroy $1 >/dev/null 2>&1
	sed -i "/^$1\$/d" $T/segs
}
# start_vlmc DIR SEG [VLMC OPTION...]: vlmc on port 2 of SEG over port 1,
# serving DIR/nbd.sock with its control socket DIR/ctl, log DIR/vlmc.log
# (DIR is $T or below it); waits for both sockets; its pid in VLMC
start_vlmc() {
	local dir=$1 seg=$2 log=vlmc
	shift 2
	[ "$dir" = $T ] || log=${dir#$T/}/vlmc
	mkdir -p $dir
	rm -f $dir/nbd.sock $dir/ctl
	start_bg $log $BIN/vlmc -g $seg -p 2 --next-port 1 \
		--nbd-socket $dir/nbd.sock --ctl-socket $dir/ctl "$@"
	VLMC=$BG_PID
	wait_until 300 eval "[ -S $dir/ctl ] && [ -S $dir/nbd.sock ]"
	[ -S $dir/nbd.sock ] || die "vlmc $* did not start"
}
# vlmc_refuses SEG OPTION...: each OPTION (a string of words) makes vlmc
# exit 2 at start, or the test fails at once
vlmc_refuses() {
	local seg=$1 bad
	shift
	for bad in "$@"; do
		$BIN/vlmc -g $seg -p 3 --next-port 1 --nbd-socket none \
			--ctl-socket $T/ctl2 $bad >$T/bad.log 2>&1
		[ $? -eq 2 ] && echo "ok: vlmc $bad refused" ||
			{ echo "FAIL: vlmc $bad: $(cat $T/bad.log)"; exit 1; }
	done
}

# ---- stacks ----
# every stack this test started: stopped, its leftover peers killed, its
# segment gone (a stop after a write-back loss keeps it on purpose); then
# the private processes and segments; then $T
stack_cleanup() {
	local D seg f pid
	cd /
	[ -n "${T:-}" ] && [ -f $T/stopped ] && xargs -r kill -CONT <$T/stopped 2>/dev/null
	for D in $DIRS; do
		seg=$(sed -n 's/^segment = //p' $D/run/stack.conf 2>/dev/null)
		AC_BIN_DIR=$BIN $X stack stop --dir $D >/dev/null 2>&1
		for f in $D/run/*.pid; do
			[ -f "$f" ] && [ -n "$seg" ] || continue
			pid=$(cat "$f")
			grep -q "$D\|$seg" /proc/$pid/cmdline 2>/dev/null && kill -9 $pid
		done
		[ -n "$seg" ] && $X destroy "$seg" >/dev/null 2>&1
	done
	[ -n "${T:-}" ] || return 0
	[ -f $T/pids ] && stop_pids $(cat $T/pids)
	for seg in $(cat $T/segs 2>/dev/null); do $X destroy $seg >/dev/null 2>&1; done
	rm -rf $T
}
trap stack_cleanup EXIT
# stack_conf NAME [KEY = VALUE ...]: writes $T/NAME/stack.conf for a stack
# in D=$T/NAME/data (added to DIRS) with only the given lines
stack_conf() {
	local name=$1
	shift
	mkdir -p $T/$name
	D=$T/$name/data
	DIRS="$DIRS $D"
	{
		echo "dir = $D"
		for kv in "$@"; do echo "$kv"; done
	} >$T/$name/stack.conf
}
# new_stack NAME [KEY = VALUE ...]: writes $T/NAME/stack.conf for a
# small stack in D=$T/NAME/data (added to DIRS), with the given lines last
new_stack() {
	local name=$1
	shift
	stack_conf $name "segment_size = 128M" "requests = 1024" "cache_size = 16M" "$@"
}
# bin_with DIR PEER SCRIPT: a bin dir for AC_BIN_DIR whose PEER (blocker,
# cached or vlmc) is the script SCRIPT (its #! line included) and whose
# other peers are the built ones in $BIN
bin_with() {
	local p
	mkdir -p "$1"
	printf '%s\n' "$3" >"$1/$2"
	chmod +x "$1/$2"
	for p in blocker cached vlmc; do
		[ "$p" = "$2" ] || ln -s "$BIN/$p" "$1/$p"
	done
}

seg_of() { sed -n 's/^segment = //p' $1/run/stack.conf; }
# gone PID: no such process, or a zombie (killed, not reaped yet)
gone() {
	! kill -0 $1 2>/dev/null ||
		[ "$(proc_stat $1 2>/dev/null | awk '{ print $3 }')" = Z ]
}
# pid_of DIR ROLE: the pid of a stack's peer (or supervisor), from its file
pid_of() { cat $1/run/$2.pid 2>/dev/null; }
# cmdline_of DIR ROLE: that process's command line, words separated by
# spaces (and one after the last)
cmdline_of() { tr '\0' ' ' </proc/$(pid_of $1 $2)/cmdline; }
status_json() { $X stack status --dir $1 --json 2>/dev/null; }
# the segment's write-back loss counter; cached's port's unflushed count
losses() { status_json $1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["writeback_losses"])'; }
cached_unflushed() { status_json $1 | python3 -c '
import json, sys
print([p for p in json.load(sys.stdin)["peers"] if p["role"] == "cached"][0]["unflushed"])'; }
# no_process_left DIR: no process runs from DIR/run or for --dir=DIR
no_process_left() { [ "$(pgrep -f -- "$1/run|--dir=$1" | wc -l)" -eq 0 ]; }
