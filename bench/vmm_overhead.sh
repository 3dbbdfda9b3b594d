#!/bin/sh
# bench/vmm_overhead.sh [BUILD_DIR] [ROUNDS]: PyTorch's expandable-segment cycle
# (bench/vmm_overhead.c) under the shim with PONYTAIL_TORCH_VMM=on and =off,
# alternating for ROUNDS rounds (default 5); prints each round's ns per segment
# and the ratio of the medians (kept / passed through). A CPU figure: compare it
# only as a ratio within one run.
set -eu
build=${1:-build}
rounds=${2:-5}
ninja -C "$build" tests/preload/bench_vmm_overhead >/dev/null
exe="$build/tests/preload/bench_vmm_overhead"
lp="$build/tests/fakecuda:$build/tests/preload"
on="" off=""
i=0
while [ "$i" -lt "$rounds" ]; do
  a=$(LD_LIBRARY_PATH="$lp" LD_PRELOAD="$build/shim/libponytail_shim.so" PONYTAIL_STATS=0 PONYTAIL_CONTROL=0 \
      PONYTAIL_TORCH_VMM=on "$exe")
  b=$(LD_LIBRARY_PATH="$lp" LD_PRELOAD="$build/shim/libponytail_shim.so" PONYTAIL_STATS=0 PONYTAIL_CONTROL=0 \
      PONYTAIL_TORCH_VMM=off "$exe")
  echo "round $i: kept $a ns/segment, passed through $b ns/segment"
  on="$on $a" off="$off $b"
  i=$((i + 1))
done
python3 - "$on" "$off" <<'PY'
import statistics, sys
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
print("median kept %.1f, passed through %.1f ns/segment: ratio %.3f (rounds' ratios %.3f-%.3f)" % (
    statistics.median(on), statistics.median(off), statistics.median(on) / statistics.median(off),
    min(a / b for a, b in zip(on, off)), max(a / b for a, b in zip(on, off))))
PY
