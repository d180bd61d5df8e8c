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
#   stack_cached_old the stack_cached of another build (--bin-old), e.g.
#                    the commit before a change
# Prints one JSON object: per target and job IOPS, MiB/s, completion
# latency p50/p99 (us), and each stack number's ratio to the reference.
# With --repeat N every job runs N times per target, the targets taking
# turns job by job (so a change of load on the shared machine hits them
# all alike); the numbers are the medians, "runs_iops" lists every run.
#
# With --cpu every run also counts, with `perf stat -p` over the middle
# of the run (from 1.5 s in, RUNTIME - 1 s long), the CPU time
# (task-clock) and context switches of each server process (vlmc, cached,
# the store; nbdkit) and of fio, divided by the commands fio completed
# meanwhile (IOPS x window): "cpu_us_per_cmd" and "cs_per_cmd", medians
# like the rest. On a shared machine these hold better than IOPS, which
# mostly measure the neighbours. Over the same window it also sums the
# run-queue wait of every thread of those processes (the second field of
# /proc/PID/task/*/schedstat): "runq_wait_us_per_cmd", time runnable but
# not running. Under load it is about the CPU time (the neighbours hold
# the cores); a server with little run-queue wait that still uses less
# of the cores than another is idle for want of work (gaps in the
# pipeline) rather than short of CPU. (Threads that exit during the
# window, e.g. fio's helpers, are missed; a sum that drops is left out.)
#
# Usage: bench_nbd.sh [--bin DIR] [--bin-old DIR] [--mib N] [--runtime S]
#                     [--repeat N] [--jobs "J ..."] [--targets "T ..."]
#                     [--stack-conf FILE] [--stack-conf-old FILE] [--cpu]
#                     [--nbdkit-cpus LIST]
#   --bin DIR      built programs (default: $AC_BIN_DIR or ./build/bin)
#   --bin-old DIR  also run stack_cached_old from these programs
#   --mib N        volume / disk size in MiB (default 256)
#   --runtime S    seconds per job (default 5)
#   --repeat N     runs of each job per target (default 1)
#   --jobs LIST    fio sections to run (default: all six)
#   --targets LIST targets to run (default: all of the above that apply)
#   --stack-conf FILE  lines appended to the stacks' config (e.g. spin)
#   --stack-conf-old FILE  for stack_cached_old instead (default: the
#                  same as --stack-conf); with --bin-old set to --bin this
#                  compares two configurations of one build
#   --cpu          CPU time and context switches per command (perf stat)
#   --nbdkit-cpus LIST  run the nbdkit targets under `taskset -c LIST`,
#                  e.g. to pin them as a stack config's `cpus = LIST` pins
#                  the stack's peers (a fair comparison pins both)
set -u
BIN=${AC_BIN_DIR:-./build/bin}
BIN_OLD=
MIB=256
RUNTIME=5
REPEAT=1
JOBS="seqwrite-1m seqread-1m randread-qd1 randread-qd16 randwrite-qd1 randwrite-qd16"
TARGETS=
EXTRA_CONF=
EXTRA_CONF_OLD=-
NBDKIT_CPUS=
CPU=0
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--bin-old) BIN_OLD=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--runtime) RUNTIME=$2; shift 2 ;;
	--repeat) REPEAT=$2; shift 2 ;;
	--jobs) JOBS=$2; shift 2 ;;
	--targets) TARGETS=$2; shift 2 ;;
	--stack-conf) EXTRA_CONF=$2; shift 2 ;;
	--stack-conf-old) EXTRA_CONF_OLD=$2; shift 2 ;;
	--cpu) CPU=1; shift ;;
	--nbdkit-cpus) NBDKIT_CPUS=$2; shift 2 ;;
	-h|--help) sed -n 2,52p "$0"; exit 0 ;;
	*) echo "bench_nbd.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
case $REPEAT in ''|*[!0-9]*|0) echo "bench_nbd.sh: bad --repeat $REPEAT" >&2; exit 2 ;; esac
for tool in fio nbdkit python3; do
	command -v $tool >/dev/null || { echo "bench_nbd.sh: $tool not installed" >&2; exit 1; }
done
BIN=$(cd "$BIN" && pwd) || exit 1
[ -n "$BIN_OLD" ] && { BIN_OLD=$(cd "$BIN_OLD" && pwd) || exit 1; }
[ -n "$EXTRA_CONF" ] && { [ -r "$EXTRA_CONF" ] || { echo "bench_nbd.sh: cannot read $EXTRA_CONF" >&2; exit 2; }; }
[ "$EXTRA_CONF_OLD" = - ] && EXTRA_CONF_OLD=$EXTRA_CONF
[ -n "$EXTRA_CONF_OLD" ] && { [ -r "$EXTRA_CONF_OLD" ] || { echo "bench_nbd.sh: cannot read $EXTRA_CONF_OLD" >&2; exit 2; }; }
[ $CPU = 1 ] && { command -v perf >/dev/null || { echo "bench_nbd.sh: --cpu needs perf" >&2; exit 1; }; }
[ $CPU = 1 ] && [ "$RUNTIME" -lt 2 ] && { echo "bench_nbd.sh: --cpu needs --runtime 2 or more" >&2; exit 2; }
if [ -z "$TARGETS" ]; then
	TARGETS="stack_cached stack_nocached nbdkit_memory nbdkit_file_cache"
	[ -n "$BIN_OLD" ] && TARGETS="$TARGETS stack_cached_old"
fi
has() { case " $TARGETS " in *" $1 "*) return 0 ;; esac; return 1; }
for t in $TARGETS; do
	case $t in
	stack_cached|stack_nocached|nbdkit_memory|nbdkit_file_cache) ;;
	stack_cached_old) [ -n "$BIN_OLD" ] || { echo "bench_nbd.sh: stack_cached_old needs --bin-old" >&2; exit 2; } ;;
	*) echo "bench_nbd.sh: unknown target $t" >&2; exit 2 ;;
	esac
done
FIOJOBS=$(cd "$(dirname "$0")" && pwd)/fio/nbd.fio
X=$BIN/xsegctl
T=$(mktemp -d /tmp/bench-nbd-XXXXXX)
MEM_PID=
FILE_PID=
STACKS=
cleanup() {
	[ -n "$MEM_PID" ] && kill $MEM_PID 2>/dev/null
	[ -n "$FILE_PID" ] && kill $FILE_PID 2>/dev/null
	for s in $STACKS; do
		"${s%%:*}"/xsegctl stack stop --dir "${s#*:}" >/dev/null 2>&1
	done
	rm -rf $T
}
trap cleanup EXIT
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

wait_sock() {
	for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done
	return 1
}

declare -A URI_OF
# with --cpu: "name:pid ..." of each target's server processes
declare -A PIDS_OF

# start_stack TARGET BINDIR CONF: a stack in $T/TARGET with volume "bench"
start_stack() {
	local target=$1 bin=$2 extra=$3 p
	cat > $T/$target.conf <<CONF
dir = $T/$target
segment_size = 2G
cache_size = $((MIB * 2))M
verify_reads = on
CONF
	[ -n "$extra" ] && cat "$extra" >> $T/$target.conf
	$bin/xsegctl stack start $T/$target.conf >&2 || return 1
	STACKS="$STACKS $bin:$T/$target"
	$bin/xsegctl volume --dir $T/$target create bench ${MIB}M >&2 || return 1
	URI_OF[$target]="nbd+unix:///bench?socket=$T/$target/run/nbd.sock"
	PIDS_OF[$target]=
	for p in vlmc cached store; do
		if [ -r $T/$target/run/$p.pid ]; then
			PIDS_OF[$target]="${PIDS_OF[$target]} $p:$(cat $T/$target/run/$p.pid)"
		fi
	done
}

# prefill TARGET: lay the data down (reads hit written blocks)
prefill() {
	URI=${URI_OF[$1]} SIZE=${MIB}m RUNTIME=$RUNTIME fio --section=prefill \
		--output-format=json --output=$T/$1.prefill.json $FIOJOBS >&2 \
		|| { echo "bench_nbd.sh: $1: prefill failed" >&2; return 1; }
}

# runq_wait PID[,PID...]: ns the threads of those processes have spent
# runnable but waiting for a CPU (schedstat's second field), summed
runq_wait() {
	local p
	for p in ${1//,/ }; do cat /proc/$p/task/*/schedstat 2>/dev/null; done |
		awk '{ w += $2 } END { printf "%.0f\n", w }'
}

# run_job TARGET JOB ROUND: results in $T/TARGET.JOB.ROUND.json; with
# --cpu, perf stat of each process in $T/TARGET.JOB.ROUND.NAME.cpu
run_job() {
	local fp np pp= out=$T/$1.$2.$3
	URI=${URI_OF[$1]} SIZE=${MIB}m RUNTIME=$RUNTIME fio --section=$2 \
		--output-format=json --output=$out.json $FIOJOBS >&2 &
	fp=$!
	if [ $CPU = 1 ]; then
		# past fio's ramp (1 s) and connection; fio's job process
		# is a child of the one started here
		sleep 1.5
		for np in ${PIDS_OF[$1]} fio:$fp$(pgrep -P $fp | sed 's/^/,/' | tr -d '\n'); do
			perf stat -x, -e task-clock,context-switches \
				-p ${np#*:} -o $out.${np%%:*}.cpu \
				-- sleep $((RUNTIME - 1)) >/dev/null 2>&1 &
			pp="$pp $!"
			{ runq_wait ${np#*:}; sleep $((RUNTIME - 1))
			  runq_wait ${np#*:}; } > $out.${np%%:*}.runq &
			pp="$pp $!"
		done
	fi
	wait $fp || echo "bench_nbd.sh: $1 $2 (run $3) failed" >&2
	[ -n "$pp" ] && wait $pp
}

# run_rounds TARGET...: every job REPEAT times, the targets taking turns
run_rounds() {
	local r job t
	for r in $(seq $REPEAT); do
		for job in $JOBS; do
			for t in "$@"; do run_job $t $job $r; done
		done
	done
}

STORE=
STACK_BIN=
if has stack_cached || has stack_nocached; then
	# stack_nocached is stack_cached's stack with cached unplugged
	start_stack stack_cached $BIN "$EXTRA_CONF" || exit 1
	STORE=$(sed -n 's/^store = //p' $T/stack_cached/run/stack.conf)
	STACK_BIN=$BIN
fi
if has stack_cached_old; then
	start_stack stack_cached_old $BIN_OLD "$EXTRA_CONF_OLD" || exit 1
fi
# taskset execs nbdkit: the pid is nbdkit's
NBDKIT=nbdkit
[ -n "$NBDKIT_CPUS" ] && NBDKIT="taskset -c $NBDKIT_CPUS nbdkit"
if has nbdkit_memory; then
	$NBDKIT -f -U $T/mem.sock memory size=${MIB}M & MEM_PID=$!
	wait_sock $T/mem.sock || exit 1
	URI_OF[nbdkit_memory]="nbd+unix:///?socket=$T/mem.sock"
	PIDS_OF[nbdkit_memory]="nbdkit:$MEM_PID"
fi
if has nbdkit_file_cache; then
	truncate -s ${MIB}M $T/disk.img
	$NBDKIT -f -U $T/file.sock --filter=cache file file=$T/disk.img \
		cache=writeback & FILE_PID=$!
	wait_sock $T/file.sock || exit 1
	URI_OF[nbdkit_file_cache]="nbd+unix:///?socket=$T/file.sock"
	PIDS_OF[nbdkit_file_cache]="nbdkit:$FILE_PID"
fi

TURNS=
for t in stack_cached stack_cached_old nbdkit_memory nbdkit_file_cache; do
	has $t || continue
	prefill $t || exit 1
	TURNS="$TURNS $t"
done
run_rounds $TURNS
if has stack_nocached; then
	$STACK_BIN/xsegctl stack unplug-cached --dir $T/stack_cached >&2
	URI_OF[stack_nocached]=${URI_OF[stack_cached]}
	PIDS_OF[stack_nocached]=${PIDS_OF[stack_cached]}
	prefill stack_nocached || exit 1
	run_rounds stack_nocached
fi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$T" "$MIB" "$RUNTIME" "$STORE" "$REPEAT" "$LOAD_START" "$LOAD_END" "$TARGETS" "$CPU" "$EXTRA_CONF" "$EXTRA_CONF_OLD" "$NBDKIT_CPUS" $JOBS <<'PY'
import glob, json, os, statistics, sys
d, mib, runtime, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
repeat, load_start, load_end = int(sys.argv[5]), sys.argv[6], sys.argv[7]
targets, cpu = sys.argv[8].split(), sys.argv[9] == "1"
confs = {}
for name, path in (("stack", sys.argv[10]), ("stack_cached_old", sys.argv[11])):
    confs[name] = open(path).read() if path else ""
nbdkit_cpus = sys.argv[12]
jobs = sys.argv[13:]


def perf_counts(path, cmds):
    """{"task-clock": us per command, "context-switches": per command}"""
    v = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0][:1].isdigit():
            v[f[2]] = float(f[0])
    if not cmds:
        return None
    return (v.get("task-clock", 0) * 1000 / cmds,  # msec -> us
            v.get("context-switches", 0) / cmds)


def runq_wait(path, cmds):
    """run-queue wait, us per command (two sums of schedstat, in ns)"""
    v = [float(x) for x in open(path).read().split()]
    # a thread that exits in the window takes its share out of the
    # second sum (fio's helpers): no figure rather than a wrong one
    if len(v) != 2 or not cmds or v[1] < v[0]:
        return None
    return (v[1] - v[0]) / 1000 / cmds
res = {}
for t in targets:
    res[t] = {}
    for j in jobs:
        runs = []
        cpus = []
        errors = 0
        for r in range(1, repeat + 1):
            p = os.path.join(d, f"{t}.{j}.{r}.json")
            try:
                js = json.load(open(p))["jobs"][0]
            except Exception:
                continue
            side = js["write"] if "write" in j else js["read"]
            pct = side["clat_ns"].get("percentile", {})
            errors += js.get("error", 0)
            runs.append((side["iops"], side["bw_bytes"] / 1048576,
                         pct.get("50.000000", 0) / 1000,
                         pct.get("99.000000", 0) / 1000))
            if cpu:
                c = {}
                for f in glob.glob(p[:-5] + ".*.cpu"):
                    name = f[len(p) - 4:-4]
                    try:
                        c[name] = perf_counts(f, side["iops"] * (runtime - 1))
                    except OSError:
                        pass
                    if c.get(name):
                        try:
                            w = runq_wait(f[:-4] + ".runq",
                                          side["iops"] * (runtime - 1))
                        except (OSError, ValueError):
                            w = None
                        c[name] = c[name] + (w,)
                cpus.append(c)
        if not runs:
            res[t][j] = None
            continue
        med = lambda k: statistics.median(x[k] for x in runs)  # noqa: E731
        res[t][j] = {
            "iops": round(med(0), 1),
            "mib_s": round(med(1), 1),
            "lat_p50_us": round(med(2), 1),
            "lat_p99_us": round(med(3), 1),
            "errors": errors,
            "runs_iops": [round(x[0], 1) for x in runs],
        }
        if cpus:
            us, cs, rq = {}, {}, {}
            for name in sorted({n for c in cpus for n in c}):
                got = [c[name] for c in cpus if c.get(name)]
                if got:
                    us[name] = round(statistics.median(g[0] for g in got), 2)
                    cs[name] = round(statistics.median(g[1] for g in got), 2)
                waits = [g[2] for g in got if g[2] is not None]
                if waits:
                    rq[name] = round(statistics.median(waits), 2)
            servers = [n for n in us if n != "fio"]
            us["server_total"] = round(sum(us[n] for n in servers), 2)
            res[t][j]["cpu_us_per_cmd"] = us
            res[t][j]["cs_per_cmd"] = cs
            if rq:
                rq["server_total"] = round(
                    sum(rq.get(n, 0) for n in servers), 2)
                res[t][j]["runq_wait_us_per_cmd"] = rq
ref = "nbdkit_file_cache"
ratio = {}
for t in targets:
    if not t.startswith("stack_"):
        continue
    ratio[t] = {}
    for j in jobs:
        a, b = res[t].get(j), (res.get(ref) or {}).get(j)
        ratio[t][j] = round(a["iops"] / b["iops"], 3) if a and b and b["iops"] else None
out = {
    "bench": "nbd",
    "size_mib": mib,
    "runtime_s": runtime,
    "repeat": repeat,
    "statistic": "median of repeat runs" if repeat > 1 else "single run",
    "loadavg_start": load_start,
    "loadavg_end": load_end,
    "store": store,
    "stack_conf_extra": confs["stack"],
    "nbdkit_cpus": nbdkit_cpus or None,
    "stack_cached_old_conf_extra": confs["stack_cached_old"],
    "jobs": jobs,
    "results": res,
    "reference": ref,
    "iops_ratio_vs_reference": ratio,
    "goal": "stack_cached >= nbdkit_file_cache on every job",
}
print(json.dumps(out))
PY
