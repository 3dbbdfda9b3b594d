#!/usr/bin/env bash
# Ponytail's main job in one command: build, then
#   with a GPU:    the A/B of the bundled example (examples/generate.py, stock torch vs the
#                  shim) with its memory timeline, and a capacity plan for the same model;
#   without a GPU: says so, then replays the bundled allocation traces through the pool
#                  and prints the capacity plan for the bundled model config.
# Usage: tools/demo.sh [extra `ponytail bench` flags]   (results in ./demo-out)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="/usr/local/cuda/bin:$PATH"
# meson and ninja from PATH, pip or apt, else a message with the command to run (exit 2).
source tools/ensure_build_tools.sh
pt_ensure_build_tools || exit
build="${PONYTAIL_BUILD:-build}"
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null
pt="$build/tools/ponytail"
out=demo-out
mkdir -p "$out"

echo "== capacity plan: bundled Llama config (examples/llama-1b-config.json), H200 (140 GiB)"
"$pt" capacity --model-config examples/llama-1b-config.json --batch 32 --seq 4096 \
  --gpu-mem 140G --weights 1628M

if [ -e /dev/nvidiactl ] && python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== A/B: examples/generate.py batch 8, prompt 4096, 256 new tokens (stock torch vs Ponytail)"
  "$pt" bench --batch 8 --prompt 4096 --new-tokens 256 --out "$out/bench.json" "$@"
  "$pt" timeline "$out/bench.json" -o "$out/timeline.png"
else
  echo "== no GPU (or no torch with CUDA) here: skipping the A/B; replaying the bundled traces instead"
  for t in tests/data/traces/*.trace.gz; do
    echo "-- $t"
    "$pt" replay "$t"
  done
fi
