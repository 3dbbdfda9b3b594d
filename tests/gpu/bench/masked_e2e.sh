#!/usr/bin/env bash
# Issue 17 end to end, one device call: Hugging Face padded batches (examples/generate.py --pad:
# half the rows get shorter, left-padded prompts, so every SDPA call carries a mask and torch runs
# its mem-efficient kernel), stock against the shim with PONYTAIL_ATTN_MASKED=1.
# Stages (E2E_STAGES, default "verify tokens margin speed"):
#   verify  PONYTAIL_ATTN=verify over a padded run (B=8, prompt 2048, 32 new tokens): every
#           swapped mem-efficient launch is also run by torch and compared; prints verified /
#           out of tolerance and the hook's swaps and fallback reasons
#   tokens  the first decode steps' logits and the token ids, B=8, prompt 2048, 16 new tokens,
#           every SDPA call on torch's mem-efficient kernel (--sdpa efficient) so that the
#           prefill is the same kernel on both sides and only decode differs (the shim swaps
#           it): stock vs shim, beside stock's mem-efficient run against torch's math and
#           cuDNN backends (the backend-to-backend spread the shim is judged by), for an fp16
#           and a bf16 model (the issue asks identical tokens of fp16). Logits are compared per
#           step over the rows whose tokens agree so far (a row that took another token
#           continues from another text). A row that took another token is shown with the
#           stock run's margin at that step (top logit less the second) beside the logit
#           difference there: a near-tie flips under any change of summation order.
#   margin  the same comparison on a model with margins: tests/gpu/bench/margin_model.py trains
#           generate.py's model on a small language in which attention decides every token (its
#           summary: held-out margins), then fp16 and bf16 runs at prompts MARGIN_PROMPTS (default
#           "2048 16384"), 16 new tokens, prompts in the language's ids: stock mem-eff, the shim,
#           cuDNN, and math where its score matrix fits (prompts up to 4096)
#   speed   B=8, prompts PROMPTS (default "2048 16384"), NEW (64) new tokens: decode step p50 of
#           stock and shim in fresh processes (ROUNDS rounds of A B, default 1), then the GPU
#           time per decode step from CUPTI records (tests/gpu/bench/gpu_step.py) with torch's
#           mem-efficient kernel (shim, MASKED=0) and Ponytail's (MASKED=1)
# E2E_DEADLINE=S (seconds from the script's start): runs past it are skipped or cut short and the
# table shows what finished. Table last. Results in $OUT (default ./gpu-out): masked-e2e.txt, masked-e2e.tgz (runs).
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
tmp="$(mktemp -d /tmp/pt-masked.XXXXXX)"
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen="$root/examples/generate.py"
stages=" ${E2E_STAGES:-verify tokens margin speed} "
export PYTHONUNBUFFERED=1
# E2E_DEADLINE=S: no run starts after S seconds from the script's start and none runs past it (its limit is cut
# to what is left), so that a call with a wall-clock limit still gets the table of what finished
# (a killed script prints none).
deadline=${E2E_DEADLINE:-}
left() {  # left SECS: SECS, or less when E2E_DEADLINE is nearer; 0 when it has passed
  local s=$1
  if [ -n "$deadline" ]; then
    local l=$(( deadline - SECONDS ))
    [ "$l" -lt "$s" ] && s=$l
    [ "$s" -lt 0 ] && s=0
  fi
  echo "$s"
}
run() {  # run NAME SECONDS ENV... -- ARGS...: one generate.py process, JSON to $tmp/NAME.json
  local name=$1 secs; secs=$(left "$2"); shift 2
  local e=(env)
  while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
  [ "$secs" -gt 0 ] || { echo "  $name: skipped (E2E_DEADLINE)"; return; }
  local t0=$SECONDS
  timeout -k 5 "$secs" "${e[@]}" "$py" "$gen" --json "$tmp/$name.json" "$@" >"$tmp/$name.log" 2>&1
  echo "  $name: rc $? in $(( SECONDS - t0 )) s"
}
shimenv=(LD_PRELOAD="$shim" PONYTAIL_ATTN_MASKED=1 PONYTAIL_LOG=info PONYTAIL_STATS=json)
pad=(--batch 8 --pad 0.5 --warmup)

if [[ $stages == *" verify "* ]]; then
  echo "== verify"
  run verify 240 "${shimenv[@]}" PONYTAIL_ATTN=verify PONYTAIL_STATS_FILE="$tmp/verify.stats.json" -- \
    "${pad[@]}" --prompt 2048 --new-tokens 32
fi
compare() {  # compare GROUP "OTHERS" ARGS...: stock mem-efficient, the shim, then torch's OTHERS backends
  local g=$1 others=$2 o; shift 2
  run "$g-stock" 300 -- "$@" --sdpa efficient --logits-out "$tmp/$g-stock.pt"
  run "$g-shim" 300 "${shimenv[@]}" PONYTAIL_STATS_FILE="$tmp/$g-shim.stats.json" -- \
    "$@" --sdpa efficient --logits-out "$tmp/$g-shim.pt"
  for o in $others; do
    run "$g-$o" 300 -- "$@" --sdpa "$o" --logits-out "$tmp/$g-$o.pt"
  done
}
if [[ $stages == *" tokens "* ]]; then
  echo "== tokens"
  for dt in fp16 bf16; do
    compare "tok-$dt" "math cudnn" "${pad[@]}" --prompt 2048 --new-tokens 16 --logits-steps 16 --dtype "$dt"
  done
fi
if [[ $stages == *" margin "* ]]; then
  echo "== margin"
  w="$tmp/margin-model.pt"
  t0=$SECONDS ts=$(left "${TRAIN_S:-300}")
  if [ "$ts" -gt 0 ]; then
    timeout -k 5 "$ts" "$py" "$root/tests/gpu/bench/margin_model.py" --out "$w" \
      --json "$tmp/margin-train.json" >"$tmp/margin-train.log" 2>&1
    echo "  train: rc $? in $(( SECONDS - t0 )) s"
  else
    echo "  train: skipped (E2E_DEADLINE)"
  fi
  if [ -f "$w" ]; then
    for p in ${MARGIN_PROMPTS:-2048 16384}; do
      others=cudnn; [ "$p" -le 4096 ] && others="math cudnn"  # math's score matrix fits up to 4096
      for dt in fp16 bf16; do
        compare "mg-p$p-$dt" "$others" "${pad[@]}" --prompt "$p" --new-tokens 16 --logits-steps 16 \
          --weights "$w" --prompt-vocab 1000 --dtype "$dt"
      done
    done
    rm -f "$w"
  fi
fi
if [[ $stages == *" speed "* ]]; then
  echo "== speed"
  n="${NEW:-64}"
  for p in ${PROMPTS:-2048 16384}; do
    for r in $(seq 1 "${ROUNDS:-1}"); do
      run "speed-p$p-stock-$r" 300 -- "${pad[@]}" --prompt "$p" --new-tokens "$n"
      run "speed-p$p-shim-$r" 300 "${shimenv[@]}" PONYTAIL_STATS_FILE="$tmp/speed-p$p-shim-$r.stats.json" -- \
        "${pad[@]}" --prompt "$p" --new-tokens "$n"
    done
    for m in 0 1; do
      run "cupti-p$p-m$m" 300 "${shimenv[@]}" PONYTAIL_ATTN_MASKED=$m PONYTAIL_CUPTI="$tmp/cupti-p$p-m$m.rec" \
        PONYTAIL_STATS_FILE="$tmp/cupti-p$p-m$m.stats.json" -- "${pad[@]}" --prompt "$p" --new-tokens "$n"
      [ -f "$tmp/cupti-p$p-m$m.rec" ] &&
        "$py" "$root/tests/gpu/bench/gpu_step.py" "$tmp/cupti-p$p-m$m.rec" --layers 16 --new-tokens "$n" \
          >"$tmp/cupti-p$p-m$m.step.json" 2>&1
    done
  done
fi

"$py" - "$tmp" <<'PY' | tee "$out/masked-e2e.txt"
import glob, json, os, statistics, sys
d = sys.argv[1]
def js(name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except Exception:
        return None
def fam(stats):
    """(swapped, fallbacks, passthrough launches) of torch's mem-efficient kernels, fallback reasons."""
    if not stats:
        return "no stats"
    sw = fb = la = 0
    for k in stats["kernels"].get("hooked") or stats["kernels"]["top"]:
        if "fmha" in k["name"] or "AttentionKernel" in k["name"]:
            la += k["launches"]; sw += k.get("swapped", 0); fb += k.get("fallbacks", 0)
    return "mem-eff launches %d, swapped %d, fallbacks %d; reasons %s" % (
        la, sw, fb, stats["kernels"].get("fallback_reasons"))
print("masked decode end to end (issue 17), B=8, half the rows left-padded")
s = js("verify.stats.json")
if s is not None:
    h = s["hooks"]
    print("verify (prompt 2048, 32 new): verified %d, out of tolerance %d; %s" % (
        h["verified"], h["verify_failures"], fam(s)))
    with open(os.path.join(d, "verify.log"), errors="replace") as f:
        worst = [l.strip() for l in f if "attention verify" in l][:4]
    for l in worst:
        print("  " + l[:160])
tr = js("margin-train.json")
if tr:
    print("margin model: %d steps in %.0f s, held-out rule argmax %.4f, margin p1 %.2f median %.2f" % (
        tr["steps"], tr["seconds"], tr["heldout_rule_argmax"], tr["heldout_margin_p01"],
        tr["heldout_margin_median"]))
    if tr["heldout_rule_argmax"] < 0.99:
        print("  (the model did not learn its language: its margins are not assured, read the groups below as"
              " the random model's)")
try:
    import torch
    def rel(a, b, ta=None, tb=None):
        """Per step: max |a - b| / max |a| over the rows whose tokens agree before that step."""
        out = []
        for t, (x, y) in enumerate(zip(a, b)):
            rows = list(range(x.shape[0]))
            if ta is not None:
                rows = [r for r in rows if ta[r][:t] == tb[r][:t]]
            if not rows:
                break
            x, y = x[rows].float(), y[rows].float()
            out.append((((x - y).abs().max() / x.abs().max()).item(), len(rows)))
        return out
    def fmt(r):
        return " ".join("%.1e(%d)" % v for v in r) + "  [max rel per step (rows compared)]"
    def load(n):
        p = os.path.join(d, n + ".pt")
        return torch.load(p)["logits"] if os.path.exists(p) else None
    def toks(n):
        j = js(n + ".json")
        return j["token_ids"] if j else None
    def flips(a, b, ta, tb):
        """Each row whose tokens part: (row, step, stock's top-two margin there, |a - b| there)."""
        out = []
        for r in range(len(ta)):
            t = next((i for i, (x, y) in enumerate(zip(ta[r], tb[r])) if x != y), None)
            if t is None or t >= len(a):
                continue
            out.append((r, t, gap(a[t][r]).item(), (a[t][r].float() - b[t][r].float()).abs().max().item()))
        return out
    def gap(x):
        """Top logit less the second, along the last dimension."""
        top = x.float().topk(2, dim=-1).values
        return top[..., 0] - top[..., 1]
    def margins(a):
        """Stock's top-two margin over all rows and steps: min and median (logit units)."""
        m = torch.cat([gap(x) for x in a])
        return m.min().item(), m.median().item()
    groups = sorted({os.path.basename(f)[:-len("-stock.pt")] for f in glob.glob(os.path.join(d, "*-stock.pt"))})
    for grp in groups:
        a, ta = load(grp + "-stock"), toks(grp + "-stock")
        lo, med = margins(a)
        print("%s: stock's top-two margin min %.3f median %.3f; shim %s" % (
            grp, lo, med, fam(js(grp + "-shim.stats.json"))))
        for other in ("shim", "math", "cudnn"):
            b, tb = load(grp + "-" + other), toks(grp + "-" + other)
            if b is None:  # not run for this group (math at long prompts), or the run failed
                if os.path.exists(os.path.join(d, "%s-%s.log" % (grp, other))):
                    print("  %-5s vs stock mem-eff: n/a (run failed, see %s-%s.log)" % (other, grp, other))
                continue
            fl = flips(a, b, ta, tb)
            print("  %-5s vs stock mem-eff: tokens identical %s (%d of %d rows part); logits %s" % (
                other, ta == tb, sum(1 for r in range(len(ta)) if ta[r] != tb[r]), len(ta), fmt(rel(a, b, ta, tb))))
            for r, t, m, diff in fl:
                print("        row %d parts at step %d: stock's margin %.4f, |logit difference| %.4f" % (r, t, m, diff))
except Exception as e:
    print("logits comparison failed: %s" % e)
rows = []
for f in sorted(glob.glob(os.path.join(d, "speed-p*-stock-*.json"))):
    p = int(os.path.basename(f).split("-")[1][1:])
    if p not in rows:
        rows.append(p)
if rows:
    print("\n%6s | %-27s | %-27s | %s" % ("prompt", "decode step p50 ms", "GPU us per decode step",
                                         "attention us per step"))
    print("%6s | %8s %8s %9s | %8s %8s %9s | %8s %8s" % ("", "stock", "shim", "shim/stk", "mem-eff",
                                                      "ponytail", "pt/me", "mem-eff", "ponytail"))
for p in sorted(rows):
    st = [js(os.path.basename(f)) for f in sorted(glob.glob(os.path.join(d, "speed-p%d-stock-*.json" % p)))]
    sh = [js(os.path.basename(f)) for f in sorted(glob.glob(os.path.join(d, "speed-p%d-shim-*.json" % p)))
          if not f.endswith(".stats.json")]
    a = statistics.median(x["decode_step_ms"]["p50"] for x in st if x) if any(st) else float("nan")
    b = statistics.median(x["decode_step_ms"]["p50"] for x in sh if x) if any(sh) else float("nan")
    g0, g1 = js("cupti-p%d-m0.step.json" % p), js("cupti-p%d-m1.step.json" % p)
    gg = lambda g, k: g[k] if g else float("nan")
    print("%6d | %8.2f %8.2f %9.3f | %8.1f %8.1f %9.3f | %8.1f %8.1f" % (
        p, a, b, b / a, gg(g0, "gpu_us_per_step"), gg(g1, "gpu_us_per_step"),
        gg(g1, "gpu_us_per_step") / gg(g0, "gpu_us_per_step"), gg(g0, "attn_us_per_step"),
        gg(g1, "attn_us_per_step")))
    same = [x["token_ids"] for x in st + sh if x]
    print("       tokens identical across the %d runs: %s; shim: %s" % (
        len(same), all(t == same[0] for t in same),
        fam(js("speed-p%d-shim-1.stats.json" % p))))
    for g, lab in ((g0, "MASKED=0"), (g1, "MASKED=1")):
        if g:
            print("       %s attention kernels in the decode window: %s" % (lab, g["attention_kernels"]))
PY
tar czf "$out/masked-e2e.tgz" -C "$tmp" --exclude='*.rec' --exclude='*.pt' .
