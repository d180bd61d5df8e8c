#!/bin/bash
# SPDX-License-Identifier: MIT
# The shell's /proc/PID/stat parser (scripts/lib_proc_stat.sh) and the
# testlib's gone() on a process whose name holds blanks and ") Z" (the
# name of the executable it was started as): the fields are read after
# the LAST ')' of the line, as xseg_proc_stat_read does. A parser that
# splits from the start of the line shifts every field, and the old
# gone() (grep ') Z') took this live sleeper for a zombie.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init proc_stat

# TASK_COMM_LEN: the kernel keeps the first 15 bytes of the name
NAME='x) Z y) S 1 2 3'
ln -s "$(command -v sleep)" "$T/$NAME"
# The sleeper's parent is a subshell that then becomes a sleep, which
# never reaps it: once killed it stays a zombie until its parent goes.
("$T/$NAME" 600 & echo $! >$T/sleeper; exec sleep 600) &
PARENT=$!
track_pid $PARENT
wait_until 100 eval "[ -s $T/sleeper ]" || die "the sleeper did not start"
S=$(cat $T/sleeper)
track_pid $S
wait_until 100 eval "[ \"\$(cat /proc/$S/comm)\" = '$NAME' ]" ||
	die "the sleeper is named '$(cat /proc/$S/comm)', not '$NAME'"

# field N of proc_stat's line is proc(5)'s field N
f() { proc_stat $S | awk -v n=$1 '{ print $n }'; }
wait_until 100 eval '[ "$(f 3)" = S ]' && ok "state S (sleeping)" ||
	fail "state '$(f 3)', not S: $(proc_stat $S)"
[ "$(f 1)" = $S ] && [ "$(f 4)" = $PARENT ] && ok "pid and ppid" ||
	fail "pid '$(f 1)', ppid '$(f 4)'; expected $S, $PARENT: $(proc_stat $S)"
# utime + stime: a sleeper has used less than a second of CPU
ticks=$(proc_cpu_ticks $S)
[[ "$ticks" =~ ^[0-9]+$ ]] && [ "$ticks" -lt "$(getconf CLK_TCK)" ] &&
	ok "cpu ticks $ticks" || fail "cpu ticks '$ticks'"
gone $S && fail "gone() takes the live sleeper for gone" ||
	ok "the live sleeper is not gone"

kill -KILL $S
wait_until 100 gone $S && [ "$(f 3)" = Z ] && ok "killed: a zombie, gone" ||
	fail "killed: state '$(f 3)', gone() says no"
stop_pids $PARENT $S
gone $S && ok "reaped: gone" || fail "reaped: not gone"
proc_stat $S 2>$T/err && fail "proc_stat of a reaped process succeeded"
grep -q "proc_stat: no process $S" $T/err && ok "no process: said so" ||
	fail "no process: '$(cat $T/err)'"

finish "proc_stat: fields read after the name, whatever it holds"
