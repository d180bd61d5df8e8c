#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# FUA writes through the blocker PEER (issue 5's FUA case as a client sees
# it): bench_xseg, 4 KiB random writes with XSEG_F_FUA at iodepth 16, to a
# blocker peer on a fresh store, next to the same load against the blocker
# of another build (--bin-old, e.g. the previous version) in the same run,
# the two taking turns. Per run: IOPS, p50/p99 latency, the store's writes
# per fsync (xsegctl stats) and the peer's CPU per write (/proc/PID/stat);
# prints one JSON object with every run and the medians per peer.
#
# Usage: bench_blocker_fua_peer.sh [--bin DIR] [--bin-old DIR]
#            [--threads N] [--seconds S] [--repeat N] [--dir DIR]
#   --bin DIR      built programs (default: $AC_BIN_DIR or ./build/bin);
#                  xsegctl and bench_xseg always come from here
#   --bin-old DIR  also run the blocker of that build
#   --threads N    the peer's worker threads (-t; default 2, the stack's)
#   --seconds S    per run (default 4)
#   --repeat N     runs per peer (default 3)
#   --dir DIR      where the stores go (default: a temporary directory
#                  under /tmp; the disk measured is that one's)
set -euo pipefail
# proc_cpu_ticks PID: the peer's CPU time
. "$(dirname "$0")/../scripts/lib_proc_stat.sh"

bin=${AC_BIN_DIR:-./build/bin}
bin_old=
threads=2
secs=4
repeat=3
base=
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=$2; shift 2 ;;
	--bin-old) bin_old=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--seconds) secs=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--dir) base=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | cut -c3-; exit 0 ;;
	*) echo "bench_blocker_fua_peer.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
for p in xsegctl bench_xseg blocker; do
	[ -x "$bin/$p" ] || { echo "no $bin/$p (build first)" >&2; exit 2; }
done
[ -z "$bin_old" ] || [ -x "$bin_old/blocker" ] ||
	{ echo "no $bin_old/blocker" >&2; exit 2; }

work=$(mktemp -d "${base:-/tmp}/fua_peer.XXXXXX")
seg=fuapeer$$
pid=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
	"$bin/xsegctl" destroy "$seg" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

stat_of() { "$bin/xsegctl" stats "$seg" 1 | awk -v k="$1" '$1==k {print $2}'; }

# one run: prints one JSON line
one_run() {
	local name=$1 blocker=$2 out c0 c1 w0 w1 f0 f1
	"$bin/xsegctl" create --size 256M --requests 4096 "$seg" >/dev/null
	rm -rf "$work/s"
	"$blocker" -g "$seg" -p 1 --store "$work/s" --create -t "$threads" \
		-v warn >"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		"$bin/xsegctl" list "$seg" 2>/dev/null | grep -q blocker && break
		sleep 0.05
	done
	# the objects exist before the measured writes (not FUA)
	"$bin/bench_xseg" -g "$seg" -p 1 -o write -P seq -b 4M -O 4M -n 4 \
		-q 4 --json >/dev/null
	sleep 1.2 # stats are published about once a second
	w0=$(stat_of writes); f0=$(stat_of fsyncs)
	c0=$(proc_cpu_ticks "$pid")
	out=$("$bin/bench_xseg" -g "$seg" -p 1 -o write --fua -P rand -b 4k \
		-O 4M -n 4 -q 16 -T "${secs}s" --json)
	c1=$(proc_cpu_ticks "$pid")
	sleep 1.2
	w1=$(stat_of writes); f1=$(stat_of fsyncs)
	kill -TERM "$pid"; wait "$pid" || true; pid=
	"$bin/xsegctl" destroy "$seg" >/dev/null
	python3 - "$name" "$out" "$w0" "$w1" "$f0" "$f1" "$c0" "$c1" \
		"$(getconf CLK_TCK)" <<'PY'
import json, sys
name, out = sys.argv[1], json.loads(sys.argv[2])
w0, w1, f0, f1, c0, c1, tck = map(int, sys.argv[3:10])
w, f = w1 - w0, f1 - f0
print(json.dumps({"peer": name, "iops": round(out["iops"]),
    "errors": out["errors"],
    "p50_us": round(out["lat_ns"]["p50"] / 1e3, 1),
    "p99_us": round(out["lat_ns"]["p99"] / 1e3, 1),
    "writes_per_fsync": round(w / f, 2) if f else None,
    "peer_cpu_us_per_write": round((c1 - c0) / tck * 1e6 / w, 1) if w else None}))
PY
}

runs=$work/runs
: >"$runs"
for _ in $(seq "$repeat"); do
	one_run new "$bin/blocker" >>"$runs"
	[ -z "$bin_old" ] || one_run old "$bin_old/blocker" >>"$runs"
done
python3 - "$runs" "$threads" "$secs" "$(cat /proc/loadavg)" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for peer in sorted({r["peer"] for r in runs}):
    mine = [r for r in runs if r["peer"] == peer]
    med[peer] = {k: statistics.median(r[k] for r in mine if r[k] is not None)
                 for k in ("iops", "p50_us", "writes_per_fsync",
                           "peer_cpu_us_per_write")}
res = {"bench": "blocker_fua_peer", "write_size": 4096, "iodepth": 16,
       "peer_threads": int(sys.argv[2]), "seconds": float(sys.argv[3]),
       "loadavg_end": sys.argv[4], "median": med, "runs": runs}
if "old" in med and med["old"]["iops"]:
    res["new_vs_old_iops"] = round(med["new"]["iops"] / med["old"]["iops"], 2)
print(json.dumps(res))
PY
