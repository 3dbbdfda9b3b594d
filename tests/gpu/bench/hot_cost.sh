#!/usr/bin/env bash
# Host cost per allocation, bare vs under the shim (bench/records/2026-11-29-host-cost-per-allocation.md):
#   hot_cost.cu   driver queries of the shim's routing, cudaMallocAsync + cudaFreeAsync pairs with
#                 and without a kernel in flight (bare, shim defaults, shim PONYTAIL_KV_MIN=1M:
#                 small stream-ordered requests then pass through to the driver's pool)
#   pair_cost.py  (PY=1 only: its rows moved by +-30% between calls, same record)
#                 torch.empty, a + b and add(out=) per iteration under stock torch, torch's
#                 cudaMallocAsync backend, the shim (defaults, KV_MIN=1M, TORCH_ALLOC=keep);
#                 PONYTAIL_ATTN=off
# ROUNDS (2) interleaved rounds; prints the median of the rounds per configuration and row.
# Table in $OUT/hot_cost.txt.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
cuda="$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")"
nvcc -O2 -cudart shared -I"$root" "$root/tests/gpu/bench/hot_cost.cu" -o "$tmp/hot_cost" \
  -Xlinker -rpath -Xlinker "$cuda/lib64" -L"$cuda/lib64/stubs" -lcuda || exit 1
raw="$out/hot_cost-raw.txt"; : >"$raw"   # raw lines as they come: a cut-short call still reports
for r in $(seq 1 "${ROUNDS:-2}"); do
  "$tmp/hot_cost" bare >>"$raw"
  LD_PRELOAD="$shim" "$tmp/hot_cost" shim >>"$raw"
  LD_PRELOAD="$shim" PONYTAIL_KV_MIN=1M "$tmp/hot_cost" shim-kv1M >>"$raw"
  [ "${PY:-0}" = 1 ] || continue
  for c in stock async shim shim-kv1M shim-keep; do
    e=(env -u PYTORCH_CUDA_ALLOC_CONF)
    case $c in
      async) e+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) ;;
      shim) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async) ;;
      shim-kv1M) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=async PONYTAIL_KV_MIN=1M) ;;
      shim-keep) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_TORCH_ALLOC=keep) ;;
    esac
    "${e[@]}" python3 "$root/tests/gpu/bench/pair_cost.py" "py-$c" 5 >>"$raw" 2>"$tmp/py-$c.err" || tail -3 "$tmp/py-$c.err"
  done
done
python3 - "$raw" <<'PY' | tee "$out/hot_cost.txt"
import collections, statistics, sys
v = collections.OrderedDict()
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) >= 3:
        v.setdefault((" ".join(p[1:-1])), collections.OrderedDict()).setdefault(p[0], []).append(float(p[-1]))
labels = []
for row in v.values():
    for k in row:
        if k not in labels: labels.append(k)
print("ns per call / iteration, median of rounds (hot_cost.cu rows: bare|shim|shim-kv1M; pair_cost.py rows: py-*)")
for row, d in v.items():
    print("%-28s " % row + " ".join("%s %.1f" % (k, statistics.median(x)) for k, x in d.items()))
PY
