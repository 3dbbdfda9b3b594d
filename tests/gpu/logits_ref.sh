#!/usr/bin/env bash
# How far apart are the first decode step's logits of different attention kernels on the same
# model and prompt? Runs examples/generate.py (B=8, prompt 4096, 2 new tokens) with torch's flash,
# math and cuDNN SDPA backends and under the shim (Ponytail's kernel), then prints the max
# relative difference of each pair's logits at the first decode step. Gives the scale against
# which the shim's own difference to torch flash is judged.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen=(python3 "$root/examples/generate.py" --batch 8 --prompt 4096 --new-tokens 2 --logits-steps 2)
for b in flash math cudnn; do
  TORCH_CUDNN_SDPA_DEPRIORITIZED=1 "${gen[@]}" --sdpa "$b" --logits-out "$tmp/$b.pt" >"$tmp/$b.log" 2>&1 \
    || { echo "$b failed:"; tail -3 "$tmp/$b.log"; }
done
LD_PRELOAD="$bld/shim/libponytail_shim.so" "${gen[@]}" --logits-out "$tmp/ponytail.pt" >"$tmp/ponytail.log" 2>&1 \
  || { echo "ponytail failed:"; tail -3 "$tmp/ponytail.log"; }
python3 - "$tmp" <<'PY'
import itertools, os, sys, torch
d = sys.argv[1]
L = {n: torch.load(f"{d}/{n}.pt")["logits"] for n in ("flash", "math", "cudnn", "ponytail") if os.path.exists(f"{d}/{n}.pt")}
print("max |a-b| / max |a| of the logits; step 0 = prefill (never swapped), step 1 = first decode step")
for a, b in itertools.combinations(L, 2):
    r = [((x.float() - y.float()).abs().max() / x.float().abs().max()).item() for x, y in zip(L[a], L[b])]
    print(f"  {a:>8} vs {b:<8}  step0 {r[0]:.2e}  step1 {r[1]:.2e}")
PY
