#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc's NBD server against real clients, on a private stack
# (vlmc -> cached -> store) started with `xsegctl stack`:
#   nbdinfo lists and describes exports; nbdcopy in and out byte-identical;
#   qemu-img convert/compare; fio's nbd engine with verify=crc32c;
#   malformed handshakes and commands refused per the protocol while
#   another client keeps working.
# Exit 77 (skip) only when a client binary is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd nbdinfo nbdcopy qemu-img fio python3

stack_conf stack "segment_size = 512M" "cache_size = 64M" "store_threads = 2" \
	"vlmc_threads = 2"
$X stack start $T/stack/stack.conf || die "stack start"
SOCK=$D/run/nbd.sock
U="nbd+unix:///v?socket=$SOCK"
$X volume --dir $D create v 64M || die "create"
$X volume --dir $D create w 8M || die "create w"

# --- nbdinfo
out=$(nbdinfo --list "nbd+unix://?socket=$SOCK" 2>&1)
echo "$out" | grep -q 'export="v"' && echo "$out" | grep -q 'export="w"' &&
	ok "nbdinfo --list" || fail "nbdinfo --list: $out"
out=$(nbdinfo --json "$U" 2>&1)
echo "$out" | grep -q '"export-size": 67108864' &&
	echo "$out" | grep -q '"can_multi_conn": true' &&
	ok "nbdinfo describes v" || fail "nbdinfo: $out"
nbdinfo "nbd+unix:///nosuch?socket=$SOCK" >/dev/null 2>&1 &&
	fail "nbdinfo accepted an unknown export" || ok "unknown export refused"

# --- nbdcopy in and out
head -c 32M /dev/urandom > $T/in
nbdcopy $T/in "$U" && nbdcopy "$U" $T/out.full &&
	head -c 32M $T/out.full > $T/out && cmp -s $T/in $T/out &&
	ok "nbdcopy round trip" || fail "nbdcopy round trip"

# --- qemu-img
head -c 8M /dev/urandom > $T/q
qemu-img convert -n -f raw -O raw $T/q "nbd+unix:///w?socket=$SOCK" &&
	qemu-img compare -q -f raw -F raw $T/q "nbd+unix:///w?socket=$SOCK" &&
	ok "qemu-img convert/compare" || fail "qemu-img convert/compare"
head -c 8M /dev/urandom > $T/q2
qemu-img compare -q -f raw -F raw $T/q2 "nbd+unix:///w?socket=$SOCK" \
	>/dev/null 2>&1 && fail "qemu-img compare saw no difference" ||
	ok "qemu-img compare notices a difference"

# --- fio verify (runs on while the malformed clients below connect)
cat > $T/verify.fio <<FIO
[global]
ioengine=nbd
uri=$U
bs=4k
size=16M
iodepth=16
verify=crc32c
verify_fatal=1
verify_state_save=0
do_verify=1
[randwrite]
rw=randwrite
[seq]
stonewall
rw=write
bs=256k
offset=32M
FIO
fio --output=$T/fio.out $T/verify.fio &
FIO_PID=$!
track_pid $FIO_PID

# --- malformed handshakes and commands, straight on the socket
python3 - "$SOCK" <<'PY'
import socket, struct, sys
from nbd_testlib import recvn, opt, opt_reply as rep
from shell_checks import Checks
path = sys.argv[1]
check = Checks()
def conn():
    s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(path)
    g = recvn(s, 18)
    assert g[:16] == b"NBDMAGICIHAVEOPT"
    return s
def closed(s):
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True
def go(s, name, o=7):
    n = name.encode()
    opt(s, o, struct.pack(">I", len(n)) + n + struct.pack(">H", 0))
    out = []
    while True:
        r = rep(s); out.append(r)
        if r[1] != 3: return out
def cmd(s, typ, off, ln, flags=0, cookie=1, data=b""):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, flags, typ, cookie, off, ln) + data)
def reply(s, cookie):
    magic, err, c = struct.unpack(">IIQ", recvn(s, 16))
    assert magic == 0x67446698 and c == cookie, (hex(magic), c)
    return err
ERR = 1 << 31

# bad client flags: the server must disconnect
s = conn(); s.sendall(struct.pack(">I", 0x80000001)); check(closed(s), "unknown client flags: disconnect")
s = conn(); s.sendall(struct.pack(">I", 0)); check(closed(s), "client without fixed newstyle: disconnect")
# bad option magic
s = conn(); s.sendall(struct.pack(">I", 3)); s.sendall(struct.pack(">QII", 0x1122334455667788, 7, 0)); check(closed(s), "bad option magic: disconnect")
# unknown option, LIST with payload, unknown export, too-big option, INFO, then GO works
s = conn(); s.sendall(struct.pack(">I", 3))
opt(s, 99, b"xyz"); o, t, _ = rep(s); check(o == 99 and t == ERR + 1, "unknown option: NBD_REP_ERR_UNSUP")
opt(s, 5); o, t, _ = rep(s); check(t == ERR + 1, "STARTTLS: NBD_REP_ERR_UNSUP")
opt(s, 3, b"x"); o, t, _ = rep(s); check(t == ERR + 3, "LIST with payload: NBD_REP_ERR_INVALID")
opt(s, 7, b"\0\0\0\xff"); o, t, _ = rep(s); check(t == ERR + 3, "GO with bad lengths: NBD_REP_ERR_INVALID")
r = go(s, "nosuch"); check(r[-1][1] == ERR + 6, "GO unknown export: NBD_REP_ERR_UNKNOWN")
r = go(s, "bad:name/../x"); check(r[-1][1] == ERR + 6, "GO bad name: NBD_REP_ERR_UNKNOWN")
opt(s, 7, b"\0" * 8192); o, t, _ = rep(s); check(t == ERR + 9, "oversized option: NBD_REP_ERR_TOO_BIG")
r = go(s, "w", 6); check(r[-1][1] == 1 and len(r) >= 2, "INFO w: info + ACK")
opt(s, 3); names = []
while True:
    o, t, d = rep(s)
    if t != 2: break
    names.append(d[4:4 + struct.unpack(">I", d[:4])[0]].decode())
check("v" in names and "w" in names and t == 1, "LIST: both exports then ACK")
r = go(s, "w")
info = [d for (_, t, d) in r if t == 3 and struct.unpack(">H", d[:2])[0] == 0]
check(r[-1][1] == 1 and struct.unpack(">Q", info[0][2:10])[0] == 8 << 20, "GO w: size 8M")
size = 8 << 20
# transmission: refusals keep the connection usable
cmd(s, 0, size, 4096, cookie=2); check(reply(s, 2) == 22, "read past the end: EINVAL")
cmd(s, 0, 2**64 - 4096, 8192, cookie=3); check(reply(s, 3) == 22, "read offset overflow: EINVAL")
cmd(s, 1, size - 4096, 8192, cookie=4, data=b"\xaa" * 8192); check(reply(s, 4) == 28, "write past the end: ENOSPC (payload skipped)")
cmd(s, 0, 0, 33 << 20, cookie=5); check(reply(s, 5) == 75, "oversized read: EOVERFLOW")
cmd(s, 77, 0, 0, cookie=6); check(reply(s, 6) == 22, "unknown command: EINVAL")
cmd(s, 0, 0, 4096, flags=0x100, cookie=7); check(reply(s, 7) == 22, "unknown flag: EINVAL")
cmd(s, 3, 0, 1, cookie=8); check(reply(s, 8) == 22, "flush with a length: EINVAL")
cmd(s, 0, 0, 0, cookie=9); check(reply(s, 9) == 22, "zero-length read: EINVAL")
cmd(s, 1, 4096, 4096, flags=1, cookie=10, data=b"\x5a" * 4096); check(reply(s, 10) == 0, "FUA write after refusals: ok")
cmd(s, 0, 4096, 4096, cookie=11); e = reply(s, 11); d = recvn(s, 4096)
check(e == 0 and d == b"\x5a" * 4096, "read back")
cmd(s, 6, 4096, 4096, cookie=12); check(reply(s, 12) == 0, "WRITE_ZEROES")
cmd(s, 0, 4096, 4096, cookie=13); e = reply(s, 13); d = recvn(s, 4096)
check(e == 0 and d == b"\0" * 4096, "zeroes read back")
cmd(s, 4, 0, 4 << 20, cookie=14); check(reply(s, 14) == 0, "TRIM a whole object")
cmd(s, 3, 0, 0, cookie=15); check(reply(s, 15) == 0, "FLUSH")
# CACHE (simple replies on this connection) and BLOCK_STATUS without a
# selected meta context
cmd(s, 5, 0, size, cookie=16); check(reply(s, 16) == 0, "CACHE the whole export")
cmd(s, 5, size - 4096, 8192, cookie=17); check(reply(s, 17) == 22, "CACHE past the end: EINVAL")
cmd(s, 5, 0, 0, cookie=18); check(reply(s, 18) == 22, "CACHE of length 0: EINVAL")
cmd(s, 5, 0, 4096, flags=1, cookie=19); check(reply(s, 19) == 22, "CACHE with FUA: EINVAL")
cmd(s, 7, 0, 4096, cookie=20); check(reply(s, 20) == 22, "BLOCK_STATUS without a meta context: EINVAL")
cmd(s, 0, 0, 4096, cookie=21); e = reply(s, 21); d = recvn(s, 4096)
check(e == 0 and d == b"\0" * 4096, "read after CACHE")
# bad request magic: disconnect
s.sendall(b"\0" * 28); check(closed(s), "bad request magic: disconnect")
# oversized write: disconnect (the payload is not read)
s = conn(); s.sendall(struct.pack(">I", 3)); go(s, "w")
cmd(s, 1, 0, 64 << 20); check(closed(s), "oversized write: disconnect")
# EXPORT_NAME: unknown -> disconnect; known -> size and flags
s = conn(); s.sendall(struct.pack(">I", 3)); opt(s, 1, b"nosuch"); check(closed(s), "EXPORT_NAME unknown: disconnect")
s = conn(); s.sendall(struct.pack(">I", 3)); opt(s, 1, b"w")
check(struct.unpack(">QH", recvn(s, 10))[0] == size, "EXPORT_NAME w (no zeroes)")
cmd(s, 2, 0, 0); check(closed(s), "DISC closes")
# ABORT
s = conn(); s.sendall(struct.pack(">I", 3)); opt(s, 2); o, t, _ = rep(s); check(t == 1 and closed(s), "ABORT: ACK and close")
# structured replies, base:allocation (w: object 0 was trimmed above,
# object 1 holds qemu-img's data), READ as structured chunks
def meta(s, o, name, queries):
    n = name.encode()
    d = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        d += struct.pack(">I", len(q)) + q.encode()
    opt(s, o, d)
    out = []
    while True:
        r = rep(s); out.append(r)
        if r[1] != 4: return out
def sreply(s, cookie):
    magic, flags, typ, c, ln = struct.unpack(">IHHQI", recvn(s, 20))
    assert magic == 0x668e33ef and c == cookie, (hex(magic), c)
    return flags, typ, recvn(s, ln)
def extents(d):
    return [struct.unpack(">II", d[i:i + 8]) for i in range(4, len(d), 8)]
M = 1 << 20
s = conn(); s.sendall(struct.pack(">I", 3))
r = meta(s, 10, "w", ["base:allocation"]); check(r[-1][1] == ERR + 3, "SET_META_CONTEXT before STRUCTURED_REPLY: NBD_REP_ERR_INVALID")
opt(s, 8, b"x"); o, t, _ = rep(s); check(t == ERR + 3, "STRUCTURED_REPLY with a payload: NBD_REP_ERR_INVALID")
opt(s, 8); o, t, _ = rep(s); check(t == 1, "STRUCTURED_REPLY: ACK")
r = meta(s, 9, "w", []); check(len(r) == 2 and r[0][1] == 4 and r[0][2][4:] == b"base:allocation" and r[1][1] == 1, "LIST_META_CONTEXT: base:allocation")
r = meta(s, 9, "w", ["base:"]); check(len(r) == 2 and r[0][2][4:] == b"base:allocation", "LIST_META_CONTEXT base:")
r = meta(s, 9, "w", ["qemu:dirty-bitmap:x"]); check(len(r) == 1 and r[0][1] == 1, "LIST_META_CONTEXT of an unknown context: ACK only")
r = meta(s, 10, "nosuch", ["base:allocation"]); check(r[-1][1] == ERR + 6, "SET_META_CONTEXT unknown export: NBD_REP_ERR_UNKNOWN")
opt(s, 10, b"\0\0\0\x01w\0\0\0\x01\0\0\0\xff"); o, t, _ = rep(s); check(t == ERR + 3, "SET_META_CONTEXT query overrun: NBD_REP_ERR_INVALID")
opt(s, 10, b"\0\0\0\x01w"); o, t, _ = rep(s); check(t == ERR + 3, "SET_META_CONTEXT without count: NBD_REP_ERR_INVALID")
r = meta(s, 10, "w", ["base:allocation"])
ctx = struct.unpack(">I", r[0][2][:4])[0] if r[0][1] == 4 else 0
check(len(r) == 2 and r[0][2][4:] == b"base:allocation" and ctx != 0 and r[1][1] == 1, "SET_META_CONTEXT base:allocation")
r = go(s, "w"); check(r[-1][1] == 1, "GO w after SET_META_CONTEXT")
cmd(s, 7, 0, size, cookie=30); f, t, d = sreply(s, 30)
check(f == 1 and t == 5 and struct.unpack(">I", d[:4])[0] == ctx and extents(d) == [(4 * M, 3), (4 * M, 0)], "BLOCK_STATUS: hole then data %r" % (extents(d),))
cmd(s, 7, 0, size, flags=8, cookie=31); f, t, d = sreply(s, 31)
check(t == 5 and extents(d) == [(4 * M, 3)], "BLOCK_STATUS REQ_ONE: one extent")
cmd(s, 7, 4096, 8192, cookie=32); f, t, d = sreply(s, 32)
check(t == 5 and extents(d) == [(8192, 3)], "BLOCK_STATUS inside an object")
cmd(s, 7, size - 4096, 8192, cookie=33); f, t, d = sreply(s, 33)
check(f == 1 and t == 32769 and struct.unpack(">I", d[:4])[0] == 22, "BLOCK_STATUS past the end: error chunk EINVAL")
cmd(s, 7, 0, 0, cookie=34); f, t, d = sreply(s, 34)
check(t == 32769 and struct.unpack(">I", d[:4])[0] == 22, "BLOCK_STATUS of length 0: EINVAL")
cmd(s, 7, 0, 4096, flags=1, cookie=35); f, t, d = sreply(s, 35)
check(t == 32769 and struct.unpack(">I", d[:4])[0] == 22, "BLOCK_STATUS with FUA: EINVAL")
cmd(s, 1, 12288, 4096, cookie=36, data=b"\x77" * 4096); check(reply(s, 36) == 0, "write on the structured connection")
cmd(s, 0, 12288, 4096, cookie=37); f, t, d = sreply(s, 37)
check(f == 1 and t == 1 and struct.unpack(">Q", d[:8])[0] == 12288 and d[8:] == b"\x77" * 4096, "READ: one OFFSET_DATA chunk")
cmd(s, 0, 4 * M - 4096, 8192, cookie=38); f, t, d = sreply(s, 38)
check(t == 1 and len(d) == 8 + 8192, "READ across objects: one chunk")
cmd(s, 0, size, 4096, cookie=39); f, t, d = sreply(s, 39)
check(f == 1 and t == 32769 and struct.unpack(">I", d[:4])[0] == 22, "READ past the end: error chunk EINVAL")
cmd(s, 7, 0, 4 * M, cookie=40); f, t, d = sreply(s, 40)
check(t == 5 and extents(d) == [(4 * M, 0)], "BLOCK_STATUS after a write: data")
cmd(s, 2, 0, 0); check(closed(s), "DISC on the structured connection")
# contexts selected for one export do not carry over to another
s = conn(); s.sendall(struct.pack(">I", 3)); opt(s, 8); rep(s)
meta(s, 10, "w", ["base:allocation"]); go(s, "v")
cmd(s, 7, 0, 4096, cookie=41); f, t, d = sreply(s, 41)
check(t == 32769 and struct.unpack(">I", d[:4])[0] == 22, "BLOCK_STATUS on another export than SET's: EINVAL")
s.close()
# a client that vanishes mid-command
s = conn(); s.sendall(struct.pack(">I", 3)); go(s, "w"); cmd(s, 1, 0, 65536, data=b"x" * 100); s.close()
sys.exit(check.exit_status())
PY
[ $? -eq 0 ] || fail "malformed input checks"

wait $FIO_PID
fio_rc=$?
untrack_pid $FIO_PID
[ $fio_rc -eq 0 ] && grep -q 'err= 0' $T/fio.out && ! grep -q 'verify:' $T/fio.out &&
	ok "fio verify=crc32c (concurrent with the malformed clients)" ||
	{ cat $T/fio.out; fail "fio verify"; }

# real clients over base:allocation and CACHE flags
out=$(nbdinfo --map "$U" 2>&1)
echo "$out" | grep -q 'hole,zero' && echo "$out" | grep -q ' data' &&
	ok "nbdinfo --map" || fail "nbdinfo --map: $out"
out=$(nbdinfo --json "$U" 2>&1)
echo "$out" | grep -q '"can_cache": true' && ok "nbdinfo: can_cache" ||
	fail "nbdinfo can_cache: $out"

# server still serves
nbdcopy "nbd+unix:///w?socket=$SOCK" $T/w.out && ok "still serving" || fail "server stopped serving"
$X stack status --dir $D | grep -q 'vlmc .*yes' || fail "vlmc not alive"

# stop here, so reports printed at peer exit are in the logs
$X stack stop --dir $D >/dev/null || fail "stack stop"
# a sanitizer report in any peer (ASan/UBSan/TSan builds) is a failure
check_sanitizers "a peer log" $D/run/*.log
finish "all NBD client checks passed"
