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
FLUSH acknowledged (sent once every reply before it had arrived); with
cached in write-through (the stack's write_policy) every acknowledged
write, at once: nothing acknowledged may be lost to any kill. A write-back
write acknowledged and sent after the last kill of cached is durable too
once an unplug-cached succeeded (cached flushed it to the store before it
left the path). Per connection it also keeps the newest version
acknowledged there: vlmc fences a connection whose acknowledged writes a
cache lost (docs/vlmc.md "Write-back loss"), so a read answered without
error on it never returns data older than that connection's own
acknowledged write.

CHAOS_CONNS=2 runs two clients at once, each on its own connection: each
owns half of the volume's 1 MiB objects (client k the objects o with o %
2 == k, its hot MiB object k) and is the only one to write them, and
both read everything (half of their reads anywhere in the volume). A read
is checked against the floors as they were when it was sent (the other
client's writes and FLUSHes are not ordered with it).

A read is right when every sector is a valid sector of a version issued
for its block, not older than the floor nor the connection's own. A
broken connection or an error reply makes the outcome of what was in
flight unknown: the client reconnects (retrying, up to a generous
deadline that only catches hangs), reads a sample (the hot MiBs and some
random blocks) and goes on.

"run" also starts the killer thread: CHAOS_KILLS (default 8) SIGKILLs of
a random peer (store, cached, vlmc; at most 4 each, below the
supervisor's give-up of 5 in 60 s) at random instants, each after the
last killed peer is serving again; after a kill, with probability
CHAOS_STARTUP (default 0.25), the peer's successor is killed again within
0.3 s of its start, most often before it serves (the store replaying its
log, cached plugging, vlmc loading its volumes).

CHAOS_UNPLUGS=N (default 0, at most 4) adds N `xsegctl stack
unplug-cached` at random instants between the kills, each followed later
by a `plug-cached` (and one at the end if cached is still out); half of
them have a kill while the command runs: of cached while it unplugs
(flushing) or of the store (an unplug's flush or a plug under way), or
of cached while it plugs (its start-up). What is accepted:
  - an unplug or plug with no kill during it succeeds (exit 0, "cached
    unplugged" / "cached plugged");
  - an unplug during which the store was killed also succeeds (cached
    retries its flush until the supervisor has the store back);
  - an unplug during which cached was killed may fail (exit 1 saying
    "unplug failed"); a second unplug-cached then takes the dead cached
    out of the path (exit 0), counting a write-back loss if it held one;
  - a plug during which the store or cached was killed may fail (exit 1,
    "plug failed" or that cached did not come up); plug-cached is then
    run again (up to 5 times) until cached serves plugged, or the
    supervisor has brought back a cached that had plugged;
  - after an unplug, status says cached_plugged false and no cached runs.
CHAOS_VOLOPS=N (default 0, at most 8) adds N rounds of volume operations
(class VolOps) at random instants between the kills, and one more after
the load, with no kill, in which every command must succeed. A round:
`volume snapshot vol vol@i`; an acknowledged snapshot read whole; `clone`
of it, 3 batches of writes (a quarter FUA) to the clone, each followed by
a FLUSH and read back with 8 random blocks; `remove` of the clone; part
of the snapshot read again. Half of the commands (while the killer has
kills left and is not busy with one) have vlmc, the store or cached
SIGKILLed 0..0.3 s into them, counted as one of CHAOS_KILLS; the peer
serves again before the next kill. The model:
  - a snapshot may hold, per block, a version at or above the durable
    floor when the command was sent (and at or above the newest version
    acknowledged then, on any connection, when no cached kill came
    between its sending and the snapshot's answer: every write
    acknowledged before a snapshot is in it, docs/vlmc.md) and not above
    the newest version issued when it was answered (a zero sector: the newest TRIM/
    WRITE_ZEROES issued up to then, or version 0); once read, it must read
    the same sector versions ever after;
  - an acknowledged snapshot is listed ever after (at the end and after a
    stop and start, "verify"); a failed one may be listed or not
    (docs/vlmc.md, "If the rewrite fails too"), and read within its
    bounds if it is;
  - a clone writes versions from (k + 1) << 24 (never one of vol's): a
    block reads the snapshot's versions until a write of the clone is
    durable there (FUA, or acknowledged before an acknowledged FLUSH) or
    acknowledged on the connection reading it, then a version of the
    clone not older than that;
  - a clone whose remove was acknowledged is never listed again; a clone
    or remove that failed may leave it listed, reading as above.
Error replies on these connections count with the clients' (EIO only with
a write-back loss counted). CHAOS_BREAK=snapshot makes the model expect,
at a snapshot's first read, the source's newest version wherever the load
wrote a block after the snapshot was answered (a snapshot that follows
its source): the checker must report it.
The seed (CHAOS_SEED, else random) is printed; it fixes the kill schedule
and the clients' commands, not the interleaving of them. CHAOS_BREAK=floor counts a write durable as soon
as it is acknowledged (before its FLUSH): a deliberately wrong floor,
which a kill of a dirty cached must make the checker report.
CHAOS_BREAK=unplug makes each unplug lossy on purpose and the model
blind to it (cached SIGKILLed just before unplug-cached, not counted as a
kill; the writes the connections held unflushed then taken as durable):
the checker must report blocks older than their floor.

Exit status: 0 all right, 1 a check failed (the violations are printed).
"""
import hashlib
import itertools
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
        # the newest version acknowledged on any connection, and the
        # number of cached kills before it was sent (a snapshot's bound)
        self.acked = [0] * nblocks
        self.acked_ep = [0] * nblocks
        self.violations = []
        # floors and the connections' unflushed maps are changed by the
        # clients and the killer (an unplug's promotion)
        self.lock = threading.Lock()

    def raise_floor(self, block, version):
        """Called with self.lock held."""
        if version > self.floor[block]:
            self.floor[block] = version

    def issue(self, block, zero=False):
        """A new version of block: data, or zeroes."""
        self.maxv[block] += 1
        if zero:
            self.zeros.setdefault(block, set()).add(self.maxv[block])
        return self.maxv[block]

    def check(self, block, data, conn_floor, where, floor=None):
        """Checks one block read against floor (default: the block's
        durable floor now) and conn_floor; records violations, returns
        their count."""
        bad = 0
        if floor is None:
            floor = self.floor[block]
        lo = max(floor, conn_floor)
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
                    v, "the durable floor" if v < floor else
                    "this connection's acknowledged write")
            if why is not None:
                bad += 1
                self.violations.append(
                    "%s: block %d (offset %d) sector %d: %s; durable floor "
                    "v%d when sent (v%d now), connection's acknowledged v%d, "
                    "newest issued v%d" %
                    (where, block, block * BS, i, why, floor,
                     self.floor[block], conn_floor, self.maxv[block]))
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
    serial = itertools.count(1)

    def __init__(self, sock):
        self.id = next(Conn.serial)
        self.s = sock
        self.cookie = 0
        self.acked = {}  # block -> newest version acknowledged here
        # block -> (newest version acknowledged, not yet flushed; the
        # number of cached kills before it was sent)
        self.unflushed = {}

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


T0 = time.monotonic()
LOG_LOCK = threading.Lock()


def connect_retry(sock_path, name):
    """A new NBD connection to export name, retried until the deadline
    (a peer may be restarting)."""
    end = time.monotonic() + RECONNECT_DEADLINE
    last = None
    while time.monotonic() < end:
        try:
            return Conn(nbd.connect(sock_path, name, timeout=IO_TIMEOUT))
        except (OSError, EOFError, AssertionError, struct.error) as e:
            last = e
            time.sleep(0.1)
    raise Fail("no NBD connection to %s within %d s: %r" %
               (name, RECONNECT_DEADLINE, last))


def log(msg):
    with LOG_LOCK:
        print("[%6.2f] %s" % (time.monotonic() - T0, msg), flush=True)


class Client:
    """One client: its connection, its share of the blocks (it alone
    writes them), its random stream and its counts. run holds what the
    clients and the killer share (the model, the cached kill count)."""

    def __init__(self, d, run, seed, k=0):
        self.d = d
        self.sock_path = d + "/run/nbd.sock"
        self.run = run
        self.m = run.m
        self.k = k
        self.rng = random.Random(seed if k == 0 else seed * 31 + k)
        self.conn = None
        self.st = dict(writes=0, fua=0, zeroes=0, flushes=0, reads=0, reconnects=0,
                       broken=0, errors={}, acked=0, samples=0)
        self.written = set()
        self.flush_every, self.phase_end = FLUSH_EVERY[1], 0
        n = run.nconns
        # client k writes the objects o % n == k; its hot MiB is object k
        self.objs = [o for o in range(self.m.n // OBJECT) if o % n == k]
        self.hot0 = k * OBJECT

    def log(self, msg):
        log(msg if self.run.nconns == 1 else "client %d: %s" % (self.k, msg))

    def own_block(self):
        r = self.rng
        if self.run.nconns == 1:
            return r.randrange(self.m.n)
        return r.choice(self.objs) * OBJECT + r.randrange(OBJECT)

    def connect(self):
        """A new connection (the old one closed), retried until the deadline."""
        if self.conn:
            self.conn.close()
            self.conn = None
        self.conn = connect_retry(self.sock_path, EXPORT)
        return self.conn

    def note_error(self, err):
        self.st["errors"][err] = self.st["errors"].get(err, 0) + 1

    def run_batch(self, cmds, where):
        """Runs cmds on the current connection, updating the model:
        ("read", (off, len), None), ("write" or "fua", block, version),
        ("zero" or "zerofua", (TRIM or WRITE_ZEROES, first block, blocks),
        [version of each block]). Returns False if the connection must be
        replaced (broken, or an error reply)."""
        c, m = self.conn, self.m
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
        # the floors a read must meet are those when it is sent (the
        # durable one, this connection's own); writes remember how many
        # kills of cached came before them
        with m.lock:
            floors = [{b: (m.floor[b], c.acked.get(b, 0))
                       for b in range(arg[0] // BS, (arg[0] + arg[1]) // BS)}
                      if kind == "read" else None for kind, arg, v in cmds]
            epoch = self.run.cached_kills
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
                    m.check(b, data[k * BS:(k + 1) * BS], fl[b][1],
                            "%s, connection %d" % (where, c.id), floor=fl[b][0])
                continue
            self.st["acked"] += 1
            if kind in ("zero", "zerofua"):
                acked = zip(range(arg[1], arg[1] + arg[2]), v)
            else:
                acked = ((arg, v),)
            with m.lock:
                for b, ver in acked:
                    c.acked[b] = max(c.acked.get(b, 0), ver)
                    if ver > m.acked[b]:
                        m.acked[b], m.acked_ep[b] = ver, epoch
                    if (kind in ("fua", "zerofua") or self.run.break_floor or
                            self.run.writethrough):
                        m.raise_floor(b, ver)
                    elif ver > c.unflushed.get(b, (0, 0))[0]:
                        c.unflushed[b] = (ver, epoch)
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
        with self.m.lock:
            for b, (v, _) in c.unflushed.items():
                self.m.raise_floor(b, v)
            c.unflushed.clear()
        return True

    def sample(self, where):
        """The hot MiBs and 16 random written blocks; False if the
        connection failed meanwhile."""
        hot = self.run.nconns * OBJECT  # every client's hot MiB
        cmds = [("read", (o * OBJECT * BS, HOT * BS), None)
                for o in range(self.run.nconns)]
        if self.written:
            pool = sorted(self.written)
            for b in self.rng.sample(pool, min(16, len(pool))):
                if b >= hot:
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
            if self.run.nconns == 1:
                b0 = r.randrange(self.m.n // OBJECT) * OBJECT
            else:
                b0 = r.choice(self.objs) * OBJECT
            cmds.append(self.zeroing(b0, OBJECT))
        blocks = set()
        for _ in range(r.randint(1, QD) if not cmds else 0):
            b = self.hot0 + r.randrange(HOT) if r.random() < 0.5 else self.own_block()
            if b in blocks:
                continue
            x = r.random()
            if x < 0.25:
                # with two clients half the reads go anywhere (the other
                # client's blocks too)
                if self.run.nconns > 1 and r.random() < 0.5:
                    b = r.randrange(self.m.n)
                    if b in blocks:
                        continue
                blocks.add(b)
                cmds.append(("read", (b * BS, BS), None))
                continue
            blocks.add(b)
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

    def final_flush(self):
        """FLUSH (on a new connection if it fails)."""
        while not self.flush("final"):
            self.reconnect("final FLUSH failed")

    def final(self):
        """Every block, after every client's final FLUSH."""
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


class Run:
    """What the clients and the killer share."""

    def __init__(self, d, nblocks, seed, nconns, writethrough, break_floor):
        self.d = d
        self.m = Model(nblocks)
        self.nconns = nconns
        self.writethrough = writethrough
        self.break_floor = break_floor == "floor"
        self.break_unplug = break_floor == "unplug"
        self.break_snapshot = break_floor == "snapshot"
        # SIGKILLs of cached so far (raised after the kill: a write sent
        # with the count unchanged since cannot have been acknowledged by
        # a cached killed before it)
        self.cached_kills = 0
        self.failed = threading.Event()  # a client failed: all stop
        self.clients = [Client(d, self, seed, k) for k in range(nconns)]

    def total(self, key):
        return sum(c.st[key] for c in self.clients)

    def promote_unplugged(self, snap=None):
        """After a successful unplug-cached: every write-back write
        acknowledged on a live connection, sent after the last kill of
        cached, is in the store (cached flushed it before it left the
        path, or the store took it directly). Returns how many blocks'
        floors rose, how many unflushed writes the connections held, how
        many of them sent before the last kill of cached."""
        n = held = older = 0
        with self.m.lock:
            for b, v in snap or ():  # CHAOS_BREAK=unplug
                if v > self.m.floor[b]:
                    self.m.raise_floor(b, v)
                    n += 1
            for c in self.clients:
                conn = c.conn
                if not conn:
                    continue
                for b, (v, ep) in conn.unflushed.items():
                    held += 1
                    if ep != self.cached_kills:
                        older += 1
                    elif v > self.m.floor[b]:
                        self.m.raise_floor(b, v)
                        n += 1
        return n, held, older


class Killer(threading.Thread):
    def __init__(self, run, seed, kills, startup, unplugs):
        super().__init__(daemon=True)
        self.sh = run  # not self.run: Thread.run
        self.d = run.d
        self.rng = random.Random(seed * 7919 + 1)
        self.kills = kills
        self.startup = startup
        self.unplugs = unplugs
        self.k = 0  # kills so far
        self.u = 0  # unplugs so far
        self.p = 0  # plugs so far
        self.count = dict.fromkeys(ROLES, 0)
        self.plugged = True
        self.history = []
        self.error = None
        self.done = threading.Event()
        self.stop = threading.Event()  # the client failed: no more kills
        # held for each kill, unplug or plug, and by a volume operation
        # that kills a peer during its command
        self.lock = threading.Lock()

    def run(self):
        try:
            self.kill_all()
        except Exception as e:  # reported by the main thread
            self.error = e
        self.done.set()

    def wait_pid(self, role, old, want_serving):
        """The new process of role after old was killed (serving, if
        want_serving): a bound of 120 s catches a peer that never comes."""
        d = self.d
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

    def kill(self, role, pid, how):
        run = self.sh
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            raise Fail("kill %d: %s pid %d died before it was killed%s" %
                       (self.k + 1, role, pid, how))
        if role == "cached":
            with run.m.lock:
                run.cached_kills += 1
        self.k += 1
        self.count[role] += 1
        w, a, f = run.total("writes"), run.total("acked"), run.total("flushes")
        self.history.append("%s pid %d%s after %d writes" % (role, pid, how, w))
        log("kill %d: SIGKILL %s pid %d%s (%d writes, %d acknowledged, "
            "%d flushes so far)" % (self.k, role, pid, how, w, a, f))

    def kill_all(self):
        d = self.d
        while self.sh.total("acked") < 200 and not self.stop.is_set():
            time.sleep(0.05)
        while self.k < self.kills or self.u < self.unplugs or not self.plugged:
            if self.stop.wait(self.rng.uniform(0.1, 2.0)):
                return
            # a kill by the volume operations (VolOps.run_killing) is
            # over, its peer serving again, before this one starts
            with self.lock:
                if self.step(d):
                    return

    def step(self, d):
        """One kill, unplug or plug (self.lock held); True: stop."""
        left_k, left_u = self.kills - self.k, self.unplugs - self.u
        if not self.plugged and (left_k == 0 or self.rng.random() < 0.5):
            self.plug()
            return False
        if self.plugged and left_u and (
                left_k == 0 or self.rng.random() < left_u / (left_u + left_k)):
            self.unplug()
            return False
        roles = [r for r in ROLES if self.count[r] < KILLS_PER_ROLE and
                 (self.plugged or r != "cached")]
        if not left_k or not roles:
            return False
        role = self.rng.choice(roles)
        pid = pid_of(d, role)
        if not pid or not is_peer(d, pid):
            raise Fail("kill %d: no live %s (pid file says %d)" %
                       (self.k + 1, role, pid))
        self.kill(role, pid, "")
        # its successor killed again as soon as it runs, most often
        # before it serves (replaying the store's log, plugging cached)
        while (self.k < self.kills and self.count[role] < KILLS_PER_ROLE and
               self.rng.random() < self.startup):
            new = self.wait_pid(role, pid, False)
            if self.stop.wait(self.rng.uniform(0, 0.3)):
                return True
            up = serving(d, role, new)
            self.kill(role, new, " (serving already)" if up else
                      " during its start-up")
            pid = new
        new = self.wait_pid(role, pid, True)
        log("kill %d: %s back as pid %d" % (self.k, role, new))
        return False

    # ---- unplug-cached and plug-cached ----

    def xsegctl(self, cmd):
        x = os.environ.get("X")
        if not x:
            raise Fail("X (the xsegctl binary) not set: cannot %s" % cmd)
        return subprocess.Popen([x, "stack", cmd, "--dir", self.d],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def finish(self, p, what):
        """The output of command p, once it exited (bound: cached's 300 s
        unplug wait and its 60 s flush timeout, as a hang detector)."""
        try:
            out, _ = p.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise Fail("%s did not exit within 420 s" % what)
        out = " / ".join(l for l in out.splitlines() if l.strip())
        log("%s: exit %d: %s" % (what, p.returncode, out))
        return out

    def kill_during(self, p, roles, what):
        """Half the time (kills left) SIGKILLs one of roles after 0..0.5 s
        while p runs; the role killed, or None."""
        d = self.d
        roles = [r for r in roles if self.count[r] < KILLS_PER_ROLE]
        if self.k >= self.kills or not roles or self.rng.random() >= 0.5:
            return None, 0
        role = self.rng.choice(roles)
        end = time.monotonic() + self.rng.uniform(0, 0.5)
        while True:
            if p.poll() is not None:
                log("%s: over before the kill of %s planned during it" %
                    (what, role))
                return None, 0
            pid = pid_of(d, role)
            # cached being plugged: once its process runs; being
            # unplugged: once the command has told the supervisor
            # (cached.off), else a restart decided a moment earlier may
            # plug it again (a documented limit, docs/operations.md)
            if (time.monotonic() >= end and pid and is_peer(d, pid) and
                    (what[:6] != "unplug" or role != "cached" or
                     os.path.exists(d + "/run/cached.off"))):
                break
            time.sleep(0.005)
        self.kill(role, pid, " during " + what)
        return role, pid

    def status(self):
        x = os.environ.get("X")
        out = subprocess.run([x, "stack", "status", "--dir", self.d, "--json"],
                             capture_output=True, text=True).stdout
        try:
            st = json.loads(out)
        except ValueError:
            raise Fail("stack status --json: not JSON: %r" % out[:300])
        cached = [p for p in st["peers"] if p["role"] == "cached"][0]
        return st["cached_plugged"], cached["alive"], cached["pid"]

    def unplug(self):
        self.u += 1
        what = "unplug %d" % self.u
        snap = None
        if self.sh.break_unplug:
            # an unplug that loses what cached held (a SIGKILL first) and
            # a model that takes it for a clean one: the writes the
            # connections held unflushed before the kill become "durable"
            with self.sh.m.lock:
                snap = [(b, v) for c in self.sh.clients if c.conn
                        for b, (v, _) in c.conn.unflushed.items()]
            pid = pid_of(self.d, "cached")
            os.kill(pid, signal.SIGKILL)
            log("%s: BROKEN UNPLUG: SIGKILL cached pid %d (not counted), "
                "then unplug-cached; %d unflushed writes taken as durable" %
                (what, pid, len(snap)))
        else:
            log("%s: xsegctl stack unplug-cached" % what)
        p = self.xsegctl("unplug-cached")
        role, pid = self.kill_during(p, ("cached", "store"), what)
        out = self.finish(p, "%s: unplug-cached" % what)
        if p.returncode:
            if role != "cached":
                raise Fail("%s: unplug-cached failed with no kill of cached "
                           "during it (%s): %s" %
                           (what, "the store killed" if role else "no kill", out))
            if "unplug failed" not in out:
                raise Fail("%s: unplug-cached exit %d does not say that the "
                           "unplug failed: %s" % (what, p.returncode, out))
            # a dead cached still plugged: the second unplug takes it out
            p = self.xsegctl("unplug-cached")
            out = self.finish(p, "%s: unplug-cached again" % what)
            if p.returncode:
                raise Fail("%s: unplug-cached of the dead cached failed: %s" %
                           (what, out))
        plugged, alive, cpid = self.status()
        if plugged or alive:
            raise Fail("%s: unplug-cached said '%s', yet status says cached "
                       "plugged %s, running %s (pid %d)" %
                       (what, out, plugged, alive, cpid))
        self.plugged = False
        self.history.append("unplug" + (" (%s killed during it)" % role
                                        if role else ""))
        if not self.sh.writethrough:
            log("%s: cached out of the path: %d blocks' acknowledged "
                "write-back writes now count as durable (of %d unflushed on "
                "the live connections, %d sent before the last kill of "
                "cached)" % ((what,) + self.sh.promote_unplugged(snap)))
        if role == "store":
            log("%s: store back as pid %d" %
                (what, self.wait_pid("store", pid, True)))

    def plug(self):
        self.p += 1
        what = "plug %d" % self.p
        log("%s: xsegctl stack plug-cached" % what)
        p = self.xsegctl("plug-cached")
        role, pid = self.kill_during(p, ("store", "cached"), what)
        out = self.finish(p, "%s: plug-cached" % what)
        if p.returncode:
            if role is None:
                raise Fail("%s: plug-cached failed with no kill during it: %s" %
                           (what, out))
            if not re.search(r"plug failed|did not come up|exited during", out):
                raise Fail("%s: plug-cached exit %d does not say why: %s" %
                           (what, p.returncode, out))
        self.history.append("plug" + (" (%s killed during it)" % role
                                      if role else ""))
        if role == "store":
            log("%s: store back as pid %d" %
                (what, self.wait_pid("store", pid, True)))
        if not p.returncode and role != "cached":
            plugged, alive, cpid = self.status()
            if not plugged or not alive:
                raise Fail("%s: plug-cached said '%s', yet status says cached "
                           "plugged %s, running %s (pid %d)" %
                           (what, out, plugged, alive, cpid))
        # plugged and serving: after a plug that succeeded, or the
        # supervisor's restart of a cached killed once it had plugged, or
        # plug-cached again (5 times at most) after one killed before
        end = time.monotonic() + 120
        tries = 0
        while True:
            plugged, alive, cpid = self.status()
            if plugged and alive and cpid != pid and serving(self.d, "cached", cpid):
                break
            if time.monotonic() > end:
                raise Fail("%s: cached not serving plugged within 120 s "
                           "(plugged %s, running %s, pid %d)" %
                           (what, plugged, alive, cpid))
            if not alive and not plugged:
                tries += 1
                if tries > 5:
                    raise Fail("%s: plug-cached failed 5 times more" % what)
                p = self.xsegctl("plug-cached")
                out = self.finish(p, "%s: plug-cached again" % what)
                continue
            time.sleep(0.2)
        self.plugged = True
        log("%s: cached serving plugged as pid %d" % (what, cpid))


# ---- volume operations during the kills (CHAOS_VOLOPS) ----

# clone k writes versions from (k + 1) << 24 on: never a version of vol,
# so a clone block is told from the snapshot's data it started with
CLONE_BASE = 1 << 24
CTL_TIMEOUT = 420  # one volume command: a hang detector (drain 180 s, COPYs)


def xvolume(d, *args):
    """xsegctl volume --dir d ARGS: (exit status, stdout, all output on
    one line)."""
    x = os.environ.get("X")
    if not x:
        raise Fail("X (the xsegctl binary) not set: cannot run volume %s" %
                   args[0])
    try:
        p = subprocess.run([x, "volume", "--dir", d] + list(args),
                           capture_output=True, text=True, timeout=CTL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Fail("xsegctl volume %s did not exit within %d s (hang)" %
                   (" ".join(args), CTL_TIMEOUT))
    out = " / ".join(l for l in (p.stdout + p.stderr).splitlines() if l.strip())
    return p.returncode, p.stdout, out


def list_volumes(d):
    """The names `volume list` shows (volume lines only), retried while
    vlmc is down (bound: 180 s)."""
    end = time.monotonic() + RECONNECT_DEADLINE
    while True:
        rc, so, out = xvolume(d, "list")
        if rc == 0:
            return set(l.split()[0] for l in so.splitlines()
                       if l.strip() and not l.startswith("#"))
        if time.monotonic() > end:
            raise Fail("volume list failed for %d s: %s" %
                       (RECONNECT_DEADLINE, out))
        time.sleep(0.2)


class Snap:
    """A snapshot of vol and what it may hold: per block a version at or
    above lo (the durable floor when the command was sent) and not above
    hi (the newest version issued when it was answered); once read, the
    versions first seen (a snapshot never changes)."""

    def __init__(self, name, lo):
        self.name = name
        self.ok = None  # True: acknowledged; False: failed (undecided)
        self.lo = lo
        self.hi = None
        self.seen = {}  # block -> the sector versions of its first read

    def to_json(self):
        return dict(name=self.name, ok=self.ok, lo=self.lo, hi=self.hi,
                    seen={b: list(v) for b, v in self.seen.items()})

    @classmethod
    def from_json(cls, j):
        s = cls(j["name"], j["lo"])
        s.ok, s.hi = j["ok"], j["hi"]
        s.seen = {int(b): tuple(v) for b, v in j["seen"].items()}
        return s


class Clone:
    """A clone of a snapshot and the writes made to it (versions from
    base on): a block reads the snapshot's versions until a write of the
    clone is durable there (or acknowledged on the connection reading),
    then a version of the clone not older than that. state: live,
    removed (remove acknowledged: never listed again), failed (the clone
    or its remove failed: may be listed, and then reads as above)."""

    def __init__(self, name, snap, base):
        self.name, self.snap, self.base = name, snap, base
        self.next = base
        self.issued = {}  # block -> versions issued
        self.floor = {}  # block -> newest durable version
        self.state = "live"

    def to_json(self):
        return dict(name=self.name, snap=self.snap.name, base=self.base,
                    issued={b: sorted(v) for b, v in self.issued.items()},
                    floor=self.floor, state=self.state)

    @classmethod
    def from_json(cls, j, snaps):
        c = cls(j["name"], snaps[j["snap"]], j["base"])
        c.issued = {int(b): set(v) for b, v in j["issued"].items()}
        c.floor = {int(b): v for b, v in j["floor"].items()}
        c.state = j["state"]
        return c


def decode_block(m, block, data, where):
    """The 8 sector versions of a block read (0: zeroes), or None after
    recording why a sector is not a valid one."""
    vs = []
    for i in range(SPB):
        v, why = decode(block, i, data[i * SECT:(i + 1) * SECT])
        if why is not None:
            m.violations.append("%s: block %d sector %d: %s" %
                                (where, block, i, why))
            return None
        vs.append(v)
    return tuple(vs)


def check_snap(m, s, block, data, where, brk=False):
    """One block of snapshot s read: the versions first seen, if any;
    else each sector within [lo, hi] (a zero sector: the newest zeroing
    issued up to hi, or version 0). brk (CHAOS_BREAK=snapshot): the model
    expects the source's newest version, as if the snapshot followed its
    source."""
    vs = decode_block(m, block, data, where)
    if vs is None:
        return
    if block in s.seen:
        if vs != s.seen[block]:
            m.violations.append(
                "%s: block %d: snapshot %s changed: sector versions %s, at "
                "its first read %s" % (where, block, s.name, list(vs),
                                       list(s.seen[block])))
        return
    lo, hi = s.lo[block], s.hi[block]
    if brk and m.maxv[block] > hi:
        lo = m.maxv[block]
    zs = m.zeros.get(block, ())
    for i, v in enumerate(vs):
        why = None
        if v == 0:
            v = max((z for z in zs if z <= hi), default=0)
        elif v in zs:
            why = "data of version %d, which was a TRIM/WRITE_ZEROES" % v
        if why is None and v > hi:
            why = "version %d, issued after the snapshot was answered" % v
        elif why is None and v < lo:
            why = ("version %d older than the durable floor or the newest "
                   "write acknowledged (no cached kill since) when the "
                   "snapshot was sent" % v)
        if why is not None:
            m.violations.append(
                "%s: block %d (offset %d) sector %d of snapshot %s (%s): %s; "
                "lower bound v%d, newest issued when answered v%d" %
                (where, block, block * BS, i, s.name,
                 "acknowledged" if s.ok else "failed, listed", why, lo, hi))
            return
    s.seen[block] = vs


def check_clone(m, c, block, data, conn_floor, where):
    """One block of clone c read (see Clone)."""
    vs = decode_block(m, block, data, where)
    if vs is None:
        return
    floor = c.floor.get(block, 0)
    lo = max(floor, conn_floor)
    snapv = c.snap.seen.get(block)
    for i, v in enumerate(vs):
        why = None
        if v >= c.base:
            if v not in c.issued.get(block, ()):
                why = "version %d never issued for this clone" % v
            elif v < lo:
                why = "version %d older than %s" % (
                    v, "the clone's durable floor" if v < floor else
                    "this connection's acknowledged write")
        elif lo:
            why = ("the snapshot's data (v%d) where the clone's own v%d is "
                   "durable or acknowledged here" % (v, lo))
        elif snapv is None:
            why = "v%d, and the snapshot was never read (test bug)" % v
        elif v != snapv[i]:
            why = "v%d, where snapshot %s held v%d" % (v, c.snap.name, snapv[i])
        if why is not None:
            m.violations.append(
                "%s: block %d (offset %d) sector %d of clone %s: %s; clone's "
                "floor v%d, connection's acknowledged v%d" %
                (where, block, block * BS, i, c.name, why, floor, conn_floor))
            return


class VolOps(threading.Thread):
    """CHAOS_VOLOPS=N rounds at random instants during the kills, each:
    snapshot vol vol@i (answered or not); the whole of an acknowledged
    snapshot read and checked; a clone of it written (FUA, FLUSH) and read
    back, then removed; the snapshot read again. After the load one more
    round, which must succeed (no kill then); at the end and after a stop
    and start (verify) every acknowledged snapshot is listed and reads
    what it read first, no acknowledged remove's clone is listed, and a
    failed snapshot or clone that is listed reads within its bounds."""

    def __init__(self, run, killer, seed, rounds):
        super().__init__(daemon=True)
        self.sh = run
        self.d = run.d
        self.m = run.m
        self.killer = killer
        self.rounds = rounds
        self.rng = random.Random(seed * 104729 + 3)
        self.snaps, self.clones = [], []
        self.errors = {}
        self.history = []
        self.error = None
        self.i = 0
        self.done = threading.Event()

    def stopped(self):
        return self.killer.stop.is_set() or self.sh.failed.is_set()

    def run(self):
        try:
            while self.sh.total("acked") < 200 and not self.stopped():
                time.sleep(0.05)
            for _ in range(self.rounds):
                if self.killer.stop.wait(self.rng.uniform(0.2, 2.0)):
                    break
                if self.stopped():
                    break
                self.round(False)
        except Exception as e:  # reported by the main thread
            self.error = e
        self.done.set()

    # ---- NBD on a snapshot or clone ----

    def connect(self, name):
        return connect_retry(self.d + "/run/nbd.sock", name)

    def note(self, err):
        self.errors[err] = self.errors.get(err, 0) + 1

    def command(self, *args):
        """xsegctl volume ARGS, half the time (while the killer has kills
        left and is not busy) with vlmc, the store or cached (plugged)
        SIGKILLed 0..0.3 s into it, counted as one of the killer's kills;
        the peer serves again before it returns. (exit status, output)."""
        k = self.killer
        role = None
        if (k and self.rng.random() < 0.5 and k.k < k.kills and
                k.lock.acquire(blocking=False)):
            roles = [r for r in ("vlmc", "store", "cached")
                     if k.count[r] < KILLS_PER_ROLE and
                     (k.plugged or r != "cached")]
            if k.k < k.kills and roles:
                role = self.rng.choice(roles)
            else:
                k.lock.release()
        if role is None:
            rc, _, out = xvolume(self.d, *args)
            return rc, out
        what = "volume %s" % " ".join(args)
        try:
            x = os.environ.get("X")
            p = subprocess.Popen([x, "volume", "--dir", self.d] + list(args),
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            end = time.monotonic() + self.rng.uniform(0, 0.3)
            while time.monotonic() < end and p.poll() is None:
                time.sleep(0.005)
            pid = pid_of(self.d, role)
            if p.poll() is None and pid and is_peer(self.d, pid):
                k.kill(role, pid, " during " + what)
            else:
                log("volops: %s over before the kill of %s planned during it"
                    % (what, role))
                pid = 0
            out = k.finish(p, "volops: " + what)
            if pid:
                log("volops: %s back as pid %d" %
                    (role, k.wait_pid(role, pid, True)))
        finally:
            k.lock.release()
        return p.returncode, out

    def read_all(self, name, check, where, blocks=None):
        """Reads name (every block, or the 1 MiB objects holding blocks)
        and calls check(block, data) on each block; a broken connection
        or an error reply: a new connection, the read again."""
        objs = sorted(set(b // OBJECT for b in blocks)) if blocks else \
            range(self.m.n // OBJECT)
        conn = self.connect(name)
        try:
            for o in objs:
                for attempt in range(20):
                    try:
                        (err, data), = conn.batch(
                            [(nbd.CMD_READ, o * OBJECT * BS, OBJECT * BS, b"", 0)])
                    except Broken as e:
                        log("volops: %s: connection broke reading %s: %s" %
                            (where, name, e))
                        conn.close()
                        conn = self.connect(name)
                        continue
                    if err:
                        self.note(err)
                        log("volops: %s: read of %s answered %d" %
                            (where, name, err))
                        conn.close()
                        conn = self.connect(name)
                        continue
                    for k in range(OBJECT):
                        check(o * OBJECT + k, data[k * BS:(k + 1) * BS])
                    break
                else:
                    raise Fail("%s: reading %s object %d failed 20 times" %
                               (where, name, o))
        finally:
            conn.close()

    def read_snap(self, s, where, blocks=None):
        brk = self.sh.break_snapshot
        self.read_all(s.name, lambda b, data: check_snap(
            self.m, s, b, data, "%s, snapshot %s" % (where, s.name), brk),
            where, blocks)

    # ---- one round ----

    def snapshot(self, name):
        m, run = self.m, self.sh
        with m.lock:
            s = Snap(name, list(m.floor))
            # every write acknowledged before the snapshot is in it
            # (docs/vlmc.md "Snapshots and clones"), unless a cached that
            # held it was killed: only if no cached kill came between its
            # sending and the snapshot's answer
            ep = run.cached_kills
            acked = [max(f, a) if e == ep else f
                     for f, a, e in zip(m.floor, m.acked, m.acked_ep)]
        kills = self.killer.k
        log("volops: xsegctl volume snapshot vol %s" % name)
        rc, out = self.command("snapshot", "vol", name)
        s.hi = list(m.maxv)
        with m.lock:
            if run.cached_kills == ep:
                s.lo = acked
        s.ok = rc == 0
        log("volops: snapshot vol %s: exit %d: %s" % (name, rc, out))
        self.history.append("snapshot %s %s%s" % (
            name, "ok" if s.ok else "FAILED",
            " (%d kill(s) during it)" % (self.killer.k - kills)
            if self.killer.k > kills else ""))
        self.snaps.append(s)
        return s, out

    def clone_round(self, s, final):
        name = "%s-c%d" % (s.name, self.i)
        base = (len(self.clones) + 1) * CLONE_BASE
        c = Clone(name, s, base)
        self.clones.append(c)
        log("volops: xsegctl volume clone %s %s" % (s.name, name))
        rc, out = self.command("clone", s.name, name)
        log("volops: clone %s %s: exit %d: %s" % (s.name, name, rc, out))
        if rc:
            if final:
                raise Fail("clone %s %s with no kill failed: %s" %
                           (s.name, name, out))
            c.state = "failed"
            self.history.append("clone %s FAILED" % name)
        else:
            self.history.append("clone %s ok" % name)
            self.write_clone(c)
        self.remove(c, final)

    def write_clone(self, c):
        """3 batches of 8 writes (a quarter FUA) on c, each then a FLUSH
        and a read of what was written plus 8 random blocks; reconnecting
        after a broken connection or an error reply."""
        r, m = self.rng, self.m
        conn = self.connect(c.name)
        acked, unflushed = {}, {}
        try:
            for _ in range(3):
                blocks = set()
                while len(blocks) < 8:
                    blocks.add(r.randrange(HOT) if r.random() < 0.5 else
                               r.randrange(m.n))
                wire, vers = [], []
                for b in sorted(blocks):
                    v = c.next
                    c.next += 1
                    c.issued.setdefault(b, set()).add(v)
                    fua = r.random() < 0.25
                    wire.append((nbd.CMD_WRITE, b * BS, BS, block_data(b, v),
                                 CMD_FLAG_FUA if fua else 0))
                    vers.append((b, v, fua))
                reads = sorted(blocks | set(r.randrange(m.n) for _ in range(8)))
                try:
                    res = conn.batch(wire)
                    ok = True
                    for (b, v, fua), (err, _) in zip(vers, res):
                        if err:
                            self.note(err)
                            ok = False
                            continue
                        acked[b] = v
                        if fua:
                            c.floor[b] = max(c.floor.get(b, 0), v)
                        else:
                            unflushed[b] = v
                    # the FLUSH once every write was answered: it covers them
                    (err, _), = conn.batch([(nbd.CMD_FLUSH, 0, 0, b"", 0)])
                    if err:
                        self.note(err)
                        ok = False
                    elif ok:
                        for b, v in unflushed.items():
                            c.floor[b] = max(c.floor.get(b, 0), v)
                        unflushed.clear()
                    if ok:
                        floors = {b: acked.get(b, 0) for b in reads}
                        res = conn.batch([(nbd.CMD_READ, b * BS, BS, b"", 0)
                                          for b in reads])
                        for b, (err, data) in zip(reads, res):
                            if err:
                                self.note(err)
                                ok = False
                            else:
                                check_clone(m, c, b, data, floors[b],
                                            "clone %s, connection %d" %
                                            (c.name, conn.id))
                except Broken as e:
                    log("volops: connection %d to %s broke: %s" %
                        (conn.id, c.name, e))
                    ok = False
                if not ok:
                    log("volops: %s: error replies or a broken connection "
                        "(errors so far %s): a new connection" %
                        (c.name, self.errors))
                    conn.close()
                    conn = self.connect(c.name)
                    acked, unflushed = {}, {}
        finally:
            conn.close()

    def remove(self, c, final):
        for attempt in range(5):
            log("volops: xsegctl volume remove %s" % c.name)
            rc, out = self.command("remove", c.name)
            log("volops: remove %s: exit %d: %s" % (c.name, rc, out))
            if rc == 0:
                c.state = "removed"
                self.history.append("remove %s ok" % c.name)
                if c.name in list_volumes(self.d):
                    self.m.violations.append(
                        "remove %s acknowledged, yet list shows it" % c.name)
                return
            if final and c.state == "live":
                raise Fail("remove %s with no kill failed: %s" % (c.name, out))
            if "no volume" in out:
                # a failed clone, or a remove whose answer was lost: it
                # may still be listed later (an undecided table)
                c.state = "failed"
                self.history.append("remove %s: no volume" % c.name)
                return
            time.sleep(1)
        c.state = "failed"
        self.history.append("remove %s FAILED 5 times" % c.name)

    def round(self, final):
        self.i += 1
        name = "vol@%d" % self.i
        s, out = self.snapshot(name)
        if final and not s.ok:
            n = losses(self.d)
            if "write-back loss" not in out or not n:
                raise Fail("snapshot %s with no kill failed: %s" % (name, out))
            s, out = self.snapshot("vol@%d.1" % self.i)  # once more
            if not s.ok:
                raise Fail("snapshot of vol failed twice with no kill: %s" % out)
        ok = [x for x in self.snaps if x.ok]
        if not ok:
            return
        t = s if s.ok else self.rng.choice(ok)
        self.read_snap(t, "round %d" % self.i)
        self.clone_round(t, final)
        # the snapshot unchanged by its clone's writes and remove
        self.read_snap(t, "round %d, after the clone's remove" % self.i,
                       blocks=range(2 * OBJECT))

    def check_all(self, where):
        """Every acknowledged snapshot listed, reading what it read first;
        no clone whose remove was acknowledged listed; failed ones that
        are listed read within their bounds."""
        names = list_volumes(self.d)
        for s in self.snaps:
            if s.name in names:
                self.read_snap(s, where)
            elif s.ok:
                self.m.violations.append(
                    "%s: snapshot %s was acknowledged, yet list does not show "
                    "it (%s)" % (where, s.name, " ".join(sorted(names))))
        for c in self.clones:
            if c.name not in names:
                continue
            if c.state == "removed":
                self.m.violations.append(
                    "%s: clone %s was removed (acknowledged), yet list shows "
                    "it" % (where, c.name))
                continue
            self.read_all(c.name, lambda b, data: check_clone(
                self.m, c, b, data, 0, "%s, clone %s" % (where, c.name)), where)
        listed = sum(1 for s in self.snaps if s.name in names)
        log("volops: %s: %d of %d snapshots listed (%d acknowledged), %d "
            "clones listed, %d removed" %
            (where, listed, len(self.snaps), sum(1 for s in self.snaps if s.ok),
             sum(1 for c in self.clones if c.name in names),
             sum(1 for c in self.clones if c.state == "removed")))

    def to_json(self):
        return dict(snaps=[s.to_json() for s in self.snaps],
                    clones=[c.to_json() for c in self.clones],
                    history=self.history)

    def load(self, j):
        self.snaps = [Snap.from_json(s) for s in j["snaps"]]
        by = {s.name: s for s in self.snaps}
        self.clones = [Clone.from_json(c, by) for c in j["clones"]]
        self.history = j["history"]


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


def write_policy(d):
    """The stack's write_policy (its run/stack.conf), writeback if none."""
    try:
        with open(d + "/run/stack.conf") as f:
            m = re.search(r"^write_policy = (\S+)$", f.read(), re.M)
    except OSError:
        return "writeback"
    return m.group(1) if m else "writeback"


def client_loop(c, killer):
    """c's load until the killer is done and 300 writes more (shared
    among the clients) are issued; a Fail is kept in c.error."""
    run = c.run
    try:
        hang = time.monotonic() + 600
        extra = None
        while extra is None or c.st["writes"] < extra:
            if killer.done.is_set() and extra is None:
                extra = c.st["writes"] + 300 // run.nconns  # after the last restart
            if not c.step():
                c.reconnect("after %d writes" % c.st["writes"])
            if len(c.m.violations) >= 20 or run.failed.is_set():
                break
            if time.monotonic() > hang:
                raise Fail("load did not finish within 600 s")
    except Fail as e:
        c.error = e
        run.failed.set()
    except Exception as e:  # a bug of this script: fail, do not hang
        c.error = Fail("client %d: %r" % (c.k, e))
        run.failed.set()


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
    unplugs = int(os.environ.get("CHAOS_UNPLUGS", "0"))
    if not 0 <= unplugs <= 4:
        print("chaos_client: CHAOS_UNPLUGS=%d: 0..4" % unplugs)
        return 2
    nconns = int(os.environ.get("CHAOS_CONNS", "1"))
    if nconns not in (1, 2) or nblocks % (OBJECT * nconns):
        print("chaos_client: CHAOS_CONNS=%d: 1 or 2 (and the volume whole "
              "objects, as many for each)" % nconns)
        return 2
    volops = int(os.environ.get("CHAOS_VOLOPS", "0"))
    if not 0 <= volops <= 8:
        print("chaos_client: CHAOS_VOLOPS=%d: 0..8" % volops)
        return 2
    brk = os.environ.get("CHAOS_BREAK", "")
    if brk not in ("", "floor", "unplug", "snapshot") or (
            brk == "unplug" and not unplugs) or (brk == "snapshot" and not volops):
        print("chaos_client: CHAOS_BREAK=%s: only 'floor', 'unplug' with "
              "CHAOS_UNPLUGS, 'snapshot' with CHAOS_VOLOPS (or unset)" % brk)
        return 2
    policy = write_policy(d)
    wt = policy == "writethrough"
    print("chaos: seed %d (CHAOS_SEED=%d reproduces the schedule), %d kills, "
          "start-up kills %.2f, %d unplug(s), %d volume op round(s), %d "
          "connection(s), cached %s%s" %
          (seed, seed, kills, startup, unplugs, volops, nconns, policy,
           ", BROKEN FLOOR (CHAOS_BREAK=floor)" if brk == "floor" else
           ", BROKEN SNAPSHOT MODEL (CHAOS_BREAK=snapshot)"
           if brk == "snapshot" else
           ", BROKEN UNPLUG (CHAOS_BREAK=unplug)" if brk else ""), flush=True)
    run = Run(d, nblocks, seed, nconns, wt, brk)
    killer = Killer(run, seed, kills, startup, unplugs)
    vo = VolOps(run, killer, seed, volops) if volops else None
    threads = []
    try:
        for c in run.clients:
            c.error = None
            c.connect()
        killer.start()
        if vo:
            vo.start()
        threads = [threading.Thread(target=client_loop, args=(c, killer),
                                    daemon=True) for c in run.clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in run.clients:
            if c.error:
                raise c.error
        if run.m.violations:
            raise Fail("wrong data read during the load")
        killer.done.wait(300)
        if isinstance(killer.error, Fail):
            raise killer.error
        if killer.error:
            raise Fail("the killer failed: %r" % killer.error)
        if not killer.done.is_set():
            raise Fail("the killer did not finish")
        if vo:
            # a hang detector: each command is bounded by CTL_TIMEOUT
            if not vo.done.wait(1800):
                raise Fail("the volume operations did not finish")
            if isinstance(vo.error, Fail):
                raise vo.error
            if vo.error:
                raise Fail("the volume operations failed: %r" % vo.error)
        for c in run.clients:
            c.final_flush()
        run.clients[0].final()
        if vo:
            vo.round(True)  # no kill now: every command must succeed
            vo.check_all("end of the load")
            if run.m.violations:
                raise Fail("wrong data read from a snapshot or clone")
    except Fail as e:
        log("FAIL: %s" % e)
        killer.stop.set()
        run.failed.set()
        for t in threads:
            t.join(IO_TIMEOUT)
        report(run.m, "seed %d" % seed)
        return 1
    finally:
        killer.stop.set()
        for c in run.clients:
            if c.conn:
                c.conn.close()
    n = losses(d)
    tot = {k: run.total(k) for k in ("writes", "fua", "zeroes", "acked", "flushes",
                                      "reads", "reconnects", "broken", "samples")}
    errors = {}
    for c in run.clients:
        for e, k in c.st["errors"].items():
            errors[e] = errors.get(e, 0) + k
    for e, k in (vo.errors.items() if vo else ()):
        errors[e] = errors.get(e, 0) + k
    log("seed %d: %d writes (%d FUA), %d TRIM/WRITE_ZEROES, %d acknowledged, "
        "%d FLUSHes, %d reads, %d reconnects (%d broken connections), error "
        "replies %s, samples %d; kills, unplugs, plugs: %s; write-back losses "
        "counted %s%s" %
        (seed, tot["writes"], tot["fua"], tot["zeroes"], tot["acked"],
         tot["flushes"], tot["reads"], tot["reconnects"], tot["broken"], errors,
         tot["samples"], "; ".join(killer.history), n,
         "; volume ops: " + "; ".join(vo.history) if vo else ""))
    run.m.save(state, dict(seed=seed, errors=errors, losses=n,
                           kills=killer.history, policy=policy,
                           volops=vo.to_json() if vo else None))
    rc = report(run.m, "seed %d" % seed)
    bad = {e: k for e, k in errors.items() if e != EIO}
    if bad:
        print("FAIL: seed %d: error replies other than EIO: %s" % (seed, bad))
        rc = 1
    if wt and (errors or n):
        print("FAIL: seed %d: cached in write-through, yet %d write-back "
              "loss(es) counted and error replies %s: nothing acknowledged "
              "may be lost there" % (seed, n or 0, errors))
        rc = 1
    elif errors.get(EIO) and n == 0:
        print("FAIL: seed %d: %d EIO replies, yet the stack counted no write-back "
              "loss" % (seed, errors[EIO]))
        rc = 1
    if rc == 0:
        written = set().union(*(c.written for c in run.clients))
        print("ok: seed %d: every block read back right after %d kills, %d "
              "unplug(s) (%d blocks written, %d with a durable version)%s" %
              (seed, killer.k, killer.u, len(written),
               sum(1 for f in run.m.floor if f),
               "; %d snapshots (%d acknowledged), every one listed read the "
               "same each time; %d clones, %d removed and not listed" %
               (len(vo.snaps), sum(1 for x in vo.snaps if x.ok),
                len(vo.clones),
                sum(1 for x in vo.clones if x.state == "removed"))
               if vo else ""))
    return rc


def cmd_verify(d, state):
    m, st = Model.load(state)
    c = Run(d, m.n, 0, 1, False, "").clients[0]
    c.m = c.run.m = m
    try:
        c.connect()
        for off in range(0, m.n * BS, 1 << 20):
            if not c.run_batch([("read", (off, min(1 << 20, m.n * BS - off)), None)],
                               "verify after restart"):
                raise Fail("verify: read at %d failed: %s" % (off, c.st["errors"]))
        if st.get("volops"):
            # the snapshots and clones after the restart (no error allowed)
            vo = VolOps(c.run, None, 0, 0)
            vo.load(st["volops"])
            vo.check_all("verify after restart")
            if vo.errors:
                raise Fail("verify: error replies reading snapshots or "
                           "clones: %s" % vo.errors)
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
    # Blocks whose durable version, and the one before it, were data
    # writes (a zeroing there is read as such, not as the damage planted).
    # Not "never zeroed": a fast load (cached polling) zeroes every block
    # of the volume at some point, and the self-test found none.
    # (At least 2: the stale copy planted is the version before the
    # floor, data too; all zeroes would read as the newest zeroing.)
    durable = [b for b in range(m.n) if m.floor[b] >= 2 and
               not {m.floor[b], m.floor[b] - 1} & m.zeros.get(b, set())]
    if len(durable) < 4:
        print("FAIL: selftest: too few blocks with a durable data version "
              "(%d)" % len(durable))
        return 1
    a, b, c_ = durable[0], durable[1], durable[2]
    # A version never issued: of a block never written if the load left
    # one, else the next version of another block (the same verdict: a
    # version above the newest issued). A load that covers the whole
    # volume leaves no unwritten block.
    fresh = [x for x in range(m.n) if m.maxv[x] == 0]
    f = fresh[0] if fresh else durable[3]
    stale = block_data(a, m.floor[a] - 1)
    mis = bytearray(block_data(b, m.floor[b]))
    mis[3 * SECT:4 * SECT] = sector(c_, m.floor[c_], 3)
    flip = bytearray(block_data(c_, m.floor[c_]))
    flip[5 * SECT + 100] ^= 0x40
    never = block_data(f, m.maxv[f] + 1)
    cl = Run(d, m.n, 0, 1, False, "").clients[0]
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
