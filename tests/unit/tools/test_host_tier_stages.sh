#!/usr/bin/env bash
# The verdicts of tests/gpu/checks/host_tier.py's capacity and off-path stages (issue 49), which
# CI cannot run on a GPU: generate.py is replaced by canned results. Capacity: stock's batch must
# finish and the next must not; each multiple must finish under the tier with tokens identical
# to its uncapped run; --no-stock runs no stock arm; --mults picks the multiples. Off the path:
# the tier's step within the default's spread or 2%, tokens identical, no tier bytes. A shim run
# that left no exit stats (the preload did not act) or a tier run whose tier held nothing fails
# (PyTorch's own mapped memory on the host counts, --torch-alloc expandable);
# stage names are checked before anything runs; a run past --deadline is not started. Policy:
# every arm twice in alternating order after one uncounted warm-up run, point 2's verdict per
# policy (>= 10% saved at <= 1.02x the default's step, undecided inside a wider own spread), and
# tokens that change with the shim's allocator policy fail.
# Usage: test_host_tier_stages.sh HOST_TIER_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$script" <<'PY'
import argparse, importlib.util, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
spec = importlib.util.spec_from_file_location("host_tier", sys.argv[1])
H = importlib.util.module_from_spec(spec)
spec.loader.exec_module(H)
real_run_gen = H.run_gen

def res(ok=True, digest="d", p50=10.0, tier=0, procs=1):
    return dict(rc=0 if ok else 1, oom=not ok, oom_phase=None if ok else "prefill",
                token_ids_sha256=digest if ok else None, decode_step_ms=dict(p50=p50),
                shim_alloc=dict(peak_tier_bytes=tier, tier_moved_bytes=0), shim_procs=procs)

def run(stage, table, **kw):
    """Runs stage with run_gen answering from table (tag -> result); the tags asked and fails."""
    asked = []
    def fake(a, tag, gen_args, shim_env=None, timeout=900, stock_env=None):
        asked.append(tag)
        if tag == "warm-machine":  # the uncounted first run: the default shim, nothing judged
            assert shim_env == {}, shim_env
            return res(p50=99.0)
        return dict(table[tag])
    H.run_gen = fake
    H.WARMED[0] = False
    H.verdicts = H.Verdicts("host_tier")
    H.row = H.verdicts.row
    a = argparse.Namespace(stock_batch=120, cap="24G", tier="96G", new_tokens=2048, mults=[1.5, 2.0],
                           no_stock=False, out=None, ref_digests={}, refs_only=False, policy_rounds=2)
    for k, v in kw.items():
        setattr(a, k, v)
    stage(a)
    return asked, H.verdicts.fails

good = {"cap-stock-b120": res(), "cap-stock-b128": res(False), "cap-tier-b184": res(tier=1 << 30),
        "cap-ref-b184": res(), "cap-tier-b240": res(tier=2 << 30), "cap-ref-b240": res()}
asked, fails = run(H.capacity, good)
assert asked == ["cap-stock-b120", "cap-stock-b128", "cap-ref-b184", "cap-tier-b184", "cap-ref-b240",
                 "cap-tier-b240"], asked
assert fails == [], fails
# The next stock batch finishing means the base was wrong: a failed goal.
_, fails = run(H.capacity, dict(good, **{"cap-stock-b128": res()}))
assert any("must not fit" in f for f in fails), fails
# Tokens that differ from the uncapped run, or a tier run that did not finish: failed goals.
_, fails = run(H.capacity, dict(good, **{"cap-tier-b240": res(digest="x", tier=2 << 30)}))
assert fails == ["  tokens vs uncapped (batch 240)"], fails
_, fails = run(H.capacity, dict(good, **{"cap-tier-b184": res(False)}))
assert len(fails) == 2, fails
# The second call: no stock arm, only the multiple asked for.
asked, fails = run(H.capacity, good, mults=[2.0], no_stock=True)
assert asked == ["cap-ref-b240", "cap-tier-b240"] and fails == [], (asked, fails)
# A batch too long for one call: the references alone (their digests), then the tier run against
# a digest given from that earlier call: the same verdicts, no reference run.
asked, fails = run(H.capacity, good, mults=[2.0], no_stock=True, refs_only=True)
assert asked == ["cap-ref-b240"] and fails == [], (asked, fails)
asked, fails = run(H.capacity, good, mults=[2.0], no_stock=True, ref_digests={240: "d"})
assert asked == ["cap-tier-b240"] and fails == [], (asked, fails)
_, fails = run(H.capacity, good, mults=[2.0], no_stock=True, ref_digests={240: "other"})
assert fails == ["  tokens vs uncapped (batch 240)"], fails
# The next stock batch failing but not by out-of-memory (a crash) proves nothing: failed.
_, fails = run(H.capacity, dict(good, **{"cap-stock-b128": dict(res(False), oom=False, rc=-11)}))
assert any("must not fit" in f for f in fails), fails
# A tier run that held nothing on the host (the cap did not act), or a shim run without exit
# stats (the preload did not load), fails even with identical tokens.
_, fails = run(H.capacity, dict(good, **{"cap-tier-b184": res(tier=0)}))
assert fails == ["shim + tier, cap 24G, batch 184 (1.5x)"], fails
_, fails = run(H.capacity, dict(good, **{"cap-tier-b184": res(tier=1 << 30, procs=0)}))
assert len(fails) == 2, fails
# Under --torch-alloc expandable the bytes on the host are PyTorch's own mapped memory's
# (shim/route_vmm.c, the stats' torch_vmm): they count as the tier's.
vmm = res(tier=0)
vmm["shim_alloc"]["torch_vmm.peak_host_bytes"] = 1 << 30
assert run(H.capacity, dict(good, **{"cap-tier-b184": vmm}))[1] == []
assert H.tier(vmm["shim_alloc"], "peak_tier_bytes") == 1 << 30
# Off the path: within 2% passes, beyond the spread fails, tier bytes used fail.
off = {"off-default-0": res(p50=10.0), "off-tier-0": res(p50=10.1), "off-default-1": res(p50=10.05),
       "off-tier-1": res(p50=10.1)}
asked, fails = run(H.offpath, off)
assert fails == [] and asked[0] == "warm-machine" and asked.count("warm-machine") == 1, (asked, fails)
assert len(run(H.offpath, dict(off, **{"off-tier-1": res(p50=11.0)}))[1]) == 1
assert run(H.offpath, dict(off, **{"off-tier-0": res(p50=10.1, tier=1)}))[1] == ["off the path: tier bytes used"]
assert run(H.offpath, dict(off, **{"off-default-1": res(p50=10.0, procs=0)}))[1] == [
    "off the path: decode step"]
# Policy (point 2): every arm --policy-rounds times, odd rounds reversed; the default's own spread
# is the band; a policy meets point 2 at >= 10% saved with a step <= 1.02x the default's, and a
# ratio over 1.02 but inside a band wider than 2% is undecided, not a failure either way.
assert H.policy_order(2) == ["stock", "stock expandable", "shim default", "shim expandable", "shim async",
                             "shim async", "shim expandable", "shim default", "stock expandable", "stock"]
assert H.policy_verdict(0.129, 1.01, 0.02).startswith("meets point 2")
assert H.policy_verdict(0.05, 0.9, 0.02) == "saves under 10%"
assert H.policy_verdict(0.158, 1.04, 0.02) == "step over 1.02x"
assert H.policy_verdict(0.158, 1.04, 0.08).startswith("undecided")
assert H.policy_verdict(None, 1.0, 0.02) == "not measured"
def pol(stock=8340, exp=7266, steps=None, digest="d"):
    steps = steps or {}
    t = {}
    for name, mib in (("stock", stock), ("stock-expandable", exp), ("shim-default", stock),
                      ("shim-expandable", exp), ("shim-async", 7024)):
        for i in range(2):
            r = res(p50=steps.get(name, [10.0, 10.0])[i], digest=("s" if name.startswith("stock") else digest))
            r["peak_reserved_bytes"] = mib << 20
            t["policy-%s-%d" % (name, i)] = r
    return t
asked, fails = run(H.policy, pol(), policy_rounds=2)
assert fails == [] and asked[0] == "warm-machine" and len(asked) == 11, (asked, fails)
assert "policy-shim-async-1" in asked and "policy-stock-1" in asked
# Tokens that change with the shim's allocator policy fail; stock and the shim may differ.
_, fails = run(H.policy, dict(pol(), **{"policy-shim-async-1": dict(pol()["policy-shim-async-1"], token_ids_sha256="x")}),
               policy_rounds=2)
assert fails == ["policy: tokens of the shim runs"], fails
_, fails = run(H.policy, dict(pol(), **{"policy-stock-1": dict(pol()["policy-stock-1"], token_ids_sha256="x")}),
               policy_rounds=2)
assert fails == [], fails  # stock on cuDNN differs between its own processes: shown, not judged
# run_gen itself: no time left before --deadline starts nothing.
H.DEADLINE[0], H.T0 = 10.0, H.time.time()
r = real_run_gen(argparse.Namespace(out="/nonexistent"), "t", [], {})
assert str(r["rc"]).startswith("not run") and not H.shim_ok(r), r
# Unknown stage names are refused before anything runs.
sys.argv = ["host_tier.py", "--shim", "x.so", "--stages", "offpath capacty", "--out", "/nonexistent"]
try:
    H.main()
    raise AssertionError("unknown stage accepted")
except SystemExit as e:
    assert e.code == 2, e.code
print("host_tier stages: ok")
PY
