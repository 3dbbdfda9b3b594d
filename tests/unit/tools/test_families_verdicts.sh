#!/usr/bin/env bash
# The verdicts of tests/gpu/checks/families.py (issue 51's family table), which CI cannot run on a
# GPU: the stock-against-stock noise band, "slower" as the mean of the two batches' shim/stock
# ratios beyond it, the kernels column, and the token comparison of identical runs (no torch
# needed there). Usage: test_families_verdicts.sh FAMILIES_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$script" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("families", sys.argv[1])
F = importlib.util.module_from_spec(spec)
spec.loader.exec_module(F)

def run(e, p):
    return dict(ok=True, runs=dict(equal=dict(step_ms_p50=e, tokens=[[1, 2]], logits=None),
                                   padded=dict(step_ms_p50=p, tokens=[[1, 2]], logits=None)))
# Band: the largest |aa/stock - 1| of the run, at least 2%; None without a second stock run.
r = {"a": {"stock": run(10, 20), "aa": run(10.5, 19.0)}, "b": {"stock": run(4, 4), "aa": run(4.04, 4)}}
assert abs(F.noise_band(r) - 0.05) < 1e-12, F.noise_band(r)
assert F.noise_band({"a": {"stock": run(10, 10), "aa": run(10, 10)}}) == 0.02
assert F.noise_band({"a": {"stock": run(10, 10)}}) is None
# Slower: mean ratio beyond the band; one batch alone 30% slower moves the mean by 15%.
assert F.slower([10, 10], [11, 10.6], 0.05)
assert not F.slower([10, 10], [10.8, 10.0], 0.05)
assert F.slower([10, 10], [13, 10], 0.1)
assert not F.slower([10, 10], [13, 10], None)
assert not F.slower([10, None], [20, 20], 0.05)
# Kernels by kind, in order of first appearance.
assert F.kernel_kinds([("_ZN13pytorch_flash24flash_fwd_splitkv_kernel", 9), ("_Z41fmha_cutlassF_bf16", 3),
                       ("cudnn_generated_fort_native_sdpa_sm90", 1), ("_ZN13pytorch_flash32combine", 9)]) \
    == "flash+mem-eff+cudnn"
assert F.kernel_kinds(None) == "-"
# Identical tokens compare "same" in both batches without reading logits.
text, bad = F.compare(run(1, 1), run(1, 1), None)
assert text == "equal same; padded same" and not bad, text
print("families verdicts: ok")
PY
