#!/usr/bin/env bash
# tests/gpu/checks/shim_exit_stats.py, the one reader of the shim's exit stats that the GPU checks
# share (compat_matrix.py, host_tier.py, gemma_padded.sh): the file names env() sets are the ones read() finds,
# another run's files and a half-written file are left out, peaks are the largest of the
# processes and counts their sum, PyTorch's own mapped memory's figures flattened beside the pool's. Usage: test_shim_exit_stats.sh SHIM_EXIT_STATS_PY
set -euo pipefail
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$1" <<'PY'
import importlib.util, json, os, sys, tempfile
spec = importlib.util.spec_from_file_location("shim_exit_stats", sys.argv[1])
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)
d = tempfile.mkdtemp()
e = S.env(d, "row-shim")
assert e["PONYTAIL_STATS"] == "json" and "%p" in e["PONYTAIL_STATS_FILE"], e
def put(path, obj):
    with open(path, "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))
one = {"alloc": {"peak_physical_bytes": 3 << 20, "grows": 2, "tier_bytes": 0, "lazy": True},
       "kernels": {"fallback_reasons": {"head_dim": 2}, "hooked": [{"swapped": 5}, {"swapped": 1}]},
       "internal_errors": 1, "hooks": {"verified": 6, "verify_failures": 1}}
two = {"alloc": {"peak_physical_bytes": 7 << 20, "grows": 3},
       "kernels": {"fallback_reasons": {"head_dim": 1, "mask": 4}, "top": [{"swapped": 4}]},
       "hooks": {"verified": 4, "verify_failures": 0}}
put(e["PONYTAIL_STATS_FILE"].replace("%p", "101"), one)
put(e["PONYTAIL_STATS_FILE"].replace("%p", "102"), two)
put(e["PONYTAIL_STATS_FILE"].replace("%p", "103"), '{"alloc": {"gro')          # killed while writing
put(S.env(d, "row-shim2")["PONYTAIL_STATS_FILE"].replace("%p", "104"), one)  # another run's
got = S.read(d, "row-shim")
assert len(got) == 2, got
a = S.alloc_sums(got)
assert a == {"peak_physical_bytes": 7 << 20, "grows": 5, "tier_bytes": 0}, a
k = S.kernel_sums(got)
assert k["swapped"] == 10 and k["fallback_reasons"] == {"head_dim": 3, "mask": 4}, k
assert k["pool_peak_physical_mib"] == 7.0 and k["internal_errors"] == 1, k
assert k["verified"] == 10 and k["verify_failures"] == 1, k
assert S.read(d, "stock") == [] and S.alloc_sums([]) == {}
# PyTorch's own mapped memory (expandable segments): its figures flattened as torch_vmm.KEY, peaks
# the largest, counts added.
e3 = S.env(d, "row-vmm")
put(e3["PONYTAIL_STATS_FILE"].replace("%p", "105"),
    {"alloc": {"grows": 1, "torch_vmm": {"on": True, "peak_host_bytes": 4 << 20, "tier_allocs": 2}}})
put(e3["PONYTAIL_STATS_FILE"].replace("%p", "106"),
    {"alloc": {"grows": 1, "torch_vmm": {"on": True, "peak_host_bytes": 6 << 20, "tier_allocs": 1}}})
v = S.alloc_sums(S.read(d, "row-vmm"))
assert v == {"grows": 2, "torch_vmm.peak_host_bytes": 6 << 20, "torch_vmm.tier_allocs": 3}, v
print("shim_exit_stats: ok")
PY
