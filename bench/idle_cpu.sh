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
. "$(dirname "$0")/lib_bigstack.sh"
. "$(dirname "$0")/../scripts/lib_proc_stat.sh"
bigstack_args 4g "$@"
bigstack_init idlecpu
TICK=$(getconf CLK_TCK)


# one run with the programs in $1; prints its JSON object
run() {
	local name=$1
	bigstack_start $1 || return 1
	fio --name=w --ioengine=nbd --uri=$URI --size=$SIZE --rw=write --bs=1m \
		--iodepth=4 --end_fsync=1 >/dev/null || { echo "fio write failed" >&2; return 1; }
	sleep 8
	local out="" pid
	declare -A before
	for role in store cached vlmc; do
		pid=$($B/xsegctl stack status --dir $T/s --json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["peers"]:
    if p["role"] == sys.argv[1]:
        print(p.get("pid", 0))' $role)
		before[$role]="$pid $(proc_cpu_ticks $pid)"
	done
	sleep 10
	for role in store cached vlmc; do
		set -- ${before[$role]}
		out="$out\"${role}_cpu_ms_per_10s\": $(( ($(proc_cpu_ticks $1) - $2) * 1000 / TICK )), "
	done
	bigstack_stop
	echo "{\"bin\": \"$name\", ${out%, }}"
}

echo "{\"bench\": \"idle_cpu\", \"volume\": \"$SIZE of 4 KiB objects, written and fsynced, then 8 s quiet and 10 s measured\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"runs\": ["
if [ -n "$OLD" ]; then
	run "$OLD" || exit 1
	echo ","
fi
run "$BIN" || exit 1
echo "]}"
