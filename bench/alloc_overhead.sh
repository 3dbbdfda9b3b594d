#!/bin/sh
# bench/alloc_overhead.sh [BUILD_DIR]: runs the allocation-overhead benchmark
# (bench/alloc_overhead.c) without the shim, to measure the bias between the
# two link-map namespaces (both arms bare), then under the shim with its
# defaults (PONYTAIL_KV_MIN_ASYNC=0: both sizes pooled) and with
# PONYTAIL_KV_MIN_ASYNC=1M (4 KiB passes through, 2 MiB is pooled).
set -eu
build=${1:-build}
ninja -C "$build" tests/preload/bench_alloc_overhead >/dev/null
exe="$build/tests/preload/bench_alloc_overhead"
echo "== without the shim (namespace bias)"
LD_LIBRARY_PATH="$build/tests/fakecuda" "$exe" 2>/dev/null
echo "== with the shim, defaults (every stream-ordered size pooled)"
LD_LIBRARY_PATH="$build/tests/fakecuda" LD_PRELOAD="$build/shim/libponytail_shim.so" PONYTAIL_STATS=0 "$exe"
echo "== with the shim, PONYTAIL_KV_MIN_ASYNC=1M (4 KiB passes through)"
LD_LIBRARY_PATH="$build/tests/fakecuda" LD_PRELOAD="$build/shim/libponytail_shim.so" PONYTAIL_STATS=0 \
  PONYTAIL_KV_MIN_ASYNC=1M "$exe"
