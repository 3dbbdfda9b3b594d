#!/usr/bin/env python3
"""Decode attention inside vLLM: its FlashAttention-3 launch on its paged KV cache against
Ponytail's decode kernel on the same bytes (contiguous, the layout Ponytail swaps in Hugging Face
runs) and the HBM floor, at B in {1, 8, 32} x KV in {1k, 8k, 32k} (8 KV heads, 4 query heads
each, head_dim 128, bf16): the question is whether a swap inside vLLM has anything to take.

FA3 is called as vLLM 0.26's FLASH_ATTN backend calls it for decode (flash_attn_varlen_func:
one query token per sequence, causal, block_table over 16-token pages in a shuffled order,
seqused_k), two ways: as captured in vLLM's full CUDA graphs (scheduler metadata computed ahead
by get_scheduler_metadata, at most 32 splits: vLLM's defaults) and with FA3's own split
heuristic (num_splits=0, eager). Each kernel is first checked against an fp32 reference on fresh
random inputs with its output poisoned (NaN), then timed by CUDA-graph replay (20 calls a graph,
median of 9 replays), rotating input copies so that nothing is served from L2. Floor: K+V bytes
at the read bandwidth torch's read-only sum reaches on this card in the same run.

  fa3_decode.py --lib build-gpu/serving/libattn_test.so [--out DIR]
"""
import argparse
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checks"))
from attn_check import Lib, bandwidth, graph_time, padded_args  # noqa: E402

HK, G, D, PAGE = 8, 4, 128, 16
TOL = 1e-2


def reference(q, k, v):
    """q [B, H, D], k/v [B, Hk, S, D] -> fp32 [B, H, D] (query head h reads KV head h // G)."""
    B, H, _ = q.shape
    qf = q.float().view(B, HK, G, D)
    s = torch.einsum("bkgd,bksd->bkgs", qf, k.float()) / math.sqrt(D)
    return torch.einsum("bkgs,bksd->bkgd", torch.softmax(s, -1), v.float()).reshape(B, H, D)


def rel(x, ref):
    x = x.float()
    if torch.isnan(x).any():
        return float("inf")
    return ((x - ref).abs().max() / ref.abs().max()).item()


class Point:
    """One input set: q, the paged cache (vLLM's NHD layout, K and V side by side in the last
    dimension) and the same keys and values contiguous for Ponytail."""

    def __init__(self, B, S, gen):
        H = HK * G
        nb = B * S // PAGE
        self.q = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.kv = torch.randn(nb, PAGE, HK, 2 * D, device="cuda", dtype=torch.bfloat16, generator=gen)
        perm = torch.randperm(nb, device="cuda", generator=gen).to(torch.int32)
        self.table = perm.view(B, S // PAGE).contiguous()
        self.k_cache, self.v_cache = self.kv[..., :D], self.kv[..., D:]
        # contiguous [B, Hk, S, D] copies, sequence by sequence in block-table order
        pages = self.kv[self.table.long()]  # [B, S/PAGE, PAGE, Hk, 2D]
        seq = pages.reshape(B, S, HK, 2 * D).permute(0, 2, 1, 3)
        self.k = seq[..., :D].contiguous()
        self.v = seq[..., D:].contiguous()
        del pages, seq
        self.out = torch.empty(B, H, D, device="cuda", dtype=torch.bfloat16)
        self.o4 = torch.empty(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
        self.lse = torch.empty(B, H, 1, device="cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--points", default="1:1024,1:8192,1:32768,8:1024,8:8192,8:32768,32:1024,32:8192,32:32768")
    a = ap.parse_args()
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata
    lib = Lib(a.lib)
    rows = ["%s, torch %s" % (torch.cuda.get_device_name(), torch.__version__)]
    read_bw = bandwidth(rows)  # bytes/s of a read-only sum
    hdr = "%3s %6s %8s | %9s %5s | %9s %5s | %9s %5s | %s" % (
        "B", "KV", "floor us", "fa3 graph", "xfl", "fa3 heur", "xfl", "ponytail", "xfl", "errors (fa3 g/h, pt)")
    rows.append(hdr)
    print(hdr, flush=True)
    failures = 0
    for spec in a.points.split(","):
        B, S = map(int, spec.split(":"))
        H = HK * G
        kv_bytes = 2 * B * HK * S * D * 2
        floor = kv_bytes / read_bw * 1e6
        nsets = max(1, min(16, math.ceil((512 << 20) / kv_bytes)))
        gen = torch.Generator(device="cuda").manual_seed(B * 100003 + S)
        sets = [Point(B, S, gen) for _ in range(nsets)]
        cu_q = torch.arange(B + 1, device="cuda", dtype=torch.int32)
        seqused = torch.full((B,), S, device="cuda", dtype=torch.int32)
        meta = get_scheduler_metadata(batch_size=B, max_seqlen_q=1, max_seqlen_k=S, num_heads_q=H,
                                      num_heads_kv=HK, headdim=D, cache_seqlens=seqused,
                                      qkv_dtype=torch.bfloat16, cu_seqlens_q=cu_q, page_size=PAGE,
                                      causal=True, num_splits=32)

        def fa3(p, graph_mode):
            flash_attn_varlen_func(q=p.q, k=p.k_cache, v=p.v_cache, out=p.out, cu_seqlens_q=cu_q,
                                   max_seqlen_q=1, seqused_k=seqused, max_seqlen_k=S,
                                   softmax_scale=1.0 / math.sqrt(D), causal=True,
                                   block_table=p.table, fa_version=3,
                                   scheduler_metadata=meta if graph_mode else None,
                                   num_splits=32 if graph_mode else 0)

        args = [padded_args(lib, p.q.unsqueeze(2), p.k, p.v, p.o4, p.lse) for p in sets]
        # correctness on a fresh set (the last), outputs poisoned first
        p = sets[-1]
        ref = reference(p.q, p.k, p.v)
        errs = []
        for mode in (True, False):
            p.out.fill_(float("nan"))
            fa3(p, mode)
            torch.cuda.synchronize()
            errs.append(rel(p.out, ref))
        p.o4.fill_(float("nan"))
        lib.decode(args[-1])
        torch.cuda.synchronize()
        errs.append(rel(p.o4[:, 0], ref))
        bad = [e for e in errs if not e <= TOL]
        failures += len(bad)
        t_g = graph_time(lambda i: fa3(sets[i % nsets], True))
        t_h = graph_time(lambda i: fa3(sets[i % nsets], False))
        t_p = graph_time(lambda i: lib.decode(args[i % nsets]))
        row = "%3d %6d %8.1f | %9.1f %5.2f | %9.1f %5.2f | %9.1f %5.2f | %s" % (
            B, S, floor, t_g, t_g / floor, t_h, t_h / floor, t_p, t_p / floor,
            " ".join("%.1e" % e for e in errs) + ("  FAIL" if bad else ""))
        rows.append(row)
        print(row, flush=True)
        del sets, args, ref
        torch.cuda.empty_cache()
    rows.append("fa3_decode: %d failures" % failures)
    text = "\n".join(rows) + "\n"
    if a.out:
        with open(os.path.join(a.out, "fa3_decode.txt"), "w") as f:
            f.write(text)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
