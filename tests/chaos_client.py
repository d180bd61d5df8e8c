# SPDX-License-Identifier: MIT
"""The NBD client and the peer killer of tests/test_stack_chaos.sh.

    python3 chaos_client.py run DIR STATE      load + kills, final check
    python3 chaos_client.py verify DIR STATE   whole volume against STATE
    python3 chaos_client.py selftest DIR STATE damage 4 blocks, expect all 4

The volume ("vol" of the stack in DIR) is a run of 4 KiB blocks. Every
512-byte sector of a block written carries (block, version, sector) and a
payload derived from them, with a CRC over all of it, so a torn, misplaced
or foreign sector is told from a real one. A sector of zeroes is version
0, or the newest TRIM / WRITE_ZEROES issued for its block (about 5% of the
commands zero a block, and 0.5% of the batches a whole 1 MiB object, which
vlmc deletes).

The model, per block: the newest version issued (sent at all, whatever
became of it) and the durable floor: the newest version whose write was
acknowledged with FUA, or acknowledged on a connection that then had a
FLUSH acknowledged (sent once every reply before it had arrived). Per
connection it also keeps the newest version acknowledged there: vlmc
fences a connection whose acknowledged writes a cache lost (docs/vlmc.md
"Write-back loss"), so a read answered without error on it never returns
data older than that connection's own acknowledged write.

A read is right when every sector is a valid sector of a version issued
for its block, not older than the floor nor the connection's own. A
broken connection or an error reply makes the outcome of what was in
flight unknown: the client reconnects (retrying, up to a generous
deadline that only catches hangs), reads a sample (the hot 1 MiB and some
random blocks) and goes on.

"run" also starts the killer thread: CHAOS_KILLS (default 8) SIGKILLs of
a random peer (store, cached, vlmc; at most 4 each, below the
supervisor's give-up of 5 in 60 s) at random instants, each after the
last killed peer is serving again; after a kill, with probability
CHAOS_STARTUP (default 0.25), the peer's successor is killed again within
0.3 s of its start, most often before it serves (the store replaying its
log, cached plugging, vlmc loading its volumes). The seed (CHAOS_SEED, else random) is
printed; it fixes the kill schedule and the client's commands, not the
interleaving of the two. CHAOS_BREAK=floor counts a write durable as soon
as it is acknowledged (before its FLUSH): a deliberately wrong floor,
which a kill of a dirty cached must make the checker report.

Exit status: 0 all right, 1 a check failed (the violations are printed).
"""
import hashlib
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import nbd_testlib as nbd

BS, SECT = 4096, 512
SPB = BS // SECT
MAGIC = b"ACCHAOS1"
EXPORT = "vol"
HOT = 256  # blocks 0..255, the first 1 MiB, take half the writes
QD = 8  # commands in flight at most
# writes between FLUSHes, about: one of these for a stretch of 50..300
# writes, so that kills find cached with little or much unflushed data
FLUSH_EVERY = (2, 8, 32, 128)
CMD_FLAG_FUA = 1
CMD_TRIM, CMD_WRITE_ZEROES = 4, 6
OBJECT = 256  # blocks in an object of the volume (1 MiB)
EIO = 5
IO_TIMEOUT = 300  # one reply; vlmc resends for dead_peer_wait (90 s)
RECONNECT_DEADLINE = 180  # a new connection after a failure
ROLES = ("store", "cached", "vlmc")
KILLS_PER_ROLE = 4  # the supervisor gives up on a peer dead 5 times in 60 s


class Fail(Exception):
    """A check failed: the message says what."""


def sector(block, version, idx):
    """Sector idx of version `version` of block `block`."""
    head = MAGIC + struct.pack(">III", block, version, idx)
    fill = hashlib.blake2b(head, digest_size=64).digest()
    body = head + (fill * 8)[:SECT - 4 - len(head)]
    return body + struct.pack(">I", zlib.crc32(body))


def block_data(block, version):
    return b"".join(sector(block, version, i) for i in range(SPB))


ZERO_SECTOR = bytes(SECT)


def decode(block, idx, data):
    """(version, None) for a valid sector idx of block, else (None, why)."""
    if data == ZERO_SECTOR:
        return 0, None
    if data[:8] != MAGIC:
        return None, "not a sector of this test: %s" % data[:24].hex()
    b, v, i = struct.unpack(">III", data[8:20])
    if zlib.crc32(data[:-4]) != struct.unpack(">I", data[-4:])[0]:
        return None, "checksum wrong (header says block %d v%d sector %d)" % (
            b, v, i)
    if (b, i) != (block, idx):
        return None, "misplaced: holds block %d v%d sector %d" % (b, v, i)
    if data != sector(b, v, i):
        return None, "payload differs from block %d v%d sector %d" % (b, v, i)
    return v, None


class Model:
    def __init__(self, nblocks):
        self.n = nblocks
        self.maxv = [0] * nblocks
        self.floor = [0] * nblocks
        self.zeros = {}  # block -> versions issued as TRIM / WRITE_ZEROES
        self.violations = []

    def issue(self, block, zero=False):
        """A new version of block: data, or zeroes."""
        self.maxv[block] += 1
        if zero:
            self.zeros.setdefault(block, set()).add(self.maxv[block])
        return self.maxv[block]

    def check(self, block, data, conn_floor, where):
        """Checks one block read; records violations, returns their count."""
        bad = 0
        lo = max(self.floor[block], conn_floor)
        for i in range(SPB):
            v, why = decode(block, i, data[i * SECT:(i + 1) * SECT])
            zs = self.zeros.get(block, ())
            if why is None and v == 0:
                v = max(zs, default=0)  # the newest zeroing, if any
            elif why is None and v in zs:
                why = "data of version %d, which was a TRIM/WRITE_ZEROES" % v
            if why is None and v > self.maxv[block]:
                why = "version %d never issued" % v
            elif why is None and v < lo:
                why = "version %d older than %s" % (
                    v, "the durable floor" if v < self.floor[block] else
                    "this connection's acknowledged write")
            if why is not None:
                bad += 1
                self.violations.append(
                    "%s: block %d (offset %d) sector %d: %s; durable floor "
                    "v%d, connection's acknowledged v%d, newest issued v%d" %
                    (where, block, block * BS, i, why, self.floor[block],
                     conn_floor, self.maxv[block]))
        return bad

    def save(self, path, extra):
        with open(path, "w") as f:
            json.dump(dict(extra, floor=self.floor, maxv=self.maxv,
                           zeros={b: sorted(z) for b, z in self.zeros.items()}),
                      f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            st = json.load(f)
        m = cls(len(st["floor"]))
        m.floor, m.maxv = st["floor"], st["maxv"]
        m.zeros = {int(b): set(z) for b, z in st["zeros"].items()}
        return m, st


class Broken(Exception):
    """The connection died (closed, reset, refused): outcome unknown."""


class Conn:
    """One NBD connection with up to QD commands in flight."""
    serial = 0

    def __init__(self, sock):
        Conn.serial += 1
        self.id = Conn.serial
        self.s = sock
        self.cookie = 0
        self.acked = {}  # block -> newest version acknowledged here
        self.unflushed = {}  # block -> newest acknowledged, not yet flushed

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def batch(self, cmds):
        """Sends cmds [(typ, off, len, data, flags)] at once; returns
        [(err, data)] in their order. Raises Broken if the connection
        fails, Fail on a protocol violation or a hang."""
        base = self.cookie
        self.cookie += len(cmds)
        out = b"".join(nbd.request(t, base + k, off, ln, fl) + d
                       for k, (t, off, ln, d, fl) in enumerate(cmds))
        res = [None] * len(cmds)
        try:
            self.s.sendall(out)
            for _ in cmds:
                head = nbd.recvn(self.s, 16)
                magic, err, ck = struct.unpack(">IIQ", head)
                if magic != nbd.SIMPLE_REPLY_MAGIC:
                    raise Fail("connection %d: reply magic %x" % (self.id, magic))
                k = ck - base
                if not 0 <= k < len(cmds) or res[k] is not None:
                    raise Fail("connection %d: reply for unknown cookie %d" %
                               (self.id, ck))
                data = b""
                if err == 0 and cmds[k][0] == nbd.CMD_READ:
                    data = nbd.recvn(self.s, cmds[k][2])
                res[k] = (err, data)
        except socket.timeout:
            raise Fail("connection %d: no reply within %d s (hang)" %
                       (self.id, IO_TIMEOUT))
        except (OSError, EOFError) as e:
            raise Broken(repr(e))
        return res


class Client:
    def __init__(self, d, nblocks, seed, break_floor=False):
        self.d = d
        self.sock_path = d + "/run/nbd.sock"
        self.m = Model(nblocks)
        self.rng = random.Random(seed)
        self.break_floor = break_floor
        self.conn = None
        self.t0 = time.monotonic()
        self.st = dict(writes=0, fua=0, zeroes=0, flushes=0, reads=0, reconnects=0,
                       broken=0, errors={}, acked=0, samples=0)
        self.written = set()
        self.flush_every, self.phase_end = FLUSH_EVERY[1], 0

    def log(self, msg):
        print("[%6.2f] %s" % (time.monotonic() - self.t0, msg), flush=True)

    def connect(self):
        """A new connection (the old one closed), retried until the deadline."""
        if self.conn:
            self.conn.close()
            self.conn = None
        end = time.monotonic() + RECONNECT_DEADLINE
        last = None
        while time.monotonic() < end:
            try:
                self.conn = Conn(nbd.connect(self.sock_path, EXPORT,
                                             timeout=IO_TIMEOUT))
                return self.conn
            except (OSError, EOFError, AssertionError, struct.error) as e:
                last = e
                time.sleep(0.1)
        raise Fail("no NBD connection to %s within %d s: %r" %
                   (EXPORT, RECONNECT_DEADLINE, last))

    def note_error(self, err):
        self.st["errors"][err] = self.st["errors"].get(err, 0) + 1

    def run_batch(self, cmds, where):
        """Runs cmds on the current connection, updating the model:
        ("read", (off, len), None), ("write" or "fua", block, version),
        ("zero" or "zerofua", (TRIM or WRITE_ZEROES, first block, blocks),
        [version of each block]). Returns False if the connection must be
        replaced (broken, or an error reply)."""
        c = self.conn
        wire = []
        for kind, arg, v in cmds:
            fl = CMD_FLAG_FUA if kind in ("fua", "zerofua") else 0
            if kind == "read":
                off, ln = arg
                wire.append((nbd.CMD_READ, off, ln, b"", 0))
            elif kind in ("zero", "zerofua"):
                typ, b0, nb = arg
                wire.append((typ, b0 * BS, nb * BS, b"", fl))
            else:
                wire.append((nbd.CMD_WRITE, arg * BS, BS, block_data(arg, v), fl))
        # the floors a read must meet are those when it is sent
        floors = [{b: c.acked.get(b, 0)
                   for b in range(arg[0] // BS, (arg[0] + arg[1]) // BS)}
                  if kind == "read" else None for kind, arg, v in cmds]
        try:
            res = c.batch(wire)
        except Broken as e:
            self.st["broken"] += 1
            self.log("connection %d broke during %s: %s" % (c.id, where, e))
            return False
        ok = True
        for (kind, arg, v), (err, data), fl in zip(cmds, res, floors):
            if err:
                self.note_error(err)
                ok = False
                continue
            if kind == "read":
                self.st["reads"] += 1
                off, ln = arg
                for k, b in enumerate(range(off // BS, (off + ln) // BS)):
                    self.m.check(b, data[k * BS:(k + 1) * BS], fl[b],
                                 "%s, connection %d" % (where, c.id))
                continue
            self.st["acked"] += 1
            if kind in ("zero", "zerofua"):
                acked = zip(range(arg[1], arg[1] + arg[2]), v)
            else:
                acked = ((arg, v),)
            for b, ver in acked:
                c.acked[b] = max(c.acked.get(b, 0), ver)
                if kind in ("fua", "zerofua") or self.break_floor:
                    self.m.floor[b] = max(self.m.floor[b], ver)
                else:
                    c.unflushed[b] = max(c.unflushed.get(b, 0), ver)
        if not ok:
            self.log("connection %d: error replies during %s (errors so far "
                     "%s)" % (c.id, where, self.st["errors"]))
        return ok

    def flush(self, where):
        c = self.conn
        try:
            (err, _), = c.batch([(nbd.CMD_FLUSH, 0, 0, b"", 0)])
        except Broken as e:
            self.st["broken"] += 1
            self.log("connection %d broke during FLUSH (%s): %s" % (c.id, where, e))
            return False
        if err:
            self.note_error(err)
            self.log("connection %d: FLUSH answered %d (%s)" % (c.id, err, where))
            return False
        self.st["flushes"] += 1
        for b, v in c.unflushed.items():
            self.m.floor[b] = max(self.m.floor[b], v)
        c.unflushed.clear()
        return True

    def sample(self, where):
        """The hot MiB and 16 random written blocks; False if the connection
        failed meanwhile."""
        cmds = [("read", (0, HOT * BS), None)]
        if self.written:
            pool = sorted(self.written)
            for b in self.rng.sample(pool, min(16, len(pool))):
                if b >= HOT:
                    cmds.append(("read", (b * BS, BS), None))
        self.st["samples"] += 1
        return self.run_batch(cmds, where)

    def reconnect(self, where):
        while True:
            self.st["reconnects"] += 1
            self.connect()
            if self.sample("sample after reconnect (%s)" % where):
                return

    def step(self):
        """One batch of up to QD commands on distinct blocks, then a FLUSH
        about every flush_every writes."""
        r = self.rng
        if self.st["writes"] >= self.phase_end:
            self.flush_every = r.choice(FLUSH_EVERY)
            self.phase_end = self.st["writes"] + r.randint(50, 300)
        cmds = []
        if r.random() < 0.005:
            # a whole object zeroed (vlmc DELETEs it), alone in its batch
            b0 = r.randrange(self.m.n // OBJECT) * OBJECT
            cmds.append(self.zeroing(b0, OBJECT))
        blocks = set()
        for _ in range(r.randint(1, QD) if not cmds else 0):
            b = r.randrange(HOT) if r.random() < 0.5 else r.randrange(self.m.n)
            if b in blocks:
                continue
            blocks.add(b)
            x = r.random()
            if x < 0.25:
                cmds.append(("read", (b * BS, BS), None))
                continue
            if x < 0.30:
                cmds.append(self.zeroing(b, 1))  # vlmc writes zeroes
                continue
            v = self.m.issue(b)
            self.written.add(b)
            fua = r.random() < 0.1
            self.st["writes"] += 1
            self.st["fua"] += fua
            cmds.append(("fua" if fua else "write", b, v))
        if not self.run_batch(cmds, "load"):
            return False
        if r.random() < len([c for c in cmds if c[0] != "read"]) / self.flush_every:
            return self.flush("load")
        return True

    def zeroing(self, b0, nb):
        """A TRIM or WRITE_ZEROES (10% with FUA) of nb blocks from b0."""
        r = self.rng
        typ = CMD_TRIM if r.random() < 0.5 else CMD_WRITE_ZEROES
        vers = [self.m.issue(b, zero=True) for b in range(b0, b0 + nb)]
        self.written.update(range(b0, b0 + nb))
        self.st["zeroes"] += 1
        return ("zerofua" if r.random() < 0.1 else "zero", (typ, b0, nb), vers)

    def final(self):
        """FLUSH (on a new connection if it fails), then every block."""
        while not self.flush("final"):
            self.reconnect("final FLUSH failed")
        c = self.conn
        mib = 256
        for off in range(0, self.m.n * BS, mib * BS):
            ln = min(mib * BS, self.m.n * BS - off)
            if not self.run_batch([("read", (off, ln), None)], "final read"):
                raise Fail("the final read at %d failed on connection %d "
                           "right after its FLUSH (errors %s)" %
                           (off, c.id, self.st["errors"]))


def pid_of(d, role):
    try:
        with open("%s/run/%s.pid" % (d, role)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def is_peer(d, pid):
    """pid is a process of the stack in d (not a reused pid)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return d.encode() in f.read()
    except OSError:
        return False


def serving(d, role, pid):
    try:
        with open("%s/run/%s.log" % (d, role)) as f:
            log = f.read()
    except OSError:
        return False
    return re.search(r"serving segment .* pid %d$" % pid, log, re.M) is not None


class Killer(threading.Thread):
    def __init__(self, client, seed, kills, startup):
        super().__init__(daemon=True)
        self.c = client
        self.rng = random.Random(seed * 7919 + 1)
        self.kills = kills
        self.startup = startup
        self.history = []
        self.error = None
        self.done = threading.Event()
        self.stop = threading.Event()  # the client failed: no more kills

    def run(self):
        try:
            self.kill_all()
        except Exception as e:  # reported by the main thread
            self.error = e
        self.done.set()

    def wait_pid(self, role, old, want_serving):
        """The new process of role after old was killed (serving, if
        want_serving): a bound of 120 s catches a peer that never comes."""
        d = self.c.d
        end = time.monotonic() + 120
        while True:
            new = pid_of(d, role)
            if new and new != old and is_peer(d, new) and (
                    not want_serving or serving(d, role, new)):
                return new
            if time.monotonic() > end:
                raise Fail("%s (killed pid %d) not %s within 120 s" %
                           (role, old, "serving again" if want_serving
                            else "restarted"))
            time.sleep(0.05 if want_serving else 0.005)

    def kill(self, k, role, pid, how):
        c = self.c
        st = dict(c.st)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            raise Fail("kill %d: %s pid %d died before it was killed%s" %
                       (k + 1, role, pid, how))
        self.history.append("%s pid %d%s after %d writes" %
                            (role, pid, how, st["writes"]))
        c.log("kill %d: SIGKILL %s pid %d%s (%d writes, %d acknowledged, "
              "%d flushes so far)" % (k + 1, role, pid, how, st["writes"],
                                      st["acked"], st["flushes"]))

    def kill_all(self):
        c, d = self.c, self.c.d
        count = dict.fromkeys(ROLES, 0)
        while c.st["acked"] < 200 and not self.stop.is_set():
            time.sleep(0.05)
        k = 0
        while k < self.kills:
            if self.stop.wait(self.rng.uniform(0.1, 2.0)):
                return
            role = self.rng.choice([r for r in ROLES if count[r] < KILLS_PER_ROLE])
            pid = pid_of(d, role)
            if not pid or not is_peer(d, pid):
                raise Fail("kill %d: no live %s (pid file says %d)" %
                           (k + 1, role, pid))
            self.kill(k, role, pid, "")
            k += 1
            count[role] += 1
            # its successor killed again as soon as it runs, most often
            # before it serves (replaying the store's log, plugging cached)
            while (k < self.kills and count[role] < KILLS_PER_ROLE and
                   self.rng.random() < self.startup):
                new = self.wait_pid(role, pid, False)
                if self.stop.wait(self.rng.uniform(0, 0.3)):
                    return
                up = serving(d, role, new)
                self.kill(k, role, new, " (serving already)" if up else
                          " during its start-up")
                k += 1
                count[role] += 1
                pid = new
            new = self.wait_pid(role, pid, True)
            c.log("kill %d: %s back as pid %d" % (k, role, new))


def losses(d):
    """The segment's write-back loss counter (None without $X)."""
    x = os.environ.get("X")
    if not x:
        return None
    out = subprocess.run([x, "stack", "status", "--dir", d, "--json"],
                         capture_output=True, text=True).stdout
    try:
        return json.loads(out)["writeback_losses"]
    except (ValueError, KeyError):
        return None


def report(m, what):
    if not m.violations:
        return 0
    print("FAIL: %s: %d bad sector(s); first ones:" % (what, len(m.violations)))
    for v in m.violations[:20]:
        print("  " + v)
    return 1


def cmd_run(d, state, nblocks):
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    kills = int(os.environ.get("CHAOS_KILLS", "8"))
    if not 0 <= kills <= KILLS_PER_ROLE * len(ROLES):
        print("chaos_client: CHAOS_KILLS=%d: 0..%d (at most %d per peer)" %
              (kills, KILLS_PER_ROLE * len(ROLES), KILLS_PER_ROLE))
        return 2
    startup = float(os.environ.get("CHAOS_STARTUP", "0.25"))
    if not 0 <= startup <= 1:
        print("chaos_client: CHAOS_STARTUP=%s: a probability, 0..1" % startup)
        return 2
    brk = os.environ.get("CHAOS_BREAK", "")
    if brk not in ("", "floor"):
        print("chaos_client: CHAOS_BREAK=%s: only 'floor' (or unset)" % brk)
        return 2
    print("chaos: seed %d (CHAOS_SEED=%d reproduces the schedule), %d kills, "
          "start-up kills %.2f%s" %
          (seed, seed, kills, startup,
           ", BROKEN FLOOR (CHAOS_BREAK=floor)" if brk else ""), flush=True)
    c = Client(d, nblocks, seed, break_floor=bool(brk))
    killer = Killer(c, seed, kills, startup)
    try:
        c.connect()
        killer.start()
        hang = time.monotonic() + 600
        extra = None
        while extra is None or c.st["writes"] < extra:
            if killer.done.is_set() and extra is None:
                extra = c.st["writes"] + 300  # load after the last restart
            if not c.step():
                c.reconnect("after %d writes" % c.st["writes"])
            if len(c.m.violations) >= 20:
                break
            if time.monotonic() > hang:
                raise Fail("load did not finish within 600 s")
        if c.m.violations:
            raise Fail("wrong data read during the load")
        killer.done.wait(300)
        if isinstance(killer.error, Fail):
            raise killer.error
        if killer.error:
            raise Fail("the killer failed: %r" % killer.error)
        if not killer.done.is_set():
            raise Fail("the killer did not finish")
        if not c.m.violations:
            c.final()
    except Fail as e:
        c.log("FAIL: %s" % e)
        report(c.m, "seed %d" % seed)
        return 1
    finally:
        killer.stop.set()
        if c.conn:
            c.conn.close()
    n = losses(d)
    c.log("seed %d: %d writes (%d FUA), %d TRIM/WRITE_ZEROES, %d acknowledged, "
          "%d FLUSHes, %d reads, %d reconnects (%d broken connections), error replies %s, samples %d; "
          "kills: %s; write-back losses counted %s" %
          (seed, c.st["writes"], c.st["fua"], c.st["zeroes"], c.st["acked"],
           c.st["flushes"],
           c.st["reads"], c.st["reconnects"], c.st["broken"], c.st["errors"],
           c.st["samples"], "; ".join(killer.history), n))
    c.m.save(state, dict(seed=seed, errors=c.st["errors"], losses=n,
                         kills=killer.history))
    rc = report(c.m, "seed %d" % seed)
    bad = {e: k for e, k in c.st["errors"].items() if e != EIO}
    if bad:
        print("FAIL: seed %d: error replies other than EIO: %s" % (seed, bad))
        rc = 1
    if c.st["errors"].get(EIO) and n == 0:
        print("FAIL: seed %d: %d EIO replies, yet the stack counted no write-back "
              "loss" % (seed, c.st["errors"][EIO]))
        rc = 1
    if rc == 0:
        print("ok: seed %d: every block read back right after %d kills "
              "(%d blocks written, %d with a durable version)" %
              (seed, len(killer.history), len(c.written),
               sum(1 for f in c.m.floor if f)))
    return rc


def cmd_verify(d, state):
    m, st = Model.load(state)
    c = Client(d, m.n, 0)
    c.m = m
    try:
        c.connect()
        for off in range(0, m.n * BS, 1 << 20):
            if not c.run_batch([("read", (off, min(1 << 20, m.n * BS - off)), None)],
                               "verify after restart"):
                raise Fail("verify: read at %d failed: %s" % (off, c.st["errors"]))
    except Fail as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        if c.conn:
            c.conn.close()
    if report(m, "seed %d, after a stop and start" % st["seed"]):
        return 1
    print("ok: seed %d: after stop and start, every block at or above its "
          "durable floor (%d blocks with one)" %
          (st["seed"], sum(1 for f in m.floor if f)))
    return 0


def cmd_selftest(d, state):
    """Writes four wrong blocks behind the model's back (a version older
    than the floor, a sector of another block, a flipped byte, a version
    never issued) and checks that exactly those four are reported."""
    m, st = Model.load(state)
    durable = [b for b in range(m.n) if m.floor[b] >= 1 and b not in m.zeros]
    fresh = [b for b in range(m.n) if m.maxv[b] == 0]
    if len(durable) < 3 or not fresh:
        print("FAIL: selftest: too few durable (%d) or unwritten (%d) blocks" %
              (len(durable), len(fresh)))
        return 1
    a, b, c_, f = durable[0], durable[1], durable[2], fresh[0]
    stale = block_data(a, m.floor[a] - 1) if m.floor[a] > 1 else bytes(BS)
    mis = bytearray(block_data(b, m.floor[b]))
    mis[3 * SECT:4 * SECT] = sector(c_, m.floor[c_], 3)
    flip = bytearray(block_data(c_, m.floor[c_]))
    flip[5 * SECT + 100] ^= 0x40
    never = block_data(f, 1)
    cl = Client(d, m.n, 0)
    cl.connect()
    wire = [(nbd.CMD_WRITE, x * BS, BS, bytes(data), 0)
            for x, data in ((a, stale), (b, mis), (c_, flip), (f, never))]
    wire.append((nbd.CMD_FLUSH, 0, 0, b"", 0))
    res = cl.conn.batch(wire[:4]) + cl.conn.batch(wire[4:])
    if any(e for e, _ in res):
        print("FAIL: selftest: writes answered %s" % [e for e, _ in res])
        return 1
    res = cl.conn.batch([(nbd.CMD_READ, x * BS, BS, b"", 0) for x in (a, b, c_, f)])
    cl.conn.close()
    got = {}
    for x, (err, data) in zip((a, b, c_, f), res):
        before = len(m.violations)
        m.check(x, data, 0, "selftest")
        got[x] = m.violations[before:]
    want = {a: "older than the durable floor", b: "misplaced",
            c_: "checksum wrong", f: "never issued"}
    rc = 0
    for x, what in want.items():
        if len(got[x]) == 0 or what not in got[x][0]:
            print("FAIL: selftest: block %d (%s) not reported as such: %s" %
                  (x, what, got[x]))
            rc = 1
    if rc == 0:
        print("ok: the checker reports all four damaged blocks: " +
              "; ".join(got[x][0] for x in want))
    return rc


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("run", "verify", "selftest"):
        print(__doc__)
        return 2
    mode, d, state = sys.argv[1:]
    nblocks = int(os.environ.get("CHAOS_VOL_BLOCKS", "8192"))
    if mode == "run":
        return cmd_run(d, state, nblocks)
    if mode == "verify":
        return cmd_verify(d, state)
    return cmd_selftest(d, state)


if __name__ == "__main__":
    sys.exit(main())
