#!/usr/bin/env bash
# A short re-check after allocator or IPC changes, sized for a few minutes of device time:
#  1. the issue-3 workload (B=32, prompt 2048, 1024 new tokens, flash SDPA) under the shim's pool
#     only (PONYTAIL_ATTN=off): pool peak physical / peak live, decode step, token-id digest
#     (compare with torch default's digest of the same workload in bench/records/2026-11-29-allocator-in-shim.md);
#  2. tests/gpu/checks/ipc_torch.py (CUDA IPC of a pooled tensor between two processes) with the shim,
#     when that script exists.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
export PYTHONUNBUFFERED=1
if [ -f "$root/tests/gpu/checks/ipc_torch.py" ]; then
  for m in raw torch; do
    echo "== IPC of a pooled tensor between two processes (--mode $m), under the shim"
    LD_PRELOAD="$shim" PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/ipc-$m.%p.json" \
      timeout 90 python3 "$root/tests/gpu/checks/ipc_torch.py" --mode $m 2>&1 | tail -4
    cat "$tmp"/ipc-$m.*.json 2>/dev/null | python3 -c "import sys, json, re
for doc in re.split(r'(?<=})\s*(?={)', sys.stdin.read().strip()):
    a = json.loads(doc).get('alloc', {})
    print('  stats: exports', a.get('ipc_exports'), 'opens', a.get('ipc_opens'), 'errors', a.get('ipc_errors'))" 2>/dev/null
  done
fi
echo "== pool on B=32, prompt 2048, 1024 new tokens"
LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/s.json" \
  TORCH_CUDNN_SDPA_DEPRIORITIZED=1 python3 "$root/examples/generate.py" --batch 32 --prompt 2048 \
  --new-tokens "${N:-1024}" --json "$tmp/r.json" >"$tmp/gen.log" 2>&1 || tail -5 "$tmp/gen.log"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/r.json")); a = json.load(open(f"{d}/s.json"))["alloc"]
print("pool peak physical %d MiB / peak live %d MiB = %.4f; grows %d stitches %d trims %d syncs %d" % (
    a["peak_physical_bytes"] >> 20, a.get("peak_requested_bytes", a["peak_live_bytes"]) >> 20, a["peak_physical_bytes"] / a.get("peak_requested_bytes", a["peak_live_bytes"]),
    a["grows"], a["stitches"], a["trims"], a.get("syncs", 0)))
print("decode p50 %.2f ms, total %.2f s, torch peak reserved %d MiB, tokens sha %s" % (
    r["decode_step_ms"]["p50"], r["total_s"], r["peak_reserved_bytes"] >> 20, r["token_ids_sha256"][:16]))
PY
