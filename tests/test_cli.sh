#!/bin/bash
# SPDX-License-Identifier: MIT
# Every program built into $AC_BIN_DIR keeps the command-line contract the
# README states: --help prints a usage on stdout and exits 0, --version
# prints "NAME VERSION" (peers: "NAME (TYPE) VERSION") and exits 0, and an option it does not know is
# refused with exit 2 and a message on stderr, before it does anything
# (the micro-benchmarks once read any argument as a number of seconds:
# `bench_xq --help` ran the benchmark). New programs are covered as they
# appear in the bin dir.
set -u
BIN=$(cd "${AC_BIN_DIR:?AC_BIN_DIR must name the built programs}" && pwd) || exit 1
fails=0
n=0
check() { # COND-EXIT-STATUS WHAT
	if [ "$1" -eq 0 ]; then echo "ok: $2"; else echo "FAIL: $2"; fails=$((fails + 1)); fi
}
T=$(mktemp -d /tmp/test-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
for p in "$BIN"/*; do
	[ -f "$p" ] && [ -x "$p" ] || continue
	name=$(basename "$p")
	n=$((n + 1))
	# a program that ignored the option would run for real: bounded, and
	# in a scratch directory so that nothing it makes is left behind
	(cd "$T" && timeout 60 "$p" --help > "$T/out" 2> "$T/err")
	rc=$?
	[ "$rc" -eq 0 ] && [ -s "$T/out" ] && grep -qi usage "$T/out"
	check $? "$name --help: exit 0 ($rc), a usage on stdout"
	(cd "$T" && timeout 60 "$p" --version > "$T/out" 2> "$T/err")
	rc=$?
	[ "$rc" -eq 0 ] && grep -Eq "^$name( \([a-z]+\))? [0-9]+\.[0-9]+\.[0-9]+$" "$T/out"
	check $? "$name --version: exit 0 ($rc), '$name X.Y.Z' ($(head -c 60 "$T/out"))"
	(cd "$T" && timeout 60 "$p" --no-such-option > "$T/out" 2> "$T/err")
	rc=$?
	[ "$rc" -eq 2 ] && [ -s "$T/err" ] && [ ! -s "$T/out" ]
	check $? "$name --no-such-option: exit 2 ($rc), said on stderr only"
done
# at least the peers, xsegctl and the benchmarks were found
[ "$n" -ge 10 ]
check $? "programs checked: $n"
[ "$fails" -eq 0 ]
