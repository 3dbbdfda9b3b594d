#!/usr/bin/env python3
"""What the shim adds to a process that imports a CUDA framework and makes no CUDA call (issue 48:
vLLM starts an engine core and, compiling, dozens of worker processes, each loading the preload).

Runs STATEMENT (default `import torch`) in fresh processes, the arms interleaved round by round:
  stock   no preload
  shim    LD_PRELOAD of the shim, defaults
  off     the shim loaded with PONYTAIL_ENABLE=0
and prints each arm's median and spread of wall time and its median CPU time, with the
ratios to stock. Needs no GPU
(registration of the framework's kernels runs when its libraries load, GPU or not), so it runs
on the CPU machine with a CUDA build of torch installed in a venv.

  import_cost.py --python VENV/bin/python --shim build-gpu/shim/libponytail_shim.so [--runs 20]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def one(py, stmt, env):
    """(wall s, CPU s: user + system of the child) of one process running stmt."""
    t = time.perf_counter()
    p = subprocess.Popen([py, "-c", stmt], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t
    if p.returncode:
        raise SystemExit("import_cost: %r failed (rc %d): %s" % (stmt, p.returncode, err[-400:].decode(errors="replace")))
    return dt, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--stmt", default="import torch")
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("PONYTAIL_")}
    shim = os.path.abspath(a.shim)
    arms = {"stock": dict(base), "shim": dict(base, LD_PRELOAD=shim),
            "off": dict(base, LD_PRELOAD=shim, PONYTAIL_ENABLE="0")}
    for env in arms.values():  # one warm-up each: the page cache holds the libraries after it
        one(a.python, a.stmt, env)
    t = {k: [] for k in arms}
    for i in range(a.runs):  # interleaved, the order rotated, so drift falls on every arm alike
        names = list(arms)
        names = names[i % len(names):] + names[:i % len(names)]
        for k in names:
            t[k].append(one(a.python, a.stmt, arms[k]))
    # CPU time (the child's user + system) is the steadier figure on a shared machine: what the
    # shim adds is CPU work (interning kernel names), not waiting.
    wref = statistics.median(w for w, _ in t["stock"])
    cref = statistics.median(c for _, c in t["stock"])
    print("import_cost: %r, %d runs an arm, interleaved" % (a.stmt, a.runs))
    print("%-6s %10s %10s %10s %8s %12s %8s" % ("arm", "wall p50", "wall min", "wall max", "/ stock",
                                              "CPU p50 ms", "/ stock"))
    for k, v in t.items():
        w = [x for x, _ in v]
        c = statistics.median(y for _, y in v)
        m = statistics.median(w)
        print("%-6s %10.1f %10.1f %10.1f %8.3f %12.1f %8.3f" % (k, m * 1e3, min(w) * 1e3, max(w) * 1e3, m / wref,
                                                           c * 1e3, c / cref))


if __name__ == "__main__":
    main()
