#!/bin/sh
# check_exports.sh SHIM_SO SYMS_DEF [TORCH_SYMS]: the shim's NEEDED list and its
# dynamic symbol table are exactly what the design allows.
set -eu
so=$1
def=$2
fail=0
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for bad in libcuda libcudart libelf libcmocka libnvidia libcupti; do
  if printf '%s\n' "$needed" | grep -q "^$bad"; then
    echo "shim must not link $bad: NEEDED = $needed"
    fail=1
  fi
done
want=$(mktemp)
got=$(mktemp)
trap 'rm -f "$want" "$got"' EXIT
torch=${3:-}
# syms.def lists its symbols as PT_SYM rows, and the gated driver variants
# through shim/gated.def (PT_GATED rows, all DRV), which sits beside it.
gated=$(dirname "$def")/gated.def
{ sed -n -E 's/^PT_SYM\(([A-Za-z0-9_]+), *(RT|DRV)\).*/\1/p' "$def"; echo dlsym
  [ -f "$gated" ] && sed -n -E 's/^PT_GATED\(([A-Za-z0-9_]+),.*/\1/p' "$gated"
  [ -n "$torch" ] && grep -v -e '^#' -e '^$' "$torch"; } | sort > "$want"
nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | grep -v '^$' | sort > "$got"
if ! cmp -s "$want" "$got"; then
  echo "exported symbols differ from shim/syms.def (< wanted, > exported):"
  diff "$want" "$got" || true
  fail=1
fi
[ "$fail" = 0 ] && echo "exports ok: $(wc -l < "$got") symbols; NEEDED: $(echo $needed)"
exit $fail
