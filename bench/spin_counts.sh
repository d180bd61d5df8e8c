#!/bin/bash
# SPDX-License-Identifier: MIT
# What cached's adaptive spin did per fio job through NBD, counted, not
# timed (xseg.h "Adaptive spinning"): for each job, the change of cached's
# port statistics over the job (`xsegctl stack status --json`,
# cache_stats): requests accepted, waits that found no work at once,
# spins, spins that caught work, and waits that slept because the worker
# had been preempted (spins_preempted). A stack as bench/bench_nbd.sh
# starts it, with cached in poll mode (`cached_spin`, default 200us).
# The IOPS printed are indicative only on a shared machine; the counts,
# as shares of the waits, are what to compare.
#
# Usage: spin_counts.sh [--bin DIR] [--spin DURATION] [--mib N]
#                       [--runtime S] [--jobs "JOB ..."]
#   --bin DIR       built programs (default: $AC_BIN_DIR or ./build/bin)
#   --spin D        cached_spin (default 200us)
#   --mib N         volume size in MiB (default 128)
#   --runtime S     seconds per fio job (default 3)
#   --jobs LIST     sections of bench/fio/nbd.fio (default: the four
#                   random 4 KiB jobs)
set -u
BIN=${AC_BIN_DIR:-./build/bin}
SPIN=200us
MIB=128
RUNTIME=3
JOBS="randread-qd1 randwrite-qd1 randread-qd16 randwrite-qd16"
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--spin) SPIN=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--runtime) RUNTIME=$2; shift 2 ;;
	--jobs) JOBS=$2; shift 2 ;;
	*) echo "spin_counts.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
F=$(cd "$(dirname "$0")" && pwd)/fio/nbd.fio
T=$(mktemp -d /tmp/spin-counts-XXXXXX)
cleanup() {
	"$BIN"/xsegctl stack stop --dir "$T"/s >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT
printf 'dir = %s/s\nsegment_size = 2G\ncache_size = %sM\nverify_reads = on\ncached_spin = %s\n' \
	"$T" $((MIB * 2)) "$SPIN" > "$T"/s.conf
"$BIN"/xsegctl stack start "$T"/s.conf >/dev/null 2>&1 || { echo "spin_counts.sh: stack start failed" >&2; exit 1; }
"$BIN"/xsegctl volume --dir "$T"/s create bench ${MIB}M >/dev/null || exit 1
URI="nbd+unix:///bench?socket=$T/s/run/nbd.sock"
URI=$URI SIZE=${MIB}m RUNTIME=$RUNTIME fio --section=prefill "$F" >/dev/null || exit 1
stats() { "$BIN"/xsegctl stack status --dir "$T"/s --json > "$1" || exit 1; }
for job in $JOBS; do
	stats "$T/$job.before"
	URI=$URI SIZE=${MIB}m RUNTIME=$RUNTIME fio --section="$job" \
		--output-format=json --output="$T/$job.fio" "$F" >/dev/null || exit 1
	stats "$T/$job.after"
done
python3 - "$T" "$SPIN" $JOBS <<'PY'
import json, sys
t, spin, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
keys = ["accepted", "spin_waits", "spins", "spins_caught", "spins_preempted"]
out = {"bench": "spin_counts", "cached_spin": spin, "jobs": {}}
for j in jobs:
    a = json.load(open(f"{t}/{j}.before"))["cache_stats"]
    b = json.load(open(f"{t}/{j}.after"))["cache_stats"]
    f = json.load(open(f"{t}/{j}.fio"))["jobs"][0]
    missing = [k for k in keys if k not in a or k not in b]
    if missing:
        sys.exit(f"spin_counts.sh: cached publishes no {missing}")
    r = {k: b[k] - a[k] for k in keys}
    w = r["spin_waits"] or 1
    r["iops"] = round(f["read"]["iops"] + f["write"]["iops"])
    r["preempted_share_of_waits"] = round(r["spins_preempted"] / w, 4)
    r["spun_share_of_waits"] = round(r["spins"] / w, 4)
    out["jobs"][j] = r
print(json.dumps(out, indent=1))
PY
