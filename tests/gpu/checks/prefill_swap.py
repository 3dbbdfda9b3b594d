#!/usr/bin/env python3
"""Ponytail's prefill kernel swapped into torch's FlashAttention-2 launches by the shim
(PONYTAIL_ATTN_PREFILL=1), seen from torch: the calls are torch's own flash SDPA calls, and
whether torch's kernel or Ponytail's ran is up to the shim the process was started with (run by
tests/gpu/checks/prefill_swap.sh, which checks the shim's exit stats to tell which one did).

  prefill_swap.py correctness --json PATH [--ref cpu|gpu]   # vs fp32; exit 1 on any failure
  prefill_swap.py graph [--json PATH] [--ref cpu|gpu]       # a captured flash call, 2 replays
  prefill_swap.py timing --json PATH [--b 1,4,8] [--s 2048,4096,16384] [--d 64,128] [--causal 0,1]
  prefill_swap.py stats FILE... [--expect-from JSON] [--min-swapped N] [--max-swapped N] [--verify]
  prefill_swap.py join PT.json TORCH.json [--out PATH]      # the two timing runs side by side

correctness: bf16 and fp16 x d 64 and 128 x causal and not x shapes (b, h, h_k, sq, sk):
(2, 8, 8, 1000, 1000), (1, 32, 8, 2048, 2048) (GQA, through SDPA with enable_gqa),
(2, 16, 16, 77, 77), and, not causal only, (2, 8, 8, 300, 1000). Causal cases have sq == sk:
SDPA refuses flash for is_causal with sq != sk (torch aligns the mask top-left, FA2 bottom-right;
with sq == sk both agree, and so does the reference's bottom-right mask). Fresh random inputs per
case. The non-GQA cases call torch.ops.aten._scaled_dot_product_flash_attention (what SDPA calls
for flash), which also returns the LSE; the GQA cases call SDPA (O only). When torch's flash
backend refuses GQA (RuntimeError), those cases are reported "skipped: torch flash refuses GQA",
not failed. Errors against attn_check.reference (fp32; TF32 off): max|O - ref| / max|ref| <= 1e-2,
the same for the LSE <= 1e-3.
The reference runs on the CPU by default (--ref cpu), so that the only GPU kernels of the run are
randn, the NaN fills and the flash calls. (It was chosen when the shim's exit stats listed only the
50 most launched kernels, where a GPU reference's kernels could push torch's flash entries off
the list; the stats now list every hooked kernel apart, so --ref gpu is as safe.)
The JSON lists every case and `calls` (flash calls attempted), `skipped` (calls torch refused,
so no kernel launched) and `expected_swaps` (calls - skipped): what the shim should have swapped.

graph: causal bf16 d 128, b 1, h 16, sq = sk = 1024: the SDPA flash call captured with
torch.cuda.graph on static inputs (after eager warm-up on a side stream, as torch asks), replayed
twice with new random inputs copied in and the graph's output poisoned with NaN before each
replay; each replay against the fp32 reference (same bounds), and it must differ from the
previous replay's output.

timing: 32 query heads over 8 KV heads (32 over 32 when torch's flash refuses GQA; printed and in
the JSON), bf16, per point graph-replay timing (attn_check.graph_times, replays interleaved) of
the SDPA flash call (Ponytail's kernel or torch's, per the process's PONYTAIL_ATTN_PREFILL) and
the SDPA cuDNN call; TFLOP/s count 4 * B * H * S^2 * d, half of it causal (as prefill_check.py).
The JSON is rewritten after every point, so a run cut short keeps what it measured.

stats: reads the shim's exit stats (PONYTAIL_STATS=json; layout in shim/stats.c): the swapped
counts of the kernels.hooked entries (every kernel a hook saw; kernels.top, the 50 most launched,
from shims before that list) whose name contains "flash_fwd", kernels.fallback_reasons,
hooks.verified / hooks.verify_failures (and hooks.verify_skipped: launches too large for verify
mode's scratch, shown), internal_errors. Exit 1 when a requirement fails.

join: the timing JSONs of the PONYTAIL_ATTN_PREFILL=1 run (Ponytail, its cuDNN column) and of the
=0 run (torch's flash): one table, with Ponytail's speed relative to cuDNN (cuDNN us / Ponytail
us: > 1 is faster).
"""
import argparse
import glob
import json
import math
import os
import sys
import zlib

O_TOL, LSE_TOL = 1e-2, 1e-3
GQA_REFUSED = "skipped: torch flash refuses GQA"


def dname(dtype):
    import torch
    return "bf16" if dtype == torch.bfloat16 else "fp16"


def env_note():
    keys = ("PONYTAIL_ATTN_PREFILL", "PONYTAIL_ATTN", "PONYTAIL_ENABLE")
    d = {k: os.environ.get(k) for k in keys}
    d["shim_preloaded"] = "libponytail_shim" in os.environ.get("LD_PRELOAD", "")
    return d


def sync(what):
    """attn_check.sync with this check's limit of 60 s."""
    from attn_check import sync as wait
    wait(what, timeout=60.0)


def poison(shapes_dtypes):
    """Best effort: allocates a NaN-filled tensor of each given shape and dtype (the outputs the
    next call will allocate) and frees them at once, so that torch's caching allocator will most
    likely hand those very blocks (same size class, just freed) to the call's outputs. Nothing
    guarantees it (the call may allocate other blocks first, or a block may be split), so a
    kernel that left part of its output unwritten is likely, not certain, to show NaN."""
    import torch
    ts = [torch.full(s, float("nan"), device="cuda", dtype=dt) for s, dt in shapes_dtypes]
    del ts


def ref_on(args):
    return "cpu" if args.ref == "cpu" else "cuda"


def reference_on(dev, q, k, v, scale, causal):
    """attn_check.reference (fp32; bottom-right causal: row i sees keys j <= i + sk - sq) on `dev`.
    q [B, sq, H, D], k/v [B, sk, Hk, D] -> o [B, sq, H, D], lse [B, H, sq]."""
    from attn_check import reference
    return reference(q.to(dev), k.to(dev), v.to(dev), scale, causal)


# ---- correctness ---------------------------------------------------------------------------

def shapes():
    """(b, h, hk, sq, sk, causal_too)"""
    return [(2, 8, 8, 1000, 1000, True), (1, 32, 8, 2048, 2048, True), (2, 16, 16, 77, 77, True),
            (2, 8, 8, 300, 1000, False)]


def correctness(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from attn_check import rel_err
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = ref_on(args)
    res = {"mode": "correctness", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "env": env_note(), "ref": dev, "cases": [], "calls": 0, "skipped": 0, "failures": 0}
    gqa_refused = None  # the first refusal's message

    def save():
        res["expected_swaps"] = res["calls"] - res["skipped"]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)

    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                for (b, h, hk, sq, sk, causal_too) in shapes():
                    if causal and not causal_too:
                        continue
                    gqa = h != hk
                    name = "B%d H%-2d Hk%-2d sq%-5d sk%-5d d%-3d %s%s%s" % (
                        b, h, hk, sq, sk, d, dname(dtype), " causal" if causal else "",
                        " gqa/sdpa" if gqa else "")
                    torch.manual_seed(zlib.crc32(name.encode()))
                    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)   # torch's flash layout
                    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
                    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
                    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # what SDPA passes
                    scale = 1.0 / math.sqrt(d)
                    rec = {"name": name.strip(), "b": b, "h": h, "hk": hk, "sq": sq, "sk": sk, "d": d,
                           "dtype": dname(dtype), "causal": causal, "api": "sdpa" if gqa else "aten_flash"}
                    poison([((b, sq, h, d), dtype), ((b, h, sq), torch.float32)])
                    res["calls"] += 1
                    lse = None
                    try:
                        if gqa:
                            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale,
                                                                     enable_gqa=True)
                        else:
                            r = torch.ops.aten._scaled_dot_product_flash_attention(
                                qt, kt, vt, 0.0, causal, False, scale=scale)
                            out, lse = r[0], r[1]
                    except RuntimeError as e:
                        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else repr(e)
                        if gqa:
                            gqa_refused = gqa_refused or msg
                            res["skipped"] += 1
                            rec.update(status="skipped", why=GQA_REFUSED, error=msg)
                            print("%-58s %s (%s)" % (name, GQA_REFUSED, msg[:100]), flush=True)
                            res["cases"].append(rec)
                            save()
                            continue
                        raise
                    sync(name)
                    ro, rl = reference_on(dev, q, k, v, scale, causal)
                    eo = rel_err(out.transpose(1, 2).to(dev), ro)
                    rec["o_err"] = eo
                    ok = eo <= O_TOL
                    if lse is not None:
                        if lse.dim() != 3 or lse.shape[0] != b or lse.shape[1] != h or lse.shape[2] < sq:
                            el = float("inf")
                            rec["lse_shape"] = list(lse.shape)
                        else:
                            el = rel_err(lse[..., :sq].to(dev), rl)
                        rec["lse_err"] = el
                        ok = ok and el <= LSE_TOL
                    rec["status"] = "ok" if ok else "FAIL"
                    res["failures"] += not ok
                    print("%-58s O %.2e  LSE %s  %s" % (name, eo, "%.2e" % el if lse is not None else "   -    ",
                                                        rec["status"]), flush=True)
                    res["cases"].append(rec)
                    save()
                    del q, k, v, qt, kt, vt, out, lse, ro, rl
    if gqa_refused:
        res["gqa_refused"] = gqa_refused
    save()
    n_ok = sum(1 for c in res["cases"] if c.get("status") == "ok")
    print("correctness: %d cases, %d ok, %d failures, %d skipped (%s); %d flash calls, %d expected swaps" % (
        len(res["cases"]), n_ok, res["failures"], res["skipped"], GQA_REFUSED if res["skipped"] else "none",
        res["calls"], res["calls"] - res["skipped"]), flush=True)
    return 1 if res["failures"] else 0


# ---- graph ---------------------------------------------------------------------------------

def graph(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from attn_check import rel_err
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = ref_on(args)
    b, h, s, d, dtype, causal = 1, 16, 1024, 128, torch.bfloat16, True
    scale = 1.0 / math.sqrt(d)
    torch.manual_seed(1234)
    q = torch.empty(b, s, h, d, device="cuda", dtype=dtype)
    k = torch.empty(b, s, h, d, device="cuda", dtype=dtype)
    v = torch.empty(b, s, h, d, device="cuda", dtype=dtype)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def fill():  # new values into the static tensors (copy_: the addresses stay)
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, device="cuda", dtype=dtype))

    def call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)

    res = {"mode": "graph", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "env": env_note(), "ref": dev, "calls": 0, "replays": []}
    fill()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
            res["calls"] += 1
    torch.cuda.current_stream().wait_stream(side)
    sync("warm-up")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = call()
    res["calls"] += 1
    sync("capture")
    fails = 0
    prev = None
    for r in range(2):
        fill()
        out.fill_(float("nan"))  # the graph's own output: whatever the replay leaves unwritten stays NaN
        g.replay()
        sync("replay %d" % (r + 1))
        ro, _ = reference_on(dev, q, k, v, scale, causal)
        o = out.transpose(1, 2).to(dev)
        eo = rel_err(o, ro)
        same = prev is not None and torch.equal(o, prev)
        ok = eo <= O_TOL and not same
        fails += not ok
        res["replays"].append({"replay": r + 1, "o_err": eo, "same_as_previous": same, "ok": ok})
        print("graph replay %d: B%d H%d S%d d%d bf16 causal  O %.2e%s  %s" % (
            r + 1, b, h, s, d, eo, "  (same output as the previous replay)" if same else "",
            "ok" if ok else "FAIL"), flush=True)
        prev = o.clone()
    res["failures"] = fails
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print("graph: %s (%d replays, %d failures; %d flash calls: 2 eager, 1 captured)" % (
        "PASS" if not fails else "FAIL", len(res["replays"]), fails, res["calls"]), flush=True)
    return 1 if fails else 0


# ---- timing --------------------------------------------------------------------------------

def timing(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from attn_check import graph_times
    H, dtype = 32, torch.bfloat16
    # Does torch's flash backend take GQA (enable_gqa)? One small call tells.
    HK, gqa_note = 8, None
    try:
        q = torch.randn(1, H, 256, 128, device="cuda", dtype=dtype)
        kv = torch.randn(1, HK, 256, 128, device="cuda", dtype=dtype)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        sync("GQA probe")
        del q, kv
    except RuntimeError as e:
        HK = H
        gqa_note = "torch flash refuses GQA (%s): 32 KV heads instead of 8" % (str(e).strip().splitlines() or [""])[0][:120]
        print(gqa_note, flush=True)
    res = {"mode": "timing", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "env": env_note(), "h": H, "hk": HK, "gqa_note": gqa_note, "points": []}
    hdr = "%2s %6s %4s %6s | %10s %7s | %10s %7s | %6s" % (
        "B", "S", "d", "causal", "flash us", "TFLOP/s", "cudnn us", "TFLOP/s", "fl/cu")
    print("flash = SDPA's flash call (PONYTAIL_ATTN_PREFILL=%s: %s); H %d, Hk %d, bf16" % (
        os.environ.get("PONYTAIL_ATTN_PREFILL", "unset"),
        "Ponytail's kernel if swapped" if os.environ.get("PONYTAIL_ATTN_PREFILL") != "0" else "torch's kernel",
        H, HK), flush=True)
    print(hdr, flush=True)
    for d in args.d:
        for causal in [bool(c) for c in args.causal]:
            for b in args.b:
                for s in args.s:
                    torch.manual_seed(b * 100000 + s + d)
                    q = torch.randn(b, s, H, d, device="cuda", dtype=dtype)
                    k = torch.randn(b, s, HK, d, device="cuda", dtype=dtype)
                    v = torch.randn(b, s, HK, d, device="cuda", dtype=dtype)
                    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                    flops = 4.0 * b * H * s * s * d / (2 if causal else 1)
                    calls = max(1, min(10, int(2e12 / flops)))
                    big = flops > 1e15
                    fns, errs = {}, {}
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        def f(i, be=be):
                            with sdpa_kernel(be):
                                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                                      enable_gqa=HK != H)
                        try:
                            f(0)
                            sync("%s B%d S%d d%d" % (name, b, s, d))
                            fns[name] = f
                        except RuntimeError as e:
                            errs[name] = (str(e).strip().splitlines() or [""])[0][:160]
                            print("  %s failed at B%d S%d d%d: %s" % (name, b, s, d, errs[name]), flush=True)
                    t = graph_times(fns, calls, replays=5 if big else 7, warm=1 if big else 2, eager=1) if fns else {}
                    us = {n: t.get(n, float("nan")) for n in ("flash", "cudnn")}
                    tf = {n: flops / x / 1e6 if x == x else float("nan") for n, x in us.items()}
                    row = "%2d %6d %4d %6s | %10.1f %7.0f | %10.1f %7.0f | %6.2f" % (
                        b, s, d, "yes" if causal else "no", us["flash"], tf["flash"], us["cudnn"], tf["cudnn"],
                        us["cudnn"] / us["flash"] if us["flash"] == us["flash"] and us["flash"] else float("nan"))
                    print(row, flush=True)
                    res["points"].append({"b": b, "s": s, "d": d, "causal": causal, "flops": flops,
                                          "flash_us": us["flash"], "cudnn_us": us["cudnn"],
                                          "flash_tflops": tf["flash"], "cudnn_tflops": tf["cudnn"],
                                          "errors": errs})
                    with open(args.json, "w") as fh:
                        json.dump(res, fh, indent=1)  # NaN is written as NaN (Python's json reads it back)
                    del q, k, v, qt, kt, vt, fns
                    torch.cuda.empty_cache()
    return 0


# ---- stats (no torch) ----------------------------------------------------------------------

def stats(args):
    files = [p for pat in args.files for p in (sorted(glob.glob(pat)) or [pat])]
    docs, bad = [], []
    for p in files:
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            bad.append("%s (%s)" % (os.path.basename(p), e.__class__.__name__))
    lines, fails = [], []
    if not docs:
        print("stats: no shim stats%s (the process did not exit normally, or the shim was not loaded?)" % (
            ": " + ", ".join(bad) if bad else ""))
        return 1
    swapped, skipped, fallbacks, launches = 0, 0, 0, 0
    entries, reasons = [], {}
    verified, vfail, vskip, internal, top_len = 0, 0, 0, 0, 0
    for j in docs:
        k = j.get("kernels") or {}
        # "hooked": every kernel a hook saw, whatever its launch rank (newer shims)
        top = k.get("hooked") or k.get("top") or []
        top_len = max(top_len, len(top))
        for e in top:
            if "flash_fwd" in e.get("name", ""):
                entries.append(e)
                swapped += int(e.get("swapped") or 0)
                skipped += int(e.get("skipped") or 0)
                fallbacks += int(e.get("fallbacks") or 0)
                launches += int(e.get("launches") or 0)
        for r, n in (k.get("fallback_reasons") or {}).items():
            reasons[r] = reasons.get(r, 0) + int(n)
        hooks = j.get("hooks") or {}
        verified += int(hooks.get("verified", j.get("verified", 0)) or 0)
        vfail += int(hooks.get("verify_failures", j.get("verify_failures", 0)) or 0)
        vskip += int(hooks.get("verify_skipped") or 0)  # launches too large for verify's scratch
        internal += int(j.get("internal_errors") or 0)
    lines.append("shim stats (%d file%s%s): flash_fwd* kernels (hooked): %d entries, %d launches, "
                 "swapped %d, skipped %d, fallbacks %d" % (len(docs), "s" if len(docs) > 1 else "",
                                                          ", unreadable: " + ", ".join(bad) if bad else "",
                                                          len(entries), launches, swapped, skipped, fallbacks))
    if args.verbose:
        import re
        for e in entries:
            m = re.match(r"_ZN\d+(\w+?)\d+(flash_fwd\w*?kernel)I", e.get("name", ""))
            short = "%s::%s" % (m.group(1), m.group(2)) if m else e.get("name", "")[:60]
            lines.append("  %-44s launches %5s  %-10s swapped %5s  skipped %5s  fallbacks %5s" % (
                short, e.get("launches"), e.get("action"), e.get("swapped", "-"), e.get("skipped", "-"),
                e.get("fallbacks", "-")))
    if verified or vfail or args.verify:
        lines.append("verified %d, verify failures %d%s" % (
            verified, vfail, ", not verified (over verify's scratch) %d" % vskip if vskip else ""))
    if internal:
        lines.append("internal errors %d" % internal)
        fails.append("internal errors %d" % internal)
    need = args.min_swapped
    if args.expect_from:
        try:
            with open(args.expect_from) as f:
                c = json.load(f)
            need = max(need if need is not None else 0, int(c.get("calls", 0)) - int(c.get("skipped", 0)), 1)
        except (OSError, ValueError) as e:
            fails.append("cannot read %s (%s)" % (args.expect_from, e.__class__.__name__))
    if need is not None and swapped < need:
        fails.append("swapped %d flash launches, expected at least %d%s" % (
            swapped, need, ": nothing swapped, so torch's kernel is what ran" if swapped == 0 else ""))
        if top_len >= 50 and not any((j.get("kernels") or {}).get("hooked") for j in docs):
            lines.append("  (kernels.top is full, %d entries (PT_STATS_TOP): flash entries with few launches "
                         "may have been cut off the list)" % top_len)
    if args.max_swapped is not None and swapped > args.max_swapped:
        fails.append("swapped %d flash launches, expected at most %d" % (swapped, args.max_swapped))
    if args.verify:
        if verified <= 0:
            fails.append("nothing verified")
        if vfail:
            fails.append("%d verify failures" % vfail)
    if reasons and (fails or args.verbose):
        lines.append("fallback reasons: " + "; ".join("%s: %d" % kv for kv in sorted(reasons.items(),
                                                                                     key=lambda x: -x[1])))
    lines.append("stats: " + ("ok" if not fails else "FAIL: " + "; ".join(fails)))
    print("\n".join(lines))
    return 1 if fails else 0


# ---- join (no torch) -----------------------------------------------------------------------

def join(args):
    def load(p):
        try:
            with open(p) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"points": []}
    pt, tr = load(args.pt), load(args.torch)
    key = lambda p: (p["b"], p["s"], p["d"], bool(p["causal"]))
    tmap = {key(p): p for p in tr.get("points", [])}
    nan = float("nan")
    rows = ["prefill through the shim: Ponytail = SDPA flash with PONYTAIL_ATTN_PREFILL=1, torch flash = the same "
            "with =0, cuDNN = SDPA cuDNN (from the =1 run); H %s, Hk %s, bf16; graph replay, median us per call" % (
                pt.get("h", "?"), pt.get("hk", "?"))]
    for note in {pt.get("gqa_note"), tr.get("gqa_note")} - {None}:
        rows.append("note: " + note)
    rows.append("%2s %6s %4s %6s | %10s %7s | %10s %7s | %10s %7s | %8s" % (
        "B", "S", "d", "causal", "ponytail", "TFLOP/s", "flash", "TFLOP/s", "cudnn", "TFLOP/s", "pt/cudnn"))
    for p in pt.get("points", []):
        t = tmap.get(key(p), {})
        a, fl, cu = p.get("flash_us", nan), t.get("flash_us", nan), p.get("cudnn_us", nan)
        tf = lambda x: p["flops"] / x / 1e6 if x == x and x else nan
        ratio = cu / a if a == a and cu == cu and a else nan
        rows.append("%2d %6d %4d %6s | %10.1f %7.0f | %10.1f %7.0f | %10.1f %7.0f | %7.2fx" % (
            p["b"], p["s"], p["d"], "yes" if p["causal"] else "no", a, tf(a), fl, tf(fl), cu, tf(cu), ratio))
    missing = [k for k in tmap if k not in {key(p) for p in pt.get("points", [])}]
    if missing:
        rows.append("points timed only with PONYTAIL_ATTN_PREFILL=0: %s" % missing)
    rows.append("pt/cudnn: cuDNN us / Ponytail us (> 1: Ponytail faster)")
    text = "\n".join(rows) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
    return 0 if pt.get("points") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    ints = lambda t: [int(x) for x in t.split(",") if x]
    c = sub.add_parser("correctness")
    c.add_argument("--json", default="")
    c.add_argument("--ref", choices=["cpu", "gpu"], default="cpu", help="where the fp32 reference runs")
    g = sub.add_parser("graph")
    g.add_argument("--json", default="")
    g.add_argument("--ref", choices=["cpu", "gpu"], default="cpu")
    t = sub.add_parser("timing")
    t.add_argument("--json", required=True)
    t.add_argument("--b", type=ints, default=[1, 4, 8], help="batch sizes")
    t.add_argument("--s", type=ints, default=[2048, 4096, 16384], help="sequence lengths (sq = sk)")
    t.add_argument("--d", type=ints, default=[64, 128], help="head dims")
    t.add_argument("--causal", type=ints, default=[0, 1], help="1 causal, 0 not")
    s = sub.add_parser("stats")
    s.add_argument("files", nargs="+", help="the shim's JSON exit stats (globs are expanded)")
    s.add_argument("--expect-from", default="", help="correctness JSON: swapped >= calls - skipped (and >= 1)")
    s.add_argument("--min-swapped", type=int, default=None)
    s.add_argument("--max-swapped", type=int, default=None)
    s.add_argument("--verify", action="store_true", help="verified > 0 and verify_failures == 0")
    s.add_argument("-v", "--verbose", action="store_true", help="list the flash entries and fallback reasons")
    j = sub.add_parser("join")
    j.add_argument("pt", help="timing JSON of the PONYTAIL_ATTN_PREFILL=1 run")
    j.add_argument("torch", help="timing JSON of the PONYTAIL_ATTN_PREFILL=0 run")
    j.add_argument("--out", default="", help="append the table to this file")
    args = ap.parse_args()
    if args.what == "stats":
        return stats(args)
    if args.what == "join":
        return join(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # attn_check.py sits beside
    import torch
    print(torch.cuda.get_device_name(), torch.__version__, env_note(), flush=True)
    return {"correctness": correctness, "graph": graph, "timing": timing}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
