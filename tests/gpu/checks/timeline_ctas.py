#!/usr/bin/env python3
"""Summary of a per-CTA decode timeline (tests/gpu/checks/attn.sh with
ATTN_DEFS="-DPT_ATTN_TIMELINE -DPT_ATTN_TIMELINE_ALL" ATTN_STAGES=timeline): every CTA printed
one "TLC" line (absolute %globaltimer ns: start, first tile, the tile ntiles / 2, loop end,
end; its tile count). For the last launch of each shape, per group of CTAs with the same tile
count: how many, when their loops ran (µs from the launch's first CTA start), and their stream
rate (MB/s of K/V per CTA, d 128 bf16: 32 KiB a tile) in the first and the second half of their
tiles. Question it answers (issue 17): do the CTAs that still stream speed up once the CTAs of
padded rows have finished?
  timeline_ctas.py timeline.log"""
import re
import statistics
import sys

TILE_BYTES = 64 * 128 * 2 * 2


def main(path):
    shapes, cur = [], None
    for line in open(path, errors="replace"):
        m = re.match(r"TL shape (.*) launch (\d+)", line)
        if m:
            cur = {"shape": m.group(1), "launch": int(m.group(2)), "ctas": []}
            shapes.append(cur)
            continue
        m = re.match(r"TLC \S+ tiles (\d+) start (\d+) tile0 (\d+) mid (\d+) loopend (\d+) end (\d+)", line)
        if m and cur is not None:
            cur["ctas"].append(tuple(int(x) for x in m.groups()))
    last = {}
    for s in shapes:
        if s["ctas"]:
            last[s["shape"]] = s
    for name, s in last.items():
        ctas = s["ctas"]
        t0 = min(c[1] for c in ctas)
        span = (max(c[5] for c in ctas) - t0) / 1e3
        print("%s (launch %d): %d CTAs, span %.1f us, starts spread %.1f us" % (
            name, s["launch"], len(ctas), span, (max(c[1] for c in ctas) - t0) / 1e3))
        print("  %6s %5s | %8s %8s %8s %8s | %9s %9s" % ("tiles", "CTAs", "tile0", "mid", "loopend", "end",
                                                         "MB/s 1st", "MB/s 2nd"))
        for n in sorted({c[0] for c in ctas}):
            g = [c for c in ctas if c[0] == n]
            med = lambda i: statistics.median((c[i] - t0) / 1e3 for c in g)
            r1 = r2 = float("nan")
            if n >= 2:
                r1 = statistics.median((n // 2) * TILE_BYTES / max(c[3] - c[2], 1) * 1e3 for c in g)
                r2 = statistics.median((n - n // 2) * TILE_BYTES / max(c[4] - c[3], 1) * 1e3 for c in g)
            print("  %6d %5d | %8.1f %8.1f %8.1f %8.1f | %9.0f %9.0f" % (n, len(g), med(2), med(3), med(4),
                                                                       med(5), r1, r2))


if __name__ == "__main__":
    main(sys.argv[1])
