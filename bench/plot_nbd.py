#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw the JSON printed by bench/bench_nbd.sh as an SVG bar chart.

Usage: bench/plot_nbd.py RESULT.json OUT.svg [--title TEXT]

One group of bars per fio job, one bar per target (our stack with and
without cached, nbdkit memory, nbdkit file + cache filter). Bar height is
the job's IOPS divided by the reference target's IOPS for the same job
(the reference is the JSON's "reference", drawn at 1.0), so jobs of very
different absolute speed share one axis; the absolute IOPS is printed on
each bar. Standard library only: no plotting package is needed on a fresh
machine, and the SVG renders on GitHub and in any browser.
"""
import json
import sys
from xml.sax.saxutils import escape

COLOURS = ["#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]


def fmt_iops(v):
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e3:
        return f"{v / 1e3:.1f}K"
    return f"{v:.0f}"


def plot(data, title):
    res, ref, jobs = data["results"], data["reference"], data["jobs"]
    targets = list(res.keys())
    ratios = {}
    top = 1.0
    for j in jobs:
        base = (res.get(ref) or {}).get(j)
        for t in targets:
            r = (res.get(t) or {}).get(j)
            if r and base and base["iops"]:
                ratios[(t, j)] = r["iops"] / base["iops"]
                top = max(top, ratios[(t, j)])
    top = top * 1.15
    W, H = 140 + 130 * len(jobs), 420
    left, right, bottom, head = 60, 20, 90, 50
    ph = H - bottom - head
    gw = (W - left - right) / len(jobs)
    bw = (gw - 20) / len(targets)
    y = lambda v: head + ph - v / top * ph  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">'
        f"{escape(title)}</text>",
        f'<text x="{W / 2}" y="36" text-anchor="middle">IOPS relative to '
        f"{escape(ref)} (absolute IOPS on each bar)</text>",
    ]
    step = 0.5 if top <= 3 else 1.0
    v = 0.0
    while v <= top:
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(v):.1f}" '
                   f'y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:.1f}</text>')
        v += step
    out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(1):.1f}" '
               f'y2="{y(1):.1f}" stroke="black" stroke-dasharray="4 3"/>')
    for gi, j in enumerate(jobs):
        gx = left + gi * gw + 10
        for ti, t in enumerate(targets):
            r = ratios.get((t, j))
            x = gx + ti * bw
            if r is None:
                out.append(f'<text x="{x + bw / 2:.1f}" y="{y(0) - 4:.1f}" '
                           'text-anchor="middle">n/a</text>')
                continue
            iops = res[t][j]["iops"]
            out.append(f'<rect x="{x:.1f}" y="{y(r):.1f}" width="{bw - 2:.1f}" '
                       f'height="{y(0) - y(r):.1f}" '
                       f'fill="{COLOURS[ti % len(COLOURS)]}"/>')
            out.append(f'<text x="{x + bw / 2:.1f}" y="{y(r) - 3:.1f}" '
                       f'text-anchor="middle" font-size="9">'
                       f"{fmt_iops(iops)}</text>")
        out.append(f'<text x="{gx + (gw - 20) / 2:.1f}" y="{y(0) + 16:.1f}" '
                   f'text-anchor="middle">{escape(j)}</text>')
    lx = left
    for ti, t in enumerate(targets):
        out.append(f'<rect x="{lx}" y="{H - 40}" width="12" height="12" '
                   f'fill="{COLOURS[ti % len(COLOURS)]}"/>')
        out.append(f'<text x="{lx + 16}" y="{H - 30}">{escape(t)}</text>')
        lx += 30 + 7 * len(t)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    title = "fio through NBD"
    if len(argv) >= 5 and argv[3] == "--title":
        title = argv[4]
    try:
        with open(argv[1]) as f:
            data = json.load(f)
        svg = plot(data, title)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write(f"plot_nbd.py: {argv[1]}: {e}\n")
        return 1
    with open(argv[2], "w") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
