#!/usr/bin/env bash
# Every GPU correctness check (tests/gpu/checks/), one device call: builds once
# (tests/gpu/build.sh), runs each check under its own time limit, and prints a pass/fail table
# LAST: check | PASS / FAIL / SKIP / NOT RUN | seconds | one-line summary.
#
# Usage (device tool, kind nvidia-h200; the multi-gpu group needs nvidia-h200-x2):
#   bash tests/gpu/check_all.sh                         # every check that fits BUDGET_S
#   CHECKS="core" bash tests/gpu/check_all.sh           # groups and names mix: CHECKS="smoke ipc-shim"
#   CHECKS=list bash tests/gpu/check_all.sh             # print the checks and groups, run nothing
# Groups, each sized for one 600 s call (estimates, build included; unmeasured as a whole):
#   core       smoke attn attn-graph sdpa-policy alloc-stress ipc-stock ipc-shim (~4-5 min; 204 s
#              without sdpa-policy, measured 2026-12-01)
#   compat     compat-progs compat-matrix                                  (~9 min)
#   torch      compat-torch (needs .ext/pytorch/test/test_cuda.py: carry .ext) (~6-7 min)
#   multi-gpu  tp2 multi-gpu-rows (SKIP with fewer than 2 GPUs; issue 53)   (~9-10 min: two calls,
#              CHECKS=tp2 then CHECKS=multi-gpu-rows; MULTI_ROWS picks rows of the second)
#   sleep      sleep-wake: `ponytail sleep` / `ponytail wake` of a running model (issue 50)   (~4 min;
#              SLEEP_TORCH_ALLOC=expandable: the targets under PONYTAIL_TORCH_ALLOC=expandable, PyTorch's
#              own mapped memory released through shim/route_vmm.c; SLEEP_ARGS adds arguments, e.g.
#              "--kinds registered:1" for a short call)
#   families   families: 23 transformers families, stock vs shim, the family table (issue 51)
#              (~50 s + 32 s a family: the 23 in two calls, FAMILIES="llama,phi3,..." picks them)
#   host-tier  host-tier: PONYTAIL_HOST_TIER's goals (issue 49), HOST_TIER_STAGES (default offpath;
#              capacity and bigmodel each need a call of their own; HOST_TIER_ARGS adds arguments:
#              capacity's first call runs 1.5x, "--mults 2 --no-stock --stock-batch N" its second)
#   prefill    the prefill kernel of issue 18 alone (checks/prefill.sh: correctness and the
#              sanitizers) and inside the shim (checks/prefill_swap.sh without timing);
#              the default shim runs it in the other groups too         (~3-4 min)
#   all        the four before prefill, in this order (the default; more than one call: the
#              rest is NOT RUN)
# Environment:
#   BUDGET_S=560  seconds for the whole call, build included. A check starts only when its
#                 estimate fits what is left (else NOT RUN, listed at the end), and is killed at
#                 its limit or at the budget's end, whichever comes first.
#   OUT           results (default ./gpu-out): checks.txt (the table), checks.tgz (every check's
#                 log and output directory). The device tool returns at most 8 files from $OUT.
# Exit 0 only when every check that ran passed (SKIP counts as passed; NOT RUN does not fail).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/pt-checks.XXXXXX)"
budget="${BUDGET_S:-560}"
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py="${PYTHON:-python3}"
g="$root/tests/gpu/checks"

all_checks=(smoke attn attn-graph sdpa-policy alloc-stress ipc-stock ipc-shim compat-progs compat-matrix compat-torch tp2 multi-gpu-rows prefill prefill-swap sleep-wake families host-tier)
group() {
  case $1 in
    core) echo "smoke attn attn-graph sdpa-policy alloc-stress ipc-stock ipc-shim" ;;
    compat) echo "compat-progs compat-matrix" ;;
    torch) echo "compat-torch" ;;
    multi-gpu) echo "tp2 multi-gpu-rows" ;;
    prefill) echo "prefill prefill-swap" ;;
    sleep) echo "sleep-wake" ;;
    families) echo "families" ;;
    host-tier) echo "host-tier" ;;
    all) echo "smoke attn attn-graph sdpa-policy alloc-stress ipc-stock ipc-shim compat-progs compat-matrix compat-torch tp2" ;;
    *) echo "$1" ;;
  esac
}
# est: seconds a check is expected to need (it starts only if that much is left);
# lim: its own time limit. Both are estimates from the scripts' headers, not measured here, except
# compat-progs: on 2026-12-02 JAX alone took 84 s (stock and shim), and 180 s ran out before Numba
# and Triton; measured on the H100 on 2026-12-07 (bench/records/2026-12-07-core-sleep.md): smoke
# 115 s, attn 70, alloc-stress 31, ipc 21-23 each, attn-graph 16, sdpa-policy 91, sleep-wake 95;
# families then took ~100 s a family (weights initialised on the CPU, a process per family and
# arm), since cut to one process per arm, weights made on the GPU (estimate: ~300-450 s for 23).
# sleep-wake: 95 s with one 10 GiB run; seven kinds now (each ~10-30 s: a target, a sleep of up to ~8 s, a
# wake), torch_memory_saver and a prepared cycle: ~190-230 s estimated; its --deadline drops kinds first.
est() {
  case $1 in
    smoke) echo 120 ;; attn) echo 75 ;; attn-graph) echo 40 ;; sdpa-policy) echo 100 ;; alloc-stress) echo 40 ;;
    ipc-stock|ipc-shim) echo 40 ;; compat-progs) echo 200 ;; compat-matrix) echo 300 ;;
    compat-torch) echo 330 ;; tp2) echo 240 ;; multi-gpu-rows) echo 300 ;; prefill) echo 120 ;; sleep-wake) echo 240 ;;
    families)  # what must run before families.py's own --budget takes over: stock (4.5-11.5 s a
      # family on 2026-12-07), the shim (~3 s) and the spread arm (1-3 s, only where tokens differ),
      # ~10 s to start each; the aa, math, verify and confirm arms take only what is left, so
      # they are not counted here (the 23 took 278 s in all on 2026-12-07)
      local n=23; [ -n "${FAMILIES:-}" ] && n=$(tr ',' '\n' <<<"$FAMILIES" | grep -c .)
      echo $(( 40 + 13 * n )) ;;
    host-tier) echo 240 ;; *) echo 60 ;;
  esac
}
lim() {
  case $1 in
    smoke) echo 180 ;; attn) echo 200 ;; attn-graph) echo 200 ;; sdpa-policy) echo 280 ;; alloc-stress) echo 120 ;;
    ipc-stock|ipc-shim) echo 200 ;; compat-progs) echo 330 ;; compat-matrix) echo 420 ;;
    compat-torch) echo 480 ;; tp2) echo 330 ;; multi-gpu-rows) echo 580 ;; prefill) echo 300 ;; sleep-wake) echo 420 ;; families) echo 580 ;; host-tier) echo 580 ;; *) echo 120 ;;
  esac
}
describe() {
  case $1 in
    smoke) echo "checks/smoke.sh: stock vs shim pass-through, ENABLE=0, swap, verify mode" ;;
    attn) echo "checks/attn.sh ATTN_STAGES='correctness sanitize': kernel vs fp32, memcheck, racecheck" ;;
    attn-graph) echo "checks/attn_graph.sh: decode attention in torch CUDA graphs, shim and stock" ;;
    sdpa-policy) echo "checks/sdpa_policy.sh: SDPA backend per call (decode flash, prefill flash for Ponytail's prefill kernel; with PONYTAIL_ATTN_PREFILL=0 prefill on cuDNN), outputs vs fp32" ;;
    alloc-stress) echo "checks/alloc_stress.sh SHORT=1: 8 threads x 4 streams, zero corruptions" ;;
    ipc-stock) echo "checks/ipc_torch.py --mode torch and raw, without the shim" ;;
    ipc-shim) echo "checks/ipc_torch.py --mode torch and raw, under the shim" ;;
    compat-progs) echo "checks/cuda_programs.sh: CUDA C, CuPy, JAX, Numba, Triton stock vs shim" ;;
    compat-matrix) echo "checks/compat_matrix.py: PyTorch/transformers rows, arms stock,shim,same" ;;
    compat-torch) echo "checks/torch_tests.sh: PyTorch's test_cuda.py cases stock vs shim" ;;
    tp2) echo "checks/tp2.sh: peer access, TP all-reduce + IPC, TP generate (>= 2 GPUs)" ;;
    multi-gpu-rows) echo "checks/multi_gpu.py: tp_plan, device_map, torch.multiprocessing across GPUs, NCCL bus bandwidth (>= 2 GPUs)" ;;
    prefill) echo "checks/prefill.sh: the sm_90a prefill kernel vs fp32, memcheck, racecheck, synccheck" ;;
    prefill-swap) echo "checks/prefill_swap.sh: the prefill kernel in the shim (PONYTAIL_ATTN_PREFILL=1) vs fp32, verify, graph" ;;
    host-tier) echo "checks/host_tier.py: the host tier: capacity past a 24 GiB cap, off the path, a model larger than the cap" ;;
    families) echo "checks/families.py: transformers families stock vs shim: kernels, swapped share, fallbacks, tokens, decode step" ;;
    sleep-wake) echo "checks/sleep_wake.py: ponytail sleep/wake of a running model (issue 50): memory given back, bandwidth, tokens, graphs, bad requests" ;;
    *) echo "?" ;;
  esac
}

want=()
for w in ${CHECKS:-all}; do
  [ "$w" = list ] && {
    for c in "${all_checks[@]}"; do printf '%-14s est %3s s, limit %3s s  %s\n' "$c" "$(est "$c")" "$(lim "$c")" "$(describe "$c")"; done
    for gr in core compat torch multi-gpu prefill sleep families host-tier; do echo "group $gr: $(group "$gr")"; done
    exit 0; }
  for c in $(group "$w"); do
    case " ${all_checks[*]} " in
      *" $c "*) case " ${want[*]:-} " in *" $c "*) ;; *) want+=("$c") ;; esac ;;
      *) echo "check_all: unknown check or group '$c' (CHECKS=list shows them)"; exit 2 ;;
    esac
  done
done

# ---- build, once ------------------------------------------------------------------------------
. "$root/tests/gpu/build.sh"
echo "== build ($(date -u +%H:%M:%S))"
# pt_gpu_build exits on failure: first in a subshell, so that the logs still come back.
( pt_gpu_build "$root" "$work" ) || { echo "check_all: build failed"
  tar -C "$work" -czf "$out/checks.tgz" . 2>/dev/null; exit 1; }
pt_gpu_build "$root" "$work"  # a no-op now (every check script runs it too): sets bld, shim, pt
[ -f "$shim" ] || { echo "check_all: no shim at $shim"; exit 1; }
export SHIM="$shim"
echo "== build done in $SECONDS s; shim $shim"
ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
echo "== GPUs: $ngpu"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2

# ---- one check ---------------------------------------------------------------------------------
# Each check's command runs with OUT=$work/<check> (its own outputs) and its stdout/stderr in
# $work/<check>.log; exit 77 means SKIP.
run_check() { # NAME LIMIT_S: the command of one check (runs inside `timeout`, in a subshell)
  local d="$work/$1"
  case $1 in
    smoke) bash "$g/smoke.sh" ;;
    attn) ATTN_STAGES="correctness sanitize" bash "$g/attn.sh" ;;
    attn-graph) GRAPH_TIMEOUT="${GRAPH_TIMEOUT:-90}" bash "$g/attn_graph.sh" ;;
    sdpa-policy) bash "$g/sdpa_policy.sh" ;;
    alloc-stress) SHORT="${STRESS_SHORT:-1}" bash "$g/alloc_stress.sh" ;;
    ipc-stock|ipc-shim)
      local rc=0 m e=(env)
      [ "$1" = ipc-shim ] && e+=(LD_PRELOAD="$shim" PONYTAIL_LOG=info PONYTAIL_STATS=json
                                 PONYTAIL_STATS_FILE="$d/ipc.%p.json")
      for m in torch raw; do
        echo "== ipc_torch.py --mode $m"
        "${e[@]}" timeout -k 5 90 "$py" "$g/ipc_torch.py" --mode "$m" || rc=1
      done
      return $rc ;;
    compat-progs) bash "$g/cuda_programs.sh" ;;
    compat-matrix)
      "$py" "$g/compat_matrix.py" --shim "$shim" --out "$d" \
        --rows "${MATRIX_ROWS:-hf_eager,hf_padded,hf_static,compile_ro,cuda_graph,mp_share,cont_batch,torchrun_nccl}" \
        --arms "${MATRIX_ARMS:-}" --deadline "$(( ${2:-400} - 60 ))" ;;
    compat-torch)
      [ -f "${TESTS_DIR:-$root/.ext/pytorch/test}/test_cuda.py" ] || {
        echo "SKIP: no ${TESTS_DIR:-.ext/pytorch/test}/test_cuda.py (carry .ext; see checks/torch_tests.sh)"; return 77; }
      bash "$g/torch_tests.sh" ;;
    tp2)
      [ "$ngpu" -ge 2 ] || { echo "SKIP: $ngpu GPU(s), tp2 needs 2 (kind nvidia-h200-x2)"; return 77; }
      TP_N="${TP_N:-128}" bash "$g/tp2.sh" ;;
    multi-gpu-rows)
      [ "$ngpu" -ge 2 ] || { echo "SKIP: $ngpu GPU(s), multi_gpu.py needs 2 (kind nvidia-h200-x2)"; return 77; }
      "$py" "$g/multi_gpu.py" --shim "$shim" --out "$d" --budget $(( $2 - 20 )) ${MULTI_ROWS:+--rows "$MULTI_ROWS"} ;;
    prefill) PREFILL_STAGES="correctness sanitize" bash "$g/prefill.sh" ;;
    prefill-swap) STAGES="correctness verify graph" bash "$g/prefill_swap.sh" ;;
    sleep-wake) "$py" "$g/sleep_wake.py" --ponytail "$pt" --shim "$shim" --out "$d" --deadline $(( $2 - 15 )) \
                  --torch-alloc "${SLEEP_TORCH_ALLOC:-keep}" ${SLEEP_ARGS:-} ;;
    families) "$py" "$g/families.py" --shim "$shim" --ponytail "$pt" --out "$d" --budget $(( $2 - 30 )) ${FAMILIES:+--families "$FAMILIES"} ;;
    host-tier) "$py" "$g/host_tier.py" --shim "$shim" --out "$d" --stages "${HOST_TIER_STAGES:-offpath}" \
                 --deadline $(( $2 - 20 )) ${HOST_TIER_ARGS:-} ;;
  esac
}
summary() { # NAME LOG: one line
  local pat
  case $1 in
    smoke) pat='all smoke checks passed|^  [a-z]+: [^t]' ;;  # smoke_report.py: the verdict or the FAILED items
    attn) pat='^correctness:|^compute-sanitizer' ;;
    attn-graph) pat='^attn_graph:' ;;
    sdpa-policy) pat='^sdpa_policy:' ;;
    alloc-stress) pat='^(default|keep0-)' ;;
    ipc-*) pat='^(PASS|FAIL)' ;;
    compat-progs) pat='^cuda_programs:' ;;
    compat-matrix) pat='^compat matrix:|^FAIL' ;;
    compat-torch) pat='^(SKIP|torch_tests:)|^  \[[a-z]+\] regressions' ;;
    tp2) pat='^(SKIP|tp2:)' ;;
    multi-gpu-rows) pat='^(SKIP|multi_gpu:)' ;;
    prefill) pat='^correctness:|^compute-sanitizer' ;;
    prefill-swap) pat='^prefill_swap:' ;;
    sleep-wake) pat='^sleep_wake:' ;;
    families) pat='^family check:|^families with' ;;
    host-tier) pat='^host_tier:' ;;
  esac
  local s
  if [ "$1" = alloc-stress ]; then # config ops corr errs ...: corruptions and errors per configuration
    s=$(grep -E "$pat" "$2" | awk '{printf "%s%s corr %s errs %s", (NR>1?"; ":""), $1, $3, $4}')
  else
    s=$(grep -E "$pat" "$2" 2>/dev/null | sed 's/^ *//' | head -n 4 | paste -sd ';' -)
  fi
  [ -n "$s" ] || s=$(grep -v '^\s*$' "$2" 2>/dev/null | tail -n 1)
  printf '%s' "${s:0:110}"
}

names=(); results=(); secs=(); sums=(); not_run=()
fail=0
for c in "${want[@]}"; do
  left=$(( budget - SECONDS - 10 ))  # 10 s kept for the table and the archive
  need=$(est "$c"); l=$(lim "$c")
  if [ "$left" -lt "$need" ]; then
    names+=("$c"); results+=("NOT RUN"); secs+=("-"); sums+=("needs ~$need s, $left s left")
    not_run+=("$c"); continue
  fi
  [ "$l" -gt "$left" ] && l=$left
  mkdir -p "$work/$c"
  echo "== $c (limit $l s, $(date -u +%H:%M:%S)): $(describe "$c")"
  t0=$SECONDS
  # timeout signals its whole process group, so the check's children go with it.
  OUT="$work/$c" timeout -k 10 "$l" bash -c "$(declare -f run_check); $(declare -p g py shim pt work ngpu root); run_check $c $l" \
    >"$work/$c.log" 2>&1
  rc=$?
  dt=$(( SECONDS - t0 ))
  case $rc in
    0) r=PASS ;;
    77) r=SKIP ;;
    124|137) r=FAIL; fail=1 ;;
    *) r=FAIL; fail=1 ;;
  esac
  s=$(summary "$c" "$work/$c.log")
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && s="timed out after $dt s; $s"
  [ "$r" = FAIL ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && s="rc $rc; $s"
  names+=("$c"); results+=("$r"); secs+=("$dt"); sums+=("$s")
  echo "   $r in $dt s: $s"
  [ "$r" = FAIL ] && tail -n 15 "$work/$c.log" | sed 's/^/   | /'
done

# ---- archive and table (last) ------------------------------------------------------------------
find "$work" -name '*.trace.*' ! -name '*.gz' -exec gzip -f {} \; 2>/dev/null
tar -C "$work" -czf "$out/checks.tgz" --exclude='inductor-cache' . 2>/dev/null \
  || echo "check_all: archive incomplete"
{
  echo
  echo "GPU checks ($(date -u +%Y-%m-%d), $ngpu GPU(s), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), ${SECONDS} s of BUDGET_S=$budget)"
  printf '%-14s | %-7s | %5s | %s\n' check result s summary
  printf '%s\n' "---------------+---------+-------+----------------------------------------------------"
  for i in "${!names[@]}"; do
    printf '%-14s | %-7s | %5s | %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}" "${sums[$i]}"
  done
  [ ${#not_run[@]} -eq 0 ] || echo "not run for lack of time: ${not_run[*]} (run them in another call: CHECKS=\"${not_run[*]}\")"
  echo "logs: \$OUT/checks.tgz; overall: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
} | tee "$out/checks.txt"
exit $fail
