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
# LOCKSTEP=1: the two processes take turns instead, one decode step each (generate.py --lockstep,
# examples/lockstep.py), each timing its own turns only: both runs' steps see the same tens of
# milliseconds of machine conditions, and neither contends with the other. Which process goes
# first alternates every round; with PIN=1 both run on the one CPU PIN_CPUS (default 2). Each
# round also prints the median over steps of the paired step ratio (step i of B over step i of A).
# FIXED_LAYOUT=1: both processes of a round start without address-space randomisation (setarch -R)
# and with the same PYTHONHASHSEED (the round's number), so that A/A rounds compare processes laid
# out alike: a process's layout (heap and library addresses, hash order) can make its Python loop
# persistently a few percent faster or slower, which no pairing in time removes.
# Every run's JSON (and the shim's stats) is kept in $OUT/runs.tgz.
# ARM_B=async: the B arm is torch's own backend:cudaMallocAsync without Ponytail (what
# PONYTAIL_TORCH_ALLOC=async switches torch to), to split the shim's cost from the backend's. The
# shim arm runs the shim's defaults (PONYTAIL_TORCH_ALLOC=keep since the eighth session); add
# SHIM_ENV=PONYTAIL_TORCH_ALLOC=async for the pool under every tensor.
# ARM_A=off: the A arm (and both arms of the control rounds) is the shim loaded but switched off
# (PONYTAIL_ENABLE=0: every call passes straight through), so both processes map the same
# libraries at the same addresses under FIXED_LAYOUT and the ratio is the shim's work alone, not
# the layout change that preloading any library makes. ARM_B=off with the default A (stock)
# measures that layout change plus bare interposition.
# Shim runs use PONYTAIL_ATTN=off (only the allocator differs) and, like stock, flash SDPA.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
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
norand=""
if [ "${FIXED_LAYOUT:-0}" = 1 ]; then
  if setarch "$(uname -m)" -R true 2>/dev/null; then norand="setarch $(uname -m) -R"
  else echo "wall_pair: setarch -R refused here: layouts stay randomised (hash seed fixed)"; fi
fi
cpus=("0-$(( half - 1 ))" "$half-$(( ncpu - 1 ))")
echo "wall_pair: B=${B:-32} P=${P:-2048} N=${N:-1024}; GPUs $gpus; CPUs $ncpu$([ "${PIN:-0}" = 1 ] && echo ", pinned halves")$([ "${LOCKSTEP:-0}" = 1 ] && echo ", lockstep")$([ "${FIXED_LAYOUT:-0}" = 1 ] && echo ", fixed layout${norand:+ (no ASLR)}"); shim: PONYTAIL_ATTN=off ${SHIM_ENV:-}" | tee "$table"
run_one() { # kind tag barrier-dir gpu lockstep-role round
  local e=(env -u PYTORCH_CUDA_ALLOC_CONF TORCH_CUDNN_SDPA_DEPRIORITIZED=1)
  [ "$gpus" = 2 ] && e+=(CUDA_VISIBLE_DEVICES="$4")
  local sync=(--barrier "$3:2") cpuset="${cpus[$4]}"
  [ "${LOCKSTEP:-0}" = 1 ] && sync=(--lockstep "$3:$5") cpuset="${PIN_CPUS:-2}"
  [ "${FIXED_LAYOUT:-0}" = 1 ] && e+=(PYTHONHASHSEED="$6") && [ -n "$norand" ] && e=($norand "${e[@]}")
  [ "${PIN:-0}" = 1 ] && e=(taskset -c "$cpuset" "${e[@]}")
  # Stats are written at exit only: they cost the measured call nothing.
  [ "$1" = async ] && e+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)
  [ "$1" = shim ] && e+=(LD_PRELOAD="$shim" PONYTAIL_ATTN=off PONYTAIL_STATS=json
                         PONYTAIL_STATS_FILE="$tmp/$2.stats.json" ${SHIM_ENV:-})
  [ "$1" = off ] && e+=(LD_PRELOAD="$shim" PONYTAIL_ENABLE=0)
  "${e[@]}" "${gen[@]}" "${sync[@]}" --json "$tmp/$2.json" >"$tmp/$2.log" 2>&1 || echo "$2: exit $?"
}
pair() { # round kindA kindB
  local r=$1 a=$2 b=$3 bar="$tmp/bar-$1" ga=$(( $1 % 2 )) gb=$(( 1 - $1 % 2 ))
  # Alternate which process starts first (and, with two GPUs, which GPU each gets), so that
  # neither start-up order nor a GPU is on one side.
  # Under LOCKSTEP the process started first also takes the first turn (role 0).
  if [ $(( r % 2 )) -eq 0 ]; then run_one "$a" "$r-A" "$bar" $ga 0 $r & sleep 0.2; run_one "$b" "$r-B" "$bar" $gb 1 $r & wait
  else run_one "$b" "$r-B" "$bar" $gb 0 $r & sleep 0.2; run_one "$a" "$r-A" "$bar" $ga 1 $r & wait; fi
  (cd "$tmp" && tar czf "$out/runs.tgz" ./*.json 2>/dev/null)
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
    la, lb = a.get("lockstep"), b.get("lockstep")
    if la and lb:
        import statistics
        ta, tb = la["turn_ms"], lb["turn_ms"]
        n = min(len(ta), len(tb))
        steps = [tb[i] / ta[i] for i in range(1, n - 1) if ta[i] > 0]  # decode turns, paired
        print("          lockstep turns %d %d, paired step ratio median %.3f, prefill ratio %.3f%s"
              % (len(ta), len(tb), statistics.median(steps) if steps else float("nan"),
                 b["prefill_s"] / a["prefill_s"],
                 "" if len(ta) == len(tb) and (la["alone_from"] or n) >= n - 1 and (lb["alone_from"] or n) >= n - 1
                 else "   BROKEN: %s" % (la["alone"] or lb["alone"])))
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
    pair $r "${ARM_A:-stock}" "${ARM_A:-stock}"; aa_done=$((aa_done + 1))
  else pair $r "${ARM_A:-stock}" "${ARM_B:-shim}"; ab_done=$((ab_done + 1)); fi
done
python3 - "$table" <<'PY' | tee -a "$table"
import re, statistics, sys
import collections
rows, cpu, paired = (collections.defaultdict(list) for _ in range(3))
kind = None
for l in open(sys.argv[1]):
    m = re.match(r"round \S+\s+(\w+)\s*/(\w+)\s+total .* ratio ([\d.]+)\s+decode .* ratio ([\d.]+)", l)
    if m:
        kind = (m.group(1), m.group(2))
        rows[kind].append((float(m.group(3)), float(m.group(4))))
    m = re.match(r"\s+main-thread cpu .* ratio ([\d.]+)", l)
    if m and kind:
        cpu[kind].append(float(m.group(1)))
    m = re.match(r"\s+lockstep .* paired step ratio median ([\d.]+)", l)
    if m and kind and "BROKEN" not in l:
        paired[kind].append(float(m.group(1)))
for k in sorted(rows, key=lambda k: k[0] != k[1]):
    name = "%s %s/%s" % ("A/A" if k[0] == k[1] else "A/B", k[0], k[1])
    v = rows[k]
    if v:
        t = [x[0] for x in v]; p = [x[1] for x in v]
        print("%-16s %d rounds: total ratio median %.3f (min %.3f max %.3f), decode p50 ratio median %.3f"
              % (name, len(v), statistics.median(t), min(t), max(t), statistics.median(p)))
    for what, c in (("paired step ratio", paired[k]), ("main-thread CPU ratio", cpu[k])):
        if c:
            print("%-16s %s median %.3f (min %.3f max %.3f)" % ("", what, statistics.median(c), min(c), max(c)))
PY
