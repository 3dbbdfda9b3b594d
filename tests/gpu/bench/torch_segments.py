#!/usr/bin/env python3
"""The order and sizes of the segments PyTorch's caching allocator asks the driver for while
examples/generate.py runs (torch's own memory history: segment_alloc / segment_free events),
so that a stock run and a run under the shim can be compared call by call.

  python3 tests/gpu/bench/torch_segments.py OUT.json -- [generate.py arguments]
  python3 tests/gpu/bench/torch_segments.py --compare A.json B.json   # where the two diverge

Why: under the shim's default (PONYTAIL_TORCH_ALLOC=keep) torch's caching allocator runs
unchanged on top of cudaMalloc, yet the padded batch-16 run reserves 256 MiB more than stock.
Torch's free-block search breaks ties between equal sizes by address, so the addresses the
segments get (the pool's versus the driver's) can change which blocks are split; this records
both sides' addresses and sizes to confirm or refute that.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    sa = [e for e in a["events"] if e[0] == "segment_alloc"]
    sb = [e for e in b["events"] if e[0] == "segment_alloc"]
    first = next((i for i, (x, y) in enumerate(zip(a["events"], b["events"]))
                  if x[0] != y[0] or x[2] != y[2]), None)
    print("A %s: %d segment allocs, %.0f MiB in all, max reserved %.0f MiB" % (
        a_path, len(sa), sum(e[2] for e in sa) / 2**20, a["max_reserved"] / 2**20))
    print("B %s: %d segment allocs, %.0f MiB in all, max reserved %.0f MiB" % (
        b_path, len(sb), sum(e[2] for e in sb) / 2**20, b["max_reserved"] / 2**20))
    if first is None:
        print("same events (action and size) in the same order%s" % (
            "" if len(a["events"]) == len(b["events"]) else ", one list longer"))
        return 0
    print("first difference at event %d:" % first)
    for i in range(max(0, first - 3), min(first + 6, max(len(a["events"]), len(b["events"])))):
        ea = a["events"][i] if i < len(a["events"]) else None
        eb = b["events"][i] if i < len(b["events"]) else None
        f = lambda e: "-" if e is None else "%s %#x %d MiB" % (e[0], e[1], e[2] >> 20)
        print("  %4d  A %-40s B %s" % (i, f(ea), f(eb)))
    return 1


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        return compare(sys.argv[2], sys.argv[3])
    if len(sys.argv) < 2 or "--" not in sys.argv:
        sys.exit(__doc__)
    out = sys.argv[1]
    gen_args = sys.argv[sys.argv.index("--") + 1:]
    import torch
    torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=1_000_000)
    import generate
    rc = generate.main(gen_args)
    snap = torch.cuda.memory._snapshot()
    events = []
    for dev in snap.get("device_traces", []):
        for e in dev:
            if e.get("action") in ("segment_alloc", "segment_free", "segment_map", "segment_unmap"):
                events.append([e["action"], e["addr"], e["size"]])
    segs = [[s["address"], s["total_size"]] for s in snap.get("segments", [])]
    json.dump({"events": events, "final_segments": segs,
               "max_reserved": torch.cuda.max_memory_reserved(),
               "max_allocated": torch.cuda.max_memory_allocated(),
               "preload": os.environ.get("LD_PRELOAD", "")}, open(out, "w"))
    ups = sum(1 for e in events if e[0] == "segment_alloc")
    inc = sum(1 for a, b in zip([e for e in events if e[0] == "segment_alloc"],
                                [e for e in events if e[0] == "segment_alloc"][1:]) if b[1] > a[1])
    print("torch_segments: %d segment allocs (%d at a higher address than the one before), %d frees, "
          "max reserved %.0f MiB" % (ups, inc, sum(1 for e in events if e[0] == "segment_free"),
                                     torch.cuda.max_memory_reserved() / 2**20))
    return rc


if __name__ == "__main__":
    sys.exit(main())
