# SPDX-License-Identifier: MIT
# Shared by the shell tests that start several stacks (sourced, not run):
# they set BIN (the programs), X ($BIN/xsegctl), T (their temp dir) and
# FAILS=0, and add every stack dir they start to DIRS.

DIRS=
# every stack this test started: stopped, its leftover peers killed, its
# segment gone (a stop after a write-back loss keeps it on purpose)
stack_cleanup() {
	cd /
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
	rm -rf $T
}
trap stack_cleanup EXIT
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
die() { echo "FAIL: $*"; tail -n 30 $T/*/run/*.log; exit 1; }
# new_stack NAME [KEY = VALUE ...]: writes $T/NAME/stack.conf for a
# small stack in D=$T/NAME/data (added to DIRS), with the given lines last
new_stack() {
	local name=$1
	shift
	mkdir -p $T/$name
	D=$T/$name/data
	DIRS="$DIRS $D"
	{
		echo "dir = $D"
		echo "segment_size = 128M"
		echo "requests = 1024"
		echo "cache_size = 16M"
		for kv in "$@"; do echo "$kv"; done
	} > $T/$name/stack.conf
}
seg_of() { sed -n 's/^segment = //p' $1/run/stack.conf; }
