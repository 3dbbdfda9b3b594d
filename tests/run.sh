#!/usr/bin/env bash
# The test command: builds and runs every CPU test, then the same tests in an
# AddressSanitizer/UBSan build, then the package as pip builds and installs it (tests/wheel.sh:
# the wheel in a fresh virtual environment, its CLI and its shim; needs PyPI). Works without a
# GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
# meson, ninja, pkg-config and cmocka from PATH, pip or apt (as root), else a message
# with the command to run (exit 2).
source tools/ensure_build_tools.sh
pt_ensure_build_tools --tests || exit
[ -d build ] || meson setup build
meson test -C build --print-errorlogs
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dkernels=disabled
meson test -C build-asan --print-errorlogs
# The wheel (pyproject.toml) installed into a fresh virtual environment, checked from there.
tests/wheel.sh build
