#!/usr/bin/env bash
# Allocator A/B on the standard workload (issue 3): examples/generate.py
# --batch 32 --prompt 2048 --new-tokens 1024 with flash SDPA
# (TORCH_CUDNN_SDPA_DEPRIORITIZED=1) under four allocators: torch's default,
# expandable_segments:True, backend:cudaMallocAsync, and the shim's pool
# (PONYTAIL_ATTN=off so that only the allocator differs). One table: peak
# reserved (torch), NVML peak used, the shim's peak physical / peak live,
# wall time, tokens/s, and whether the token ids equal torch default's.
# Usage: tests/gpu/bench/alloc_ab.sh [extra generate.py flags]  (results in $OUT, default ./gpu-out/alloc-ab)
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}/alloc-ab"; mkdir -p "$out"
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$out"
gen=("$py" "$root/examples/generate.py" --batch "${B:-32}" --prompt "${P:-2048}" --new-tokens "${N:-1024}" "$@")

run() { # name, env...
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  env -u PYTORCH_CUDA_ALLOC_CONF TORCH_CUDNN_SDPA_DEPRIORITIZED=1 "$@" "${gen[@]}" --json "$out/$name.json" \
    >"$out/$name.log" 2>&1
  local rc=$?
  echo "$rc $(date +%s.%N) $t0" >"$out/$name.rc"
  [ $rc -eq 0 ] || { echo "$name: exit $rc"; tail -5 "$out/$name.log"; }
}
run default
run expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
run async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
# The pool under every tensor: PONYTAIL_TORCH_ALLOC=async sets backend:cudaMallocAsync itself
# (the default since the eighth session is keep: see docs/compatibility.md).
run shim LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$out/shim.stats.json"

"$py" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
names = ["default", "expandable", "async", "shim"]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
res = {n: load("%s/%s.json" % (out, n)) for n in names}
st = load("%s/shim.stats.json" % out)
ref = res["default"]["token_ids_sha256"] if res["default"] else None
mib = lambda b: "%.0f" % (b / 2**20) if b is not None else "n/a"
print("%-11s %13s %10s %12s %10s %8s %8s %9s" % ("allocator", "reserved_MiB", "nvml_MiB", "phys/req_MiB",
                                                 "wall_s", "tok/s", "vs_def", "alloc_MiB"))
for n in names:
    r = res[n]
    if not r:
        print("%-11s failed (see %s/%s.log)" % (n, out, n))
        continue
    pl = "-"
    if n == "shim" and st and "alloc" in st:
        a = st["alloc"]
        pl = "%s/%s" % (mib(a.get("peak_physical_bytes")), mib(a.get("peak_requested_bytes", a.get("peak_live_bytes"))))
    wall = r.get("total_s")
    print("%-11s %13s %10s %12s %10s %8s %8s %9s" % (
        n, mib(r.get("peak_reserved_bytes")), mib(r.get("nvml_peak_used_bytes")), pl,
        "%.1f" % wall if wall else "n/a", "%.0f" % (r.get("tokens_per_s") or 0),
        "same" if r.get("token_ids_sha256") == ref else "DIFF", mib(r.get("peak_allocated_bytes"))))
PY
