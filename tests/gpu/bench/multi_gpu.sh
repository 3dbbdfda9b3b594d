#!/usr/bin/env bash
# One device call on a machine with two GPUs (kind nvidia-h200-x2):
#   tests/gpu/bench/multi_gpu.sh tp2        issue 6: tests/gpu/checks/tp2.sh (peer access, TP all-reduce + IPC,
#                                      TP generate.py; stock and under the shim)
#   tests/gpu/bench/multi_gpu.sh tp2-wall   the same, then issue 3's paired wall time with a GPU per
#                                      process (tests/gpu/bench/wall_pair.sh GPUS=2) until the call's end
#   tests/gpu/bench/multi_gpu.sh wall       only the paired wall time, GPUS=2
# Results: $OUT/multi-gpu-<what>/ and the tables on stdout.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
top="${OUT:-$root/gpu-out}"; what="${1:-tp2}"; w="$top/multi-gpu-$what"; mkdir -p "$w"
. "$root/tests/gpu/build.sh"
step() { pt_gpu_step "$w" "$@"; }
pair() { step pair $(( 585 - SECONDS )) env GPUS=2 AA_ROUNDS="${AA_ROUNDS:-3}" ROUNDS="${ROUNDS:-12}" \
           DEADLINE=$(( 520 - SECONDS )) bash "$root/tests/gpu/bench/wall_pair.sh"; }
case $what in
  tp2) step tp2 580 bash "$root/tests/gpu/checks/tp2.sh"; names="tp2" ;;
  tp2-wall) step tp2 400 bash "$root/tests/gpu/checks/tp2.sh"; pair; names="tp2 pair" ;;
  wall) pair; names="pair" ;;
  *) echo "usage: $0 tp2|tp2-wall|wall"; exit 2 ;;
esac
for f in $names; do echo "==== $f"; tail -n 45 "$w/$f.log"; done
