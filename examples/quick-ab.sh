#!/usr/bin/env bash
# A small, fast A/B (about a minute on an H200) to check the whole chain:
# generate.py without and with the shim, the table, and a PNG timeline.
#
#   examples/quick-ab.sh [OUTDIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-${TMPDIR:-/tmp}}"
pt="${PONYTAIL_BIN:-$root/build/tools/ponytail}"
"$pt" bench --layers 4 --batch 4 --prompt 512 --new-tokens 32 --timeline-ms 20 \
  --python "${PYTHON:-python3}" --out "$out/quick-ab.json"
"$pt" timeline "$out/quick-ab.json" -o "$out/quick-ab.png"
