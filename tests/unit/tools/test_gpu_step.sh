#!/usr/bin/env bash
# tests/gpu/bench/gpu_step.py on a synthetic CUPTI records file: a warm-up generate, then the
# measured one (a prefill whose cuDNN attention launches twice per layer, then decode steps of
# one GEMM and one mem-efficient attention launch per layer). The decode steps must be found by
# their attention launches alone and the prefill left out: 2 layers x (10 + 5) us per step.
# Usage: test_gpu_step.sh GPU_STEP_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$py" - "$tmp/rec" <<'PY'
import sys
t = 1000
lines = ["# ponytail-cupti 1 pid=1\n", "# start start_ns=0 kind=concurrent_kernel lib=x\n"]
def k(name, us):
    global t
    lines.append("K %d %d 7 %s\n" % (t, t + us * 1000, name))
    t += us * 1000 + 500
ME = "_Z41fmha_cutlassF_bf16_aligned_64x128_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutlass10bfloat16_tEE6ParamsE"
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_kernel0_0"
def generate(new):
    for layer in range(2):          # prefill: GEMM, two cuDNN launches per layer
        k("nvjet_prefill_gemm", 300)
        k(CUDNN, 100)
        k(CUDNN, 50)
    for step in range(new - 1):     # decode: GEMM + mem-efficient attention per layer
        k("elementwise_kernel", 1)  # before the step's first attention: belongs to the step
        for layer in range(2):
            k("nvjet_gemm", 9 if layer else 8)
            k(ME, 5)
generate(2)   # the warm-up call
generate(5)   # the measured call: prefill + 4 decode steps
lines.append("# end stop_ns=%d records=0 dropped=0\n" % t)
open(sys.argv[1], "w").writelines(lines)
PY
out=$("$py" "$script" "$tmp/rec" --layers 2 --new-tokens 5)
echo "$out"
"$py" - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["steps"] == 3, r
# a step: 1 + 8 + 5 + 9 + 5 us of kernels, however the window is phased
assert abs(r["gpu_us_per_step"] - 28.0) < 1e-6, r
assert abs(r["attn_us_per_step"] - 10.0) < 1e-6, r
assert list(r["attention_kernels"]) == [k for k in r["attention_kernels"] if "fmha" in k], r
assert sum(r["attention_kernels"].values()) == 6, r
print("gpu_step: ok")
PY
# Too few decode launches for the steps asked: a clear error, not a number.
if "$py" "$script" "$tmp/rec" --layers 2 --new-tokens 40 2>"$tmp/err"; then
  echo "FAIL: accepted 40 steps"; exit 1
fi
grep -q "decode attention launches" "$tmp/err"
echo "gpu_step: too few launches refused"
