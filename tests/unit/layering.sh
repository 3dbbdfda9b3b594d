#!/usr/bin/env bash
# The layers (docs/architecture.md, "Layers"): common/ depends on nothing above it;
# allocator/, kernels/ and hooks/ depend on common/ (and hooks/ on kernels/)
# but never on the shim, which hands them what they need at load
# (shim/init.c, pt_compose). Fails when:
#   - a file of allocator/, kernels/ or hooks/ includes a shim/ header;
#   - a file of common/ includes anything of shim/, allocator/, hooks/,
#     kernels/ or tools/;
#   - a file of tools/lib/ (what several ponytail commands share) includes
#     a command's header (tools/commands/) or the command list (tools/cmd.h):
#     a shared piece that knew a command would no longer be shared;
#   - a `#pragma weak` is back anywhere (a dependency the linker cannot see).
# That the pool and its VMM backend link without any shim object is checked
# by the alloc test link_alone (tests/unit/alloc/link_alone.c).
# $1: the source root.
set -u
root=${1:?source root}
cd "$root" || exit 1
fail=0
inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]'

check() { # $1: what, $2: pattern, rest: folders
  local what=$1 pat=$2
  shift 2
  local hits
  hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
           --include='*.def' "$pat" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "FAIL: $what:"
    echo "$hits"
    fail=1
  else
    echo "ok: $what"
  fi
}

for d in common allocator kernels hooks shim tools/commands tools/lib; do
  [ -d "$d" ] || { echo "FAIL: no folder $d/"; fail=1; }
done
check 'allocator/, kernels/, hooks/ include no shim/ header' "${inc}shim/" allocator kernels hooks
check 'common/ includes nothing of the layers above it' \
  "${inc}(shim|allocator|hooks|kernels|tools)/" common
check 'tools/lib/ includes no command (tools/commands/, tools/cmd.h)' \
  "${inc}tools/(commands/|cmd\.h)" tools/lib
check 'no #pragma weak' '^[[:space:]]*#[[:space:]]*pragma[[:space:]]+weak' \
  common shim allocator kernels hooks tools
exit $fail
