#!/bin/bash
# Stage SGLang 0.5.17 (sglang-kernel 0.4.5, built for torch 2.11 + CUDA 13, the GPU machine's) and
# what it needs beyond the machine's own packages, as one tar cut into pieces that each fit one
# device call (a call carries at most 64 MiB with the ~7 MiB checkout). Runs on a machine that can
# download from PyPI (not the GPU machine). Needs python3 with pip, readelf, strip, xz, split.
#
#   tests/gpu/serving/sglang/stage.sh [OUTDIR]     (default .serving/sglang, which git ignores)
#   -> OUTDIR/parts/sgstage.tar.partN (PART_MB each, default 52: one piece today, 44.6 MiB)
#      and OUTDIR/parts/WHOLE.sha256
#   GPU side: tests/gpu/serving/sglang/install.sh PARTDIR SITE, then
#   PYTHONPATH=SITE python3 -m sglang.launch_server ...
#
# All wheels in wheels.txt are installed here (pip --target, no .pyc) into one tree, which
# is pruned of what a bf16 Llama (head_dim 128) on one H100/H200 with --attention-backend fa3
# --sampling-backend pytorch never loads, then xz'd whole (PRUNE=0 keeps everything):
#   sgl_kernel/flash_ops.abi3.so  1071 MiB  FA3 (987 MiB of it device code). sm_80/sm_86 code dropped;
#       sm_90a code kept only for the TUs FA3 runs on sm_90 for head_dim 64/128 in bf16/fp16
#       (flash_fwd_hdim{64,128}_{bf16,fp16}_*_sm90: plain, paged, split, softcap, packgqa
#       variants, 40 TUs) + flash_fwd_combine + flash_prepare_scheduler (../fatprune.py). FA3_KEEP is
#       the regex of kept TUs: FA3_KEEP=hdim128_bf16 is the least a bf16 Llama with head_dim 128
#       needs (-6 MiB xz'd); FA3_KEEP=all keeps every sm_90a TU (+106 MiB xz'd: 3 pieces in all).
#       A launch of a dropped kernel fails with "no kernel image is available".
#   sgl_kernel/sm90/common_ops    18 MiB  sm_80/89/100/103/120 code dropped (sm_90, sm_90a kept)
#   sgl_kernel/sm100/common_ops   19 MiB  loaded only when the GPU is not sm_90 (or none is
#       visible); kept with sm_90 code only, so that `import sgl_kernel` works on a GPU-less machine
#   sgl_kernel/{flashmla,spatial,infllm}_ops  59 MiB  MLA / green-ctx / InfLLM (loaded lazily)
#   sglang/srt/{server,grpc,multimodal}/_core*.so  23 MiB  Rust server (SGLANG_RUST_SERVER=1),
#       gRPC (--grpc-port), inkling multimodal preprocessing
#   sglang/multimodal_gen         13 MiB  diffusion serving (sglang serve / generate only)
#   flashinfer/data               88 MiB  JIT sources (csrc, cutlass, cccl, spdlog). One module
#       is used: sgl_kernel's rmsnorm calls flashinfer.norm, which would JIT-build from these
#       sources; flashinfer_aot.py builds it here (sm_90a, 1.2 MiB) into data/aot/norm/, where
#       flashinfer loads prebuilt modules (needs python3.12, PY312, and nvcc where this runs)
#   xgrammar/lib/libxgrammar.a    62 MiB  static library for C++ users; libxgrammar_bindings.so
#       is stripped of its debug info (51 -> ~4 MiB)
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(readlink -f "$here/../../../..")
out=$(readlink -m "${1:-$root/.serving/sglang}")
PART_MB=${PART_MB:-52}
PY312=${PY312:-python3.12}  # builds flashinfer's norm module (tvm_ffi needs >= 3.12)
FA3_KEEP=${FA3_KEEP:-hdim64_bf16|hdim64_fp16|hdim128_bf16|hdim128_fp16}
mkdir -p "$out/dl" "$out/stage" "$out/parts"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for t in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 \
         manylinux2014 manylinux_2_5 manylinux1; do plat+=(--platform "${t}_x86_64"); done
python3 -m pip download -q --no-deps "${plat[@]}" -d "$out/dl" -r "$here/wheels.txt"

site="$out/site"
rm -rf "$site"
python3 -m pip install -q --no-deps --no-index --no-compile --find-links "$out/dl" "${plat[@]}" \
  --target "$site" -r "$here/wheels.txt"
rm -rf "$site/bin"
echo "installed tree: $(du -sm "$site" | cut -f1) MiB"

if [ "${PRUNE:-1}" = 1 ]; then
  k="$site/sgl_kernel"
  if [ "$FA3_KEEP" = all ]; then tu=""; else
    tu="^(flash_fwd_combine_cu|flash_prepare_scheduler_cu|flash_fwd_($FA3_KEEP)_\w*sm90_cu)"; fi
  python3 "$here/../fatprune.py" "$k/flash_ops.abi3.so" --arch 90 ${tu:+--keep-tu "$tu"}
  python3 "$here/../fatprune.py" "$k/sm90/common_ops.abi3.so" --arch 90
  python3 "$here/../fatprune.py" "$k/sm100/common_ops.abi3.so" --arch 90
  rm -rf "$k/flashmla_ops.abi3.so" "$k/spatial_ops.abi3.so" "$k"/infllm_ops.*.so
  rm -f "$site"/sglang/srt/{server,grpc,multimodal}/_core.*.so
  rm -rf "$site/sglang/multimodal_gen" "$site/flashinfer/data"
  # sgl_kernel's rmsnorm JIT-builds flashinfer's norm module from flashinfer/data: build it
  # here instead (sm_90a) and ship the .so where flashinfer loads ahead-of-time modules.
  full=$(mktemp -d); venv=$(mktemp -d)
  for w in "$out"/dl/flashinfer_python-*.whl "$out"/dl/apache_tvm_ffi-*.whl; do
    python3 -m zipfile -e "$w" "$full"; done
  { "$PY312" -m venv "$venv" && "$venv/bin/pip" install -q filelock packaging typing_extensions; } \
    || { echo "sglang stage: no Python 3.12 venv from PY312=$PY312 (name one: PY312=/path/to/python3.12)"
         rm -rf "$full" "$venv"; exit 1; }
  PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH" "$venv/bin/python" "$here/flashinfer_aot.py" "$site" "$full"
  rm -rf "$full" "$venv"
  rm -f "$site/xgrammar/lib/libxgrammar.a"
  strip --strip-debug "$site/xgrammar/libxgrammar_bindings.so"
  echo "pruned tree: $(du -sm "$site" | cut -f1) MiB (sparse: $(du -sm --apparent-size "$site" | cut -f1) MiB apparent)"
fi
find "$site" -name __pycache__ -prune -exec rm -rf {} +

rm -f "$out"/stage/*
cp "$here/wheels.txt" "$out/stage/"
printf 'PRUNE=%s FA3_KEEP=%s\n' "${PRUNE:-1}" "$FA3_KEEP" > "$out/stage/STAGED"
tar -cf - -C "$site" --sort=name --owner=0 --group=0 . | xz -T0 -6 > "$out/stage/sglang-0.5.17-site.tar.xz"
(cd "$out/stage" && sha256sum sglang-0.5.17-site.tar.xz > sglang-0.5.17-site.tar.xz.sha256)
rm -f "$out"/parts/sgstage.tar.part*
tar -cf - -C "$out/stage" . | tee >(sha256sum | cut -d' ' -f1 > "$out/parts/WHOLE.sha256") \
  | split -b "${PART_MB}M" -d -a 1 - "$out/parts/sgstage.tar.part"
sleep 1
ls -la "$out/stage" "$out/parts"
