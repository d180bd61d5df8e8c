#!/usr/bin/env bash
# Run every test: build with AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan/ and run the whole suite with ctest. Extra arguments go to ctest
# (for example: ./test.sh -R xq).
set -euo pipefail
cd "$(dirname "$0")"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWERROR=ON -DAC_STRICT=ON \
	-DSANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$(nproc)"
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
