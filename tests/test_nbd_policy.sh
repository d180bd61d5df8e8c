#!/bin/bash
# SPDX-License-Identifier: MIT
# vlmc's NBD refusals made in negotiation, and small protocol items
# (review12 F5, F4), on a private segment with only 6 dynamic ports and
# vlmc --nbd-max-conns 8 over test_vlmc_store:
#   connections GO until one is refused with NBD_REP_ERR_POLICY ("no free
#   xseg port") instead of an ACK followed by a reset; the ones served
#   work; once one closes, a new GO is served;
#   NBD_CMD_DISC with a flag set gets no reply and the connection closes;
#   NBD_OPT_LIST_META_CONTEXT before NBD_OPT_STRUCTURED_REPLY is refused
#   with NBD_REP_ERR_INVALID;
#   a handshake that did NBD_OPT_INFO on a volume does not keep it from
#   volume remove;
#   the maximum payload advertised in NBD_INFO_BLOCK_SIZE is 32 MiB on a
#   volume of 4 MiB objects, 4 MiB (1024 objects) on one of 4 KiB
#   objects, where a 4 MiB WRITE is served, a larger WRITE is refused with
#   EINVAL and a larger READ with EOVERFLOW, the connection usable after;
#   the stack launcher refuses nbd_max_conns = 33 (more than the
#   segment's dynamic ports minus 16), nothing started.
# Exit 77 (skip) only when python3 is missing.
set -u
. "$(dirname "$0")/stack_testlib.sh"
testlib_init nbd-policy python3
SEG=tnbdpol$$

printf 'dir = %s\nnbd_max_conns = 33\n' $T/stk > $T/bad.conf
$X stack start $T/bad.conf >$T/badconf.log 2>&1; rc=$?
[ $rc -eq 2 ] && [ ! -e $T/stk/run/stack.conf ] &&
	echo "ok: stack config nbd_max_conns = 33 refused" ||
	die "stack config nbd_max_conns = 33: rc $rc"

seg_create $SEG 128M 2048 6
start_bg store $BIN/test_vlmc_store -g $SEG -p 1 -t 2
start_vlmc $T $SEG -t 2 --nbd-max-conns 8
$X volume --ctl $T/ctl create v 64M || die "create v"
$X volume --ctl $T/ctl create w 64M || die "create w"
$X volume --ctl $T/ctl create z 64M 4K || die "create z"

python3 - "$T/nbd.sock" "$X" "$T/ctl" <<'PY' || die "python part"
import socket, struct, subprocess, sys
from nbd_testlib import *
path, xsegctl, ctl = sys.argv[1:4]
ERR_POLICY, ERR_INVALID = 0x80000002, 0x80000003
OPT_INFO, OPT_STRUCTURED_REPLY, OPT_LIST_META = 6, 8, 9
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        fails += 1
def hs(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(path)
    assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
    s.sendall(struct.pack(">I", FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    return s
def go(s, export):
    name = export.encode()
    opt(s, OPT_GO, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    while True:
        _, t, data = opt_reply(s)
        if t != REP_INFO:
            return t, data

# F5: GO refused with a policy error once the dynamic ports run out
served, refused = [], None
for i in range(8):
    s = hs(path)
    t, data = go(s, "v")
    if t == REP_ACK:
        served.append(s)
        continue
    refused = (s, t, data)
    break
check(refused is not None and refused[1] == ERR_POLICY and
      b"no free xseg port" in refused[2],
      "GO past the free ports: %s after %d served" %
      (refused and (hex(refused[1]), refused[2]), len(served)))
check(len(served) >= 1, "some connections served")
for i, s in enumerate(served):
    err, _ = command(s, CMD_READ, i, 0, 4096)
    check(err == 0, "served connection %d: READ err %d" % (i, err))
served.pop().close()
if refused:
    s = refused[0]
    for _ in range(100):  # the closed connection's port comes back
        t, data = go(s, "v")
        if t == REP_ACK:
            break
        import time; time.sleep(0.1)
    check(t == REP_ACK, "GO again after a connection closed: %s" % hex(t))
    if t == REP_ACK:
        served.append(s)
for s in served:
    s.sendall(request(CMD_DISC, 0, 0, 0))
    s.close()

# F4: DISC with a flag: no reply, the connection closes (the ports of
# the connections just closed come back once their threads are done)
import time
for _ in range(100):
    s = hs(path)
    t, _ = go(s, "v")
    if t == REP_ACK:
        break
    s.close()
    time.sleep(0.1)
check(t == REP_ACK, "GO for the DISC test: %s" % hex(t))
s.sendall(request(CMD_DISC, 5, 0, 0, flags=1))
try:
    got = s.recv(16)
except OSError as e:
    got = repr(e)
check(got == b"", "DISC with FUA: closed without a reply (%r)" % (got,))
s.close()

# F4: LIST_META_CONTEXT before STRUCTURED_REPLY: ERR_INVALID
s = hs(path)
q = b"base:allocation"
opt(s, OPT_LIST_META, struct.pack(">I", 1) + b"v" + struct.pack(">I", 1) +
    struct.pack(">I", len(q)) + q)
_, t, _ = opt_reply(s)
check(t == ERR_INVALID, "LIST_META_CONTEXT before STRUCTURED_REPLY: %s" %
      hex(t))
opt(s, OPT_STRUCTURED_REPLY)
_, t, _ = opt_reply(s)
check(t == REP_ACK, "STRUCTURED_REPLY: %s" % hex(t))
opt(s, OPT_LIST_META, struct.pack(">I", 1) + b"v" + struct.pack(">I", 1) +
    struct.pack(">I", len(q)) + q)
types = []
while True:
    _, t, _ = opt_reply(s)
    types.append(t)
    if t != 4:
        break
check(types[-1] == REP_ACK and 4 in types,
      "LIST_META_CONTEXT after STRUCTURED_REPLY: %s" % types)

# F4: INFO in a handshake does not pin the volume
name = b"w"
opt(s, OPT_INFO, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
while True:
    _, t, _ = opt_reply(s)
    if t != REP_INFO:
        break
check(t == REP_ACK, "INFO w: %s" % hex(t))
r = subprocess.run([xsegctl, "volume", "--ctl", ctl, "remove", "w"],
                   capture_output=True, text=True)
check(r.returncode == 0, "volume remove w while a handshake did INFO on it: "
      "rc %d %s" % (r.returncode, r.stderr.strip()))
s.close()

# F3: per-volume maximum payload
def go_max(export):
    for _ in range(100):
        s = hs(path)
        name = export.encode()
        opt(s, OPT_GO, struct.pack(">I", len(name)) + name +
            struct.pack(">H", 0))
        mx = None
        while True:
            _, t, data = opt_reply(s)
            if t != REP_INFO:
                break
            if struct.unpack(">H", data[:2])[0] == 3:  # NBD_INFO_BLOCK_SIZE
                mx = struct.unpack(">III", data[2:14])[2]
        if t == REP_ACK:
            return s, mx
        s.close()
        time.sleep(0.1)
    raise RuntimeError("GO %s: %s" % (export, hex(t)))
s, mx = go_max("v")
check(mx == 32 << 20, "4 MiB objects: maximum payload %s" % mx)
s.sendall(request(CMD_DISC, 0, 0, 0))
s.close()
s, mx = go_max("z")
check(mx == 4 << 20, "4 KiB objects: maximum payload %s" % mx)
data = bytes(range(256)) * (16 << 10)
err, _ = command(s, CMD_WRITE, 1, 0, 4 << 20, data)
check(err == 0, "4 KiB objects: 4 MiB WRITE err %d" % err)
err, _ = command(s, CMD_WRITE, 2, 0, (4 << 20) + 4096, data + data[:4096])
check(err == 22, "4 KiB objects: 4 MiB + 4 KiB WRITE err %d (EINVAL)" % err)
err, _ = command(s, CMD_READ, 3, 0, 8 << 20)
check(err == 75, "4 KiB objects: 8 MiB READ err %d (EOVERFLOW)" % err)
err, got = command(s, CMD_READ, 4, 0, 4 << 20)
check(err == 0 and got == data, "4 KiB objects: 4 MiB READ back err %d" % err)
s.sendall(request(CMD_DISC, 0, 0, 0))
s.close()
sys.exit(1 if fails else 0)
PY
grep -q "no dynamic port" $T/vlmc.log && echo "ok: port shortage logged"
stop_wait $VLMC || die "vlmc exit $?"
echo PASS
