#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Coverage-guided fuzzing of the fuzz targets (tests/fuzz/fuzz_*.c) with
# libFuzzer, for a fixed time each (docs/fuzzing.md).
#
# usage: scripts/fuzz.sh [--seconds S] [--build DIR] [TARGET ...]
#   --seconds S  time per target (default 60)
#   --build DIR  clang build tree (default build-fuzz): configured with
#                -DAC_FUZZ=ON -DSANITIZE=address,undefined
#   TARGET       fuzz_nbd_proto fuzz_xseg_request fuzz_blocker_record
#                fuzz_blocker_log fuzz_blocker_gc fuzz_vlmc_meta
#                fuzz_stack_conf fuzz_vlmc_ctl (default: all)
#
# Each target starts from its seeds in tests/fuzz/corpus/TARGET (read
# only) and a working corpus DIR/corpus/TARGET that grows and is kept
# between runs. A failure (a sanitizer report, a broken invariant, a leak,
# an input running over 30 s) stops the script with exit 1 after printing
# the input's path and the command that replays it; libFuzzer saved the
# input in DIR/crash/TARGET/. Once the bug is fixed, copy that input into
# tests/fuzz/corpus/TARGET/ as crash-WHAT: ctest replays every file there
# in every build (the driver in tests/fuzz/fuzz_driver.c).
# Prints one JSON line per target: its executions, corpus and coverage.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
build=build-fuzz
targets=()
while [ $# -gt 0 ]; do
	case "$1" in
	--seconds)
		[ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || {
			echo "fuzz.sh: --seconds needs a positive number" >&2
			exit 2
		}
		seconds=$2
		shift 2
		;;
	--build)
		[ $# -ge 2 ] || { echo "fuzz.sh: --build needs a directory" >&2; exit 2; }
		build=$2
		shift 2
		;;
	--help)
		# the comment at the top, up to the first line of code
		awk 'NR >= 3 && /^#/ { sub(/^# ?/, ""); print; next } NR >= 3 { exit }' "$0"
		exit 0
		;;
	-*)
		echo "fuzz.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	*)
		targets+=("$1")
		shift
		;;
	esac
done
all=(fuzz_nbd_proto fuzz_xseg_request fuzz_blocker_record fuzz_blocker_log
	fuzz_blocker_gc fuzz_vlmc_meta fuzz_stack_conf fuzz_vlmc_ctl)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
	[[ " ${all[*]} " == *" $t "* ]] || {
		echo "fuzz.sh: unknown target '$t' (known: ${all[*]})" >&2
		exit 2
	}
done

if ! command -v clang >/dev/null; then
	echo "fuzz.sh: clang not found (scripts/install-deps.sh installs it)" >&2
	exit 1
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' \
	>"$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
	echo "fuzz.sh: clang cannot link libFuzzer (Debian: libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev):" >&2
	cat "$probe/err" >&2
	exit 1
fi

CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DAC_FUZZ=ON \
	-DSANITIZE=address,undefined >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
for t in "${targets[@]}"; do
	work="$build/corpus/$t"
	crash="$build/crash/$t"
	mkdir -p "$work" "$crash"
	seeds=()
	[ -d "tests/fuzz/corpus/$t" ] && seeds=("$PWD/tests/fuzz/corpus/$t")
	log="$build/fuzz-$t.log"
	# scratch files (the blocker target's store) on tmpfs, as in ctest
	if ! (cd "$build" && TMPDIR=/dev/shm "./fuzz/$t" -max_total_time="$seconds" \
		-max_len=4096 -timeout=30 -print_final_stats=1 \
		-artifact_prefix="crash/$t/" "corpus/$t" \
		"${seeds[@]}") >"$log" 2>&1; then
		tail -n 60 "$log" >&2
		input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
		echo "fuzz.sh: $t failed; the input: $build/${input:-crash/$t/}" >&2
		echo "fuzz.sh: replay: $build/fuzz/$t $build/${input:-crash/$t/INPUT}" \
			"(any build of $t, e.g. build-asan/fuzz/$t FILE)" >&2
		exit 1
	fi
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)
	files=$(find "$work" -type f | wc -l)
	echo "{\"target\":\"$t\",\"seconds\":$seconds,\"execs\":${execs:-0},\"corpus_files\":$files,\"coverage_edges\":${cov:-0}}"
done
