# SPDX-License-Identifier: MIT
"""Checks and peer statistics for the python parts of the shell tests.

The shell tests put this directory on PYTHONPATH (stack_testlib.sh's
testlib_init) and import it from their heredocs, next to nbd_testlib.
"""
import json
import subprocess
import time


class Checks:
    """check(cond, what) prints "ok: what" or "FAIL: what" (after an
    optional prefix) and counts the failures in check.fails."""

    def __init__(self, prefix="", flush=False):
        self.fails = 0
        self.prefix = prefix
        self.flush = flush

    def __call__(self, cond, what):
        print(("ok: " if cond else "FAIL: ") + self.prefix + what,
              flush=self.flush)
        if not cond:
            self.fails += 1
        return cond

    def exit_status(self):
        return 1 if self.fails else 0


def port_stats(xsegctl, seg, port):
    """`xsegctl stats SEG PORT --json`, parsed."""
    out = subprocess.run([xsegctl, "stats", seg, str(port), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def fresh_counters(xsegctl, seg, port, tries=300):
    """The counters a peer publishes in PORT's statistics area (every
    second), from a publication made after this call started: they cover
    everything completed before the call. Polled every 0.1 s, at most
    TRIES times (RuntimeError after)."""
    def get():
        return port_stats(xsegctl, seg, port).get("peer_stats") or {}
    first = get().get("publications", 0)
    for _ in range(tries):
        st = get()
        if st.get("publications", 0) >= first + 2:
            return st["counters"]
        time.sleep(0.1)
    raise RuntimeError(f"statistics of port {port} not refreshed")
