#!/usr/bin/env bash
# The prefill kernel (kernels/attn_prefill.cu) must build cleanly wherever nvcc is, GPU or not:
# the generated wgmma wrappers equal what kernels/gen_prefill_wgmma.py writes, and with nvcc
# present the kernel compiles for sm_90a into its six entry points (four, and the two d = 64 _skip kernels) without spilling.
# Usage: test_prefill_build.sh SOURCE_ROOT [NVCC]
set -uo pipefail
root=$1
nvcc=${2:-}
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$py" "$root/kernels/gen_prefill_wgmma.py" >"$tmp/wgmma.cuh" || exit 1
if ! cmp -s "$tmp/wgmma.cuh" "$root/kernels/attn_prefill_wgmma.cuh"; then
  echo "FAIL: kernels/attn_prefill_wgmma.cuh differs from kernels/gen_prefill_wgmma.py's output"
  diff "$tmp/wgmma.cuh" "$root/kernels/attn_prefill_wgmma.cuh" | head -20
  exit 1
fi
echo "wgmma wrappers: up to date"
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "SKIP: no nvcc (the compile check needs it)"
  exit 77
fi
"$nvcc" -cubin -O3 -std=c++17 -Xptxas -v -gencode=arch=compute_90a,code=sm_90a -I"$root" \
  -o "$tmp/prefill.cubin" "$root/kernels/attn_prefill.cu" 2>"$tmp/ptxas.txt" || {
  cat "$tmp/ptxas.txt"; echo "FAIL: nvcc"; exit 1; }
kernels=(bf16_d64 bf16_d128 fp16_d64 fp16_d128 bf16_d64_skip fp16_d64_skip)
n=$(grep -c "Compiling entry function 'pt_attn_prefill_" "$tmp/ptxas.txt")
[ "$n" = ${#kernels[@]} ] || { cat "$tmp/ptxas.txt"; echo "FAIL: $n entry points, want ${#kernels[@]}"; exit 1; }
for k in "${kernels[@]}"; do
  grep -q "Compiling entry function 'pt_attn_prefill_$k'" "$tmp/ptxas.txt" || { echo "FAIL: no pt_attn_prefill_$k"; exit 1; }
done
if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$tmp/ptxas.txt"; then
  echo "FAIL: the prefill kernel spills"; exit 1
fi
if grep -i "serializ" "$tmp/ptxas.txt"; then
  echo "FAIL: ptxas serialises the wgmma instructions"; exit 1
fi
grep "Used" "$tmp/ptxas.txt" | sed 's/^ptxas info    : //'
# The compile-time variants of kernels/attn_prefill.h (two consumer warpgroups at d = 64, the
# grid of one CTA per tile, experiments 1 and 4 together) must build the same way, so that
# the GPU check can time them (PREFILL_VARIANTS).
for flags in "-DPT_PREFILL_D64_CONSUMERS=2" "-DPT_PREFILL_PERSISTENT=0" "-DPT_PREFILL_EXP=5"; do
  # shellcheck disable=SC2086
  "$nvcc" -cubin -O3 -std=c++17 -Xptxas -v -gencode=arch=compute_90a,code=sm_90a -I"$root" $flags \
    -o "$tmp/variant.cubin" "$root/kernels/attn_prefill.cu" 2>"$tmp/ptxas_v.txt" || {
    cat "$tmp/ptxas_v.txt"; echo "FAIL: nvcc ($flags)"; exit 1; }
  if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$tmp/ptxas_v.txt" || grep -i "serializ" "$tmp/ptxas_v.txt"; then
    echo "FAIL: the variant $flags spills or serialises its wgmma"; exit 1
  fi
done
echo "prefill kernel: ${#kernels[@]} entry points for sm_90a, no spills (and its three compile-time variants)"
