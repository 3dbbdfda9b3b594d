#!/usr/bin/env bash
# tests/gpu/checks/same_path.py's standard call: is the shim on stock's attention path bit for bit
# stock? Stock twice on each SDPA path (cuDNN, torch's default for HF generate here, is not
# deterministic between two stock processes; flash is), the shim with the swap off on each path,
# the shim with its pool off and wholly off (PONYTAIL_ENABLE=0) on the flash path, then every
# older build in BISECT_DIR (shim-COMMIT.so, stripped builds of older commits: tests/gpu/README.md)
# on the flash path, oldest name last. One table, each arm against its reference.
#   SHIM=path/to/libponytail_shim.so (default: build-gpu's) BISECT_DIR=build-bisect DEADLINE=480
#   ROW=hf_eager  bash tests/gpu/checks/same_path.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root" || exit 2
out="${OUT:-$root/gpu-out}/same-path"
shim="${SHIM:-build-gpu/shim/libponytail_shim.so}"
[ -f "$shim" ] || { echo "same_path.sh: no shim at $shim (SHIM=...)"; exit 2; }
K=PONYTAIL_TORCH_SDPA=keep:PONYTAIL_ATTN=off
F=ref=stock_flash:PONYTAIL_TORCH_SDPA=flash:PONYTAIL_ATTN=off
D=TORCH_CUDNN_SDPA_DEPRIORITIZED=1
arms=(--arm stock --arm aa --arm "shim:shim=$shim:$K"
      --arm "stock_flash:$D" --arm "aa_flash:ref=stock_flash:$D" --arm "shim_flash:shim=$shim:$F"
      --arm "pool0_flash:shim=$shim:$F:PONYTAIL_POOL=0"
      --arm "enable0_flash:shim=$shim:ref=stock_flash:PONYTAIL_ENABLE=0:$D")
for s in "${BISECT_DIR:-build-bisect}"/shim-*.so; do
  [ -f "$s" ] || continue
  n=$(basename "$s" .so); n=${n#shim-}
  arms+=(--arm "c$n:shim=$s:$F")
done
exec "${PYTHON:-python3}" tests/gpu/checks/same_path.py --out "$out" --row "${ROW:-hf_eager}" \
  --deadline "${DEADLINE:-480}" "${arms[@]}"
