#!/usr/bin/env bash
# Allocator stress on the GPU under the shim (issue 3): 8 threads x 4 streams,
# 10^6 alloc / fill / cross-stream check / cross-stream free cycles with
# kernels writing and verifying a pattern per allocation (tests/gpu/checks/alloc_stress.cu).
# Three configurations: the defaults (32 MiB physical handles), a small keep threshold and a
# memory limit that force trimming and stitching (one-granule handles under the limit), and
# keep 0 with 32 MiB handles (whole handles trimmed and regrown all the time). Prints one
# table; exit 1 on any corruption or CUDA error. Run time <= 110 s after the build.
# Usage: tests/gpu/checks/alloc_stress.sh   (results in $OUT, default ./gpu-out/alloc-stress)
#   SHORT=1   about a third of the operations and time (~40 s; what tests/gpu/check_all.sh runs)
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}/alloc-stress"; mkdir -p "$out"
nvcc="${NVCC:-nvcc}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$out"
# -cudart shared: the runtime's entry points must be dynamic symbols for the shim.
"$nvcc" -O2 -cudart shared -o "$out/alloc_stress" "$root/tests/gpu/checks/alloc_stress.cu" -lpthread \
  >"$out/nvcc.log" 2>&1 || { cat "$out/nvcc.log"; exit 1; }

fail=0
run() { # name, ops, seconds, env...
  local name=$1 ops=$2 secs=$3; shift 3
  env "$@" LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$out/$name.stats.json" \
    "$out/alloc_stress" --ops "$ops" --threads 8 --streams 4 --seconds "$secs" >"$out/$name.txt" 2>"$out/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { fail=1; echo "$name: exit $rc"; tail -5 "$out/$name.err"; }
}
if [ "${SHORT:-0}" = 1 ]; then # tests/gpu/check_all.sh: the same three configurations, ~1/3 of the work
  run default 300000 20
  run keep0-limit3G 70000 10 PONYTAIL_POOL_KEEP=0 PONYTAIL_MEM_LIMIT=3G
  run keep0-chunk32M 70000 8 PONYTAIL_POOL_KEEP=0 PONYTAIL_POOL_CHUNK=32M
else
  run default 1000000 55
  run keep0-limit3G 200000 25 PONYTAIL_POOL_KEEP=0 PONYTAIL_MEM_LIMIT=3G
  run keep0-chunk32M 200000 20 PONYTAIL_POOL_KEEP=0 PONYTAIL_POOL_CHUNK=32M
fi

python3 - "$out" default keep0-limit3G keep0-chunk32M <<'PY'
import json, sys, re
out = sys.argv[1]
print("%-15s %9s %6s %6s %6s %9s %9s %8s %6s %8s %10s %10s" % (
    "config", "ops", "corr", "errs", "secs", "pooled", "passthr", "stitches", "trims", "xwaits",
    "peak_live", "peak_phys"))
for name in sys.argv[2:]:
    line = open("%s/%s.txt" % (out, name)).read().strip() or "ops=? corruptions=? errors=? seconds=?"
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    try:
        a = json.load(open("%s/%s.stats.json" % (out, name)))["alloc"]
    except Exception:
        a = {}
    mib = lambda k: "%.0fM" % (a[k] / 2**20) if k in a else "?"
    print("%-15s %9s %6s %6s %6s %9s %9s %8s %6s %8s %10s %10s" % (
        name, kv.get("ops", "?"), kv.get("corruptions", "?"), kv.get("errors", "?"), kv.get("seconds", "?"),
        a.get("pooled_allocs", "?"), a.get("passthrough_allocs", "?"), a.get("stitches", "?"),
        a.get("trims", "?"), a.get("cross_stream_waits", "?"), mib("peak_live_bytes"), mib("peak_physical_bytes")))
PY
exit $fail
