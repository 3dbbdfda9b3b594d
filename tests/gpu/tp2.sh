#!/usr/bin/env bash
# Issue 6 on a machine with >= 2 GPUs (kinds nvidia-h200-x2 and up): a torchrun tensor-parallel
# exchange (NCCL all-reduce + vLLM-style CUDA IPC of pooled buffers, tests/gpu/tp_allreduce.py)
# without and with the shim, then two ranks of examples/generate.py under the shim (each on its
# own GPU: per-device pools, per-rank peak memory and step time). NVLink multicast stays off.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
n=$(python3 -c 'import torch; print(torch.cuda.device_count())')
[ "$n" -ge 2 ] || { echo "tp2.sh needs >= 2 GPUs (found $n)"; exit 1; }
tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
tr=(torchrun --nproc-per-node 2 "$root/tests/gpu/tp_allreduce.py" --steps 20 --mib 64)
echo "== stock"; "${tr[@]}" 2>&1 | grep "^rank"
echo "== shim";  LD_PRELOAD="$shim" PONYTAIL_STATS=json PONYTAIL_STATS_FILE=/tmp/tp.%p.json "${tr[@]}" 2>&1 | grep "^rank"
python3 - <<'PY'
import glob, json
for f in sorted(glob.glob("/tmp/tp.*.json")):
    a = json.load(open(f)).get("alloc", {})
    print(f, "pooled", a.get("pooled_allocs"), "ipc exports", a.get("ipc_exports"), "opens", a.get("ipc_opens"),
          "peer grants", a.get("peer_grants"), "peak phys/live MiB", (a.get("peak_physical_bytes") or 0) >> 20,
          (a.get("peak_live_bytes") or 0) >> 20)
PY
echo "== generate.py on GPU 0 and GPU 1 at once, under the shim"
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g LD_PRELOAD="$shim" python3 "$root/examples/generate.py" --batch 8 --prompt 2048 \
    --new-tokens 128 --json "/tmp/gen$g.json" >"/tmp/gen$g.log" 2>&1 &
done
wait
for g in 0 1; do tail -1 "/tmp/gen$g.log"; done
