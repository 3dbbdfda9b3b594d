#!/bin/sh
# bench/launch_overhead.sh [BUILD_DIR]: runs the launch-overhead benchmark
# (bench/launch_overhead.c) twice: without the shim, to measure the bias
# between the two link-map namespaces (both arms bare), then under the shim.
# Added cost = (shim - bare) with the shim - (shim - bare) without it.
set -eu
build=${1:-build}
ninja -C "$build" tests/preload/bench_launch_overhead >/dev/null
exe="$build/tests/preload/bench_launch_overhead"
echo "== without the shim (namespace bias)"
LD_LIBRARY_PATH="$build/tests/fakecuda" "$exe" 2>/dev/null
echo "== with the shim"
LD_LIBRARY_PATH="$build/tests/fakecuda" LD_PRELOAD="$build/shim/libponytail_shim.so" PONYTAIL_STATS=0 "$exe"
