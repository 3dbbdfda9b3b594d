#!/usr/bin/env bash
# End-to-end measurements on the GPU machine (issues 4 and 5):
#  1. verify mode on a small run: Ponytail's kernel compared with torch's on every swapped launch;
#  2. first decode steps' logits and tokens: torch flash vs the shim, B=8, prompt 4096;
#  3. `ponytail bench` B=8, prompt 4096, 256 new tokens (stock torch vs the shim) + timeline;
#  4. `ponytail trace` of the same workload (64 new tokens) with Ponytail's kernel and with
#     torch's flash kernels (PONYTAIL_ATTN=off), for GPU time per step and per-layer attention.
# Results (tables, JSON, PNG) in $OUT (or ./gpu-out); a bundle of logs in e2e-logs.tgz.
#   E2E_STAGES="verify logits bench trace" (the default: all four) picks stages.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen="$root/examples/generate.py"
export PYTHONUNBUFFERED=1
stages=" ${E2E_STAGES:-verify logits bench trace} "

if [[ $stages == *" verify "* ]]; then
echo "== 1. verify mode (B=4, prompt 256, 32 new tokens)"
LD_PRELOAD="$shim" PONYTAIL_ATTN=verify PONYTAIL_LOG=info PONYTAIL_STATS=json \
  PONYTAIL_STATS_FILE="$tmp/verify.stats.json" python3 "$gen" --batch 4 --prompt 256 --new-tokens 32 \
  >"$tmp/verify.log" 2>&1; echo "rc=$?"
grep -h "verify\|custom kernel\|param size" "$tmp/verify.log" | sed 's/_ZN13pytorch_flash//' | cut -c1-200 | sort | uniq -c | head -12
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('hooks', s.get('hooks'), 'fallbacks', s['kernels'].get('fallback_reasons'))" "$tmp/verify.stats.json"

fi
if [[ $stages == *" logits "* ]]; then
echo "== 2. logits: torch flash vs shim (B=8, prompt 4096, 8 new tokens)"
TORCH_CUDNN_SDPA_DEPRIORITIZED=1 python3 "$gen" --batch 8 --prompt 4096 --new-tokens 8 \
  --json "$tmp/lf.json" --logits-out "$tmp/lf.pt" --logits-steps 8 >"$tmp/lf.log" 2>&1
LD_PRELOAD="$shim" python3 "$gen" --batch 8 --prompt 4096 --new-tokens 8 \
  --json "$tmp/ls.json" --logits-out "$tmp/ls.pt" --logits-steps 8 >"$tmp/ls.log" 2>&1
python3 - "$tmp" <<'PY'
import json, sys, torch
d = sys.argv[1]
a, b = torch.load(f"{d}/lf.pt")["logits"], torch.load(f"{d}/ls.pt")["logits"]
print("per-step max rel logits diff:", " ".join(f"{((x-y).abs().max()/x.abs().max()).item():.1e}" for x, y in zip(a, b)))
ta, tb = json.load(open(f"{d}/lf.json"))["token_ids"], json.load(open(f"{d}/ls.json"))["token_ids"]
print("tokens identical:", ta == tb)
PY

fi
if [[ $stages == *" bench "* ]]; then
echo "== 3. ponytail bench B=8 prompt 4096 new 256"
"$pt" bench --batch 8 --prompt 4096 --new-tokens 256 --repeats "${REPEATS:-1}" \
  --out "$out/bench-b8-p4096-n256.json" 2>"$tmp/bench.err" | tee "$out/bench-b8-p4096-n256.txt"
"$pt" timeline "$out/bench-b8-p4096-n256.json" -o "$out/timeline-b8-p4096-n256.png"
"$pt" timeline "$out/bench-b8-p4096-n256.json" -o "$out/timeline-b8-p4096-n256.svg"

fi
if [[ $stages == *" trace "* ]]; then
echo "== 4. ponytail trace (B=8, prompt 4096, 64 new tokens): Ponytail's kernel, then torch flash"
"$pt" trace --top 12 -- python3 "$gen" --batch 8 --prompt 4096 --new-tokens 64 \
  2>"$tmp/trace1.err" | tee "$out/trace-shim.txt"
PONYTAIL_ATTN=off "$pt" trace --top 12 -- python3 "$gen" --batch 8 --prompt 4096 --new-tokens 64 \
  2>"$tmp/trace2.err" | tee "$out/trace-flash.txt"
fi
tar czf "$out/e2e-logs.tgz" -C "$tmp" .
