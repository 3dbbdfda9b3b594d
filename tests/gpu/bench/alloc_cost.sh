#!/usr/bin/env bash
# Where does the shim's allocator cost go on the issue-3 workload? The same run as
# tests/gpu/bench/alloc_ab.sh (B=32, prompt 2048, 1024 new tokens, flash SDPA, PONYTAIL_ATTN=off)
# under: the driver pool alone (backend:cudaMallocAsync), the shim with routing off (pure
# interception cost on top of that backend), the shim with its defaults, and the shim with a
# large PONYTAIL_POOL_KEEP (no trim churn). Prints decode step p50/mean, total, peaks.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen=(python3 "$root/examples/generate.py" --batch "${B:-32}" --prompt "${P:-2048}" --new-tokens "${N:-1024}")
run() { local n=$1; shift
  env TORCH_CUDNN_SDPA_DEPRIORITIZED=1 "$@" "${gen[@]}" --json "$tmp/$n.json" >"$tmp/$n.log" 2>&1 || tail -3 "$tmp/$n.log"; }
run async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
run shim_pool0 LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_POOL=0 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
# shim arms: the pool under every tensor (PONYTAIL_TORCH_ALLOC=async; the default is keep)
run shim LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/shim.stats.json"
run shim_keep16g LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_POOL_KEEP=16G PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/shim_keep16g.stats.json"
python3 - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
print("%-13s %8s %8s %8s %9s %9s %11s" % ("run", "p50_ms", "mean_ms", "total_s", "rsv_MiB", "alloc_MiB", "phys/req"))
for n in ("async", "shim_pool0", "shim", "shim_keep16g"):
    p = f"{d}/{n}.json"
    if not os.path.exists(p):
        print(n, "failed"); continue
    r = json.load(open(p)); s = r["decode_step_ms"]; pl = "-"
    sp = f"{d}/{n}.stats.json"
    if os.path.exists(sp):
        a = json.load(open(sp))["alloc"]
        pl = "%d/%d" % (a["peak_physical_bytes"] >> 20, a.get("peak_requested_bytes", a["peak_live_bytes"]) >> 20) + " tr%d st%d gr%d" % (a["trims"], a["stitches"], a["grows"])
    print("%-13s %8.2f %8.2f %8.2f %9d %9d %s" % (n, s["p50"], s["mean"], r["total_s"], r["peak_reserved_bytes"] >> 20, r["peak_allocated_bytes"] >> 20, pl))
PY
