#!/bin/bash
# SPDX-License-Identifier: MIT
# Cross-process wake-ups per NBD command through the stack, counted, not
# timed: for fio 4 KiB randread and randwrite at iodepth 1 and 16 through
# vlmc -> cached (write-back) -> store (as bench/bench_nbd.sh starts it),
# the signals and FUTEX_WAKE syscalls of the cached port (vlmc's next
# port), the store port, vlmc's port and the NBD connection's own dynamic
# port (conn_port: the replies its completer or reader receive;
# xseg_port_info: signals, wakes), read 1 s into each job and 1 s before
# its end (the connection's port exists only while fio is connected) and
# divided by the object requests the connection received meanwhile (one
# per 4 KiB command).
# Signals and wake-ups per command do not depend on how loaded the machine
# is the way IOPS do; IOPS are printed too, but on a shared machine they
# are only indicative.
#
# With --old, two builds run in the same sitting, alternating per round
# (old, new, old, new ...), each with a fresh stack, and the JSON holds
# both and the new/old ratios: e.g. a release build of the commit before a
# change (git worktree) against one of the change.
#
# Usage: nbd_wakes.sh [--new BIN] [--old BIN] [--mib N] [--runtime S]
#                     [--rounds N] [--jobs "JOB ..."]
#   --new BIN    built programs measured (default: $AC_BIN_DIR or
#                ./build/bin); its build tree (BIN/..) provides libxseg
#                for the counter reader compiled on the fly
#   --old BIN    programs of the reference build (optional)
#   --mib N      volume size in MiB (default 256)
#   --runtime S  seconds per fio job (default 5, at least 3)
#   --rounds N   rounds per build (default 1; counts are summed)
#   --jobs LIST  some of randread-qd1 randread-qd16 randwrite-qd1
#                randwrite-qd16 (default: all four)
set -u
NEW=${AC_BIN_DIR:-./build/bin}
OLD=
MIB=256
RUNTIME=5
ROUNDS=1
JOBS="randread-qd1 randread-qd16 randwrite-qd1 randwrite-qd16"
while [ $# -gt 0 ]; do
	case $1 in
	--new) NEW=$2; shift 2 ;;
	--old) OLD=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--runtime) RUNTIME=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--jobs) JOBS=$2; shift 2 ;;
	-h|--help) sed -n 2,28p "$0"; exit 0 ;;
	*) echo "nbd_wakes.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for tool in fio python3 cc; do
	command -v $tool >/dev/null || { echo "nbd_wakes.sh: $tool not installed" >&2; exit 1; }
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
NEW=$(cd "$NEW" && pwd) || exit 1
[ -n "$OLD" ] && { OLD=$(cd "$OLD" && pwd) || exit 1; }
T=$(mktemp -d /tmp/nbd-wakes-XXXXXX)
CUR=
cleanup() {
	[ -n "$CUR" ] && $CUR/xsegctl stack stop --dir $T/stack >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT
[ "$RUNTIME" -ge 3 ] 2>/dev/null || { echo "nbd_wakes.sh: --runtime must be at least 3" >&2; exit 2; }
for job in $JOBS; do
	case $job in
	rand*-qd*) ;;
	*) echo "nbd_wakes.sh: unknown job $job" >&2; exit 2 ;;
	esac
done
# The counter reader: "port dynamic signals wakes received", one line per
# bound port (the stack's static ports 1 store, 2 cached, 3 vlmc, and
# the NBD connections' dynamic ports).
LIBS=$(find "$NEW/.." -name 'libxseg.a' -o -name 'libxq.a' -o \
	-name 'libxobj.a' -o -name 'libxheap.a' -o -name 'libxlock.a' |
	sort | tr '\n' ' ')
cat > $T/portctr.c <<'C'
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "xseg.h"
int main(int argc, char **argv)
{
	struct xseg *seg;
	char err[256];

	if (argc != 2 || xseg_join(argv[1], &seg, err, sizeof(err))) {
		fprintf(stderr, "portctr: %s\n", argc != 2 ? "usage" : err);
		return 1;
	}
	for (uint32_t port = 0;; port++) {
		struct xseg_port_info pi;

		if (xseg_port_info(seg, port, &pi))
			break; /* past the last port */
		if (!pi.bound)
			continue;
		printf("%" PRIu32 " %d %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		       port, pi.dynamic, pi.signals, pi.wakes, pi.received);
	}
	xseg_leave(seg);
	return 0;
}
C
# the archives depend on each other: list them twice
cc -O2 -I"$SRC/xseg" -o $T/portctr $T/portctr.c $LIBS $LIBS -lpthread -lrt ||
	{ echo "nbd_wakes.sh: cannot build the counter reader" >&2; exit 1; }

# run_build NAME BIN ROUND: fresh stack, prefill, every job with counters
run_build() {
	local name=$1 bin=$2 round=$3 seg uri job rw depth
	CUR=$bin
	cat > $T/stack.conf <<CONF
dir = $T/stack
segment_size = 2G
cache_size = $((MIB * 2))M
verify_reads = on
CONF
	$bin/xsegctl stack start $T/stack.conf >&2 || return 1
	seg=$(sed -n 's/^segment = //p' $T/stack/run/stack.conf)
	$bin/xsegctl volume --dir $T/stack create bench ${MIB}M >&2 || return 1
	uri="nbd+unix:///bench?socket=$T/stack/run/nbd.sock"
	fio --name=prefill --ioengine=nbd --uri="$uri" --rw=write --bs=1m \
		--iodepth=4 --size=${MIB}m --output=/dev/null >&2 ||
		echo "nbd_wakes.sh: $name: prefill failed" >&2
	for job in $JOBS; do
		rw=${job%-qd*}
		depth=${job#*-qd}
		fio --name=$job --ioengine=nbd --uri="$uri" --rw=$rw --bs=4k \
			--iodepth=$depth --size=${MIB}m --time_based=1 \
			--runtime=$RUNTIME --randrepeat=0 --output-format=json \
			--output=$T/$name.$round.$job.json >&2 &
		fpid=$!
		sleep 1
		$T/portctr "$seg" > $T/$name.$round.$job.before
		sleep $((RUNTIME - 2))
		$T/portctr "$seg" > $T/$name.$round.$job.after
		wait $fpid || echo "nbd_wakes.sh: $name $job failed" >&2
	done
	$bin/xsegctl stack stop --dir $T/stack >&2
	CUR=
	rm -rf $T/stack
}

BUILDS="new"
[ -n "$OLD" ] && BUILDS="old new"
for round in $(seq $ROUNDS); do
	for b in $BUILDS; do
		[ $b = old ] && bin=$OLD || bin=$NEW
		run_build $b $bin $round || { echo "nbd_wakes.sh: $b: stack failed" >&2; exit 1; }
	done
done

python3 - "$T" "$MIB" "$RUNTIME" "$ROUNDS" "$NEW" "$OLD" "$BUILDS" $JOBS <<'PY'
import json, os, sys
d, mib, runtime, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bins = {"new": sys.argv[5], "old": sys.argv[6]}
builds, jobs = sys.argv[7].split(), sys.argv[8:]
names = {1: "store_port", 2: "cached_port", 3: "vlmc_port"}
CONN = "conn_port"

def counters(p):
    """port -> (signals, wakes, received, dynamic)"""
    out = {}
    for line in open(p):
        port, dyn, sig, wak, rcv = (int(x) for x in line.split())
        out[port] = (sig, wak, rcv, dyn)
    return out

def delta(before, after, port):
    a, b = after.get(port), before.get(port)
    if not a or not b:
        return (0, 0, 0)
    # signals wrap at 2^32 (xseg.h)
    return ((a[0] - b[0]) % (1 << 32), a[1] - b[1], a[2] - b[2])

res = {}
for b in builds:
    res[b] = {"bin": bins[b], "jobs": {}}
    for j in jobs:
        ios = 0; iops = []
        cnt = {n: [0, 0] for n in list(names.values()) + [CONN]}
        ok = True
        for r in range(1, rounds + 1):
            base = os.path.join(d, f"{b}.{r}.{j}")
            try:
                js = json.load(open(base + ".json"))["jobs"][0]
                before, after = counters(base + ".before"), counters(base + ".after")
            except Exception:
                ok = False
                break
            side = js["write"] if "write" in j else js["read"]
            iops.append(round(side["iops"], 1))
            for port, n in names.items():
                sig, wak, _ = delta(before, after, port)
                cnt[n][0] += sig
                cnt[n][1] += wak
            # the connection's dynamic port (bound in both readings):
            # the replies it received are the commands of the window
            for port, v in after.items():
                if v[3] and port in before:
                    sig, wak, rcv = delta(before, after, port)
                    cnt[CONN][0] += sig
                    cnt[CONN][1] += wak
                    ios += rcv
        if not ok or not ios:
            res[b]["jobs"][j] = None
            continue
        e = {"ios": ios, "iops": iops}
        for n, (sig, wak) in cnt.items():
            e[n] = {"signals": sig, "wakes": wak,
                    "signals_per_io": round(sig / ios, 4),
                    "wakes_per_io": round(wak / ios, 4)}
        res[b]["jobs"][j] = e
out = {
    "bench": "nbd_wakes",
    "size_mib": mib,
    "runtime_s": runtime,
    "rounds": rounds,
    "jobs": jobs,
    "results": res,
    "note": "signals/wakes per command are counts (independent of load) "
            "over the middle of each job (1 s in to 1 s before the end), "
            "per object request the NBD connection received (one per "
            "4 KiB command); iops on a shared, loaded machine are "
            "indicative only",
}
if "old" in res:
    out["reference"] = "old"
    ratio = {}
    for j in jobs:
        a, b = res["new"]["jobs"].get(j), res["old"]["jobs"].get(j)
        if not a or not b:
            ratio[j] = None
            continue
        def r(x, y):
            return round(x / y, 3) if y else None
        ratio[j] = {
            "cached_port_wakes_per_io": r(a["cached_port"]["wakes_per_io"], b["cached_port"]["wakes_per_io"]),
            "conn_port_wakes_per_io": r(a[CONN]["wakes_per_io"], b[CONN]["wakes_per_io"]),
            "cached_port_signals_per_io": r(a["cached_port"]["signals_per_io"], b["cached_port"]["signals_per_io"]),
            "iops": r(sum(a["iops"]) / len(a["iops"]), sum(b["iops"]) / len(b["iops"])),
        }
    out["ratio_new_vs_old"] = ratio
print(json.dumps(out))
PY
