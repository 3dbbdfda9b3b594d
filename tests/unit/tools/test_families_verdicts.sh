#!/usr/bin/env bash
# The verdicts of tests/gpu/checks/families.py (issue 51's family table), which CI cannot run on a
# GPU: the stock-against-stock noise band, "slower" as the mean of the two batches' shim/stock
# ratios beyond it, the kernels column, and the token comparison of identical runs (no torch
# needed there); the decode share with the prefill forwards counted apart and a floor of one
# launch per layer per decode step; the whole report's verdict: a run that judged nothing, a
# stock failure, or fewer than 90% of families swapped fails; differing tokens without a spread
# arm are not a pass. Usage: test_families_verdicts.sh FAMILIES_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$script" <<'PY'
import importlib.util, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))  # its helpers beside it (procs.py)
spec = importlib.util.spec_from_file_location("families", sys.argv[1])
F = importlib.util.module_from_spec(spec)
spec.loader.exec_module(F)

def run(e, p):
    return dict(ok=True, runs=dict(equal=dict(step_ms_p50=e, tokens=[[1, 2]], logits=None),
                                   padded=dict(step_ms_p50=p, tokens=[[1, 2]], logits=None)))
# Band: the largest |aa/stock - 1| of the run, at least 2%; None without a second stock run.
r = {"a": {"stock": run(10, 20), "aa": run(10.5, 19.0)}, "b": {"stock": run(4, 4), "aa": run(4.04, 4)}}
assert abs(F.noise_band(r) - 0.05) < 1e-12, F.noise_band(r)
assert F.noise_band({"a": {"stock": run(10, 10), "aa": run(10, 10)}}) == 0.02
assert F.noise_band({"a": {"stock": run(10, 10)}}) is None
# Slower: mean ratio beyond the band; one batch alone 30% slower moves the mean by 15%.
assert F.slower([10, 10], [11, 10.6], 0.05)
assert not F.slower([10, 10], [10.8, 10.0], 0.05)
assert F.slower([10, 10], [13, 10], 0.1)
assert not F.slower([10, 10], [13, 10], None)
assert not F.slower([10, None], [20, 20], 0.05)
# Stock's step to judge the shim by: the mean of stock before the shim arm and stock after it (aa),
# batch by batch; stock's alone without aa or where aa has no figure.
assert F.stock_ref(run(10, 20), run(8, 30)) == [9.0, 25.0]
assert F.stock_ref(run(10, 20), None) == [10, 20]
assert F.stock_ref(run(10, 20), dict(run(8, None), ok=True)) == [9.0, 20]
assert F.stock_ref(run(10, 20), dict(ok=False)) == [10, 20]
# Kernels by kind, in order of first appearance.
assert F.kernel_kinds([("_ZN13pytorch_flash24flash_fwd_splitkv_kernel", 9), ("_Z41fmha_cutlassF_bf16", 3),
                       ("cudnn_generated_fort_native_sdpa_sm90", 1), ("_ZN13pytorch_flash32combine", 9)]) \
    == "flash+mem-eff+cudnn"
assert F.kernel_kinds(None) == "-"
# The last word: a run without the shim arm judged nothing, and says so instead of PASS.
assert F.verdict(["stock", "shim", "aa"], []) == "PASS"
assert F.verdict(["stock", "aa"], []) == "no shim arm: nothing judged"
assert F.verdict(["stock", "shim"], ["x: slower"]) == "FAIL: x: slower"
# Identical tokens compare "same" in both batches without reading logits.
text, bad = F.compare(run(1, 1), run(1, 1), None)
assert text == "equal same; padded same" and not bad, text
# Logits compare only where both runs had the same inputs: each row up to and including the step
# where its tokens part (a flip at step 1 of row 1 leaves steps 0-1 of it), all steps of a row
# that never parts, capped at the steps saved.
assert F.common_steps([[5, 6, 7, 8], [5, 6, 7, 8]], [[5, 6, 7, 8], [5, 9, 7, 8]], 4) == [4, 2]
assert F.common_steps([[5, 6], [1, 2]], [[4, 6], [1, 2]], 4) == [1, 4]
assert F.common_steps([[1] * 9], [[1] * 8 + [2]], 4) == [4]  # parts after the saved steps
# compare() hands those steps to max_diff for both the shim and the spread arm, and judges
# within spread at <= 2x the spread's difference.
seen = []
def fake_max_diff(a, b, rows_steps=None):
    seen.append((a, b, rows_steps))
    return {"sh": 0.05, "sp": 0.03}[b]
real_max_diff, F.max_diff = F.max_diff, fake_max_diff
def lrun(tokens, tag):
    return dict(ok=True, runs={k: dict(step_ms_p50=1, tokens=tokens, logits=tag) for k in ("equal", "padded")})
text, bad = F.compare(lrun([[1, 2, 3], [4, 5, 6]], "st"), lrun([[1, 2, 3], [4, 7, 6]], "sh"),
                      {"spread": lrun([[1, 2, 9], [4, 5, 6]], "sp")}, steps=3)
assert not bad and text.startswith("equal within spread (logit diff 0.05 vs spread 0.03)"), text
assert seen[0] == ("st", "sh", [3, 2]) and seen[1] == ("st", "sp", [3, 3]), seen
F.max_diff = lambda a, b, rows_steps=None: {"sh": 0.07, "sp": 0.03, "m": 0.04}[b]
text, bad = F.compare(lrun([[1, 2]], "st"), lrun([[1, 3]], "sh"), {"spread": lrun([[1, 2]], "sp")}, steps=2)
assert bad and "DIFFERS" in text, text
# Two spread arms: the bar is the larger one's (math 0.04: 0.07 <= 0.08), each named in the text;
# a spread arm that failed is no yardstick, and none left is "not judged", a failure.
text, bad = F.compare(lrun([[1, 2]], "st"), lrun([[1, 3]], "sh"),
                      {"spread": lrun([[1, 2]], "sp"), "math": lrun([[1, 2]], "m")}, steps=2)
assert not bad and text.startswith("equal within spread (logit diff 0.07 vs spread 0.03, math 0.04)"), text
text, bad = F.compare(lrun([[1, 2]], "st"), lrun([[1, 3]], "sh"),
                      {"spread": lrun([[1, 2]], "sp"), "math": dict(ok=False, error="boom")}, steps=2)
assert bad and "vs spread 0.03)" in text, text
text, bad = F.compare(lrun([[1, 2]], "st"), lrun([[1, 3]], "sh"), {"spread": dict(ok=False, error="boom")}, steps=2)
assert bad and "not judged (spread arm boom)" in text, text
F.max_diff = real_max_diff
# One shim process for every family: each family's figures are the difference of the stats
# snapshots around it (`ponytail stats --json`); a kernel absent before counts from zero.
FL = "_ZN13pytorch_flash24flash_fwd_splitkv_kernelI23Flash"
ME = "_Z41fmha_cutlassF_bf16_aligned_64x128_rf_sm80N22PyTorchMemEff"
def snap(sw, fb, reasons, top, hooked, ie=0):
    return dict(kernels=dict(swapped=sw, fallbacks=fb, fallback_reasons=reasons,
                             top=[dict(name=n, launches=c) for n, c in top],
                             hooked=[dict(name=n, launches=c) for n, c in hooked]), internal_errors=ie)
s1 = snap(100, 4, {"cuDNN kept": 4}, [("gemm", 900), (FL, 100)], [(FL, 100)])
s2 = snap(300, 6, {"cuDNN kept": 5, "head_dim": 1}, [("gemm", 2000), (FL, 100)], [(FL, 100), (ME, 200)], ie=1)
d = F.summarize(F.stats_delta(s1, s2))
assert d["swapped"] == 200 and d["fallbacks"] == 2, d
assert d["reasons"] == {"cuDNN kept": 1, "head_dim": 1}, d["reasons"]
assert d["attn"] == [(ME[:60], 200)], d["attn"]  # the flash kernel did not run in between
assert d["internal_errors"] == 1
first = F.summarize(F.stats_delta(None, s1))  # no baseline: everything so far
assert first["swapped"] == 100 and first["attn"] == [(FL[:60], 100)], first
assert F.summarize(None) is None
# Why nothing was swapped or refused: no SDPA call, cuDNN kept for decode, math (no fused kernel);
# from the SDPA policy's counters between the snapshots.
def sd(**k):
    return dict(kernels=dict(swapped=0, fallbacks=0, fallback_reasons={}, top=[]), internal_errors=0,
                sdpa_policy=dict(k))
assert F.why_none(d) is None  # launches reached a hook
assert F.why_none(F.summarize(F.stats_delta(sd(calls=5), sd(calls=5)))) == "no SDPA call (eager or custom attention)"
assert F.why_none(F.summarize(F.stats_delta(sd(calls=5), sd(calls=9, decode_kept_cudnn=4)))).startswith(
    "decode kept on cuDNN")
assert F.why_none(F.summarize(F.stats_delta(sd(calls=5), sd(calls=9, torch_chose_other=4)))) == \
    "SDPA on torch's math path (no fused kernel)"
# own_stats asks `ponytail stats --json` about this very process; None when the CLI refuses.
import os, stat, tempfile
d = tempfile.mkdtemp()
fake = os.path.join(d, "ponytail")
with open(fake, "w") as f:
    f.write('#!/bin/sh\n[ "$1 $2 $3" = "stats --json %d" ] || exit 1\n'
            '[ -z "$LD_PRELOAD" ] || exit 1\necho \'{"kernels": {"swapped": 7}}\'\n' % os.getpid())
os.chmod(fake, stat.S_IRWXU)
os.environ["LD_PRELOAD"] = ""  # dropped for the CLI either way
assert F.own_stats(fake) == {"kernels": {"swapped": 7}}, F.own_stats(fake)
assert F.own_stats("/bin/false") is None
assert F.own_stats(os.path.join(d, "missing")) is None
# Decode share: the prefill forwards' swaps and fallbacks come off; the denominator is at least
# one launch per attention layer per decode step (math-path calls reach no hook).
summ = dict(swapped=130, fallbacks=20, reasons={"seqlen_q > 16 (prefill)": 16, "head_dim": 4})
pre = F.sum_deltas([dict(kernels=dict(swapped=2, fallbacks=8, fallback_reasons={"seqlen_q > 16 (prefill)": 8}))] * 2)
sw, fb, reasons, share, apart = F.decode_counts(summ, pre, 100)
assert (sw, fb, reasons, apart) == (126, 4, {"head_dim": 4}, True), (sw, fb, reasons)
assert abs(share - 126 / 130) < 1e-12, share
sw, fb, reasons, share, apart = F.decode_counts(dict(swapped=4, fallbacks=0), pre, 100)
assert share == 0.0 and not reasons, (share, reasons)  # 4 swaps, all prefill: nothing of decode
assert F.decode_counts(dict(swapped=50, fallbacks=0), None, 100)[3:] == (0.5, False)
# The report: fake arms' results, a temporary --out.
import argparse, glob, json
def arm(tokens=((1, 2),), ms=10.0, stats=None, prefill=None, ok=True, error=None):
    v = dict(ok=ok, error=error, attn_implementation="sdpa",
             runs={k: dict(step_ms_p50=ms, tokens=[list(t) for t in tokens], logits=None) for k in ("equal", "padded")})
    if stats is not None:
        v["stats"] = stats
    if prefill is not None:
        v["prefill"] = prefill
    return v
A = argparse.Namespace(out=tempfile.mkdtemp(), new_tokens=4, logits_steps=4)  # expected = 4 * 3 * LAYERS
exp = 4 * 3 * F.LAYERS
good = dict(swapped=exp, fallbacks=0, reasons={}, attn=[], internal_errors=0)
ARMS = ["stock", "shim", "aa"]
def rep(r, arms=ARMS, stopped=False):
    rc = F.report(A, arms, list(r), r, stopped)
    text = open(os.path.join(A.out, "families.txt")).read()
    return rc, text.splitlines()[-1]
ok = {"llama": dict(stock=arm(), shim=arm(stats=good), aa=arm())}
assert rep(ok) == (0, "family check: PASS"), rep(ok)
# The noise band from some families (the aa arm cut to what the budget left) still judges;
# from none, 'slower' is not judged: a failure.
part = dict(ok, qwen2=dict(stock=arm(), shim=arm(stats=good), aa=dict(ok=False, error="not run", budget=True)))
F.FAMILIES["qwen2"] = F.FAMILIES["llama"]
assert rep(part) == (0, "family check: PASS"), rep(part)
rc, last = rep({"llama": dict(stock=arm(), shim=arm(stats=good), aa=dict(ok=False, error="not run", budget=True))})
assert rc == 1 and "aa arm not run" in last, last
# Nothing judged: the shim arm has no counts (its stats missing) -> FAIL, not PASS.
rc, last = rep({"llama": dict(stock=arm(), shim=arm(), aa=arm())})
assert rc == 1 and "nothing judged" in last, last
# Stock failed: FAIL with the reason.
rc, last = rep(dict(ok, gemma=dict(stock=arm(ok=False, error="boom"), shim=arm(stats=good), aa=arm())))
assert rc == 1 and "gemma: stock failed" in last, last
# 9 of 10 swapped meets 90%; 8 of 10 does not; no swap at all fails.
none = dict(good, swapped=0, fallbacks=exp)
r10 = {"f%d" % i: dict(stock=arm(), shim=arm(stats=good), aa=arm()) for i in range(9)}
F.FAMILIES.update({k: F.FAMILIES["llama"] for k in list(r10) + ["f9"]})
r10["f9"] = dict(stock=arm(), shim=arm(stats=none), aa=arm())
assert rep(r10)[0] == 0, rep(r10)
r10["f8"] = dict(stock=arm(), shim=arm(stats=none), aa=arm())
rc, last = rep(r10)
assert rc == 1 and "8 of 10 families" in last, last
rc, last = rep({"llama": dict(stock=arm(), shim=arm(stats=none), aa=arm())})
assert rc == 1 and "no decode attention launch swapped" in last, last
# Tokens that differ with no spread arm: not judged, a failure; a stopped check says so.
rc, last = rep({"llama": dict(stock=arm(), shim=arm(tokens=((1, 3),), stats=good), aa=arm())})
assert rc == 1 and "not judged" in last, last
rc, last = rep({"llama": dict(stock=arm(), shim=arm(tokens=((1, 3),), stats=good), aa=arm())}, stopped=True)
assert rc == 1, last
# Arm kinds: a confirm arm runs its kind again; the verify arm preloads the shim in verify mode,
# stock-like arms preload nothing.
assert F.arm_kind("shim.c2") == "shim" and F.arm_kind("math") == "math"
A.shim = "/x/libponytail_shim.so"
os.environ["LD_PRELOAD"] = "/elsewhere.so"
e = F.arm_env(A, "verify", "t")
assert e["LD_PRELOAD"] == A.shim and e["PONYTAIL_ATTN"] == "verify" and e["PONYTAIL_STATS"] == "json", e
assert e["PONYTAIL_STATS_FILE"] == os.path.join(A.out, "t.stats.json")
assert F.arm_env(A, "shim.c1", "t")["LD_PRELOAD"] == A.shim and "PONYTAIL_ATTN" not in F.arm_env(A, "shim", "t")
assert "LD_PRELOAD" not in F.arm_env(A, "math", "t") and "LD_PRELOAD" not in F.arm_env(A, "stock.c2", "t")
# The verify arm: launches out of tolerance fail the family whatever its tokens; all within
# tolerance is a note beside the token verdict; an arm that verified nothing says so.
def with_verify(v, ok=True):
    return {"llama": dict(stock=arm(), shim=arm(stats=good), aa=arm(),
                          verify=dict(ok=ok, stats=v, error=None if ok else "rc 1"))}
rc, last = rep(with_verify(dict(verified=48, verify_failures=0, swapped=48)))
assert rc == 0, last
row = json.load(open(os.path.join(A.out, "families.json")))["rows"][0]
assert row["tokens"].endswith("verify: 48 of 48 launches within tolerance"), row["tokens"]
rc, last = rep(with_verify(dict(verified=48, verify_failures=3, swapped=48)))
assert rc == 1 and "llama: 3 of 48 swapped launches out of tolerance" in last, last
rep(with_verify(dict(verified=0, verify_failures=0, swapped=0)))
assert "verify arm verified nothing" in json.load(open(os.path.join(A.out, "families.json")))["rows"][0]["tokens"]
rep(with_verify(None, ok=False))
assert "verify arm rc 1" in json.load(open(os.path.join(A.out, "families.json")))["rows"][0]["tokens"]
rep(with_verify(None))
assert "verify arm left no counts" in json.load(open(os.path.join(A.out, "families.json")))["rows"][0]["tokens"]
# The verify arm's counts per family in one process: the hooks' verified and verify_failures
# between two snapshots.
h1, h2 = dict(snap(10, 0, {}, [], []), hooks=dict(verified=100, verify_failures=1)), \
    dict(snap(20, 0, {}, [], []), hooks=dict(verified=596, verify_failures=1))
d = F.summarize(F.stats_delta(h1, h2))
assert d["verified"] == 496 and d["verify_failures"] == 0 and d["swapped"] == 10, d
assert F.summarize(F.stats_delta(None, h1))["verify_failures"] == 1
# run_shim over the verify arm: one process for both families, each counted from the snapshots
# around it; a family whose snapshot is missing runs again alone (its exit stats).
V = argparse.Namespace(out=tempfile.mkdtemp(), budget=0, ponytail="pt", shim_per_family=False,
                       left=lambda: float("inf"))
calls = []
def fake_run_arm(a, families, arm):
    calls.append((tuple(families), arm))
    if len(families) > 1:
        for name, hv in (("_start", 0), ("llama", 496)):  # qwen2's snapshot missing
            with open(os.path.join(a.out, "%s.%s.snap.json" % (name, arm)), "w") as f:
                json.dump(dict(snap(0, 0, {}, [], []), hooks=dict(verified=hv, verify_failures=0)), f)
        return {f: dict(ok=True) for f in families}
    return {families[0]: dict(ok=True, stats=dict(verified=7, verify_failures=0))}
real_run_arm, F.run_arm = F.run_arm, fake_run_arm
rv = {"llama": {}, "qwen2": {}}
F.run_shim(V, ["llama", "qwen2"], rv, 10.0, "verify")
F.run_arm = real_run_arm
assert calls == [(("llama", "qwen2"), "verify"), (("qwen2",), "verify")], calls
assert rv["llama"]["verify"]["stats"]["verified"] == 496 and rv["qwen2"]["verify"]["stats"]["verified"] == 7, rv
# Slower: the first pair reads 40% slower (band 2%); two more pairs decide. Confirmed slower
# fails; not confirmed is no failure and says so; without the pairs the first reading stands.
flagged = {"llama": dict(stock=arm(ms=10.0), shim=arm(ms=14.0, stats=good), aa=arm(ms=10.0))}
assert F.flagged_slower(flagged, 0.02) == ["llama"] and F.flagged_slower(flagged, 0.5) == []
def conf(stock_ms, shim_ms, ok=True):
    arms = {x: arm(ms=stock_ms if x.startswith("stock") else shim_ms) for x in F.CONFIRM}
    if not ok:
        arms["shim.c2"] = dict(ok=False, error="rc 1")
    return dict(ok=True, arms=arms)
assert F.confirm_ms(conf(10.0, 10.1)) == ([10.0] * 4, [10.1] * 4)
assert F.confirm_ms(conf(10.0, 10.1, ok=False)) is None and F.confirm_ms(None) is None
rc, last = rep({"llama": dict(flagged["llama"], confirm=conf(10.0, 10.1))})
assert rc == 0, last
text = open(os.path.join(A.out, "families.txt")).read()
assert "slower?" in text and "the first reading not confirmed" in text, text
rc, last = rep({"llama": dict(flagged["llama"], confirm=conf(10.0, 13.0))})
assert rc == 1 and "confirmed by two more pairs" in last, last
rc, last = rep(flagged)
assert rc == 1 and "llama: decode step slower" in last and "confirmed" not in last, last
print("families verdicts: ok")
PY
