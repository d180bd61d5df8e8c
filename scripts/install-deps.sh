#!/usr/bin/env bash
# Install the Debian packages this project builds, tests and benchmarks with.
# Idempotent: packages already present are skipped by apt-get, and the
# package index is refreshed only when something is missing.
set -euo pipefail

packages=(
	build-essential cmake pkg-config clang-format
	liburcu-dev libjemalloc-dev liburing-dev check libssl-dev
	fio python3
	# real NBD clients and the nbdkit reference, for tests and benchmarks
	libnbd-bin nbdkit qemu-utils
	# libFuzzer (scripts/fuzz.sh; its runtime is checked below)
	clang
	# test_stack_stop case 8 holds a peer inside its port bind at a
	# breakpoint (a race held in place instead of timed)
	gdb
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
updated=false
install() {
	echo "install-deps: installing: $*"
	if ! $updated; then
		$SUDO apt-get update -qq
		updated=true
	fi
	$SUDO apt-get install -y -qq --no-install-recommends "$@"
}

if [ ${#missing[@]} -gt 0 ]; then
	install "${missing[@]}"
fi

# libFuzzer's runtime comes in a package named after clang's major version
# (libclang-rt-14-dev on Debian 12), which --no-install-recommends may skip.
# Its file name and directory depend on the architecture and on how LLVM
# was built (lib/linux/libclang_rt.fuzzer-x86_64.a, -i386, -armhf...; or
# lib/x86_64-pc-linux-gnu/libclang_rt.fuzzer.a): clang names its
# compiler-rt builtins library, which the same package holds, and the
# fuzzer runtime is that name with "builtins" replaced.
builtins_rt=$(clang -print-libgcc-file-name --rtlib=compiler-rt)
rt_name=${builtins_rt##*/}
fuzzer_rt=${builtins_rt%/*}/${rt_name/builtins/fuzzer}
if [ ! -f "$fuzzer_rt" ]; then
	echo "install-deps: no libFuzzer runtime ($fuzzer_rt)"
	install "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
elif [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages already installed"
fi
