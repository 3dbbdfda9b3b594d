#!/usr/bin/env python3
"""The process that tests/gpu/checks/sleep_wake.py puts to sleep (run under the shim).

Builds workload W's model (random weights, examples/llama-1b-config.json, bf16), then records
what must survive a sleep: greedy tokens (B=8, prompt 512, 32 new tokens), a torch.cuda.graph
captured on pooled memory (its output for a fixed input), optionally an HF static-cache run
(transformers compiles it into CUDA graphs), and EXTRA_GIB of pooled memory with a pattern.
Then it prints one JSON line ("ready") and waits for commands on stdin, one per line:

  check    run everything again and compare: tokens, graph replay, static-cache tokens, pattern
  quit     exit

Each command answers one JSON line on stdout. With --hold-gib N only N GiB are allocated with a
pattern (for the 10 GiB timings and --discard: nothing else); its commands are verify (the
pattern is intact), check (the memory is usable: adds 1 to it) and quit.
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "..", "..", "..", "examples", "llama-1b-config.json")


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def pattern(t, key):
    """Fills an int64 tensor with a function of its index and key, on the GPU."""
    n = t.numel()
    torch.arange(n, device="cuda", dtype=torch.int64, out=t.view(-1))
    t.view(-1).mul_(6364136223846793005).add_(key)


def pattern_ok(t, key):
    ref = torch.empty_like(t)
    pattern(ref, key)
    ok = bool(torch.equal(ref, t))
    del ref
    # The reference's 10 GiB would stay in torch's cache as pooled memory, and every later sleep
    # would move it too (not comparable with the first one's bytes).
    torch.cuda.empty_cache()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra-gib", type=float, default=10.0)
    ap.add_argument("--hold-gib", type=float, default=0.0)
    ap.add_argument("--static", action="store_true", help="also an HF static-cache run (compiled)")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.hold_gib:
        hold = torch.empty(int(a.hold_gib * (1 << 30)) // 8, dtype=torch.int64, device="cuda")
        pattern(hold, 5)
        torch.cuda.synchronize()
        say({"ready": True, "pid": os.getpid(), "reserved": torch.cuda.memory_reserved()})
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            if line.strip() == "verify":  # the bytes came back (a wake after a sleep that kept them)
                say({"intact": pattern_ok(hold, 5)})
                torch.cuda.empty_cache()
            if line.strip() == "check":
                hold.add_(1)  # usable after the wake (its contents were dropped)
                torch.cuda.synchronize()
                say({"checked": True})
        return 0

    from transformers import LlamaConfig, LlamaForCausalLM
    with open(CFG) as f:
        cfg = {k: v for k, v in json.load(f).items() if k not in ("architectures", "torch_dtype", "dtype")}
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 32000, (8, 512), generator=g).cuda()

    def gen(**kw):
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32,
                                 do_sample=False, pad_token_id=0, **kw)
        return out[:, ids.shape[1]:].tolist()

    tokens = gen()
    # A graph captured on pooled memory: static input, weights and output.
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    y = torch.empty(4096, 4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.matmul(x, w, out=y).relu_()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.matmul(x, w, out=y).relu_()
    graph.replay()
    torch.cuda.synchronize()
    y_ref = y.cpu()
    static = gen(cache_implementation="static") if a.static else None
    extra = None
    if a.extra_gib:
        extra = torch.empty(int(a.extra_gib * (1 << 30)) // 8, dtype=torch.int64, device="cuda")
        pattern(extra, 7)
    torch.cuda.synchronize()
    say({"ready": True, "pid": os.getpid(), "reserved": torch.cuda.memory_reserved(),
         "allocated": torch.cuda.memory_allocated()})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd != "check":
            say({"error": "unknown command " + cmd})
            continue
        t0 = time.time()
        res = {"tokens_same": gen() == tokens}
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        res["graph_same"] = bool(torch.equal(y.cpu(), y_ref))
        if a.static:
            res["static_same"] = gen(cache_implementation="static") == static
        if extra is not None:
            res["pattern_same"] = pattern_ok(extra, 7)
        res["check_s"] = round(time.time() - t0, 2)
        say(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
