#!/usr/bin/env bash
# Wall time, paired: stock torch and the shim run examples/generate.py AT THE SAME TIME on the one
# GPU (generate.py --barrier starts both measured generate() calls together), so that both see
# the same CPU conditions; sequential rounds on this machine drift by +-30% between runs, which
# no affordable number of rounds averages down to the 3% the issue asks about. Control rounds run
# stock against stock (A/A): their ratio is the method's own bias and spread. Each decode step
# also waits for the other process's kernels on the shared GPU, which dilutes a difference; the
# GPU is busy ~25% of a step per process here, so the dilution is small.
# GPUS=2 (machines with two GPUs) gives each process a GPU of its own, swapped every round, so
# neither waits for the other's kernels; both still share the host's CPUs and memory bandwidth.
#   B=32 P=2048 N=1024 ROUNDS=4 AA_ROUNDS=2 GPUS=1 DEADLINE=s SHIM_ENV="K=V ..." ($OUT/wall_pair.txt)
# DEADLINE: no round starts after that many seconds of the script (default: no limit).
# PIN=1 binds each process to its own half of the CPUs (taskset), swapped with the GPUs every
# round, so the two do not migrate onto each other's cores.
# Shim runs use PONYTAIL_ATTN=off (only the allocator differs) and, like stock, flash SDPA.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen=(python3 "$root/examples/generate.py" --batch "${B:-32}" --prompt "${P:-2048}" --new-tokens "${N:-1024}" --warmup)
table="$out/wall_pair.txt"
gpus=${GPUS:-1}
if [ "$gpus" = 2 ] && [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -lt 2 ]; then
  echo "wall_pair: GPUS=2 needs two GPUs; running both on one"; gpus=1
fi
ncpu=$(nproc); half=$(( ncpu / 2 ))
cpus=("0-$(( half - 1 ))" "$half-$(( ncpu - 1 ))")
echo "wall_pair: B=${B:-32} P=${P:-2048} N=${N:-1024}; GPUs $gpus; CPUs $ncpu$([ "${PIN:-0}" = 1 ] && echo ", pinned halves"); shim: PONYTAIL_ATTN=off ${SHIM_ENV:-}" | tee "$table"
run_one() { # kind tag barrier gpu
  local e=(env -u PYTORCH_CUDA_ALLOC_CONF TORCH_CUDNN_SDPA_DEPRIORITIZED=1)
  [ "$gpus" = 2 ] && e+=(CUDA_VISIBLE_DEVICES="$4")
  [ "${PIN:-0}" = 1 ] && e=(taskset -c "${cpus[$4]}" "${e[@]}")
  # Stats are written at exit only: they cost the measured call nothing.
  [ "$1" = shim ] && e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_STATS=json
                         PONYTAIL_STATS_FILE="$tmp/$2.stats.json" ${SHIM_ENV:-})
  "${e[@]}" "${gen[@]}" --barrier "$3:2" --json "$tmp/$2.json" >"$tmp/$2.log" 2>&1 || echo "$2: exit $?"
}
pair() { # round kindA kindB
  local r=$1 a=$2 b=$3 bar="$tmp/bar-$1" ga=$(( $1 % 2 )) gb=$(( 1 - $1 % 2 ))
  # Alternate which process starts first (and, with two GPUs, which GPU each gets), so that
  # neither start-up order nor a GPU is on one side.
  if [ $(( r % 2 )) -eq 0 ]; then run_one "$a" "$r-A" "$bar" $ga & sleep 0.2; run_one "$b" "$r-B" "$bar" $gb & wait
  else run_one "$b" "$r-B" "$bar" $gb & sleep 0.2; run_one "$a" "$r-A" "$bar" $ga & wait; fi
  python3 - "$tmp/$r-A.json" "$tmp/$r-B.json" "$r" "$a" "$b" "$tmp/$r-B.stats.json" <<'PY' | tee -a "$table"
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    pa, pb = a["decode_step_ms"]["p50"], b["decode_step_ms"]["p50"]
    print("round %-3s %-5s/%-5s total %6.2f %6.2f s ratio %.3f   decode p50 %6.2f %6.2f ms ratio %.3f   tokens %s"
          % (sys.argv[3], sys.argv[5], sys.argv[4], a["total_s"], b["total_s"], b["total_s"] / a["total_s"],
             pa, pb, pb / pa, "same" if a.get("token_ids_sha256") == b.get("token_ids_sha256") else "DIFFER"))
    print("          prefill %.3f %.3f s   decode p99 %.2f %.2f ms"
          % (a["prefill_s"], b["prefill_s"], a["decode_step_ms"]["p99"], b["decode_step_ms"]["p99"]))
    if a.get("main_thread_cpu_s") and b.get("main_thread_cpu_s"):
        print("          main-thread cpu %6.2f %6.2f s ratio %.3f   preemptions %d %d"
              % (a["main_thread_cpu_s"], b["main_thread_cpu_s"], b["main_thread_cpu_s"] / a["main_thread_cpu_s"],
                 a["involuntary_switches"], b["involuntary_switches"]))
except Exception as e:
    print("round %s: no result (%s)" % (sys.argv[3], e))
try:  # the shim run's pool: what it did outside the median step
    x = json.load(open(sys.argv[6]))["alloc"]
    print("          pool: grows %s trims %s stitches %s syncs %s, map %.0f ms, wait %.0f ms, pooled %s, pass-through %s"
          % (x.get("grows"), x.get("trims"), x.get("stitches"), x.get("syncs"), x.get("map_ns", 0) / 1e6,
             x.get("wait_ns", 0) / 1e6, x.get("pooled_allocs"), x.get("passthrough_allocs")))
except Exception:
    pass
PY
}
r=0
late() { [ -n "${DEADLINE:-}" ] && [ "$SECONDS" -ge "$DEADLINE" ] && echo "deadline: no more rounds" | tee -a "$table"; }
# Control rounds spread among the A/B rounds in proportion (first round A/A), so that a deadline
# or a drifting machine cuts both kinds alike.
aa=${AA_ROUNDS:-2} ab=${ROUNDS:-4} aa_done=0 ab_done=0
while [ $(( aa_done + ab_done )) -lt $(( aa + ab )) ]; do
  late && break; r=$((r + 1))
  if [ $aa_done -lt $aa ] && { [ $ab_done -ge $ab ] || [ $(( aa_done * ab )) -le $(( ab_done * aa )) ]; }; then
    pair $r stock stock; aa_done=$((aa_done + 1))
  else pair $r stock shim; ab_done=$((ab_done + 1)); fi
done
python3 - "$table" <<'PY' | tee -a "$table"
import re, statistics, sys
rows = {"stock": [], "shim": []}
cpu = {"stock": [], "shim": []}
kind = None
for l in open(sys.argv[1]):
    m = re.match(r"round \S+\s+(\w+)\s*/(\w+)\s+total .* ratio ([\d.]+)\s+decode .* ratio ([\d.]+)", l)
    if m:
        kind = m.group(1)
        rows[kind].append((float(m.group(3)), float(m.group(4))))
    m = re.match(r"\s+main-thread cpu .* ratio ([\d.]+)", l)
    if m and kind:
        cpu[kind].append(float(m.group(1)))
for k, name in (("stock", "A/A stock/stock"), ("shim", "A/B shim/stock")):
    v = rows[k]
    if v:
        t = [x[0] for x in v]; p = [x[1] for x in v]
        print("%-16s %d rounds: total ratio median %.3f (min %.3f max %.3f), decode p50 ratio median %.3f"
              % (name, len(v), statistics.median(t), min(t), max(t), statistics.median(p)))
    c = cpu[k]
    if c:
        print("%-16s main-thread CPU ratio median %.3f (min %.3f max %.3f)" % ("", statistics.median(c), min(c), max(c)))
PY
