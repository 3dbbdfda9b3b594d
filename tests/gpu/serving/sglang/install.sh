#!/bin/bash
# GPU side: assemble the pieces made by tests/gpu/serving/sglang/stage.sh, check them, unpack SGLang into SITE.
#
#   tests/gpu/serving/sglang/install.sh PARTDIR SITE
#     PARTDIR holds sgstage.tar.part0.. and WHOLE.sha256 (moved there one device call at a time)
#     SITE    a folder of its own (not vLLM's): it is emptied first
#
# Then run with SITE first on PYTHONPATH (it shadows the machine's transformers 5.17.0 and
# tokenizers 0.23.2 with 5.12.1 / 0.22.2), e.g.
#   PYTHONPATH=SITE HF_HUB_OFFLINE=1 python3 -m sglang.launch_server --model-path DIR \
#     --attention-backend fa3 --sampling-backend pytorch [--disable-cuda-graph]
# sglang JIT-compiles a few small kernels (rope, KV-cache store) with nvcc on first use; set
# TVM_FFI_CACHE_DIR to keep them between runs (default ~/.cache/tvm-ffi).
set -euo pipefail
parts=$(readlink -f "$1"); site=$(readlink -m "$2")
py=${PYTHON:-python3}
ls "$parts"/sgstage.tar.part* >/dev/null
want=$(cat "$parts/WHOLE.sha256")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sgstage.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat $(ls "$parts"/sgstage.tar.part* | sort -V) > "$tmp/sgstage.tar"
got=$(sha256sum "$tmp/sgstage.tar" | cut -d' ' -f1)
[ "$got" = "$want" ] || { echo "sha256 mismatch: got $got want $want (a piece is missing or damaged)"; exit 1; }
tar -xf "$tmp/sgstage.tar" -C "$tmp" && rm "$tmp/sgstage.tar"
(cd "$tmp" && sha256sum -c --quiet sglang-0.5.17-site.tar.xz.sha256)
cat "$tmp/STAGED"
rm -rf "$site"; mkdir -p "$site"
xz -dc "$tmp/sglang-0.5.17-site.tar.xz" | tar -xf - -C "$site"
echo "SITE $site: $(du -sm "$site" | cut -f1) MiB"
if command -v cuobjdump >/dev/null; then
  echo "FA3 cubins kept: $(cuobjdump --list-elf "$site/sgl_kernel/flash_ops.abi3.so" | wc -l)"
fi
PYTHONPATH="$site" "$py" - <<'EOF'
import importlib.metadata as md, sys
for n in ("sglang", "sglang-kernel", "transformers", "tokenizers", "flashinfer-python", "xgrammar", "torch"):
    print(f"{n} {md.version(n)}")
import torch, transformers, sglang
assert transformers.__version__ == "5.12.1", transformers.__version__
import sgl_kernel, sgl_kernel.flash_attn  # loads sm90/common_ops (sm100/ without a GPU) and FA3
print("sgl_kernel ops from", sgl_kernel.common_ops.__file__, "| FA3 op:", hasattr(torch.ops.sgl_kernel, "fwd"))
EOF
