# SPDX-License-Identifier: MIT
# Sourced by the benchmarks that run one stack holding a volume of many
# small objects (bench/stop_flush.sh, bench/idle_cpu.sh).
#
# bigstack_args DEFAULT_SIZE "$@"   parses --bin BIN, --old BIN, --size SIZE
#                                   into BIN, OLD, SIZE (exit 2 on others)
# bigstack_init NAME                a scratch dir T (/tmp/NAME-XXXXXX),
#                                   removed at exit with whatever still runs
# bigstack_start BIN_DIR            a fresh stack in $T/s (5 GiB cache
#                                   indexing 1.2 M objects: a 4 GiB volume of
#                                   4 KiB objects fits whole, nothing is
#                                   evicted) and volume "v" of SIZE in 4 KiB
#                                   objects; sets B and SEG; URI is its NBD URI
# bigstack_stop                     stops it; peers still running after a
#                                   failed stop are killed (their pid files,
#                                   checked against the segment name) and
#                                   the segment is destroyed: nothing is left

bigstack_args() {
	SIZE=$1
	shift
	BIN=${AC_BIN_DIR:-./build/bin}
	OLD=
	while [ $# -gt 0 ]; do
		case $1 in
		--bin) BIN=$2; shift 2 ;;
		--old) OLD=$2; shift 2 ;;
		--size) SIZE=$2; shift 2 ;;
		*) echo "usage: $0 [--bin BIN] [--old BIN] [--size SIZE]" >&2; exit 2 ;;
		esac
	done
	command -v fio >/dev/null || { echo "fio not found" >&2; exit 1; }
}

bigstack_init() {
	T=$(mktemp -d /tmp/$1-XXXXXX)
	SEG=
	B=$BIN
	trap bigstack_cleanup EXIT
}

bigstack_start() {
	B=$1
	rm -rf $T/s
	printf 'dir = %s/s\nsegment_size = 2G\ncache_size = 5G\ncache_max_objects = 1200000\n' \
		$T > $T/s.conf
	$B/xsegctl stack start $T/s.conf >/dev/null || { echo "start failed" >&2; return 1; }
	SEG=$(sed -n 's/^segment = //p' $T/s/run/stack.conf)
	URI="nbd+unix:///v?socket=$T/s/run/nbd.sock"
	$B/xsegctl volume --dir $T/s create v $SIZE 4k >/dev/null
}

bigstack_stop() {
	local f
	$B/xsegctl stack stop --dir $T/s >/dev/null 2>&1
	for f in $T/s/run/*.pid; do
		[ -e "$f" ] && [ -n "$SEG" ] &&
			tr '\0' ' ' < /proc/$(cat "$f")/cmdline 2>/dev/null | grep -q -- "$SEG" &&
			kill -9 "$(cat "$f")" 2>/dev/null
	done
	[ -n "$SEG" ] && [ -e /dev/shm/$SEG ] && $B/xsegctl destroy $SEG >/dev/null 2>&1
	SEG=
}

bigstack_cleanup() {
	[ -d $T/s/run ] && bigstack_stop
	rm -rf $T
}
