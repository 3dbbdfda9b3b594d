#!/usr/bin/env python3
"""Issue 49's goals for the host tier (PONYTAIL_HOST_TIER), on the GPU, one process at a time.

  host_tier.py --shim build-gpu/shim/libponytail_shim.so --out DIR [--stages offpath,policy,capacity,bigmodel]
      [--mults 1.5] [--no-stock] [--deadline S] [--refs-only | --ref-digests B:SHA,...]
      (capacity over calls: --mults 1.5 (the default), then --mults 2 --no-stock --stock-batch N,
      whose uncapped reference may need a call of its own: --refs-only, then --ref-digests)

capacity  Under a 24 GiB cap, workload W with prompt 2048 + 2048 new tokens (the capacity notes'
          workload, bench/records/2026-11-29-stress-and-capacity-24gib.md): stock
          (`generate.py --mem-cap 24G`) at --stock-batch (120 finished there) and one more step
          (it must fail, else the next stock batch is the base); then the shim with
          PONYTAIL_MEM_LIMIT=24G and the tier at 1.5x and 2x that batch: each must finish, with
          tokens identical to the same batch run uncapped under the shim (same attention path).
          Decode step p50 of every run, and the tier's figures from the shim's exit stats; a
          tier run passes only if the tier held bytes (else the cap did not act). Stock runs on
          torch's flash path with its default allocator settings, as the capacity notes ran it.
offpath   Everything fits (B=32, prompt 2048, 256 new tokens): today's default twice and the
          default plus the tier twice, alternating: the tier's decode step must be within the
          spread of the two default runs, or 2%, whichever is larger; tokens identical.
bigmodel  A model larger than the cap: device memory capped at 60% of what weights plus KV need;
          the shim (PONYTAIL_MEM_LIMIT at the cap, the tier; stock's flash path, as
          accelerate's arm, so that tokens can be compared) against Hugging Face accelerate's
          CPU offload (device_map="auto" with the same max_memory): tokens/s (goal: >= 2x
          accelerate's) and tokens (identical). Skipped with the reason when accelerate is not
          importable.
policy    Issue 49's point 2: stock, stock with expandable segments, and the shim's keep (default),
          expandable and async at B=32, prompt 2048, 256 new tokens, each --policy-rounds (2)
          times in alternating order: torch's peak reserved and the mean decode step of each,
          per shim policy point 2's verdict (>= 10% of stock's reserved memory saved at a step
          <= 1.02x the default's; undecided where the default's own spread is wider than 2% and
          holds the ratio), tokens identical among the shim's runs, and what expandable segments
          cost stock against the shim.
--torch-alloc expandable runs every shim arm but policy's under PONYTAIL_TORCH_ALLOC=expandable: the
tier then holds PyTorch's own mapped memory (shim/route_vmm.c), its figures in the stats' torch_vmm.
The first stage that times runs (offpath, policy) starts with one uncounted run of the default
shim: the first process of a call stepped 34% slower than the next on 2026-12-07.
Every shim run must leave the shim's exit stats (a preload that did not load fails the row
instead of passing uncapped). --deadline S: seconds for the whole check; each run is cut to what
is left and a run with no time left is a failed row "not run"; SIGTERM prints the table so far.
Prints a table last (also DIR/host_tier.txt); exit 1 when a measured goal failed.
"""
import argparse
import glob
import json
import os
import re
import sys
import time

import shim_exit_stats
from procs import Stopped, raise_on_sigterm, run_proc
from verdicts import Verdicts

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GEN = os.path.join(ROOT, "examples", "generate.py")
verdicts = Verdicts("host_tier", 46, 0)
row = verdicts.row
T0 = time.time()
DEADLINE = [0.0]  # --deadline (0: none)
# Stock as the capacity notes ran it (bench/records/2026-11-29-stress-and-capacity-24gib.md):
# torch's flash path, the caching allocator's defaults.
STOCK_ENV = {"TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"}


def child_limit():
    """Seconds a child run may take before --deadline, 20 s kept for the table; None when fewer
    than 30 would be left (the run is then not started)."""
    left = (DEADLINE[0] - (time.time() - T0) if DEADLINE[0] else float("inf")) - 20
    return left if left >= 30 else None


def plain_env(extra=None):
    """This process's environment without the preload and PYTORCH_CUDA_ALLOC_CONF (the caller's
    would override PONYTAIL_TORCH_ALLOC and stock's default), plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update(extra or {})
    return env


def run_gen(a, tag, gen_args, shim_env=None, timeout=900, stock_env=None):
    """generate.py with gen_args, stock (shim_env None; stock_env added) or under the shim with
    shim_env; its JSON plus the shim's summed exit stats ("alloc") under "shim_alloc" and the
    number of shim processes that wrote stats under "shim_procs" (0: the preload did not act)."""
    out = os.path.join(a.out, tag + ".json")
    left = child_limit()
    if left is None:
        return {"rc": "not run: no time left before --deadline", "shim_alloc": {}, "shim_procs": 0}
    env = plain_env(stock_env)
    for f in glob.glob(os.path.join(a.out, tag + ".stats.*")):  # a reused --out: not this run's
        os.remove(f)
    if shim_env is not None:
        env["PONYTAIL_TORCH_ALLOC"] = a.torch_alloc  # an arm's own shim_env may set it
        env.update(shim_env)
        env.update(shim_exit_stats.env(a.out, tag), LD_PRELOAD=os.path.abspath(a.shim))
    cmd = [sys.executable, GEN, "--json", out, "--warmup"] + gen_args
    t0 = time.time()
    with open(os.path.join(a.out, tag + ".log"), "w") as log:
        # SIGTERM first: generate.py writes what it has, the shim its exit stats.
        rc = run_proc(cmd, env, log, min(timeout, left), grace=15)
    try:
        with open(out) as f:
            r = json.load(f)
    except (OSError, ValueError):
        r = {}
    r["rc"], r["secs"] = rc, round(time.time() - t0, 1)
    stats = shim_exit_stats.read(a.out, tag)
    r["shim_alloc"], r["shim_procs"] = shim_exit_stats.alloc_sums(stats), len(stats)
    return r


def tier(al, key):
    """A host-tier figure of a shim run: the pool's plus that of PyTorch's own mapped memory
    (expandable segments, shim/route_vmm.c: peak_host_bytes for the pool's peak_tier_bytes)."""
    vkey = {"peak_tier_bytes": "peak_host_bytes"}.get(key, key)
    return al.get(key, 0) + al.get("torch_vmm." + vkey, 0)


def step(r):
    return (r.get("decode_step_ms") or {}).get("p50")


def finished(r):
    return r.get("rc") == 0 and not r.get("oom") and r.get("token_ids_sha256")


def shim_ok(r):
    """A shim run finished and the shim wrote its exit stats (the preload acted)."""
    return bool(finished(r) and r.get("shim_procs"))


def why(r):
    """A failed run in a line: its exit, out-of-memory phase, shim processes, and for a run cut
    short the steps it made and the step time it had reached (decode_profile_ms' last block)."""
    prof = r.get("decode_profile_ms") or []
    cut = ", %d steps done, last 128 at %.1f ms a step" % (r.get("decode_steps_done") or 0, prof[-1]) if prof else ""
    return "rc %s, oom %s, shim stats from %s process(es)%s" % (r.get("rc"), r.get("oom_phase"),
                                                             r.get("shim_procs"), cut)


def tier_env(a, limit=None):
    e = {"PONYTAIL_HOST_TIER": a.tier}
    if limit:
        e["PONYTAIL_MEM_LIMIT"] = limit
    return e


def capacity(a):
    w = ["--prompt", "2048", "--new-tokens", str(a.new_tokens)]
    b0 = a.stock_batch
    if a.no_stock:  # stock's largest batch measured in an earlier call (a call holds ~600 s)
        row("stock, cap %s: largest batch that finishes" % a.cap, "%d (--stock-batch, not run here)" % b0)
    else:
        st = run_gen(a, "cap-stock-b%d" % b0, w + ["--batch", str(b0), "--mem-cap", a.cap], stock_env=STOCK_ENV)
        row("stock, cap %s, batch %d" % (a.cap, b0),
            "finished" if finished(st) else "OOM/failed (%s)" % st.get("oom_phase"), bool(finished(st)))
        nxt = b0 + 8
        st2 = run_gen(a, "cap-stock-b%d" % nxt, w + ["--batch", str(nxt), "--mem-cap", a.cap], stock_env=STOCK_ENV)
        row("stock, cap %s, batch %d (must not fit)" % (a.cap, nxt),
            "finished" if finished(st2) else "OOM (%s)" % st2.get("oom_phase") if st2.get("oom")
            else "failed, not by out-of-memory (%s)" % why(st2), bool(st2.get("oom")))
    for mult in a.mults:
        b = -(-int(b0 * mult) // 8) * 8  # up to a multiple of 8: at least mult x stock's batch
        # The uncapped reference first: bounded in time, where the tier run is not. A batch whose
        # reference and tier run do not fit one call together (2x: estimated ~450 s for the tier
        # run alone) takes its reference from an earlier call (--ref-digests) or runs only it
        # (--refs-only).
        if b in a.ref_digests:
            ref = {"rc": 0, "token_ids_sha256": a.ref_digests[b], "shim_procs": 1, "given": True}
            row("  uncapped reference, batch %d" % b, "digest from --ref-digests (an earlier call)")
        else:
            ref = run_gen(a, "cap-ref-b%d" % b, w + ["--batch", str(b)], {})
            row("  uncapped reference, batch %d" % b, "digest %s, step p50 %s ms" % (
                ref.get("token_ids_sha256"), step(ref)) if shim_ok(ref) else "FAILED (%s)" % why(ref),
                True if a.refs_only and shim_ok(ref) else None if shim_ok(ref) else False)
        if a.refs_only:
            continue
        sh = run_gen(a, "cap-tier-b%d" % b, w + ["--batch", str(b)], tier_env(a, a.cap))
        al = sh.get("shim_alloc", {})
        same = shim_ok(sh) and (ref.get("given") or shim_ok(ref)) and sh["token_ids_sha256"] == ref["token_ids_sha256"]
        used = tier(al, "peak_tier_bytes") > 0
        row("shim + tier, cap %s, batch %d (%.1fx)" % (a.cap, b, mult),
            "finished, step p50 %s ms, last 128 steps %s ms (uncapped %s ms), tier peak %.1f GiB, moved %.1f GiB, "
            "deferred %d" % (step(sh), (sh.get("decode_profile_ms") or ["-"])[-1], step(ref) or "-",
                             tier(al, "peak_tier_bytes") / 2**30, tier(al, "tier_moved_bytes") / 2**30,
                             tier(al, "tier_deferrals")) + ("" if used else " (the tier held nothing: the cap did not act)")
            if shim_ok(sh) else "FAILED (%s)" % why(sh), shim_ok(sh) and used)
        row("  tokens vs uncapped (batch %d)" % b, "identical" if same else "DIFFER or missing", bool(same))


W32 = ["--batch", "32", "--prompt", "2048", "--new-tokens", "256"]
WARMED = [False]


def warm_machine(a):
    """One uncounted run of W32 under the default shim before the first timed one of the check:
    the first process of a call stepped 34% slower than the next (off the path on 2026-12-07:
    14.11 against 10.54 ms, bench/records/2026-12-07-host-tier-offpath-policy.md), which widened
    the band every comparison after it is judged by."""
    if not WARMED[0]:
        WARMED[0] = True
        run_gen(a, "warm-machine", W32, {})


def offpath(a):
    warm_machine(a)
    d, t = [], []
    for i in range(2):
        d.append(run_gen(a, "off-default-%d" % i, W32, {}))
        t.append(run_gen(a, "off-tier-%d" % i, W32, tier_env(a)))
    sd = [step(r) if shim_ok(r) else None for r in d]
    stt = [step(r) if shim_ok(r) else None for r in t]
    if None in sd or None in stt:
        row("off the path: decode step", "a run failed: %s / %s" % (sd, stt), False)
        return
    spread = abs(sd[0] - sd[1]) / min(sd)
    band = max(spread, 0.02)
    ratio = (sum(stt) / 2) / (sum(sd) / 2)
    row("off the path: step default %s, tier %s ms" % (["%.2f" % x for x in sd], ["%.2f" % x for x in stt]),
        "tier/default %.4f (band %.4f: spread %.4f or 2%%)" % (ratio, band, spread), ratio <= 1 + band)
    same = all(r.get("token_ids_sha256") == d[0].get("token_ids_sha256") for r in d + t)
    row("off the path: tokens", "identical" if same else "DIFFER", same)
    row("off the path: tier bytes used", "%d" % max(tier(r["shim_alloc"], "peak_tier_bytes") for r in t),
        all(tier(r["shim_alloc"], "peak_tier_bytes") == 0 for r in t))


POLICY_ARMS = [("stock", None), ("stock expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
               ("shim default", {"PONYTAIL_TORCH_ALLOC": "keep"}),
               ("shim expandable", {"PONYTAIL_TORCH_ALLOC": "expandable"}),
               ("shim async", {"PONYTAIL_TORCH_ALLOC": "async"})]


def policy_order(rounds):
    """Each round runs every arm once; odd rounds run them in reverse, so that a drift over the
    call (clocks, caches) falls on both sides of every comparison."""
    names = [n for n, _ in POLICY_ARMS]
    return [n for i in range(rounds) for n in (names if i % 2 == 0 else names[::-1])]


def mean_or_none(xs):
    return sum(xs) / len(xs) if xs and None not in xs else None


def policy_verdict(saved, ratio, band):
    """Point 2's test for one shim policy: saves >= 10% of stock's reserved memory with a decode
    step <= 1.02x the default's. A band (the default's own run-to-run spread) wider than 2% cannot
    show 1.02x either way: then a ratio inside it is undecided."""
    if saved is None or ratio is None:
        return "not measured"
    if saved < 0.10:
        return "saves under 10%"
    if ratio <= 1.02:
        return "meets point 2 (>= 10%, step <= 1.02x)"
    if band > 0.02 and ratio <= 1 + band:
        return "undecided: step %.3fx is within the default's own spread (%.1f%%)" % (ratio, 100 * band)
    return "step over 1.02x"


def policy(a):
    """Point 2 of issue 49: the memory of each allocator policy at B=32 (prompt 2048, 256 new
    tokens), stock and under the shim, and whether expandable segments cost the shim more than
    they cost stock: torch's peak reserved, the decode step (the mean over --policy-rounds runs,
    in alternating order), tokens."""
    warm_machine(a)
    env = dict(POLICY_ARMS)
    runs = {n: [] for n in env}
    for name in policy_order(a.policy_rounds):
        tag = "policy-%s-%d" % (name.replace(" ", "-"), len(runs[name]))
        if name.startswith("stock"):  # stock, with its allocator setting if any: no preload
            runs[name].append(run_gen(a, tag, W32, None, stock_env=env[name]))
        else:
            runs[name].append(run_gen(a, tag, W32, env[name]))
    ok = lambda n, r: finished(r) and (n.startswith("stock") or shim_ok(r))
    steps = {n: [step(r) if ok(n, r) else None for r in rs] for n, rs in runs.items()}
    rsv = {n: max((r.get("peak_reserved_bytes") or 0 for r in rs), default=0) or None for n, rs in runs.items()}
    mean = {n: mean_or_none(v) for n, v in steps.items()}
    d = [x for x in steps["shim default"] if x]
    band = max(abs(max(d) - min(d)) / min(d), 0.02) if len(d) >= 2 else 0.02
    for name in env:
        saved = 1 - rsv[name] / rsv["stock"] if rsv[name] and rsv["stock"] else None
        rel = mean[name] / mean["shim default"] if mean[name] and mean["shim default"] else None
        verdict = policy_verdict(saved, rel, band) if name in ("shim expandable", "shim async") else None
        row("policy %-16s" % name, "step %s ms (mean %s), peak reserved %s MiB%s%s%s" % (
            "/".join("%.2f" % x if x else "-" for x in steps[name]), "%.2f" % mean[name] if mean[name] else "-",
            rsv[name] >> 20 if rsv[name] else "-",
            ", saves %.1f%% of stock's" % (100 * saved) if saved is not None else "",
            ", step %.3fx the default's" % rel if rel and name.startswith("shim") else "",
            "; " + verdict if verdict else ""), None)
    # The shim's allocator policy must not change tokens (all its runs take its attention path).
    # Stock's are shown, not judged: stock runs SDPA on cuDNN here, which differs between two
    # stock processes (on 2026-12-07 stock and stock expandable gave two digests).
    for kind in ("stock", "shim"):
        dg = {r.get("token_ids_sha256") for n, rs in runs.items() if n.startswith(kind) for r in rs if finished(r)}
        row("policy: tokens of the %s runs" % kind, "identical" if len(dg) == 1 else "%d digests" % len(dg),
            len(dg) == 1 if kind == "shim" else None)
    row("policy: the default's own spread", "%.1f%% (%d runs)" % (100 * band, len(d)), None)
    se, s0, he, h0 = (mean[k] for k in ("stock expandable", "stock", "shim expandable", "shim default"))
    if se and s0 and he and h0:
        row("expandable's step cost: stock / shim", "%.3fx / %.3fx" % (se / s0, he / h0), None)


BIG = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--head-dim", "128",
       "--intermediate", "14336", "--batch", "8", "--prompt", "1024", "--new-tokens", "32"]


def bigmodel(a):
    try:
        import accelerate  # noqa: F401
    except ImportError:
        row("bigmodel: accelerate CPU offload", "SKIP: accelerate is not importable here", None)
        return
    # Weights ~14.5 GiB (bf16, 7.2 B parameters with a 32000 vocabulary) + KV (8 x 1056 tokens,
    # 128 KiB per token) ~1 GiB: 60% of that is the cap.
    need = 7.25e9 * 2 + 8 * 1056 * 131072
    cap = int(need * 0.6)
    cap_s = "%dM" % (cap >> 20)
    # The shim on stock's flash path (nothing swapped), so that its tokens can equal accelerate's
    # and its speed-up is the memory placement's alone. Flash, not torch's default cuDNN: cuDNN's
    # SDPA gives other logits in two stock processes, flash is bit for bit
    # (bench/records/2026-12-07-same-path-settled.md); accelerate's arm takes flash too.
    env = dict(tier_env(a, cap_s), PONYTAIL_TORCH_SDPA="flash", PONYTAIL_ATTN="off")
    sh = run_gen(a, "big-tier", BIG, env, timeout=1200)
    acc = run_accelerate(a, cap)
    ok = shim_ok(sh) and tier(sh["shim_alloc"], "peak_tier_bytes") > 0 and acc.get("tokens_per_s")
    ratio = sh["tokens_per_s"] / acc["tokens_per_s"] if ok else None
    row("bigmodel: cap %s, shim+tier tokens/s" % cap_s, "%s (accelerate %s): %s" % (
        sh.get("tokens_per_s"), acc.get("tokens_per_s"), "%.2fx" % ratio if ratio else "-"),
        bool(ratio and ratio >= 2.0))
    if not ok:
        row("  bigmodel: why no ratio", "shim: %s, tier peak %d bytes; accelerate: %s" % (
            why(sh), tier(sh["shim_alloc"], "peak_tier_bytes"), acc.get("error", "no result")), False)
    same = ok and sh.get("token_ids_sha256") == acc.get("token_ids_sha256")
    row("bigmodel: tokens vs accelerate", "identical" if same else "DIFFER or missing", bool(same))
    # Where the time goes, not a goal: the tier's host part is read by the GPU's kernels over
    # PCIe at every pass over the weights (a prefill's GEMMs may read a weight tile more than
    # once), accelerate copies each offloaded layer to the GPU once per forward.
    row("bigmodel: prefill s / decode step p50 ms", "shim %s / %s, accelerate %s / %s" % (
        "%.2f" % sh["prefill_s"] if sh.get("prefill_s") is not None else "-", step(sh),
        "%.2f" % acc["prefill_s"] if acc.get("prefill_s") is not None else "-", step(acc)))


def run_accelerate(a, cap):
    """The same model and prompts (generate.py's construction, so the same random weights and
    token ids) with accelerate's device_map="auto" and max_memory {0: cap, cpu: 512 GiB}. The
    weights are drawn on the GPU, as generate.py draws them (the CPU's generator gives other
    weights from the same seed), then moved to the CPU before accelerate places them."""
    out = os.path.join(a.out, "big-accelerate.json")
    # generate.py's own model and inputs, built on the CPU, then dispatched by accelerate.
    code = r'''
import hashlib, json, sys, time, torch
sys.path.insert(0, %(ex)r)
import generate as g
from accelerate import dispatch_model, infer_auto_device_map
from transformers import LogitsProcessor, LogitsProcessorList
stamps = []
class Stamp(LogitsProcessor):  # as generate.py's StepTimer: the prefill's end, then each step
    def __call__(self, input_ids, scores):
        if not stamps:
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        return scores
args = g.parse_args(%(args)r + ["--json", %(out)r])
s, extra = g.settings_from(args)
model = g.make_model(torch, s, extra, torch.device("cuda", 0), s["prompt"] + s["new_tokens"]).to("cpu")
torch.cuda.empty_cache()
dm = infer_auto_device_map(model, max_memory={0: %(cap)d, "cpu": 512 << 30},
                           no_split_module_classes=["LlamaDecoderLayer"])
model = dispatch_model(model, device_map=dm)
ids, mask = g.make_inputs(torch, s, torch.device("cuda", 0))
with torch.no_grad():
    # The warm-up as generate.py's --warmup: the measured prompt, two new tokens.
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, min_new_tokens=2, do_sample=False,
                   pad_token_id=0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=s["new_tokens"],
                         min_new_tokens=s["new_tokens"], do_sample=False, pad_token_id=0,
                         logits_processor=LogitsProcessorList([Stamp()]))
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
steps = sorted((b - a) * 1e3 for a, b in zip(stamps, stamps[1:]))
new = out[:, ids.shape[1]:].tolist()
# generate.py's digest of the new token ids, so the two can be compared.
digest = hashlib.sha256(json.dumps(new, separators=(",", ":")).encode()).hexdigest()
json.dump(dict(tokens_per_s=len(new) * len(new[0]) / dt, total_s=dt, token_ids_sha256=digest,
               prefill_s=stamps[0] - t0 if stamps else None,
               decode_step_ms=dict(p50=steps[len(steps) // 2] if steps else None),
               offloaded=sorted(set(str(v) for v in dm.values()))), open(%(out)r, "w"))
''' % dict(ex=os.path.dirname(GEN), args=BIG, out=out, cap=cap)
    left = child_limit()
    if left is None:
        return {"error": "not run: no time left before --deadline"}
    if os.path.exists(out):  # a reused --out: not this run's
        os.remove(out)
    with open(os.path.join(a.out, "big-accelerate.log"), "w") as log:
        rc = run_proc([sys.executable, "-c", code], plain_env(STOCK_ENV), log, min(1800, left),  # flash, as the shim arm
                      grace=15)
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"error": "rc %s, no result (big-accelerate.log)" % rc}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shim", required=True)
    p.add_argument("--out", default=os.environ.get("OUT", "host-tier-out"))
    stage_fns = {"offpath": offpath, "policy": policy, "capacity": capacity, "bigmodel": bigmodel}
    p.add_argument("--stages", default="offpath", help="comma- or space-separated: " + ",".join(stage_fns))
    p.add_argument("--tier", default="96G", help="PONYTAIL_HOST_TIER of the shim arms")
    p.add_argument("--cap", default="24G")
    p.add_argument("--torch-alloc", choices=("keep", "expandable"), default="keep",
                   help="PONYTAIL_TORCH_ALLOC of the shim runs of capacity, offpath and bigmodel (expandable: "
                        "the tier under PyTorch's own mapped memory, shim/route_vmm.c; policy's arms set their own)")
    p.add_argument("--stock-batch", type=int, default=120)
    p.add_argument("--new-tokens", type=int, default=2048)
    p.add_argument("--mults", type=lambda v: [float(x) for x in v.split(",")], default=[1.5],
                   help="capacity: multiples of --stock-batch run under the shim with the tier (2x in a "
                        "call of its own: --mults 2 --no-stock --stock-batch N)")
    p.add_argument("--no-stock", action="store_true",
                   help="capacity: take --stock-batch as measured (an earlier call) and run no stock arm")
    p.add_argument("--deadline", type=float, default=0, help="seconds for the whole check (0: none)")
    p.add_argument("--policy-rounds", type=int, default=2,
                   help="policy: runs of each arm (alternating order); the default's spread is the band")
    p.add_argument("--ref-digests", default="", type=lambda v: {int(x.split(":")[0]): x.split(":")[1]
                                                                for x in v.split(",") if x},
                   help="capacity: BATCH:SHA256,... the uncapped runs' token digests from an earlier call")
    p.add_argument("--refs-only", action="store_true",
                   help="capacity: run only the uncapped references (their digests for --ref-digests)")
    a = p.parse_args()
    stages = [x for x in re.split(r"[,\s]+", a.stages) if x]
    bad = [x for x in stages if x not in stage_fns]
    if bad or not stages:
        p.error("--stages: unknown %s (stages: %s)" % (",".join(bad) or "(none)", ",".join(stage_fns)))
    DEADLINE[0] = a.deadline
    os.makedirs(a.out, exist_ok=True)
    raise_on_sigterm()  # check_all's limit: unwind to the table
    try:
        for st in stages:
            stage_fns[st](a)
    except Stopped:
        row("stopped by SIGTERM", "the rows above are what ran", False)
    return verdicts.finish(a.out)


if __name__ == "__main__":
    sys.exit(main())
