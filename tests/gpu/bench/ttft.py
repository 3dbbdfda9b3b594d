#!/usr/bin/env python3
"""Time to first token and decode step of the bundled example model, per batch x prompt row,
in one warm process (issue 18's method): each row's shapes are generated twice first (cuDNN
plans, allocator segments, kernels warm), then TTFT is the median of --reps generate() calls of
one new token, timed to a synchronize at the first logits; the decode step is the p50 of one
generate() of --new-tokens tokens. Run it once per arm (stock, under the shim, ...): the arms
compare as ratios of medians taken in the same device call.

  python3 tests/gpu/bench/ttft.py --rows 8x4096,2x32768,1x65536 --json out.json
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
import generate  # noqa: E402  (the bundled example's model and defaults)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="8x4096,2x32768,1x65536", help="BxP,BxP,...")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", required=True)
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
            res["rows"].append(r)
            print("ttft: B=%d P=%d  TTFT median %.4f s (%s)  step p50 %.2f ms" % (
                b, p, r["ttft_median_s"], ", ".join("%.4f" % x for x in ttft), r["step_p50_ms"] or 0),
                flush=True)
            torch.cuda.empty_cache()
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
