#!/usr/bin/env bash
# Device calls for issue 3's GPU measurements (each fits one 600 s call):
#   tests/gpu/bench/alloc_suite.sh stress-capacity   allocator stress (tests/gpu/checks/alloc_stress.sh), then
#                                             the 24 GiB capacity probes (tests/gpu/bench/capacity.sh)
#   tests/gpu/bench/alloc_suite.sh wall              interleaved wall-time A/B (tests/gpu/bench/wall_ab.sh)
#   tests/gpu/bench/alloc_suite.sh diag              VMM call costs by handle size (tests/gpu/bench/vmm_cost.c),
#                                             then the wall-time split (tests/gpu/bench/wall_diag.sh)
#   tests/gpu/bench/alloc_suite.sh hot-stress        host cost per allocation (tests/gpu/bench/hot_cost.sh), then
#                                             the allocator stress (tests/gpu/checks/alloc_stress.sh)
#   tests/gpu/bench/alloc_suite.sh hot-wall          host cost per allocation, then the wall-time A/B
#   tests/gpu/bench/alloc_suite.sh hot-pair          host cost per allocation, then the paired wall time
#                                             (tests/gpu/bench/wall_pair.sh: stock and shim at once)
#   tests/gpu/bench/alloc_suite.sh lockstep-trace    the paired wall time, taking turns a step each
#                                             (tests/gpu/bench/wall_pair.sh LOCKSTEP=1), then the pool's
#                                             trace and per-phase stats (tests/gpu/bench/pool_trace.sh)
#   tests/gpu/bench/alloc_suite.sh final             the turn-taking A/B with fixed layouts, pinned: one A/A
#                                             round (256 tokens), the shim against stock, torch's
#                                             async backend alone against stock (ARM_B=async), the
#                                             shim with PONYTAIL_TORCH_ALLOC=keep; after the shim's
#                                             rounds, tests/gpu/checks/attn_graph.sh (captures under it)
#   tests/gpu/bench/alloc_suite.sh control           as final, but the A arm is the shim loaded and switched
#                                             off (wall_pair.sh ARM_A=off: same libraries, same
#                                             layout): one A/A round (256 tokens), the shim, the
#                                             shim with keep; then the switched-off shim against
#                                             stock (what loading it alone does to the layout)
#   tests/gpu/bench/alloc_suite.sh split             the allocator stress, then against the switched-off shim:
#                                             the shim with keep and PONYTAIL_POOL=0 (no pool, only
#                                             the interception of launches and calls), and an A/A
#                                             round of the whole length
#   tests/gpu/bench/alloc_suite.sh counters          against the switched-off shim: the shim (defaults), then
#                                             the shim with keep and PONYTAIL_POOL=0 (after the
#                                             per-thread counters, shim/counters.c)
# Results: $OUT/issue3-<what>.tgz and the tables on stdout.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
top="${OUT:-$root/gpu-out}"; what="${1:-stress-capacity}"; w="$top/issue3-$what"; mkdir -p "$w"
. "$root/tests/gpu/build.sh"
step() { pt_gpu_step "$w" "$@"; }
# The turn-taking method of bench/records/2026-11-29-wall-time-taking-turns.md (wall_pair.sh),
# and the same against the switched-off shim.
ls_env=(env LOCKSTEP=1 PIN=1 FIXED_LAYOUT=1)
off_env=("${ls_env[@]}" ARM_A=off)
case $what in
  stress-capacity)
    step stress 150 bash "$root/tests/gpu/checks/alloc_stress.sh"
    step capacity $(( 585 - SECONDS )) env CAP_BUDGET=$(( 570 - SECONDS )) bash "$root/tests/gpu/bench/capacity.sh"
    names="stress capacity" ;;
  wall)
    step wall 580 bash "$root/tests/gpu/bench/wall_ab.sh"
    names="wall" ;;
  diag)
    cuda="$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")"
    step vmm 60 bash -c "cc -O2 -I'$root' -I'$cuda/include' '$root/tests/gpu/bench/vmm_cost.c' -o /tmp/pt_vmm_cost \
      -L'$cuda/lib64/stubs' -lcuda && /tmp/pt_vmm_cost 5"
    step diag $(( 585 - SECONDS )) bash "$root/tests/gpu/bench/wall_diag.sh"
    names="vmm diag" ;;
  hot-stress)
    step hot 300 bash "$root/tests/gpu/bench/hot_cost.sh"
    step stress $(( 585 - SECONDS )) bash "$root/tests/gpu/checks/alloc_stress.sh"
    names="hot stress" ;;
  hot-wall)
    step hot 200 bash "$root/tests/gpu/bench/hot_cost.sh"
    step wall $(( 585 - SECONDS )) env WALL_TIMEOUT=$(( 570 - SECONDS )) bash "$root/tests/gpu/bench/wall_ab.sh"
    names="hot wall" ;;
  hot-pair)
    step hot 240 bash "$root/tests/gpu/bench/hot_cost.sh"
    step pair $(( 585 - SECONDS )) bash "$root/tests/gpu/bench/wall_pair.sh"
    names="hot pair" ;;
  lockstep-trace)
    step pair $(( ${PAIR_S:-450} - SECONDS )) env LOCKSTEP=1 DEADLINE=$(( ${PAIR_S:-450} - 70 - SECONDS )) \
      bash "$root/tests/gpu/bench/wall_pair.sh"
    step trace $(( 585 - SECONDS )) env OUT="$top" bash "$root/tests/gpu/bench/pool_trace.sh"
    names="pair trace" ;;
  final)
    step aa 140 "${ls_env[@]}" N=256 AA_ROUNDS=1 ROUNDS=0 bash "$root/tests/gpu/bench/wall_pair.sh"
    step shim 170 "${ls_env[@]}" AA_ROUNDS=0 ROUNDS=3 DEADLINE=110 bash "$root/tests/gpu/bench/wall_pair.sh"
    step graph 130 env CASES=b8_s4100,fresh_stream GRAPH_TIMEOUT=55 bash "$root/tests/gpu/checks/attn_graph.sh"
    step async 110 "${ls_env[@]}" AA_ROUNDS=0 ROUNDS=2 ARM_B=async DEADLINE=55 bash "$root/tests/gpu/bench/wall_pair.sh"
    step keep $(( 580 - SECONDS )) "${ls_env[@]}" AA_ROUNDS=0 ROUNDS=2 SHIM_ENV=PONYTAIL_TORCH_ALLOC=keep \
      DEADLINE=$(( 530 - SECONDS )) bash "$root/tests/gpu/bench/wall_pair.sh"
    names="aa shim graph async keep" ;;
  control)
    step aa 100 "${off_env[@]}" N=256 AA_ROUNDS=1 ROUNDS=0 bash "$root/tests/gpu/bench/wall_pair.sh"
    step shim 240 "${off_env[@]}" AA_ROUNDS=0 ROUNDS=3 DEADLINE=170 bash "$root/tests/gpu/bench/wall_pair.sh"
    step keep 160 "${off_env[@]}" AA_ROUNDS=0 ROUNDS=2 SHIM_ENV=PONYTAIL_TORCH_ALLOC=keep DEADLINE=85 \
      bash "$root/tests/gpu/bench/wall_pair.sh"
    step layout $(( 580 - SECONDS )) "${ls_env[@]}" ARM_B=off AA_ROUNDS=0 ROUNDS=2 \
      DEADLINE=$(( 520 - SECONDS )) bash "$root/tests/gpu/bench/wall_pair.sh"
    names="aa shim keep layout" ;;
  split)
    step stress 150 bash "$root/tests/gpu/checks/alloc_stress.sh"
    step nopool 170 "${off_env[@]}" AA_ROUNDS=0 ROUNDS=2 DEADLINE=90 \
      SHIM_ENV="PONYTAIL_TORCH_ALLOC=keep PONYTAIL_POOL=0" bash "$root/tests/gpu/bench/wall_pair.sh"
    step aa $(( 560 - SECONDS )) "${off_env[@]}" AA_ROUNDS=1 ROUNDS=0 bash "$root/tests/gpu/bench/wall_pair.sh"
    names="stress nopool aa" ;;
  counters)
    step shim 250 "${off_env[@]}" AA_ROUNDS=0 ROUNDS=3 DEADLINE=165 bash "$root/tests/gpu/bench/wall_pair.sh"
    step nopool $(( ${LIMIT_S:-410} - SECONDS )) "${off_env[@]}" AA_ROUNDS=0 ROUNDS=2 \
      DEADLINE=$(( ${LIMIT_S:-410} - 75 - SECONDS )) SHIM_ENV="PONYTAIL_TORCH_ALLOC=keep PONYTAIL_POOL=0" \
      bash "$root/tests/gpu/bench/wall_pair.sh"
    names="shim nopool" ;;
  *) echo "usage: $0 stress-capacity|wall|diag|hot-stress|hot-wall|hot-pair|lockstep-trace|final|control|split|counters"; exit 2 ;;
esac
tar czf "$top/issue3-$what.tgz" -C "$w" .
for f in $names; do echo "==== $f"; tail -n 40 "$w/$f.log"; done
