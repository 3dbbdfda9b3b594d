#!/usr/bin/env bash
# Ponytail's main job in one command: build, then
#   with a GPU:    the short sweep of the bundled example (examples/generate.py, stock torch vs
#                  the shim, batch 8 at prompts 512 and 4096): the correctness verdict first,
#                  then the speed and memory of each point and their summary, then the plot
#                  of the gain by prompt length, and a capacity plan for the same model;
#   without a GPU: says so, then replays the bundled allocation traces through the pool
#                  and prints the capacity plan for the bundled model config.
# Usage: tools/demo.sh [extra `ponytail bench` flags, e.g. --repeats 3]   (results in ./demo-out)
# Exit status: the sweep's (0, 3 verdict OUTSIDE, 4 NaN/Inf, 1 a run failed) on a GPU.
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

capacity() {
  echo "== capacity plan: bundled Llama config (examples/llama-1b-config.json), H200 (140 GiB)"
  "$pt" capacity --model-config examples/llama-1b-config.json --batch 32 --seq 4096 \
    --gpu-mem 140G --weights 1628M
}

if [ -e /dev/nvidiactl ] && python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
  # Correctness before speed: each point prints its verdict (judged at the first and the last
  # point) before its table, and the summary starts with the verdict over every point.
  echo "== stock torch (A) vs Ponytail (B): examples/generate.py, batch 8, prompts 512 and 4096, 64 new tokens"
  rc=0
  "$pt" bench --sweep prompt=512,4096 --batch 8 --new-tokens 64 --out "$out/sweep.json" "$@" || rc=$?
  # A verdict OUTSIDE (3) or NaN (4) still wrote every table and the result: plot it too.
  if [ -s "$out/sweep.json" ] && "$pt" plot-sweep "$out/sweep.json" -o "$out/sweep.png" >/dev/null; then
    echo "== plot of the gain by prompt length: $out/sweep.png (result: $out/sweep.json)"
  fi
  capacity
  exit $rc
else
  capacity
  echo "== no GPU (or no torch with CUDA) here: skipping the A/B; replaying the bundled traces instead"
  for t in tests/data/traces/*.trace.gz; do
    echo "-- $t"
    "$pt" replay "$t"
  done
fi
