#!/bin/bash
# vLLM 0.26 stock against vLLM under the default shim, on the GPU machine (issue 48). Prints a
# table last (also $OUT/serving.txt); every arm's JSON, vLLM log, shim log and shim stats are in
# $OUT/serving-runs.tgz. Exit 0 only when every arm that ran stock also ran under the shim and
# the token comparisons that must hold held.
#
# Getting vLLM there (the GPU machine has no network; a call carries at most 64 MiB):
#   here:  tests/gpu/serving/stage.sh          -> .serving/parts/vstage.tar.part0 (44 MB), WHOLE.sha256
#   GPU:   one call carrying the piece, WHOLE.sha256, the shim and build-gpu/serving/libattn_test.so
#          (61 MiB with the tree); `install` checks the sha256 and unpacks vLLM into $SITE
#          (/tmp/vsite) for PYTHONPATH. A stage made with PRUNE=0 or a larger PART_MB has more
#          pieces: one call per piece, back to back (a machine stays warm ~30 s), each carrying
#          its piece and moving it out of the checkout (STAGES=piece, into $PIECES, /tmp/vp);
#          `install` assembles the pieces from $PIECES and .serving/parts.
#
# STAGES (default "install models tiny-eager tiny-graph tiny-sleep tiny-serve"; then "big fa3" in
# a second call: one call runs at most 10 minutes), each arm its own process
# group, killed at its limit:
#   piece       move .serving/parts/vstage.tar.part* to $PIECES (nothing else)
#   install     assemble + install (skipped when $SITE already has vLLM)
#   models      tests/gpu/serving/mkmodels.py -> $MODELS/tiny, $MODELS/llama1b (random weights)
#   tiny-eager  offline LLM.generate, 64 prompts of 16-2048 tokens, 32 new tokens, --enforce-eager
#   tiny-graph  the same in vLLM's default mode (torch.compile + CUDA graphs); arms "stock shim":
#               the first compiles cold, the second starts on the warm cache (start-up is compared
#               on `big`, whose arms after the first all start warm)
#   tiny-sleep  eager, enable_sleep_mode: generate, sleep(level=1), wake_up(), generate again
#   tiny-psleep default mode (CUDA graphs), no vLLM sleep mode: the shim arm puts the engine core
#               to sleep itself (its control socket, as `ponytail sleep PID`), NVML asleep, wakes
#               it, generates again (issue 50 on an unchanged engine), then the same again with
#               its host memory got ahead (`ponytail sleep --prepare`); stock gives the tokens
#   tiny-serve  `vllm serve` (default mode), 64 concurrent requests (completions and chat,
#               streaming and not), twice; VLLM_BATCH_INVARIANT=1 so that batch composition,
#               which concurrent arrival makes differ from run to run, cannot change tokens
#   big         the 1B model, default mode, arms "stock shim stock shim stock shim" (the first arm of
#               each kind starts cold: 17-19 s of warm-up after capture on 2026-12-07, left out of
#               the start-up ratio by the report): 64 prompts' tokens,
#               then throughput (BIG_TP prompts, 1024, of 512 tokens, 128 new tokens, five passes; tok/s is
#               the median of the last four; 256 prompts gave ~1 s passes that moved 25-39k tok/s within
#               one arm on 2026-12-07, bench/records/2026-12-07-serving-fourth-run.md)
#   big-serve   `vllm serve` of the 1B model, as tiny-serve
#   bench       `vllm bench throughput` (vLLM's own benchmark: random prompts, BENCH_IN 512 tokens in,
#               BENCH_OUT 128 out, BENCH_N 512 prompts after BENCH_WARMUP 64 warm-up prompts) on the
#               1B model, arms "stock shim stock shim"; tests/gpu/serving/bench_result.py turns each
#               run into the arm's result
#   startup     start-up alone, where the shim's time goes (issue 48's <= 1.05x; warm pairs read 1.006,
#               1.060 and 1.115 on 2026-12-07): the 1B model, default mode, 4 prompts of 4 tokens,
#               arms "stock shim off stock shim off stock shim" (off: the shim loaded with
#               PONYTAIL_ENABLE=0, what loading alone costs); after each arm the size of every cache
#               directory the engine may fill (CACHE_DIRS), so that the first arm of each kind that
#               starts cold names the cache it missed; the report gives each kind's medians of
#               the start-up phases vLLM logs
#   tp2         issue 53, needs 2 GPUs: the 1B model with tensor_parallel_size=2, default mode, arms
#               "stock shim": tokens, throughput, and the shim's IPC counters (vLLM's custom
#               all-reduce opens CUDA IPC handles of pooled buffers in the other rank)
#   fa3         fa3_decode.py: vLLM's FA3 decode against Ponytail's kernel and the floor
#   tier        capacity (issue 48 point 3, issue 49's tier): the 1B model at --gpu-util 0.85, arms
#               "stock tier"; tier = the shim with PONYTAIL_HOST_TIER=$TIER_SIZE (32G) and
#               PONYTAIL_HOST_TIER_INFO=1, so vLLM sizes its KV cache past the card: KV tokens,
#               tokens against stock, throughput (what reading part of the KV over PCIe costs)
# SGLang 0.5.17 (tests/gpu/serving/sglang/stage.sh -> .serving/sglang/parts: one piece, carried
# with its WHOLE.sha256 in the call that runs these), FA3 attention, PyTorch sampling:
#   sg-install  tests/gpu/serving/sglang/install.sh into $SGSITE (/tmp/sgsite), once
#   sg-eager    sglang_offline.py, the 64 prompts on the tiny model, --disable-cuda-graph
#   sg-graph    the same with CUDA graphs (SGLang's default)
#   sg-psleep   as sg-graph, and the shim arm puts the scheduler to sleep and wakes it (as
#               tiny-psleep), then generates again
#   sg-serve    `sglang.launch_server` (--enable-deterministic-inference), the 64 requests
#   sg-big      the 1B model: tokens, then throughput, arms "stock shim stock shim"
#   sg-tier     as tier, for SGLang (--mem-fraction 0.85)
# ARMS_<stage> overrides a stage's arms (e.g. ARMS_big="stock shim"). BUDGET_S (570) bounds the
# call: an arm starts only with 60 s left and is cut at the budget (its result says NOT RUN).
# Results ($RUNS, /tmp/serving-runs) are this call's: a warm machine's earlier ones are removed
# at the start (KEEP_RUNS=1 keeps them, and the report then reads them too).
# The shim: SHIM_PREBUILT (carried, e.g. build-gpu/shim/libponytail_shim.so) or built here;
# the kernel test library for fa3: ATTN_TESTLIB (carried) or built with nvcc here.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$(mktemp -d)}
PIECES=${PIECES:-/tmp/vp}
SITE=${SITE:-/tmp/vsite}
SGSITE=${SGSITE:-/tmp/sgsite}
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/tvm-ffi}   # SGLang's JIT kernels, kept between arms
MODELS=${MODELS:-/tmp/serving-models}
R=${RUNS:-/tmp/serving-runs}
STAGES=${STAGES:-"install models tiny-eager tiny-graph tiny-sleep tiny-serve"}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-570}   # the whole call: an arm starts only with 60 s left, and ends by then
[ -z "${KEEP_RUNS:-}" ] && rm -rf "$R"  # this call's results only (header: RUNS)
mkdir -p "$OUT" "$R" "$PIECES"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not staged
export VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-/tmp/vllm-cache}
T0=$SECONDS

have_vllm() { [ -d "$SITE/vllm" ] && [ -f "$SITE/.installed" ]; }

stage_piece() {
  local n=0
  for p in .serving/parts/vstage.tar.part*; do
    [ -f "$p" ] || continue
    mv -f "$p" "$PIECES/" && n=$((n + 1))
  done
  [ -f .serving/parts/WHOLE.sha256 ] && cp .serving/parts/WHOLE.sha256 "$PIECES/"
  echo "piece: moved $n; $PIECES holds: $(ls "$PIECES" | tr '\n' ' ')"
}

stage_install() {
  if have_vllm; then echo "install: $SITE already has vLLM"; return 0; fi
  stage_piece
  local want; want=$(cat "$PIECES/WHOLE.sha256" 2>/dev/null)
  local got; got=$(cat "$PIECES"/vstage.tar.part* | sha256sum | cut -d' ' -f1)
  if [ -z "$want" ] || [ "$got" != "$want" ]; then
    echo "install: sha256 of the pieces $got, expected ${want:-<no WHOLE.sha256>}: a piece is missing or broken"
    return 1
  fi
  rm -rf /tmp/vstage && mkdir -p /tmp/vstage "$SITE"
  cat "$PIECES"/vstage.tar.part* | tar -xf - -C /tmp/vstage || return 1
  if command -v xz >/dev/null; then tar -xJf /tmp/vstage/vllm-0.26.0-tree.tar.xz -C "$SITE" || return 1
  else $PY -c "import tarfile,sys; tarfile.open(sys.argv[1],'r:xz').extractall(sys.argv[2])" \
         /tmp/vstage/vllm-0.26.0-tree.tar.xz "$SITE" || return 1; fi
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    /tmp/vstage/lite/*.whl || return 1
  touch "$SITE/.installed"
  echo "install: vLLM 0.26.0 in $SITE ($(du -sm "$SITE" | cut -f1) MiB)"
}

shim_setup() {
  if [ -n "${SHIM_PREBUILT:-}" ] && [ -f "$SHIM_PREBUILT" ]; then shim=$ROOT/$SHIM_PREBUILT; return 0; fi
  source tests/gpu/build.sh
  pt_gpu_build "$ROOT" "$OUT"
}

gpu_idle() {  # waits (<= 30 s) until the GPU holds under 1 GiB: the last arm's processes are gone
  for _ in $(seq 60); do
    local u; u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [ -n "$u" ] && [ "$u" -lt 1024 ] && return 0
    sleep 0.5
  done
  echo "  (GPU still holds ${u:-?} MiB after 30 s)"
}

# run_arm NAME SECS ARM CMD... : CMD in its own process group (setsid), stdout+stderr to
# $R/NAME.log, the whole group killed at SECS or when CMD ends (engine subprocesses included);
# ARM=shim sets the preload and the shim's stats/log files for the offline arms (serve arms pass
# --preload to the server themselves).
run_arm() {
  local name=$1 secs=$2 arm=$3; shift 3
  rm -f "$R/$name.json"
  gpu_idle  # before the time left is read: it can wait up to 30 s
  local left=$((BUDGET_S - (SECONDS - T0)))
  if [ "$left" -lt 60 ]; then
    echo "  $name: NOT RUN (${left} s left of BUDGET_S=$BUDGET_S)"
    echo "{\"ok\": false, \"error\": \"not run: out of time\", \"not_run\": true}" >"$R/$name.json"
    return
  fi
  local clipped=0
  [ "$secs" -gt "$left" ] && secs=$left clipped=1
  # SGLang JIT-builds its small kernels (nvcc) on first use into TVM_FFI_CACHE_DIR: an arm that
  # starts with that cache empty pays the builds in its start-up (the report marks it cold).
  if [ "${ENGINE:-vllm}" = sglang ] && [ -z "$(find "$TVM_FFI_CACHE_DIR" -name '*.so' 2>/dev/null | head -1)" ]; then
    touch "$R/$name.cold"
  fi
  local envs=()
  if [ "$arm" = shim ] || [ "$arm" = tier ] || [ "$arm" = off ]; then
    shim_vars "$name" "$arm"
    envs=(LD_PRELOAD="$shim" "${SHIM_VARS[@]}")
  fi
  local t=$SECONDS
  env "${envs[@]}" setsid "$@" >"$R/$name.log" 2>&1 &
  local pid=$! rc
  ( sleep "$secs"; kill -TERM -- -"$pid" 2>/dev/null; sleep 8; kill -KILL -- -"$pid" 2>/dev/null ) &
  local killer=$!
  wait "$pid"; rc=$?
  kill "$killer" 2>/dev/null; wait "$killer" 2>/dev/null
  kill -KILL -- -"$pid" 2>/dev/null
  echo "  $name: rc $rc in $((SECONDS - t)) s$( [ $((SECONDS - t)) -ge "$secs" ] && echo ' (killed at its limit)')"
  if [[ "$name" =~ \.[0-9]+\.(stock|shim|tier|off)$ ]] && [ ! -s "$R/$name.json" ]; then
    if [ "$clipped" = 1 ] && [ $((SECONDS - t)) -ge "$secs" ]; then
      # Cut by BUDGET_S, not by its own limit: the call ran out of time, the arm did not fail.
      echo "{\"ok\": false, \"error\": \"not run: cut at BUDGET_S after $((SECONDS - t)) s\", \"not_run\": true}" \
        >"$R/$name.json"
    else
      # The arm died before writing its result (killed, crashed, or the engine killed its own
      # parent): a row that says so, so that the report fails instead of listing nothing.
      $PY - "$R/$name.json" "$R/$name.log" "$rc" <<'PYEOF'
import json, sys
out, log, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    lines = [l.strip() for l in open(log, errors="replace") if l.strip()]
except OSError:
    lines = []
err = [l for l in lines if "Error" in l or "error:" in l][-2:] or lines[-1:]
json.dump({"ok": False, "rc": rc, "error": "exited rc %d without a result: %s" % (rc, " | ".join(err)[:300])},
          open(out, "w"))
PYEOF
    fi
  fi
  tail -n 3 "$R/$name.log" | sed 's/^/    | /'
  if [ -n "${CACHE_SNAP:-}" ]; then cache_snap "$R/$name.caches"; fi
}

# The directories an engine's start-up may fill (vLLM's compile cache under VLLM_CACHE_ROOT, with
# the inductor and Triton caches it keeps there, torch's and Triton's own, the driver's JIT cache,
# FlashInfer's and SGLang's JIT builds), each as DIR or DIR:DEPTH (the levels listed below it; 1 by
# default). cache_snap FILE: one line per directory listed, "bytes files path", for the report's
# "grew after this arm".
CACHE_DIRS=${CACHE_DIRS:-"$VLLM_CACHE_ROOT:3 ${HOME:-/root}/.cache ${HOME:-/root}/.triton ${HOME:-/root}/.nv /tmp/torchinductor_$(id -un) $TVM_FFI_CACHE_DIR"}
cache_snap() {
  local f=$1 top depth d b n
  : >"$f"
  for top in $CACHE_DIRS; do
    depth=1
    case $top in *:[0-9]) depth=${top##*:}; top=${top%:*} ;; esac
    [ -d "$top" ] || continue
    while IFS= read -r d; do
      b=$(du -s --apparent-size -B1 "$d" 2>/dev/null | cut -f1)
      n=$(find "$d" -type f 2>/dev/null | wc -l)
      echo "${b:-0} ${n:-0} $d" >>"$f"
    done < <(find "$top" -mindepth 1 -maxdepth "$depth" -type d 2>/dev/null | sort)
  done
}

# The capacity arm (`tier`): the shim with a host tier that cudaMemGetInfo reports, so the engine
# sizes its KV cache past the device (PONYTAIL_HOST_TIER_INFO); at a memory fraction of 0.85 the
# part past the card's 85% lives in page-locked host memory, read over PCIe.
tier_env=(PONYTAIL_HOST_TIER="${TIER_SIZE:-32G}" PONYTAIL_HOST_TIER_INFO=1)

# shim_vars NAME ARM: SHIM_VARS = the shim's settings for arm NAME: JSON stats in $R, rewritten
# every 2 s (SGLang SIGKILLs its scheduler and vLLM's offline engine core ends with _exit: neither
# writes exit stats), the info log in $R, and for a tier arm the host tier; for an off arm only
# PONYTAIL_ENABLE=0.
shim_vars() {
  SHIM_VARS=(PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$R/$1.stats-%p.json" PONYTAIL_STATS_EVERY=2
             PONYTAIL_LOG=info PONYTAIL_LOG_FILE="$R/$1.shim-%p.log")
  if [ "$2" = tier ]; then SHIM_VARS+=("${tier_env[@]}"); fi
  # off: loaded, switched off (what loading the library alone costs); it writes no stats or log
  if [ "$2" = off ]; then SHIM_VARS=(PONYTAIL_ENABLE=0); fi
}

arms_of() { local v="ARMS_${1//-/_}"; echo "${!v:-$2}"; }

offline_stage() {  # STAGE MODEL SECS DEFAULT_ARMS EXTRA_ARGS...  (ENGINE=sglang: SGLang)
  local stage=$1 model=$2 secs=$3 arms; arms=$(arms_of "$1" "$4"); shift 4
  local i=0 site=$SITE script=vllm_offline.py
  [ "${ENGINE:-vllm}" = sglang ] && { site=$SGSITE; script=sglang_offline.py; }
  for arm in $arms; do
    i=$((i + 1))
    run_arm "$stage.$i.$arm" "$secs" "$arm" env PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
      $PY tests/gpu/serving/$script --model "$MODELS/$model" --out "$R/$stage.$i.$arm.json" "$@"
  done
}

serve_stage() {  # STAGE MODEL SECS DEFAULT_ARMS EXTRA_ARGS...
  local stage=$1 model=$2 secs=$3 arms; arms=$(arms_of "$1" "$4"); shift 4
  local i=0 site=$SITE
  [ "${ENGINE:-vllm}" = sglang ] && site=$SGSITE
  for arm in $arms; do
    i=$((i + 1))
    local pre=(); [ "$arm" = shim ] || [ "$arm" = tier ] || [ "$arm" = off ] && pre=(--preload "$shim")
    shim_vars "$stage.$i.$arm" "$arm"  # the server passes them on; without --preload they do nothing
    run_arm "$stage.$i.$arm" "$secs" plain env PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
      VLLM_BATCH_INVARIANT=1 "${SHIM_VARS[@]}" \
      $PY tests/gpu/serving/vllm_serve.py --model "$MODELS/$model" --out "$R/$stage.$i.$arm.json" \
      --log "$R/$stage.$i.$arm.server.log" --engine "${ENGINE:-vllm}" "${pre[@]}" "$@"
  done
}

bench_stage() {  # STAGE MODEL SECS DEFAULT_ARMS EXTRA_ARGS...: vLLM's own `vllm bench throughput`
  local stage=$1 model=$2 secs=$3 arms; arms=$(arms_of "$1" "$4"); shift 4
  local i=0
  for arm in $arms; do
    i=$((i + 1))
    local n="$stage.$i.$arm"
    rm -f "$R/$n.bench.json"
    # --random-*-len, not --input-len: vLLM 0.26 gives the random dataset's own lengths (defaults
    # 1024 / 128) precedence. A warm-up pass first (other seeds): the timed pass is then not the
    # process's first generate.
    run_arm "$n" "$secs" "$arm" env PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" \
      $PY -m vllm.entrypoints.cli.main bench throughput --model "$MODELS/$model" --dataset-name random \
      --random-input-len "${BENCH_IN:-512}" --random-output-len "${BENCH_OUT:-128}" \
      --num-prompts "${BENCH_N:-512}" --num-warmups "${BENCH_WARMUP:-64}" --output-json "$R/$n.bench.json" "$@"
    grep -q '"not_run": true' "$R/$n.json" 2>/dev/null ||  # skipped for time: NOT RUN, not a failure
      $PY tests/gpu/serving/bench_result.py "$R/$n.bench.json" "$R/$n.log" "$R/$n.json"
  done
}

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>/dev/null
for st in $STAGES; do
  echo "== $st ($((SECONDS - T0)) s)"
  case $st in
    piece) stage_piece ;;
    install) stage_install || { echo "install failed"; break; } ;;
    models) $PY tests/gpu/serving/mkmodels.py "$MODELS" 2>&1 | tail -3 ;;
    tiny-eager) shim_setup; offline_stage tiny-eager tiny 150 "stock shim" --eager ;;
    tiny-graph) shim_setup; offline_stage tiny-graph tiny 240 "stock shim" ;;
    tiny-sleep) shim_setup; offline_stage tiny-sleep tiny 150 "stock shim" --eager --sleep ;;
    tiny-psleep) shim_setup; offline_stage tiny-psleep tiny 240 "stock shim" --ponytail-sleep ;;
    tiny-serve) shim_setup; serve_stage tiny-serve tiny 240 "stock shim" ;;
    big) shim_setup; offline_stage big llama1b 300 "stock shim stock shim stock shim" --throughput "${BIG_TP:-1024}" ;;
    big-serve) shim_setup; serve_stage big-serve llama1b 300 "stock shim" ;;
    bench) shim_setup; bench_stage bench llama1b 240 "stock shim stock shim" ;;
    startup) shim_setup; cache_snap "$R/startup.0.caches"
      CACHE_SNAP=1 offline_stage startup llama1b 150 "stock shim off stock shim off stock shim" --prompts 4 --max-tokens 4 ;;
    tier) shim_setup; offline_stage tier llama1b 300 "stock tier" --gpu-util 0.85 --throughput 256 ;;
    tp2) shim_setup  # issue 53; a machine of one GPU says so instead of failing every arm
      if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then echo "tp2: NOT RUN: needs 2 GPUs"
      else offline_stage tp2 llama1b 300 "stock shim" --tensor-parallel 2 --throughput "${BIG_TP:-1024}"; fi ;;
    fa3)
      lib=${ATTN_TESTLIB:-}
      if [ -z "$lib" ] || [ ! -f "$lib" ]; then
        lib=$R/libattn_test.so
        mkdir -p "$R/attn" && OUT="$R/attn" ATTN_LIB_OUT="$lib" ATTN_STAGES=none \
          bash tests/gpu/checks/attn.sh >"$R/attn/build.log" 2>&1 || tail -5 "$R/attn/build.log"
      fi
      run_arm fa3 240 plain env PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" \
        $PY tests/gpu/serving/fa3_decode.py --lib "$lib" --out "$R"
      ;;
    sg-install)
      if [ -f "$SGSITE/.installed" ]; then echo "sg-install: $SGSITE already has SGLang"
      else bash tests/gpu/serving/sglang/install.sh .serving/sglang/parts "$SGSITE" 2>&1 | tail -12 &&
             touch "$SGSITE/.installed" || { echo "sg-install failed"; break; }; fi ;;
    sg-eager) shim_setup; ENGINE=sglang offline_stage sg-eager tiny 200 "stock shim" --eager ;;
    sg-graph) shim_setup; ENGINE=sglang offline_stage sg-graph tiny 240 "stock shim" ;;
    sg-psleep) shim_setup; ENGINE=sglang offline_stage sg-psleep tiny 240 "stock shim" --ponytail-sleep ;;
    sg-serve) shim_setup; ENGINE=sglang serve_stage sg-serve tiny 240 "stock shim" ;;
    sg-big) shim_setup; ENGINE=sglang offline_stage sg-big llama1b 300 "stock shim stock shim" --throughput "${BIG_TP:-1024}" ;;
    sg-tier) shim_setup; ENGINE=sglang offline_stage sg-tier llama1b 300 "stock tier" --mem-fraction 0.85 --throughput 256 ;;
    *) echo "unknown stage $st" ;;
  esac
done
echo "== report ($((SECONDS - T0)) s)"
tar -czf "$OUT/serving-runs.tgz" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
$PY tests/gpu/serving/vllm_report.py "$R" | tee "$OUT/serving.txt"
exit "${PIPESTATUS[0]}"
