#!/bin/bash
# SPDX-License-Identifier: MIT
# 1 K vs 1 M cached objects through the whole stack (NBD, fio randread qd1;
# issue 6). Usage: bench/scale_nbd.sh [BIN_DIR [ROUNDS]]
# one stack with a 5 GiB cache indexing 1.2 M objects (cache_max_objects),
# volumes of 4 KiB objects; volume "hot" (4 MiB: 1024 objects) and "big"
# (4 GiB: 1 M objects), both written first (all in cache) and flushed (the
# prefill ends with an NBD FLUSH: no write-back data is left to flush in
# the background while the reads are measured; session 13's run had it,
# and its spread), then alternating 3 s fio randread qd1 jobs on each.
# Prints JSON, with how long each prefill and its flush took.
set -u
B=${1:-./build/bin}; N=${2:-3}
T=$(mktemp -d /tmp/scalenbd-XXXXXX)
# The data is thrown away; should the stop report a write-back loss, it
# keeps the segment as the record: destroyed here.
cleanup() {
	local seg
	seg=$(sed -n 's/^segment = //p' $T/s/run/stack.conf 2>/dev/null)
	$B/xsegctl stack stop --dir $T/s >/dev/null 2>&1
	[ -n "$seg" ] && [ -e /dev/shm/$seg ] && $B/xsegctl destroy $seg >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT
printf 'dir = %s/s\nsegment_size = 2G\ncache_size = 5G\ncache_max_objects = 1200000\nverify_reads = on\n' $T > $T/s.conf
$B/xsegctl stack start $T/s.conf >/dev/null 2>&1 || { echo start failed >&2; exit 1; }
$B/xsegctl volume --dir $T/s create hot 4M 4k >/dev/null || exit 1
$B/xsegctl volume --dir $T/s create big 4G 4k >/dev/null || exit 1
F=$(cd "$(dirname "$0")" && pwd)/fio/nbd.fio
for v in hot big; do
	t0=$(date +%s%N)
	URI="nbd+unix:///$v?socket=$T/s/run/nbd.sock" SIZE=$([ $v = hot ] && echo 4m || echo 4g) RUNTIME=3 \
		fio --end_fsync=1 --section=prefill $F >/dev/null || exit 1
	echo "$v $((($(date +%s%N) - t0) / 1000000))" >> $T/prefill_s
done
SEG=$(sed -n 's/^segment = //p' $T/s/run/stack.conf)
# what cached still holds dirty as the reads start (0 if the FLUSH did
# it): from a publication made after the FLUSH (cached publishes its
# statistics every second)
sleep 2
$B/xsegctl stats $SEG 2 --json > $T/cstats_before.json 2>&1
for i in $(seq $N); do
	for v in hot big; do
		URI="nbd+unix:///$v?socket=$T/s/run/nbd.sock" SIZE=$([ $v = hot ] && echo 4m || echo 4g) RUNTIME=3 \
			fio --section=randread-qd1 --output-format=json --output=$T/$v.$i.json $F >/dev/null || exit 1
	done
done
$B/xsegctl stats $SEG 2 > $T/cstats 2>&1
python3 - $T $N "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys, statistics, re
T, N, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {"bench": "scale_nbd", "job": "fio randread qd1 4k through vlmc -> cached -> blocker",
       "loadavg_end": load, "runs": {}}
for v in ("hot", "big"):
    r = []
    for i in range(1, N + 1):
        j = json.load(open(f"{T}/{v}.{i}.json"))["jobs"][0]["read"]
        r.append({"iops": round(j["iops"]), "lat_p50_us": j["clat_ns"]["percentile"]["50.000000"] / 1000,
                  "lat_mean_us": round(j["clat_ns"]["mean"] / 1000, 1)})
    out["runs"][v] = r
    out[v + "_p50_us_median"] = statistics.median(x["lat_p50_us"] for x in r)
    out[v + "_iops_median"] = statistics.median(x["iops"] for x in r)
out["prefill_and_flush_s"] = {l.split()[0]: round(int(l.split()[1]) / 1000, 1)
                              for l in open(T + "/prefill_s")}
try:
    before = json.load(open(T + "/cstats_before.json"))
    out["cached_dirty_bytes_before_reads"] = before["peer_stats"]["counters"]["dirty_bytes"]
except (ValueError, OSError, KeyError, TypeError) as e:
    out["cached_dirty_bytes_before_reads"] = "unreadable: %s" % e
out["p50_ratio_big_over_hot"] = round(out["big_p50_us_median"] / out["hot_p50_us_median"], 3)
st = open(T + "/cstats").read()
m = re.search(r"objects\S*\s+(\d+)", st)
out["cached_stats_objects_line"] = [l.strip() for l in st.splitlines() if "object" in l][:6]
print(json.dumps(out, indent=1))
PY
