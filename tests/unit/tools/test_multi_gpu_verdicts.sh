#!/usr/bin/env bash
# The verdicts of tests/gpu/checks/multi_gpu.py (issue 53's rows), which CI cannot run on two GPUs:
# NCCL's bus bandwidth formula, the all-reduce verdict (>= 0.98x stock, or within stock's own
# spread where that is wider), the per-rank speed-up against one GPU's (within 10%), which devices
# a process pooled on and that every rank pooled, the decode step from time stamps; every row's
# table over fake children (what each would write, per rank, and the shim's stats), a shim with
# the swap off that changes tokens failing its row; and an unknown row refused before anything runs.
# Usage: test_multi_gpu_verdicts.sh MULTI_GPU_PY
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
assert M.rank_pools([launcher, rank0, rank1], 2) == ([[0], [1]], [])
both = {"alloc": {"devices": [{"device": 0, "pooled_allocs": 1}, {"device": 1, "pooled_allocs": 1}]}}
assert M.rank_pools([both, rank1], 2) == ([[0, 1], [1]], [])  # shown, not failed
assert M.rank_pools([launcher, rank0], 2) == ([[0]], ["1 of 2 ranks pooled anything"])
# Decode step: the differences after the first stamp (prefill's end), median, in ms.
assert abs(M.steps_p50([0.0, 0.5, 0.51, 0.52, 0.54]) - 10.0) < 1e-9  # 10, 10 and 20 ms
assert M.steps_p50([0.0, 1.0]) is None
print("multi_gpu verdicts: ok")

# The rows' table code, which runs only on two GPUs, over fake children: procs.run_proc writes
# what each child would (per rank), and the stats files the shim would leave.
import json, tempfile, types
out, models = tempfile.mkdtemp(), tempfile.mkdtemp()
for d in ("full", "rank"):
    os.makedirs(os.path.join(models, d))
with open(os.path.join(models, "full", "model.safetensors"), "wb") as f:
    f.write(b"\0" * (4 << 20))
calls = []

def fake_run(cmd, env, log, timeout, grace):
    child = next(c for c in ("gen", "mp", "nccl") if c in cmd)
    res = cmd[cmd.index("--out") + 1]
    tag = os.path.basename(res).split(".rank")[0]
    calls.append((tag, child, "--split" in cmd and cmd[cmd.index("--split") + 1]))
    shim = "LD_PRELOAD" in env
    torchrun = cmd[0] == "torchrun"
    for r in range(2 if torchrun else 1):
        if child == "gen":
            toks = [[1, 2, 3]] if not tag.endswith(".shim") else [[1, 2, 4]]
            j = dict(ok=True, rank=r, tokens=toks, digest=M.token_digest(toks),
                     step_ms=2.0 if shim and env.get("PONYTAIL_ATTN") != "off" else 8.0,
                     devices=["0", "1"] if tag.startswith("split") else ["cuda:%d" % r])
        elif child == "mp":
            j = dict(ok=True, sizes=[dict(mib=m, read_on_gpu1=True, written_back=True) for m in (8, 64, 256)])
        else:
            j = dict(ok=True, rank=r, sizes=[dict(mib=m, correct=True, us=10.0, busbw=100.0 * (0.99 if shim else 1))
                                            for m in M.SIZES_MIB])
        with open(res.replace("{rank}", str(r)), "w") as f:
            json.dump(j, f)
        if shim:
            devs = [{"device": r, "pooled_allocs": 3}] if torchrun else [{"device": 0, "pooled_allocs": 3},
                                                                         {"device": 1, "pooled_allocs": 2}]
            with open(env["PONYTAIL_STATS_FILE"].replace("%p", str(100 + r)), "w") as f:
                json.dump({"alloc": {"devices": devs, "ipc_exports": 3, "ipc_opens": 3, "ipc_errors": 0}}, f)
    return 0

M.procs.run_proc = fake_run
a = types.SimpleNamespace(out=out, models=models, shim="/x/libponytail_shim.so", budget=600, rounds=2,
                          batch=2, prompt=8, new=4)
c = M.Check(a)
for r in M.ROWS:
    getattr(c, "row_" + r)()
text = "\n".join(c.lines)
assert c.fails == [], c.fails
assert "tp_plan speed-up per rank 4.00x, one GPU with a rank's shapes 4.00x: PASS" in text, text
assert "pooled devices per rank [[0], [1]]" in text, text
assert "split.shim             pools on devices [0, 1]" in text, text
assert ("split.stock", "gen", "2") in calls, calls  # half of the 4 MiB of weights on GPU 0
assert "IPC exports 3 opens 3 errors 0" in text, text
import re
assert re.search(r"^ +1024 +100\.0/100\.0 +99\.0/99\.0 +0\.990 +0\.0% PASS$", text, re.M), text
# The allocator alone changing tokens fails the row.
def bad_off(cmd, env, log, timeout, grace):
    rc = fake_run(cmd, env, log, timeout, grace)
    if env.get("PONYTAIL_ATTN") == "off":
        for r in range(2):
            p = cmd[cmd.index("--out") + 1].replace("{rank}", str(r))
            if os.path.exists(p):
                j = json.load(open(p)); j["digest"] = "other"; json.dump(j, open(p, "w"))
    return rc
M.procs.run_proc = bad_off
c = M.Check(a)
c.row_tp_plan()
assert "tp.shim_off: tokens differ from stock's with the allocator alone" in c.fails, c.fails
print("multi_gpu rows over fake children: ok")
PY
# An unknown row is refused with the list of rows, before torch is imported or anything runs.
set +e
msg=$("$py" "$script" --rows tp_plan,bogus --out "$(mktemp -d)" 2>&1); rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "unknown row accepted"; exit 1; }
echo "$msg" | grep -q "unknown rows \['bogus'\]" || { echo "no message for an unknown row: $msg"; exit 1; }
echo "multi_gpu rows: ok"
