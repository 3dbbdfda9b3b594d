#!/usr/bin/env bash
# Issue 51's follow-up in one device call, sized to the time the call has (LIM seconds, default
# 580): the MLA kernel cases (attn_check.py --head-dims 192), the family check on the families
# whose verdicts were open (FAMILIES, default deepseek_v3,cohere2) with the SDPA policy check,
# then the new head sizes' graph-replay timing with what is left. Each stage's table is copied to
# $OUT as it ends, so a call cut short still returns what finished (six files: the device returns
# no more than eight).
# Needs (carry): build-gpu/shim/libponytail_shim.so, build-gpu/tools/ponytail,
# build-gpu/serving/libattn_test.so (tests/gpu/README.md says how they are built).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
LIM=${LIM:-580}
OUT=${OUT:-/tmp/families-followup}; mkdir -p "$OUT" /tmp/a
lib=build-gpu/serving/libattn_test.so
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 tests/gpu/checks/attn_check.py --lib $lib --out /tmp/a --head-dims 192 correctness \
  > "$OUT/attn_mla.txt" 2>&1
tail -3 "$OUT/attn_mla.txt"
# families and sdpa-policy: what is left but ~100 s for the timing
FAMILIES=${FAMILIES:-deepseek_v3,cohere2} SHIM_PREBUILT=build-gpu/shim/libponytail_shim.so \
  CHECKS="families sdpa-policy" BUDGET_S=$((LIM - 100 - SECONDS)) bash tests/gpu/check_all.sh > "$OUT/check_all.log" 2>&1
# the newest: a warm machine may still hold an earlier call's folder
d=$(ls -dt /tmp/pt-checks.* 2>/dev/null | head -1)
[ -n "$d" ] && [ -f "$d/families/families.txt" ] && cp "$d/families/families.txt" "$OUT/"  # the rest: checks.tgz
tail -25 "$OUT/check_all.log"
left=$((LIM - 5 - SECONDS))
if [ "$left" -gt 40 ]; then
  timeout "$left" python3 tests/gpu/checks/attn_check.py --lib $lib --out /tmp/a dims-timing > "$OUT/dims.txt" 2>&1
  tail -31 "$OUT/dims.txt"
else
  echo "dims-timing: not run ($left s left)"
fi
