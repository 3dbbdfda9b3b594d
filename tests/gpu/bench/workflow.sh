#!/usr/bin/env bash
# The user's workflow on the GPU (issue 19's goals), in one device call:
#   1. ponytail doctor: every check passes (exit 0);
#   2. a planted fault (PONYTAIL_TEST_FAULT=200 flips the sign of the swapped decode kernel's
#      output): ponytail bench's verdict must say OUTSIDE and exit 3;
#   3. the sweep: prompts 512..32768 at B=1 and B=8, stock against the shim, interleaved per
#      point, then its plot. The result JSON is rewritten after each point, so a sweep cut by
#      SWEEP_S keeps the points it finished.
# Results in $OUT: doctor.txt, fault.txt, fault.json, sweep.txt, sweep.json, sweep.png.
#   SWEEP="prompt=512,2048,8192,32768,batch=1,8" NEW=64 SWEEP_S=420 bash tests/gpu/bench/workflow.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$out"
echo "== doctor"
timeout -k 5 120 "$pt" doctor >"$out/doctor.txt" 2>&1
echo "doctor: exit $?"; grep -E "FAIL|ready|not ready" "$out/doctor.txt" | head -8
echo "== planted fault (expect verdict OUTSIDE, exit 3)"
timeout -k 5 150 "$pt" bench --batch 8 --prompt 2048 --new-tokens 32 --shim-env PONYTAIL_TEST_FAULT=200 \
  --out "$out/fault.json" >"$out/fault.txt" 2>&1
echo "fault: exit $?"; grep -E "^verdict|test fault" "$out/fault.txt" | head -4
echo "== sweep ${SWEEP:-prompt=512,2048,8192,32768,batch=1,8}"
timeout -k 10 "${SWEEP_S:-420}" "$pt" bench --sweep "${SWEEP:-prompt=512,2048,8192,32768,batch=1,8}" \
  --new-tokens "${NEW:-64}" --out "$out/sweep.json" >"$out/sweep.txt" 2>&1
echo "sweep: exit $? after $SECONDS s"
"$pt" plot-sweep "$out/sweep.json" -o "$out/sweep.png" 2>&1 | tail -2
tail -n 30 "$out/sweep.txt"
