#!/bin/bash
# SPDX-License-Identifier: MIT
# scripts/install-deps.sh finds libFuzzer's runtime where clang keeps it,
# whatever the architecture and the runtime layout, and installs its
# package only when it is missing. clang runs with a scratch resource
# directory (and, for another architecture, --target); dpkg-query says
# every package is installed; apt-get and sudo only record their calls.
# The old check asked for the x86_64 file name: it took aarch64's runtime
# for missing and installed the package on every run.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init install_deps clang
SCRIPT=$TESTLIB_DIR/../scripts/install-deps.sh
REAL_CLANG=$(command -v clang)
major=$("$REAL_CLANG" -dumpversion | cut -d. -f1)

mkdir -p $T/bin
cat >$T/bin/clang <<EOF
#!/bin/sh
exec "$REAL_CLANG" -resource-dir="\$FAKE_RESOURCE" \$FAKE_TARGET "\$@"
EOF
printf '#!/bin/sh\necho "install ok installed"\n' >$T/bin/dpkg-query
printf '#!/bin/sh\necho "apt-get $*" >>%s/apt.log\n' $T >$T/bin/apt-get
printf '#!/bin/sh\nexec "$@"\n' >$T/bin/sudo
chmod +x $T/bin/*

# deps NAME TARGET FILE...: install-deps with clang for TARGET ("" =
# native) and the runtime files FILE... (relative to the resource dir)
deps() {
	local name=$1 target=$2 f
	shift 2
	export FAKE_RESOURCE=$T/$name FAKE_TARGET=$target
	for f in "$@"; do
		mkdir -p "$(dirname "$FAKE_RESOURCE/$f")"
		: >"$FAKE_RESOURCE/$f"
	done
	rm -f $T/apt.log
	PATH=$T/bin:$PATH bash "$SCRIPT" >$T/$name.out 2>&1 ||
		fail "$name: install-deps failed: $(cat $T/$name.out)"
}
# installs_nothing NAME: no apt-get call, and it said why
installs_nothing() {
	[ ! -e $T/apt.log ] && grep -q 'already installed' $T/$1.out &&
		ok "$1: runtime found, nothing installed" ||
		fail "$1: $(cat $T/$1.out) / $(cat $T/apt.log 2>/dev/null)"
}

# the layout of Debian's clang 14: lib/linux, the architecture in the name
deps aarch64 --target=aarch64-linux-gnu \
	lib/linux/libclang_rt.builtins-aarch64.a lib/linux/libclang_rt.fuzzer-aarch64.a
installs_nothing aarch64
# LLVM_ENABLE_PER_TARGET_RUNTIME_DIR: a directory per target triple
triple=$("$REAL_CLANG" -print-target-triple)
deps per_target "" lib/$triple/libclang_rt.builtins.a lib/$triple/libclang_rt.fuzzer.a
installs_nothing per_target
# the runtime missing: its package is installed
deps missing --target=aarch64-linux-gnu lib/linux/libclang_rt.builtins-aarch64.a
grep -q "apt-get install .*libclang-rt-$major-dev" $T/apt.log 2>/dev/null &&
	grep -q "no libFuzzer runtime ($T/missing/lib/linux/libclang_rt.fuzzer-aarch64.a)" \
		$T/missing.out &&
	ok "missing: libclang-rt-$major-dev installed, the file named" ||
	fail "missing: $(cat $T/missing.out) / $(cat $T/apt.log 2>/dev/null)"

finish "install-deps: libFuzzer's runtime found by clang's own name for it"
