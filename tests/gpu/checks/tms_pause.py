#!/usr/bin/env python3
"""torch_memory_saver's pause / resume of the same bytes Ponytail's sleep check moves (10 GiB
held in one tensor, CPU backup in pinned memory), for tests/gpu/checks/sleep_wake.py. Prints one
JSON line: pause_s, resume_s, bytes, pattern_same. Runs without the shim."""
import json
import os
import sys
import time

import torch
from torch_memory_saver import torch_memory_saver

gib = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
torch_memory_saver.hook_mode = "torch"
n = int(gib * (1 << 30)) // 8
with torch_memory_saver.region(tag="x", enable_cpu_backup=True):
    t = torch.empty(n, dtype=torch.int64, device="cuda")
torch.arange(n, device="cuda", dtype=torch.int64, out=t).mul_(6364136223846793005).add_(7)
torch.cuda.synchronize()
t0 = time.perf_counter()
torch_memory_saver.pause("x")
torch.cuda.synchronize()
t1 = time.perf_counter()
torch_memory_saver.resume("x")
torch.cuda.synchronize()
t2 = time.perf_counter()
ref = torch.arange(n, device="cuda", dtype=torch.int64).mul_(6364136223846793005).add_(7)
print(json.dumps({"pause_s": t1 - t0, "resume_s": t2 - t1, "bytes": n * 8, "pattern_same": bool(torch.equal(ref, t))}),
      flush=True)
# torch_memory_saver 0.0.10 (hook mode torch) aborts on a free of its memory outside a region
# ("only support interesting region"), which the interpreter's teardown would be (seen on the
# H100, 2026-12-07): leave without freeing.
os._exit(0)
