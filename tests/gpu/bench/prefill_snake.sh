#!/usr/bin/env bash
# The d = 128 _snake prefill kernels (kernels/attn_prefill.h, pt_prefill_snake_pays) measured in
# one device call: correctness and the sanitizers on this tree (tests/gpu/checks/prefill.sh),
# then by graph replay three builds of the test library side by side, each beside torch flash
# and cuDNN: the launcher's rule (column "ponytail"), the plain kernel forced (sn0) and the
# snake kernel forced (sn1), at the long causal prompts of the bundled example's model (16
# query heads over 4) and at the issue grid's causal d = 128 points (32 over 8); last, the time
# to first token with its GPU time by kernel class, stock against the shim (SHIM_PREBUILT or a
# build of this tree). Results in $OUT (default ./gpu-out), the tables last on stdout.
#   STAGES   any of "check timing ttft" (default all three)
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
CUDA=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA/bin:$PATH" PYTHONUNBUFFERED=1
stages=" ${STAGES:-check timing ttft} "
B=$(mktemp -d); trap 'rm -rf "$B"' EXIT
if [[ $stages == *" timing "* ]]; then
  for v in rule sn0 sn1; do  # built while the check runs
    case $v in rule) f="" ;; sn0) f=-DPT_PREFILL_TEST_SNAKE=0 ;; sn1) f=-DPT_PREFILL_TEST_SNAKE=1 ;; esac
    # shellcheck disable=SC2086
    nvcc -shared -Xcompiler -fPIC -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a $f -I. \
      tests/gpu/checks/prefill_testlib.cu -L"$CUDA/lib64/stubs" -lcuda -o "$B/$v.so" 2>"$out/nvcc_$v.txt" &
  done
fi
if [[ $stages == *" check "* ]]; then
  mkdir -p "$out/check"
  OUT="$out/check" PREFILL_STAGES="correctness sanitize" timeout 300 bash tests/gpu/checks/prefill.sh \
    >"$out/check.txt" 2>&1
  echo "check rc $?"; tail -6 "$out/check.txt"
fi
wait
if [[ $stages == *" timing "* ]]; then
  x=(--lib "$B/rule.so" --extra "sn0=$B/sn0.so" --extra "sn1=$B/sn1.so" --d 128 --causal 1)
  timeout 200 python3 tests/gpu/checks/prefill_check.py timing "${x[@]}" --heads 16/4 --b 1,2 \
    --s 32768,49152,65536 >"$out/timing_h16.txt" 2>&1
  echo "timing (16/4) rc $?"
  timeout 200 python3 tests/gpu/checks/prefill_check.py timing "${x[@]}" --b 1,4,8 --s 4096,16384,32768 \
    >"$out/timing_h32.txt" 2>&1
  echo "timing (32/8) rc $?"
fi
if [[ $stages == *" ttft "* ]]; then
  OUT="$out/ttft" PROFILE=1 ROWS=${ROWS:-2x32768,1x65536} ROUNDS=${ROUNDS:-1} NEW=4 ARMS="stock auto" \
    timeout 240 bash tests/gpu/bench/prefill_ttft.sh >"$out/ttft.txt" 2>&1
  echo "ttft rc $?"
fi
for f in timing_h16 timing_h32; do [ -f "$out/$f.txt" ] && grep -E "^heads|^ B|^ *[0-9]+ +[0-9]+ +128" "$out/$f.txt"; done
[ -f "$out/ttft.txt" ] && grep -E "^\|" "$out/ttft.txt"
exit 0
