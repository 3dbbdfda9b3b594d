#!/usr/bin/env python3
"""Summarises tests/gpu/checks/smoke.sh: token agreement, logits agreement, stats checks.
Exits non-zero when a check fails."""
import json
import os
import sys

out = sys.argv[1]
fails = []


def load(name):
    p = os.path.join(out, name + ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001 - report any unreadable result
        fails.append(f"{name}: no result ({e})")
        return None


def stats(name):
    p = os.path.join(out, name + ".stats.json")
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001
        fails.append(f"{name}: no stats ({e})")
        return None


res = {n: load(n) for n in ("stock", "pass", "disabled", "flash", "swap", "verify")}


def same_tokens(a, b):
    ra, rb = res.get(a), res.get(b)
    ok = bool(ra and rb and ra["token_ids_sha256"] == rb["token_ids_sha256"])
    print(f"tokens {a:>6} == {b:<8}: {'yes' if ok else 'NO'}")
    return ok


# pass and disabled run on torch's flash path like the "flash" arm: same path, so identical.
if not same_tokens("flash", "pass"):
    fails.append("pass-through changed the tokens")
if not same_tokens("flash", "disabled"):
    fails.append("PONYTAIL_ENABLE=0 changed the tokens")
same_tokens("flash", "swap")
same_tokens("flash", "verify")
same_tokens("stock", "flash")

# The swapped kernel's logits against stock flash, next to PyTorch's own spread (stock cuDNN
# against stock flash) at the same step: within 2x that spread, or 1e-2, whichever is larger.
try:
    import torch

    def logits(n):
        return torch.load(os.path.join(out, n + ".logits.pt"))["logits"]

    def rel(x, y):
        return ((x.float() - y.float()).abs().max() / x.float().abs().max()).item()

    lf, ls, lc = logits("flash"), logits("swap"), logits("stock")
    for i, (f, s, c) in enumerate(zip(lf, ls, lc)):
        r_swap, r_ref = rel(f, s), rel(f, c)
        bound = max(1e-2, 2 * r_ref)
        print(f"logits step {i}: max rel diff flash vs swap = {r_swap:.2e}, "
              f"flash vs stock cuDNN = {r_ref:.2e} (bound {bound:.2e})")
        if r_swap > bound:
            fails.append(f"logits step {i} rel {r_swap:.2e} > {bound:.2e}")
except Exception as e:  # noqa: BLE001
    fails.append(f"logits comparison failed: {e}")

for name in ("pass", "swap", "verify"):
    s = stats(name)
    if not s:
        continue
    calls = s.get("calls", {})
    top = s.get("kernels", {}).get("top", [])
    print(f"\n[{name}] registered={s.get('kernels', {}).get('registered')} calls: " +
          ", ".join(f"{k}={v}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:10]))
    for k in top[:12]:
        print(f"  {k['launches']:>8} {k['action']:<11} {k['name'][:110]}")
    fr = s.get("kernels", {}).get("fallback_reasons", {})
    if fr:
        print("  fallback_reasons:", fr)
    if "hooks" in s:
        print("  hooks:", s["hooks"])
    if name == "pass":
        if not calls.get("__cudaLaunchKernel"):
            fails.append("pass: no __cudaLaunchKernel calls counted")
        if not any(k.startswith("cuLaunchKernel") for k in calls):
            fails.append("pass: no cuLaunchKernel* calls counted")
        names = " ".join(k["name"] for k in top)
        if "nvjet" not in names and "cudnn" not in names and "cutlass" not in names:
            fails.append("pass: no cuBLAS/cuDNN kernel named in top")
    if name == "verify":
        h = s.get("hooks", {})
        if h.get("verify_failures", 1) != 0 or not h.get("verified"):
            fails.append(f"verify: {h}")

for n, r in res.items():
    if r:
        print(f"{n:>8}: tok/s {r.get('tokens_per_s', 0):8.1f}  step p50 {r['decode_step_ms']['p50']:.2f} ms"
              f"  peak reserved {r.get('peak_reserved_bytes', 0) / 2**20:.0f} MiB")
print("\nFAILED:\n  " + "\n  ".join(fails) if fails else "\nall smoke checks passed")
sys.exit(1 if fails else 0)
