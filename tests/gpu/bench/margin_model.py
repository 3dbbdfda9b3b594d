#!/usr/bin/env python3
"""A model with real margins for issue 17's token comparison (tests/gpu/bench/masked_e2e.sh, stage
margin). examples/generate.py's random-weight Llama has near-ties between its top logits at most
steps: any change of summation order (torch's math and cuDNN backends against its mem-efficient
one, as much as Ponytail's kernel) flips some of them, so "identical tokens" cannot be asked of
it. A trained model has margins; nothing can be downloaded, so this trains one, briefly.

The model is generate.py's (same settings, same names: its state dict loads with --weights), and
its language makes attention decide every token: over LANG ids (3 .. 3 + LANG), token t is
perm(token t - 2) for a fixed random permutation perm, except with probability NOISE a random id.
The token just before says nothing about the next one; the model has to look one position back
through attention and map what it finds. Prompts in that language's ids (generate.py
--prompt-vocab LANG) are random, the rule's continuation is not: greedy decoding follows it.

Trained in fp32 with bf16 autocast, AdamW, until the rule's token is the argmax at TARGET of the
positions where the rule held (or STEPS steps); writes the state dict (fp32) and a JSON summary.

  python3 tests/gpu/bench/margin_model.py --out model.pt [--json train.json]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import generate  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="state dict written here (torch.save)")
    ap.add_argument("--json", help="training summary written here")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lang", type=int, default=1000, help="ids of the language")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--target", type=float, default=0.995)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


def main():
    a = parse_args()
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda", torch.cuda.current_device())
    s = dict(generate.DEFAULTS, dtype="fp32")
    if not 1 <= a.lang <= s["vocab"] - 3:
        sys.exit("--lang must be within 1..%d" % (s["vocab"] - 3))
    model = generate.make_model(torch, s, {}, dev, a.seq)
    model.train()
    g = torch.Generator(device=dev).manual_seed(a.seed + 7)
    perm = torch.randperm(a.lang, generator=g, device=dev) + 3  # perm[i - 3]: the rule's successor of id i

    def sample():
        x = torch.randint(3, 3 + a.lang, (a.batch, a.seq), generator=g, device=dev)
        keep = torch.rand((a.batch, a.seq), generator=g, device=dev) >= a.noise
        for t in range(2, a.seq):  # sequential: a kept token follows the one the rule made before it
            x[:, t] = torch.where(keep[:, t], perm[x[:, t - 2] - 3], x[:, t])
        return x, keep

    def rule_argmax(pred, x, keep):
        """Share of the positions where the rule held (t >= 2) whose argmax is the rule's token."""
        ok = keep[:, 2:]
        return ((pred.argmax(-1) == x[:, 2:]) & ok).sum().item() / max(1, ok.sum().item())

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warm = 20
    hist, t0, hit = [], time.time(), 0
    for step in range(a.steps):
        for grp in opt.param_groups:
            grp["lr"] = a.lr * min(1.0, (step + 1) / warm)
        x, keep = sample()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        pred = logits[:, 1:-1]  # position t - 1 predicts token t, t >= 2
        loss = F.cross_entropy(pred.float().reshape(-1, pred.shape[-1]), x[:, 2:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            acc = rule_argmax(pred, x, keep)
        hist.append((step, loss.item(), acc))
        if step % 25 == 0 or acc >= a.target:
            print("step %d loss %.3f rule-argmax %.4f (%.0f s)" % (step, loss.item(), acc, time.time() - t0),
                  flush=True)
        hit = hit + 1 if acc >= a.target else 0
        if hit >= 3:
            break
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        x, keep = sample()
        lp = model(input_ids=x).logits[:, 1:-1].float()
        top = lp.topk(2, dim=-1).values
        margin = (top[..., 0] - top[..., 1])[keep[:, 2:]]
        acc = rule_argmax(lp, x, keep)
    torch.save({k: v.detach() for k, v in model.state_dict().items()}, a.out)
    res = dict(steps=len(hist), seconds=time.time() - t0, loss=hist[-1][1], train_rule_argmax=hist[-1][2],
               heldout_rule_argmax=acc, heldout_margin_p01=margin.quantile(0.01).item(),
               heldout_margin_median=margin.median().item(), lang=a.lang, noise=a.noise, seq=a.seq,
               batch=a.batch, lr=a.lr)
    print("trained: %s" % json.dumps(res), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
    return 0 if acc >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
