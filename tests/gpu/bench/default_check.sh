#!/usr/bin/env bash
# The committed defaults on the GPU in one call (shim and CLI built on the CPU machine and
# carried: build-gpu/shim/libponytail_shim.so from `meson setup build-gpu -Dtests=disabled`,
# build-noelf/tools/ponytail from `meson setup build-noelf -Dtools_libelf=disabled -Dtests=disabled`):
#   sdpa     tests/gpu/checks/sdpa_policy.sh (which kernel each SDPA call lands on, default and
#            PONYTAIL_ATTN_PREFILL=0, outputs vs fp32)
#   bench    `ponytail bench` B=8, prompt 2048, 16 new tokens: the verdict (logits within
#            PyTorch's own backend spread), TTFT and decode step, stock vs the default shim
#   prefill  tests/gpu/checks/prefill.sh with PREFILL_STAGES (default "correctness timing"; the
#            other PREFILL_* settings pass through: PREFILL_VARIANTS, PREFILL_TIMING_ARGS)
#   ttft     tests/gpu/bench/prefill_ttft.sh (issue 18's time to first token table, stock against
#            the default shim and PONYTAIL_ATTN_PREFILL=0; ROWS, ROUNDS, ARMS pass through)
#   checks   tests/gpu/check_all.sh with CHECKS (e.g. "compat-progs compat-matrix compat-torch";
#            MATRIX_ROWS and MATRIX_ARMS pass through) on the carried shim, its budget what is left
# STEPS picks and orders them (default "sdpa bench prefill"); BUDGET_S (570) bounds the call.
# Everything in $OUT/default_check.tgz, the summary table last (and in $OUT/default_check.txt).
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
work=$(mktemp -d)
shim=build-gpu/shim/libponytail_shim.so pt=build-noelf/tools/ponytail
budget=${BUDGET_S:-570} t0=$SECONDS
rows=()
step() { # NAME LIMIT COMMAND...
  local name=$1 lim=$2; shift 2
  local left=$(( budget - (SECONDS - t0) ))
  (( left < 30 )) && { rows+=("$name | NOT RUN (no time left)"); return; }
  (( lim > left )) && lim=$left
  mkdir -p "$work/$name"
  local s=$SECONDS
  OUT="$work/$name" timeout -k 10 "$lim" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  rows+=("$name | rc $rc | $(( SECONDS - s )) s | $(tail -n 1 "$work/$name.log" | cut -c1-110)")
  echo "== $name rc $rc"; tail -n 25 "$work/$name.log"
}
for s in ${STEPS:-sdpa bench prefill}; do
  case $s in
    sdpa) step sdpa 200 env SHIM_PREBUILT="$shim" bash tests/gpu/checks/sdpa_policy.sh ;;
    bench) step bench 200 "$pt" bench --script examples/generate.py --shim "$shim" --batch 8 --prompt 2048 \
             --new-tokens 16 --out "$work/bench/bench.json" ;;
    prefill) step prefill 330 env PREFILL_STAGES="${PREFILL_STAGES:-correctness timing}" \
               bash tests/gpu/checks/prefill.sh ;;
    ttft) step ttft 420 env SHIM_PREBUILT="$shim" bash tests/gpu/bench/prefill_ttft.sh ;;
    checks) step checks 560 env SHIM_PREBUILT="$shim" BUDGET_S=$(( budget - (SECONDS - t0) - 15 )) \
              CHECKS="${CHECKS:-compat}" bash tests/gpu/check_all.sh ;;
    *) rows+=("$s | unknown step") ;;
  esac
done
tar -C "$work" -czf "$out/default_check.tgz" .
{ echo "step | result | time | last line"; printf '%s\n' "${rows[@]}"; } | tee "$out/default_check.txt"
