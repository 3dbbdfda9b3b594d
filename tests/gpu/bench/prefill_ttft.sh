#!/usr/bin/env bash
# Time to first token and decode step, stock against the shim, in one device call
# (issue 18's method: warm process, each row's shapes generated twice first, TTFT = median of
# REPS generate() calls of one token with a synchronize at the first logits; decode step p50 of
# one generate() of NEW tokens). Arms, each a fresh process, in the order A B C A B C:
#   stock   torch as installed (cuDNN for prefill and decode on the H200)
#   auto    the shim's default: SDPA per call (decode flash -> Ponytail's decode kernel; prefill
#           flash -> Ponytail's prefill kernel where it applies, else cuDNN)
#   auto0   the shim with PONYTAIL_ATTN_PREFILL=0: prefill on cuDNN, decode as auto
#   flash   the shim with PONYTAIL_TORCH_SDPA=flash PONYTAIL_ATTN_PREFILL=0 (the earlier global
#           policy: prefill on torch's flash kernel)
#   flashpf the shim with PONYTAIL_TORCH_SDPA=flash: prefill on torch's flash path, its launches
#           swapped for Ponytail's prefill kernel (issue 18)
#   autopf  the shim with PONYTAIL_ATTN_PREFILL=1 set explicitly (the default's value)
# Prints a table last: per row, each arm's TTFT and step (median over its rounds) and the
# ratios against stock; plus the shim's pool host waits (syncs, wait ms) per arm.
#   ROWS=8x4096,2x32768,1x65536 ROUNDS=2 REPS=3 NEW=32 bash tests/gpu/bench/prefill_ttft.sh
# PROFILE=1: each row also runs one generate() of one token under torch.profiler, and a second
# table gives its GPU kernel time by class (attention, GEMM, other) per arm.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$out"
rows="${ROWS:-8x4096,2x32768,1x65536}"
arms="${ARMS:-stock auto auto0}"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for arm in $arms; do
    e=(env)
    case $arm in
      stock) ;;
      auto) e+=(LD_PRELOAD="$shim") ;;
      auto0) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN_PREFILL=0) ;;
      flash) e+=(LD_PRELOAD="$shim" PONYTAIL_TORCH_SDPA=flash PONYTAIL_ATTN_PREFILL=0) ;;
      flashpf) e+=(LD_PRELOAD="$shim" PONYTAIL_TORCH_SDPA=flash PONYTAIL_ATTN_PREFILL=1) ;;
      autopf) e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN_PREFILL=1) ;;
      *) echo "unknown arm $arm"; continue ;;
    esac
    [ "$arm" = stock ] || e+=(PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$out/ttft-$arm-$r.stats.json")
    echo "== round $r, $arm"
    timeout -k 5 "${ARM_TIMEOUT:-240}" "${e[@]}" "$py" "$root/tests/gpu/bench/ttft.py" --rows "$rows" \
      --reps "${REPS:-3}" --new-tokens "${NEW:-32}" --json "$out/ttft-$arm-$r.json" \
      ${PROFILE:+--profile} 2>&1 | grep -E "^ttft|^profile|Error|error" | head -12
  done
done
"$py" - "$out" "$arms" <<'PY'
import glob, json, os, statistics, sys
out, arms = sys.argv[1], sys.argv[2].split()
data, prof = {}, {}
for arm in arms:
    for f in sorted(glob.glob(os.path.join(out, "ttft-%s-*.json" % arm))):
        if f.endswith(".stats.json"):
            continue
        for r in json.load(open(f))["rows"]:
            d = data.setdefault((r["batch"], r["prompt"]), {}).setdefault(arm, dict(ttft=[], step=[]))
            d["ttft"].append(r["ttft_median_s"]); d["step"].append(r["step_p50_ms"])
            if r.get("profile"):
                prof.setdefault((r["batch"], r["prompt"]), {}).setdefault(arm, []).append(r["profile"])
hdr = "| B x P | " + " | ".join("%s TTFT s" % a for a in arms) + " | " + " | ".join(
    "%s/stock" % a for a in arms if a != "stock") + " | " + " | ".join("%s step ms" % a for a in arms) + " |"
print(hdr); print("|" + "---|" * (hdr.count("|") - 1))
for key in sorted(data):
    d = data[key]
    med = {a: (statistics.median(d[a]["ttft"]) if a in d else None) for a in arms}
    stp = {a: (statistics.median(d[a]["step"]) if a in d else None) for a in arms}
    f = lambda x, fmt: fmt % x if x is not None else "-"
    ratios = [f(med[a] / med["stock"], "%.3f") if med.get(a) and med.get("stock") else "-" for a in arms if a != "stock"]
    print("| %d x %d | %s | %s | %s |" % (key[0], key[1], " | ".join(f(med[a], "%.4f") + (" (%s)" % ", ".join("%.4f" % x for x in d[a]["ttft"]) if a in d else "") for a in arms),
          " | ".join(ratios), " | ".join(f(stp[a], "%.2f") for a in arms)))
if prof:
    print("\nGPU kernel time of one generate() of one token (torch.profiler; median over rounds), ms:")
    print("| B x P | arm | TTFT s | kernels | attention | gemm | other | attention share |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(prof):
        for arm in arms:
            ps = prof[key].get(arm)
            if not ps:
                continue
            m = lambda k: statistics.median(p[k] for p in ps)
            print("| %d x %d | %s | %.4f | %.1f | %.1f | %.1f | %.1f | %.2f |" % (
                key[0], key[1], arm, m("ttft_s"), m("total_ms"), m("attention_ms"), m("gemm_ms"),
                m("other_ms"), m("attention_ms") / m("total_ms")))
for arm in arms:
    for f in sorted(glob.glob(os.path.join(out, "ttft-%s-*.stats.json" % arm))):
        s = json.load(open(f)); al = s.get("alloc") or {}; sp = s.get("sdpa_policy") or {}
        sw = sum(t.get("swapped", 0) for t in (s.get("kernels") or {}).get("hooked") or [] if "flash_fwd" in t.get("name", ""))
        print("%s %s: pool syncs %s, host wait %.0f ms, grows %s; flash launches swapped %d; sdpa %s" % (
              arm, os.path.basename(f), al.get("syncs"), (al.get("wait_ns") or 0) / 1e6, al.get("grows"), sw,
              json.dumps(sp)))
PY
