#!/usr/bin/env python3
"""The decode attention calls each family of tests/gpu/checks/families.py makes, recorded on the
CPU (no GPU, no shim): the prediction that the GPU family table is checked against (issue 51).

For each family: the same small random-weight model and the same equal-length and left-padded
batches as families.py (fp32 on the CPU), greedy generate, and every call of
torch.nn.functional.scaled_dot_product_attention with one query position (a decode step)
recorded: q/k/v head sizes, query and KV heads, the mask (none, bool, float), enable_gqa and
whether the scale is the default. From these and the shim's rules (docs/kernels.md: decode
flash or mem-efficient, head_dim 64/128/256) it predicts what the GPU table should say:
  swapped      SDPA decode calls the shim's decode kernels take
  swapped (branch)  only with the head_dim 80/96 and MLA kernels that wait for their GPU check
  not reached  no SDPA call at decode (eager or the family's own attention)
  uncertain    a call shape whose backend on the GPU cannot be told here (K/V heads broadcast)
This is a prediction: which backend torch picks on the GPU, and the hooks' other checks
(alignment, strides), are seen only there.

  python3 tests/gpu/bench/family_sdpa_calls.py [--families llama,phi3] [--json OUT]
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checks"))
import families as fam  # noqa: E402  (FAMILIES, build_config, VOCAB: one definition of the models)

MAIN_DIMS = {(64, 64), (128, 128), (256, 256)}
BRANCH_DIMS = {(80, 80), (96, 96), (192, 128)}


def record(family, batch, prompt, new_tokens):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    cfg = fam.build_config(family)
    impl = fam.FAMILIES[family][4]
    res = dict(family=family)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=torch.float32)
    except (ValueError, NotImplementedError) as e:
        res["impl_refused"] = "%s: %s" % (type(e).__name__, str(e)[:160])
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    res["attn_implementation"] = getattr(model.config, "_attn_implementation", impl)
    model.eval()
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):
        if q.shape[-2] == 1:
            m = "none" if attn_mask is None else ("bool" if attn_mask.dtype == torch.bool else "float")
            calls.append((q.shape[-1], k.shape[-1], v.shape[-1], q.shape[-3], k.shape[-3], m, bool(enable_gqa),
                          bool(is_causal), scale is None or abs(scale - 1 / math.sqrt(q.shape[-1])) < 1e-6,
                          tuple(sorted(kw))))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa, **kw)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, fam.VOCAB, (batch, prompt), generator=g)
    res["runs"] = {}
    for kind in ("equal", "padded"):
        mask = torch.ones(batch, prompt, dtype=torch.long)
        if kind == "padded":
            for i in range(batch):
                mask[i, : i * prompt // (2 * batch)] = 0
        x = ids.clone()
        x[mask == 0] = 0
        calls.clear()
        F.scaled_dot_product_attention = spy
        torch.nn.functional.scaled_dot_product_attention = spy
        try:
            with torch.no_grad():
                model.generate(input_ids=x, attention_mask=mask, max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        finally:
            F.scaled_dot_product_attention = real
        kinds = {}
        for c in calls:
            kinds[c] = kinds.get(c, 0) + 1
        res["runs"][kind] = [dict(q=c[0], k=c[1], v=c[2], hq=c[3], hkv=c[4], mask=c[5], enable_gqa=c[6],
                                  is_causal=c[7], default_scale=c[8], other_args=list(c[9]), count=n)
                             for c, n in sorted(kinds.items(), key=lambda t: -t[1])]
    return res


def predict(res):
    """(main, branch) predictions and the reason, from the recorded calls of both batches."""
    calls = [c for k in ("equal", "padded") for c in res["runs"].get(k, [])]
    if not calls:
        return "not reached", "not reached", "no SDPA call at decode (%s attention)" % res["attn_implementation"]
    dims = {(c["q"], c["v"]) for c in calls if c["q"] == c["k"]}
    odd = [c for c in calls if c["q"] != c["k"]]
    if odd:
        return "fallback", "fallback", "q and k head sizes differ"
    bcast = [c for c in calls if c["hq"] != c["hkv"] and not c["enable_gqa"]]
    if bcast:  # K/V of fewer heads broadcast to the query heads: flash and mem-efficient want them equal
        return "uncertain", "uncertain", ("K/V heads broadcast (%d query, %d KV heads) without enable_gqa: "
                                          "flash and mem-efficient refuse it, torch keeps cuDNN or math" % (bcast[0]["hq"], bcast[0]["hkv"]))
    main = "swapped" if dims <= MAIN_DIMS else "fallback"
    branch = "swapped" if dims <= MAIN_DIMS | BRANCH_DIMS else "fallback"
    why = ", ".join("d %d%s" % (q, "" if q == v else "/v %d" % v) for q, v in sorted(dims))
    masks = sorted({c["mask"] for c in calls})
    why += "; masks " + "/".join(masks)
    if any(c["enable_gqa"] for c in calls):
        why += "; enable_gqa"
    if not all(c["default_scale"] for c in calls):
        why += "; own scale"
    return main, branch, why


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(fam.FAMILIES))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    out = dict(torch=torch.__version__, transformers=transformers.__version__, batch=a.batch, prompt=a.prompt,
               new_tokens=a.new_tokens, families=[])
    for f in a.families.split(","):
        try:
            r = record(f, a.batch, a.prompt, a.new_tokens)
            r["main"], r["branch"], r["why"] = predict(r)
        except Exception as e:  # a family that does not build here is a row too
            r = dict(family=f, main="error", branch="error", why="%s: %s" % (type(e).__name__, str(e)[:160]))
        out["families"].append(r)
        print("%-12s %-8s %-12s %-12s %s" % (f, r.get("attn_implementation", "-"), r["main"], r["branch"], r["why"]),
              flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    n = len(out["families"])
    for col in ("main", "branch"):
        k = sum(r[col] == "swapped" for r in out["families"])
        print("predicted swapped (%s): %d of %d families (%.0f%%)" % (col, k, n, 100.0 * k / n))


if __name__ == "__main__":
    main()
