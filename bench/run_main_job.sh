#!/bin/bash
# SPDX-License-Identifier: MIT
# The main job on the embedded default stack:
#   start the stack (xsegctl stack start: store, cached write-back plugged,
#   vlmc with NBD), create volumes, run a verified bench_xseg load through
#   vlmc -> cached -> store and a verified fio job through NBD, print the
#   results as one JSON object, stop the stack.
# Usage: run_main_job.sh [--bin DIR] [--mib N]
#   --bin DIR  built programs (default: $AC_BIN_DIR or ./build/bin)
#   --mib N    size of each load in MiB (default 64)
# Data goes to ./archcache-data (kept after the run; remove it to start
# afresh). Exit status 0 when both loads verified without error.
set -u
BIN=${AC_BIN_DIR:-./build/bin}
MIB=64
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	-h|--help) sed -n 2,13p "$0"; exit 0 ;;
	*) echo "run_main_job.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
BIN=$(cd "$BIN" && pwd) || exit 1
X=$BIN/xsegctl
command -v fio >/dev/null || { echo "run_main_job.sh: fio not installed" >&2; exit 1; }
$X stack start || exit 1
trap '$X stack stop' EXIT
SEG=$(sed -n 's/^segment = //p' archcache-data/run/stack.conf)
SOCK=$(sed -n 's/^nbd_socket = //p' archcache-data/run/stack.conf)
STORE=$(sed -n 's/^store = //p' archcache-data/run/stack.conf)
T=$(mktemp -d /tmp/main-job-XXXXXX)
trap '$X stack stop; rm -rf $T' EXIT
status=0

# bench_xseg addresses objects PREFIX_000000...: one volume of that name
$X volume info mainx_000000 >/dev/null 2>&1 ||
	$X volume create mainx_000000 ${MIB}M || exit 1
for op in write read; do
	$BIN/bench_xseg -g "$SEG" -p 3 --prefix mainx -O ${MIB}M -n 1 \
		-b 64k -q 16 -P rand --verify -o $op --json --no-progress \
		> $T/xseg-$op.json || status=1
done

$X volume info mainnbd >/dev/null 2>&1 ||
	$X volume create mainnbd ${MIB}M || exit 1
fio --name=main --ioengine=nbd --uri="nbd+unix:///mainnbd?socket=$SOCK" \
	--rw=randwrite --bs=4k --iodepth=16 --size=${MIB}M \
	--verify=crc32c --verify_fatal=1 --do_verify=1 \
	--output-format=json --output=$T/fio.json || status=1

$X stack status --json > $T/status.json
python3 - "$T" "$MIB" "$STORE" "$status" <<'PY'
import json, sys
d, mib, store, status = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def load(name):
    try:
        return json.load(open(f"{d}/{name}"))
    except Exception as e:
        return {"error": str(e)}
fio = load("fio.json")
fj = fio.get("jobs", [{}])[0] if "jobs" in fio else {}
print(json.dumps({
    "main_job": "vlmc -> cached -> %s" % store,
    "size_mib": mib,
    "bench_xseg_write": load("xseg-write.json"),
    "bench_xseg_read_verify": load("xseg-read.json"),
    "fio_nbd_randwrite_verify": {
        "error": fj.get("error"),
        "write_iops": round(fj.get("write", {}).get("iops", 0), 1),
        "verify_read_iops": round(fj.get("read", {}).get("iops", 0), 1),
    },
    "stack": load("status.json"),
    "ok": status == 0,
}, indent=1))
PY
exit $status
