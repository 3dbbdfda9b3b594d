#!/usr/bin/env python3
"""Which SDPA backend each kind of call runs, and that its output is right, in this process
(stock or under the shim; tests/gpu/checks/sdpa_policy.sh runs both and compares).

Cases (bf16, d=128; fresh random inputs; output compared with an fp32 math reference):
  prefill        B=1, 32 heads, S=2048, causal                      (auto: flash -> Ponytail's
                                                                     prefill kernel on compute
                                                                     capability 9.0, else cuDNN)
  prefill_gqa    B=2, 32/8 heads, S=1024, causal, enable_gqa        (auto: as prefill)
  decode         B=8, 32/8 heads, q=1, KV=4096, enable_gqa          (auto: flash -> Ponytail)
  decode_scale   as decode with scale=0.05 (the std::optional<double> argument)
  decode_q4      B=4, 32/8 heads, q=4, KV=2048, enable_gqa          (auto: flash)
  decode_mask    B=8, 32 heads (K/V expanded), q=1, KV=4096, left-padding bool mask
                                                                    (auto: mem-efficient)
  decode_mla     B=4, 128 heads, q=1, KV=2048, q/k head 192, v 128 (DeepSeek-V3's MLA under
                 Hugging Face's SDPA: flash cannot take unequal sizes; auto: mem-efficient ->
                 Ponytail's d192v128 kernel)
  decode_mla_mask  as decode_mla with a left-padding bool mask     (auto: mem-efficient)
  prefill_mask   B=2, 32 heads, S=1024, padding bool mask           (auto: cuDNN)
  forced_cudnn   decode under sdpa_kernel(CUDNN_ATTENTION): the user's choice stands
  compiled       decode through torch.compile (fullgraph, static shapes)
Each case records the attention kernels the profiler saw (classified cudnn / flash /
ponytail / mem_efficient / math) and the max error relative to the reference's max.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

KINDS = (("ponytail", "pt_attn_decode"), ("ponytail_prefill", "pt_attn_prefill"), ("cudnn", "cudnn"),
         ("flash", "flash_fwd"), ("mem_efficient", "fmha_cutlass"))


def classify(names):
    seen = set()
    for n in names:
        for kind, pat in KINDS:
            if pat in n:
                seen.add(kind)
                break
    return sorted(seen)


def reference(q, k, v, mask, causal, scale):
    qf, kf, vf = q.float(), k.float(), v.float()
    if kf.shape[1] != qf.shape[1]:
        r = qf.shape[1] // kf.shape[1]
        kf, vf = kf.repeat_interleave(r, 1), vf.repeat_interleave(r, 1)
    s = (qf @ kf.transpose(-1, -2)) * (scale if scale is not None else qf.shape[-1] ** -0.5)
    if causal:
        L, S = qf.shape[-2], kf.shape[-2]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L).logical_not(),
                          float("-inf"))
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), float("-inf"))
    return torch.softmax(s, -1) @ vf


def make(b, hq, hkv, sq, skv, pad=False, d=128, dv=128):
    g = torch.Generator(device="cuda").manual_seed(b * 1000 + sq)
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, hkv, skv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, hkv, skv, dv, device="cuda", dtype=torch.bfloat16, generator=g)
    mask = None
    if pad:  # left padding: row i masks its first i * skv / (2b) keys
        mask = torch.ones(b, 1, sq, skv, dtype=torch.bool, device="cuda")
        for i in range(b):
            mask[i, :, :, : i * skv // (2 * b)] = False
    return q, k, v, mask


def run_case(name, fn, q, k, v, mask, causal, scale):
    out = torch.full_like(q, float("nan"))  # poisoned: a skipped write shows
    for _ in range(2):
        out = fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ref = reference(q, k, v, mask, causal, scale)
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    return dict(case=name, kernels=classify(names), err=err, finite=bool(torch.isfinite(out).all()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    res = []

    def case(name, b, hq, hkv, sq, skv, causal=False, pad=False, scale=None, gqa=False, wrap=None, d=128,
             dv=128):
        q, k, v, mask = make(b, hq, hkv, sq, skv, pad, d, dv)

        def fn():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                                  enable_gqa=gqa)
        f = wrap(fn) if wrap else fn
        r = run_case(name, f, q, k, v, mask, causal, scale)
        res.append(r)
        print("%-15s kernels %-28s err %.2e" % (name, ",".join(r["kernels"]) or "-", r["err"]), flush=True)

    with torch.inference_mode():
        case("prefill", 1, 32, 32, 2048, 2048, causal=True)
        case("prefill_gqa", 2, 32, 8, 1024, 1024, causal=True, gqa=True)
        case("decode", 8, 32, 8, 1, 4096, gqa=True)
        case("decode_scale", 8, 32, 8, 1, 4096, gqa=True, scale=0.05)
        case("decode_q4", 4, 32, 8, 4, 2048, gqa=True)
        case("decode_mask", 8, 32, 32, 1, 4096, pad=True)
        case("decode_mla", 4, 128, 128, 1, 2048, d=192, dv=128)
        case("decode_mla_mask", 4, 128, 128, 1, 2048, pad=True, d=192, dv=128)
        case("prefill_mask", 2, 32, 32, 1024, 1024, pad=True)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def forced(fn):
            def g():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return fn()
            return g
        case("forced_cudnn", 8, 32, 8, 1, 4096, gqa=True, wrap=forced)
    # torch.compile traces with fake tensors: the choice is made while tracing
    case("compiled", 8, 32, 8, 1, 4096, gqa=True, wrap=lambda fn: torch.compile(fn, fullgraph=True))
    with open(a.json, "w") as f:
        json.dump(dict(torch=torch.__version__, cc=list(torch.cuda.get_device_capability()), cases=res), f,
                  indent=1)


if __name__ == "__main__":
    sys.exit(main())
