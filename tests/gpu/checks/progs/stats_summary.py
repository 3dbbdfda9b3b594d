#!/usr/bin/env python3
"""One line for the notes column of tests/gpu/checks/cuda_programs.sh: whether the
shim's pool was exercised, from the exit stats of every process of one run
(PONYTAIL_STATS=json, one file per pid). Keys: shim/route_alloc.c
(route_stats_json) and allocator/pool.h (PT_POOL_STATS), under "alloc".

    stats_summary.py FILE...   ->  e.g. "pool: 63 allocs/63 frees, pass 2, peak phys 12M (2 procs)"
"""
import json
import sys

SUM = ["pooled_allocs", "pooled_frees", "passthrough_allocs", "capture_passthrough", "capture_deferred_frees",
       "ipc_exports", "ipc_opens", "ipc_errors", "ipc_refusals", "pool_errors", "cross_stream_waits", "stitches",
       "trims", "trim_retries"]


def main(paths):
    tot = {k: 0 for k in SUM}
    peak = 0
    internal = 0
    routing = set()
    nproc = 0
    bad = 0
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError):
            bad += 1
            continue
        nproc += 1
        internal += int(d.get("internal_errors", 0))
        a = d.get("alloc") or {}
        routing.add(bool(a.get("routing")))
        for k in SUM:
            tot[k] += int(a.get(k, 0) or 0)
        peak = max(peak, int(a.get("peak_physical_bytes", 0) or 0))
    if not nproc:
        print("no shim stats" + (f" ({bad} unreadable)" if bad else "") + " (crashed or killed before exit?)")
        return
    parts = [f"pool: {tot['pooled_allocs']} allocs/{tot['pooled_frees']} frees",
             f"pass {tot['passthrough_allocs']}", f"peak phys {peak >> 20}M"]
    if tot["pooled_allocs"] == 0:
        parts[0] = "POOL NOT EXERCISED (0 pooled allocs)"
    if routing != {True}:
        parts.append("routing off")
    for k, label in [("capture_passthrough", "capture-pt"), ("capture_deferred_frees", "capture-deferred"),
                     ("ipc_exports", "ipc-exp"), ("ipc_opens", "ipc-open"), ("ipc_errors", "IPC-ERR"),
                     ("ipc_refusals", "ipc-refused"), ("pool_errors", "POOL-ERR"),
                     ("cross_stream_waits", "xstream-waits"), ("stitches", "stitches"), ("trims", "trims"),
                     ("trim_retries", "trim-retries")]:
        if tot[k]:
            parts.append(f"{label} {tot[k]}")
    if internal:
        parts.append(f"INTERNAL-ERR {internal}")
    s = ", ".join(parts)
    if nproc > 1:
        s += f" ({nproc} procs)"
    if bad:
        s += f" ({bad} stats files unreadable)"
    print(s)


if __name__ == "__main__":
    main(sys.argv[1:])
