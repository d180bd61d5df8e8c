#!/bin/bash
# SPDX-License-Identifier: MIT
# The shutdown flush of a write-back cache full of small objects, timed and
# checked: a volume of 4 KiB objects is written through NBD by fio with
# verify headers and no FLUSH at the end (everything acknowledged, nothing
# flushed), then `xsegctl stack stop` flushes it all to the store; the
# stack is started again and fio's verify pass reads every block back.
# Prints JSON: dirty bytes at the stop (cached's log), the stop's
# seconds and exit status, whether the segment was kept (a reported loss),
# the flush rate, and fio's verify exit status (0 = every block right).
#
# Session 13 found a stop of 3.68 GB of such data giving up after cached's
# 60 s --flush-timeout (then a bound on the whole flush) and losing 2.18 GB;
# with --old BIN the same runs with another build's programs first, for a
# comparison in one sitting.
#
# Usage: bench/stop_flush.sh [--bin BIN] [--old BIN] [--size SIZE]
#   --bin BIN    the programs measured (default $AC_BIN_DIR or ./build/bin)
#   --old BIN    programs of a reference build (optional)
#   --size SIZE  the volume (default 1g; 4g is session 13's reproducer:
#                it needs about 6 GiB of RAM and a few minutes)
set -u
. "$(dirname "$0")/lib_bigstack.sh"
bigstack_args 1g "$@"
bigstack_init stopflush

# one run with the programs in $1; prints its JSON object
run() {
	bigstack_start $1 || return 1
	fio --name=w --ioengine=nbd --uri=$URI --size=$SIZE --rw=write --bs=64k \
		--iodepth=4 --verify=crc32c --do_verify=0 --verify_state_save=0 >/dev/null || { echo "fio write failed" >&2; return 1; }
	local dirty t0 t1 rc kept=false
	t0=$(date +%s.%N)
	$B/xsegctl stack stop --dir $T/s > $T/stop.out 2>&1
	rc=$?
	t1=$(date +%s.%N)
	# what cached had to flush when its stop began (its log)
	dirty=$(sed -n 's/.*stopping: write-through, flushing \([0-9]*\) dirty bytes.*/\1/p' \
		$T/s/run/cached.log | tail -1)
	if [ -e /dev/shm/$SEG ]; then
		kept=true
		bigstack_stop # a stop that reported a loss keeps the segment
	fi
	$B/xsegctl stack start $T/s.conf >/dev/null || { echo "restart failed" >&2; return 1; }
	fio --name=w --ioengine=nbd --uri=$URI --size=$SIZE --rw=read --bs=64k \
		--iodepth=4 --verify=crc32c --verify_only=1 --verify_fatal=1 > $T/verify.out 2>&1
	local vrc=$?
	bigstack_stop
	python3 - "$B" "$dirty" "$t0" "$t1" "$rc" "$kept" "$vrc" <<'PY'
import json, sys
b, dirty, t0, t1, rc, kept, vrc = sys.argv[1:]
secs = float(t1) - float(t0)
dirty = int(dirty) if dirty else -1
print(json.dumps({"bin": b, "dirty_bytes_at_stop": dirty,
                  "stop_seconds": round(secs, 2), "stop_exit": int(rc),
                  "segment_kept": kept == "true",
                  "stop_mb_per_s": round(dirty / secs / 1e6, 1) if dirty > 0 and rc == "0" else None,
                  "verify_exit": int(vrc)}))
PY
}

echo "{\"bench\": \"stop_flush\", \"volume\": \"$SIZE of 4 KiB objects\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"runs\": ["
if [ -n "$OLD" ]; then
	run "$OLD" || exit 1
	echo ","
fi
run "$BIN" || exit 1
echo "]}"
