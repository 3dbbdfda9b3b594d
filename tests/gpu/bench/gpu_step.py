#!/usr/bin/env python3
"""GPU time per decode step from a CUPTI records file (PONYTAIL_CUPTI, shim/cupti.c) of one
`examples/generate.py` run: its measured generate() makes exactly N forwards, the prefill and
N-1 decode steps, and each decode step launches one decode-attention kernel per layer (torch's
mem-efficient or flash kernel, or Ponytail's). So the last (N-1) x LAYERS decode-attention
launches are the measured call's decode steps, LAYERS per step; the prefill may use other
kernels (cuDNN) or launch several per layer, and is not counted. A window runs from one step's
first attention launch to the next step's: the kernels that start in the windows of steps
1 .. N-2 are summed (kernel time, not the union) and divided by N-2. Prints one JSON object.

  gpu_step.py RECORDS --layers 16 --new-tokens 64
"""
import argparse
import json
import re
import sys

# Attention kernels (for the attention share) and decode attention (to find the steps).
ATTN = re.compile(r"fmha|pt_attn_decode|flash_fwd|AttentionKernel|sdpa", re.I)
DECODE_ATTN = re.compile(r"fmha_cutlassF|pt_attn_decode|flash_fwd")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    a = ap.parse_args()
    ks = []
    with open(a.records, errors="replace") as f:
        for line in f:
            if line.startswith("K "):
                _, s, e, _stream, name = line.rstrip("\n").split(" ", 4)
                ks.append((int(s), int(e), name))
    ks.sort()
    att = [k for k in ks if DECODE_ATTN.search(k[2])]
    n, L = a.new_tokens, a.layers
    if n < 3 or len(att) < (n - 1) * L:
        sys.exit("gpu_step: %d decode attention launches, need %d x %d" % (len(att), n - 1, L))
    mine = att[-(n - 1) * L:]  # decode steps 1 .. N-1
    t0, t1 = mine[0][0], mine[(n - 2) * L][0]  # start of step 1 .. start of step N-1
    sel = [k for k in ks if t0 <= k[0] < t1]
    steps = n - 2
    total = sum(e - s for s, e, _ in sel)
    attn = sum(e - s for s, e, nm in sel if ATTN.search(nm))
    names = {}
    for s, e, nm in sel:
        if ATTN.search(nm):
            names[nm[:80]] = names.get(nm[:80], 0) + 1
    print(json.dumps(dict(steps=steps, gpu_us_per_step=total / steps / 1e3,
                          attn_us_per_step=attn / steps / 1e3, wall_us_per_step=(t1 - t0) / steps / 1e3,
                          kernels_per_step=len(sel) / steps, attention_kernels=names)))


if __name__ == "__main__":
    main()
