#!/usr/bin/env python3
"""Why does an arm on stock's attention path give other tokens than stock? Runs
examples/generate.py once per arm, in order, each saving every step's logits, and compares each
arm with the first one bit for bit and by size.

  python3 tests/gpu/checks/same_path.py --out DIR --arm stock --arm aa \\
      --arm same:shim=build-gpu/shim/libponytail_shim.so:PONYTAIL_TORCH_SDPA=keep:PONYTAIL_ATTN=off \\
      [--row hf_eager|hf_padded|hf_static] [--steps N]

An arm is NAME[:shim=PATH][:ref=ARM][:VAR=VALUE ...]: with shim=PATH the run preloads that
library (an older build, say, for a bisection); the VAR=VALUE pairs are added to its
environment; ref=ARM names the earlier arm it is compared with (default: the first arm). Arms
on torch's flash path (TORCH_CUDNN_SDPA_DEPRIORITIZED=1 stock, PONYTAIL_TORCH_SDPA=flash under
the shim) are compared with a stock flash arm: HF generate on the cuDNN path is not
deterministic between two stock processes (bench/records/2026-12-01-compatibility.md). The matrix (compat_matrix.py) only says "differs"; this says where:
the first step whose logits are not bit-identical, how far apart they are there (max |X - A|
over max |A|), how many sequences still give stock's tokens, and at each sequence's first
different token how far stock's choice led the other arm's (a near tie when that gap is
small: a last-bit difference flips it; a wrong result is far from any tie).

Prints one line per arm and the table last; writes DIR/same_path.json. Exit 0 when it ran
(its verdict is the table: a diagnosis, not a pass/fail check), 1 when an arm failed to run.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # HERE is tests/gpu/checks
GEN = os.path.join(ROOT, "examples", "generate.py")
sys.path.insert(0, os.path.join(ROOT, "examples"))
from verdict import first_divergence  # noqa: E402  (per sequence, as `ponytail bench` compares them)
HF = ["--batch", "8", "--prompt", "2048", "--new-tokens", "128", "--warmup"]
ROWS = {"hf_eager": HF, "hf_padded": HF + ["--pad", "0.5"], "hf_static": HF + ["--cache", "static"]}


def parse_arm(spec):
    """'name:shim=PATH:ref=ARM:VAR=VALUE' -> (name, shim path or None, ref arm or None,
    {VAR: VALUE}). ValueError on a piece without '=' or an empty name."""
    parts = spec.split(":")
    name, shim, ref, env = parts[0], None, None, {}
    if not name:
        raise ValueError("arm %r: empty name" % spec)
    for p in parts[1:]:
        k, eq, v = p.partition("=")
        if not eq or not k:
            raise ValueError("arm %r: %r is not VAR=VALUE" % (spec, p))
        if k == "shim":
            shim = v
        elif k == "ref":
            ref = v
        else:
            env[k] = v
    return name, shim, ref, env


def compare(ref, x):
    """ref, x: {"logits": [[batch, vocab] tensors], "token_ids": [[ids]]}. The comparison of x
    with ref (see the module doc): identical sequences, the first step whose logits differ in
    any bit among the rows both runs fed alike, the relative size there, and each differing
    sequence's stock lead at its first different token."""
    import torch
    div = first_divergence(ref["token_ids"], x["token_ids"])
    first_bits, rel_at = None, None
    for t, (a, b) in enumerate(zip(ref["logits"], x["logits"])):
        rows = [i for i, d in enumerate(div) if d is None or d >= t]  # fed the same tokens so far
        if not rows:
            break
        a, b = a[rows], b[rows]
        if not torch.equal(a, b):
            first_bits = t
            rel_at = float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))
            break
    leads = []
    for i, d in enumerate(div):
        if d is None or d >= len(ref["logits"]):
            continue
        row = ref["logits"][d][i]
        leads.append(round(float(row[ref["token_ids"][i][d]] - row[x["token_ids"][i][d]]), 5))
    return dict(identical=sum(d is None for d in div), seqs=len(div),
                first_token_step=min([d for d in div if d is not None], default=None),
                first_logit_step=first_bits, rel_diff=rel_at, leads=leads)


def run_arm(name, shim, env_add, args, idx):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = os.path.abspath(shim)
        env.setdefault("PONYTAIL_STATS", "json")
        env["PONYTAIL_STATS_FILE"] = os.path.join(args.out, "%d-%s.stats.%%p.json" % (idx, name))
    env.update(env_add)
    pt = os.path.join(args.out, "%d-%s.pt" % (idx, name))
    js = os.path.join(args.out, "%d-%s.json" % (idx, name))
    cmd = [sys.executable, GEN] + ROWS[args.row] + ["--logits-out", pt, "--logits-steps", str(args.steps),
                                                    "--json", js]
    t0 = time.time()
    with open(os.path.join(args.out, "%d-%s.log" % (idx, name)), "w") as log:
        rc = subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
    rec = dict(arm=name, shim=shim, env=env_add, rc=rc, seconds=round(time.time() - t0, 1), pt=pt)
    if rc == 0:
        rec["digest"] = json.load(open(js)).get("token_ids_sha256")
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arm", action="append", required=True, help="NAME[:shim=PATH][:VAR=VALUE...]")
    ap.add_argument("--row", choices=sorted(ROWS), default="hf_eager")
    ap.add_argument("--steps", type=int, default=128, help="steps whose logits are saved and compared")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--deadline", type=float, default=0, help="seconds: start no arm after this")
    args = ap.parse_args(argv)
    try:
        arms = [parse_arm(a) for a in args.arm]
    except ValueError as e:
        ap.error(str(e))
    names = [a[0] for a in arms]
    for i, (name, _, ref, _) in enumerate(arms):
        if names.count(name) > 1:
            ap.error("arm %r named twice" % name)
        if ref is not None and ref not in names[:i]:
            ap.error("arm %r: ref %r is not an earlier arm" % (name, ref))
    os.makedirs(args.out, exist_ok=True)
    t_start, recs = time.time(), []
    for idx, (name, shim, ref, env) in enumerate(arms):
        if args.deadline and time.time() - t_start > args.deadline:
            recs.append(dict(arm=name, ref=ref or names[0], rc="not run (deadline)"))
            continue
        rec = run_arm(name, shim, env, args, idx)
        rec["ref"] = ref or names[0] if idx else None
        recs.append(rec)
        print("%-14s rc %s %6.1f s digest %s" % (name, rec["rc"], rec["seconds"], rec.get("digest")), flush=True)
    import torch
    by = {r["arm"]: r for r in recs}
    loaded = {}

    def logits(name):
        if name not in loaded:
            loaded[name] = torch.load(by[name]["pt"])
        return loaded[name]

    for rec in recs:
        if rec.get("rc") != 0:
            continue
        if rec.get("ref") is None:
            rec["cmp"] = "reference"
        elif by.get(rec["ref"], {}).get("rc") != 0:
            rec["cmp"] = "its reference %s did not run" % rec["ref"]
        else:
            rec["cmp"] = compare(logits(rec["ref"]), logits(rec["arm"]))
    for rec in recs:
        if rec.get("pt") and os.path.exists(rec["pt"]):
            os.remove(rec["pt"])  # 100+ MiB each
    json.dump(dict(row=args.row, steps=args.steps, arms=recs), open(os.path.join(args.out, "same_path.json"), "w"),
              indent=1)
    print("\nsame_path (%s, %d steps): each arm against its reference" % (args.row, args.steps))
    print("%-14s %-14s %-16s %9s %10s %10s %9s  %s" % ("arm", "reference", "digest", "identical", "1st token",
                                                        "1st logit", "rel diff", "reference's lead at each first differing token"))
    for rec in recs:
        c = rec.get("cmp")
        if not isinstance(c, dict):
            print("%-14s %-14s %-16s %s" % (rec["arm"], rec.get("ref") or "-", (rec.get("digest") or "")[:16],
                                             c or "rc %s" % rec.get("rc")))
            continue
        print("%-14s %-14s %-16s %5d/%-3d %10s %10s %9s  %s" % (
            rec["arm"], rec["ref"], (rec.get("digest") or "")[:16], c["identical"], c["seqs"], c["first_token_step"],
            c["first_logit_step"], "-" if c["rel_diff"] is None else "%.2e" % c["rel_diff"],
            " ".join("%g" % v for v in c["leads"]) or "-"))
    return 1 if any(r.get("rc") not in (0,) for r in recs) else 0


if __name__ == "__main__":
    sys.exit(main())
