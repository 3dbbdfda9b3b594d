#!/usr/bin/env bash
# One device call for issue 4's GPU checks: the kernel alone (correctness + graph-replay timing),
# real torch CUDA-graph capture under the shim, logits of torch's backends vs Ponytail in bf16 and
# fp16, and the HF path (verify mode + CUPTI traces with Ponytail's and torch's flash kernels).
# Each step has its own time limit so the whole fits one 600 s call; tables are printed last.
# Results: $OUT/attention.tgz (every step's $OUT) and the tables on stdout.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
top="${OUT:-$root/gpu-out}"; w="$top/attention"; mkdir -p "$w"
. "$root/tests/gpu/build.sh"
step() { pt_gpu_step "$w" "$@"; }
step attn 120 env ATTN_STAGES="correctness timing" bash "$root/tests/gpu/checks/attn.sh"
step graph 120 bash "$root/tests/gpu/checks/attn_graph.sh"
step logits 200 bash "$root/tests/gpu/bench/logits_ref.sh"
step e2e 150 env E2E_STAGES="verify trace" bash "$root/tests/gpu/bench/measure_e2e.sh"
tar czf "$top/attention.tgz" -C "$w" .
for f in attn graph logits e2e; do echo "==== $f"; tail -n 45 "$w/$f.log"; done
