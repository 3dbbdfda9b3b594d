#!/usr/bin/env python3
"""Decode attention inside a real torch CUDA-graph capture (issue 4: "everything must
also work while the stream is being captured into a CUDA graph").

Runs with or without the Ponytail shim preloaded (tests/gpu/checks/attn_graph.sh runs both).
Every case uses torch's flash SDPA (sdpa_kernel(FLASH_ATTENTION)) on decode-shaped
bf16 inputs: q [B, 16, 1, 128], k/v [B, 4, S, 128], enable_gqa=True, held in static
tensors (--head-dim 80 or 96, Phi's and Phi-3's head dims, which the decode kernel runs
padded on its d = 128 layout: those in place of 128; --head-dim 192 --v-head-dim 128, MLA as
Hugging Face's DeepSeek-V3 calls SDPA, which flash cannot take: then every case runs torch's
mem-efficient SDPA, K/V expanded to the 16 query heads, v and O 128 wide, and the decode kernel
its padded d = 256 layout). As the torch docs require, each case
first runs the call eagerly on a new side stream, then captures it with torch.cuda.graph. Then for 3 rounds: fresh random
values are copied into the static inputs, the graph is replayed, and the graph's
output is compared with an fp32 reference (matmul + softmax, TF32 off):
max|o - ref| / max|ref| <= 1e-2, and it must differ from the previous round's output
(a replay that did not run, or ran on stale inputs, fails).

Cases:
  b8_s4100, b1_s1000, b32_s2048   one graph each, captured on torch's capture stream
  fresh_stream                    captured on a torch.cuda.Stream() that is used for
                                  nothing else: the shim sees it first while capturing
  two_graphs                      B=8 S=4100 and B=32 S=2048 in two graphs, replayed
                                  back to back before one synchronize
  masked_b8_s4100, masked_b2_s1000  masked decode (issue 17) as Hugging Face runs it with
                                  left-padded prompts: K/V expanded to the 16 query heads
                                  (repeat_kv), a boolean padding mask [B, 1, 1, S] in a static
                                  tensor, torch's mem-efficient SDPA (the path a mask takes).
                                  Every round draws new padding lengths (0-75% of the keys per
                                  row) into the static mask, so a replay that read a stale mask
                                  fails the reference. Swapped unless PONYTAIL_ATTN_MASKED=0.
  masked_b1_s4096                 the same at B=1, 4096 keys: a cluster of 8-tile splits by
                                  the unmasked plan, the workspace plan by the masked short-split
                                  rule (kernels/attn_plan.c), so the captured launch needs the
                                  workspace its eager warm-up left.

For each graph the kernels it holds are read from torch's debug dump (DOT text of
cudaGraphDebugDotPrint): "ponytail" counts pt_attn_decode_* nodes (Ponytail's kernel
was captured), "flash" counts torch's flash_fwd* nodes and "mem_eff" its fmha_cutlassF*
nodes (it fell back, or no shim).
Prints PASS/FAIL per case; exit 1 on any failure. --json writes the details, including
the eager and captured SDPA call counts (what the shim's launch counters should add up to).
"""
import argparse
import json
import math
import os
import sys
import tempfile
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, HKV, D = 16, 4, 128
DV = None  # v's head size (--v-head-dim); None: D
TOL = 1e-2
ROUNDS = 3
WARMUP = 3  # eager calls per problem before its capture

CASES = ["b8_s4100", "b1_s1000", "b32_s2048", "fresh_stream", "two_graphs", "masked_b8_s4100",
         "masked_b2_s1000", "masked_b1_s4096"]
calls = dict(eager=0, captured=0)


class Problem:
    """Static decode-attention inputs and the SDPA call on them. masked: K/V expanded to the
    query heads and a boolean left-padding mask, on torch's mem-efficient kernel (HF's padded
    decode); else GQA K/V without a mask on torch's flash kernel."""

    def __init__(self, b, s, masked=False):
        self.b, self.s, self.masked = b, s, masked
        # v's head size unlike q's (MLA): torch's mem-efficient kernel, mask or not
        self.mem_eff = masked or (DV or D) != D
        dev, dt = "cuda", torch.bfloat16
        hkv = H if self.mem_eff else HKV
        self.q = torch.empty(b, H, 1, D, device=dev, dtype=dt)
        self.k = torch.empty(b, hkv, s, D, device=dev, dtype=dt)
        self.v = torch.empty(b, hkv, s, DV or D, device=dev, dtype=dt)
        self.mask = torch.ones(b, 1, 1, s, device=dev, dtype=torch.bool) if masked else None
        self.fill()

    def fill(self):
        """Fresh random values into the static tensors (copy_: addresses unchanged); masked:
        new padding lengths too, the first row always unpadded."""
        for t in (self.q, self.k, self.v):
            t.copy_(torch.randn(t.shape, device=t.device, dtype=t.dtype))
        if self.masked:
            pad = [0] + [int(x) for x in torch.randint(0, 3 * self.s // 4 + 1, (self.b - 1,))]
            keep = torch.arange(self.s).unsqueeze(0) >= torch.tensor(pad).unsqueeze(1)
            self.mask.copy_(keep.view(self.b, 1, 1, self.s))

    def call(self, captured):
        calls["captured" if captured else "eager"] += 1
        if self.mem_eff:
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return F.scaled_dot_product_attention(self.q, self.k, self.v, attn_mask=self.mask)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(self.q, self.k, self.v, enable_gqa=True)

    def reference(self):
        """fp32 attention; query head h reads KV head h // (H / HKV), as enable_gqa does;
        masked keys get -inf."""
        g = H // self.k.shape[1]
        hkv = self.k.shape[1]
        qf = self.q.float().reshape(self.b, hkv, g, D)
        s = torch.einsum("bhgd,bhsd->bhgs", qf, self.k.float()) / math.sqrt(D)
        if self.masked:
            s = s.masked_fill(~self.mask.view(self.b, 1, 1, self.s), float("-inf"))
        p = torch.softmax(s, dim=-1)
        return torch.einsum("bhgs,bhsd->bhgd", p, self.v.float()).reshape(self.b, H, 1, self.v.shape[3])

    def label(self):
        return "B=%d S=%d%s%s" % (self.b, self.s, " masked" if self.masked else "",
                                  " mem-eff" if self.mem_eff and not self.masked else "")


def rel_err(o, ref):
    den = ref.abs().max().item()
    e = (o.float() - ref).abs().max().item()
    if math.isnan(e) or math.isnan(den) or math.isinf(e):
        return float("inf")
    return e / max(den, 1e-30)


def warmup(problems):
    """Eager calls on a new side stream (torch's documented warm-up before capture).
    A new stream each time also makes the shim set a workspace aside for the next
    stream it first meets inside a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            for p in problems:
                p.call(False)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def graph_kernels(g, tmpdir, tag):
    """Kernel nodes in the captured graph, from its DOT dump; None if unavailable."""
    path = os.path.join(tmpdir, "%s.dot" % tag)
    try:
        g.debug_dump(path)
        with open(path, errors="replace") as f:
            text = f.read()
    except Exception as e:  # no debug dump in this torch: the stats still tell
        print("  (no graph dump for %s: %s)" % (tag, e))
        return None
    finally:
        if os.path.exists(path):
            os.unlink(path)
    lines = text.splitlines()
    return dict(ponytail=sum("pt_attn_decode" in l for l in lines),
                flash=sum("flash_fwd" in l for l in lines),
                mem_eff=sum("fmha_cutlassF" in l for l in lines),
                kernel_nodes=sum("KERNEL" in l for l in lines))


def capture(problems, tmpdir, tag, stream=None):
    """One graph holding one SDPA call per problem; returns (graph, outputs, kernels)."""
    g = torch.cuda.CUDAGraph()
    try:
        g.enable_debug_mode()  # keeps the cudaGraph_t so that debug_dump can print it
    except Exception:
        pass
    with torch.cuda.graph(g, stream=stream):
        outs = [p.call(True) for p in problems]
    return g, outs, graph_kernels(g, tmpdir, tag)


def run_rounds(graphs, problems_per_graph):
    """ROUNDS x (fill every static input, replay every graph back to back, sync,
    compare each output with its reference). Returns (errors, changed) per problem."""
    errs, changed, prev = [], [], {}
    flat = [(gi, pi, p) for gi, ps in enumerate(problems_per_graph) for pi, p in enumerate(ps)]
    for _ in flat:
        errs.append([])
        changed.append([])
    for r in range(ROUNDS):
        for _, _, p in flat:
            p.fill()
        for g, _ in graphs:
            g.replay()
        torch.cuda.synchronize()
        for i, (gi, pi, p) in enumerate(flat):
            o = graphs[gi][1][pi]
            errs[i].append(rel_err(o, p.reference()))
            if i in prev:
                changed[i].append((o.float() - prev[i]).abs().max().item() > 0)
            prev[i] = o.float().clone()
    return [p for _, _, p in flat], errs, changed


def run_case(name, tmpdir):
    torch.manual_seed(1 + (CASES.index(name) if name in CASES else 99))  # str hash() varies per process
    stream = None
    if name in ("b8_s4100", "fresh_stream"):
        groups = [[Problem(8, 4100)]]
    elif name == "b1_s1000":
        groups = [[Problem(1, 1000)]]
    elif name == "b32_s2048":
        groups = [[Problem(32, 2048)]]
    elif name == "two_graphs":
        groups = [[Problem(8, 4100)], [Problem(32, 2048)]]
    elif name == "masked_b8_s4100":
        groups = [[Problem(8, 4100, masked=True)]]
    elif name == "masked_b2_s1000":
        groups = [[Problem(2, 1000, masked=True)]]
    elif name == "masked_b1_s4096":
        groups = [[Problem(1, 4096, masked=True)]]
    else:
        raise ValueError("unknown case %s" % name)
    warmup([p for ps in groups for p in ps])
    if name == "fresh_stream":
        stream = torch.cuda.Stream()  # used only inside the capture below
    graphs, kernels = [], []
    for gi, ps in enumerate(groups):
        g, outs, k = capture(ps, tmpdir, "%s-%d" % (name, gi), stream=stream)
        graphs.append((g, outs))
        kernels.append(k)
    problems, errs, changed = run_rounds(graphs, groups)
    ok = all(e <= TOL for es in errs for e in es) and all(all(c) for c in changed)
    return dict(name=name, ok=ok, problems=[p.label() for p in problems], rel_err=errs,
                changed=changed, graph_kernels=kernels)


def main():
    global D, DV
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--json", help="write the per-case details here")
    ap.add_argument("--head-dim", type=int, default=D, help="head dim of every case (default %d)" % D)
    ap.add_argument("--v-head-dim", type=int, default=None,
                    help="v's head dim when it differs (MLA: 128 with --head-dim 192; mem-efficient SDPA)")
    args = ap.parse_args()
    D, DV = args.head_dim, args.v_head_dim
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shim = "ponytail" in os.environ.get("LD_PRELOAD", "")
    print("attn_graph: torch %s, %s, %s, head dim %d%s" % (
        torch.__version__, torch.cuda.get_device_name(), "under the Ponytail shim" if shim else "no shim", D,
        ", v %d" % DV if DV and DV != D else ""))
    results = []
    with tempfile.TemporaryDirectory() as tmpdir, torch.no_grad():
        for name in [c for c in args.cases.split(",") if c]:
            try:
                r = run_case(name, tmpdir)
            except Exception as e:
                traceback.print_exc()
                r = dict(name=name, ok=False, error="%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300]
                                                               if str(e) else ""))
            results.append(r)
            if "error" in r:
                print("FAIL %-13s %s" % (name, r["error"]))
                continue
            for i, label in enumerate(r["problems"]):
                k = r["graph_kernels"][min(i, len(r["graph_kernels"]) - 1)]
                ks = ("graph: ponytail %d, flash %d, mem-eff %d (kernel nodes %d)" % (
                    k["ponytail"], k["flash"], k["mem_eff"], k["kernel_nodes"]) if k else "graph: n/a")
                print("%s %-13s %-12s rel err %s (tol %.0e), changed between rounds %s, %s" % (
                    "PASS" if r["ok"] else "FAIL", name, label,
                    " ".join("%.1e" % e for e in r["rel_err"][i]), TOL,
                    "yes" if all(r["changed"][i]) else "NO", ks))
    failed = [r["name"] for r in results if not r["ok"]]
    print("attn_graph: %d case(s), %d failed%s; SDPA calls: %d eager, %d captured" % (
        len(results), len(failed), (" (" + ", ".join(failed) + ")") if failed else "",
        calls["eager"], calls["captured"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(shim=shim, torch=torch.__version__, cases=results, calls=calls), f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
