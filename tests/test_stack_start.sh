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
# In both, no peer process and no segment is left.
#   3. the key nbd_total_inflight (vlmc's --nbd-total-inflight-bytes): a
#      value vlmc refuses (0, 2T, lots, empty, 16Q) is refused at parse
#      time naming the key, the line and the range, nothing started; 24M
#      is on vlmc's command line and in its "nbd on ... bytes in flight"
#      line, also after the supervisor restarted a killed vlmc; the
#      config's spin = 0 reaches vlmc and cached as --spin=0 (over the
#      embedded default's vlmc_spin = 20us and cached_spin = 80us), also
#      after that restart; a config without spin keys starts the store
#      with --spin=0, cached with 80us and vlmc with 20us (case 2).
#   4. the key start_timeout: a start waits for a peer as long as its
#      process makes progress (CPU time, I/O), failing after start_timeout
#      without. 0, 0s, 500ms, 1500ms, x, 3601 and 2h are refused at parse
#      time; with start_timeout = 10 a store that burns CPU for 30 s
#      before it starts is waited for (stack.conf keeps the key, for the
#      supervisor's restarts), and a cached that sleeps 45 s first fails
#      the start with the no-progress message, killed (its sleep too),
#      leaving no process and no segment. Before, the wait was 30 s to
#      bind whatever the peer did, so the sleeper was waited for and a
#      store burning CPU longer than that failed.
#   5. a stack directory holding a '#' or white space at an end (given,
#      or the realpath of a relative one) is refused: run/stack.conf
#      could not name it, and stop would read back another directory.
#   6. requests past xseg_create's bounds (0, 1, 2^30 + 1, 2^32 + 2) are
#      refused at parse time; 2^32 + 2 used to start a pool of 2.
#   7. segment_size: 0, 4097, 1E, 65T, x and empty are refused at parse
#      time naming the key and the bound; one too small for the request
#      pool (64k) names both keys and the least size, one above what the
#      data heap can use (512G) both keys and the largest size, before
#      anything is created or removed (a left-over segment is kept). A
#      left-over segment of another geometry is made anew with the
#      config's, start saying both; while the stack runs, a start asking
#      another geometry is refused naming both, and status given such a
#      config warns. A size at the pool's least, with no room for what
#      cached and vlmc take from the data heap at their start, is refused
#      naming the size they need (it used to fail in cached's start), and
#      a stack of exactly that size starts and creates a volume.
# Every wait is a bound on an event, never a timing assertion. Exit 77
# (skip) only when nbdcopy or the blocker peer is missing.
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
# a config without spin keys: the embedded default's spins (the store
# sleeps at once, cached polls 80us, vlmc 20us)
for r in store:0 cached:80us vlmc:20us; do
	[ "$(cmdline_of $D2 ${r%%:*} | grep -o -- '--spin=[^ ]*')" = --spin=${r#*:} ] &&
		ok "2: ${r%%:*} started with the default --spin=${r#*:}" ||
		fail "2: ${r%%:*}: $(cmdline_of $D2 ${r%%:*})"
done
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

# expect_refused CASE KEY RANGE VALUE...: a config setting KEY to each
# VALUE (on its line 2) is refused at parse time, exit 2, with the key,
# the line and RANGE, nothing created
expect_refused() {
	local c=$1 key=$2 range=$3 v rc
	shift 3
	for v in "$@"; do
		printf 'dir = %s\n%s = %s\n' $T/bad $key "$v" >$T/bad.conf
		$X stack start $T/bad.conf >/dev/null 2>$T/bad.err; rc=$?
		[ $rc -eq 2 ] && [ ! -e $T/bad ] &&
			grep -q "bad.conf: line 2: bad value '$v' for $key ($range)" $T/bad.err &&
			ok "$c: $key = '$v' refused with the key, line and range" ||
			fail "$c: $key = '$v': rc $rc: $(cat $T/bad.err)"
	done
}
# a value wrongly taken starts a stack in $T/bad (segment_size = 65T did,
# before session 19): stopped at exit like the others
DIRS="$DIRS $T/bad"

# ---- 3. the key nbd_total_inflight: vlmc's bounds, and it reaches vlmc ----
# refused at parse time with the key, the line and the range (a value vlmc
# refuses would fail every start and restart), nothing started
expect_refused 3 nbd_total_inflight "a size, 1 .. 1T" 0 2T lots "" 16Q
# spin = 0 in the config (no vlmc_spin, no cached_spin): no peer spins,
# vlmc and cached included (the embedded default's role spins give way to
# a config's spin, review20b B3)
new_stack s3 "store = noop" "nbd_total_inflight = 24M" "spin = 0"
D3=$D
$X stack start $T/s3/stack.conf >/dev/null || die "start s3"
# vlmc_has_total: vlmc's command line has the option, and vlmc runs with
# 24 MiB as its budget over all connections (its "nbd on" line)
vlmc_has_total() {
	local pid=$(pid_of $D3 vlmc)
	cmdline_of $D3 vlmc | grep -q -- '--nbd-total-inflight-bytes=24M ' &&
		[ "$(cmdline_of $D3 vlmc | grep -o -- '--spin=[^ ]*')" = --spin=0 ] &&
		[ "$(cmdline_of $D3 cached | grep -o -- '--spin=[^ ]*')" = --spin=0 ] &&
		wait_until 100 grep -q "serving segment .* pid $pid\$" $D3/run/vlmc.log &&
		grep -B4 "serving segment .* pid $pid\$" $D3/run/vlmc.log |
		grep -q "(25165824 bytes in flight at most on all connections)"
}
vlmc_has_total && ok "3: nbd_total_inflight = 24M and spin = 0 reach vlmc" ||
	fail "3: vlmc: $(cmdline_of $D3 vlmc) $(grep 'bytes in flight' $D3/run/vlmc.log)"
# the supervisor restarts vlmc from run/stack.conf: with the key too
old=$(pid_of $D3 vlmc)
kill -9 $old
wait_until 600 eval '[ -n "$(pid_of $D3 vlmc)" ] && [ "$(pid_of $D3 vlmc)" != $old ] &&
	grep -q "serving segment .* pid $(pid_of $D3 vlmc)\$" $D3/run/vlmc.log' &&
	vlmc_has_total && ok "3: a restarted vlmc keeps nbd_total_inflight and spin" ||
	fail "3: restarted vlmc: $(cmdline_of $D3 vlmc 2>&1)"
$X stack stop --dir $D3 >/dev/null 2>$T/s3/stop.err || fail "3: stop: $(cat $T/s3/stop.err)"

# ---- 4. start_timeout: waited for while progressing, not longer ----
expect_refused 4 start_timeout "a duration in whole seconds, 1s .. 1h" \
	0 0s 500ms 1500ms x 3601 2h
# a store that burns CPU (bash builtins: in its own process) for three
# times the bound before it starts
W4=$T/wrap-burn
bin_with $W4 blocker "$(printf '#!/bin/bash\nwhile [ $SECONDS -lt 30 ]; do :; done\nexec %s/blocker "$@"' $BIN)"
new_stack s4 "store = blocker" "start_timeout = 10"
D4=$D
AC_BIN_DIR=$W4 $X stack start $T/s4/stack.conf >$T/s4/out 2>$T/s4/err; rc=$?
[ $rc -eq 0 ] && grep -q "^stack started" $T/s4/out &&
	ok "4: a store busy (CPU) for 3 x start_timeout before it starts is waited for" ||
	fail "4: burning store: start rc $rc: $(cat $T/s4/out $T/s4/err)"
grep -qx "start_timeout = 10" $D4/run/stack.conf &&
	ok "4: start_timeout kept in run/stack.conf (supervised restarts)" ||
	fail "4: run/stack.conf: $(cat $D4/run/stack.conf)"
AC_BIN_DIR=$W4 $X stack stop --dir $D4 >/dev/null 2>$T/s4/stop.err ||
	fail "4: stop: $(cat $T/s4/stop.err)"
# a cached that sleeps (no CPU, no I/O) longer than the bound, in a child
# whose pid it records, before it starts
W5=$T/wrap-sleep
bin_with $W5 cached "$(printf '#!/bin/sh\nsleep 45 &\necho $! >%s/sleeper\nwait $!\nexec %s/cached "$@"' $T $BIN)"
new_stack s5 "store = blocker" "start_timeout = 10"
D5=$D
AC_BIN_DIR=$W5 $X stack start $T/s5/stack.conf >$T/s5/out 2>$T/s5/err; rc=$?
SEG5=$(seg_of $D5)
[ $rc -eq 1 ] && ! grep -q "stack started" $T/s5/out &&
	grep -q "cached did not come up on port 2: it (pid [0-9]*) made no progress (under a tenth of a CPU, no block I/O) for 10 s, after [0-9]* s in all; killed it (start_timeout)" $T/s5/err &&
	ok "4: a cached making no progress for start_timeout fails the start, saying so" ||
	fail "4: sleeping cached: start rc $rc: $(cat $T/s5/out $T/s5/err)"
nothing_left $D5 $SEG5 && wait_until 100 gone "$(cat $T/sleeper)" &&
	ok "4: the stalled cached (and its child) killed, the store stopped, no segment left" ||
	fail "4: left: $(pgrep -af -- "$D5/run|--dir=$D5") sleeper $(cat $T/sleeper) $(ls /dev/shm | grep "$SEG5")"

# ---- 5. a stack directory run/stack.conf cannot name ----
# stop, status, plug and unplug read the directory back from
# run/stack.conf, whose parser ends a value at '#' and strips white space
# at its ends: "dir = /x/a#b" read back as /x/a (found by fuzz_stack_conf).
# Such a directory, given (--dir) or as the realpath of a relative one
# (the current directory's name), is refused before anything starts.
mkdir -p "$T/with#hash" "$T/s6"
for d in "$T/with#hash/data" "$T/s6/data "; do
	$X stack start --dir "$d" >$T/s6/out 2>$T/s6/err; rc=$?
	[ $rc -eq 1 ] && [ ! -e "$d" ] &&
		grep -qF "the stack directory '$d' holds a '#', a line break or white space at an end, which run/stack.conf cannot hold" $T/s6/err &&
		ok "5: --dir '$d' refused, nothing made" ||
		fail "5: --dir '$d': rc $rc, exists: $([ -e "$d" ] && echo yes), $(cat $T/s6/out $T/s6/err)"
done
(cd "$T/with#hash" && $X stack start --dir data) >$T/s6/out 2>$T/s6/err; rc=$?
[ $rc -eq 1 ] && [ ! -e "$T/with#hash/data/run" ] &&
	grep -qF "the stack directory 'data' is '$T/with#hash/data', which holds a '#'" $T/s6/err &&
	ok "5: a relative dir whose realpath holds a '#' refused, nothing started" ||
	fail "5: relative dir: rc $rc: $(cat $T/s6/out $T/s6/err)"

# ---- 6. requests: xseg_create's bounds, at parse time ----
# 4294967298 used to be cut to 32 bits, a stack with a pool of 2
expect_refused 6 requests "a number, 2 .. 1073741824" 0 1 1073741825 4294967298

# ---- 7. segment_size, and a segment whose geometry differs ----
# refused at parse time with the key, the line and the bound: 0, 4097 and
# 64k used to be refused only by xseg_create (exit 1, after start removed
# a left-over segment, in a message without the key), 1E by its mmap, and
# 65T started a stack
expect_refused 7 segment_size "a size, a multiple of 4k, at most 64T, e.g. 1G" \
	0 4097 1E 65T x ""
# a size too small for the pool: refused before anything is created or
# removed, naming both keys and the least size; a left-over segment of
# that name is kept (it used to be removed first)
SEG7=stack-start7-$$
seg_create $SEG7 64M 512
printf 'dir = %s\nsegment = %s\nsegment_size = 64k\n' $T/bad $SEG7 >$T/bad.conf
$X stack start $T/bad.conf >/dev/null 2>$T/bad.err; rc=$?
[ $rc -eq 2 ] && [ ! -e $T/bad ] &&
	grep -q "bad.conf: segment_size 65536 is too small for requests = 8192: the segment needs at least [0-9]* bytes" $T/bad.err &&
	$X info $SEG7 | grep -q '^size: *67108864 bytes' &&
	ok "7: segment_size below the pool's need refused, the left-over segment kept" ||
	fail "7: segment_size 64k: rc $rc: $(cat $T/bad.err)"
# a size above what the data heap can use (256 GiB of data): refused the
# same way, naming both keys and the largest size; before session 20 a
# 512G stack started with 256 GiB of data and never said so
printf 'dir = %s\nsegment = %s\nsegment_size = 512G\n' $T/bad $SEG7 >$T/bad.conf
$X stack start $T/bad.conf >/dev/null 2>$T/bad.err; rc=$?
[ $rc -eq 2 ] && [ ! -e $T/bad ] &&
	grep -q "bad.conf: segment_size 549755813888 is too large for requests = 8192: the data heap can use at most 256 GiB, so the largest segment whose every byte is used is [0-9]* bytes" $T/bad.err &&
	$X info $SEG7 | grep -q '^size: *67108864 bytes' &&
	ok "7: segment_size above the data heap's reach refused, the left-over segment kept" ||
	fail "7: segment_size 512G: rc $rc: $(cat $T/bad.err)"
# a size that holds the pool but not what the peers take from the data
# heap at their start (cached's 32 requests of 128 KiB to the store,
# vlmc's read of its volume table): refused before anything is created or
# started, naming the size they need; it used to start the store and fail
# in cached ("cannot reserve request 0 of 32 for the next port"). A stack
# of exactly that size starts.
printf 'dir = %s\nsegment = %s\nrequests = 64\nsegment_size = 64k\n' $T/bad $SEG7-b >$T/bad.conf
POOL=$($X stack start $T/bad.conf 2>&1 >/dev/null |
	sed -n 's/.* needs at least \([0-9]*\) bytes .* for its header.*/\1/p')
sed -i "s/^segment_size = .*/segment_size = $POOL/" $T/bad.conf
$X stack start $T/bad.conf >/dev/null 2>$T/bad.err; rc=$?
NEED=$(sed -n "s/.*bad.conf: segment_size $POOL is too small for the peers' start: cached reserves 32 requests of 128 KiB to the store and vlmc reads its volume table ([0-9]* KiB) through the segment's data heap, so with requests = 64 the segment needs at least \([0-9]*\) bytes .*, and room beyond that for I\/O\$/\1/p" $T/bad.err)
[ $rc -eq 2 ] && [ -n "$POOL" ] && [ "${NEED:-0}" -gt "$POOL" ] &&
	[ ! -e $T/bad ] && [ ! -e /dev/shm/$SEG7-b ] &&
	ok "7: segment_size at the pool's least refused before the start, naming what cached and vlmc need" ||
	fail "7: segment_size $POOL: rc $rc: $(cat $T/bad.err)"
new_stack s7b "store = noop" "supervise = off" "segment = $SEG7-b" \
	"requests = 64" "segment_size = ${NEED:-0}"
$X stack start $T/s7b/stack.conf >/dev/null 2>$T/s7b/err &&
	$X volume --dir $D create vol 1M >/dev/null 2>>$T/s7b/err &&
	ok "7: a stack of that size starts and creates a volume" ||
	fail "7: segment_size ${NEED:-0}: $(cat $T/s7b/err)"
$X stack stop --dir $D >/dev/null 2>$T/s7b/err && nothing_left $D $SEG7-b ||
	fail "7: stop of the smallest stack: $(cat $T/s7b/err)"
# a left-over segment of another geometry: made anew with the config's,
# saying both
new_stack s7 "store = noop" "cached = off" "supervise = off" "segment = $SEG7"
D7=$D
$X stack start $T/s7/stack.conf >/dev/null 2>$T/s7/err; rc=$?
[ $rc -eq 0 ] &&
	grep -q "segment $SEG7 left by an earlier stack has segment_size 67108864 and requests 512, not this config's segment_size 134217728 and requests 1024: removing it" $T/s7/err &&
	$X info $SEG7 | grep -q '^size: *134217728 bytes' &&
	$X info $SEG7 | grep -q '^requests: *1024 ' &&
	ok "7: a left-over segment of another geometry made anew, saying both" ||
	fail "7: left-over segment: rc $rc: $(cat $T/s7/err)"
# while it runs: a start asking another geometry is refused naming both;
# another command given that config warns naming both
printf 'dir = %s\nsegment = %s\nsegment_size = 256M\n' $D7 $SEG7 >$T/s7/big.conf
$X stack start $T/s7/big.conf >/dev/null 2>$T/s7/err; rc=$?
[ $rc -eq 1 ] &&
	grep -q "already running on segment $SEG7 .*; its segment has segment_size 134217728 and requests 1024, not this config's segment_size 268435456 and requests 8192" $T/s7/err &&
	$X info $SEG7 | grep -q '^size: *134217728 bytes' &&
	ok "7: a start with another geometry while running refused, naming both" ||
	fail "7: start while running: rc $rc: $(cat $T/s7/err)"
$X stack status $T/s7/big.conf >/dev/null 2>$T/s7/err; rc=$?
[ $rc -eq 0 ] &&
	grep -q "warning: $T/s7/big.conf: segment_size 268435456 and requests 8192 differ from the stack's in $D7 (segment_size 134217728 and requests 1024" $T/s7/err &&
	ok "7: status given a config of another geometry warns, naming both" ||
	fail "7: status: rc $rc: $(cat $T/s7/err)"
$X stack status $T/s7/stack.conf >/dev/null 2>$T/s7/err; rc=$?
[ $rc -eq 0 ] && [ ! -s $T/s7/err ] &&
	ok "7: status given the stack's own config says nothing" ||
	fail "7: status, own config: rc $rc: $(cat $T/s7/err)"
$X stack stop --dir $D7 >/dev/null 2>$T/s7/err && nothing_left $D7 $SEG7 ||
	fail "7: stop: $(cat $T/s7/err)"

check_sanitizers "a log" $T/*/data/run/*.log
finish "stack start test passed"
