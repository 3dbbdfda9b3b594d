#!/usr/bin/env bash
# The verdicts of tests/gpu/checks/multi_gpu.py (issue 53's rows), which CI cannot run on two GPUs:
# NCCL's bus bandwidth formula, the all-reduce verdict (>= 0.98x stock, or within stock's own
# spread where that is wider), the per-rank speed-up against one GPU's (within 10%), which devices
# a process pooled on and the one-device-per-rank rule, the decode step from time stamps; and an
# unknown row refused before anything runs. Usage: test_multi_gpu_verdicts.sh MULTI_GPU_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$script" <<'PY'
import importlib.util, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))  # procs.py, shim_exit_stats.py
spec = importlib.util.spec_from_file_location("multi_gpu", sys.argv[1])
M = importlib.util.module_from_spec(spec)
spec.loader.exec_module(M)

# 1 GiB all-reduced by 2 ranks in 10 ms: 2 (n-1)/n = 1 of the bytes per second.
assert abs(M.busbw_gbs(2**30, 0.01, 2) - 107.3741824) < 1e-6
assert abs(M.busbw_gbs(2**30, 0.01, 4) - 1.5 * 107.3741824) < 1e-6
# Tight stock rounds: 0.98x passes, 0.97x fails; a wide stock spread (10%) holds 0.95x.
r, sp, v = M.bw_verdict([100, 100.5], [98.1, 98.4])
assert v == "PASS" and abs(r - 0.98) < 0.01, (r, v)
assert M.bw_verdict([100, 100.5], [97.0, 97.2])[2] == "FAIL"
r, sp, v = M.bw_verdict([100, 110], [100, 99.5])
assert v == "PASS" and abs(sp - 0.10) < 1e-9, (r, sp, v)
assert M.bw_verdict([100, 110], [90, 88])[2] == "FAIL"
assert M.bw_verdict([100], [97])[2] == "FAIL"  # one round: no spread to hide in
# Speed-up per rank within 10% of one GPU's, or above.
assert M.speedup_verdict(3.7, 4.0) == "PASS"
assert M.speedup_verdict(3.5, 4.0) == "FAIL"
assert M.speedup_verdict(4.5, 4.0) == "PASS"
# Pools: the devices with pooled allocations; the launcher (no alloc section) is left out.
rank0 = {"alloc": {"devices": [{"device": 0, "pooled_allocs": 9}, {"device": 1, "pooled_allocs": 0}]}}
rank1 = {"alloc": {"devices": [{"device": 1, "pooled_allocs": 4}]}}
launcher = {"kernels": {}}
assert M.pooled_devices(rank0) == [0] and M.pooled_devices(launcher) == []
assert M.rank_pool_problems([launcher, rank0, rank1], 2) == []
assert M.rank_pool_problems([rank0, rank0], 2) == ["two ranks pooled on the same device: [[0], [0]]"]
both = {"alloc": {"devices": [{"device": 0, "pooled_allocs": 1}, {"device": 1, "pooled_allocs": 1}]}}
assert "a rank pooled on several devices" in M.rank_pool_problems([both, rank1], 2)[0]
assert M.rank_pool_problems([rank0], 2) == ["1 of 2 ranks pooled anything"]
# Decode step: the differences after the first stamp (prefill's end), median, in ms.
assert abs(M.steps_p50([0.0, 0.5, 0.51, 0.52, 0.54]) - 10.0) < 1e-9  # 10, 10 and 20 ms
assert M.steps_p50([0.0, 1.0]) is None
print("multi_gpu verdicts: ok")
PY
# An unknown row is refused with the list of rows, before torch is imported or anything runs.
set +e
msg=$("$py" "$script" --rows tp_plan,bogus --out "$(mktemp -d)" 2>&1); rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "unknown row accepted"; exit 1; }
echo "$msg" | grep -q "unknown rows \['bogus'\]" || { echo "no message for an unknown row: $msg"; exit 1; }
echo "multi_gpu rows: ok"
