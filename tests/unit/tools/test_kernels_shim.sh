#!/usr/bin/env bash
# `ponytail kernels` on real artefacts: the shim's embedded fatbin lists
# Ponytail's kernels (and no compiler-internal device functions), and a fixture
# with torch-flash-named kernels shows the hooks that recognise them.
# $1: ponytail; $2: the shim .so; $3: the flash-names fixture .so (optional);
# $4: 1 when the shim was built with its kernels.
set -u
PT=$1 SHIM=$2 FX=${3:-} BUILT=${4:-0}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
if [ "$BUILT" = 1 ]; then
  out=$("$PT" kernels "$SHIM") || fail "kernels on the shim exited $?"
  for k in pt_attn_decode_bf16_d128 pt_attn_decode_bf16_d128_kt pt_attn_decode_fp16_d64 pt_attn_decode_bf16_d96_kt \
           pt_attn_decode_fp16_d80 pt_attn_decode_bf16_d192v128 pt_attn_decode_fp16_d192v128_kt \
           pt_attn_compare_bf16 pt_attn_fault_bf16; do
    grep -q "sm_90 .* $k " <<<"$out" || fail "shim listing lacks $k for sm_90"
  done
  grep -q '\$__internal' <<<"$out" && fail "shim listing shows compiler-internal functions as kernels"
else
  "$PT" kernels "$SHIM" >/dev/null 2>&1 && fail "kernels on a shim without a fatbin should fail"
fi
if [ -n "$FX" ]; then
  out=$("$PT" kernels --json "$FX") || fail "kernels on the fixture exited $?"
  python3 - "$out" <<'PY' || fail "hook column of the fixture listing"
import json, sys
ks = {k["name"]: k for k in json.loads(sys.argv[1])["kernels"] if k["arch"] == "sm_90"}
want = {"flash_fwd_splitkv_kernel": "torch_flash/splitkv",
        "flash_fwd_splitkv_combine_kernel": "torch_flash/combine",
        "flash_fwd_kernel": "torch_flash/fwd"}
for part, hook in want.items():
    hits = [k for n, k in ks.items() if f"pytorch_flash{len(part)}{part}I" in n]
    assert len(hits) == 1 and hits[0]["hook"] == hook and hits[0]["param_bytes"] == 464, (part, hits)
other = [k for n, k in ks.items() if "not_attention" in n]
assert len(other) == 1 and other[0]["hook"] is None, other
PY
fi
[ "$fails" = 0 ] && echo "kernels_shim: all checks passed" || exit 1
