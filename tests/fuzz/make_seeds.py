#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the seed inputs of the fuzz targets that need them into
tests/fuzz/corpus/TARGET/ (each target's source documents its input).

fuzz_blocker_log: random bytes seldom make a chunk and a map that refers
to it, so without seeds the target's reads would only ever see holes. Each
seed is a small, meaningful store.
fuzz_blocker_gc: stores that span several segments (dozens of distinct
chunks) with most of them overwritten, then GC passes, crashes at each of
a pass's crash points and each kind of damage: random bytes would seldom
write enough distinct chunks to fill a second segment.
fuzz_blocker_record: random payloads seldom pass a decoder's first checks
(a name length, valid name bytes), so its canonical-form checks would
never run. The seeds are well-formed records.
fuzz_vlmc_meta: likewise for the volume table's text: tables of each
version (legacy without ids, with ids, with reclaim records).
fuzz_vlmc_ctl: control command lines of every command, with names of
every allowed character and at the length limit, and sizes of every
syntax (suffixes, 0x, at and past the bounds and 2^64).
fuzz_stack_conf: configs that set every key (in and at the edges of its
bounds), a stack.conf as start writes it, and the refusals of each kind
(unknown key, no '=', a bad value, a value too long, a bad pair of keys).

The driver's mutations and libFuzzer start from these. Run it again after
a change of an input format; inputs that once crashed a target are kept
next to them (named crash-*), not made here.
"""
import os
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def chunk(data):
    return bytes([0]) + struct.pack("<H", len(data)) + data


def map_(name, size, updates):
    b = bytes([1, name]) + struct.pack("<I", size)[:3] + bytes([len(updates)])
    for idx, ref in updates:
        b += bytes([idx, ref])
    return b


def delete(name):
    return bytes([2, name])


def copy(src, dst):
    return bytes([3, src, dst])


def raw(rtype, payload):
    return bytes([4, rtype]) + struct.pack("<H", len(payload) - 1) + payload


def garbage(data):
    return bytes([5]) + struct.pack("<H", len(data)) + data


def zeros(n):
    return bytes([6]) + struct.pack("<H", n)


def corrupt(file, off, xor):
    return bytes([7, file]) + struct.pack("<I", off) + bytes([xor])


def ckpt_maps(entries, pos=None):
    b = bytes([8, 1, len(entries)])
    for name, size, chunks in entries:
        b += bytes([len(chunks), name]) + struct.pack("<I", size)[:3]
        for idx, ref in chunks:
            b += bytes([idx, ref])
    return b + (bytes([1]) + struct.pack("<I", pos // 16)[:3]
                if pos is not None else bytes([0]))


def ckpt_index(refs):
    b = bytes([8, 0, len(refs)])
    for ref, pos in refs:
        b += bytes([ref]) + struct.pack("<H", pos // 16)
    return b + bytes([0])


def cut(n):
    return bytes([9]) + struct.pack("<H", n)


BASE = (chunk(b"A" * 64) + chunk(b"hello, world") +
        map_(0, 8192, [(0, 0), (1, 1)]) + copy(0, 1) +
        map_(1, 12288, [(2, 0)]) + chunk(bytes(range(256))) +
        map_(2, 4096, [(0, 2)]) + delete(0) + map_(3, 4096, [(0, 3)]))

SEEDS = {
    # a store with shared chunks, a copy, a delete, a hole
    "base": bytes([0]) + BASE,
    # the same, closed cleanly first, then a bit flipped in a chunk's
    # payload below the durable mark (a read must fail, not lie)
    "damaged-below-mark": bytes([1]) + BASE + corrupt(0, 100, 0x10),
    # and with the operator override
    "damaged-override": bytes([3]) + BASE + corrupt(0, 4300, 0x01),
    # a torn last record, then garbage and a zero tail
    "torn-tail": bytes([0]) + BASE + cut(100),
    "garbage-tail": bytes([0]) + BASE + garbage(b"\x42\x4c\x4b\x52junk") +
    zeros(64),
    # a record with a valid header whose payload no decoder accepts
    "bad-payload": bytes([0]) + BASE + raw(2, b"\xff" * 40) + raw(4, b"\0"),
    # checkpoint files written over the log's state
    "checkpoint": bytes([0]) + BASE +
    ckpt_maps([(1, 8192, [(0, 0), (1, 1)]), (5, 4096, [(0, 2)])]) +
    ckpt_index([(0, 0), (1, 4160), (2, 0)]),
    # the super block and the durable mark flipped after a clean close
    "super-and-mark": bytes([1]) + BASE + corrupt(4, 12, 0x02) +
    corrupt(3, 40, 0x80),
}



def record(mode, rtype, payload, pos=4096):
    """fuzz_blocker_record's input: mode, a 64-byte header, the payload
    (mode bit 0: the target makes the header's CRC right)."""
    hdr = (struct.pack("<IBBHII", 0x524B4C42, rtype, 1, 0, len(payload), 0) +
           struct.pack("<Q", pos) + bytes(32) + bytes(8))
    return bytes([mode]) + hdr + payload


def names(*ns):
    return b"".join(struct.pack("<H", len(n)) + n for n in ns)


RECORD_SEEDS = {
    "map": record(1, 2, names(b"vol.disk0:000001") + struct.pack("<QI", 8192, 2)
                  + struct.pack("<Q", 0) + bytes(range(32))
                  + struct.pack("<Q", 1) + bytes(32)),
    "map-empty": record(3, 2, names(b"o") + struct.pack("<QI", 0, 0), 0),
    "delete": record(1, 3, names(b"a.b_c-d:e@f+g=h")),
    "copy": record(1, 4, names(b"src", b"dst.snap")),
}


TABLE_V2 = (b"vlmc-meta 2 3\n"
            b"disk0 10737418240 4194304 rw - 00000000000000a1\n"
            b"disk0.snap1 10737418240 4194304 ro disk0 00000000000000a2\n"
            b"clone1 10737418240 4194304 rw disk0.snap1 00000000000000a3\n"
            b"end\n")
TABLE_V3 = (b"vlmc-meta 3 1 2\n"
            b"disk1 1073741824 65536 rw - 00000000000000b1\n"
            b"reclaim disk0 00000000000000a1 2560 17\n"
            b"reclaim old - 10 10\n"
            b"end\n")
TABLE_V1 = (b"vlmc-meta 1 2\n"
            b"legacy 4096 4096 rw -\n"
            b"legacy.s 4096 4096 ro legacy\n"
            b"end\n")

# fuzz_vlmc_meta: byte 0 mode (bit 0: seal it as a table object, gen in
# byte 1, bit 1: flip the byte byte 2 picks), then the table text
VLMC_META_SEEDS = {
    "v2": bytes([0]) + TABLE_V2,
    "v3-reclaim": bytes([0]) + TABLE_V3,
    "v1-legacy": bytes([0]) + TABLE_V1,
    # two names one bit apart (a duplicate is one flip away)
    "v2-near-duplicate": bytes([0]) + b"vlmc-meta 2 2\n"
    b"disk0 4096 4096 rw - 00000000000000c1\n"
    b"disk1 4096 4096 rw - 00000000000000c2\nend\n",
    "sealed-v2": bytes([1, 7, 0]) + TABLE_V2,
    "sealed-v3-flipped": bytes([3, 200, 90]) + TABLE_V3,
}


# every key of the stack config, each at or near an edge of its bounds
STACK_ALL_KEYS = (b"# every key\n"
                  b"dir = /srv/stack data\n"
                  b"segment = mystack\n"
                  b"segment_size = 2G\n"
                  b"requests = 0x2000\n"
                  b"store = noop\n"
                  b"cached = yes\n"
                  b"cache_size = 1GiB\n"
                  b"write_policy = writethrough\n"
                  b"object_size = 512k\n"
                  b"store_threads = 4\n"
                  b"cached_threads = 2\n"
                  b"vlmc_threads = 1\n"
                  b"\n"
                  b"verify_reads = false\n"
                  b"supervise = 0\n"
                  b"spin = 20us\n"
                  b"spin_policy = fixed\n"
                  b"cpus = 0,2-3\n"
                  b"nbd_socket = /tmp/n.sock\n"
                  b"ctl_socket = /tmp/c.sock\n"
                  b"nbd_tcp = 65535\n"
                  b"gc_threshold = 100\n"
                  b"nbd_max_conns = 32\n"
                  b"nbd_inflight_bytes = 1T\n"
                  b"nbd_total_inflight = 1\n"
                  b"nbd_spin = 1s\n"
                  b"cached_spin = 200us\n"
                  b"vlmc_spin = 1s\n"
                  b"cache_max_objects = 1073741824\n"
                  b"dead_peer_wait = 3600\n"
                  b"snapshot_drain_wait = 1ms\n"
                  b"start_timeout = 60min\n"
                  b"exiting_timeout = 1s\n"
                  b"store_segment_size = 1M\n"
                  b"store_reserve = 0\n")
# what stack_print_conf writes (stop, status, plug read it)
STACK_STATE = (b"# written by xsegctl stack start: the running stack\n"
               b"dir = /work/archcache-data\nsegment = archcache-1234abcd\n"
               b"segment_size = 1073741824\nrequests = 8192\n"
               b"store = blocker\ncached = on\ncache_size = 256M\n"
               b"write_policy = writeback\nobject_size = 4M\n"
               b"store_threads = 2\ncached_threads = 1\nvlmc_threads = 2\n"
               b"nbd_socket = /work/archcache-data/run/nbd.sock\n"
               b"ctl_socket = /work/archcache-data/run/vlmc.ctl\n"
               b"nbd_tcp = 0\nverify_reads = on\nsupervise = on\n"
               b"spin = 0\nstart_timeout = 300\nexiting_timeout = 10\n")

# fuzz_stack_conf: byte 0 mode (bit 0: over the default, checked, printed
# and read back; bit 1: the first line is the stack's directory), then
# the config text
STACK_CONF_SEEDS = {
    "all-keys": bytes([1]) + STACK_ALL_KEYS,
    "state": bytes([0]) + STACK_STATE,
    "empty": bytes([1]),
    "dir-line": bytes([3]) + b"/home/op/stack dir\nspin = 0 # no spin\n"
    b"store_reserve = auto\nstore_segment_size = auto\n",
    "unknown-key": bytes([1]) + b"spin = 0\n\nobject-size = 4M\n",
    "no-equals": bytes([0]) + b"requests 8192\n",
    "bad-value": bytes([1]) + b"write_policy = write-back\n",
    "too-long": bytes([1]) + b"segment = " + b"s" * 130 + b"\n",
    "cache-too-small": bytes([1]) + b"cache_size = 8M\nobject_size = 8M\n",
    "cache-too-large": bytes([1]) + b"cache_size = 16T\n",
    "segment-too-small": bytes([1]) + b"segment_size = 64k\nrequests = 2\n",
    "segment-size-bad": bytes([1]) + b"segment_size = 4097\n",
    # above what the data heap can use whole (256 GiB of data)
    "segment-too-large": bytes([1]) + b"segment_size = 512G\n",
}

# fuzz_vlmc_ctl: the bytes a client sends to vlmc's control socket
VLMC_CTL_SEEDS = {
    "create": b"create disk0 10G 4M\n",
    "create-hex": b"create v.1 0x40000000 0x10000\n",
    "create-edges": b"create A-Za-z0-9._@+=- 1P 64MiB\n",
    "resize": b"resize disk0 1125899906842624\n",
    "resize-suffixes": b"resize d 3tib 4kB 2gb 1e\n",
    "resize-suffix-case": b"resize d 4KIB 2Ki 1mB 3TIb 5kbb\n",
    "overflow": b"create v 16E 18446744073709551616 18446744073709551615B\n",
    "name-max": b"remove " + b"n" * 200 + b" " + b"m" * 201 + b"\n",
    "snapshot": b"snapshot disk0 disk0.snap@1\n",
    "clone": b"clone disk0.snap@1 clone+1=x\r\n",
    "list": b"list\n",
    "info-tabs": b" \tinfo\t\tv 0 4096 4095 512b\n",
    "six-words": b"create a 1 2 3 4 5\n",
    "no-newline": b"info v",
    "nul": b"info v\0junk 1k\n",
}

# fuzz_blocker_gc: op bytes (tests/fuzz/fuzz_blocker_gc.c)
def gw(name, idx, count, seed):
    return bytes([0, name, idx, count - 1, seed])


G_FLUSH, G_REOPEN, G_CKPT = bytes([3]), bytes([4]), bytes([6])


def gdel(name):
    return bytes([1, name])


def gcopy(src, dst):
    return bytes([2, src, dst])


def ggc(pct, max_segments):
    return bytes([5, pct, max_segments])


def gcrash(at, how, cut):
    return bytes([7, at, how]) + struct.pack("<H", cut)


def gfill(rounds, seed=1):
    """rounds x 4 objects x 8 chunks, each round overwriting the last:
    96 distinct chunks (6.5 segments) for 3 rounds, two thirds dead"""
    b = b""
    for _ in range(rounds):
        for k in range(4):
            for idx in (0, 4):
                b += gw(k, idx, 4, seed)
                seed += 4
    return b


GC_BASE = gfill(3) + G_FLUSH
GC_SEEDS = {
    "fill-gc": GC_BASE + ggc(0, 0) + gw(0, 2, 2, 200) + G_FLUSH,
    "fill-gc-reopen-gc": GC_BASE + ggc(50, 1) + G_REOPEN + gdel(1) +
    gcopy(2, 3) + ggc(0, 0) + G_CKPT + gw(1, 7, 1, 9),
    "unflushed-torn": GC_BASE + ggc(0, 2) + gw(3, 0, 4, 240) +
    gw(2, 5, 3, 7) + gcrash(0, 1, 1234),
    "unflushed-boundary": GC_BASE + gw(3, 0, 4, 240) + gcrash(0, 1, 0),
    "copy-delete-gc": gfill(2) + gcopy(0, 1) + gdel(0) + gw(2, 0, 8, 0) +
    G_FLUSH + ggc(0, 0) + G_REOPEN + gdel(1) + ggc(0, 0),
    "gc-tmp": GC_BASE + gcrash(4, 2, 20) + ggc(0, 0),
    "drop-listed": GC_BASE + gcrash(5, 4, 0) + ggc(0, 0),
    "corrupt-lost-segment": GC_BASE + ggc(0, 1) + gcrash(0, 6 | 8, 0),
    "corrupt-gc-cut": GC_BASE + ggc(0, 1) + gcrash(0, 6, 30),
}
# a longer life: three rounds of overwrites with GC passes, deletes, a
# copy and reopens between them (libFuzzer grows its inputs from the
# seeds' length; with short seeds only, it seldom tried longer ones)
GC_SEEDS["long-churn"] = (
    GC_BASE + ggc(0, 0) + gfill(2, 100) + gdel(3) + gcopy(0, 3) +
    ggc(30, 2) + G_REOPEN + gfill(2, 170) + gdel(1) + G_FLUSH + ggc(0, 0) +
    G_CKPT + gw(2, 6, 2, 250) + gcrash(3, 1, 4000) + ggc(0, 0))
# a crash at each event of a pass: marked, copied, repointed,
# checkpointed, listed, then each victim's unlink
for at in range(1, 10):
    GC_SEEDS["crash-at-%d" % at] = (GC_BASE + gcrash(at, 1, 777 * at) +
                                    ggc(0, 0))


def write(target, seeds):
    out = os.path.join(CORPUS, target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


write("fuzz_blocker_log", SEEDS)
write("fuzz_blocker_gc", GC_SEEDS)
write("fuzz_blocker_record", RECORD_SEEDS)
write("fuzz_vlmc_meta", VLMC_META_SEEDS)
write("fuzz_stack_conf", STACK_CONF_SEEDS)
write("fuzz_vlmc_ctl", VLMC_CTL_SEEDS)
