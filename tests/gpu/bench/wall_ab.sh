#!/usr/bin/env bash
# Wall time A/B (issue 3 goal: wall time <= 1.03 x torch default with identical tokens):
# `ponytail bench` of examples/generate.py --batch 32 --prompt 2048 --new-tokens 1024, stock torch
# (default caching allocator, flash SDPA) against the shim's pool with the attention swap off, so
# that only the allocator differs. Rounds alternate stock / shim (bench does), so drift hits both.
# PYTORCH_CUDA_ALLOC_CONF is unset for both runs (the shim then selects cudaMallocAsync itself).
#
# Usage: tests/gpu/bench/wall_ab.sh         (results in $OUT, default ./gpu-out)
#   B=32 P=2048 N=1024 REPEATS=5      workload and rounds (10 runs of ~20-40 s at the defaults)
#   ATTN=off                          PONYTAIL_ATTN of the shim run (on: the whole product)
#   SHIM_ENV="K=V ..."                more environment for the shim run (e.g. PONYTAIL_KV_MIN=0)
#   TIMELINE_MS=0                     bench's memory sampling (0: no sampler thread in either run)
#   WALL_TIMEOUT                      limit for the bench (default: what is left of 570 s)
# Prints bench's own table, then per round: generate() wall (total_s) stock vs shim, the whole
# process's wall, token ids equal; medians, the shim/stock ratio and the 1.03 verdict.
# Table also in $OUT/wall_ab.txt; bench's JSON and logs in $OUT/wall_ab-logs.tgz.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
tmp=$(mktemp -d)
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
export PYTHONUNBUFFERED=1
limit="${WALL_TIMEOUT:-$(( 570 - SECONDS ))}"
echo "wall_ab: B=${B:-32} P=${P:-2048} N=${N:-1024}, ${REPEATS:-5} rounds, shim PONYTAIL_ATTN=${ATTN:-off} ${SHIM_ENV:-}, limit ${limit} s"

# timeout signals bench's whole process group, so a running generate.py stops too.
timeout -k 15 "$limit" env -u PYTORCH_CUDA_ALLOC_CONF "$pt" bench \
  --repeats "${REPEATS:-5}" --batch "${B:-32}" --prompt "${P:-2048}" --new-tokens "${N:-1024}" \
  --timeline-ms "${TIMELINE_MS:-0}" \
  --stock-env TORCH_CUDNN_SDPA_DEPRIORITIZED=1 \
  --shim-env TORCH_CUDNN_SDPA_DEPRIORITIZED=1 --shim-env PONYTAIL_ATTN="${ATTN:-off}" \
  $(for e in ${SHIM_ENV:-}; do printf -- '--shim-env %s ' "$e"; done) \
  --python "$py" --script "$root/examples/generate.py" --shim "$shim" \
  --out "$tmp/wall_ab.json" >"$tmp/bench.txt" 2>"$tmp/bench.err"
rc=$?
cat "$tmp/bench.txt"
[ $rc -eq 0 ] || { echo "bench: exit $rc$([ $rc -eq 124 ] && echo ' (timeout)')"; tail -5 "$tmp/bench.err"; }

"$py" - "$tmp/wall_ab.json" "$tmp/bench.err" "$out/wall_ab.txt" <<'PY'
import json, re, statistics, sys
res_path, err_path, table_path = sys.argv[1:4]
# Process wall per run from bench's progress lines (import, model build and warm-up included).
proc = {}
try:
    for l in open(err_path, errors="replace"):
        m = re.search(r"round (\d+)/\d+ ([AB]) done in ([\d.]+) s", l)
        if m:
            proc[(int(m.group(1)), m.group(2))] = float(m.group(3))
except OSError:
    pass
try:
    res = json.load(open(res_path))
    a, b = res["a"]["runs"], res["b"]["runs"]
except Exception:
    res, a, b = None, [], []

lines = []
f = lambda x: "%.2f" % x if isinstance(x, (int, float)) else "-"
lines.append("%-6s %10s %10s %7s %10s %10s %9s %9s  %s" % (
    "round", "stock_s", "shim_s", "ratio", "stock_proc", "shim_proc", "p50_stock", "p50_shim", "tokens"))
ref = a[0].get("token_ids_sha256") if a else None
ta, tb, all_same = [], [], bool(a) and len(a) == len(b)
nrounds = max(len(a), max([r for r, _ in proc] or [0]))
for i in range(nrounds):
    ra = a[i] if i < len(a) else {}
    rb = b[i] if i < len(b) else {}
    sa, sb = ra.get("total_s"), rb.get("total_s")
    if isinstance(sa, (int, float)):
        ta.append(sa)
    if isinstance(sb, (int, float)):
        tb.append(sb)
    ha, hb = ra.get("token_ids_sha256"), rb.get("token_ids_sha256")
    same = ha is not None and ha == hb
    all_same = all_same and same and ha == ref
    tok = ("same" if same else "DIFF") if ha and hb else "-"
    if same and ha != ref:
        tok += " (differs from round 1)"
    lines.append("%-6d %10s %10s %7s %10s %10s %9s %9s  %s" % (
        i + 1, f(sa), f(sb), "%.3f" % (sb / sa) if sa and sb else "-",
        f(proc.get((i + 1, "A"))), f(proc.get((i + 1, "B"))),
        f(ra.get("decode_step_ms", {}).get("p50")), f(rb.get("decode_step_ms", {}).get("p50")), tok))
if ta and tb:
    ma, mb = statistics.median(ta), statistics.median(tb)
    pa = [proc[k] for k in proc if k[1] == "A"]
    pb = [proc[k] for k in proc if k[1] == "B"]
    lines.append("%-6s %10s %10s %7.3f %10s %10s" % (
        "median", f(ma), f(mb), mb / ma, f(statistics.median(pa)) if pa else "-",
        f(statistics.median(pb)) if pb else "-"))
    ratio = mb / ma
    lines.append("")
    lines.append("generate() wall, shim / stock (medians of %d / %d runs): %.3f -> %s (goal <= 1.03)" % (
        len(ta), len(tb), ratio, "PASS" if ratio <= 1.03 else "FAIL"))
    lines.append("token ids identical, stock vs shim in every round: %s" % ("yes" if all_same else "NO"))
    if res:
        s = res.get("summary", {})
        ra_, rb_ = s.get("a", {}).get("peak_reserved_bytes"), s.get("b", {}).get("peak_reserved_bytes")
        if ra_ and rb_:
            lines.append("peak reserved (torch), medians: stock %.0f MiB, shim %.0f MiB" % (ra_ / 2**20, rb_ / 2**20))
else:
    lines.append("no complete result (bench failed or timed out): see bench.err in the logs")
text = "\n".join(lines)
print(text)
with open(table_path, "w") as fh:
    fh.write(text + "\n")
PY
tar czf "$out/wall_ab-logs.tgz" -C "$tmp" . 2>/dev/null
exit $rc
