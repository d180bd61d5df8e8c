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
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages already installed"
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
