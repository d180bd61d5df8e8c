#!/bin/sh
# SPDX-License-Identifier: MIT
#
# IPC benchmark matrix of issue 3: bench_xseg -> noop through a private
# segment, 0-byte PING and 4 KiB READ, latency percentiles at iodepth 1 and
# requests/s at iodepth 1, 8, 32, 128, with both sides polling and both
# sides sleeping on the port futex. Prints one JSON object on stdout with
# the numbers, the reference they are compared with and the machine.
#
# Usage: bench/run_xseg_bench.sh [BIN_DIR] [SECONDS_PER_POINT]
#   BIN_DIR defaults to $AC_BIN_DIR, then build/bin next to this script.
#   Use a Release build (no sanitizers) for meaningful numbers.
#
# READs are served by noop --no-fill (the data buffer is not touched), as in
# the reference measurement of the original Archipelago xseg.
#
# Wake-up comparison: bench/run_xseg_bench.sh --wakes NEW_BIN OLD_BIN [SECS]
#   (XSEG_WAKES_ROUNDS=N repeats the whole matrix N times)
#   PING and 4 KiB READ at iodepth 1 and 16, both sides sleeping (spin 0)
#   and both polling, with the build in OLD_BIN (e.g. a worktree of an
#   older commit), and with NEW_BIN without and with --batch-signal; the
#   signals and futex wakes per request come from the new build's port
#   counters (the old build has none). One JSON object on stdout.
set -eu

if [ "${1:-}" = "--wakes" ]; then
	new=$2
	old=$3
	secs=${4:-3}
	segs=""
	npid=""
	wcleanup() {
		if [ -n "$npid" ]; then
			kill "$npid" 2>/dev/null || true
			wait "$npid" 2>/dev/null || true
		fi
		for s in $segs; do
			"$new/xsegctl" destroy "$s" >/dev/null 2>&1 || true
		done
	}
	trap wcleanup EXIT INT TERM
	load_before=$(cut -d' ' -f1-3 /proc/loadavg)
	out=""
	for ver in old new; do
		eval "bin=\$$ver"
		seg="/xwake-$ver-$$"
		segs="$segs $seg"
		"$bin/xsegctl" create --size 256M --requests 4096 "$seg"
	done
	# Every point runs the three variants back to back, each with its
	# own noop started for it (two polling noops would share the CPUs),
	# so that load drifting on a shared machine hits all three alike.
	for round in $(seq "${XSEG_WAKES_ROUNDS:-1}"); do
	for mode in sleep poll; do
		if [ "$mode" = sleep ]; then
			spin=0
			wait_args="--wait sleep --spin 0"
		else
			spin=60s
			wait_args="--wait poll"
		fi
		for op in ping read; do
			for qd in 1 16; do
				for v in old plain batch; do
					ver=new
					extra=""
					if [ "$v" = old ]; then
						ver=old
					elif [ "$v" = batch ]; then
						extra="--batch-signal"
					fi
					eval "bin=\$$ver"
					seg="/xwake-$ver-$$"
					"$bin/noop" -g "$seg" -p 0 -t 1 \
						--spin "$spin" --no-fill \
						--no-timestamps -v warn &
					npid=$!
					for _ in $(seq 100); do
						if "$bin/xsegctl" list "$seg" \
							2>/dev/null | grep -q noop; then
							break
						fi
						sleep 0.05
					done
					# shellcheck disable=SC2086
					r=$("$bin/bench_xseg" -g "$seg" -p 0 \
						-o "$op" -b 4k -q "$qd" \
						-T "${secs}s" $wait_args \
						$extra --json --no-progress)
					kill "$npid"
					wait "$npid" 2>/dev/null || true
					npid=""
					r="{\"build\":\"$ver\",\"round\":$round,\"result\":$r}"
					if [ -z "$out" ]; then out="$r"; else
						out="$out,
    $r"
					fi
				done
			done
		done
	done
	done
	cat <<EOF
{
  "benchmark": "xseg_wakeups",
  "command": "bench/run_xseg_bench.sh --wakes $new $old $secs",
  "machine": {"cpus": $(nproc), "loadavg_before": "$load_before",
              "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)"},
  "setup": "bench_xseg (own dynamic port) -> noop (1 worker, --no-fill --no-timestamps) on port 0; sleep: both spin 0; poll: both busy-poll",
  "reference": "build old (OLD_BIN) measured in the same run; new without --batch-signal signals once per request, as old does",
  "results": [
    $out
  ]
}
EOF
	exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
# proc_cpu_ticks PID: user + system clock ticks consumed so far
. "$here/../scripts/lib_proc_stat.sh"
bin=${1:-${AC_BIN_DIR:-$here/../build/bin}}
secs=${2:-2}
for p in noop bench_xseg xsegctl bench_xseg_floor; do
	if [ ! -x "$bin/$p" ]; then
		echo "run_xseg_bench: $bin/$p not found (build first)" >&2
		exit 1
	fi
done

seg="/xbench-$$"
noop_pid=""
cleanup() {
	if [ -n "$noop_pid" ]; then
		kill "$noop_pid" 2>/dev/null || true
		wait "$noop_pid" 2>/dev/null || true
	fi
	"$bin/xsegctl" destroy "$seg" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# The floor of a cross-process round trip on this machine, same run.
floor=$("$bin/bench_xseg_floor" 300000 | sed 's/^/    /')
"$bin/xsegctl" create --size 256M --requests 4096 "$seg"

# start_noop SPIN: (re)start the peer on port 0 with that spin time.
start_noop() {
	if [ -n "$noop_pid" ]; then
		kill "$noop_pid"
		wait "$noop_pid" 2>/dev/null || true
	fi
	"$bin/noop" -g "$seg" -p 0 -t 1 --spin "$1" --no-fill --no-timestamps \
		-v warn &
	noop_pid=$!
	for _ in $(seq 100); do
		if "$bin/xsegctl" list "$seg" 2>/dev/null | grep -q "noop"; then
			return
		fi
		sleep 0.05
	done
	echo "run_xseg_bench: noop did not start" >&2
	exit 1
}


results=""
add() {
	if [ -z "$results" ]; then results="$1"; else results="$results,
    $1"; fi
}

for mode in poll sleep; do
	if [ "$mode" = poll ]; then
		start_noop 60s # never sleeps during a point
		wait_args="--wait poll"
	else
		start_noop 0
		wait_args="--wait sleep --spin 0"
	fi
	for op in ping read; do
		for qd in 1 8 32 128; do
			# shellcheck disable=SC2086
			out=$("$bin/bench_xseg" -g "$seg" -p 0 -o "$op" -b 4k \
				-q "$qd" -T "${secs}s" $wait_args --json)
			add "$out"
		done
	done
	# An idle peer must not burn CPU: ticks used over one idle second
	# (after a busy spin phase, if any, has expired for sleep mode).
	if [ "$mode" = sleep ]; then
		sleep 0.2
		t0=$(proc_cpu_ticks "$noop_pid")
		sleep 1
		t1=$(proc_cpu_ticks "$noop_pid")
		idle_ticks=$((t1 - t0))
	fi
done

hz=$(getconf CLK_TCK)
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
cat <<EOF
{
  "benchmark": "xseg_ipc_roundtrip",
  "command": "bench/run_xseg_bench.sh $bin $secs",
  "machine": {"cpus": $(nproc), "cpu": "$cpu",
              "loadavg_before": "$load_before",
              "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
              "clocksource": "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"},
  "setup": "bench_xseg (1 thread, own dynamic port) -> noop (1 worker, --no-fill --no-timestamps) on one segment; poll: both busy-poll; sleep: both sleep on the port futex at once (spin 0)",
  "reference": {
    "source": "original Archipelago xseg bench -> dummy peer, both busy-polling, 4 KiB requests with untouched data, on this kind of 2-core machine (figures quoted in issue 3, not measured in this run)",
    "iodepth1_requests_per_s": 1000000,
    "iodepth1_mean_us": 0.6,
    "iodepth16_requests_per_s": [1200000, 1400000],
    "measured_floor":
$floor
  },
  "goals": {
    "iodepth1_p50_us_poll": 0.5,
    "iodepth1_p50_us_sleep": 15,
    "iodepth16_32_requests_per_s_poll": 2000000
  },
  "idle_noop_cpu_ticks_per_s": $idle_ticks,
  "clock_ticks_per_s": $hz,
  "results": [
    $results
  ]
}
EOF
