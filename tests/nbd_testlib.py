# SPDX-License-Identifier: MIT
"""NBD client pieces for the python parts of the shell tests.

Fixed newstyle handshake with NBD_OPT_GO, transmission requests and simple
replies (the NBD protocol document's structures, nothing negotiated beyond
what vlmc needs). Shell tests put this directory on PYTHONPATH and import
it from their heredocs.
"""
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import termios
import time

OPT_MAGIC = 0x49484156454F5054  # "IHAVEOPT"
OPT_REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
OPT_GO = 7
REP_ACK, REP_INFO = 1, 3
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH = 0, 1, 2, 3
FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1, 2


def recvn(s, n):
    """Exactly n bytes from s (EOFError if the peer closes first)."""
    b = bytearray()
    while len(b) < n:
        c = s.recv(min(n - len(b), 1 << 20))
        if not c:
            raise EOFError
        b += c
    return bytes(b)


def opt(s, o, data=b""):
    """Send option o with its data."""
    s.sendall(struct.pack(">QII", OPT_MAGIC, o, len(data)) + data)


def opt_reply(s):
    """One option reply: (option, reply type, data)."""
    magic, o, t, l = struct.unpack(">QIII", recvn(s, 20))
    assert magic == OPT_REPLY_MAGIC, hex(magic)
    return o, t, recvn(s, l)


def connect(path, export, timeout=120):
    """A Unix socket in transmission on export, after NBD_OPT_GO."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(path)
    assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
    s.sendall(struct.pack(">I", FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    name = export.encode()
    opt(s, OPT_GO, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    while True:
        _, t, _ = opt_reply(s)
        if t != REP_INFO:
            break
    assert t == REP_ACK, hex(t)
    return s


def request(typ, cookie, off, length, flags=0):
    """The header of a transmission request."""
    return struct.pack(">IHHQQI", REQUEST_MAGIC, flags, typ, cookie, off,
                       length)


def simple_reply(s):
    """One simple reply's (error, cookie); a READ's data follows it."""
    magic, err, cookie = struct.unpack(">IIQ", recvn(s, 16))
    assert magic == SIMPLE_REPLY_MAGIC, hex(magic)
    return err, cookie


def command(s, typ, cookie, off, length, data=b"", flags=0):
    """One command answered before the next is sent: (error, READ data).
    The data of a READ is read only when the reply has no error."""
    s.sendall(request(typ, cookie, off, length, flags) + data)
    err, got = simple_reply(s)
    assert got == cookie, (got, cookie)
    if err == 0 and typ == CMD_READ:
        return err, recvn(s, length)
    return err, b""


def expect_read_reply(s, cookie, length, bound, what, during):
    """A READ's reply must come: wait up to bound seconds for s (a hang
    detector, no timing check), then read the reply and its data. Exits
    the test with FAIL naming what (e.g. "d's 4 MiB READ") and during
    (the situation it must be answered in) when no reply comes, and when
    it has an error, another cookie or short data."""
    if not select.select([s], [], [], bound)[0]:
        sys.exit("FAIL: %s not answered in %g s %s (hang)" %
                 (what, bound, during))
    err, got = simple_reply(s)
    if err or got != cookie or len(recvn(s, length)) != length:
        sys.exit("FAIL: %s: err %d cookie %d" % (what, err, got))


def unread(s):
    """How many bytes wait in s's receive queue, unread (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD,
                                          b"\0\0\0\0"))[0]


def peer_stat(seg, port, name):
    """A peer's statistic NAME (`$X stats SEG PORT`; the shell tests export
    X), as an int."""
    out = subprocess.run([os.environ["X"], "stats", seg, str(port)],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == name:
            return int(f[1])
    raise KeyError("no statistic %s on port %d of %s" % (name, port, seg))


def wait_stat_above(seg, port, name, base, bound):
    """Wait until statistic NAME exceeds base; a hang detector, bound
    seconds, raises. Returns the value."""
    t0 = time.monotonic()
    while True:
        n = peer_stat(seg, port, name)
        if n > base:
            return n
        if time.monotonic() - t0 > bound:
            raise TimeoutError("%s stayed at %d for %d s" % (name, n, bound))
        time.sleep(0.05)
