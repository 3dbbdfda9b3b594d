#!/usr/bin/env bash
# Is Gemma's padded batch under the shim a kernel or hook error, or a near tie? (issue 51; on
# 2026-12-07 one row of a Gemma-shaped model's left-padded batch parted from stock at its first
# decode step: head_dim 256 on the masked kernel). Two answers, each short:
#  1. the kernel alone: attn_check.py's head_dim 256 cases (masked, several padded rows, the
#     family check's exact geometry) against fp32 with poisoned outputs;
#  2. the hook in the model: the family check's gemma shim arm under PONYTAIL_ATTN=verify (each
#     swapped launch also runs torch's kernel and compares on the GPU): verified and failures.
# Needs build-gpu/serving/libattn_test.so (ATTN_PREBUILT=... ATTN_LIB_OUT=... ATTN_STAGES=none
# bash tests/gpu/checks/attn.sh), the shim (SHIM, default build-gpu/shim/libponytail_shim.so)
# and build-gpu/tools/ponytail. Writes $OUT/attn_d256.txt and $OUT/gemma_verify/.
set -u
cd "$(dirname "$0")/../../.."
out=${OUT:-gpu-out}; mkdir -p "$out/gemma_verify"
shim=${SHIM:-build-gpu/shim/libponytail_shim.so}
timeout -k 5 "${ATTN_LIMIT_S:-150}" python3 tests/gpu/checks/attn_check.py --lib build-gpu/serving/libattn_test.so \
  --head-dims 256 correctness >"$out/attn_d256.txt" 2>&1
krc=$?
echo "gemma_padded: kernel cases rc $krc"
grep -E "^correctness:|FAIL" "$out/attn_d256.txt" | head -20
PONYTAIL_ATTN=verify timeout -k 5 "${VERIFY_LIMIT_S:-120}" python3 tests/gpu/checks/families.py --shim "$shim" \
  --ponytail build-gpu/tools/ponytail --out "$out/gemma_verify" --families gemma --arms shim >"$out/gemma_verify.log" 2>&1
echo "gemma_padded: verify arm rc $?"
# The stats as every check reads them (shim_exit_stats.py); families.py names the arm's file
# gemma.shim.stats.json.
python3 - "$out/gemma_verify" <<'PY'
import json, sys
sys.path.insert(0, "tests/gpu/checks")
import shim_exit_stats
stats = shim_exit_stats.read(sys.argv[1], "gemma.shim")
k = shim_exit_stats.kernel_sums(stats)
print("gemma_padded: %d stats file(s): verified %d, verify failures %d; swapped %d, fallbacks %s" % (
    len(stats), k["verified"], k["verify_failures"], k["swapped"], json.dumps(k["fallback_reasons"])))
sys.exit(0 if stats and k["verified"] and not k["verify_failures"] else 1)
PY
vrc=$?
# The verdict: the kernel's cases all pass, and the model's swapped launches all verified.
if [ $krc -eq 0 ] && [ $vrc -eq 0 ]; then echo "gemma_padded: PASS"; else
  echo "gemma_padded: FAIL (kernel cases rc $krc; verify: $([ $vrc -eq 0 ] && echo ok || echo 'failures, none verified or no stats'))"; exit 1; fi
