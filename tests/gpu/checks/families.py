#!/usr/bin/env python3
"""Model families under the shim (issue 51): for each popular transformers family, a small
random-weight model built from AutoConfig.for_model(...) with the family's own attention shape
(head_dim, query heads per KV head, sliding windows, soft-capping, MLA, sinks), greedy generate
on an equal-length and a left-padded batch, stock and under the default shim, one process at a
time. One table says, per family: the attention implementation it ran with, the attention kernels
that ran, the share of decode attention launches the shim swapped, fallback reasons with counts,
tokens against stock, and the decode step p50 of each arm.

  python3 tests/gpu/checks/families.py --shim build-gpu/shim/libponytail_shim.so --out DIR
      [--ponytail build-gpu/tools/ponytail]
      [--families llama,phi3,...] [--arms stock,shim,aa,spread,math,verify,confirm] [--budget S] [--list]

Arms:
  stock   no preload
  shim    LD_PRELOAD of the shim, every PONYTAIL_* at its default
  aa      stock again, after the shim arms: the run's stock-against-stock noise band of the decode
          step, the bar for "slower under the shim"
  spread  stock with SDPA's flash and cuDNN backends off (mem-efficient / math): torch's own
          backend-to-backend difference, the yardstick for a shim arm whose tokens differ
          (its kernel is not stock's, so bitwise equality is not the bar there); run only for
          a family whose shim tokens differ from stock's
  math    stock with every fused SDPA backend off (torch's math path): a second backend
          difference, so that the yardstick is not one backend pair's luck; run where spread is
  verify  the shim under PONYTAIL_ATTN=verify (one process, counted per family like the shim
          arm): torch's kernel runs and Ponytail's is compared with it launch by launch on the
          GPU; run where spread is. Any launch out of tolerance fails the family (its kernel is
          wrong, whatever the tokens say)
  confirm stock, shim, stock, shim again for each family judged slower, one process per arm:
          "slower" stands only when these two pairs' mean ratio exceeds the band too
Tokens: "same" (identical to stock), else the shim's logits of the first --logits-steps steps
(0: every step) against stock's, next to each spread arm's against stock's: within means
max|shim - stock| <= 2 x the larger spread arm's max|arm - stock|, each row compared only over the
steps both runs took from the same inputs (up to and including the step where its tokens part:
later logits continue other sequences: gemma's padded row that parted at step 1 read 5.75 over
steps 2-3 on 2026-12-07). A small model whose MoE router picks among near ties (deepseek_v3's
random sigmoid router) turns rounding-level differences in attention into logit jumps of ~1 at
one step (on the CPU, 2^-9 relative noise on decode attention: 0.73; 2^-7: 1.23-1.26), which
is why every step is compared by default (every arm gets the same chances to show one) and why
the verify arm stands beside the token verdict.
Swapped share: the shim's decode swaps / max(decode swaps + decode fallbacks, one launch per
attention layer per decode step); the prefill forwards' swaps and fallbacks are counted apart
(`ponytail stats` before each generate and after its prefill forward, in the worker) and taken
off; a share marked * could not be (no control socket). Exit 1 when a family's stock run fails,
a family that runs stock fails under the shim or changes tokens beyond the spread (or differs
with no spread arm to judge it), fewer than 90% of the judged families have >= 95% of decode
attention swapped, or nothing was judged. Under --budget each arm starts only when an estimate
from the stock arm's time fits; SIGTERM ends the check with the table of what ran.

Slower: a family whose shim step p50, as the mean of its two batches' shim / stock ratios, exceeds
stock's by more than the noise band (the largest |aa / stock - 1| over every family and batch of
the run, at least 2%), stock's step being the mean of its run before the shim arm and its run
after it (aa), so that a drift over the call falls on both sides; then two more stock/shim pairs
(confirm) must read slower too.

The worker (--worker) runs one arm of one or more families in one process: every arm takes every
family in one process, so that torch, transformers and CUDA start once. The shim arm's swaps and
fallbacks of each family are the difference of the process's stats before and after it, asked of
its control socket (`ponytail stats`); a family without them (no socket, a crash) runs again in a
process of its own, counted by its exit stats (--shim-per-family: all of them so). For each family it
writes a JSON with tokens, decode step times and the attention path, and the first decode steps'
logits beside it (.pt, removed once the family is compared). Weights are created on the GPU
(random init of a 0.5 B-parameter model takes ~15 s on the CPU).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from procs import Stopped, raise_on_sigterm, run_proc

HERE = os.path.dirname(os.path.abspath(__file__))

# family: (query heads, KV heads, head_dim, extra config, attn_implementation, what it tests).
# Sizes are cut to 4 layers and hidden = heads x head_dim (where the family allows), keeping
# the family's head_dim and grouping: what decides which attention kernel runs.
FAMILIES = {
    "llama": (16, 4, 128, {}, "sdpa", "baseline GQA, head_dim 128"),
    "mistral": (16, 4, 128, {"sliding_window": 512}, "sdpa", "sliding window (512 < context)"),
    "mixtral": (16, 4, 128, {"num_local_experts": 4, "num_experts_per_tok": 2}, "sdpa", "MoE"),
    "qwen2": (14, 2, 64, {}, "sdpa", "QKV bias, head_dim 64"),
    "qwen3": (16, 8, 128, {}, "sdpa", "QK norm"),
    "qwen3_moe": (16, 4, 128, {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                               "decoder_sparse_step": 1, "mlp_only_layers": []}, "sdpa", "QK norm, MoE"),
    "gemma": (8, 8, 256, {}, "sdpa", "head_dim 256"),
    "gemma2": (8, 4, 256, {"sliding_window": 512, "attn_logit_softcapping": 50.0,
                           "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256}, "sdpa",
               "logit soft-capping, alternating sliding window"),
    "gemma3_text": (8, 4, 256, {"sliding_window": 512, "sliding_window_pattern": 2}, "sdpa",
                    "local + global layers"),
    "phi": (32, 32, 80, {"partial_rotary_factor": 0.4}, "sdpa", "head_dim 80, partial rotary"),
    "phi3": (32, 32, 96, {}, "sdpa", "head_dim 96"),
    "gpt2": (12, 12, 64, {}, "sdpa", "learned positions, MHA"),
    "gpt_neox": (16, 16, 96, {"rotary_pct": 0.25}, "sdpa", "head_dim 96 (NeoX-20B), partial rotary"),
    "falcon": (16, 1, 64, {"multi_query": True, "new_decoder_architecture": False}, "sdpa", "multi-query"),
    "olmo2": (16, 16, 128, {}, "sdpa", "QK norm, MHA"),
    "stablelm": (32, 32, 80, {"partial_rotary_factor": 0.25}, "sdpa", "head_dim 80, partial rotary"),
    "granite": (16, 4, 128, {"attention_multiplier": 0.0078125}, "sdpa", "custom attention scale"),
    "smollm3": (16, 4, 128, {"no_rope_layer_interval": 4}, "sdpa", "NoPE layers"),
    "starcoder2": (24, 2, 128, {"sliding_window": 512}, "sdpa", "GQA 12, sliding window"),
    "cohere2": (8, 8, 128, {"sliding_window": 512, "sliding_window_pattern": 2}, "sdpa",
                "local + global layers, parallel block"),
    "glm4": (16, 2, 128, {"partial_rotary_factor": 0.5}, "sdpa", "GQA 8, partial rotary"),
    "deepseek_v3": (16, 16, 0, {"q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 128,
                                "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 4,
                                "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 256,
                                "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}, "sdpa",
                    "MLA: q/k head 192, v head 128"),
    "gpt_oss": (16, 4, 64, {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128}, "sdpa",
                "attention sinks, sliding window, MoE"),
}
LAYERS, VOCAB = 4, 32000


def build_config(family):
    from transformers import AutoConfig
    heads, kv, hd, extra, _, _ = FAMILIES[family]
    hidden = heads * (hd or 64)
    kw = dict(num_hidden_layers=LAYERS, vocab_size=VOCAB, hidden_size=hidden, num_attention_heads=heads,
              num_key_value_heads=kv, intermediate_size=2 * hidden, max_position_embeddings=4096,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    if hd:
        kw["head_dim"] = hd
    if family == "gpt2":
        kw = dict(n_layer=LAYERS, vocab_size=VOCAB, n_embd=hidden, n_head=heads, n_inner=2 * hidden,
                  n_positions=4096, bos_token_id=1, eos_token_id=2)
    elif family == "gpt_neox":
        kw.pop("num_key_value_heads")
    elif family == "falcon":  # head_dim is hidden / heads there (a property)
        for k in ("num_key_value_heads", "intermediate_size", "head_dim"):
            kw.pop(k)
    kw.update(extra)
    cfg = AutoConfig.for_model(family, **kw)
    if family in ("gemma3_text", "cohere2") and hasattr(cfg, "layer_types"):
        cfg.layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(LAYERS)]
    return cfg


def arm_kind(arm):
    """What an arm runs: a confirm arm ("stock.c1", "shim.c2") runs its kind again."""
    return arm.split(".")[0]


def worker(a):
    import torch
    if arm_kind(a.arm) in ("spread", "math"):
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(False)
    if arm_kind(a.arm) == "math":
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    ok = True
    # Several families in one shim (or verify) process: the stats before and after each.
    snap = a.arm in ("shim", "verify") and "," in a.family and a.ponytail
    if snap:  # the baseline (no pool yet, so usually no socket: nothing counted then)
        with open(os.path.join(a.out, "_start.%s.snap.json" % a.arm), "w") as f:
            json.dump(synced_stats(torch, a.ponytail), f)
    for fam in a.family.split(","):
        ok &= worker_one(a, fam, torch)
        if snap:  # the shim's counters after this family, for the driver's per-family deltas
            with open(os.path.join(a.out, "%s.%s.snap.json" % (fam, a.arm)), "w") as f:
                json.dump(synced_stats(torch, a.ponytail), f)
    return 0 if ok else 1


def worker_one(a, family, torch):
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList
    out_json = os.path.join(a.out, "%s.%s.json" % (family, a.arm))
    res = dict(family=family, arm=a.arm, ok=False, preload=os.environ.get("LD_PRELOAD", ""))
    model = None
    t_family = time.time()  # the family's whole time in the worker: where an arm's time goes
    try:
        torch.manual_seed(0)
        cfg = build_config(family)
        impl = FAMILIES[family][4]
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if dev == "cuda" else torch.float32
        t0 = time.time()
        with torch.device(dev):  # random init where the model runs: seconds on the CPU, ms here
            try:
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=dtype)
            except (ValueError, NotImplementedError) as e:  # the family has no such path: eager
                res["impl_refused"] = "%s: %s" % (type(e).__name__, str(e)[:200])
                impl = "eager"
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=dtype)
        res["init_s"] = round(time.time() - t0, 2)
        res["attn_implementation"] = getattr(model.config, "_attn_implementation", impl)
        model = model.eval()
        g = torch.Generator().manual_seed(1)
        B, P, N = a.batch, a.prompt, a.new_tokens
        ids = torch.randint(3, VOCAB, (B, P), generator=g)
        runs = {}
        prefill = []  # the shim's counters over each generate's prefill forward (shim arm)
        for kind in ("equal", "padded"):
            mask = torch.ones(B, P, dtype=torch.long)
            if kind == "padded":  # left padding: row i loses i * P / (2B) tokens
                for i in range(B):
                    mask[i, : i * P // (2 * B)] = 0
            x, m = ids.clone(), mask
            x[m == 0] = 0
            stamps, logits = [], []
            count_prefill = a.arm == "shim" and a.ponytail  # the shim's counters around each prefill
            before_prefill = [None]

            class Stamp(LogitsProcessor):
                def __call__(self, input_ids, scores):
                    if count_prefill and not stamps:  # after the prefill forward, before the first stamp
                        cur = synced_stats(torch, a.ponytail)
                        prefill.append(stats_delta(before_prefill[0], cur)
                                       if before_prefill[0] is not None and cur is not None else None)
                    stamps.append(time.perf_counter())
                    if not a.logits_steps or len(logits) < a.logits_steps:
                        logits.append(scores.float().cpu())
                    return scores

            for rep in range(2):  # the first is the warm-up (allocations, autotuning, first launches)
                stamps.clear()
                logits.clear()
                if count_prefill:
                    before_prefill[0] = synced_stats(torch, a.ponytail)
                with torch.no_grad():
                    out = model.generate(input_ids=x.to(dev), attention_mask=m.to(dev), max_new_tokens=N,
                                         min_new_tokens=N, do_sample=False, pad_token_id=0,
                                         logits_processor=LogitsProcessorList([Stamp()]))
            steps = sorted((b - s) * 1e3 for s, b in zip(stamps, stamps[1:]))
            lg = torch.stack(logits)
            lpath = None
            if a.save_logits:  # beside the JSON, read and removed by the driver (MBs per run)
                lpath = out_json[:-5] + ".%s.logits.pt" % kind
                # A bf16 model's logits (and generate's -inf) are bf16 values: half the bytes.
                small = lg.to(torch.bfloat16)
                torch.save(small if torch.equal(small.float(), lg) else lg, lpath)
            runs[kind] = dict(tokens=out[:, P:].tolist(), step_ms_p50=steps[len(steps) // 2] if steps else None,
                              logits=lpath, logits_absmax=float(lg[torch.isfinite(lg)].abs().max()))
        res["runs"] = runs
        if prefill:  # what the prefill forwards launched: the driver takes it from the family's counts
            res["prefill"] = None if None in prefill else sum_deltas(prefill)
        res["ok"] = True
    except BaseException as e:
        import traceback
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        res["traceback"] = traceback.format_exc()[-3000:]
        print(res["traceback"], file=sys.stderr)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    res["family_s"] = round(time.time() - t_family, 2)
    with open(out_json, "w") as f:
        json.dump(res, f)
    return res["ok"]


def arm_env(a, arm, tag):
    """The environment of an arm's worker: no preload but the shim's for the shim arms (stats and
    log into --out; other PONYTAIL_* as the caller set them, none for the default), and verify
    mode for the verify arm."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    kind = arm_kind(arm)
    if kind in ("shim", "verify"):
        env.update(LD_PRELOAD=os.path.abspath(a.shim), PONYTAIL_STATS="json",
                   PONYTAIL_STATS_FILE=os.path.join(a.out, tag + ".stats.json"), PONYTAIL_LOG="info",
                   PONYTAIL_LOG_FILE=os.path.join(a.out, tag + ".shim.log"))
    if kind == "verify":
        env["PONYTAIL_ATTN"] = "verify"
    return env


def run_arm(a, families, arm):
    """One worker process for arm over families (a list); {family: result}."""
    tag = "%s.%s" % (families[0] if len(families) == 1 else "all", arm)
    env = arm_env(a, arm, tag)
    kind = arm_kind(arm)
    # Logits only for the arms whose logits are compared (MBs a family).
    save = arm in ("stock", "shim", "spread", "math")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--family", ",".join(families), "--arm", arm,
           "--out", a.out, "--batch", str(a.batch), "--prompt", str(a.prompt), "--new-tokens", str(a.new_tokens),
           "--logits-steps", str(a.logits_steps)] + (["--save-logits"] if save else []) + \
        (["--ponytail", os.path.abspath(a.ponytail)] if a.ponytail else [])
    stale = ["%s.%s.json" % (fam, arm) for fam in families] + ["%s.%s.snap.json" % (fam, arm) for fam in families]
    stale += ["_start.%s.snap.json" % arm, tag + ".stats.json"] if kind in ("shim", "verify") else []
    for f in stale:  # an earlier run's results are not this one's
        if os.path.exists(os.path.join(a.out, f)):
            os.remove(os.path.join(a.out, f))
    timeout = a.timeout + 30 * (len(families) - 1)
    if a.budget:
        timeout = min(timeout, max(a.left() - 30, 1))
    t0 = time.time()
    with open(os.path.join(a.out, tag + ".log"), "w") as log:
        rc = run_proc(cmd, env, log, timeout, grace=10)
    res = {}
    for fam in families:
        try:
            with open(os.path.join(a.out, "%s.%s.json" % (fam, arm))) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = dict(ok=False, error="no result (rc %s)" % rc)
        r["rc"], r["secs"] = rc, round((time.time() - t0) / len(families), 1)
        if arm in ("shim", "verify") and len(families) == 1:  # its exit stats are the family's
            r["stats"] = shim_stats(os.path.join(a.out, tag + ".stats.json"))
        res[fam] = r
    return res


def verdict(arms, fails):
    """The check's last word: without a shim arm nothing was judged (a stock-only run, the CPU
    trial of the models), which must not read as a pass."""
    if fails:
        return "FAIL: " + "; ".join(fails)
    return "PASS" if "shim" in arms else "no shim arm: nothing judged"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def launches_by_name(j):
    k = (j or {}).get("kernels", {})
    out = {t["name"]: t["launches"] for t in k.get("top", [])}
    out.update({t["name"]: t["launches"] for t in k.get("hooked", [])})
    return out


def summarize(j):
    """The family table's view of one shim stats object (PONYTAIL_STATS=json's)."""
    if j is None:
        return None
    k = j.get("kernels", {})
    names = sorted(launches_by_name(j).items(), key=lambda kv: -kv[1])
    h = j.get("hooks") or {}
    return dict(swapped=k.get("swapped", 0), fallbacks=k.get("fallbacks", 0),
                verified=h.get("verified", 0), verify_failures=h.get("verify_failures", 0),
                reasons=k.get("fallback_reasons") or {}, internal_errors=j.get("internal_errors", 0),
                attn=[(n[:60], c) for n, c in names if c > 0 and
                      any(s in n.lower() for s in ("attn", "attention", "flash", "fmha", "sdpa", "softmax"))][:4],
                sdpa=j.get("sdpa_policy"))


def why_none(s):
    """Why no decode attention launch was swapped or refused (none reached a hook), from a family's
    summarize(): no SDPA call at all, torch keeping cuDNN for decode, or SDPA calls with no fused
    attention kernel running (torch's math path). None when launches did reach a hook."""
    if not s or s.get("swapped") or s.get("fallbacks"):
        return None
    sd = s.get("sdpa") or {}
    if not sd.get("calls"):
        return "no SDPA call (eager or custom attention)"
    if sd.get("decode_kept_cudnn"):
        return "decode kept on cuDNN (no flash or mem-efficient path)"
    if not s.get("attn"):
        return "SDPA on torch's math path (no fused kernel)"
    return "attention kernels no hook knows"


def shim_stats(path):
    return summarize(load_json(path))


def stats_delta(prev, cur):
    """What happened between two snapshots of one process's stats (`ponytail stats --json`)."""
    prev = prev or {}
    pk, ck = prev.get("kernels", {}), cur.get("kernels", {})
    pr, cr = pk.get("fallback_reasons") or {}, ck.get("fallback_reasons") or {}
    pl, cl = launches_by_name(prev), launches_by_name(cur)
    ps, cs = prev.get("sdpa_policy") or {}, cur.get("sdpa_policy") or {}
    ph, ch = prev.get("hooks") or {}, cur.get("hooks") or {}
    return dict(sdpa_policy={k: v - ps.get(k, 0) for k, v in cs.items() if isinstance(v, int)},
                hooks={k: v - ph.get(k, 0) for k, v in ch.items() if isinstance(v, int)},
                kernels=dict(swapped=ck.get("swapped", 0) - pk.get("swapped", 0),
                             fallbacks=ck.get("fallbacks", 0) - pk.get("fallbacks", 0),
                             fallback_reasons={r: n - pr.get(r, 0) for r, n in cr.items() if n - pr.get(r, 0) > 0},
                             top=[dict(name=n, launches=c - pl.get(n, 0)) for n, c in cl.items() if c - pl.get(n, 0) > 0]),
                internal_errors=cur.get("internal_errors", 0) - prev.get("internal_errors", 0))


def sum_deltas(ds):
    """stats_delta()s added up (the kernel counts and reasons the summaries read)."""
    k = dict(swapped=0, fallbacks=0, fallback_reasons={})
    for d in ds:
        dk = d.get("kernels", {})
        k["swapped"] += dk.get("swapped", 0)
        k["fallbacks"] += dk.get("fallbacks", 0)
        for r, n in (dk.get("fallback_reasons") or {}).items():
            k["fallback_reasons"][r] = k["fallback_reasons"].get(r, 0) + n
    return dict(kernels=k)


def decode_counts(s, prefill, expected):
    """The decode share of a family's shim summary s: its swaps and fallbacks less the prefill
    forwards' (prefill: sum_deltas of them; None when they could not be counted apart, said in the
    table), over at least `expected` launches (one per attention layer per decode step: an SDPA call
    on torch's math path or in eager attention reaches no hook and would otherwise drop out of the
    denominator). (swapped, fallbacks, reasons, share, prefill_apart)."""
    sw, fb, reasons = s.get("swapped", 0), s.get("fallbacks", 0), dict(s.get("reasons") or {})
    apart = prefill is not None
    if apart:
        pk = prefill.get("kernels", {})
        sw, fb = max(sw - pk.get("swapped", 0), 0), max(fb - pk.get("fallbacks", 0), 0)
        for r, n in (pk.get("fallback_reasons") or {}).items():
            if r in reasons:
                reasons[r] -= n
                if reasons[r] <= 0:
                    del reasons[r]
    n = max(sw + fb, expected)
    return sw, fb, reasons, (sw / n) if n else None, apart


def synced_stats(torch, ponytail):
    """own_stats() once the device has finished what was launched: the counts of work done."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return own_stats(ponytail)


def own_stats(ponytail):
    """This process's shim stats now (`ponytail stats --json`, which finds its control socket as
    the shim placed it), or None."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        r = subprocess.run([ponytail, "stats", "--json", str(os.getpid())], capture_output=True, text=True,
                           env=env, timeout=60)
        return json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def common_steps(ta, tb, steps):
    """Per row, how many of the first `steps` logits steps two greedy runs took from the same
    inputs: every step up to and including the first where their tokens part (that step's
    logits chose differently; the later ones continue other sequences and compare nothing)."""
    out = []
    for x, y in zip(ta, tb):
        fd = next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), None)
        out.append(steps if fd is None else min(fd + 1, steps))
    return out


def max_diff(a, b, rows_steps=None):
    """max |a - b| over the saved logits ([steps, rows, vocab]) of two runs, each row over its
    first rows_steps[row] steps (all without it); None when a file is missing or shapes differ."""
    import torch
    if not a or not b or not os.path.exists(a) or not os.path.exists(b):
        return None
    ta, tb = torch.load(a).float(), torch.load(b).float()  # saved as bf16 where that is exact
    if ta.shape != tb.shape:
        return None
    if rows_steps is not None:
        if len(rows_steps) != ta.shape[1]:  # one count per row of the batch, or nothing compared
            return None
        keep = torch.zeros(ta.shape[:2], dtype=torch.bool)
        for row, k in enumerate(rows_steps):
            keep[:k, row] = True
        ta, tb = ta[keep], tb[keep]
    # -inf where generate masks a token (min_new_tokens masks EOS): equal there, not NaN.
    fa, fb = torch.isfinite(ta), torch.isfinite(tb)
    if bool(((fa != fb) | (~fa & ~fb & (ta != tb))).any()):
        return float("inf")
    both = fa & fb
    return float((ta[both] - tb[both]).abs().max()) if bool(both.any()) else 0.0


def compare(stock, other, spreads, tokens_only=False, steps=4):
    """'same', 'within spread', or 'DIFFERS ...' for each batch kind, and whether it fails
    (tokens_only: a stopped check compares no logits, which needs torch). spreads: {arm: result}
    of the spread arms (spread, math); the bar is the larger of their differences from stock.
    Logits are compared only where both runs had the same inputs (common_steps): after a row's
    tokens part, its later logits belong to other sequences, whose difference is of the whole
    logit scale."""
    out, fail = [], False
    for kind in ("equal", "padded"):
        s, o = stock["runs"][kind], other["runs"][kind]
        if s["tokens"] == o["tokens"]:
            out.append("%s same" % kind)
            continue
        sps = {n: v["runs"][kind] for n, v in (spreads or {}).items() if v and v.get("ok")}
        if tokens_only or not sps:
            why = "check stopped" if tokens_only else "spread arm %s" % (
                ((spreads or {}).get("spread") or {}).get("error") or "not run")
            out.append("%s differ, not judged (%s)" % (kind, why))
            fail = True
            continue
        d = max_diff(s["logits"], o["logits"], common_steps(s["tokens"], o["tokens"], steps))
        dsp = {n: max_diff(s["logits"], sp["logits"], common_steps(s["tokens"], sp["tokens"], steps))
               for n, sp in sps.items()}
        known = [x for x in dsp.values() if x is not None]
        within = d is not None and bool(known) and d <= 2 * max(known)
        out.append("%s %s (logit diff %.3g vs %s)" % (
            kind, "within spread" if within else "DIFFERS", d if d is not None else float("nan"),
            ", ".join("%s %s" % (n, "%.3g" % x if x is not None else "-") for n, x in dsp.items())))
        fail |= not within
    return "; ".join(out), fail


def not_run(a, why=None):
    """An arm's result where --budget left no time for it (or the check was stopped)."""
    return dict(ok=False, error=why or "not run: --budget %.0f s spent" % a.budget, budget=True)


def fits(a, secs):
    """Whether an arm estimated at secs fits what --budget leaves (20 s kept for the table)."""
    return not a.budget or a.left() > secs + 20


def fit_count(a, per_fam, n):
    """How many of n families an arm can take in what --budget leaves, at 1.2x stock's time a
    family and a process's start-up (20 s) on top: n without a budget."""
    if not a.budget:
        return n
    return max(0, min(n, int((a.left() - 20 - 20) / (1.2 * per_fam)) if per_fam > 0 else n))


def run_shim(a, fams, r, per_fam, arm="shim"):
    """The shim arm (or the verify arm) over fams: every family in one process, each family's
    counts the difference of the process's stats before and after it (`ponytail stats`); a family
    without both snapshots (no control socket, a crash) runs again in a process of its own,
    counted by its exit stats. per_fam: stock's seconds a family."""
    est = 1.3 * per_fam * len(fams) + 15  # stock's time, the snapshots and a margin
    if not fits(a, est):
        for f in fams:
            r[f][arm] = not_run(a)
        return
    alone = list(fams)
    if len(fams) > 1 and a.ponytail and not a.shim_per_family:
        res = run_arm(a, fams, arm)
        prev, alone = load_json(os.path.join(a.out, "_start.%s.snap.json" % arm)), []
        for f in fams:
            cur = load_json(os.path.join(a.out, "%s.%s.snap.json" % (f, arm)))
            if res[f].get("ok") and cur is not None:
                res[f]["stats"] = summarize(stats_delta(prev, cur))
                r[f][arm] = res[f]
            else:
                alone.append(f)
            if cur is not None:  # a failed family's launches are not the next one's
                prev = cur
    for f in alone:
        if not fits(a, 1.3 * per_fam + 15):
            r[f][arm] = not_run(a)
            continue
        r[f][arm] = run_arm(a, [f], arm)[f]


def p50s(res):
    """An arm's decode step p50 of the equal and the padded batch."""
    return [res["runs"][k]["step_ms_p50"] for k in ("equal", "padded")]


def noise_band(r):
    """The largest |aa / stock - 1| of the run's decode steps, at least 2%; None without aa runs."""
    d = []
    for v in r.values():
        st, aa = v.get("stock"), v.get("aa")
        if st and aa and st.get("ok") and aa.get("ok"):
            for x, y in zip(p50s(st), p50s(aa)):
                if x and y:
                    d.append(abs(y / x - 1))
    return max(d + [0.02]) if d else None


def slower(stock_ms, shim_ms, band):
    """Slower beyond the noise band: the mean of the two batches' shim / stock ratios. The band is
    the largest of all the run's single A/A deviations, which a single null ratio exceeds now and
    then by chance; the mean of two rarely does, and a regression in one batch alone still moves
    it by half."""
    if band is None or not stock_ms or not shim_ms or None in stock_ms or None in shim_ms:
        return False
    return sum(b / a for a, b in zip(stock_ms, shim_ms)) / len(stock_ms) - 1 > band


def stock_ref(st, aa):
    """Stock's decode step p50 per batch that the shim's is judged against: the mean of stock's
    run before the shim arm and its run after it (aa), which cancels a drift over the call (the
    arms' processes ran faster as the call went on: stock again / stock 0.74 at the median on
    2026-12-07); stock's alone without aa."""
    ms = p50s(st)
    if aa and aa.get("ok"):
        ms = [(x + y) / 2 if x is not None and y is not None else x for x, y in zip(ms, p50s(aa))]
    return ms


# Arms that run only for some families (differing tokens, a slower reading): absent elsewhere.
ON_DEMAND = ("spread", "math", "verify", "confirm")
CONFIRM = ("stock.c1", "shim.c1", "stock.c2", "shim.c2")


def flagged_slower(r, band):
    """The families whose shim run read slower than stock's around it (stock_ref) beyond the band."""
    out = []
    for f, v in r.items():
        st, sh = v.get("stock"), v.get("shim")
        if st and sh and st.get("ok") and sh.get("ok") and slower(stock_ref(st, v.get("aa")), p50s(sh), band):
            out.append(f)
    return out


def run_confirm(a, fams, r, per_fam):
    """Stock, shim, stock, shim again (one process an arm) for the families read slower: the first
    reading is one pair in a noisy run, and a family is slower only if these pairs read so too."""
    flagged = flagged_slower({f: r[f] for f in fams}, noise_band(r))
    if not flagged:
        return
    # 4 processes: start-up and the families at 1.5x stock's time each.
    if not fits(a, 4 * (25 + 1.5 * per_fam * len(flagged))):
        for f in flagged:
            r[f]["confirm"] = not_run(a)
        return
    got = {f: {} for f in flagged}
    for arm in CONFIRM:
        for f, v in run_arm(a, flagged, arm).items():
            got[f][arm] = v
    for f in flagged:
        r[f]["confirm"] = dict(ok=True, arms=got[f])


def confirm_ms(c):
    """(stock ms, shim ms) over the confirm arms' batches, pair by pair, or None when a run of
    them failed or did not run."""
    if not c or not c.get("ok"):
        return None
    arms = c.get("arms") or {}
    if not all((arms.get(x) or {}).get("ok") for x in CONFIRM):
        return None
    return p50s(arms["stock.c1"]) + p50s(arms["stock.c2"]), p50s(arms["shim.c1"]) + p50s(arms["shim.c2"])


def verify_note(v):
    """The verify arm's result for the table: (its counts or None, a note for the tokens column,
    the failure or None). A launch out of tolerance against torch's own kernel is a failure
    whatever the tokens say; an arm that failed or verified nothing is only said."""
    vs = v.get("stats") if v.get("ok") else None
    counts = None if vs is None else dict(verified=vs.get("verified", 0), verify_failures=vs.get("verify_failures", 0))
    if not v.get("ok"):
        return counts, "verify arm %s" % (v.get("error") or "failed"), None
    if counts is None:
        return counts, "verify arm left no counts", None
    n, bad = counts["verified"], counts["verify_failures"]
    if not n:
        return counts, "verify arm verified nothing", None
    return counts, "verify: %d of %d launches within tolerance" % (n - bad, n), (
        "%d of %d swapped launches out of tolerance against torch's kernel (PONYTAIL_ATTN=verify)" % (bad, n)
        if bad else None)


def kernel_kinds(kernels):
    """The attention kernels that ran under the shim, by kind: flash, mem-eff, cudnn, other."""
    kinds = []
    for name, _ in kernels or []:
        n = name.lower()
        k = "flash" if "flash" in n and "cudnn" not in n else "mem-eff" if "fmha" in n or "memeff" in n \
            else "cudnn" if "cudnn" in n else "other"
        if k not in kinds:
            kinds.append(k)
    return "+".join(kinds) or "-"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--family")
    p.add_argument("--arm", default="stock")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--arms", default="stock,shim,aa,spread,math,verify,confirm")
    p.add_argument("--shim")
    p.add_argument("--ponytail", help="the ponytail CLI: the shim arm then runs every family in one process, "
                   "each counted by `ponytail stats` snapshots (else one process per family)")
    p.add_argument("--out", required=False)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--logits-steps", type=int, default=0, help="decode steps whose logits are compared (0: all)")
    p.add_argument("--save-logits", action="store_true")
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--budget", type=float, default=0, help="seconds for the whole check (0: no limit)")
    p.add_argument("--shim-per-family", action="store_true",
                   help="the shim arm in one process per family (its exit stats) instead of one for all")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    if a.list:
        for f, v in FAMILIES.items():
            print("%-12s heads %d/%d head_dim %s  %s" % (f, v[0], v[1], v[2] or "q/k 192, v 128", v[5]))
        return 0
    if a.worker:
        return worker(a)
    os.makedirs(a.out, exist_ok=True)
    arms = a.arms.split(",")
    fams = a.families.split(",")
    unknown = [f for f in fams if f not in FAMILIES]
    if unknown:
        p.error("unknown families: %s (--list names them)" % ", ".join(unknown))
    if a.ponytail and not (os.path.isfile(a.ponytail) and os.access(a.ponytail, os.X_OK)):
        # Without the CLI no snapshot can be read: the shim arm falls back to a process per family
        # (its exit stats), and prefill launches are not counted apart (the share gets its *).
        print("families: no ponytail CLI at %s (carry build-gpu/tools/ponytail): prefill not counted "
              "apart, one shim process per family" % a.ponytail, flush=True)
        a.ponytail = None
    r = {f: {} for f in fams}
    # Under a budget each arm starts only when its estimate (from the stock arm's time) fits what
    # is left, and what did not run says so in the table; SIGTERM (check_all's limit) ends the
    # check with the table of what ran.
    t0 = time.time()
    a.left = lambda: a.budget - (time.time() - t0) if a.budget else float("inf")
    stock_secs = 0.0
    raise_on_sigterm()
    stopped = False
    try:
        # stock, the shim, then stock again (the noise band, and with stock's first run the
        # bracket the shim's step is judged against) on as many families as the time left allows,
        # at least three: the band is the run's, read from those; then the spread arms (they
        # decide the token verdicts of the families whose tokens differ), the verify arm for
        # those, and the confirm pairs for the families read slower.
        if "stock" in arms:
            ts = time.time()
            for f, v in run_arm(a, fams, "stock").items():
                r[f]["stock"] = v
            stock_secs = time.time() - ts
        per_fam = stock_secs / len(fams)  # the estimate every later arm is fitted by
        if "shim" in arms:
            run_shim(a, fams, r, per_fam)
        need = [f for f in fams if r[f].get("stock", {}).get("ok") and r[f].get("shim", {}).get("ok") and
                any(r[f]["stock"]["runs"][k]["tokens"] != r[f]["shim"]["runs"][k]["tokens"]
                    for k in ("equal", "padded"))]
        if "aa" in arms:  # right after the shim: stock before and after it brackets it in time
            judged = [f for f in fams if r[f].get("stock", {}).get("ok") and r[f].get("shim", {}).get("ok")]
            k = fit_count(a, per_fam, len(judged))
            if k < min(3, len(judged)):
                k = 0
            if k:
                for f, v in run_arm(a, judged[:k], "aa").items():
                    r[f]["aa"] = v
            for f in fams:
                r[f].setdefault("aa", not_run(a))
        for arm in ("spread", "math"):  # the yardsticks of the token verdicts
            if arm in arms and need:
                k = fit_count(a, per_fam, len(need))
                if k:
                    for f, v in run_arm(a, need[:k], arm).items():
                        r[f][arm] = v
                for f in need[k:]:
                    r[f][arm] = not_run(a)
        if "verify" in arms and need:  # launch by launch against torch's kernel
            run_shim(a, need, r, per_fam, "verify")
        if "confirm" in arms:
            run_confirm(a, fams, r, per_fam)
    except Stopped:
        stopped = True
        for f in fams:
            for arm in arms:
                if arm not in r[f] and arm not in ON_DEMAND:
                    r[f][arm] = not_run(a, "not run: the check was stopped (SIGTERM)")
    return report(a, arms, fams, r, stopped)


def report(a, arms, fams, r, stopped):
    """The family table (families.txt, families.json) and the verdict; exit status."""
    band = noise_band(r)
    first_slower = set(flagged_slower(r, band))  # the first reading; the confirm pairs decide
    expected = 4 * (a.new_tokens - 1) * LAYERS  # one attention call per layer per decode step
    rows, fails = [], []
    for fam in fams:
        st, sh, aa = r[fam].get("stock"), r[fam].get("shim"), r[fam].get("aa")
        row = dict(family=fam, what=FAMILIES[fam][5], arms={k: dict(ok=v.get("ok"), error=v.get("error"),
                                                                     secs=v.get("secs"), family_s=v.get("family_s"))
                                                           for k, v in r[fam].items()})
        if st and st.get("ok"):
            row["impl"] = st.get("attn_implementation")
            row["stock_ms"] = p50s(st)
        elif "stock" in arms and not (st or {}).get("budget"):
            fails.append("%s: stock failed, nothing judged (%s)" % (fam, (st or {}).get("error")))
        if aa and aa.get("ok"):
            row["aa_ms"] = p50s(aa)
        if sh:
            s = sh.get("stats") or {}
            if sh.get("ok") and sh.get("stats") is None:
                fails.append("%s: the shim arm left no counts (no exit stats or snapshots): not judged" % fam)
            elif sh.get("ok"):
                sw, fb, reasons, share, apart = decode_counts(s, sh.get("prefill"), expected)
                row.update(swapped=sw, fallbacks=fb, reasons=reasons, why=why_none(s), share=share,
                           kernels=s.get("attn"), internal_errors=s.get("internal_errors"), prefill_apart=apart)
            if sh.get("ok"):
                row["shim_ms"] = p50s(sh)
            if st and st.get("ok") and not sh.get("ok") and not sh.get("budget"):
                fails.append("%s: runs stock, fails under the shim (%s)" % (fam, sh.get("error")))
            if st and st.get("ok") and sh.get("ok"):
                spreads = {n: r[fam][n] for n in ("spread", "math") if n in r[fam]}
                row["tokens"], bad = compare(st, sh, spreads, tokens_only=stopped,
                                             steps=a.logits_steps or a.new_tokens)
                if bad:
                    fails.append("%s: tokens differ beyond torch's spread or not judged" % fam)
                if fam in first_slower:
                    c = confirm_ms(r[fam].get("confirm"))
                    if c is not None:
                        row["confirm_ms"] = c
                    if c is None or slower(c[0], c[1], band):
                        row["slower"] = True
                        fails.append("%s: decode step slower under the shim than stock beyond the noise band%s"
                                     % (fam, "" if c is None else ", confirmed by two more pairs"))
                    else:
                        row["slower"] = "not confirmed"
            if r[fam].get("verify") is not None:
                row["verify"], note, bad = verify_note(r[fam]["verify"])
                row["tokens"] = "%s; %s" % (row.get("tokens") or "-", note)
                if bad:
                    fails.append("%s: %s" % (fam, bad))
            if s.get("internal_errors"):
                fails.append("%s: %d shim internal errors" % (fam, s["internal_errors"]))
        rows.append(row)
    for f in os.listdir(a.out):  # the logits files are only for the comparisons above (a stopped arm's too)
        if f.endswith(".logits.pt"):
            os.unlink(os.path.join(a.out, f))
    skipped = [f for f in fams if r[f].get("shim", {}).get("budget")]
    if skipped:
        fails.append("shim arm not run (%s): %s" % (r[skipped[0]]["shim"]["error"], ",".join(skipped)))
    if "aa" in arms and band is None:  # the band needs stock again on at least one family
        fails.append("aa arm not run (%s): the noise band, and so 'slower', not judged"
                     % next((v["aa"].get("error") for v in r.values() if v.get("aa")), "no result"))
    judged = [x for x in rows if x.get("share") is not None]
    swapped = [x for x in judged if x["share"] >= 0.95]
    if "shim" in arms:
        # Issue 51's first goal: >= 90% of the families with >= 95% of decode attention swapped.
        if not judged:
            fails.append("no family ran both stock and under the shim with its counts: nothing judged")
        elif len(swapped) < -(-9 * len(judged) // 10):
            fails.append("%d of %d families with >= 95%% of decode attention swapped (goal: 90%%)"
                         % (len(swapped), len(judged)))
        if judged and not any(x.get("swapped") for x in judged):
            fails.append("no decode attention launch swapped in any family")
    with open(os.path.join(a.out, "families.json"), "w") as f:
        json.dump(dict(noise_band=band, expected_decode_launches=expected, stopped=stopped, rows=rows), f, indent=1)
    lines = ["%-12s %-6s %-14s %8s %-26s %-12s %-12s %-12s %s" % (
        "family", "impl", "kernels", "swapped", "fallbacks", "ms stock", "ms shim", "ms stock 2", "tokens vs stock")]
    ms = lambda v: "/".join("%.2f" % x if x is not None else "-" for x in v) if v else "-"
    for row in rows:
        reasons = "; ".join("%s %d" % kv for kv in (row.get("reasons") or {}).items()) or row.get("why") or "-"
        err = next(("%s: %s" % (k, (v["error"] or "")[:60]) for k, v in row["arms"].items() if not v["ok"]), "")
        lines.append("%-12s %-6s %-14s %8s %-26s %-12s %-12s %-12s %s" % (
            row["family"], row.get("impl") or "-", kernel_kinds(row.get("kernels")),
            ("%.0f%%" % (100 * row["share"]) + ("" if row.get("prefill_apart") else "*"))
            if row.get("share") is not None else "-", reasons[:26],
            ms(row.get("stock_ms")), ms(row.get("shim_ms")) + (
                " SLOWER" if row.get("slower") is True else " slower?" if row.get("slower") else ""),
            ms(row.get("aa_ms")), row.get("tokens") or err or "-"))
    lines.append("")
    n_aa = sum(1 for v in r.values() if (v.get("aa") or {}).get("ok"))
    lines.append("step ms: equal/padded batch p50; stock 2 is stock again after the shim arms; noise band %s"
                 % ("%.1f%% (from %d of %d families)" % (100 * band, n_aa, len(fams)) if band is not None
                    else "- (no aa arm: slower not judged)"))
    for row in rows:
        if row.get("confirm_ms"):
            c = row["confirm_ms"]
            lines.append("  %s: read slower, then stock/shim again twice: stock %s, shim %s ms (%s)" % (
                row["family"], ms(c[0]), ms(c[1]), "slower: confirmed" if row["slower"] is True
                else "not slower beyond the band: the first reading not confirmed"))
    lines.append("swapped: decode launches swapped / max(decode launches that reached a hook, %d = one per "
                 "attention layer per decode step); prefill forwards counted apart (* where they could not be)"
                 % expected)
    lines.append("families with >= 95%% of decode attention swapped: %d of %d judged (%d in the run)"
                 % (len(swapped), len(judged), len(rows)))
    for row in rows:
        if row.get("why"):
            lines.append("  %s: nothing reached a hook: %s" % (row["family"], row["why"]))
    if stopped:
        lines.append("stopped by SIGTERM: arms not run are marked; token differences not judged")
    lines.append("family check: %s" % verdict(arms, fails))
    text = "\n".join(lines)
    with open(os.path.join(a.out, "families.txt"), "w") as f:
        f.write(text + "\n")
    print(text, flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
