#!/usr/bin/env python3
"""Manual torch.cuda.graph capture and replay: temporaries allocated inside
the capture (torch's private graph pool), a second graph sharing that pool,
replays with fresh inputs compared with eager execution of the same ops."""
import torch

from common import digest_tensors, memory, result

torch.manual_seed(0)
dev = "cuda"
w1 = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16) / 64
w2 = torch.randn(4096, 2048, device=dev, dtype=torch.bfloat16) / 64
x = torch.empty(64, 2048, device=dev, dtype=torch.bfloat16)


def f(inp):
    h = torch.nn.functional.gelu(inp @ w1)  # temporaries come from the graph's pool
    return (h @ w2).float().softmax(-1)


def g(inp):
    return (inp.float() * 2).cumsum(-1)


s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):  # warm-up outside capture, as torch's docs ask
        f(x.normal_())
        g(x)
torch.cuda.current_stream().wait_stream(s)

g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
with torch.cuda.graph(g1):
    y1 = f(x)
with torch.cuda.graph(g2, pool=g1.pool()):
    y2 = g(x)

ok, outs = True, []
for i in range(10):
    x.copy_(torch.randn(64, 2048, device=dev, dtype=torch.bfloat16, generator=None))
    g1.replay()
    g2.replay()
    torch.cuda.synchronize()
    e1, e2 = f(x), g(x)
    ok &= bool(torch.equal(y1, e1)) and bool(torch.equal(y2, e2))
    outs += [y1.clone(), y2.clone()]
result(ok, digest=digest_tensors(*outs), replays=10, **memory(torch))
