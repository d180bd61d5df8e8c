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
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-limits python3
SEG=tnbdlim$$
seg_create $SEG 512M 1024
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
STORE=$BG_PID
start_vlmc $T $SEG -t 2 --nbd-max-conns 3 --nbd-inflight-bytes 8M
$X volume --ctl $T/ctl create v 128M || die "create v"

# bad option values are refused at start
vlmc_refuses $SEG "--nbd-max-conns 0" "--nbd-max-conns x" \
	"--nbd-inflight-bytes 0" "--nbd-inflight-bytes 3Q"
# a port below that cannot hold the volume table objects (before: vlmc
# started, then failed reading its table with EINVAL, cryptically)
# (exit 1 at its initialisation, saying why)
timeout 60 $BIN/vlmc -g $SEG -p 3 --next-port 1 --nbd-socket none --ctl-socket $T/ctl2 \
	--object-size 4k --max-object-size 256k >$T/bad.log 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "below the volume table object" $T/bad.log &&
	echo "ok: vlmc --max-object-size 256k refused" ||
	die "vlmc --max-object-size 256k: rc $rc: $(cat $T/bad.log)"

python3 - "$T/nbd.sock" "$X" "$SEG" <<'PY'
import os, shutil, socket, struct, subprocess, sys, threading, time
from nbd_testlib import recvn, opt, opt_reply as rep, simple_reply as reply
from shell_checks import Checks, fresh_counters
path, xsegctl, seg = sys.argv[1:4]
check = Checks()
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
def rw(s, cookie, off, data):
    send(s, 1, cookie, off, len(data), data)
    e1 = reply(s)
    send(s, 0, cookie + 1, off, len(data))
    e2 = reply(s)
    return e1 == (0, cookie) and e2 == (0, cookie + 1) and recvn(s, len(data)) == data
def stats():
    """vlmc's counters, from a publication made after this call started"""
    return fresh_counters(xsegctl, seg, 2)
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
sys.exit(check.exit_status())
PY
[ $? -eq 0 ] || fail "NBD limit checks"
stop_pids $VLMC $STORE
check_sanitizers "a peer log" $T/*.log
finish "test_nbd_limits: ok"
