#!/usr/bin/env bash
# The main job, on the embedded default stack (no config needed):
#   1. build (Release) into build/ if needed;
#   2. start the stack in a fresh directory: segment in /dev/shm, blocker
#      store on disk, cached (write-back) in front of it, vlmc with its NBD
#      socket;
#   3. create a volume and run a verified bench_xseg write + read load
#      through vlmc -> cached -> blocker;
#   4. run a verified fio job through NBD on a second volume;
#   5. stop the stack (cached flushes, the store checkpoints), check the
#      store offline, and print the results.
#
# Usage: ./run.sh [--smoke] [--dir DIR] [--keep]
#   --smoke   small sizes (CI)
#   --dir     stack directory (default ./archcache-demo, emptied first)
#   --keep    leave the stack running at the end (stop it with
#             'build/bin/xsegctl stack stop --dir DIR')
set -euo pipefail
cd "$(dirname "$0")"
top=$PWD

size=512M
fio_size=128M
dir=$top/archcache-demo
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--smoke) size=64M; fio_size=32M ;;
	--dir) dir=$(realpath -m "$2"); shift ;;
	--keep) keep=1 ;;
	-h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

for tool in cmake fio python3; do
	command -v $tool >/dev/null || {
		echo "run.sh: $tool not found: run scripts/install-deps.sh" >&2
		exit 1
	}
done

echo "== build (Release, build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
bin=$top/build/bin

xsegctl() { "$bin/xsegctl" "$@"; }

stop_stack() {
	if [ "$keep" -eq 0 ] && [ -d "$dir/run" ]; then
		echo "== stop the stack"
		xsegctl stack stop --dir "$dir" || true
	fi
}

echo "== start the stack in $dir (embedded default configuration)"
rm -rf "$dir"
xsegctl stack start --dir "$dir"
trap stop_stack EXIT
segment=$(xsegctl stack status --dir "$dir" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["segment"])')
vlmc_port=$(xsegctl stack status --dir "$dir" --json |
	python3 -c 'import json,sys
s = json.load(sys.stdin)
print(next(p["port"] for p in s["peers"] if p["role"] == "vlmc"))')

echo "== create volumes demo ($size) and fio ($fio_size)"
xsegctl volume --dir "$dir" create demo "$size"
xsegctl volume --dir "$dir" create fio "$fio_size"

results=$dir/results
mkdir -p "$results"
bench() {
	"$bin/bench_xseg" -g "$segment" -p "$vlmc_port" --target demo \
		-O "$size" -P rand --verify --no-progress --json "$@"
}
echo "== bench_xseg: verified 64 KiB random writes, iodepth 16, through vlmc -> cached -> blocker"
bench -o write -b 64k -q 16 >"$results/bench-write.json"
echo "== bench_xseg: verified 64 KiB random reads of the same blocks"
bench -o read -b 64k -q 16 >"$results/bench-read.json"
echo "== bench_xseg: verified 64 KiB random reads, iodepth 1 (latency)"
bench -o read -b 64k -q 1 >"$results/bench-read-qd1.json"

echo "== fio: verified 4 KiB random writes through NBD (crc32c)"
uri="nbd+unix:///fio?socket=$dir/run/nbd.sock"
fio --name=nbd-verify --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k \
	--size="$fio_size" --iodepth=16 --verify=crc32c --do_verify=1 \
	--verify_fatal=1 --output-format=json --output="$results/fio.json"

echo "== results"
python3 - "$results" <<'EOF'
import json, os, sys
d = sys.argv[1]
def show(name, f):
    r = json.load(open(os.path.join(d, f)))
    lat = r["lat_ns"]
    print(f"  {name:34s} {r['iops']:>10.0f} IOPS {r['bw_mib_s']:>9.1f} MiB/s"
          f"  p50 {lat['p50'] / 1000:8.1f} us  p99 {lat['p99'] / 1000:8.1f} us"
          f"  errors {r['errors']} verify errors {r['verify_errors']}")
show("bench_xseg write 64k qd16 verify", "bench-write.json")
show("bench_xseg read 64k qd16 verify", "bench-read.json")
show("bench_xseg read 64k qd1 verify", "bench-read-qd1.json")
f = json.load(open(os.path.join(d, "fio.json")))["jobs"][0]
w, rd = f["write"], f["read"]
print(f"  {'fio randwrite 4k qd16 (NBD)':34s} {w['iops']:>10.0f} IOPS {w['bw']/1024:>9.1f} MiB/s"
      f"  verify read back {rd['io_bytes'] >> 20} MiB, fio errors {f['error']}")
EOF

if [ "$keep" -eq 0 ]; then
	trap - EXIT
	stop_stack
	echo "== offline check of the store"
	"$bin/blockerctl" check "$dir/store"
	"$bin/blockerctl" stats "$dir/store"
fi
echo "== main job done (details: $results)"
