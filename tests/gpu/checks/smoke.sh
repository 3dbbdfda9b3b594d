#!/usr/bin/env bash
# First contact of the whole shim with a real PyTorch process on the GPU machine.
# Builds, then runs examples/generate.py (small shape) in five ways and checks:
#   stock flash vs shim in pass-through (PONYTAIL_POOL=0, ATTN=off, SDPA policy keep), both on
#     torch's flash path: identical token ids; stats list torch kernels (__cudaLaunchKernel) and
#     cuBLAS/cuDNN kernels (cuLaunchKernel*). Both sides take flash because cuDNN's SDPA is not
#     deterministic between processes (docs/compatibility.md), so stock cuDNN against itself
#     would not be identical either;
#   PONYTAIL_ENABLE=0 on the flash path: identical token ids;
#   shim default (attention swap) against stock flash: the first steps' logits within twice
#     PyTorch's own backend spread (stock cuDNN against stock flash, same run);
#   shim in verify mode: zero out-of-tolerance launches.
# Usage: tests/gpu/checks/smoke.sh [generate.py flags]; results in $OUT (or ./gpu-out).
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$out"
gen=("$py" "$root/examples/generate.py" --batch "${B:-4}" --prompt "${P:-256}" --new-tokens "${N:-32}" "$@")

run() { # name, env...
  local name=$1; shift
  local t0=$(date +%s.%N)
  env "$@" "${gen[@]}" --json "$out/$name.json" --logits-out "$out/$name.logits.pt" --logits-steps 4 \
    >"$out/$name.log" 2>&1
  local rc=$?
  awk -v n="$name" -v rc="$rc" -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%-14s rc=%d  %.1fs\n", n, rc, b-a}'
}
run stock
run pass TORCH_CUDNN_SDPA_DEPRIORITIZED=1 LD_PRELOAD="$shim" PONYTAIL_POOL=0 PONYTAIL_ATTN=off PONYTAIL_TORCH_SDPA=keep \
  PONYTAIL_TORCH_ALLOC=keep PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$out/pass.stats.json"
run disabled TORCH_CUDNN_SDPA_DEPRIORITIZED=1 LD_PRELOAD="$shim" PONYTAIL_ENABLE=0
run flash TORCH_CUDNN_SDPA_DEPRIORITIZED=1
run swap LD_PRELOAD="$shim" PONYTAIL_LOG=info PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$out/swap.stats.json"
run verify LD_PRELOAD="$shim" PONYTAIL_ATTN=verify PONYTAIL_LOG=info PONYTAIL_STATS=json \
  PONYTAIL_STATS_FILE="$out/verify.stats.json"

"$py" "$root/tests/gpu/checks/smoke_report.py" "$out"
