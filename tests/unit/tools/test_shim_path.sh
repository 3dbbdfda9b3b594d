#!/usr/bin/env bash
# `ponytail shim-path` and the shim lookup it shares with `ponytail run` (tools/lib/shimpath.c):
# the build tree's shim; an installed layout, <prefix>/bin/ponytail with the shim in
# <prefix>/<shimdir> (libdir, or lib/ponytail in a wheel), made here by copying both; and on
# failure nothing on stdout, so that LD_PRELOAD=$(ponytail shim-path) never gets a message.
# Usage: test_shim_path.sh PONYTAIL SHIM_SO SHIMDIR   (SHIMDIR: meson.build's pt_shim_rel)
set -uo pipefail
pt=$1 shim=$2 shimdir=$3 bad=0
fail() { echo "FAIL: $*"; bad=1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pt-shim-path.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

out=$("$pt" shim-path 2>"$tmp/err"); rc=$?
[ $rc = 0 ] || fail "build tree: exit $rc ($(cat "$tmp/err"))"
[ "$out" = "$(realpath "$shim")" ] || fail "build tree: printed '$out', want $(realpath "$shim")"

"$pt" shim-path extra >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && [ ! -s "$tmp/out" ] && grep -q 'usage: ponytail shim-path' "$tmp/err" ||
  fail "an extra argument: exit $rc, want 2 with the usage on stderr only"

case $shimdir in
/*) echo "note: shimdir $shimdir is absolute: the installed layout is not made here" ;;
*)
  # An install: bin/ponytail, <shimdir>/libponytail_shim.so; no shim/ beside bin/. The shim is
  # a stand-in file: the lookup only reads that it is there, and ld.so skips a preload it cannot
  # load (the real one, built with ASan in the sanitizer build, would stop /bin/sh below).
  p="$tmp/prefix"
  mkdir -p "$p/bin" "$p/$shimdir"
  cp "$pt" "$p/bin/ponytail" && printf 'a stand-in\n' >"$p/$shimdir/libponytail_shim.so" || exit 1
  want=$(realpath "$p/$shimdir/libponytail_shim.so")
  out=$("$p/bin/ponytail" shim-path 2>"$tmp/err"); rc=$?
  [ $rc = 0 ] && [ "$out" = "$want" ] || fail "installed: exit $rc, printed '$out', want $want ($(cat "$tmp/err"))"
  # `run` preloads the very file shim-path names.
  out=$(LD_PRELOAD= "$p/bin/ponytail" run --off -- /bin/sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
  [ "$out" = "$want" ] || fail "installed: run preloads '$out', shim-path says $want"

  rm "$p/$shimdir/libponytail_shim.so"
  "$p/bin/ponytail" shim-path >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc = 1 ] && [ ! -s "$tmp/out" ] && grep -q 'not found' "$tmp/err" ||
    fail "no shim: exit $rc, stdout '$(cat "$tmp/out")', want exit 1, nothing on stdout, 'not found' on stderr"

  # A path LD_PRELOAD cannot carry (ld.so splits it at ' ' and ':').
  q="$tmp/my prefix"
  mkdir -p "$q/bin" "$q/$shimdir"
  cp "$pt" "$q/bin/ponytail" && printf 'a stand-in\n' >"$q/$shimdir/libponytail_shim.so" || exit 1
  "$q/bin/ponytail" shim-path >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc = 1 ] && [ ! -s "$tmp/out" ] && grep -q "contains ':' or ' '" "$tmp/err" ||
    fail "a space in the path: exit $rc, stdout '$(cat "$tmp/out")', want exit 1 and nothing on stdout"
  ;;
esac
[ $bad = 0 ] && echo "shim-path: ok"
exit $bad
