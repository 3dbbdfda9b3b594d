#!/usr/bin/env bash
# GPU validation of Ponytail's fused decode attention (H200 test machine):
# builds the kernels' test library, then runs correctness, compute-sanitizer
# (memcheck, racecheck) and graph-replay timing against torch flash / cuDNN.
# Tables and logs go to $OUT when set. Exit status: non-zero if any stage
# failed (every stage still runs, so one call gives all the numbers).
#
#   tests/gpu/checks/attn.sh                      # all stages
#   ATTN_STAGES="correctness timing" tests/gpu/checks/attn.sh
#   ATTN_STAGES="masked-timing" tests/gpu/checks/attn.sh    # issue 17's masked grid
#   ATTN_STAGES="dims-timing" tests/gpu/checks/attn.sh      # issue 51's head sizes: d 80, 96, 192/128
#   ATTN_STAGES="masked-timing masked-timing masked-timing" ...  # three grids in one call, each kept
#   ATTN_GRID_PLACES=3 ATTN_STAGES=masked-timing ...  # and the planned launch on 2 more copies of K/V
#   ATTN_REPLAY_BUSY_US=200 ...            # each timed replay behind a 200 us GPU spin (no CPU latency)
#   ATTN_EXP_PRIME="memeff cudnn alloc" ATTN_STAGES=experiments ...  # torch SDPA / 32 GiB first
#   ATTN_STAGES="masked-plans" tests/gpu/checks/attn.sh     # masked B 1-8: planned, without the short rule, workspace
#   ATTN_STAGES="masked-heat masked-place masked-method" tests/gpu/checks/attn.sh   # diagnostics of
#                                          # the timing (tests/gpu/checks/attn_diag.py): latency-bound
#                                          # points after an idle card / heavy kernels; with K/V placed
#                                          # apart; beside other graphs that read other memory
#   ATTN_DEFS=-DPT_ATTN_TIMELINE ATTN_STAGES=timeline tests/gpu/checks/attn.sh   # phases of a launch
#   ATTN_DEFS="-DPT_ATTN_TIMELINE -DPT_ATTN_TIMELINE_ALL" ...      # and every CTA, summarised
#   ATTN_TIMELINE_SHAPES="8:4096:8:1 1:32768:8:0" ...   # timeline shapes B:KV:G:masked (default: G 1 set)
#   ATTN_TIMELINE_COLD=1 ...               # and 3 launches per shape after a 256 MiB read of other memory
#   ATTN_PREBUILT=path/pt_attn_fatbin.c    # reuse an embed built elsewhere (same nvcc)
#   ATTN_LIB_OUT=path ATTN_STAGES=none ... # only build: the test library copied to path (it runs
#                                          # on the GPU machine when carried; links only libcuda)
#   ATTN_VARIANTS="qf:-DPT_ATTN_EXP=1 ev:-DPT_ATTN_EXP=2" ATTN_STAGES=experiments ...
#                                          # compile-time variants (kernels/attn_kparams.h), each its
#                                          # own test library, timed interleaved with the default;
#                                          # ATTN_VARIANT_CHECK=1 runs correctness on each first
#                                          # (not on name@DIR builds of another tree); a list of
#                                          # names instead of 1 checks only those (diagnostic
#                                          # builds with wrong results are timed unchecked); its
#                                          # table's last column compares every build's outputs
#                                          # bit for bit with the default's ("=" or the names
#                                          # that differ); ATTN_EXP_SPLIT_MUL="name:k" plans that
#                                          # variant with k times the workspace splits;
#                                          # ATTN_EXP_COLD=N adds a table with each launch after a
#                                          # read of N MiB of other memory
#   ATTN_DEFS="-DPT_ATTN_NSTAGE_D128=4"    # compile-time variants, for nvcc and gcc alike (4 K/V
#                                          # stages at d = 128: bench/records/2026-12-01-read-floor.md)
set -uo pipefail
cd "$(dirname "$0")/../../.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA/bin:$PATH"
OUT=${OUT:-$(mktemp -d)}
B=$(mktemp -d)
STAGES=${ATTN_STAGES:-"correctness sanitize timing"}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
status=0
summary=()

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader 2>/dev/null || true

CFLAGS="-std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -I. -I$CUDA/include ${ATTN_DEFS:-}"
# The kernels of source tree SRC as a fatbin (ptxas's report in LOG), with ATTN_DEFS and DEFS.
fatbin() { # SRC OUT LOG DEFS...
  local src=$1 out=$2 log=$3; shift 3
  # shellcheck disable=SC2086
  nvcc -fatbin -O3 -std=c++17 --no-compress -Xptxas -v "$@" ${ATTN_DEFS:-} \
    -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 \
    -I"$src" -o "$out" "$src/kernels/attn_kernels.cu" 2>"$log"
}
# The test library of source tree SRC around an embedded fatbin (FATBIN_C, from kernels/embed.py),
# linked -Bsymbolic so that several load into one process without binding to each other.
testlib() { # SRC FATBIN_C OUT DEFS...
  local src=$1 fc=$2 out=$3; shift 3
  # shellcheck disable=SC2086
  gcc ${CFLAGS/-I. /-I$src -I. } "$@" -fPIC -shared -Wl,-Bsymbolic -DPT_ATTN_HAVE_FATBIN=1 \
    "$src/kernels/attn_plan.c" "$src/kernels/attn_launch.c" "$fc" "$src/tests/gpu/checks/attn_testlib.c" \
    -L"$CUDA/lib64/stubs" -lcuda -lpthread -lm -o "$out"
}

# 1. fatbin -> C array (kernels/embed.py), as the meson build does.
if [ -n "${ATTN_PREBUILT:-}" ] && [ -f "$ATTN_PREBUILT" ]; then
  cp "$ATTN_PREBUILT" "$B/pt_attn_fatbin.c"
else
  fatbin . "$B/pt_attn.fatbin" "$OUT/ptxas.txt" || { cat "$OUT/ptxas.txt"; echo "nvcc failed"; exit 1; }
  $PY kernels/embed.py pt_attn_fatbin "$B/pt_attn.fatbin" "$B/pt_attn_fatbin.c" || exit 1
fi
# 2. the test library and the sanitizer driver.
testlib . "$B/pt_attn_fatbin.c" "$B/libattn_test.so" || { echo "test library build failed"; exit 1; }
if [ -n "${ATTN_LIB_OUT:-}" ]; then
  mkdir -p "$(dirname "$ATTN_LIB_OUT")" && cp "$B/libattn_test.so" "$ATTN_LIB_OUT" || exit 1
fi
gcc $CFLAGS tests/gpu/checks/attn_sancheck.c -L"$B" -lattn_test -L"$CUDA/lib64/stubs" -lcuda \
  -Wl,-rpath,"$B" -o "$B/attn_sancheck" || { echo "sancheck build failed"; exit 1; }

# 3. variant builds (ATTN_VARIANTS="name:defs ..."; commas in defs stand for spaces; name@DIR:defs
#    builds the kernels and the test library from the source tree DIR instead, e.g. the previous
#    commit's, `git archive HEAD~1 | tar -x -C prev`), for the experiments stage: the fatbins in
#    parallel, then each its own test library.
variants=""
vnames=()
for spec in ${ATTN_VARIANTS:-}; do
  name=${spec%%:*}; defs=${spec#*:}; defs=${defs//,/ }
  src=.
  case $name in *@*) src=${name#*@}; name=${name%%@*} ;; esac
  vnames+=("$name")
  echo "$defs" >"$B/v_$name.defs"
  echo "$src" >"$B/v_$name.src"
  # shellcheck disable=SC2086
  fatbin "$src" "$B/v_$name.fatbin" "$B/v_$name.nvcc" $defs &
done
wait
for name in "${vnames[@]}"; do
  defs=$(cat "$B/v_$name.defs"); src=$(cat "$B/v_$name.src")
  [ -s "$B/v_$name.fatbin" ] || { tail -5 "$B/v_$name.nvcc"; echo "variant $name: nvcc failed"; status=1; continue; }
  $PY kernels/embed.py pt_attn_fatbin "$B/v_$name.fatbin" "$B/v_$name.c" || { status=1; continue; }
  # shellcheck disable=SC2086
  testlib "$src" "$B/v_$name.c" "$B/libattn_test_$name.so" $defs || { status=1; continue; }
  # (a variant built from another tree, name@DIR, is that tree's kernel, checked at its commit)
  if [ -n "${ATTN_VARIANT_CHECK:-}" ] && [ "$src" = . ] &&
    { [ "$ATTN_VARIANT_CHECK" = 1 ] || [[ " $ATTN_VARIANT_CHECK " == *" $name "* ]]; }; then
    $PY tests/gpu/checks/attn_check.py --lib "$B/libattn_test_$name.so" correctness >"$B/c_$name.log" 2>&1
    rc=$?
    summary+=("variant $name correctness: $(tail -n 1 "$B/c_$name.log") (rc $rc)")
    [ "$rc" = 0 ] || { status=1; grep FAIL "$B/c_$name.log" | head -5; tail -n 8 "$B/c_$name.log"; continue; }
  fi
  variants="$variants${variants:+,}$name=$B/libattn_test_$name.so"
done

# A timing stage of attn_check.py (its what, e.g. masked-timing): log in $OUT/<what>.log with
# dashes as underscores, its tail shown when it fails; experiments gets the variant builds.
# A stage named twice (ATTN_STAGES="masked-timing masked-timing") keeps each run's table and log:
# the earlier ones move to attn_<what>.<n>.txt and <what>.<n>.log.
declare -A runs=()
timed_stage() {
  local what=$1 log="$OUT/${1//-/_}.log" tab="$OUT/attn_${1//-/_}.txt"
  local n=${runs[$what]:-0}
  if [ "$n" -gt 0 ]; then
    [ -f "$tab" ] && mv "$tab" "${tab%.txt}.$n.txt"
    mv "$log" "${log%.log}.$n.log" 2>/dev/null
  fi
  runs[$what]=$((n + 1))
  $PY tests/gpu/checks/attn_check.py --lib "$B/libattn_test.so" --out "$OUT" --variants "$variants" "$what" \
    >"$log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || { status=1; tail -n 20 "$log"; }
  summary+=("$what: rc $rc")
}

for st in $STAGES; do
  case $st in
  correctness)
    $PY tests/gpu/checks/attn_check.py --lib "$B/libattn_test.so" --out "$OUT" correctness \
      2>&1 | tee "$OUT/correctness.log"
    rc=${PIPESTATUS[0]}
    summary+=("correctness: $(tail -n 1 "$OUT/correctness.log") (rc $rc)")
    [ "$rc" = 0 ] || status=1
    ;;
  sanitize)
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/attn_sancheck" \
        >"$OUT/sanitize_$tool.log" 2>&1
      rc=$?
      summary+=("compute-sanitizer $tool: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
        "$OUT/sanitize_$tool.log" | head -n 1)")
      [ "$rc" = 0 ] || { status=1; tail -n 30 "$OUT/sanitize_$tool.log"; }
    done
    ;;
  timing | dims-timing | masked-timing | masked-plans | experiments | masked-heat | masked-place | masked-method)
    timed_stage "$st"
    ;;
  timeline)
    # Needs ATTN_DEFS=-DPT_ATTN_TIMELINE (the kernel then prints its phases, TLM the staged merge's; never timed).
    $PY tests/gpu/checks/attn_check.py --lib "$B/libattn_test.so" --out "$OUT" timeline \
      >"$OUT/timeline.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || status=1
    grep -E "^TLM? " "$OUT/timeline.log"
    # -DPT_ATTN_TIMELINE_ALL: one line per CTA; summarised per tile count (timeline_ctas.py)
    if grep -q "^TLC" "$OUT/timeline.log"; then
      $PY tests/gpu/checks/timeline_ctas.py "$OUT/timeline.log" | tee "$OUT/timeline_ctas.txt"
    fi
    summary+=("timeline: rc $rc")
    ;;
  esac
done

echo "==== summary"
printf '%s\n' "${summary[@]}"
# each timed stage's tables: the earlier runs of a stage named more than once (timed_stage), then its last
for t in timing dims_timing masked_timing experiments masked_plans masked_heat masked_place masked_method; do
  for f in "$OUT/attn_$t".[0-9]*.txt; do [ -f "$f" ] && { echo "-- $(basename "$f")"; cat "$f"; }; done
  [ -f "$OUT/attn_$t.txt" ] && cat "$OUT/attn_$t.txt"
done
exit $status
