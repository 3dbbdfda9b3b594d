#!/usr/bin/env bash
# The pool on the issue-3 workload, for study on the CPU (`ponytail replay`): one shim run records
# its allocation trace (PONYTAIL_TRACE) and exit stats; a second with one new token gives the
# prefill's share of the pool's work (grows, trims, stitches, syncs, mapping and waiting time),
# the rest being the decode's. The trace comes back gzipped in parts of at most 15 MiB (the device
# tool returns files of up to 16 MiB): `cat pool-trace.gz.part-* > pool-trace.gz`.
#   B=32 P=2048 N=1024 SHIM_ENV="K=V ..." ($OUT/pool_trace.txt, $OUT/pool-trace.gz.part-*)
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
table="$out/pool_trace.txt"
gen=(python3 "$root/examples/generate.py" --batch "${B:-32}" --prompt "${P:-2048}" --warmup)
run() { # tag new-tokens [trace]
  local e=(env -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_STATS=json
           PONYTAIL_STATS_FILE="$tmp/$1.stats.json" ${SHIM_ENV:-})
  [ -n "${3:-}" ] && e+=(PONYTAIL_TRACE="$3")
  "${e[@]}" "${gen[@]}" --new-tokens "$2" --json "$tmp/$1.json" >"$tmp/$1.log" 2>&1 || echo "$1: exit $?"
}
run prefill 1
run whole "${N:-1024}" "$tmp/pool.trace"
gzip -6 -c "$tmp/pool.trace" | split -b 15M - "$out/pool-trace.gz.part-"
python3 - "$tmp" <<'PY' | tee "$table"
import json, os, sys
t = sys.argv[1]
print("the pool on B=%s P=%s: the prefill (1 new token) and the whole run; decode = whole - prefill"
      % (os.environ.get("B", "32"), os.environ.get("P", "2048")))
keys = ("grows", "trims", "stitches", "syncs", "map_ns", "wait_ns", "pooled_allocs", "passthrough_allocs",
        "peak_live_bytes", "peak_physical_bytes")
rows = {}
for tag in ("prefill", "whole"):
    try:
        rows[tag] = json.load(open(os.path.join(t, tag + ".stats.json")))["alloc"]
        r = json.load(open(os.path.join(t, tag + ".json")))
        print("%-8s total %.2f s, prefill %.3f s, step p50 %s ms" % (tag, r["total_s"], r["prefill_s"],
              r["decode_step_ms"]["p50"]))
    except Exception as e:
        print("%s: no stats (%s)" % (tag, e))
if len(rows) == 2:
    print("%-20s %14s %14s %14s" % ("", "prefill", "whole", "decode"))
    for k in keys:
        a, b = rows["prefill"].get(k, 0), rows["whole"].get(k, 0)
        scale = 1e6 if k.endswith("_ns") else (2**20 if k.endswith("_bytes") else 1)
        unit = " ms" if k.endswith("_ns") else (" MiB" if k.endswith("_bytes") else "")
        print("%-20s %14.0f %14.0f %14s" % (k + unit, a / scale, b / scale,
              "" if k.startswith("peak") else "%.0f" % ((b - a) / scale)))
PY
ls -l "$out"/pool-trace.gz.part-* | awk '{print $5, $NF}'
