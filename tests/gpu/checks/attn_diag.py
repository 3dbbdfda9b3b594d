"""Diagnostics of the decode timing itself (issue 17's latency-bound points), run as stages of
tests/gpu/checks/attn_check.py (attn.sh ATTN_STAGES="masked-heat masked-place masked-method"):

masked-heat: does what the card ran just before a timing move it (clocks, heat)?
masked-place: does where K and V lie in memory move it?
masked-method: does what the timing's other graphs read move it?

All three ask why one kernel read 0.5-1.5 us apart at the same shapes in two stages of one process
(bench/records/2026-12-03-decode-clocks.md). The answers on the H200: not the clocks (1980 MHz
throughout) nor the heat; the allocation K/V got moves a point by +-0.3 us; the other graphs do
not, unless they read other memory, and then the first launch after them pays 3.6-5.6 us for its
code and small inputs coming from DRAM (which led to the decode kernels split by loop)."""
import random
import time

import torch

from attn_check import (bandwidth, bitwise_same, capture_graphs, graph_times,
                        padded_args, padded_inputs, replay_times, torch_masked)
from gpu_clocks import Clocks

MIB = 1 << 20
# The masked grid's points with a floor >= 25 us (B, KV, G); masked as attn_check.masked_timing.
LATENCY_POINTS = ((1, 32768, 1), (1, 32768, 8), (8, 4096, 1), (8, 4096, 4), (8, 4096, 8),
                  (32, 1024, 1), (32, 1024, 8))


def masked_heat(lib, out_rows):
    """Diagnostic: does what the card ran just before move a timing? The masked grid times
    Ponytail right after torch's mem-efficient and cuDNN kernels of the previous point (up to
    0.4 s of them), the experiments stage after Ponytail's own; the two read the same kernel at
    the latency-bound points 0.5-1.5 us apart, while a read of the same bytes (torch's sum) agrees.
    At each latency-bound point of the grid (mask as masked_timing), Ponytail's launch and
    torch's read of its bytes are captured once, then timed (interleaved, graph replay) after
    each of four preludes, in a shuffled order, three times: idle (0.2 s asleep), own (0.5 s of
    the same Ponytail launch, as in the experiments stage), memeff (0.5 s of torch's
    mem-efficient kernel at B1 KV32k G8, expanded K/V, as the grid runs it) and sum (0.5 s of
    torch's read-only sum over 4 GiB). Each row gives the card's clocks, power and
    temperature during the timing (tests/gpu/checks/gpu_clocks.py); the last rows give each
    point's median per prelude."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    read_bw = bandwidth(out_rows)
    hq, hk, hv, _, _, hkeep, _, _ = padded_inputs(1, 32768, 8, Hk, D, dtype, True)
    x = torch.randn(1 << 31, device="cuda", dtype=torch.bfloat16)
    memeff = torch_masked("mem_eff", hq, hk, hv, hkeep)  # holds the expanded K/V the graph reads
    heaters = capture_graphs({"memeff": memeff, "sum": lambda i: x.sum(dtype=torch.float32)})

    def prelude(name, graphs):
        torch.cuda.synchronize()
        if name == "idle":
            time.sleep(0.2)
            return
        g = graphs["pt"] if name == "own" else heaters[name]
        t0 = time.time()
        while time.time() - t0 < 0.5:
            g.replay()
            torch.cuda.synchronize()

    hdr = "%3s %6s %2s %8s %7s | %8s %6s %8s | %s" % ("B", "KV", "G", "floor", "prelude", "ponytail",
                                                      "xfl", "read", "card during the timing")
    out_rows.append(hdr)
    print(hdr, flush=True)
    summary = []
    for B, S, G in LATENCY_POINTS:
        q, k, v, o, lse, keep, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, True)
        floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
        a = padded_args(lib, q, k, v, o, lse)
        rd = torch.randn(max(1, Hk * keys * D * 2), device="cuda", dtype=dtype)
        with lib.bias(bias):
            lib.decode(a)
            graphs = capture_graphs({"pt": lambda i: lib.decode(a),
                                     "read": lambda i: rd.sum(dtype=torch.float32)})
            got = {}
            for rep in range(3):
                order = ["idle", "own", "memeff", "sum"]
                random.Random(B * 100 + G + rep).shuffle(order)
                for pre in order:
                    prelude(pre, graphs)
                    with Clocks() as ck:
                        res = replay_times(graphs)
                    got.setdefault(pre, []).append(res["pt"])
                    row = "%3d %6d %2d %8.1f %7s | %8.1f %6.2f %8.1f | %s" % (
                        B, S, G, floor, pre, res["pt"], res["pt"] / floor, res["read"], ck.columns())
                    out_rows.append(row)
                    print(row, flush=True)
            del graphs
        summary.append("%3d %6d %2d  ponytail x floor, median per prelude: %s" % (
            B, S, G, "  ".join("%s %.3f" % (pre, sorted(t)[len(t) // 2] / floor)
                              for pre, t in sorted(got.items()))))
        del q, k, v, o, lse, keep, bias, rd
        torch.cuda.empty_cache()
    out_rows.extend(summary)
    print("\n".join(summary), flush=True)
    del heaters, x, memeff
    torch.cuda.empty_cache()


# (name, K's offset from a 2 MiB boundary, V's distance beyond K's end); each place has its own
# allocation, so its own physical pages. Two places repeat (adj2, d12k2) to show what the pages
# alone change.
PLACES = (("adj", 0, 0), ("adj2", 0, 0), ("d4k", 0, 4 << 10), ("d12k", 0, 12 << 10), ("d12k2", 0, 12 << 10),
          ("d64k", 0, 64 << 10), ("d1m", 0, MIB), ("d1m12k", 0, MIB + (12 << 10)), ("k4k", 4 << 10, 0),
          ("far", 0, 512 * MIB), ("far12k", 0, 512 * MIB + (12 << 10)))


def distance(d):
    """A byte distance as MiB and KiB ("+64M+12K"), to tell multiples of 2 MiB from the rest."""
    sign = "-" if d < 0 else "+"
    d = abs(d)
    return "%s%dM+%dK" % (sign, d // MIB, (d % MIB) >> 10)


def masked_place(lib, out_rows):
    """Diagnostic: does where K and V lie move the decode kernel? The masked grid, the
    experiments stage and masked-heat allocate different tensors before a point's K/V, so the
    same shapes read K/V at other addresses (and other physical pages) in each stage. At each
    latency-bound point (masked as the grid, and B8 KV4k G 1 unmasked) the same K/V values are
    copied to several places: `own` where padded_inputs allocated them, and each of PLACES in an
    allocation of its own (K at an offset from a 2 MiB boundary, V at a distance beyond K's end).
    All are timed interleaved by graph replay, twice (two rounds of graph_times); "bitwise"
    checks that every place gives the same outputs (the same arithmetic). Last columns: the
    spread (max - min) over places of the two rounds' mean."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    read_bw = bandwidth(out_rows)
    names = ["own"] + [p[0] for p in PLACES]
    hdr = "%3s %6s %2s %4s %5s |" % ("B", "KV", "G", "mask", "floor") + "".join(
        " %11s" % n for n in names) + "  spread  own's V-K  bitwise"
    out_rows.append(hdr)
    print(hdr, flush=True)
    for B, S, G, masked in [p + (True,) for p in LATENCY_POINTS] + [(8, 4096, 1, False)]:
        q, k, v, o, lse, _, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, masked)
        floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
        nb = k.numel() * 2
        kv, arenas = {"own": (k, v)}, []
        for name, koff, vgap in PLACES:
            arena = torch.empty(2 * MIB + koff + 2 * nb + vgap, dtype=torch.uint8, device="cuda")
            base = (-arena.data_ptr()) % (2 * MIB)  # the arena's first 2 MiB-aligned byte
            kk = arena[base + koff:base + koff + nb].view(dtype).view(B, Hk, S, D)
            vv = arena[base + koff + nb + vgap:base + koff + 2 * nb + vgap].view(dtype).view(B, Hk, S, D)
            kk.copy_(k)
            vv.copy_(v)
            kv[name] = (kk, vv)
            arenas.append(arena)
        with lib.bias(bias):
            fns = {}
            for name in names:
                a = padded_args(lib, q, kv[name][0], kv[name][1], o, lse)
                fns[name] = (lambda a: lambda i: lib.decode(a))(a)
            same = bitwise_same(fns, o, lse)
            rounds = [graph_times(fns) for _ in range(2)]
        mids = [(r1 + r2) / 2 for r1, r2 in zip(*[[r[n] for n in names] for r in rounds])]
        row = "%3d %6d %2d %4s %5.1f |" % (B, S, G, "pad" if masked else "none", floor) + "".join(
            " %5.1f/%5.1f" % (rounds[0][n], rounds[1][n]) for n in names) + "  %6.1f  %s  %s" % (
            max(mids) - min(mids), distance(v.data_ptr() - k.data_ptr() - nb), same)
        out_rows.append(row)
        print(row, flush=True)
        del q, k, v, o, lse, bias, kv, arenas, fns
        torch.cuda.empty_cache()


def masked_method(lib, out_rows):
    """Diagnostic: does what the other graphs of one timing read move a launch's time? The
    experiments stage times a build alone or beside builds that read the same K/V; the grid beside
    other plans of it (which also write the workspace), masked-heat beside torch's read of another
    buffer, masked-place beside copies of K/V. At three latency-bound points (masked as the grid),
    on the same tensors, Ponytail's launch (pt) is timed by graph_times: alone; beside a second
    graph of the same launch (twin); beside the grid's other plans (plans: noclu, ws2, ws4);
    beside torch's read of another buffer of the same size (other); beside the launch on a copy of
    K/V (copy); and, with one launch per graph, alone (alone1) and beside the other read (other1):
    what the first launch after other work costs. cuDNN's masked SDPA on the same inputs (GQA, the
    grid's bool mask) is timed alone, other, alone1 and other1 too (cu:...): whether the cost of
    running after other work is Ponytail's alone. Methods in a shuffled order, three rounds;
    medians of the measured launch's time."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    read_bw = bandwidth(out_rows)
    methods = ["alone", "twin", "plans", "other", "copy", "alone1", "other1",
               "cu:alone", "cu:other", "cu:alone1", "cu:other1"]
    hdr = "%3s %6s %2s %5s |" % ("B", "KV", "G", "floor") + "".join(" %9s" % m for m in methods)
    out_rows.append(hdr)
    print(hdr, flush=True)
    for B, S, G in ((8, 4096, 1), (8, 4096, 8), (1, 32768, 8), (32, 1024, 8)):
        q, k, v, o, lse, keep, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, True)
        floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
        k2, v2 = k.clone(), v.clone()

        cudnn = torch_masked("cudnn", q, k, v, keep)
        other = torch.randn(2 * k.numel(), device="cuda", dtype=dtype)

        def launch(kk, vv, **knobs):
            return lib.launcher(padded_args(lib, q, kk, vv, o, lse), **knobs)
        pt = launch(k, v)
        rd = lambda i: other.sum(dtype=torch.float32)  # noqa: E731
        sets = {"alone": {"pt": pt}, "twin": {"pt": pt, "twin": launch(k, v)},
                "plans": {"pt": pt, "noclu": launch(k, v, cluster_max=1),
                          "ws2": launch(k, v, cluster_max=1, split_mul=2),
                          "ws4": launch(k, v, cluster_max=1, split_mul=4)},
                "other": {"pt": pt, "read": rd}, "copy": {"pt": pt, "copy": launch(k2, v2)},
                "alone1": {"pt": pt}, "other1": {"pt": pt, "read": rd},
                "cu:alone": {"pt": cudnn}, "cu:other": {"pt": cudnn, "read": rd},
                "cu:alone1": {"pt": cudnn}, "cu:other1": {"pt": cudnn, "read": rd}}
        got = {m: [] for m in methods}
        with lib.bias(bias):
            for f in sets["plans"].values():  # the workspace at its largest before any capture
                f(0)
            for rnd in range(3):
                order = list(methods)
                random.Random(rnd).shuffle(order)
                for m in order:
                    calls = 1 if m.endswith("1") else 20
                    got[m].append(graph_times(sets[m], calls=calls)["pt"])
        row = "%3d %6d %2d %5.1f |" % (B, S, G, floor) + "".join(
            " %9.1f" % sorted(got[m])[1] for m in methods)
        out_rows.append(row)
        print(row, flush=True)
        del q, k, v, o, lse, keep, bias, k2, v2, other, sets
        torch.cuda.empty_cache()
