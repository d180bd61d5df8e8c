#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc and a dead peer below it, end to end on the default stack
# (xsegctl stack start: store, cached plugged, vlmc, supervisor), driven
# over NBD by tests/nbd_testlib.py (docs/vlmc.md "Write-back loss" and
# "Dead peer below"):
#   write-back cached: a write acknowledged and not flushed, cached
#     SIGKILLed and restarted by the supervisor: FLUSH on the same
#     connection fails with EIO, a READ on it too, a new connection reads;
#     vlmc counts the fence (volumes_fenced, commands_fenced);
#   write, FLUSH ok, cached SIGKILLed and restarted: FLUSH ok, reads ok;
#   write-through cached SIGKILLed three times while a client keeps
#     writes and reads in flight: no error reply at all, every read
#     matches what was written, the whole volume reads back identical;
#   R9-13: BB acknowledged by a vlmc that is then SIGKILLed and restarted,
#     a connection of the new vlmc reads BB, cached dies: that
#     connection's READ and FLUSH fail with EIO (not the older AA);
#   R9-4: a snapshot after cached died holding acknowledged writes of the
#     source fails naming the loss, the source is fenced.
# Every check counts replies, none is timed. Exit 77 (skip) only when
# python3 is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init vlmc-wbloss python3

# start_stack NAME POLICY: a stack in D=$T/NAME/data with cached in POLICY
start_stack() {
	stack_conf $1 "segment_size = 256M" "requests = 2048" "cache_size = 32M" \
		"write_policy = $2"
	$X stack start $T/$1/stack.conf >/dev/null || die "stack start ($1)"
	$X volume --dir $D create vol 8M || die "volume create ($1)"
}
stat_of() { # DIR NAME: vlmc's counter
	$X stats $(seg_of $1) 3 2>/dev/null | awk -v n=$2 '$1 == n || $1 == n":" { print $NF; exit }'
}
# DIR NAME MIN: the counter once it reaches MIN (vlmc publishes its
# statistics every second), or its last value after 20 s
stat_at_least() {
	local n
	for _ in $(seq 200); do
		n=$(stat_of $1 $2)
		[ "${n:-0}" -ge $3 ] && break
		sleep 0.1
	done
	echo $n
}
# stop_with_loss NAME: after a loss, stack stop exits 1 and keeps the
# segment (review9 R9-3); the cleanup destroys it
stop_with_loss() {
	$X stack stop --dir $D >/dev/null 2>$T/stop.err
	local rc=$?
	[ $rc -eq 1 ] && grep -q "WITH DATA LOSS" $T/stop.err &&
		ok "stack stop ($1) reports the loss" || fail "stack stop ($1): rc $rc"
}

# The client: kills cached (SIGKILL) and waits for the supervisor to
# bring it back, serving (its log says "serving segment ... pid N").
cat > $T/common.py <<'EOF'
import os, re, socket, struct, subprocess, sys, time
import nbd_testlib as nbd

D = sys.argv[1]
SOCK = D + "/run/nbd.sock"
EIO = 5

def pid_of(role):
    try:
        return int(open(f"{D}/run/{role}.pid").read())
    except (OSError, ValueError):
        return 0

def kill_cached():
    old = pid_of("cached")
    assert old > 0
    os.kill(old, 9)
    return old

def wait_back(old, role="cached"):
    """Until a new ROLE says it serves (polled, at most 60 s)."""
    for _ in range(600):
        new = pid_of(role)
        if new and new != old:
            try:
                log = open(f"{D}/run/{role}.log").read()
            except OSError:
                log = ""
            if re.search(rf"serving segment .* pid {new}$", log, re.M):
                return new
        time.sleep(0.1)
    raise SystemExit(f"{role} did not come back")

def kill_vlmc():
    old = pid_of("vlmc")
    assert old > 0
    os.kill(old, 9)
    return old

def losses():
    """The segment's write-back loss counter (xsegctl stack status)."""
    out = subprocess.run([os.environ["X"], "stack", "status", "--dir", D],
                         capture_output=True, text=True).stdout
    m = re.search(r"^write-back losses: (\d+)", out, re.M)
    assert m, out
    return int(m.group(1))

AA, BB = b"\xaa" * 4096, b"\xbb" * 4096

def aa_flushed_bb_not():
    """A connection to vol that wrote AA, flushed, then wrote BB: BB is
    acknowledged and held unflushed by write-back cached."""
    c = nbd.connect(SOCK, "vol")
    assert nbd.command(c, nbd.CMD_WRITE, 1, 0, 4096, AA)[0] == 0
    assert nbd.command(c, nbd.CMD_FLUSH, 2, 0, 0)[0] == 0
    assert nbd.command(c, nbd.CMD_WRITE, 3, 0, 4096, BB)[0] == 0
    return c

def xsegctl(*args):
    r = subprocess.run([os.environ["X"], "volume", "--dir", D, *args],
                       capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()
EOF

# --- write-back: an unflushed write lost with cached ---
start_stack wb writeback
python3 - $D $T/common.py <<'EOF'
import sys
exec(open(sys.argv[2]).read())
data = bytes((i * 7 + 3) & 0xff for i in range(65536))
c1 = nbd.connect(SOCK, "vol")
err, _ = nbd.command(c1, nbd.CMD_WRITE, 1, 0, len(data), data)
assert err == 0, err
wait_back(kill_cached())
err, _ = nbd.command(c1, nbd.CMD_FLUSH, 2, 0, 0)
assert err == EIO, f"FLUSH after the loss answered {err}, not EIO"
print("ok: FLUSH after cached lost an acknowledged write: EIO")
err, _ = nbd.command(c1, nbd.CMD_READ, 3, 0, 4096)
assert err == EIO, f"READ on the fenced connection answered {err}"
print("ok: READ on the old connection: EIO")
c2 = nbd.connect(SOCK, "vol")
err, got = nbd.command(c2, nbd.CMD_READ, 4, 0, 4096)
assert err == 0, f"READ on a new connection answered {err}"
print("ok: a new connection reads (the lost write reads %s)" %
      ("as written" if got == data[:4096] else "old data"))
err, _ = nbd.command(c1, nbd.CMD_FLUSH, 5, 0, 0)
assert err == EIO, err
print("ok: the old connection stays fenced")
# review safety17 F2: a FLUSH covers every connection's writes
# (CAN_MULTI_CONN), c1's lost one too: EIO while c1 is open
err, _ = nbd.command(c2, nbd.CMD_FLUSH, 10, 0, 0)
assert err == EIO, f"new connection's FLUSH with c1 open answered {err}"
print("ok: the new connection's FLUSH fails while the old one is open")
c1.close()
# vlmc closes c1's side when it reads the EOF: until then EIO (bounded)
deadline = time.monotonic() + 30
while True:
    err, _ = nbd.command(c2, nbd.CMD_FLUSH, 11, 0, 0)
    if err != EIO or time.monotonic() > deadline:
        break
    time.sleep(0.05)
assert err == 0, f"FLUSH after the old connection closed answered {err}"
print("ok: once the old connection is closed, the new one's FLUSH succeeds")

# written and flushed before the kill: nothing lost
err, _ = nbd.command(c2, nbd.CMD_WRITE, 6, 65536, len(data), data)
assert err == 0, err
err, _ = nbd.command(c2, nbd.CMD_FLUSH, 7, 0, 0)
assert err == 0, err
wait_back(kill_cached())
err, _ = nbd.command(c2, nbd.CMD_FLUSH, 8, 0, 0)
assert err == 0, f"FLUSH with nothing unflushed answered {err}"
err, got = nbd.command(c2, nbd.CMD_READ, 9, 65536, len(data))
assert err == 0 and got == data, err
print("ok: write, FLUSH, cached killed: FLUSH ok, data read back")
EOF
[ $? -eq 0 ] && ok "write-back loss reported" || fail "write-back loss"
n=$(stat_at_least $D volumes_fenced 1)
[ "${n:-0}" -ge 1 ] && ok "vlmc counted $n fenced volume(s)" || fail "volumes_fenced '$n'"
n=$(stat_at_least $D commands_fenced 3)
[ "${n:-0}" -ge 3 ] && ok "vlmc counted $n fenced command(s)" || fail "commands_fenced '$n'"
grep -q "writes acknowledged since the last flush may be lost" $D/run/vlmc.log &&
	ok "vlmc logged the loss" || fail "no loss in vlmc's log"
stop_with_loss wb

# --- R9-13: dirty data inherited by a restarted vlmc ---
# The previous vlmc acknowledged BB (unflushed, in cached); vlmc is
# SIGKILLed and the supervisor restarts it; a connection of the new vlmc
# reads BB; cached dies with it: that connection must not then read the
# older AA as if nothing happened, nor have its FLUSH succeed.
start_stack inh writeback
python3 - $D $T/common.py <<'EOF'
import sys
exec(open(sys.argv[2]).read())
c1 = aa_flushed_bb_not()
wait_back(kill_vlmc(), "vlmc")
c1.close()
c2 = nbd.connect(SOCK, "vol")
err, got = nbd.command(c2, nbd.CMD_READ, 4, 0, 4096)
assert err == 0 and got == BB, (err, got[:1])
print("ok: the restarted vlmc serves BB (acknowledged by its predecessor)")
before = losses()
wait_back(kill_cached())
after = losses()
assert after > before, f"cached's death counted no loss ({before} -> {after})"
err, got = nbd.command(c2, nbd.CMD_READ, 5, 0, 4096)
assert err == EIO, \
    f"READ after the loss answered {err} with {got[:1]!r}, not EIO"
print("ok: the same connection's READ after the loss: EIO")
err, _ = nbd.command(c2, nbd.CMD_FLUSH, 6, 0, 0)
assert err == EIO, f"FLUSH after the loss answered {err}, not EIO"
print("ok: its FLUSH: EIO")
c3 = nbd.connect(SOCK, "vol")
err, got = nbd.command(c3, nbd.CMD_READ, 7, 0, 4096)
assert err == 0, f"READ on a new connection answered {err}"
assert nbd.command(c3, nbd.CMD_FLUSH, 8, 0, 0)[0] == 0
print("ok: a new connection reads and flushes")
EOF
[ $? -eq 0 ] && ok "inherited write-back data lost: fenced" ||
	fail "inherited write-back loss (R9-13)"
stop_with_loss inh

# --- R9-4: a snapshot after a write-back loss ---
# AA flushed, BB acknowledged and not flushed, cached SIGKILLed and
# restarted: the snapshot must fail naming the loss (not freeze AA as the
# point-in-time image), and the source be fenced for the old connection.
start_stack snap writeback
python3 - $D $T/common.py <<'EOF'
import sys
exec(open(sys.argv[2]).read())
c1 = aa_flushed_bb_not()
before = losses()
wait_back(kill_cached())
assert losses() > before, "cached's death counted no loss"
rc, msg = xsegctl("snapshot", "vol", "vol@snap")
assert rc != 0, f"snapshot after the loss succeeded: {msg}"
assert "write-back loss" in msg, f"snapshot error does not name the loss: {msg}"
print(f"ok: snapshot refused: {msg}")
rc, msg = xsegctl("list")
# volume lines only: the failed snapshot's record ('# reclaiming failed
# snapshot vol@snap ...') may still be listed until the reclaimer drops it
vols = [l.split()[0] for l in msg.splitlines()
        if l.strip() and not l.startswith("#")]
assert rc == 0 and "vol@snap" not in vols, msg
print("ok: no snapshot volume")
err, _ = nbd.command(c1, nbd.CMD_READ, 4, 0, 4096)
assert err == EIO, f"READ on the old connection answered {err}, not EIO"
err, _ = nbd.command(c1, nbd.CMD_FLUSH, 5, 0, 0)
assert err == EIO, f"FLUSH on the old connection answered {err}, not EIO"
print("ok: the source is fenced for the old connection")
# reported once: the volume is what it now is, a new snapshot is taken
rc, msg = xsegctl("snapshot", "vol", "vol@snap")
assert rc == 0, msg
c2 = nbd.connect(SOCK, "vol")
c3 = nbd.connect(SOCK, "vol@snap")
e2, now = nbd.command(c2, nbd.CMD_READ, 6, 0, 4096)
e3, snap = nbd.command(c3, nbd.CMD_READ, 7, 0, 4096)
assert e2 == 0 and e3 == 0 and snap == now, (e2, e3)
print("ok: a snapshot after the fence holds what the volume now reads")
EOF
[ $? -eq 0 ] && ok "snapshot after a write-back loss refused" ||
	fail "snapshot after a write-back loss (R9-4)"
grep -q "snapshot vol -> vol@snap failed: a write-back cache below lost" \
	$D/run/vlmc.log && ok "vlmc logged the refused snapshot" ||
	fail "no refused snapshot in vlmc's log"
stop_with_loss snap

# --- write-through: cached killed under load, nothing fails ---
start_stack wt writethrough
python3 - $D $T/common.py <<'EOF'
import random, sys, threading
exec(open(sys.argv[2]).read())
SIZE, BS, QD = 8 << 20, 4096, 8
shadow = bytearray(SIZE)
errors, rounds = [], [0]
stop = threading.Event()

def client():
    s = nbd.connect(SOCK, "vol", timeout=180)
    rnd = random.Random(1)
    cookie = 0
    while not stop.is_set() and not errors:
        offs = rnd.sample(range(SIZE // BS), QD)
        blocks = [rnd.randbytes(BS) for _ in offs]
        # QD writes in flight, then QD reads of them in flight
        s.sendall(b"".join(nbd.request(nbd.CMD_WRITE, cookie + i, o * BS, BS) + b
                           for i, (o, b) in enumerate(zip(offs, blocks))))
        for _ in offs:
            err, ck = nbd.simple_reply(s)
            if err:
                errors.append(f"write cookie {ck}: error {err}")
        for o, b in zip(offs, blocks):
            shadow[o * BS:(o + 1) * BS] = b
        cookie += QD
        s.sendall(b"".join(nbd.request(nbd.CMD_READ, cookie + i, o * BS, BS)
                           for i, o in enumerate(offs)))
        for _ in offs:
            err, ck = nbd.simple_reply(s)
            if err:
                errors.append(f"read cookie {ck}: error {err}")
                continue
            got = nbd.recvn(s, BS)
            o = offs[ck - cookie]
            if got != bytes(shadow[o * BS:(o + 1) * BS]):
                errors.append(f"read at {o * BS}: wrong data")
        cookie += QD
        rounds[0] += 1
    s.close()

t = threading.Thread(target=client)
t.start()
for k in range(3):
    start = rounds[0]
    while rounds[0] < start + 20 and not errors and t.is_alive():
        time.sleep(0.01)
    wait_back(kill_cached())
start = rounds[0]
while rounds[0] < start + 20 and not errors and t.is_alive():
    time.sleep(0.01)
stop.set()
t.join()
assert not errors, errors[:5]
print(f"ok: {rounds[0]} rounds of {QD} writes + {QD} reads, cached killed "
      "3 times: no error reply, reads matched")
s = nbd.connect(SOCK, "vol")
for off in range(0, SIZE, 1 << 20):
    err, got = nbd.command(s, nbd.CMD_READ, off, off, 1 << 20)
    assert err == 0 and got == bytes(shadow[off:off + (1 << 20)]), off
print("ok: the whole volume reads back identical")
EOF
[ $? -eq 0 ] && ok "write-through cached killed under load: no error" ||
	fail "dead peer under load"
echo "vlmc: parts_retried $(stat_of $D parts_retried)," \
	"cmds_failed_dead_peer $(stat_of $D cmds_failed_dead_peer)"
n=$(stat_of $D cmds_failed_dead_peer)
[ "${n:-x}" = 0 ] && ok "no command failed for the dead peer" ||
	fail "cmds_failed_dead_peer '$n'"
$X stack stop --dir $D >/dev/null || fail "stack stop (wt)"

check_sanitizers "a log" $T/*/data/run/*.log
finish "vlmc write-back loss / dead peer test passed"
