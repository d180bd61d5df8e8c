#!/bin/bash
# SPDX-License-Identifier: MIT
# NBD zeroing semantics of vlmc, on a private segment with vlmc over
# test_vlmc_store (whose INFO tells holes from objects, so base:allocation
# is exact):
#   WRITE_ZEROES with NO_HOLE leaves data, not a hole (review finding V4),
#   also over many objects (sent 16 at a time) and never-written ones;
#   without NO_HOLE whole objects become holes;
#   FAST_ZERO is advertised; it succeeds when the range is whole objects
#   or holes, and otherwise fails with NBD_ENOTSUP having changed nothing
#   (also with NO_HOLE, which cannot be fast);
#   qemu-img convert (which zeroes its target with FAST_ZERO first when it
#   can) copies an image exactly; nbdinfo reports can_fast_zero.
# Exit 77 (skip) only when python3 is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-zero python3
SEG=tnbdzero$$
seg_create $SEG 256M 1024
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
STORE=$BG_PID
start_vlmc $T $SEG -t 2
$X volume --ctl $T/ctl create v 16M 1M || die "create v"
$X volume --ctl $T/ctl create q 8M 1M || die "create q"

python3 - "$T/nbd.sock" <<'PY'
import socket, struct, sys
from nbd_testlib import recvn, opt, opt_reply as rep
from shell_checks import Checks
path = sys.argv[1]
check = Checks()

s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(path)
assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))
opt(s, 8); assert rep(s)[1] == 1                      # STRUCTURED_REPLY
q = b"base:allocation"
opt(s, 10, struct.pack(">I", 1) + b"v" + struct.pack(">II", 1, len(q)) + q)
o, t, d = rep(s); assert t == 4, t; ctx = struct.unpack(">I", d[:4])[0]
assert rep(s)[1] == 1
opt(s, 7, struct.pack(">I", 1) + b"v" + struct.pack(">H", 0))  # GO
tflags = None
while True:
    o, t, d = rep(s)
    assert t < (1 << 31), hex(t)
    if t == 3 and struct.unpack(">H", d[:2])[0] == 0:
        tflags = struct.unpack(">H", d[10:12])[0]
    if t == 1: break
check(tflags is not None and tflags & (1 << 11), "NBD_FLAG_SEND_FAST_ZERO advertised")

M = 1 << 20
READ, WRITE, ZEROES, STATUS = 0, 1, 6, 7
FUA, NO_HOLE, FAST = 1, 2, 16
ENOTSUP = 95
cookie = 0
def cmd(typ, off, ln, flags=0, data=b""):
    """send one command, return (error, payload of the reply)"""
    global cookie
    cookie += 1
    s.sendall(struct.pack(">IHHQQI", 0x25609513, flags, typ, cookie, off, ln) + data)
    magic = struct.unpack(">I", recvn(s, 4))[0]
    if magic == 0x67446698:
        err, c = struct.unpack(">IQ", recvn(s, 12))
        assert c == cookie
        return err, b""
    assert magic == 0x668e33ef, hex(magic)
    f, t, c, l = struct.unpack(">HHQI", recvn(s, 16))
    assert c == cookie and f & 1, (c, f)
    d = recvn(s, l)
    if t == 32769:
        return struct.unpack(">I", d[:4])[0], b""
    if t == 1:
        return 0, d[8:]
    return 0, d
def write(off, data):
    check(cmd(WRITE, off, len(data), 0, data)[0] == 0, f"write {len(data)} at {off:#x}")
def read(off, ln):
    err, d = cmd(READ, off, ln)
    assert err == 0, err
    return d
def status(off, ln):
    """base:allocation extents: [(length, flags)]"""
    err, d = cmd(STATUS, off, ln)
    assert err == 0 and struct.unpack(">I", d[:4])[0] == ctx, err
    return [struct.unpack(">II", d[i:i + 8]) for i in range(4, len(d), 8)]
DATA, HOLE = 0, 3

pat = bytes(range(256)) * 4096  # 1 MiB
for i in range(16):
    write(i * M, pat)

# V4: NO_HOLE writes zeroes, the object stays allocated
check(cmd(ZEROES, 0, M, NO_HOLE)[0] == 0, "WRITE_ZEROES NO_HOLE of a whole object")
check(status(0, M) == [(M, DATA)], f"NO_HOLE: data, not a hole {status(0, M)}")
check(read(0, M) == b"\0" * M, "NO_HOLE: reads as zeroes")
check(cmd(ZEROES, M, M)[0] == 0, "WRITE_ZEROES without NO_HOLE")
check(status(M, M) == [(M, HOLE)], "without NO_HOLE: a hole")
check(read(M, M) == b"\0" * M, "hole reads as zeroes")
check(cmd(ZEROES, M, M, NO_HOLE | FUA)[0] == 0, "NO_HOLE+FUA over a hole")
check(status(M, M) == [(M, DATA)], "NO_HOLE over a hole: allocated")
check(read(M, M) == b"\0" * M, "still zeroes")

# FAST_ZERO: whole objects: deleted, fast
check(cmd(ZEROES, 3 * M, 2 * M, FAST)[0] == 0, "FAST_ZERO of whole objects")
check(status(3 * M, 2 * M) == [(2 * M, HOLE)], "FAST_ZERO: holes")
check(read(3 * M, 2 * M) == b"\0" * 2 * M, "FAST_ZERO: zeroes")
# a partial range of an existing object: ENOTSUP, unchanged
check(cmd(ZEROES, 5 * M + 4096, 4096, FAST)[0] == ENOTSUP, "FAST_ZERO of part of an object: ENOTSUP")
check(read(5 * M, M) == pat, "...and nothing changed")
# whole objects plus a partial existing one: ENOTSUP, the whole ones kept
check(cmd(ZEROES, 6 * M, M + 4096, FAST | FUA)[0] == ENOTSUP, "FAST_ZERO whole + partial object: ENOTSUP")
check(read(6 * M, 2 * M) == pat * 2 and status(6 * M, 2 * M) == [(2 * M, DATA)],
      "...and no object was deleted")
# NO_HOLE cannot be fast
check(cmd(ZEROES, 8 * M, M, FAST | NO_HOLE)[0] == ENOTSUP, "FAST_ZERO with NO_HOLE: ENOTSUP")
check(read(8 * M, M) == pat, "...and nothing changed")
# partial ranges of holes are already zero: fast
check(cmd(ZEROES, 9 * M, M)[0] == 0 and cmd(ZEROES, 10 * M, M)[0] == 0, "make holes at 9M, 10M")
check(cmd(ZEROES, 9 * M + 4096, 8192, FAST)[0] == 0, "FAST_ZERO inside a hole")
check(cmd(ZEROES, 8 * M, M + 4096, FAST)[0] == 0, "FAST_ZERO whole object + partial hole")
check(status(8 * M, 3 * M) == [(3 * M, HOLE)], f"...holes {status(8 * M, 3 * M)}")
check(read(11 * M, M) == pat, "the next object untouched")
# NO_HOLE over the whole volume (16 objects, sent a window at a time)
check(cmd(ZEROES, 0, 16 * M, NO_HOLE)[0] == 0, "WRITE_ZEROES NO_HOLE of 16 objects")
check(status(0, 16 * M) == [(16 * M, DATA)], "all data")
check(all(read(i * M, M) == b"\0" * M for i in range(16)), "all zeroes")
check(cmd(ZEROES, 0, 16 * M, FAST)[0] == 0, "FAST_ZERO of the whole volume")
check(status(0, 16 * M) == [(16 * M, HOLE)], "all holes")
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 0, 0, 0))  # DISC
sys.exit(check.exit_status())
PY
[ $? -eq 0 ] || fail "NBD zeroing checks"

U="nbd+unix:///q?socket=$T/nbd.sock"
if command -v nbdinfo >/dev/null; then
	out=$(nbdinfo --json "$U" 2>&1)
	echo "$out" | grep -q '"can_fast_zero": true' && ok "nbdinfo: can_fast_zero" ||
		fail "nbdinfo can_fast_zero: $out"
fi
if command -v qemu-img >/dev/null; then
	# object 0 partly written: qemu's fast pre-zeroing of the whole
	# target is refused, and the copy is exact anyway
	python3 -c 'import sys; sys.stdout.buffer.write(b"\xab" * 4096)' > $T/small
	qemu-img convert -n -f raw -O raw $T/small "$U" || fail "qemu-img convert of 4 KiB"
	head -c 6M /dev/urandom > $T/img
	head -c 1M /dev/zero >> $T/img
	head -c 1M /dev/urandom >> $T/img
	if qemu-img convert -n -f raw -O raw $T/img "$U" &&
		qemu-img compare -q -f raw -F raw $T/img "$U"; then
		ok "qemu-img convert/compare"
	else
		fail "qemu-img convert/compare"
	fi
fi
stop_pids $VLMC $STORE
check_sanitizers "a peer log" $T/*.log
finish "test_nbd_zero: ok"
