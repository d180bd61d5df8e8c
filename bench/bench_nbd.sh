#!/bin/bash
# SPDX-License-Identifier: MIT
# fio through NBD (bench/fio/nbd.fio: 4 KiB randread and randwrite at
# iodepth 1 and 16, 1 MiB sequential read and write) against, in the same
# run on the same machine:
#   stack_cached     our stack: vlmc -> cached (write-back) -> store
#   stack_nocached   the same stack after `xsegctl stack unplug-cached`
#   nbdkit_memory    nbdkit's memory plugin
#   nbdkit_file_cache nbdkit's file plugin behind its cache filter
#                    (the reference of issue 7)
# Prints one JSON object: per target and job IOPS, MiB/s, completion
# latency p50/p99 (us), and each stack number's ratio to the reference.
#
# Usage: bench_nbd.sh [--bin DIR] [--mib N] [--runtime S]
#   --bin DIR    built programs (default: $AC_BIN_DIR or ./build/bin)
#   --mib N      volume / disk size in MiB (default 256)
#   --runtime S  seconds per job (default 5)
set -u
BIN=${AC_BIN_DIR:-./build/bin}
MIB=256
RUNTIME=5
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--runtime) RUNTIME=$2; shift 2 ;;
	-h|--help) sed -n 2,20p "$0"; exit 0 ;;
	*) echo "bench_nbd.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for tool in fio nbdkit python3; do
	command -v $tool >/dev/null || { echo "bench_nbd.sh: $tool not installed" >&2; exit 1; }
done
BIN=$(cd "$BIN" && pwd) || exit 1
FIOJOBS=$(cd "$(dirname "$0")" && pwd)/fio/nbd.fio
X=$BIN/xsegctl
T=$(mktemp -d /tmp/bench-nbd-XXXXXX)
NBDKIT_PID=
cleanup() {
	[ -n "$NBDKIT_PID" ] && kill $NBDKIT_PID 2>/dev/null
	$X stack stop --dir $T/stack >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT
JOBS="seqwrite-1m seqread-1m randread-qd1 randread-qd16 randwrite-qd1 randwrite-qd16"

# run_jobs TARGET URI: prefill, then every job; results in $T/TARGET.*.json
run_jobs() {
	local target=$1 uri=$2
	URI=$uri SIZE=${MIB}m RUNTIME=$RUNTIME fio --section=prefill \
		--output-format=json --output=$T/$target.prefill.json $FIOJOBS \
		|| { echo "bench_nbd.sh: $target: prefill failed" >&2; return 1; }
	for job in $JOBS; do
		URI=$uri SIZE=${MIB}m RUNTIME=$RUNTIME fio --section=$job \
			--output-format=json --output=$T/$target.$job.json \
			$FIOJOBS >&2 ||
			echo "bench_nbd.sh: $target $job failed" >&2
	done
}

wait_sock() {
	for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done
	return 1
}

# --- our stack, with and without cached
cat > $T/stack.conf <<CONF
dir = $T/stack
segment_size = 2G
cache_size = $((MIB * 2))M
verify_reads = on
CONF
$X stack start $T/stack.conf >&2 || exit 1
STORE=$(sed -n 's/^store = //p' $T/stack/run/stack.conf)
$X volume --dir $T/stack create bench ${MIB}M >&2 || exit 1
U="nbd+unix:///bench?socket=$T/stack/run/nbd.sock"
run_jobs stack_cached "$U"
$X stack unplug-cached --dir $T/stack >&2
run_jobs stack_nocached "$U"
$X stack stop --dir $T/stack >&2

# --- nbdkit memory
nbdkit -f -U $T/mem.sock memory size=${MIB}M & NBDKIT_PID=$!
wait_sock $T/mem.sock && run_jobs nbdkit_memory "nbd+unix:///?socket=$T/mem.sock"
kill $NBDKIT_PID; wait $NBDKIT_PID 2>/dev/null; NBDKIT_PID=

# --- nbdkit file behind the cache filter
truncate -s ${MIB}M $T/disk.img
nbdkit -f -U $T/file.sock --filter=cache file file=$T/disk.img cache=writeback & NBDKIT_PID=$!
wait_sock $T/file.sock && run_jobs nbdkit_file_cache "nbd+unix:///?socket=$T/file.sock"
kill $NBDKIT_PID; wait $NBDKIT_PID 2>/dev/null; NBDKIT_PID=

python3 - "$T" "$MIB" "$RUNTIME" "$STORE" $JOBS <<'PY'
import json, os, sys
d, mib, runtime, store, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
targets = ["stack_cached", "stack_nocached", "nbdkit_memory", "nbdkit_file_cache"]
res = {}
for t in targets:
    res[t] = {}
    for j in jobs:
        p = os.path.join(d, f"{t}.{j}.json")
        try:
            js = json.load(open(p))["jobs"][0]
        except Exception:
            res[t][j] = None
            continue
        side = js["write"] if "write" in j else js["read"]
        pct = side["clat_ns"].get("percentile", {})
        res[t][j] = {
            "iops": round(side["iops"], 1),
            "mib_s": round(side["bw_bytes"] / 1048576, 1),
            "lat_p50_us": round(pct.get("50.000000", 0) / 1000, 1),
            "lat_p99_us": round(pct.get("99.000000", 0) / 1000, 1),
            "errors": js.get("error", 0),
        }
ref = "nbdkit_file_cache"
ratio = {}
for t in ("stack_cached", "stack_nocached"):
    ratio[t] = {}
    for j in jobs:
        a, b = res[t].get(j), res[ref].get(j)
        ratio[t][j] = round(a["iops"] / b["iops"], 3) if a and b and b["iops"] else None
out = {
    "bench": "nbd",
    "size_mib": mib,
    "runtime_s": runtime,
    "store": store,
    "jobs": jobs,
    "results": res,
    "reference": ref,
    "iops_ratio_vs_reference": ratio,
    "goal": "stack_cached >= nbdkit_file_cache on every job",
}
print(json.dumps(out))
PY
