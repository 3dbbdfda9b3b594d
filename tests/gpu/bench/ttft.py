#!/usr/bin/env python3
"""Time to first token and decode step of the bundled example model, per batch x prompt row,
in one warm process (issue 18's method): each row's shapes are generated twice first (cuDNN
plans, allocator segments, kernels warm), then TTFT is the median of --reps generate() calls of
one new token, timed to a synchronize at the first logits; the decode step is the p50 of one
generate() of --new-tokens tokens. Run it once per arm (stock, under the shim, ...): the arms
compare as ratios of medians taken in the same device call.

--profile: one more generate() of one token per row under torch.profiler (CUPTI kernel records),
its GPU kernel time summed by class: attention (Ponytail's, torch flash, mem-efficient, cuDNN
SDPA), GEMM (cuBLAS/cuBLASLt/CUTLASS) and the rest. What share of the time to first token
attention is decides how far a faster attention kernel can move it (issue 18).

  python3 tests/gpu/bench/ttft.py --rows 8x4096,2x32768,1x65536 --json out.json
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
import generate  # noqa: E402  (the bundled example's model and defaults)


# Kernel classes by name. Attention first: cuDNN's SDPA kernels also carry "sm90"/"xmma".
ATTN_RE = re.compile(r"pt_attn|flash|fmha|sdpa|attention|AttentionKernel", re.I)
GEMM_RE = re.compile(r"gemm|nvjet|cutlass|xmma|cublas", re.I)


def profile_call(torch, call):
    """One call under torch.profiler: its time to first token and GPU kernel time by class."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0, st, _ = call()
    per = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us and str(getattr(e, "device_type", "")).endswith("CUDA"):
            per[e.key] = per.get(e.key, 0.0) + us / 1000.0
    attn = {k: v for k, v in per.items() if ATTN_RE.search(k)}
    gemm = {k: v for k, v in per.items() if k not in attn and GEMM_RE.search(k)}
    top = sorted(attn.items(), key=lambda kv: -kv[1])
    return dict(ttft_s=st[0] - t0 if st else None, total_ms=sum(per.values()),
                attention_ms=sum(attn.values()), gemm_ms=sum(gemm.values()),
                other_ms=sum(per.values()) - sum(attn.values()) - sum(gemm.values()),
                attention_kernels=[(k[:60], v) for k, v in top],
                top_other=sorted(((k[:60], v) for k, v in per.items() if k not in attn and k not in gemm),
                                 key=lambda kv: -kv[1])[:5])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="8x4096,2x32768,1x65536", help="BxP,BxP,...")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", required=True)
    ap.add_argument("--profile", action="store_true", help="GPU kernel time by class, one more call per row")
    a = ap.parse_args()
    rows = [tuple(int(x) for x in r.split("x")) for r in a.rows.split(",")]

    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    s, extra = generate.settings_from(generate.parse_args([]))
    dev = torch.device("cuda", torch.cuda.current_device())
    model = generate.make_model(torch, s, extra, dev, max(p for _, p in rows) + a.new_tokens)

    stamps = []

    class Stamp(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if not stamps:
                torch.cuda.synchronize(dev)  # the first logits exist: prefill done on the GPU
            stamps.append(time.perf_counter())
            return scores

    def gen(ids, n):
        stamps.clear()
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), min_new_tokens=n,
                             max_new_tokens=n, do_sample=False, pad_token_id=0,
                             logits_processor=LogitsProcessorList([Stamp()]))
        torch.cuda.synchronize(dev)
        return t0, list(stamps), out

    res = dict(torch=torch.__version__, gpu=torch.cuda.get_device_name(dev),
               preload=os.environ.get("LD_PRELOAD", ""), rows=[])
    g = torch.Generator().manual_seed(1234)
    with torch.inference_mode():
        for b, p in rows:
            ids = torch.randint(3, s["vocab"], (b, p), generator=g).to(dev)
            for _ in range(2):
                gen(ids, 2)
            ttft = []
            for _ in range(a.reps):
                t0, st, _ = gen(ids, 1)
                ttft.append(st[0] - t0)
            t0, st, out = gen(ids, a.new_tokens)
            steps = sorted((y - x) * 1000.0 for x, y in zip(st, st[1:]))
            r = dict(batch=b, prompt=p, ttft_s=ttft, ttft_median_s=statistics.median(ttft),
                     step_p50_ms=statistics.median(steps) if steps else None,
                     total_s=(st[-1] - t0) if st else None,
                     peak_reserved_mib=torch.cuda.max_memory_reserved(dev) / 2**20)
            if a.profile:
                r["profile"] = profile_call(torch, lambda: gen(ids, 1))
            res["rows"].append(r)
            print("ttft: B=%d P=%d  TTFT median %.4f s (%s)  step p50 %.2f ms" % (
                b, p, r["ttft_median_s"], ", ".join("%.4f" % x for x in ttft), r["step_p50_ms"] or 0),
                flush=True)
            if a.profile:
                pr = r["profile"]
                print("profile: B=%d P=%d  TTFT %.4f s  GPU kernels %.1f ms: attention %.1f ms (%s), gemm %.1f ms, "
                      "other %.1f ms" % (b, p, pr["ttft_s"], pr["total_ms"], pr["attention_ms"],
                                         ", ".join("%s %.1f" % kv for kv in pr["attention_kernels"][:3]),
                                         pr["gemm_ms"], pr["other_ms"]), flush=True)
            torch.cuda.empty_cache()
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
