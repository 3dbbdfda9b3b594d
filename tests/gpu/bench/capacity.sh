#!/usr/bin/env bash
# Capacity under a 24 GiB cap (issue 3): the largest batch that finishes prompt 2048 + 2048 new
# tokens of workload W, stock torch (caching allocator capped with
# set_per_process_memory_fraction, flash SDPA) against the shim (PONYTAIL_MEM_LIMIT, its defaults
# otherwise: torch's cudaMallocAsync backend into the pool, attention swap on).
#
# The probes run at the same time on the one GPU: each process is capped at 24 GiB, so five fit
# in the H200's 139 GiB, and HF decode is CPU-bound, so they overlap well. A probe still running
# after CAP_TIMEOUT seconds is stopped (SIGTERM: generate.py writes how far it got) and reported as
# "timeout", neither pass nor fail.
#
# Usage: tests/gpu/bench/capacity.sh        (results in $OUT, default ./gpu-out)
#   PROBES="stock:120 stock:128 shim:128 shim:136 shim:144"   config:batch list (the default)
#   CAP=24G  P=2048  N=2048                                    the cap and the workload
#   CAP_TIMEOUT=520   per-probe wall-clock limit (s), lowered so that the whole script ends
#   CAP_BUDGET=570    seconds after the script's start (build included)
# Prints one row per probe and the largest finished batch per config; the table is also in
# $OUT/capacity.txt, every log, result and stats JSON in $OUT/capacity-logs.tgz.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
tmp=$(mktemp -d)
py="${PYTHON:-python3}"
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen="$root/examples/generate.py"
cap="${CAP:-24G}"
read -r -a probes <<<"${PROBES:-stock:120 stock:128 shim:128 shim:136 shim:144}"
export PYTHONUNBUFFERED=1

limit="${CAP_TIMEOUT:-520}"
left=$(( ${CAP_BUDGET:-570} - SECONDS - 20 ))  # 20 s: SIGTERM grace, table, archive
if [ "$left" -lt 60 ]; then
  echo "capacity: only ${left} s left after the build; run again (the build is cached)"; exit 1
fi
[ "$limit" -gt "$left" ] && limit=$left
echo "capacity: ${#probes[@]} probes at once, cap $cap, prompt ${P:-2048} + ${N:-2048} new tokens, timeout ${limit} s"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

exec 3>&1
probe() { # name config batch
  local name=$1 cfg=$2 b=$3 rc t0
  local args=("$gen" --prompt "${P:-2048}" --new-tokens "${N:-2048}" --batch "$b" --json "$tmp/$name.json")
  t0=$(date +%s.%N)
  # timeout runs env, which sets the environment and execs python: neither timeout nor env
  # carries the shim, so only python writes the stats file.
  case $cfg in
    stock)
      timeout -k 15 "$limit" env -u PYTORCH_CUDA_ALLOC_CONF TORCH_CUDNN_SDPA_DEPRIORITIZED=1 \
        "$py" "${args[@]}" --mem-cap "$cap" ;;
    shim)
      timeout -k 15 "$limit" env -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$shim" PONYTAIL_MEM_LIMIT="$cap" \
        PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/$name.stats.json" "$py" "${args[@]}" ;;
    *) echo "unknown config $cfg (stock|shim)"; false ;;
  esac
  rc=$?
  echo "$rc $(date +%s.%N) $t0" >"$tmp/$name.rc"
  echo "  probe $name ended: rc $rc after $(( ${SECONDS} - start_s )) s" >&3
}

start_s=$SECONDS
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 1000 >"$tmp/nvidia-smi.csv" 2>/dev/null &
smi=$!
pids=() names=()
for pr in "${probes[@]}"; do
  cfg=${pr%%:*} b=${pr##*:} name="${pr%%:*}-${pr##*:}"
  k=2; while [[ " ${names[*]-} " == *" $name "* ]]; do name="${cfg}-${b}.$k"; k=$((k + 1)); done
  names+=("$name")
  probe "$name" "$cfg" "$b" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null

"$py" - "$tmp" "$out/capacity.txt" "${names[@]}" <<'PY'
import json, os, sys
tmp, table_path, names = sys.argv[1], sys.argv[2], sys.argv[3:]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None

def tail(path, n=1):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip()]
        return " | ".join(lines[-n:])[:200]
    except OSError:
        return ""

mib = lambda b: "%.0f" % (b / 2**20) if isinstance(b, (int, float)) else "-"
lines, best, worst = [], {}, {}
hdr = "%-10s %6s  %-26s %7s %12s %12s %19s %10s" % (
    "config", "batch", "result", "seconds", "reserved_MiB", "alloc_MiB", "phys/req_MiB", "limit_rej")
lines.append(hdr)
notes = []
peak_dev = None
try:
    for l in open(os.path.join(tmp, "nvidia-smi.csv")):
        v = l.split(",")[-1].strip().split()[0]
        peak_dev = max(peak_dev or 0, int(v))
except Exception:
    pass
for name in names:
    cfg, b = name.split("-")[0], int(name.split("-")[1].split(".")[0])
    r = load(os.path.join(tmp, name + ".json"))
    st = load(os.path.join(tmp, name + ".stats.json")) if cfg == "shim" else None
    try:
        rc, t1, t0 = open(os.path.join(tmp, name + ".rc")).read().split()
        rc, secs = int(rc), float(t1) - float(t0)
    except Exception:
        rc, secs = None, None
    if rc in (124, 137):
        res = "timeout"
        if r and r.get("interrupted"):
            res += " (%s, %d tok)" % (r.get("phase"), r.get("decode_steps_done") or 0)
    elif rc == 0 and r and r.get("oom") is False:
        res = "finished"
        if b > best.get(cfg, 0):
            best[cfg] = b
    elif rc == 3 and r and r.get("oom"):
        res = "OOM %s" % r.get("oom_phase")
        if cfg not in worst or b < worst[cfg]:
            worst[cfg] = b
    else:
        res = "error rc %s" % rc
        notes.append("  %s: %s" % (name, tail(os.path.join(tmp, name + ".log"))))
    pl, rej = "-", "-"
    if st and isinstance(st.get("alloc"), dict):
        a = st["alloc"]
        pl = "%s/%s" % (mib(a.get("peak_physical_bytes")), mib(a.get("peak_requested_bytes", a.get("peak_live_bytes"))))
        rej = str(a.get("limit_rejections", "-"))
    elif cfg == "shim":
        pl = "no stats"
    lines.append("%-10s %6d  %-26s %7s %12s %12s %19s %10s" % (
        cfg, b, res, "%.0f" % secs if secs is not None else "-",
        mib((r or {}).get("peak_reserved_bytes")), mib((r or {}).get("peak_allocated_bytes")), pl, rej))
lines += notes
lines.append("")
for cfg in dict.fromkeys(n.split("-")[0] for n in names):
    lines.append("%-6s largest batch finished: %s%s" % (
        cfg, best.get(cfg, "none"),
        ("; smallest OOM: %d" % worst[cfg]) if cfg in worst else ""))
if "stock" in best and "shim" in best:
    lines.append("shim / stock: %.3fx" % (best["shim"] / best["stock"]))
if peak_dev is not None:
    lines.append("device memory used, all probes together (nvidia-smi peak): %d MiB" % peak_dev)
text = "\n".join(lines)
print(text)
with open(table_path, "w") as f:
    f.write(text + "\n")
PY
tar czf "$out/capacity-logs.tgz" -C "$tmp" . 2>/dev/null
