#!/usr/bin/env bash
# Compatibility on the GPU (issue 15): programs that run stock must run under the shim's
# defaults with the same results. One device call runs the STAGES asked for (default all):
#   progs   tests/gpu/checks/cuda_programs.sh: plain CUDA C programs (runtime and driver API, default
#           and explicit pools, release thresholds, graphs, IPC, cuBLAS; shared and static
#           cudart) and non-PyTorch frameworks (CuPy, JAX, Numba, Triton), stock vs the shim
#   matrix  tests/gpu/checks/compat_matrix.py: PyTorch / transformers programs (MATRIX_ROWS,
#           MATRIX_ARMS; see its header), with memory and time
#   torch   tests/gpu/checks/torch_tests.sh: PyTorch's own test_cuda.py memory / allocator / mempool /
#           graph / stream cases, stock vs the shim (needs the test file: see that script)
# Usage (device tool): STAGES="progs matrix" bash tests/gpu/checks/compat.sh
# Everything comes back as $OUT/compat.tgz; the tables are printed last and kept in $OUT.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"
work="${COMPAT_WORK:-/tmp/pt-compat}"
mkdir -p "$out" "$work"
export PATH="/usr/local/cuda/bin:$PATH" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
. "$root/tests/gpu/build.sh"
t0=$SECONDS
pt_gpu_build "$root" "$work"  # SHIM_PREBUILT=PATH: a shim built on the CPU machine, no build here
echo "== build: $(( SECONDS - t0 )) s"
budget="${BUDGET_S:-560}" # the whole call, build included

stage() { # NAME SECONDS COMMAND...: one stage, killed at its share of the budget
  local name=$1 secs=$2; shift 2
  local left=$(( budget - SECONDS - 15 ))
  [ "$secs" -gt "$left" ] && secs=$left
  if [ "$secs" -le 10 ]; then echo "== $name: not run (no time left)"; return; fi
  local s0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$work/$name.log" 2>&1
  echo "== $name: rc $? in $(( SECONDS - s0 )) s"
}

for s in ${STAGES:-progs matrix torch}; do
  case "$s" in
    progs) stage progs "${PROGS_S:-150}" env SHIM="$shim" OUT="$work/progs" bash "$root/tests/gpu/checks/cuda_programs.sh" ;;
    matrix) stage matrix "${MATRIX_S:-400}" python3 "$root/tests/gpu/checks/compat_matrix.py" --shim "$shim" \
              --out "$work/matrix" --rows "${MATRIX_ROWS:-hf_eager,hf_padded,hf_static,compile_ro,cuda_graph,mp_share,cont_batch,torchrun_nccl}" \
              --arms "${MATRIX_ARMS:-}" --deadline "${MATRIX_DEADLINE:-330}" \
              ${MATRIX_TRACE:+--trace} ;;
    torch) stage torch "${TORCH_S:-420}" env SHIM="$shim" OUT="$work/torch" bash "$root/tests/gpu/checks/torch_tests.sh" ;;
    *) echo "unknown stage $s" ;;
  esac
done

# Traces are large: each is gzipped on its own (ponytail replay reads .gz) before the tar.
find "$work" -name '*.trace.*' ! -name '*.gz' -exec gzip -f {} \; 2>/dev/null
tar -C "$work" -czf "$out/compat.tgz" --exclude='inductor-cache' . 2>/dev/null
for s in ${STAGES:-progs matrix torch}; do
  [ -f "$work/$s.log" ] || continue
  cp "$work/$s.log" "$out/$s.log"
  echo "################ $s (last lines)"
  tail -n "${TAIL_LINES:-30}" "$work/$s.log"
done
