# SPDX-License-Identifier: MIT
# Sourced (POSIX sh and bash) by the shell tests and benchmarks that read
# /proc/PID/stat: the shell's one parser of that file, as
# xseg_proc_stat_read is libxseg's.
#
# The command name (field 2) is in parentheses and may itself hold blanks
# and ')' (a process names itself as it likes, and an executable's file
# name becomes its name): splitting the line from its start shifts every
# later field (a sleeper named "x) Z y" read as a zombie). The fields are
# taken after the LAST ')' of the line instead.
#
# proc_stat PID       the line with the name replaced by "-": word N is
#                     proc(5)'s field N (awk '{print $3}' is the state);
#                     exit 1 with a message when there is no such process
#                     or the line does not parse
# proc_cpu_ticks PID  the user + system CPU time (fields 14 + 15) in clock
#                     ticks

proc_stat() {
	local stat
	# one read: the fields printed are of one instant
	stat=$(cat "/proc/$1/stat" 2>/dev/null) ||
		{ echo "proc_stat: no process $1" >&2; return 1; }
	case $stat in
	*') '*) ;;
	*) echo "proc_stat: /proc/$1/stat: no ') ' after the name: $stat" >&2
	   return 1 ;;
	esac
	printf '%s - %s\n' "${stat%% *}" "${stat##*') '}"
}

proc_cpu_ticks() {
	local stat
	stat=$(proc_stat "$1") || return 1
	echo "$stat" | awk '{ print $14 + $15 }'
}
