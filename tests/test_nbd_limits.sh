#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc's NBD resource limits (review finding V3), on a private segment with
# vlmc (--nbd-max-conns 3 --nbd-inflight-bytes 8M) over test_vlmc_store:
#   three connections are served; a fourth is refused at NBD_OPT_GO with
#   NBD_REP_ERR_POLICY (and nbdinfo fails) while the three keep working;
#   the refusals are counted in vlmc's statistics; once one of the three
#   disconnects, a new connection is served;
#   READs of 32 MiB each (one alone above the budget: let through) wait
#   for one another: the reader is throttled (counted) until the client
#   takes the replies, and every reply is right;
#   many pipelined 4 MiB WRITEs through the budget all succeed and read
#   back exactly.
# Exit 77 (skip) only when python3 is missing.
set -u
BIN=${AC_BIN_DIR:?AC_BIN_DIR not set}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
X=$BIN/xsegctl
T=$(mktemp -d /tmp/test-nbd-limits-XXXXXX)
SEG=tnbdlim$$
PIDS=
cleanup() {
	for p in $PIDS; do kill $p 2>/dev/null; done
	for p in $PIDS; do
		for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
		kill -9 $p 2>/dev/null
	done
	$X destroy $SEG >/dev/null 2>&1
	rm -rf $T
}
trap cleanup EXIT
die() { echo "FAIL: $*"; tail -n 20 $T/*.log; exit 1; }

$X create --size 512M --static-ports 4 --dynamic-ports 16 --requests 1024 \
	$SEG >/dev/null || die "create segment"
$BIN/test_vlmc_store -g $SEG -p 1 -t 2 >$T/store.log 2>&1 &
PIDS="$!"
$BIN/vlmc -g $SEG -p 2 -t 2 --next-port 1 --nbd-socket $T/nbd.sock \
	--ctl-socket $T/ctl --nbd-max-conns 3 --nbd-inflight-bytes 8M \
	>$T/vlmc.log 2>&1 &
PIDS="$! $PIDS"
for _ in $(seq 300); do [ -S $T/ctl ] && [ -S $T/nbd.sock ] && break; sleep 0.1; done
[ -S $T/nbd.sock ] || die "vlmc did not start"
$X volume --ctl $T/ctl create v 128M || die "create v"

# bad option values are refused at start
for bad in "--nbd-max-conns 0" "--nbd-max-conns x" "--nbd-inflight-bytes 0" \
	"--nbd-inflight-bytes 3Q"; do
	$BIN/vlmc -g $SEG -p 3 --next-port 1 --nbd-socket none \
		--ctl-socket $T/ctl2 $bad >$T/bad.log 2>&1
	[ $? -eq 2 ] && echo "ok: vlmc $bad refused" ||
		{ echo "FAIL: vlmc $bad: $(cat $T/bad.log)"; exit 1; }
done

python3 - "$T/nbd.sock" "$X" "$SEG" <<'PY'
import json, os, shutil, socket, struct, subprocess, sys, threading, time
path, xsegctl, seg = sys.argv[1:4]
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: fails += 1
def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(min(n - len(b), 1 << 20))
        if not c: raise EOFError
        b += c
    return bytes(b)
def opt(s, o, data=b""):
    s.sendall(struct.pack(">QII", 0x49484156454F5054, o, len(data)) + data)
def rep(s):
    magic, o, t, l = struct.unpack(">QIII", recvn(s, 20))
    assert magic == 0x3e889045565a9
    return o, t, recvn(s, l)
def connect():
    s = socket.socket(socket.AF_UNIX); s.settimeout(120); s.connect(path)
    assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
    s.sendall(struct.pack(">I", 3))
    return s
def go(s):
    """NBD_OPT_GO on v: the final reply type and its payload"""
    opt(s, 7, struct.pack(">I", 1) + b"v" + struct.pack(">H", 0))
    while True:
        o, t, d = rep(s)
        if t != 3: return t, d
def send(s, typ, cookie, off, ln, data=b""):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, typ, cookie, off, ln) + data)
def reply(s):
    magic, err, c = struct.unpack(">IIQ", recvn(s, 16))
    assert magic == 0x67446698, hex(magic)
    return err, c
def rw(s, cookie, off, data):
    send(s, 1, cookie, off, len(data), data)
    e1 = reply(s)
    send(s, 0, cookie + 1, off, len(data))
    e2 = reply(s)
    return e1 == (0, cookie) and e2 == (0, cookie + 1) and recvn(s, len(data)) == data
def stats():
    """vlmc's counters, from a publication made after this call started"""
    def get():
        out = subprocess.run([xsegctl, "stats", seg, "2", "--json"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out).get("peer_stats") or {}
    first = get().get("publications", 0)
    for _ in range(300):
        st = get()
        if st.get("publications", 0) >= first + 2:
            return st["counters"]
        time.sleep(0.1)
    raise RuntimeError("vlmc statistics not refreshed")
ERR_POLICY = (1 << 31) + 2
M = 1 << 20

# --- connection limit
conns = [connect() for _ in range(3)]
check(all(go(s)[0] == 1 for s in conns), "three connections served")
extra = connect()
t, d = go(extra)
check(t == ERR_POLICY and b"too many" in d, f"fourth: NBD_REP_ERR_POLICY {t:#x} {d!r}")
check(all(rw(s, 10 + 2 * i, i * M, bytes([i + 1]) * 4096) for i, s in enumerate(conns)),
      "the three keep working")
opt(extra, 2); check(rep(extra)[1] == 1, "refused client can still ABORT"); extra.close()
if shutil.which("nbdinfo"):
    out = subprocess.run(["nbdinfo", f"nbd+unix:///v?socket={path}"],
                         capture_output=True, text=True)
    check(out.returncode != 0, "nbdinfo refused at the limit")
st = stats()
check(st.get("nbd_refused", 0) >= 1 and st.get("nbd_connections") == 3,
      f"counted: {st.get('nbd_refused')} refused, {st.get('nbd_connections')} connections")
send(conns[0], 2, 0, 0, 0); conns[0].close()  # DISC frees a place
served = False
for _ in range(300):  # until vlmc has closed it (an event, not a time)
    s = connect()
    t, _ = go(s)
    if t == 1:
        served = True; conns[0] = s; break
    opt(s, 2); rep(s); s.close(); time.sleep(0.1)
check(served, "a new connection is served once one closed")
check(rw(conns[0], 20, 5 * M, b"\x42" * 8192), "and works")

# --- byte budget: two 32 MiB reads, each above the 8 MiB budget: the
# second waits until the first's reply is taken (it cannot fit the socket
# buffer while we do not read), so the reader is throttled for sure
s = conns[1]
img = os.urandom(64 * M)
for i in range(8):  # 8 MiB writes: one alone at the budget
    send(s, 1, 100 + i, i * 8 * M, 8 * M, img[i * 8 * M:(i + 1) * 8 * M])
check(sorted(reply(s) for _ in range(8)) == [(0, 100 + i) for i in range(8)],
      "8 MiB writes (each the whole budget) succeed")
before = stats().get("nbd_throttled", 0)
send(s, 0, 200, 0, 32 * M); send(s, 0, 201, 32 * M, 32 * M)
deadline = 60  # publications, not a time limit on vlmc
while stats().get("nbd_throttled", 0) <= before and deadline:
    deadline -= 1
check(deadline > 0, "the reader waited for the budget (counted)")
got = {}
for _ in range(2):
    err, c = reply(s)
    got[c] = (err, recvn(s, 32 * M) if not err else b"")
check(got.get(200, (1,))[0] == 0 and got[200][1] == img[:32 * M] and
      got.get(201, (1,))[0] == 0 and got[201][1] == img[32 * M:],
      "32 MiB reads above the budget: both right")

# many pipelined 4 MiB writes while another thread takes the replies
s = conns[2]
N = 32
res = []
def taker():
    for _ in range(N):
        res.append(reply(s))
th = threading.Thread(target=taker); th.start()
for i in range(N):
    off = (i % 16) * 4 * M + 64 * M
    send(s, 1, 1000 + i, off, 4 * M, img[(i % 16) * 4 * M:(i % 16 + 1) * 4 * M])
th.join()
check(sorted(res) == [(0, 1000 + i) for i in range(N)], f"{N} pipelined 4 MiB writes: no error")
send(s, 0, 2000, 64 * M, 32 * M); err, c = reply(s)
check(err == 0 and recvn(s, 32 * M) == img[:32 * M], "they read back exactly")
for s in conns:
    send(s, 2, 0, 0, 0); s.close()
sys.exit(1 if fails else 0)
PY
rc=$?
kill $PIDS 2>/dev/null
for p in $PIDS; do
	for _ in $(seq 300); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
done
PIDS=
if grep -l "ERROR: AddressSanitizer\|WARNING: ThreadSanitizer\|runtime error:\|ERROR: LeakSanitizer" \
	$T/*.log 2>/dev/null; then
	echo "FAIL: sanitizer report in a peer log"; rc=1
fi
[ $rc -eq 0 ] && echo "test_nbd_limits: ok" || { tail -n 20 $T/vlmc.log; echo "test_nbd_limits: FAILED"; }
exit $rc
