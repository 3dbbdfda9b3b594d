#!/usr/bin/env bash
# Where does the shim's wall time go on the issue-3 workload? Interleaved rounds of
# examples/generate.py (flash SDPA, B=32, prompt 2048, N new tokens) under five configurations:
#   stock      torch's caching allocator, no shim
#   async      torch's cudaMallocAsync backend (the driver pool), no shim
#   shim       the shim's defaults (torch switched to cudaMallocAsync; stream-ordered requests of
#              every size and synchronous ones >= 1 MiB into the pool), PONYTAIL_ATTN=off so only
#              the allocator differs
#   shim-nokv  the same with PONYTAIL_KV_MIN=1 TiB: the backend switch without the pool
#   shim-kv0   the same with PONYTAIL_KV_MIN=0: every allocation, small synchronous ones too
#   shim-kv1M  PONYTAIL_KV_MIN=1M: small stream-ordered requests pass through to the driver's
#              pool (the defaults before PONYTAIL_KV_MIN_ASYNC)
#   (every shim-* arm but shim-keep sets PONYTAIL_TORCH_ALLOC=async: the pool under every tensor,
#   the default of the sessions that wrote this script)
#   shim-keep  PONYTAIL_TORCH_ALLOC=keep: torch's caching allocator, its segments into the pool
#   shim-keep4g the shim's defaults with PONYTAIL_POOL_KEEP=4G (fewer trims and regrowths)
#   shim-c2m   the shim's defaults with PONYTAIL_POOL_CHUNK=2M (one granule per physical handle)
# Prints per-round total / prefill / decode p50 and the medians per configuration.
#   B=32 P=2048 N=512 ROUNDS=2 CONFIGS="stock async shim shim-kv0 shim-keep"   ($OUT/wall_diag.txt)
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen=(python3 "$root/examples/generate.py" --batch "${B:-32}" --prompt "${P:-2048}" --new-tokens "${N:-512}" --warmup)
configs=(${CONFIGS:-stock async shim shim-kv0 shim-keep})
for r in $(seq 1 "${ROUNDS:-2}"); do
  for c in "${configs[@]}"; do
    e=(env -u PYTORCH_CUDA_ALLOC_CONF TORCH_CUDNN_SDPA_DEPRIORITIZED=1)
    case $c in
      stock) ;;
      async) e+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) ;;
      shim) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async) ;;
      shim-nokv) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_KV_MIN=1099511627776) ;;
      shim-kv0) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_KV_MIN=0) ;;
      shim-kv1M) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_KV_MIN=1M) ;;
      shim-keep) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=keep) ;;
      shim-keep4g) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_POOL_KEEP=4G) ;;
      shim-c2m) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_POOL_CHUNK=2M) ;;
    esac
    case $c in shim*) e+=(PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/$c-$r.stats.json") ;; esac
    "${e[@]}" "${gen[@]}" --json "$tmp/$c-$r.json" >"$tmp/$c-$r.log" 2>&1 || echo "$c round $r: exit $?"
    # One line per run as it ends, so a cut-short call still reports.
    python3 - "$tmp/$c-$r" "$c" "$r" <<'PY' | tee -a "$out/wall_diag.txt"
import json, sys
base, c, r = sys.argv[1:]
try:
    j = json.load(open(base + ".json"))
    line = "run %-10s round %s: total %.2f s, prefill %.3f s, decode p50 %.2f ms, reserved %.0f MiB" % (
        c, r, j["total_s"], j["prefill_s"], j["decode_step_ms"]["p50"], j["peak_reserved_bytes"] / 2**20)
except Exception as e:
    line = "run %-10s round %s: no result (%s)" % (c, r, e)
try:
    a = json.load(open(base + ".stats.json"))["alloc"]
    line += ("; pool: grows %s stitches %s (%.0f MiB) trims %s syncs %s, map %.0f ms, wait %.0f ms, "
             "peak phys/requested %.0f/%.0f MiB, pass-through %s") % (
        a.get("grows"), a.get("stitches"), a.get("stitched_bytes", 0) / 2**20, a.get("trims"),
        a.get("syncs"), a.get("map_ns", 0) / 1e6, a.get("wait_ns", 0) / 1e6,
        a.get("peak_physical_bytes", 0) / 2**20, a.get("peak_requested_bytes", 0) / 2**20,
        a.get("passthrough_allocs"))
except Exception:
    pass
print(line, flush=True)
PY
  done
done
python3 - "$tmp" "${ROUNDS:-2}" "${configs[@]}" <<'PY' | tee -a "$out/wall_diag.txt"
import json, statistics, sys
d, rounds, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("%-10s %5s %9s %9s %9s %9s" % ("config", "round", "total_s", "prefill_s", "p50_ms", "resMiB"))
med = {}
for c in cfgs:
    rows = []
    for r in range(1, rounds + 1):
        try:
            j = json.load(open(f"{d}/{c}-{r}.json"))
        except Exception:
            print("%-10s %5d failed" % (c, r)); continue
        rows.append((j["total_s"], j["prefill_s"], j["decode_step_ms"]["p50"], j["peak_reserved_bytes"] / 2**20))
        print("%-10s %5d %9.2f %9.3f %9.2f %9.0f" % ((c, r) + rows[-1]))
    if rows:
        med[c] = [statistics.median(x) for x in zip(*rows)]
print("medians (ratio to stock):")
for c, m in med.items():
    s = med.get("stock")
    print("%-10s total %7.2f s (%.3f)  prefill %6.3f s  p50 %6.2f ms (%.3f)  reserved %6.0f MiB" % (
        c, m[0], m[0] / s[0] if s else float("nan"), m[1], m[2], m[2] / s[2] if s else float("nan"), m[3]))
PY
