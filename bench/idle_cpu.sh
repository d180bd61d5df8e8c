#!/bin/bash
# SPDX-License-Identifier: MIT
# CPU each peer of an idle stack uses while it holds many objects: a volume
# of 4 KiB objects is written through NBD (fio, with an fsync at the end,
# so nothing is left to flush), then after 8 s of quiet the peers' CPU
# time (utime + stime from /proc/PID/stat) is read over 10 s. An idle peer
# should use next to nothing whatever it holds; work that grows with the
# number of objects (a walk each second) shows here.
# Prints JSON; with --old BIN the same runs with another build first, for a
# comparison in one sitting.
#
# Usage: bench/idle_cpu.sh [--bin BIN] [--old BIN] [--size SIZE]
#   --bin BIN    the programs measured (default $AC_BIN_DIR or ./build/bin)
#   --old BIN    programs of a reference build (optional)
#   --size SIZE  the volume (default 4g: 1 M objects; needs about 6 GiB
#                of RAM)
set -u
BIN=${AC_BIN_DIR:-./build/bin}
OLD=
SIZE=4g
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--old) OLD=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	*) echo "usage: $0 [--bin BIN] [--old BIN] [--size SIZE]" >&2; exit 2 ;;
	esac
done
command -v fio >/dev/null || { echo "fio not found" >&2; exit 1; }
T=$(mktemp -d /tmp/idlecpu-XXXXXX)
SEG=
B=$BIN
cleanup() {
	if [ -n "$SEG" ] && [ -e /dev/shm/$SEG ]; then
		$B/xsegctl stack stop --dir $T/s >/dev/null 2>&1
		[ -e /dev/shm/$SEG ] && $B/xsegctl destroy $SEG >/dev/null 2>&1
	fi
	rm -rf $T
}
trap cleanup EXIT
TICK=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }

# one run with the programs in $1; prints its JSON object
run() {
	B=$1
	local name=$1
	rm -rf $T/s
	printf 'dir = %s/s\nsegment_size = 2G\ncache_size = 5G\ncache_max_objects = 1200000\n' \
		$T > $T/s.conf
	$B/xsegctl stack start $T/s.conf >/dev/null || { echo "start failed" >&2; return 1; }
	SEG=$(sed -n 's/^segment = //p' $T/s/run/stack.conf)
	$B/xsegctl volume --dir $T/s create v $SIZE 4k >/dev/null || return 1
	fio --name=w --ioengine=nbd --uri="nbd+unix:///v?socket=$T/s/run/nbd.sock" \
		--size=$SIZE --rw=write --bs=1m --iodepth=4 --end_fsync=1 >/dev/null ||
		{ echo "fio write failed" >&2; return 1; }
	sleep 8
	local out="" pid
	declare -A before
	for role in store cached vlmc; do
		pid=$($B/xsegctl stack status --dir $T/s --json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["peers"]:
    if p["role"] == sys.argv[1]:
        print(p.get("pid", 0))' $role)
		before[$role]="$pid $(cpu_ticks $pid)"
	done
	sleep 10
	for role in store cached vlmc; do
		set -- ${before[$role]}
		out="$out\"${role}_cpu_ms_per_10s\": $(( ($(cpu_ticks $1) - $2) * 1000 / TICK )), "
	done
	$B/xsegctl stack stop --dir $T/s >/dev/null 2>&1
	SEG=
	echo "{\"bin\": \"$name\", ${out%, }}"
}

echo "{\"bench\": \"idle_cpu\", \"volume\": \"$SIZE of 4 KiB objects, written and fsynced, then 8 s quiet and 10 s measured\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"runs\": ["
if [ -n "$OLD" ]; then
	run "$OLD" || exit 1
	echo ","
fi
run "$BIN" || exit 1
echo "]}"
