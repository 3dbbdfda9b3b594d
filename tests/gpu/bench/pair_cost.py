#!/usr/bin/env python3
"""Host cost of one tensor allocation + free through torch, per configuration (the process's
allocator settings and LD_PRELOAD decide which). Rows, ns per iteration (median of reps):
  empty N       torch.empty(N bytes) dropped at once: allocator malloc + free, no kernel
  add 8 KiB     c = a + b on 4096 bf16 elements: the allocation plus one kernel launch
  add out=      torch.add(a, b, out=c): the same launch, no allocation
The Python loop's own cost is in every row alike; compare configurations row by row.
Usage: pair_cost.py LABEL [reps]"""
import sys
import time

import torch

label = sys.argv[1] if len(sys.argv) > 1 else "?"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
n = 10000
dev = torch.device("cuda")
torch.cuda.init()
a = torch.randn(4096, device=dev, dtype=torch.bfloat16)
b = torch.randn(4096, device=dev, dtype=torch.bfloat16)
c = torch.empty_like(a)


def timed(fn):
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    v = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        v.append((time.perf_counter_ns() - t0) / n)
        torch.cuda.synchronize()
    v.sort()
    return v[len(v) // 2]


rows = [("empty 4 KiB", lambda: torch.empty(4096, dtype=torch.uint8, device=dev)),
        ("empty 256 KiB", lambda: torch.empty(256 << 10, dtype=torch.uint8, device=dev)),
        ("empty 4 MiB", lambda: torch.empty(4 << 20, dtype=torch.uint8, device=dev)),
        ("add 8 KiB", lambda: a + b),
        ("add out=", lambda: torch.add(a, b, out=c))]
for name, fn in rows:
    print("%-10s %-28s %9.1f" % (label, name, timed(fn)), flush=True)
