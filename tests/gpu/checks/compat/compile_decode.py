#!/usr/bin/env python3
"""An explicit torch.compile(mode="reduce-overhead") decode loop (inductor,
CUDA-graph trees): one attention + MLP block over a static KV cache, 32
steps, each step's output fed back; compared with the same steps run eagerly
in the same process."""
import torch
import torch.nn.functional as F

from common import digest_tensors, memory, result

torch.manual_seed(0)
B, H, KVH, S, D, HID = 8, 16, 4, 2048, 128, 2048
dev, dt = "cuda", torch.bfloat16
wq = torch.randn(HID, H * D, device=dev, dtype=dt) / 45
wo = torch.randn(H * D, HID, device=dev, dtype=dt) / 45
w1 = torch.randn(HID, 4 * HID, device=dev, dtype=dt) / 45
w2 = torch.randn(4 * HID, HID, device=dev, dtype=dt) / 90
k = torch.randn(B, KVH, S, D, device=dev, dtype=dt)
v = torch.randn(B, KVH, S, D, device=dev, dtype=dt)


def step(x):
    q = (x @ wq).view(B, 1, H, D).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    h = x + a.transpose(1, 2).reshape(B, 1, H * D) @ wo
    return F.layer_norm(h + F.silu(h @ w1) @ w2, (HID,))


def run(fn, n=32):
    x = torch.randn(B, 1, HID, device=dev, dtype=dt, generator=torch.Generator(dev).manual_seed(1))
    outs = []
    for _ in range(n):
        x = fn(x).clone()  # clone: a graph tree's output is overwritten by the next replay
        outs.append(x)
    torch.cuda.synchronize()
    return outs


with torch.inference_mode():
    eager = run(step)
    compiled = torch.compile(step, mode="reduce-overhead")
    run(compiled, 3)  # compile, record
    got = run(compiled)
err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(got, eager))
result(err < 5e-2, max_rel_err_vs_eager=err, digest=digest_tensors(*got), **memory(torch))
