#!/usr/bin/env python3
"""Ponytail's prefill kernel (kernels/attn_prefill.cu, issue 18) on the GPU, through its test
library (tests/gpu/checks/prefill_testlib.cu, built by tests/gpu/checks/prefill.sh).

  prefill_check.py --lib libprefill_test.so correctness   # vs fp32, poisoned outputs; exit 1 on a failure
  prefill_check.py --lib libprefill_test.so sanitize      # two small launches (run under compute-sanitizer)
  prefill_check.py --lib libprefill_test.so timing        # graph replay vs torch flash and cuDNN
  prefill_check.py --lib libprefill_test.so profile       # one launch of each (run under ncu)

correctness: fresh random inputs per case, O and LSE poisoned with NaN before the launch, then
compared with attention computed in fp32 (matmul + softmax, TF32 off): max|O - ref| / max|ref|
<= 1e-2 and the same for the LSE <= 1e-3 (issue 18's bounds). Cases: bf16 and fp16, d 64 and
128, causal and not, seqlen_q == seqlen_k and seqlen_q < seqlen_k (bottom-right causal), GQA
(K/V heads shared, never expanded), lengths that are not multiples of the tiles (1, 77, 1000,
...), torch's flash layout [b, s, h, d] and Hugging Face's transposed one, and two launches of
more tiles than SMs (what a persistent build walks several of per CTA).

timing: B in {1, 4, 8} x S in {2k, 4k, 16k, 32k} x d in {64, 128}, causal and not (--b, --s,
--d, --causal pick a subset: the whole grid is several device calls), 32 query heads over 8 KV
heads, bf16; each kernel by CUDA-graph replay (median), TFLOP/s counting 4 * B * H * S^2 * d
(half of it causal). Goals: faster than cuDNN at every point, >= 600 TFLOP/s causal d=128 at
S >= 4096. Prints one row per point and writes prefill_timing.txt.
"""
import argparse
import ctypes
import math
import os
import sys

import torch

# tests/gpu/checks/attn_check.py (the same directory): the fp32 reference, the error measure and
# graph-replay timing, shared with the decode kernel's check
from attn_check import graph_times, reference, rel_err, sync

O_TOL, LSE_TOL = 1e-2, 1e-3


class Lib:
    def __init__(self, path):
        self.l = ctypes.CDLL(path)
        P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
        S = ctypes.POINTER(ctypes.c_int64)
        self.l.pt_prefill_test.argtypes = [P, P, P, P, P, I, I, I, I, I, I, I, S, F, I, P]
        self.l.pt_prefill_test.restype = I

    def run(self, q, k, v, o, lse, causal, scale, stream=None):
        """q [b, sq, h, d], k/v [b, sk, hk, d], o like q (any strides, d contiguous)."""
        b, sq, h, d = q.shape
        sk, hk = k.shape[1], k.shape[2]
        st = (ctypes.c_int64 * 12)(*(list(q.stride()[:3]) + list(k.stride()[:3]) + list(v.stride()[:3]) +
                                    list(o.stride()[:3])))
        s = stream if stream is not None else torch.cuda.current_stream().cuda_stream
        return self.l.pt_prefill_test(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                      lse.data_ptr() if lse is not None else None,
                                      1 if q.dtype == torch.bfloat16 else 0, b, h, hk, sq, sk, d, st, scale,
                                      1 if causal else 0, s)


def make(b, sq, sk, h, hk, d, dtype, layout):
    if layout == "hf":  # [b, h, s, d] storage seen as [b, s, h, d]
        q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype).transpose(1, 2)
        k = torch.randn(b, hk, sk, d, device="cuda", dtype=dtype).transpose(1, 2)
        v = torch.randn(b, hk, sk, d, device="cuda", dtype=dtype).transpose(1, 2)
    else:
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    return q, k, v


def diagnose(o, ro, lse, rl, causal, sk):
    """Where a failing case is wrong, to tell a layout fault from a numeric one: NaN left in
    the outputs (rows never written), the error by query row within the 128-row tile (which
    warp / warpgroup), by output column group of 8 (which accumulator block / V sub-tile), and
    whether the LSE (S = Q K^T only) is right while O (P V) is not."""
    of, lf = o.float(), lse.float()
    print("    NaN: O %d of %d, LSE %d of %d" % (torch.isnan(of).sum().item(), of.numel(),
                                                torch.isnan(lf).sum().item(), lf.numel()))
    e = (of - ro).abs().nan_to_num(float("inf"))            # [b, sq, h, d]
    sq, d = e.shape[1], e.shape[3]
    den = max(ro.abs().max().item(), 1e-30)
    by_row = [e[:, r::128].max().item() / den if r < sq else 0.0 for r in range(0, 128, 8)]
    print("    O err by row %% 128 (groups of 8 rows, i.e. per warp half): " +
          " ".join("%.1e" % x for x in by_row[:16]))
    by_col = [e[..., c:c + 8].max().item() / den for c in range(0, d, 8)]
    print("    O err by column group of 8: " + " ".join("%.1e" % x for x in by_col))
    by_tile = [e[:, m:m + 128].max().item() / den for m in range(0, sq, 128)][:16]
    print("    O err by 128-row tile: " + " ".join("%.1e" % x for x in by_tile))
    el = (lf - rl).abs().nan_to_num(float("inf"))            # [b, h, sq]
    print("    LSE err by row %% 128 (groups of 8): " +
          " ".join("%.1e" % (el[..., r::128].max().item() if r < sq else 0.0) for r in range(0, 128, 8)))
    r0 = (e.amax(dim=(0, 2, 3)) > 1e-2 * den).nonzero()
    if r0.numel():
        print("    first bad query rows: %s" % r0.flatten()[:12].tolist())


def case(lib, rows, b, sq, sk, h, hk, d, dtype, causal, layout="fa", probe=None):
    """probe: None (random inputs), "q0" (Q = 0: softmax uniform, O = mean of the visible V,
    tests the P V path alone), "v1" (V = 1: O = 1 wherever the softmax is normalised, and the
    LSE tests S = Q K^T alone) or "ramp" (K's rows scaled up along the keys, Q by 3: each row's
    max rises tile after tile, by about 7 log2 units on average, sometimes past the lazy max's
    threshold of 8 and sometimes not, so O's rescale runs on many tiles; the random cases cover
    the tiles where a whole warp skips it)."""
    torch.manual_seed(hash((b, sq, sk, h, hk, d, str(dtype), causal, layout, probe)) & 0xffffffff)
    q, k, v = make(b, sq, sk, h, hk, d, dtype, layout)
    if probe == "q0":
        q.zero_()
    elif probe == "v1":
        v.fill_(1.0)
    elif probe == "ramp":
        q.mul_(3.0)
        k.mul_(torch.linspace(0.2, 5.0, sk, device="cuda", dtype=dtype).view(1, sk, 1, 1))
    scale = 1.0 / math.sqrt(d)
    o = torch.full((b, sq, h, d), float("nan"), device="cuda", dtype=dtype)
    lse = torch.full((b, h, sq), float("nan"), device="cuda", dtype=torch.float32)
    name = "B%-2d sq%-5d sk%-5d H%-2d Hk%-2d d%-3d %s%s %s%s" % (
        b, sq, sk, h, hk, d, "bf16" if dtype == torch.bfloat16 else "fp16", " causal" if causal else "", layout,
        " probe " + probe if probe else "")
    if d == 64 and os.environ.get("PT_PREFILL_SKIP") is not None:
        name += " skip" if os.environ["PT_PREFILL_SKIP"] != "0" else " noskip"
    if os.environ.get("PT_PREFILL_CTAS") is not None:
        name += " ctas" + os.environ["PT_PREFILL_CTAS"]
    rc = lib.run(q, k, v, o, lse, causal, scale)
    try:
        sync(name)
    except RuntimeError as e:
        print("%-58s CUDA error: %s  FAIL" % (name, str(e).splitlines()[0][:160]), flush=True)
        os._exit(4)  # the context is lost: no later case can run
    if rc != 0:
        rows.append("%-58s launch rc %d  FAIL" % (name, rc))
        print(rows[-1], flush=True)
        return False
    ro, rl = reference(q, k, v, scale, causal)
    eo, el = rel_err(o, ro), rel_err(lse, rl)
    ok = eo <= O_TOL and el <= LSE_TOL
    rows.append("%-58s O %.2e  LSE %.2e  %s" % (name, eo, el, "ok" if ok else "FAIL"))
    print(rows[-1], flush=True)
    if not ok and DIAG[0] > 0:
        DIAG[0] -= 1
        diagnose(o, ro, lse, rl, causal, sk)
    return ok


DIAG = [6]  # error maps printed for the first failing cases only


def correctness(lib):
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, fails = [], 0
    # Probes first, one tile each, simplest to hardest: they localise a fault (PV path, QK path,
    # the second consumer warpgroup, d = 128's second sub-tile, the K/V ring) before the grid.
    for (sq, sk, d, probe) in ((64, 64, 64, "q0"), (64, 64, 64, "v1"), (64, 64, 64, None), (128, 64, 64, None),
                               (128, 64, 128, "q0"), (128, 64, 128, None), (128, 640, 128, None)):
        fails += not case(lib, rows, 1, sq, sk, 1, 1, d, torch.bfloat16, False, probe=probe)
    # d = 64 twice: the kernel with tile skipping (the _skip kernels) and the one without,
    # whichever pt_prefill_skip_pays would pick (PT_PREFILL_SKIP forces it in the test library).
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                for (b, sq, sk, h, hk) in ((1, 1, 1, 2, 1), (2, 77, 77, 4, 2), (1, 128, 128, 2, 2),
                                          (1, 129, 200, 4, 1), (2, 1000, 1000, 8, 2), (1, 300, 1000, 4, 4),
                                          (1, 2048, 2048, 8, 2)):
                    for forced in (("0", "1") if d == 64 else (None,)):
                        if forced is not None:
                            os.environ["PT_PREFILL_SKIP"] = forced
                        fails += not case(lib, rows, b, sq, sk, h, hk, d, dtype, causal)
                    os.environ.pop("PT_PREFILL_SKIP", None)
    fails += not case(lib, rows, 2, 1000, 1000, 8, 2, 128, torch.bfloat16, True, layout="hf")
    fails += not case(lib, rows, 1, 4096, 4096, 4, 1, 128, torch.bfloat16, True)
    fails += not case(lib, rows, 1, 17, 4096, 4, 2, 128, torch.bfloat16, True)  # chunked prefill
    # Scores whose max keeps rising (the lazy max: rescales taken and skipped).
    for d in (64, 128):
        for causal in (False, True):
            fails += not case(lib, rows, 1, 1000, 1000, 4, 2, d, torch.bfloat16, causal, probe="ramp")
    fails += not case(lib, rows, 1, 300, 1000, 4, 2, 128, torch.float16, True, probe="ramp")
    # More tiles (m-block x head x batch) than the H200 has SMs, of different key counts
    # (causal, sq < sk), on 132 CTAs whatever pt_prefill_ctas would choose: the persistent walk
    # (the default build) takes several per CTA, its K/V ring, Q reload and warpgroup turns
    # running on across tiles; with one tile per CTA that path would not run.
    os.environ["PT_PREFILL_CTAS"] = "132"
    for d in (64, 128):
        fails += not case(lib, rows, 2, 1000, 1500, 32, 8, d, torch.bfloat16, True)
    for forced in ("0", "1"):  # d = 64 causal, sq == sk, both kernels over several tiles a CTA
        os.environ["PT_PREFILL_SKIP"] = forced
        fails += not case(lib, rows, 2, 1000, 1000, 32, 8, 64, torch.bfloat16, True)
    del os.environ["PT_PREFILL_SKIP"]
    # The walk over several sections, the last one short (64 pairs in sections of 12), on 100
    # CTAs (4 to 6 tiles each).
    os.environ.update(PT_PREFILL_SECTION="12", PT_PREFILL_CTAS="100")
    for d in (64, 128):
        for causal in (False, True):
            fails += not case(lib, rows, 2, 1000, 1000, 32, 8, d, torch.bfloat16, causal)
    for var in ("PT_PREFILL_SECTION", "PT_PREFILL_CTAS"):
        del os.environ[var]
    rows.append("%d cases, %d failures" % (len(rows), fails))
    return rows, fails


def sanitize(lib):
    """Four small launches: one causal with sq < sk, one with tails in every dimension, and two
    d = 64 ones on the skipping kernel whose tiles run through one CTA (the ring and the turns
    across tiles, with warpgroups that skip K/V tiles past their rows and one whose rows are
    all past sq): causal, and not causal (its last turn an empty one)."""
    rows = []
    fails = not case(lib, rows, 1, 130, 200, 4, 2, 128, torch.bfloat16, True)
    fails += not case(lib, rows, 2, 77, 77, 2, 1, 64, torch.float16, False)
    os.environ.update(PT_PREFILL_CTAS="1", PT_PREFILL_SKIP="1")
    fails += not case(lib, rows, 1, 300, 300, 2, 1, 64, torch.bfloat16, True)
    # Not causal: the m-blocks in order, so the CTA's very last turn is an empty one (the third
    # warpgroup of the last tile has no rows below sq), where it must not pass the turn on.
    fails += not case(lib, rows, 1, 300, 300, 2, 1, 64, torch.bfloat16, False)
    del os.environ["PT_PREFILL_CTAS"], os.environ["PT_PREFILL_SKIP"]
    print("\n".join(rows))
    return fails


# The timing grid's heads: 32 query heads over 8 KV heads, bf16 (--heads sets others).
GRID_DEFAULT = (32, 8)
GRID_H, GRID_HK = GRID_DEFAULT


def grid_points(bs, ss, ds, causals):
    """The grid's points in order (d, causal, b, s), each with fresh inputs seeded by the point
    (so timing and profile see the same): yields (b, s, d, causal, q, k, v, o, lse). The caller
    drops its references before asking for the next point; the inputs are then freed."""
    for d in ds:
        for causal in causals:
            for b in bs:
                for s in ss:
                    torch.manual_seed(b * 100000 + s + d)
                    q, k, v = make(b, s, s, GRID_H, GRID_HK, d, torch.bfloat16, "fa")
                    o = torch.empty_like(q)
                    lse = torch.empty(b, GRID_H, s, device="cuda", dtype=torch.float32)
                    yield b, s, d, causal, q, k, v, o, lse
                    del q, k, v, o, lse
                    torch.cuda.empty_cache()


def sdpa(qt, kt, vt, causal, backend):
    """torch's SDPA on one backend (qt, kt, vt in SDPA's [b, h, s, d] order)."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)


def timing(lib, out_rows, bs, ss, ds, causals, extra=()):
    """extra: (name, Lib) pairs timed beside Ponytail's kernel (a previous version, variants)."""
    from torch.nn.attention import SDPBackend
    hdr = "%2s %6s %4s %6s | %9s %7s | %9s %7s | %9s %7s | %4s" % (
        "B", "S", "d", "causal", "ponytail", "TFLOP/s", "flash", "TFLOP/s", "cudnn", "TFLOP/s", "win")
    hdr += " | %6s" % "again"
    for name, _ in extra:
        hdr += " | %9s %7s" % (name[:9], "TFLOP/s")
    out_rows.append(hdr)
    print(hdr, flush=True)
    for b, s, d, causal, q, k, v, o, lse in grid_points(bs, ss, ds, causals):
        flops = 4.0 * b * GRID_H * s * s * d / (2 if causal else 1)
        calls = max(1, min(10, int(2e12 / flops)))
        big = flops > 1e15  # seconds per call: fewer replays
        scale = 1.0 / math.sqrt(d)
        fns = {}
        for name, xl in [("pt", lib), ("again", lib)] + list(extra):
            ok = xl.run(q, k, v, o, lse, causal, scale) == 0
            fns[name] = (lambda i, xl=xl: xl.run(q, k, v, o, lse, causal, scale)) if ok else None
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            f = lambda i, be=be: sdpa(qt, kt, vt, causal, be)
            try:
                f(0)
                fns[name] = f
            except Exception as e:
                fns[name] = None
                print("  %s failed at B%d S%d d%d: %s" % (name, b, s, d, str(e).splitlines()[0][:120]))
        # Every implementation's replays interleaved (attn_check.graph_times); "again"
        # is Ponytail's build a second time: the spread between two timings of one build.
        res = graph_times({n: fn for n, fn in fns.items() if fn is not None}, calls,
                          replays=5 if big else 7, warm=1 if big else 2, eager=1)
        for n in fns:
            res.setdefault(n, float("nan"))
        tf = {n: flops / t / 1e6 if t == t else float("nan") for n, t in res.items()}
        win = all(res["pt"] < res[n] for n in ("cudnn",) if res[n] == res[n])
        row = "%2d %6d %4d %6s | %9.1f %7.0f | %9.1f %7.0f | %9.1f %7.0f | %4s" % (
            b, s, d, "yes" if causal else "no", res["pt"], tf["pt"], res["flash"], tf["flash"],
            res["cudnn"], tf["cudnn"], "yes" if win else "NO")
        row += " | %+5.1f%%" % (100.0 * (res["again"] / res["pt"] - 1.0))
        for name, _ in extra:
            row += " | %9.1f %7.0f" % (res[name], tf[name])
        out_rows.append(row)
        print(row, flush=True)
        del q, k, v, o, lse, qt, kt, vt, fns, f


def profile(lib, bs, ss, ds, causals, extra=()):
    """One eager launch of Ponytail's kernel (and of each extra build), torch flash and cuDNN per
    point (the first value of each list unless more are given), for Nsight Compute to profile
    (prefill.sh's stage `profile` filters the kernels by name). Inputs as in timing."""
    from torch.nn.attention import SDPBackend
    for b, s, d, causal, q, k, v, o, lse in grid_points(bs, ss, ds, causals):
        for name, xl in [("pt", lib)] + list(extra):
            rc = xl.run(q, k, v, o, lse, causal, 1.0 / math.sqrt(d))
            print("B%d S%d d%d causal %d %s rc %d" % (b, s, d, causal, name, rc), flush=True)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            try:
                sdpa(qt, kt, vt, causal, be)
            except Exception as e:
                print("  %s failed: %s" % (be, str(e).splitlines()[0][:120]))
        torch.cuda.synchronize()
        del q, k, v, o, lse, qt, kt, vt


def main():
    global GRID_H, GRID_HK
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("what", choices=["correctness", "sanitize", "timing", "profile"])
    ints = lambda t: [int(x) for x in t.split(",") if x]
    ap.add_argument("--b", type=ints, default=[1, 4, 8], help="timing: batch sizes")
    ap.add_argument("--s", type=ints, default=[2048, 4096, 16384, 32768], help="timing: sequence lengths")
    ap.add_argument("--d", type=ints, default=[128, 64], help="timing: head dims")
    ap.add_argument("--causal", type=ints, default=[1, 0], help="timing: 1 causal, 0 not")
    ap.add_argument("--heads", default="%d/%d" % GRID_DEFAULT, metavar="H/HK",
                    help="timing, profile: query heads / KV heads (e.g. 16/4, the bundled example's model)")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=LIB",
                    help="timing: another build of the test library (a previous version, a variant), timed beside")
    args = ap.parse_args()
    try:
        GRID_H, GRID_HK = (int(x) for x in args.heads.split("/"))
        if GRID_H <= 0 or GRID_HK <= 0 or GRID_H % GRID_HK:
            raise ValueError(args.heads)
    except ValueError:
        ap.error("--heads: H/HK with HK dividing H, e.g. 32/8")
    lib = Lib(args.lib)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    if args.what == "sanitize":
        return 1 if sanitize(lib) else 0
    if args.what == "correctness":
        rows, fails = correctness(lib)
        print(rows[-1])
        if args.out:
            with open(os.path.join(args.out, "prefill_correctness.txt"), "w") as f:
                f.write("\n".join(rows) + "\n")
        return 1 if fails else 0
    extra = [(e.split("=", 1)[0], Lib(e.split("=", 1)[1])) for e in args.extra]
    # The timing table's own columns are keyed by these names: an extra build named after one
    # would silently replace that column's implementation (a variant named "pt" once did).
    taken = [n for n, _ in extra if n in ("pt", "again", "flash", "cudnn")]
    if taken:
        ap.error("--extra: the name(s) %s are the table's own columns; pick another" % ", ".join(taken))
    if args.what == "profile":
        profile(lib, args.b, args.s, args.d, [bool(c) for c in args.causal], extra=extra)
        return 0
    rows = ["heads %d/%d" % (GRID_H, GRID_HK)] if (GRID_H, GRID_HK) != GRID_DEFAULT else []
    timing(lib, rows, args.b, args.s, args.d, [bool(c) for c in args.causal], extra=extra)
    if args.out:
        with open(os.path.join(args.out, "prefill_timing.txt"), "w") as f:
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
