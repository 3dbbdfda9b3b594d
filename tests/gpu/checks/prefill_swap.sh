#!/usr/bin/env bash
# Ponytail's prefill kernel inside the shim (PONYTAIL_ATTN_PREFILL=1): torch's own flash SDPA
# calls with seqlen_q > 16, whose FlashAttention-2 launches (pytorch_flash::flash_fwd_kernel and
# the split-KV variant) the shim replaces by kernels/attn_prefill.cu. prefill.sh checks the kernel
# alone through a test library; this checks it where it will run: reached through the FA2 hook,
# writing O and the LSE where torch's kernel would, in eager calls, verify mode and a captured CUDA
# graph, and timed in place of torch's kernel. Each step is its own process (the shim reads its
# options once, at start) under LD_PRELOAD with PONYTAIL_STATS=json, and the shim's exit stats
# decide whether the launches were swapped: a step that swapped nothing FAILS, since it would have
# checked or timed torch's kernel. Steps (STAGES, default "correctness verify graph timing"):
#   correctness  prefill_swap.py correctness, PONYTAIL_ATTN_PREFILL=1: bf16/fp16 x d 64/128 x causal
#                or not x 4 shapes (GQA 32/8 through SDPA) vs fp32, O <= 1e-2, LSE <= 1e-3; the
#                stats must show swapped >= the flash calls made (less the GQA cases torch's flash
#                refused, if it does); else the fallback reasons are printed
#   verify       the same with PONYTAIL_ATTN=verify (torch's kernel and Ponytail's both run and are
#                compared on the GPU): verified > 0, verify_failures == 0
#   graph        prefill_swap.py graph: the flash call captured with torch.cuda.graph, two replays
#                with new inputs vs fp32; swapped > 0
#   timing       prefill_swap.py timing with PONYTAIL_ATTN_PREFILL=1 (swapped > 0) and =0 (torch's
#                kernel: swapped == 0), graph replay, each beside cuDNN; then one table: Ponytail,
#                torch flash and cuDNN us and TFLOP/s, Ponytail's speed relative to cuDNN
#
# Usage: tests/gpu/checks/prefill_swap.sh            (results in $OUT, default ./gpu-out)
#   STAGES="correctness verify graph"   skip timing (or any other step)
#   TIMING_ARGS="--b 1,4 --s 4096 --d 128 --causal 1"   a subset of the timing grid (default
#                 B 1,4,8 x S 2k,4k,16k x d 64,128 x causal 0,1)
#   CORR_TIMEOUT VERIFY_TIMEOUT GRAPH_TIMEOUT TIMING_TIMEOUT   limit per process (s, default 180;
#                 timing runs two processes, each under TIMING_TIMEOUT)
#   REF=gpu       the fp32 reference on the GPU instead of the CPU (prefill_swap.py says why the CPU)
#   SHIM_PREBUILT=build-gpu/shim/libponytail_shim.so   use a shim built on the CPU machine (build.sh)
# Results: $OUT/prefill_swap.txt (a PASS/FAIL line per step, the timing table, the summary) and
# $OUT/prefill_swap-logs.tgz (each step's log, the shim's stats, the JSONs; rewritten after every
# step, so a call cut short still returns what ran). Exit non-zero when a step failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
tmp=$(mktemp -d)
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
export PYTHONUNBUFFERED=1
chk="$root/tests/gpu/checks/prefill_swap.py"
w="$tmp/prefill_swap"; mkdir -p "$w"   # every step's files; archived into $out after each step
txt="$out/prefill_swap.txt"
: >"$txt"
ref=(--ref "${REF:-cpu}")
status=0
summary=()

pack() { tar czf "$out/prefill_swap-logs.tgz" -C "$tmp" prefill_swap 2>/dev/null; }

# shim_run STEP SECONDS [VAR=VALUE...] -- ARGS...: prefill_swap.py ARGS under the shim; log in
# $w/STEP.log, the shim's exit stats in $w/STEP.stats.PID.json. env (not timeout) carries
# LD_PRELOAD, so that only python writes stats. PONYTAIL_ATTN is always set (the caller's
# environment must not decide what is checked).
shim_run() {
  local step=$1 secs=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -f "$w/$step".stats.*.json
  echo "== $step: ${envs[*]} prefill_swap.py $*"
  timeout -k 10 "$secs" env LD_PRELOAD="$shim" PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$w/$step.stats.%p.json" \
    ${envs[@]+"${envs[@]}"} "$py" "$chk" "$@" >"$w/$step.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "$step: TIMEOUT after $secs s"
  return $rc
}

# result STEP RC_PY RC_STATS LINE: one PASS/FAIL line, into the summary and $txt
result() {
  local step=$1 rc_py=$2 rc_st=$3 line=$4 verdict=PASS
  if [ "$rc_py" != 0 ] || [ "$rc_st" != 0 ]; then verdict=FAIL; status=1; fi
  local s="$step: $verdict (python rc $rc_py, stats rc $rc_st): $line"
  echo "$s"
  summary+=("$s")
  echo "$s" >>"$txt"
  pack
}

# Prints the lines of a step's log that tell what went wrong (the python side).
show_fail() { # LOG
  grep -E "FAIL|HANG|Error|error|skipped" "$1" | grep -v "^ponytail\[" | head -20
  tail -n 3 "$1"
}

for st in ${STAGES:-correctness verify graph timing}; do
  case $st in
  correctness)
    shim_run correctness "${CORR_TIMEOUT:-180}" PONYTAIL_ATTN=on PONYTAIL_ATTN_PREFILL=1 -- \
      correctness --json "$w/correctness.json" "${ref[@]}"
    rc=$?
    [ $rc -eq 0 ] || show_fail "$w/correctness.log"
    # swapped >= calls - skipped (and >= 1): every flash call went to Ponytail's kernel
    "$py" "$chk" stats -v --expect-from "$w/correctness.json" "$w"/correctness.stats.*.json | tee "$w/correctness.stats.txt"
    rs=${PIPESTATUS[0]}
    result correctness $rc "$rs" "$(grep -E '^correctness:' "$w/correctness.log" 2>/dev/null | tail -n 1); $(tail -n 1 "$w/correctness.stats.txt" 2>/dev/null)"
    ;;
  verify)
    shim_run verify "${VERIFY_TIMEOUT:-180}" PONYTAIL_ATTN=verify PONYTAIL_ATTN_PREFILL=1 -- \
      correctness --json "$w/verify.json" "${ref[@]}"
    rc=$?
    [ $rc -eq 0 ] || show_fail "$w/verify.log"
    "$py" "$chk" stats --verify "$w"/verify.stats.*.json | tee "$w/verify.stats.txt"
    rs=${PIPESTATUS[0]}
    result verify $rc "$rs" "$(grep -E '^correctness:' "$w/verify.log" 2>/dev/null | tail -n 1); $(grep -E '^verified' "$w/verify.stats.txt" 2>/dev/null | tail -n 1); $(tail -n 1 "$w/verify.stats.txt" 2>/dev/null)"
    ;;
  graph)
    shim_run graph "${GRAPH_TIMEOUT:-180}" PONYTAIL_ATTN=on PONYTAIL_ATTN_PREFILL=1 -- \
      graph --json "$w/graph.json" "${ref[@]}"
    rc=$?
    [ $rc -eq 0 ] || show_fail "$w/graph.log"
    "$py" "$chk" stats -v --min-swapped 1 "$w"/graph.stats.*.json | tee "$w/graph.stats.txt"
    rs=${PIPESTATUS[0]}
    result graph $rc "$rs" "$(grep -E '^graph:' "$w/graph.log" 2>/dev/null | tail -n 1); $(tail -n 1 "$w/graph.stats.txt" 2>/dev/null)"
    ;;
  timing)
    # Ponytail's kernel (swapped > 0), then torch's: nothing may have been swapped there, else
    # the "torch flash" column is not torch's.
    for arm in "pt 1 --min-swapped 1" "torch 0 --max-swapped 0"; do
      set -- $arm
      # shellcheck disable=SC2086
      shim_run "timing_$1" "${TIMING_TIMEOUT:-180}" PONYTAIL_ATTN=on PONYTAIL_ATTN_PREFILL="$2" -- \
        timing --json "$w/timing_$1.json" ${TIMING_ARGS:-}
      rc=$?
      [ $rc -eq 0 ] || show_fail "$w/timing_$1.log"
      "$py" "$chk" stats "$3" "$4" "$w"/timing_"$1".stats.*.json | tee "$w/timing_$1.stats.txt"
      rs=${PIPESTATUS[0]}
      result "timing (PONYTAIL_ATTN_PREFILL=$2)" $rc "$rs" "$(tail -n 1 "$w/timing_$1.stats.txt")"
    done
    "$py" "$chk" join "$w/timing_pt.json" "$w/timing_torch.json" --out "$txt" || { status=1; summary+=("timing: no table"); }
    pack
    ;;
  *) echo "unknown stage $st"; status=1; summary+=("unknown stage $st") ;;
  esac
done

nfail=$(printf '%s\n' ${summary[@]+"${summary[@]}"} | grep -c ": FAIL\|unknown stage\|no table")
final="prefill_swap: PASS (${#summary[@]} steps)"
[ $status -eq 0 ] || final="prefill_swap: FAIL ($nfail of ${#summary[@]} steps failed)"
if [ ${#summary[@]} -eq 0 ]; then final="prefill_swap: FAIL (no step ran)"; status=1; fi
echo "$final" >>"$txt"
pack
echo "==== summary (also in \$OUT/prefill_swap.txt; logs, stats and JSONs in \$OUT/prefill_swap-logs.tgz)"
cat "$txt"
exit $status
