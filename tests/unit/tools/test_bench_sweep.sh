#!/usr/bin/env bash
# A whole `ponytail bench --sweep` on the CPU: the fake CUDA (tests/fakecuda, on
# LD_LIBRARY_PATH) passes bench's GPU probe, fixtures/sweep/generate.py stands in for
# examples/generate.py (made-up figures, JSON logits) and the real examples/verdict.py
# judges. Checks the order of the runs (A then B at each point, the verdict's arms at the
# first and last point only, or at every point with --verdict-every, generating only
# --verdict-steps tokens), the output (the verdict before each judged point's table, a table
# per point, the summary), the result file, the exit status (0; 3 with the planted fault of
# PONYTAIL_TEST_FAULT in B's environment; 4 with a NaN; 1 when a point's runs fail, the
# sweep going on), `ponytail plot-sweep` on the result, and the single A/B, which shares
# the sweep's steps (tools/commands/bench.h): its verdict first, exit 0, and 3 with the planted fault.
# $1: ponytail; $2: the fakecuda build dir; $3: fixtures dir.
set -u
PT=$1 FAKE=$2 FX=$3
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" <<<"$1" || fail "$3: lacks '$2'"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The "shim" B preloads: a library python loads anyway (the real shim may be built with
# ASan, which cannot be preloaded into python); the fake tells B by it.
shim=$(ldd "$(python3 -c "import sys; print(sys.executable)")" 2>/dev/null | awk '/libc\.so/ && $3 ~ /^\// {print $3; exit}')
[ -r "$shim" ] || { echo "SKIP: no libc path from ldd to stand in for the shim"; exit 77; }
export FAKE_SHIM=$shim
sweep() {
  local log=$1; shift
  FAKE_LOG=$log LD_LIBRARY_PATH=$FAKE "$PT" bench --script "$FX/sweep/generate.py" --shim "$shim" \
    --timeline-ms 0 --no-warmup --new-tokens 12 --verdict-steps 3 "$@"
}

# 1. Two prompts x two batches, the defaults: verdict at the first and last point.
out=$(sweep "$tmp/log1" --sweep prompt=512,2k --sweep batch=1,4 --out "$tmp/s1.json" 2>"$tmp/err1"); rc=$?
[ $rc = 0 ] || { fail "sweep: exit $rc"; cat "$tmp/err1"; }
want='arm=A prompt=512 batch=1 new=12 verdict=0
arm=B prompt=512 batch=1 new=12 verdict=0
arm=A prompt=512 batch=1 new=3 verdict=1 sdpa=default
arm=B prompt=512 batch=1 new=3 verdict=1 sdpa=default
arm=A prompt=512 batch=1 new=3 verdict=1 sdpa=flash
arm=A prompt=2048 batch=1 new=12 verdict=0
arm=B prompt=2048 batch=1 new=12 verdict=0
arm=A prompt=512 batch=4 new=12 verdict=0
arm=B prompt=512 batch=4 new=12 verdict=0
arm=A prompt=2048 batch=4 new=12 verdict=0
arm=B prompt=2048 batch=4 new=12 verdict=0
arm=A prompt=2048 batch=4 new=3 verdict=1 sdpa=default
arm=B prompt=2048 batch=4 new=3 verdict=1 sdpa=default
arm=A prompt=2048 batch=4 new=3 verdict=1 sdpa=flash'
got=$(sed -E 's/ (warmup|timeline)=[0-9]+//g; s/(verdict=0) sdpa=default/\1/' "$tmp/log1")
[ "$got" = "$want" ] || fail "run order:
$got"
# The output: per point, the verdict (when judged) before its table; then the summary.
order=$(awk '/^== point/ {printf "%s ", $3} /^verdict:/ {printf "verdict "} /^  decode step p50/ {printf "table "}
             /^== sweep summary/ {printf "summary "}' <<<"$out")
[ "$order" = "1/4: verdict table 2/4: table 3/4: table 4/4: verdict table summary verdict " ] || fail "output order: $order"
has "$out" "  decode step p50 (ms)               12.125         10.500    0.866" "point 1's table"
has "$out" "not judged at this point (--verdict-every judges every point)" "unjudged point"
has "$out" "verdict: within PyTorch's own backend spread at every judged point (2 of 4 judged: batch 1, prompt 512; batch 4, prompt 2048)" "summary verdict"
has "$out" "      4    2048     1.67x     1.67x  1.100" "summary row"
has "$out" "ponytail plot-sweep $tmp/s1.json" "plot hint"
python3 - "$tmp/s1.json" <<'PY' || fail "result file"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "ponytail bench --sweep"
sw = d["sweep"]
assert sw["prompt"] == [512, 2048] and sw["batch"] == [1, 4] and sw["done"] == 4 and sw["complete"], sw
assert sw["verdict_points"] == "first and last" and sw["verdict_new_tokens"] == 3, sw
pts = d["points"]
assert [(p["batch"], p["prompt"], p["judged"]) for p in pts] == [(1, 512, True), (1, 2048, False), (4, 512, False), (4, 2048, True)]
assert all(p["status"] == "done" and len(p["a"]["runs"]) == 1 and len(p["b"]["runs"]) == 1 for p in pts)
assert pts[0]["verdict"]["status"] == "within" and pts[1]["verdict"] is None
assert sorted(pts[0]["verdict_runs"]) == ["a", "b", "r"] and pts[1]["verdict_runs"] == {}
assert pts[0]["summary"]["verdict"] == "within" and pts[1]["summary"]["verdict"] is None
s = d["summary"]
assert s["exit_status"] == 0 and s["line"].startswith("verdict: within"), s
row = s["points"][3]
assert row["batch"] == 4 and row["prompt"] == 2048 and abs(row["step_speedup"] - 20.0 / 12.0) < 1e-9, row
assert abs(row["reserved_saved_pct"] - 10.0) < 1e-3, row
PY
"$PT" plot-sweep "$tmp/s1.json" -o "$tmp/s1.png" >"$tmp/plot.out" 2>&1 || fail "plot-sweep on the sweep's result: $(cat "$tmp/plot.out")"
[ -s "$tmp/s1.png" ] || fail "no plot written"
has "$(cat "$tmp/plot.out")" "wrote $tmp/s1.png (4 of 4 points, 2 batch sizes" "plot-sweep output"

# 2. --verdict-every: the verdict's arms at every point.
sweep "$tmp/log2" --sweep prompt=512,2k,8k --verdict-every --batch 2 --out "$tmp/s2.json" >/dev/null 2>&1; rc=$?
[ $rc = 0 ] || fail "--verdict-every: exit $rc"
[ "$(grep -c 'verdict=1 sdpa=flash' "$tmp/log2")" = 3 ] || fail "--verdict-every: R ran $(grep -c 'verdict=1 sdpa=flash' "$tmp/log2") times, not 3"
grep -q 'batch=2 ' "$tmp/log2" || fail "--batch beside --sweep prompt=: not passed"
# --verdict-steps 0: no verdict arm at all.
sweep "$tmp/log3" --sweep prompt=512,2k --verdict-steps 0 --out "$tmp/s3.json" >"$tmp/out3" 2>&1; rc=$?
[ $rc = 0 ] || fail "--verdict-steps 0: exit $rc"
grep -q 'verdict=1' "$tmp/log3" && fail "--verdict-steps 0 ran verdict arms"
has "$(cat "$tmp/out3")" "verdict: not judged at any point (--verdict-steps 0)" "--verdict-steps 0"

# 3. The planted fault in B's environment: OUTSIDE, exit 3, every table still printed.
out=$(sweep "$tmp/log4" --sweep prompt=512,2k --shim-env PONYTAIL_TEST_FAULT=200 --out "$tmp/s4.json" 2>"$tmp/err4"); rc=$?
[ $rc = 3 ] || fail "planted fault: exit $rc, want 3"
has "$out" "verdict: OUTSIDE PyTorch's own backend spread (max rel diff" "planted fault, point verdict"
has "$out" "verdict: OUTSIDE PyTorch's own backend spread at batch 8, prompt 512; batch 8, prompt 2048" "planted fault, sweep verdict"
has "$(cat "$tmp/err4")" "ponytail bench: verdict: OUTSIDE" "planted fault on stderr"
has "$out" "== sweep summary" "planted fault: summary"
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"]["exit_status"])' "$tmp/s4.json")" = 3 ] ||
  fail "planted fault: exit_status in the result"

# 4. A NaN in B's logits at the last point: exit 4, even with the first point within.
out=$(FAKE_NAN=2048 sweep "$tmp/log5" --sweep prompt=512,2k --out "$tmp/s5.json" 2>/dev/null); rc=$?
[ $rc = 4 ] || fail "NaN: exit $rc, want 4"
has "$out" "verdict: FAIL: NaN/Inf in the sampled logits at batch 8, prompt 2048" "NaN verdict"

# 5. A point whose runs fail: recorded, the sweep goes on, exit 1.
out=$(FAKE_FAIL=2048:8 sweep "$tmp/log6" --sweep prompt=512,2k,8k --out "$tmp/s6.json" 2>/dev/null); rc=$?
[ $rc = 1 ] || fail "failed point: exit $rc, want 1"
has "$out" "== point 2/3: batch 8, prompt 2048: a run failed (see stderr); going on with the next point" "failed point"
has "$out" "== point 3/3: batch 8, prompt 8192" "point after the failed one"
has "$out" "runs failed at batch 8, prompt 2048 (see stderr)" "failed point in the verdict line"
python3 - "$tmp/s6.json" <<'PY' || fail "failed point in the result"
import json, sys
d = json.load(open(sys.argv[1]))
assert [p["status"] for p in d["points"]] == ["done", "failed", "done"]
assert d["summary"]["points"][1]["verdict"] == "failed" and d["summary"]["exit_status"] == 1
PY
"$PT" plot-sweep "$tmp/s6.json" -o "$tmp/s6.svg" >/dev/null 2>&1 || fail "plot-sweep with a failed point"

# 6. The single A/B through the same shared steps: the verdict first, exit 0; the fault: 3.
out=$(sweep "$tmp/log7" --prompt 1024 --batch 2 --out "$tmp/b.json" 2>/dev/null); rc=$?
[ $rc = 0 ] || fail "single A/B: exit $rc"
[[ "$(head -1 <<<"$out")" == "verdict: within PyTorch's own backend spread (max rel diff"* ]] ||
  fail "single A/B: the first line is not the verdict: $(head -1 <<<"$out")"
has "$out" "  decode step p50 (ms)               14.500         11.000    0.759" "single A/B table"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tool"] == "ponytail bench" and d["summary"]["verdict"] == "within" and d["settings"]["prompt"] == 1024' \
  "$tmp/b.json" || fail "single A/B result"
# What the shim swapped in B, from its exit stats: a share, or NONE with the reasons.
has "$out" "  attention swapped (B)      120 of 126 hooked launches (95.2%); fallbacks: seqlen_q > 16 6" "swapped line"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["attention"]; assert a["swapped"] == 120 and a["fallbacks"] == 6 and not a["none_swapped"] and a["fallback_reasons"] == {"seqlen_q > 16": 6}, a' \
  "$tmp/b.json" || fail "single A/B: attention in the result"
out=$(FAKE_SWAPPED=0 sweep "$tmp/log9" --prompt 1024 --batch 2 --verdict-steps 0 --out "$tmp/b3.json" 2>/dev/null); rc=$?
[ $rc = 0 ] || fail "nothing swapped: exit $rc"
has "$out" "  attention swapped (B)      NONE: no attention launch ran on Ponytail's kernels, so B/A measures the" "nothing swapped"
has "$out" "head_dim not 64/128/256 30" "nothing swapped: the reason"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["attention"]; assert a["none_swapped"] and a["swapped"] == 0, a' \
  "$tmp/b3.json" || fail "nothing swapped: attention in the result"
# PONYTAIL_STATS given by the user: their choice stands, and the line says unknown.
out=$(sweep "$tmp/log10" --prompt 1024 --batch 2 --verdict-steps 0 --shim-env PONYTAIL_STATS=0 --out "$tmp/b4.json" 2>/dev/null)
has "$out" "  attention swapped (B)      unknown (no shim stats from the B runs" "user's PONYTAIL_STATS"
# The sweep: over every point's B runs (2 points x 120).
out=$(sweep "$tmp/log11" --sweep prompt=512,2k --verdict-steps 0 --out "$tmp/s7.json" 2>/dev/null)
has "$out" "  attention swapped (B)      240 of 252 hooked launches" "sweep swapped line"
sweep "$tmp/log8" --prompt 1024 --batch 2 --shim-env PONYTAIL_TEST_FAULT=200 --out "$tmp/b2.json" >/dev/null 2>&1; rc=$?
[ $rc = 3 ] || fail "single A/B with the planted fault: exit $rc, want 3"

[ $fails = 0 ] && echo "bench --sweep: ok"
exit $((fails > 0))
