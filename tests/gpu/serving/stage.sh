#!/bin/bash
# Stage vLLM 0.26.0 (the last release built for torch 2.11 + CUDA 13, the GPU machine's) and the 41
# small wheels it needs there, cut into pieces that each fit one device call (a call carries at most
# 64 MiB with the rest of the checkout). Runs on a machine that can download (not the GPU machine).
#
#   tests/gpu/serving/stage.sh [OUTDIR]     (default .serving/, which .gitignore ignores)
#   -> OUTDIR/parts/vstage.tar.part0 (one piece of at most PART_MB, default 52) and OUTDIR/parts/WHOLE.sha256
#
# The vLLM wheel unpacks to 709 MiB; what a bf16 Llama on an H100/H200 never loads is left out so
# that everything is one piece, one device call with the shim (PRUNE=0 keeps everything):
#   vllm_flash_attn/_vllm_fa2_C  305 MiB  FlashAttention-2: vLLM takes FA3 on sm_90 when it imports
#   vllm-rs                       41 MiB  the Rust frontend, used only with VLLM_RUST_FRONTEND_PATH
#   third_party/fmha_sm100        30 MiB  Blackwell-only attention
#   third_party/deep_gemm         35 MiB  fp8 GEMMs (has_deep_gemm() is then false)
#   _moe_C_stable_libtorch        46 MiB  MoE kernels (its import is optional)
#   _flashmla_C, _qutlass_C        3 MiB  MLA / FP4 kernels (optional imports)
# and, rewritten in place by fatprune.py (device code an sm_90 GPU never loads zeroed; xz'd sizes):
#   _C_stable_libtorch           56 -> 14 MB  sm_80/89/100/120 code dropped (sm_90, sm_90a kept)
#   vllm_flash_attn/_vllm_fa3_C  11 -> 4.6 MB  only the sm_90a TUs of FA3_KEEP (head_dim 64 and 128,
#       bf16/fp16, every variant: paged, split, softcap, packgqa) + combine + prepare_scheduler; a
#       launch of a dropped kernel fails with "no kernel image is available"
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(readlink -f "$here/../../..")
out=$(readlink -m "${1:-$root/.serving}")
PART_MB=${PART_MB:-52}
FA3_KEEP=${FA3_KEEP:-hdim64_bf16|hdim64_fp16|hdim128_bf16|hdim128_fp16}
mkdir -p "$out/dl" "$out/stage/lite" "$out/parts"
rm -rf "$out/tree"; mkdir -p "$out/tree"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for t in manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 manylinux_2_28 manylinux_2_31 \
         manylinux2014 manylinux1 manylinux_2_5; do plat+=(--platform "${t}_x86_64"); done
python3 -m pip download -q --no-deps "${plat[@]}" -d "$out/dl" -r "$here/wheels-vllm.txt"
rm -f "$out"/stage/lite/*.whl
for w in "$out"/dl/*.whl; do
  case $(basename "$w") in vllm-0.26.0-*) unzip -q -o "$w" -d "$out/tree" ;; *) cp "$w" "$out/stage/lite/" ;; esac
done
if [ "${PRUNE:-1}" = 1 ]; then
  v="$out/tree/vllm"
  rm -rf "$v/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$v/vllm-rs" "$v/third_party/fmha_sm100" \
         "$v/third_party/deep_gemm" "$v/_moe_C_stable_libtorch.abi3.so" "$v/_flashmla_C.abi3.so" \
         "$v/_qutlass_C.abi3.so"
  python3 "$here/fatprune.py" "$v/_C_stable_libtorch.abi3.so" --arch 90
  python3 "$here/fatprune.py" "$v/vllm_flash_attn/_vllm_fa3_C.abi3.so" --arch 90 \
    --keep-tu "^(flash_fwd_combine_cu|flash_prepare_scheduler_cu|flash_fwd_($FA3_KEEP)_\w*sm90_cu)"
fi
echo "tree: $(du -sm "$out/tree" | cut -f1) MiB"
tar -cf - -C "$out/tree" . | xz -T0 -6 > "$out/stage/vllm-0.26.0-tree.tar.xz"
rm -f "$out"/parts/vstage.tar.part*
tar -cf - -C "$out/stage" . | tee >(sha256sum | cut -d' ' -f1 > "$out/parts/WHOLE.sha256") \
  | split -b "${PART_MB}M" -d -a 1 - "$out/parts/vstage.tar.part"
sleep 1
ls -la "$out/parts"
