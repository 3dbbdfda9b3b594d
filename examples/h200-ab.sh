#!/usr/bin/env bash
# The measurement of issue 5 on the GPU machine: `ponytail bench` of workload W
# (batch 8, prompt 4096, 256 new tokens), its memory timeline, and a
# `ponytail trace` of the same run. Results land in bench/ (or $1).
#
#   examples/h200-ab.sh [OUTDIR] [extra bench flags...]
#
# Needs a built ponytail (PONYTAIL_BIN or ./build/tools/ponytail) and a python
# with torch + transformers (PYTHON, default python3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bench}"
shift || true
pt="${PONYTAIL_BIN:-$root/build/tools/ponytail}"
py="${PYTHON:-python3}"
mkdir -p "$out"
work=(--batch 8 --prompt 4096 --new-tokens 256)

"$pt" bench "${work[@]}" --repeats "${REPEATS:-3}" --python "$py" \
  --out "$out/bench-b8-p4096-n256.json" "$@" | tee "$out/bench-b8-p4096-n256.txt"
"$pt" timeline "$out/bench-b8-p4096-n256.json" -o "$out/timeline-b8-p4096-n256.png"
"$pt" timeline "$out/bench-b8-p4096-n256.json" -o "$out/timeline-b8-p4096-n256.svg"
"$pt" trace --top 30 -- "$py" "$root/examples/generate.py" "${work[@]}" --warmup \
  | tee "$out/trace-b8-p4096-n256.txt"
"$pt" trace --json --top 0 -- "$py" "$root/examples/generate.py" "${work[@]}" --warmup \
  > "$out/trace-b8-p4096-n256.json"
echo "results in $out"
