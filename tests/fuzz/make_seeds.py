#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the seed inputs of the fuzz targets that need them into
tests/fuzz/corpus/TARGET/ (each target's source documents its input).

fuzz_blocker_log: random bytes seldom make a chunk and a map that refers
to it, so without seeds the target's reads would only ever see holes. Each
seed is a small, meaningful store.
fuzz_blocker_record: random payloads seldom pass a decoder's first checks
(a name length, valid name bytes), so its canonical-form checks would
never run. The seeds are well-formed records.
fuzz_vlmc_meta: likewise for the volume table's text: tables of each
version (legacy without ids, with ids, with reclaim records).

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


def write(target, seeds):
    out = os.path.join(CORPUS, target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


write("fuzz_blocker_log", SEEDS)
write("fuzz_blocker_record", RECORD_SEEDS)
write("fuzz_vlmc_meta", VLMC_META_SEEDS)
