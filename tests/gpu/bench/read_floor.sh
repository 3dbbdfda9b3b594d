#!/usr/bin/env bash
# What one kernel that only reads the K/V bytes of issue 17's latency-bound points takes on this
# GPU (tests/gpu/bench/read_floor.py says why): builds tests/gpu/bench/read_floor.cu with nvcc for
# sm_90 and runs the sweep (~1-2 min). Table in $OUT/read_floor.txt.
#   bash tests/gpu/bench/read_floor.sh
#   READ_PER_SM=1 bash tests/gpu/bench/read_floor.sh   # the read rate per SM when N SMs read
#   READ_CHUNKED=1 bash tests/gpu/bench/read_floor.sh  # each CTA its contiguous chunk, as decode reads
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
CUDA=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA/bin:$PATH" PYTHONUNBUFFERED=1
b=$(mktemp -d)
nvcc -shared -Xcompiler -fPIC -O3 -gencode=arch=compute_90,code=sm_90 "$root/tests/gpu/bench/read_floor.cu" \
  -o "$b/librf.so" || { echo "read_floor: nvcc failed"; exit 1; }
mode=() table=read_floor.txt
# READ_PER_SM=1: one CTA per SM on N SMs (read_floor.py --per-sm)
[ -n "${READ_PER_SM:-}" ] && mode=(--per-sm) table=read_per_sm.txt
# READ_CHUNKED=1: contiguous chunks per CTA against the grid stride (read_floor.py --chunked)
[ -n "${READ_CHUNKED:-}" ] && mode=(--chunked) table=read_chunked.txt
"${PYTHON:-python3}" "$root/tests/gpu/bench/read_floor.py" --lib "$b/librf.so" "${mode[@]}" --out "$out/$table"
