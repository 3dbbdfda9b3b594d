#!/usr/bin/env bash
# Ponytail's prefill kernel (kernels/attn_prefill.cu, issue 18) on the H200: builds it with its
# test library for sm_90a (tests/gpu/checks/prefill_testlib.cu), then runs the stages of
# PREFILL_STAGES (default "correctness sanitize"; add "timing"):
#   correctness  tests/gpu/checks/prefill_check.py correctness: fp32 reference, poisoned outputs
#   sanitize     compute-sanitizer memcheck, racecheck and synccheck on four small launches
#   timing       graph replay against torch flash and cuDNN; PREFILL_TIMING_ARGS picks a subset
#                (e.g. "--b 1,4 --s 4096 --d 128 --causal 1"); the whole grid takes about a minute
#   profile      Nsight Compute (--set full, clocks left alone) on one launch each of Ponytail's
#                kernel (and the variants), torch flash and cuDNN at the points of
#                PREFILL_PROFILE_ARGS (default "--b 4 --s 16384 --d 128 --causal 1"): every
#                metric per kernel in ncu_raw.csv, the sections in ncu_details.txt, and the
#                per-instruction stall samples of Ponytail's kernels in ncu_sass.csv
#                (PREFILL_PROFILE_KERNELS: another regex of kernel names, e.g. pt_attn_prefill alone)
# PREFILL_PREV=DIR and PREFILL_VARIANTS="NAME:FLAGS ...": other builds timed beside (see below).
# PREFILL_FLAGS: extra nvcc flags for this tree's own two builds (the one checked and timed, and
# the sanitizers' watchdog build), e.g. "-DPT_PREFILL_PERSISTENT=0" to sanitize a variant.
# Results in $OUT (default a temporary directory): prefill_correctness.txt, prefill_timing.txt,
# ptxas.txt, the sanitizer logs. Exit non-zero when a stage failed (every stage still runs).
set -uo pipefail
cd "$(dirname "$0")/../../.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA/bin:$PATH" PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
B=$(mktemp -d)
PY=${PYTHON:-python3}
status=0
summary=()

# Two builds of the test library: the kernel as the shim will carry it (correctness, timing),
# and one with PT_PREFILL_WATCHDOG for the sanitizers, where a barrier wait that spins for
# seconds traps with a message (which barrier, block, thread) instead of hanging. (The
# watchdog's printf costs registers, so it is never timed.) Correctness has its own guard: a
# launch that does not finish in 30 s ends the check with "HANG".
build() { # NAME FLAGS...: the test library as $B/libprefill_NAME.so, ptxas's report in $OUT/ptxas_NAME.txt
  # (TESTLIB: its source, default this tree's)
  local name=$1; shift
  nvcc -shared -Xcompiler -fPIC -O3 -std=c++17 -Xptxas -v -gencode=arch=compute_90a,code=sm_90a "$@" -I. \
    "${TESTLIB:-tests/gpu/checks/prefill_testlib.cu}" -L"$CUDA/lib64/stubs" -lcuda -o "$B/libprefill_$name.so" \
    2>"$OUT/ptxas_$name.txt"
}
# shellcheck disable=SC2086
build test ${PREFILL_FLAGS:-} || { cat "$OUT/ptxas_test.txt"; echo "nvcc failed"; exit 1; }
mv "$OUT/ptxas_test.txt" "$OUT/ptxas.txt"
# shellcheck disable=SC2086
build watchdog -DPT_PREFILL_WATCHDOG ${PREFILL_FLAGS:-} || { cat "$OUT/ptxas_watchdog.txt"; echo "nvcc (watchdog build) failed"; exit 1; }
grep -E "Used|spill" "$OUT/ptxas.txt" | sed 's/^ptxas info    : //' | sort | uniq -c
# PREFILL_PREV=DIR: a previous version of the kernel (DIR/kernels/attn_prefill.cu and the headers
# it includes, with DIR/tests/gpu/checks/prefill_testlib.cu if its parameters differ, e.g. from
# `git archive`), built the same way and timed beside this one in the
# timing stage (column "prev"), so that a change is measured against its predecessor in one call.
# PREFILL_VARIANTS="NAME:FLAGS ...": builds of this tree with extra compiler flags (e.g.
# "poly4:-DPT_PREFILL_EXP_POLY=4"), each checked for correctness and timed beside (column NAME).
extra_args=()
variants=()
if [ -n "${PREFILL_PREV:-}" ]; then
  # Its own test library when DIR has one (the kernel's parameters may differ from this tree's).
  prev_lib=tests/gpu/checks/prefill_testlib.cu
  [ -f "$PREFILL_PREV/$prev_lib" ] && prev_lib="$PREFILL_PREV/$prev_lib"
  if TESTLIB="$prev_lib" build prev -I"$PREFILL_PREV"; then
    extra_args+=(--extra "prev=$B/libprefill_prev.so")
  else
    echo "PREFILL_PREV=$PREFILL_PREV: build failed (timing goes on without it)"; tail -5 "$OUT/ptxas_prev.txt"
  fi
fi
for v in ${PREFILL_VARIANTS:-}; do
  name=${v%%:*}; flags=${v#*:}
  # shellcheck disable=SC2086
  if build "$name" $flags; then
    extra_args+=(--extra "$name=$B/libprefill_$name.so")
    variants+=("$name")
    grep -E "Used|C7513" "$OUT/ptxas_$name.txt" | sed "s/^ptxas info    : /$name: /" | sort | uniq -c
  else
    echo "variant $name ($flags): build failed"; tail -5 "$OUT/ptxas_$name.txt"; status=1
  fi
done

for st in ${PREFILL_STAGES:-correctness sanitize}; do
  case $st in
  correctness)
    $PY tests/gpu/checks/prefill_check.py --lib "$B/libprefill_test.so" --out "$OUT" correctness \
      >"$OUT/correctness.log" 2>&1
    rc=$?
    grep -E "FAIL" "$OUT/correctness.log" | head -20
    summary+=("correctness: $(tail -n 1 "$OUT/correctness.log") (rc $rc)")
    [ "$rc" = 0 ] || status=1
    for name in ${variants[@]+"${variants[@]}"}; do
      mkdir -p "$OUT/$name"
      $PY tests/gpu/checks/prefill_check.py --lib "$B/libprefill_$name.so" --out "$OUT/$name" correctness \
        >"$OUT/correctness_$name.log" 2>&1
      rc=$?
      grep -E "FAIL" "$OUT/correctness_$name.log" | head -5
      summary+=("correctness ($name): $(tail -n 1 "$OUT/correctness_$name.log") (rc $rc)")
      [ "$rc" = 0 ] || status=1
    done
    ;;
  sanitize)
    for tool in memcheck racecheck synccheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 9 $PY tests/gpu/checks/prefill_check.py \
        --lib "$B/libprefill_watchdog.so" sanitize >"$OUT/sanitize_$tool.log" 2>&1
      rc=$?
      summary+=("compute-sanitizer $tool: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' \
        "$OUT/sanitize_$tool.log" | head -n 1)")
      [ "$rc" = 0 ] || status=1
    done
    ;;
  timing)
    # shellcheck disable=SC2086
    $PY tests/gpu/checks/prefill_check.py --lib "$B/libprefill_test.so" --out "$OUT" timing \
      ${extra_args[@]+"${extra_args[@]}"} ${PREFILL_TIMING_ARGS:-} >"$OUT/timing.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || { status=1; tail -n 20 "$OUT/timing.log"; }
    summary+=("timing: rc $rc")
    ;;
  profile)
    # shellcheck disable=SC2086
    ncu --clock-control none --set full --import-source no -k "regex:${PREFILL_PROFILE_KERNELS:-pt_attn_prefill|sdpa|cudnn|flash_fwd|fmha}" \
      -c 40 -f -o "$B/prof" $PY tests/gpu/checks/prefill_check.py --lib "$B/libprefill_test.so" profile \
      ${extra_args[@]+"${extra_args[@]}"} ${PREFILL_PROFILE_ARGS:---b 4 --s 16384 --d 128 --causal 1} \
      >"$OUT/profile.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || { status=1; tail -n 20 "$OUT/profile.log"; }
    ncu -i "$B/prof.ncu-rep" --page raw --csv >"$OUT/ncu_raw.csv" 2>&1
    ncu -i "$B/prof.ncu-rep" --page details >"$OUT/ncu_details.txt" 2>&1
    ncu -i "$B/prof.ncu-rep" --page source --print-source sass --csv -k regex:pt_attn_prefill \
      >"$OUT/ncu_sass.csv" 2>&1 || echo "source page export failed: $(head -c 300 "$OUT/ncu_sass.csv")"
    grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A" \
      "$OUT/ncu_details.txt" | head -80
    summary+=("profile: rc $rc")
    ;;
  *) echo "unknown stage $st"; status=1 ;;
  esac
done
echo "==== summary"
printf '%s\n' "${summary[@]}"
[ -f "$OUT/prefill_timing.txt" ] && cat "$OUT/prefill_timing.txt"
exit $status
