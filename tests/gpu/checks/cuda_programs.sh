#!/usr/bin/env bash
# Compatibility matrix of GPU programs that are not PyTorch (tests/gpu/checks/progs/),
# each run stock and under the shim, with identical results required.
#
#   C/CUDA (built here with nvcc -arch=$ARCH, once against the shared and once
#   against the static cudart): mempool_threshold (the reported crash: cuda-
#   samples' streamOrderedAllocation; also run as "mempool_threshold:keep-stream",
#   phase 2 on phase 1's stream), driver_api, explicit_pool, graph_alloc,
#   ipc_pair, cublas_gemm.
#   Python: cupy_prog, jax_prog (XLA's default allocator and cuda_async, both
#   with XLA_PYTHON_CLIENT_PREALLOCATE=false), numba_prog, triton_prog (on torch
#   tensors). Exit 77 = skipped (module or device missing).
#
# Every program prints "RESULT <name> <digest> <extra>" last; the stock and
# shim lines must be equal. The shim runs log at PONYTAIL_LOG=info to
# $OUT/logs/<case>.shim.<pid>.log and write PONYTAIL_STATS=json per process
# (their pool figures go in the notes). A run that dies by a signal is run once
# more with tests/gpu/checks/progs/segv_bt.c preloaded before the shim: the report
# (fault address, RIP and its object + offset, backtrace) is in
# $OUT/logs/<case>.<mode>.bt.<pid>.txt.
#
# Environment: SHIM (default: build-gpu's shim, built with tests/gpu/build.sh
# when missing), OUT (./gpu-out), TIMEOUT (120 s per run), PY_TIMEOUT (same),
# ARCH (sm_90), NVCC, PYTHON (python3), VARIANTS ("shared static"),
# PROGS (names to run, e.g. "mempool_threshold cupy_prog"; default all),
# PY=0 (no Python section), SHIM_ENV (extra VAR=VALUE words for the shim runs,
# e.g. "PONYTAIL_LOG=debug"), SHIM_LOG (info).
# Exit: 0 when no shim run failed where the stock one passed and every pair of
# RESULT lines is identical; 1 otherwise (also when a program did not build).
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
progs="$root/tests/gpu/checks/progs"
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
py="${PYTHON:-python3}"
tmo="${TIMEOUT:-120}"
py_tmo="${PY_TIMEOUT:-$tmo}"
arch="${ARCH:-sm_90}"
variants="${VARIANTS:-shared static}"
only=" ${PROGS:-} "
want() { [ "$only" = "  " ] || [[ "$only" == *" $1 "* ]]; }
bdir="$out/build"
ldir="$out/logs"
mkdir -p "$bdir" "$ldir"

# ---- the shim -------------------------------------------------------------
if [ -z "${SHIM:-}" ] || [ ! -f "$SHIM" ]; then
  [ -n "${SHIM:-}" ] && echo "SHIM=$SHIM not found: building build-gpu"
  . "$root/tests/gpu/build.sh"
  pt_gpu_build "$root" "$out"
  SHIM="$shim"
fi
shim_so="$(cd "$(dirname "$SHIM")" && pwd)/$(basename "$SHIM")"
read -r -a shim_extra <<<"${SHIM_ENV:-}"
echo "shim: $shim_so${SHIM_ENV:+ (SHIM_ENV: $SHIM_ENV)}"

# ---- build ----------------------------------------------------------------
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
cu_progs=(mempool_threshold driver_api explicit_pool graph_alloc ipc_pair cublas_gemm)
declare -A libs=([driver_api]=-lcuda [cublas_gemm]=-lcublas)
declare -A built=()
gcc -O1 -g -Wall -shared -fPIC -rdynamic -o "$bdir/segv_bt.so" "$progs/segv_bt.c" -ldl >"$bdir/segv_bt.build.log" 2>&1 \
  || { echo "segv_bt.so did not build:"; tail -5 "$bdir/segv_bt.build.log"; }
segv="$bdir/segv_bt.so"
[ -f "$segv" ] || segv=""
t0=$SECONDS
pids=()
names=()
njobs=$(nproc 2>/dev/null || echo 4)
for p in "${cu_progs[@]}"; do
  want "$p" || want "$p:keep-stream" || continue
  for v in $variants; do
    while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do sleep 0.2; done
    # shellcheck disable=SC2086
    "$nvcc" -O2 -arch="$arch" -cudart "$v" -o "$bdir/$p-$v" "$progs/$p.cu" ${libs[$p]:-} \
      >"$bdir/$p-$v.build.log" 2>&1 &
    pids+=($!)
    names+=("$p-$v")
  done
done
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then built[${names[$i]}]=1; else echo "BUILD FAILED: ${names[$i]} ($bdir/${names[$i]}.build.log)"; fi
done
echo "built ${#built[@]}/${#names[@]} programs in $((SECONDS - t0)) s with $("$nvcc" --version | tail -1)"

# ---- running --------------------------------------------------------------
rows=()
bad=0
stock_failed=0

signame() { local n; n=$(kill -l "$1" 2>/dev/null) && echo "SIG$n" || echo "signal $1"; }

# run_mode CASE MODE TIMEOUT CMD... -> rc on stdout; output in $ldir/CASE.MODE.out
# MODE: stock | shim | stock-bt | shim-bt
run_mode() {
  local c=$1 mode=$2 t=$3
  shift 3
  local envs=()
  local pre="" base="$ldir/$c.$mode"
  rm -f "$base".*.log "$base".*.stats.json
  case $mode in
  *-bt)
    pre="$segv"
    rm -f "$ldir/$c.${mode%-bt}.bt."*.txt
    envs+=(SEGV_BT_FILE="$ldir/$c.${mode%-bt}.bt.%p.txt")
    ;;
  esac
  case $mode in
  shim*)
    pre="${pre:+$pre:}$shim_so"
    envs+=(PONYTAIL_LOG="${SHIM_LOG:-info}" PONYTAIL_LOG_FILE="$base.%p.log" PONYTAIL_STATS=json
      PONYTAIL_STATS_FILE="$base.%p.stats.json" "${shim_extra[@]+"${shim_extra[@]}"}")
    ;;
  esac
  [ -n "$pre" ] && envs+=(LD_PRELOAD="$pre")
  timeout -k 10 "$t" env "${envs[@]+"${envs[@]}"}" "$@" >"$ldir/$c.$mode.out" 2>&1
  echo $?
}

# describe RC -> "" for a plain exit, else what killed it
death() {
  local rc=$1
  if [ "$rc" -eq 124 ]; then echo "timeout"
  elif [ "$rc" -eq 137 ]; then echo "SIGKILL/timeout"
  elif [ "$rc" -gt 128 ] && [ "$rc" -lt 192 ]; then signame $((rc - 128))
  fi
}

result_of() { grep -a '^RESULT ' "$1" 2>/dev/null | tail -1; }
first_error() {
  grep -a -m1 -E 'failed|FAIL|error|Error|Traceback' "$1" 2>/dev/null | sed -e "s|$progs/||g" -e "s|$bdir/||g" | cut -c1-120
}

# case LABEL CASE VARIANT TIMEOUT CMD...
run_case() {
  local label=$1 c=$2 variant=$3 t=$4
  shift 4
  local ts=$SECONDS
  local rs rh notes="" same d
  rs=$(run_mode "$c" stock "$t" "$@")
  rh=$(run_mode "$c" shim "$t" "$@")
  for m in stock shim; do
    local r=$rs
    [ "$m" = shim ] && r=$rh
    d=$(death "$r")
    # a child process killed by a signal (ipc_pair's importer): also worth a backtrace
    [ -z "$d" ] && grep -qa 'killed by signal' "$ldir/$c.$m.out" 2>/dev/null && d="child killed"
    if [ -n "$d" ]; then
      notes+="$m: $d; "
      if [ -n "$segv" ] && [ "$d" != timeout ] && [ "$d" != "SIGKILL/timeout" ]; then
        local r2 bt
        r2=$(run_mode "$c" "$m-bt" "$t" "$@")
        bt=$(ls -S "$ldir/$c.$m.bt."*.txt 2>/dev/null | head -1)
        local at=""
        [ -n "$bt" ] && at=$(sed -n 's|^segv_bt: instruction [^ ]* in \([^ ]*\) (base [^,]*, offset \(0x[0-9a-f]*\)).*|\1+\2|p' "$bt" | head -1)
        notes+="re-run with segv_bt: rc $r2${at:+, at ${at##*/}}${bt:+, bt ${bt#"$out"/}}; "
      fi
    elif [ "$r" -ne 0 ] && [ "$r" -ne 77 ]; then
      local e
      e=$(first_error "$ldir/$c.$m.out")
      if [ "$m" = shim ] && [ "$rs" -eq "$rh" ] && [ "$e" = "$(first_error "$ldir/$c.stock.out")" ]; then
        notes="${notes/#stock: /both: }"
      else
        notes+="$m: ${e:-exit $r}; "
      fi
    fi
  done
  local a b
  a=$(result_of "$ldir/$c.stock.out")
  b=$(result_of "$ldir/$c.shim.out")
  if [ "$rs" -eq 77 ] && [ "$rh" -eq 77 ]; then
    same="skip"
    notes+="$(grep -a -m1 '^SKIP' "$ldir/$c.stock.out"); "
  elif [ "$rs" -ne 0 ]; then
    same="-"
    notes+="stock failed; "
    stock_failed=$((stock_failed + 1))
  elif [ "$rh" -ne 0 ]; then
    same="-"
    bad=1
    notes="SHIM FAILS; $notes"
  elif [ -z "$a" ] || [ "$a" != "$b" ]; then
    same="NO"
    bad=1
    notes="RESULT differs: stock '${a:-none}' shim '${b:-none}'; $notes"
  else
    same="yes"
  fi
  if [ "$rh" -ne 77 ]; then
    local st sf=()
    for f in "$ldir/$c.shim."*.stats.json; do [ -e "$f" ] && sf+=("$f"); done
    if [ ${#sf[@]} -eq 0 ]; then
      st="no shim stats (never initialised, or died before exit)"
    else
      st=$("$py" "$progs/stats_summary.py" "${sf[@]}" 2>/dev/null) || st="stats: ?"
    fi
    notes+="$st"
  fi
  rows+=("$(printf '%-34s|%-10s|%-9s|%-9s|%-9s|%s' "$label" "$variant" "$rs" "$rh" "$same" "$notes")")
  printf '%-34s %-10s stock %-4s shim %-4s same %-5s %3d s  %s\n' "$label" "$variant" "$rs" "$rh" "$same" \
    $((SECONDS - ts)) "$notes"
}

echo "== C/CUDA programs (timeout $tmo s per run; logs in $ldir)"
for p in "${cu_progs[@]}"; do
  cases=("$p|")
  [ "$p" = mempool_threshold ] && cases+=("mempool_threshold:keep-stream|keep-stream")
  for cs in "${cases[@]}"; do
    name=${cs%%|*}
    arg=${cs#*|}
    want "$name" || want "$p" || continue
    for v in $variants; do
      if [ -z "${built[$p-$v]:-}" ]; then
        rows+=("$(printf '%-34s|%-10s|%-9s|%-9s|%-9s|%s' "$name" "$v" "-" "-" "-" "BUILD FAILED: ${bdir#"$out"/}/$p-$v.build.log")")
        bad=1
        continue
      fi
      c="${name//:/-}.$v"
      if [ -n "$arg" ]; then
        run_case "$name" "$c" "$v" "$tmo" "$bdir/$p-$v" "$arg"
      else
        run_case "$name" "$c" "$v" "$tmo" "$bdir/$p-$v"
      fi
    done
  done
done

if [ "${PY:-1}" != 0 ]; then
  echo "== Python programs (timeout $py_tmo s per run)"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  want cupy_prog && run_case "cupy" cupy_prog py "$py_tmo" "$py" "$progs/cupy_prog.py"
  if want jax_prog; then
    run_case "jax" jax_prog.default xla-bfc "$py_tmo" "$py" "$progs/jax_prog.py"
    run_case "jax" jax_prog.async cuda_async "$py_tmo" env XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async \
      "$py" "$progs/jax_prog.py"
  fi
  want numba_prog && run_case "numba" numba_prog py "$py_tmo" "$py" "$progs/numba_prog.py"
  want triton_prog && run_case "triton (on torch tensors)" triton_prog py "$py_tmo" "$py" "$progs/triton_prog.py"
fi

# ---- table ----------------------------------------------------------------
{
  echo
  printf '%-34s|%-10s|%-9s|%-9s|%-9s|%s\n' "program" "variant" "stock rc" "shim rc" "identical" "notes"
  printf '%s\n' "${rows[@]}"
  echo
  [ "$stock_failed" -eq 0 ] || echo "note: $stock_failed case(s) failed stock too (not counted against the shim)"
  if [ "$bad" -eq 0 ]; then echo "cuda_programs: OK"; else echo "cuda_programs: FAILURES (see notes; logs in $ldir)"; fi
} | tee "$out/cuda_programs.txt"
exit "$bad"
