#!/usr/bin/env bash
# The test command: builds and runs every CPU test, then the same tests in an
# AddressSanitizer/UBSan build. Works without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
[ -d build ] || meson setup build
meson test -C build --print-errorlogs
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dkernels=disabled
meson test -C build-asan --print-errorlogs
