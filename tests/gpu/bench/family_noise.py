#!/usr/bin/env python3
"""How far does a family's model move its logits when decode attention changes by rounding-level
noise? The family check (tests/gpu/checks/families.py) judges a shim arm whose tokens differ by
its logit difference against torch's own backends; a model that amplifies tiny differences (an
MoE router choosing among near ties) can read far past that without any kernel being wrong.
This runs the family's model (families.py's config, bf16) greedy, once as is and then with every
decode SDPA output (query length 1) multiplied by (1 + noise * N(0, 1)), and prints per row the
first step where the tokens part and the largest logit difference at that step (the last step
both runs took from the same inputs). Runs on the CPU (no GPU needed) or the GPU.

  python3 tests/gpu/bench/family_noise.py deepseek_v3 [--steps 32] [--prompt 256] [--noise 2**-9,2**-7] [--reps 2]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checks"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("family")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--noise", default="2**-9,2**-7", help="relative noise levels, comma-separated")
    p.add_argument("--reps", type=int, default=2, help="noisy runs per level (new noise each)")
    a = p.parse_args()

    import torch
    import families as F
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    real = torch.nn.functional.scaled_dot_product_attention
    level = [0.0]
    gen = torch.Generator().manual_seed(7)

    def noisy(q, k, v, *args, **kw):
        o = real(q, k, v, *args, **kw)
        if level[0] and q.shape[2] == 1:
            n = torch.randn(o.shape, generator=gen).to(o.device)
            o = (o.float() * (1 + level[0] * n)).to(o.dtype)
        return o

    # transformers' SDPA integration calls it through torch.nn.functional at call time.
    torch.nn.functional.scaled_dot_product_attention = noisy
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(dev):
        m = AutoModelForCausalLM.from_config(F.build_config(a.family), attn_implementation="sdpa",
                                             dtype=torch.bfloat16).eval()
    ids = torch.randint(3, F.VOCAB, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1)).to(dev)

    def run():
        lg = []

        class Keep(LogitsProcessor):
            def __call__(self, input_ids, scores):
                lg.append(torch.nan_to_num(scores.float().cpu(), neginf=0.0))  # EOS masked: -inf in both
                return scores

        with torch.no_grad():
            out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.steps,
                             min_new_tokens=a.steps, do_sample=False, pad_token_id=0,
                             logits_processor=LogitsProcessorList([Keep()]))
        return out[:, a.prompt:].cpu(), torch.stack(lg)

    t0, l0 = run()
    print("family %s on %s: batch %d, prompt %d, %d steps; per row (first step the tokens part, max "
          "logit diff there; '-' never parts, max over all steps)" % (a.family, dev, a.batch, a.prompt, a.steps))
    for lv in a.noise.split(","):
        level[0] = float(eval(lv, {}))  # "2**-9" as written
        for rep in range(a.reps):
            t1, l1 = run()
            rows = []
            for r in range(a.batch):
                fd = next((j for j in range(a.steps) if t0[r, j] != t1[r, j]), None)
                d = (l0[fd, r] - l1[fd, r]) if fd is not None else (l0[:, r] - l1[:, r])
                rows.append("%s:%.3f" % ("-" if fd is None else fd, float(d.abs().max())))
            print("noise %-6s rep %d  %s" % (lv, rep + 1, "  ".join(rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
