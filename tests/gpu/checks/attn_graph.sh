#!/usr/bin/env bash
# Decode attention captured into real torch CUDA graphs (issues 4 and 17): tests/gpu/checks/attn_graph.py
# under the shim (PONYTAIL_STATS=json, PONYTAIL_LOG=info, PONYTAIL_ATTN_MASKED=1: the default, set
# anyway so that the masked cases' mem-efficient launches are swapped whatever the caller's
# environment says) and without it. Both runs must PASS (graph output vs an fp32 reference, fresh
# inputs every replay). From the shim's exit stats it then shows whether
# torch's flash and mem-efficient launches were swapped for Ponytail's kernel or fell back (and why),
# and from each captured graph's dump which kernel the graph holds. The shim run must have swapped at
# least one launch, else FAIL "not swapped"; every masked case's graph must hold Ponytail's kernel
# under the shim, else FAIL "masked not swapped in a graph".
#
# Usage: tests/gpu/checks/attn_graph.sh      (results in $OUT, default ./gpu-out)
#   GRAPH_TIMEOUT=240   limit per python run (s)
#   CASES=b8_s4100,...  subset of attn_graph.py's cases
#   HEAD_DIM=96         head dim of every case (default 128; 80 and 96 run padded on d = 128)
#   HEAD_DIM=192 V_HEAD_DIM=128   MLA (DeepSeek-V3 under SDPA): every case on torch's mem-efficient
#                       kernel, v 128 wide (the decode kernel's d192v128, padded on d = 256)
# Summary also in $OUT/attn_graph.txt; logs, stats and per-case JSON in $OUT/attn_graph-logs.tgz.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
tmp=$(mktemp -d)
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
export PYTHONUNBUFFERED=1
t="${GRAPH_TIMEOUT:-240}"
cases=()
[ -n "${CASES:-}" ] && cases=(--cases "$CASES")
[ -n "${HEAD_DIM:-}" ] && cases+=(--head-dim "$HEAD_DIM")
[ -n "${V_HEAD_DIM:-}" ] && cases+=(--v-head-dim "$V_HEAD_DIM")

echo "== with the shim"
# env (not timeout) carries LD_PRELOAD: only python writes the stats file.
timeout -k 10 "$t" env LD_PRELOAD="$shim" PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/shim.stats.json" \
  PONYTAIL_LOG=info PONYTAIL_ATTN_MASKED=1 "$py" "$root/tests/gpu/checks/attn_graph.py" ${cases[@]+"${cases[@]}"} --json "$tmp/shim.json" \
  >"$tmp/shim.log" 2>&1
rc_shim=$?
grep -E "^(PASS|FAIL|attn_graph)" "$tmp/shim.log"
grep -E "^ponytail\[[0-9]+\]: (info|warn|error): .*(custom kernel|fallback|capture|workspace|attention)" "$tmp/shim.log" \
  | sed -E 's/^ponytail\[[0-9]+\]: //; s/_ZN13pytorch_flash//' | cut -c1-160 | sort | uniq -c | head -12
[ $rc_shim -eq 0 ] || { echo "shim run: exit $rc_shim"; grep -v "^ponytail\[" "$tmp/shim.log" | tail -8; }

# The same under PONYTAIL_TORCH_ALLOC=async: torch then allocates every tensor with
# cudaMallocAsync, so allocations made inside the capture must pass through to the driver as graph
# allocations (under the default, keep, torch's caching allocator serves the capture from its own
# private pool and need not call the driver at all).
echo "== with the shim, PONYTAIL_TORCH_ALLOC=async"
timeout -k 10 "$t" env LD_PRELOAD="$shim" PONYTAIL_TORCH_ALLOC=async PONYTAIL_STATS=json \
  PONYTAIL_STATS_FILE="$tmp/async.stats.json" "$py" "$root/tests/gpu/checks/attn_graph.py" \
  ${cases[@]+"${cases[@]}"} --json "$tmp/async.json" >"$tmp/async.log" 2>&1
rc_async=$?
grep -E "^(PASS|FAIL|attn_graph)" "$tmp/async.log"
[ $rc_async -eq 0 ] || { echo "async run: exit $rc_async"; grep -v "^ponytail\[" "$tmp/async.log" | tail -8; }

echo "== without the shim"
timeout -k 10 "$t" "$py" "$root/tests/gpu/checks/attn_graph.py" ${cases[@]+"${cases[@]}"} --json "$tmp/stock.json" \
  >"$tmp/stock.log" 2>&1
rc_stock=$?
grep -E "^(PASS|FAIL|attn_graph)" "$tmp/stock.log"
[ $rc_stock -eq 0 ] || { echo "stock run: exit $rc_stock"; tail -8 "$tmp/stock.log"; }

echo "== summary"
"$py" - "$tmp" "$rc_shim" "$rc_stock" "$out/attn_graph.txt" "$rc_async" <<'PY'
import json, os, re, sys
tmp, rc_shim, rc_stock, table_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rc_async = int(sys.argv[5])

def load(name):
    try:
        with open(os.path.join(tmp, name)) as f:
            return json.load(f)
    except Exception:
        return None

def short(name):
    m = re.match(r"_ZN\d+(\w+?)\d+(flash_fwd\w*?kernel)I", name)
    return "%s::%s" % (m.group(1), m.group(2)) if m else name[:60]

lines, bad = [], []
st, shim_res, stock_res = load("shim.stats.json"), load("shim.json"), load("stock.json")
lines.append("shim run:  %s (exit %d)" % ("PASS" if rc_shim == 0 else "FAIL", rc_shim))
lines.append("stock run: %s (exit %d)" % ("PASS" if rc_stock == 0 else "FAIL", rc_stock))
lines.append("async run: %s (exit %d)" % ("PASS" if rc_async == 0 else "FAIL", rc_async))
if rc_async:
    bad.append("async run failed")
if rc_shim:
    bad.append("shim run failed")
if rc_stock:
    bad.append("stock run failed")

swapped = 0
if st is None:
    lines.append("no shim stats (the shim run did not exit normally?)")
    bad.append("no stats")
else:
    k = st.get("kernels", {})
    flash = [e for e in k.get("hooked") or k.get("top", []) if "flash_fwd" in e.get("name", "") or "fmha_cutlassF" in e.get("name", "")]
    lines.append("%-48s %9s %11s %8s %8s %9s" % ("torch flash/mem-eff kernel (shim stats)", "launches", "action",
                                                "swapped", "skipped", "fallbacks"))
    for e in flash:
        lines.append("%-48s %9s %11s %8s %8s %9s" % (short(e["name"]), e.get("launches"), e.get("action"),
                                                    e.get("swapped", "-"), e.get("skipped", "-"),
                                                    e.get("fallbacks", "-")))
        swapped += int(e.get("swapped") or 0)
    if not flash:
        lines.append("  (no flash kernel among the %d most launched kernels)" % len(k.get("top", [])))
    reasons = k.get("fallback_reasons") or {}
    lines.append("fallback reasons: %s" % (", ".join("%s: %s" % kv for kv in reasons.items()) or "none"))
    if shim_res:
        c = shim_res.get("calls", {})
        lines.append("SDPA calls made: %s eager + %s captured = %s (each one flash launch the shim decides on)" % (
            c.get("eager"), c.get("captured"), (c.get("eager") or 0) + (c.get("captured") or 0)))
    hooks = st.get("hooks") or {}
    if hooks.get("verified"):
        lines.append("verified %s, failures %s" % (hooks.get("verified"), hooks.get("verify_failures")))
    lines.append("internal errors: %s" % st.get("internal_errors"))
for tag, s in (("default", st), ("async", load("async.stats.json"))):
    alloc = (s or {}).get("alloc") or {}
    if not alloc:
        if tag == "async":
            bad.append("no allocator stats from the async run")
        continue
    calls = s.get("calls") or {}
    begins = {k: v for k, v in calls.items() if "BeginCapture" in k and v}
    lines.append("alloc (%s): capture pass-through %s, capture-deferred frees %s; capture begins seen: %s" % (
        tag, alloc.get("capture_passthrough"), alloc.get("capture_deferred_frees"),
        ", ".join("%s %s" % kv for kv in sorted(begins.items())) or "none"))
    # Under async torch allocates inside each capture (SDPA's output) with cudaMallocAsync:
    # those must reach the driver as graph allocations, which needs the shim to have seen the
    # capture begin (it skips the capture query until then).
    if tag == "async" and not alloc.get("capture_passthrough"):
        bad.append("async: no allocation passed through during capture")

# Which kernel each captured graph holds (from the graph dumps).
for tag, res in (("shim", shim_res), ("stock", stock_res)):
    if not res:
        continue
    cells = []
    for c in res.get("cases", []):
        for i, g in enumerate(c.get("graph_kernels") or []):
            name = c["name"] + ("#%d" % i if len(c.get("graph_kernels")) > 1 else "")
            cells.append("%s %s" % (name, "ponytail %d/flash %d/mem-eff %d/nodes %d" % (
                g["ponytail"], g["flash"], g.get("mem_eff", 0), g.get("kernel_nodes", 0)) if g else "n/a"))
    if cells:
        lines.append("graphs (%s): %s" % (tag, "; ".join(cells)))
    if tag == "shim":
        in_graph = [g for c in res.get("cases", []) for g in (c.get("graph_kernels") or []) if g]
        if in_graph:
            lines.append("captured graphs running Ponytail's kernel (shim): %d of %d" % (
                sum(1 for g in in_graph if g["ponytail"] > 0), len(in_graph)))

# Swapped: counted by the shim, or seen in a captured graph (when the flash kernels are not
# among the stats' most launched kernels, the graph dumps still tell).
graph_swaps = sum(g["ponytail"] for c in (shim_res or {}).get("cases", [])
                  for g in (c.get("graph_kernels") or []) if g)
if st is not None and swapped == 0 and graph_swaps == 0:
    bad.append("not swapped")
# Masked decode (issue 17) in a graph: each masked case's graph holds Ponytail's kernel.
# Without graph dumps (torch wrote none), the shim's counts must say it instead: every launch of
# torch's mem-efficient kernel swapped, the captured ones included (only masked cases take it).
masked_cases = [c for c in (shim_res or {}).get("cases", []) if c["name"].startswith("masked")]
for c in masked_cases:
    dumps = [g for g in (c.get("graph_kernels") or []) if g]
    if dumps and not any(g["ponytail"] > 0 for g in dumps):
        bad.append("masked not swapped in a graph (%s)" % c["name"])
if st is not None and masked_cases and not all(any(g for g in (c.get("graph_kernels") or [])) for c in masked_cases):
    mem_eff = [e for e in flash if "fmha_cutlassF" in e.get("name", "")]
    n = sum(int(e.get("launches") or 0) for e in mem_eff)
    sw = sum(int(e.get("swapped") or 0) for e in mem_eff)
    lines.append("masked cases without graph dumps: mem-efficient launches %d, swapped %d" % (n, sw))
    if n == 0 or sw != n:
        bad.append("masked launches not all swapped (%d of %d; captured ones among them)" % (sw, n))
lines.append("attn_graph: %s" % ("PASS" if not bad else "FAIL: " + "; ".join(bad)))
text = "\n".join(lines)
print(text)
with open(table_path, "w") as f:
    f.write(text + "\n")
sys.exit(1 if bad else 0)
PY
rc=$?
tar czf "$out/attn_graph-logs.tgz" -C "$tmp" . 2>/dev/null
exit $rc
