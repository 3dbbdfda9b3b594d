#!/usr/bin/env python3
"""The correctness verdict of `ponytail bench`: logits of B (with the shim) against A (stock), next
to PyTorch's own backend spread (R: stock with another SDPA backend, against A).

  python3 examples/verdict.py A.pt B.pt [R.pt] [--same S.pt] [--margin F] [--steps N] [--json]

Each .pt is what `generate.py --logits-out FILE --logits-steps N` saves: {"logits": [one
[batch, vocab] tensor per decode step], "token_ids": [[generated ids] per sequence], ...}.
Prints the verdict lines, or with --json one JSON object (strict JSON: a non-finite number is
null). Exit status 0 (within, or no reference arm), 3 (OUTSIDE), 4 (NaN/Inf in the logits),
1 (the files cannot be read).

Definitions (steps t = 0 .. N-1, one per generated token; step 0's logits come from the prefill):
  * rows compared: sequence i at step t when X and A generated the same tokens before step t
    (afterwards the two runs feed different tokens and their logits are no longer comparable);
  * max rel diff at t = max |X - A| / max |A|, mean rel diff at t = sum |X - A| / sum |A|,
    over the compared rows; overall: the largest max, and sum |X - A| / sum |A| over all steps;
  * the verdict: B is within PyTorch's own backend spread when B's max and mean rel diff are at
    most margin x R's (margin 2 by default: two backends of like accuracy land within a
    factor of about 1.5 of each other from one run to the next, a wrong kernel is off by
    orders of magnitude); a NaN or Inf in any arm's logits fails it, whatever the numbers;
  * token agreement of X against A, per sequence: the first step whose token differs (null:
    none) and the share of positions before it; overall: the earliest such step and the share
    of all positions that precede their sequence's first divergence.

The functions take plain nested lists (steps of rows of floats), so they run without torch.
"""
import argparse
import json
import math
import operator
import sys

DEFAULT_MARGIN = 2.0


def nonfinite(steps):
    """[(step, count)] of NaN/Inf values in steps of rows."""
    out = []
    for t, rows in enumerate(steps):
        n = sum(len(row) - sum(map(math.isfinite, row)) for row in rows)
        if n:
            out.append((t, n))
    return out


def first_divergence(a_tokens, x_tokens):
    """Per sequence: the first index where the two token lists differ (None when none)."""
    out = []
    for a, x in zip(a_tokens, x_tokens):
        k = next((j for j, (p, q) in enumerate(zip(a, x)) if p != q), None)
        if k is None and len(a) != len(x):
            k = min(len(a), len(x))
        out.append(k)
    return out


def agreement(a_tokens, x_tokens):
    """Token agreement of X against A (see the module doc)."""
    first = first_divergence(a_tokens, x_tokens)
    lengths = [len(a) for a in a_tokens]
    before = [n if k is None else k for k, n in zip(first, lengths)]
    total = sum(lengths)
    diverged = [k for k in first if k is not None]
    return dict(
        identical=not diverged and len(a_tokens) == len(x_tokens),
        share_before_divergence=(sum(before) / total) if total else 1.0,
        first_divergent_step=min(diverged) if diverged else None,
        per_sequence=[dict(first_divergent_step=k, share=(b / n) if n else 1.0)
                      for k, b, n in zip(first, before, lengths)],
    )


def rel_diff(a_steps, x_steps, first=None, steps=None):
    """Relative difference of X against A per step, over the rows still comparable.
    first: per sequence, the first divergent step of the tokens (None: never; the whole list
    None: tokens unknown, every row compared)."""
    n = min(len(a_steps), len(x_steps))
    if steps is not None:
        n = min(n, steps)
    per_step = []
    tot_d = tot_a = 0.0
    max_rel = 0.0
    identical = True
    for t in range(n):
        md = ma = sd = sa = 0.0
        rows = 0
        for i, (ar, xr) in enumerate(zip(a_steps[t], x_steps[t])):
            if first is not None and i < len(first) and first[i] is not None and t > first[i]:
                continue  # fed different tokens before this step
            d = list(map(abs, map(operator.sub, xr, ar)))
            aa = list(map(abs, ar))
            rows += 1
            if d:
                rd, ra = math.fsum(d), math.fsum(aa)
                # max() is order-dependent with a NaN: a non-finite sum says so instead
                md = rd if not math.isfinite(rd) else max(md, max(d)) if math.isfinite(md) else md
                ma = ra if not math.isfinite(ra) else max(ma, max(aa)) if math.isfinite(ma) else ma
                sd += rd
                sa += ra
            if list(xr) != list(ar):
                identical = False
        step_max = ratio(md, ma)
        per_step.append(dict(step=t, rows=rows, max_rel=step_max, mean_rel=ratio(sd, sa)))
        tot_d += sd
        tot_a += sa
        if not math.isnan(max_rel) and (math.isnan(step_max) or step_max > max_rel):
            max_rel = step_max  # a NaN sticks
    return dict(steps=n, identical=identical and n > 0, max_rel=max_rel if n else None,
                mean_rel=ratio(tot_d, tot_a) if n else None, per_step=per_step)


def ratio(num, den):
    if num != num or den != den:
        return float("nan")
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def fmt(x):
    return "n/a" if x is None else ("%.2e" % x if math.isfinite(x) else str(x))


def spread_judgement(b, r, margin=DEFAULT_MARGIN):
    """'within' or 'outside', and the (x, y) pair that decided it (max, else mean)."""
    for key in ("max_rel", "mean_rel"):
        x, y = b[key], r[key]
        if x is None or y is None or not (x <= margin * y):
            return "outside", key, x, y
    return "within", "max_rel", b["max_rel"], r["max_rel"]


def verdict(a, b, r=None, s=None, margin=DEFAULT_MARGIN, steps=None, labels=None):
    """The verdict of arms given as dicts {"logits": steps of rows, "token_ids": rows or None}.
    a: stock, b: with the shim, r: the reference backend (optional), s: stock on the shim's
    attention path (optional). Returns the JSON-able record, "line" first of "lines"."""
    labels = dict(dict(a="A stock", b="B ponytail", r="R reference", s="S same path"), **(labels or {}))
    arms = dict(a=a, b=b, r=r, s=s)
    bad = []
    for name in ("a", "b", "r", "s"):
        arm = arms[name]
        if arm is None:
            continue
        lg = arm["logits"][:steps] if steps is not None else arm["logits"]
        for t, n in nonfinite(lg):
            bad.append(dict(arm=name.upper(), step=t, count=n))

    def compare(base, x):
        """(rel_diff of x against base, token agreement or None)."""
        if x is None:
            return None, None
        toks = None
        if base.get("token_ids") is not None and x.get("token_ids") is not None:
            toks = agreement(base["token_ids"], x["token_ids"])
        first = [p["first_divergent_step"] for p in toks["per_sequence"]] if toks else None
        return rel_diff(base["logits"], x["logits"], first, steps), toks

    rec = dict(margin=margin, labels=labels, nonfinite=bad)
    rec["b"], tok_b = compare(a, b)
    rec["spread"], tok_r = compare(a, r)
    rec["same_path"], tok_s = compare(s, b) if s is not None else (None, None)
    rec["tokens"] = dict(b=tok_b, r=tok_r, s=tok_s)
    rec["steps"] = rec["b"]["steps"]
    n = rec["steps"]
    B = rec["b"]
    if bad:
        where = "; ".join("%s step %d: %d value%s" % (e["arm"], e["step"], e["count"], "" if e["count"] == 1 else "s")
                          for e in bad[:6])
        rec["status"] = "nonfinite"
        line = "verdict: FAIL: NaN/Inf in the sampled logits (%s)" % where
    elif rec["spread"] is None:
        rec["status"] = "no_reference"
        line = "verdict: no reference arm (B vs A: max rel diff %s, mean %s over %d steps)" % (
            fmt(B["max_rel"]), fmt(B["mean_rel"]), n)
    else:
        R = rec["spread"]
        status, key, x, y = spread_judgement(B, R, margin)
        rec["status"] = status
        what = "max rel diff" if key == "max_rel" else "mean rel diff"
        if B["identical"]:
            line = "verdict: within PyTorch's own backend spread (B's logits equal A's over %d steps)" % n
        elif status == "within":
            line = ("verdict: within PyTorch's own backend spread (max rel diff %s vs %s, mean %s vs %s; "
                    "first %d steps)" % (fmt(B["max_rel"]), fmt(R["max_rel"]), fmt(B["mean_rel"]),
                                         fmt(R["mean_rel"]), n))
        else:
            line = ("verdict: OUTSIDE PyTorch's own backend spread (%s %s vs %s, margin %gx; first %d steps)"
                    % (what, fmt(x), fmt(y), margin, n))
        if R["identical"] and not B["identical"]:
            line += " [the reference arm equals A: spread 0]"
    rec["line"] = line
    lines = [line]

    def logit_line(tag, d):
        if d is None:
            return
        if d["identical"]:
            lines.append("  logits %-28s identical" % tag)
        else:
            lines.append("  logits %-28s max rel diff %s  mean %s" % (tag, fmt(d["max_rel"]), fmt(d["mean_rel"])))

    logit_line("B vs A", rec["b"])
    logit_line("R vs A (spread, %s)" % labels["r"], rec["spread"])
    logit_line("B vs S (%s)" % labels["s"], rec["same_path"])

    def token_line(tag, t):
        if t is None:
            return
        if t["identical"]:
            lines.append("  tokens %-28s identical" % tag)
            return
        per = ",".join("-" if p["first_divergent_step"] is None else str(p["first_divergent_step"])
                       for p in t["per_sequence"][:16])
        if len(t["per_sequence"]) > 16:
            per += ",..."
        lines.append("  tokens %-28s %.1f%% of positions before the first divergence; first divergent step %s "
                     "(per sequence: %s)" % (tag, 100.0 * t["share_before_divergence"],
                                             fmt_step(t["first_divergent_step"]), per))

    token_line("B vs A", tok_b)
    token_line("R vs A", tok_r)
    token_line("B vs S", tok_s)
    rec["lines"] = lines
    return rec


def fmt_step(k):
    return "none" if k is None else str(k)


EXIT = dict(within=0, no_reference=0, outside=3, nonfinite=4)


def clean(x):
    """Strict JSON: non-finite floats become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def load_arm(path):
    """generate.py's logits file (torch.save) as plain lists; a JSON file of the same shape
    ({"logits": [[[...]]], "token_ids": [[...]]}) is read as is (recorded logits, tests)."""
    with open(path, "rb") as f:
        head = f.read(1)
    if head == b"{":
        with open(path) as f:
            d = json.load(f)
        return dict(logits=d["logits"], token_ids=d.get("token_ids"))
    import torch
    try:
        d = torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch before weights_only
        d = torch.load(path, map_location="cpu")
    steps = [[list(map(float, row)) for row in t.float().tolist()] for t in d["logits"]]
    toks = d.get("token_ids")
    if toks is not None and hasattr(toks, "tolist"):
        toks = toks.tolist()
    return dict(logits=steps, token_ids=toks)


def main(argv=None):
    p = argparse.ArgumentParser(description="Logits verdict of a ponytail bench A/B")
    p.add_argument("a", help="A: stock run's logits (.pt from generate.py --logits-out)")
    p.add_argument("b", help="B: the run with the shim")
    p.add_argument("r", nargs="?", help="R: stock with another SDPA backend (the reference spread)")
    p.add_argument("--same", metavar="S.pt", help="S: stock on the shim's attention path")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    p.add_argument("--steps", type=int, help="compare the first N steps only")
    p.add_argument("--label", action="append", default=[], metavar="ARM=TEXT",
                   help="name an arm in the lines (a, b, r, s)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    args = p.parse_args(argv)
    labels = dict(kv.split("=", 1) for kv in args.label if "=" in kv)
    try:
        arms = [load_arm(x) if x else None for x in (args.a, args.b, args.r, args.same)]
    except Exception as e:  # noqa: BLE001 - any failure to read is reported the same way
        print("verdict: cannot read the logits: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    rec = verdict(arms[0], arms[1], arms[2], arms[3], margin=args.margin, steps=args.steps, labels=labels)
    if args.json:
        print(json.dumps(clean(rec), allow_nan=False))
    else:
        print("\n".join(rec["lines"]))
    return EXIT[rec["status"]]


if __name__ == "__main__":
    sys.exit(main())
