#!/usr/bin/env bash
# CLI tests of `ponytail kernels`: exit codes, errors, table and --json.
# $1: a ponytail with the kernels subcommand; $2, $3: the nvcc-built fixtures
# (absent when nvcc was not found: those checks are skipped).
set -u
PT=$1 FX=${2:-} FXLZ4=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {
  local want=$1; shift
  "$PT" kernels "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: kernels $* -> exit $rc, want $want"; cat "$tmp/err"; fails=$((fails + 1)); return 1
  fi
}
has() {
  if ! grep -qF -- "$2" "$tmp/$1"; then echo "FAIL: $1 lacks '$2'"; cat "$tmp/$1"; fails=$((fails + 1)); fi
}

expect 2 && has err "usage: ponytail kernels"
expect 2 --bogus x && has err "unknown flag '--bogus'"
expect 2 a b && has err "exactly one FILE"
expect 0 --help && has out "--demangle" && has out "--json"
expect 1 "$tmp/missing.so" && has err "No such file"
printf 'just text\n' >"$tmp/text"
expect 1 "$tmp/text" && has err "not an ELF file, a cubin or a fatbin"
: >"$tmp/empty"
expect 1 "$tmp/empty" && has err "empty file"
expect 1 "$(readlink -f "$(command -v sh)")" && has err "no .nv_fatbin"  # an ELF with no CUDA code

if [ -n "$FX" ]; then
  expect 0 "$FX" && has out "pt_fx_ptrs  [0:8 8:8 16:4]" && has out "sm_80" && has out "sm_90"
  expect 0 "$FXLZ4" --json && has out '"name": "_Z12pt_fx_structi2ByPd"' && has out '"param_bytes": 128' \
    && has out '"arch": "compute_90"' && has out '"hook": null'
  expect 0 "$FXLZ4" --demangle && has out "pt_fx_struct(int, By, double*)"
  # truncated in the middle of the device code: an error, not a crash
  off=$(grep -obUaP '\x50\xed\x55\xba' "$FXLZ4" | head -n 1 | cut -d: -f1)
  head -c $((off + 200)) "$FXLZ4" >"$tmp/trunc.so"
  "$PT" kernels "$tmp/trunc.so" >/dev/null 2>"$tmp/err"; rc=$?
  if [ "$rc" = 0 ] || [ "$rc" -ge 128 ]; then echo "FAIL: truncated file -> exit $rc"; fails=$((fails + 1)); fi
  # the raw fatbin and a raw cubin are accepted too
  tail -c +$((off + 1)) "$FXLZ4" | head -c 200000 >"$tmp/raw.fatbin"
  "$PT" kernels "$tmp/raw.fatbin" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" -ge 128 ] && { echo "FAIL: raw fatbin crashed"; fails=$((fails + 1)); }
fi
[ "$fails" = 0 ] && echo "all kernels CLI checks passed"
exit $((fails > 0))
