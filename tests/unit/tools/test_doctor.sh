#!/usr/bin/env bash
# `ponytail doctor` against the fake CUDA (tests/fakecuda: libcuda.so.1 with two
# "FakeCUDA H200" devices of compute capability 9.0, driver and runtime 13.0):
# driver, GPU, runtime, the shim and its kernels, a shim without kernels, a
# missing --shim, a missing LD_PRELOAD file, a python without torch, a missing
# python, no driver at all, --json, exit codes.
# $1: ponytail; $2: the shim .so; $3: the fakecuda build dir; $4: 1 when the
# shim was built with its kernels; $5: a shared object without CUDA code;
# $6 (optional): a ponytail whose kernel lister is that of a build without libelf.
set -u
PT=$1 SHIM=$2 FAKE=$3 BUILT=$4 NOFAT=$5 NOELF=${6:-}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A python that cannot import torch, whatever is installed here.
cat >"$tmp/notorch" <<'PY'
#!/usr/bin/env bash
exec python3 -c 'import sys; sys.modules["torch"] = None; sys.argv = sys.argv[1:]; exec(compile(sys.argv[0], "doctor", "exec"))' "${@:2}"
PY
chmod +x "$tmp/notorch"
doc() { LD_LIBRARY_PATH=$FAKE "$PT" doctor --timeout 60 "$@"; }
has() { grep -qF -- "$2" <<<"$1" || fail "$3: output lacks '$2'"; }
line() { grep -E "^\[(( ok )|FAIL|skip)\] $1 " <<<"$2"; }

"$PT" doctor --help | grep -q -- '--model-config' || fail "--help lacks --model-config"
"$PT" doctor --batch x >/dev/null 2>&1; [ $? = 2 ] || fail "bad --batch should exit 2"
"$PT" doctor stray >/dev/null 2>&1; [ $? = 2 ] || fail "an operand should exit 2"
"$PT" doctor --model-config "$tmp/none.json" >/dev/null 2>&1; [ $? = 2 ] || fail "unreadable --model-config should exit 2"

# The fake GPU, the real shim, a python without torch.
out=$(doc --shim "$SHIM" --python "$tmp/notorch"); rc=$?
[ $rc = 1 ] || fail "no torch: exit $rc, expected 1"
has "$(line driver "$out")" "[ ok ] driver" driver
has "$(line driver "$out")" "$FAKE" "driver path"
has "$(line driver "$out")" "supports CUDA up to 13.0" "driver version"
has "$(line gpu "$out")" "FakeCUDA H200, compute capability 9.0 (sm_90)" gpu
has "$(line runtime "$out")" "libcudart.so.13 13.0" runtime
has "$(line shim "$out")" "[ ok ] shim" shim
has "$(line shim-load "$out")" "[ ok ]" shim-load
if [ "$BUILT" = 1 ]; then
  has "$(line kernels "$out")" "[ ok ] kernels" kernels
  has "$(line kernel-arch "$out")" "cubin for this sm_90 GPU" kernel-arch
  # the prefill kernel is in the build when nvcc could target sm_90a
  if "$PT" kernels "$SHIM" 2>/dev/null | grep -q pt_attn_prefill_; then
    has "$(line prefill-kernel "$out")" "[ ok ] prefill-kernel   sm_90a cubin for this GPU" prefill-kernel
    p0=$(PONYTAIL_ATTN_PREFILL=0 doc --shim "$SHIM" --python "$tmp/notorch")
    has "$(line prefill-kernel "$p0")" "[skip] prefill-kernel   off (PONYTAIL_ATTN_PREFILL=0)" "prefill-kernel off"
    p0=$(PONYTAIL_ATTN=off doc --shim "$SHIM" --python "$tmp/notorch")
    has "$(line prefill-kernel "$p0")" "off (PONYTAIL_ATTN=off)" "prefill-kernel, attention off"
    p0=$(PONYTAIL_TORCH_SDPA=keep doc --shim "$SHIM" --python "$tmp/notorch")
    has "$(line prefill-kernel "$p0")" "with PONYTAIL_TORCH_SDPA=keep SDPA keeps cuDNN for prefill" "prefill-kernel, keep"
    p0=$(FAKECUDA_CC=8.0 doc --shim "$SHIM" --python "$tmp/notorch")
    has "$(line prefill-kernel "$p0")" "[skip] prefill-kernel   built for sm_90a (H100/H200) only; on this sm_80 GPU" \
      "prefill-kernel on another GPU"
  else
    has "$(line prefill-kernel "$out")" "[skip] prefill-kernel   not in this build" "prefill-kernel (not built)"
  fi
else
  has "$(line kernels "$out")" "[FAIL] kernels          kernels not built" "kernels (not built)"
  has "$(line prefill-kernel "$out")" "[skip] prefill-kernel   not in this build" "prefill-kernel (no kernels)"
fi
has "$(line torch "$out")" "[FAIL] torch" torch
has "$out" "what to do: pip install torch" "torch what-to-do"
has "$(line shim-python "$out")" "[ ok ]" shim-python
has "$(line selftest "$out")" "[skip]" selftest
has "$out" "verdict: NOT READY" verdict

# A shared object without kernels as the shim.
out=$(doc --shim "$NOFAT" --python "$tmp/notorch"); rc=$?
[ $rc = 1 ] || fail "shim without kernels: exit $rc"
has "$(line kernels "$out")" "[FAIL] kernels          kernels not built" "kernels of $NOFAT"
has "$out" "-Dkernels=enabled" "kernels what-to-do"
has "$(line prefill-kernel "$out")" "[skip] prefill-kernel   not in this build" "prefill-kernel of $NOFAT"

# Without libelf the list cannot be read, but a shim without kernels is still told by its bytes,
# and a shim with them is not called one without.
if [ -n "$NOELF" ]; then
  out=$(LD_LIBRARY_PATH=$FAKE "$NOELF" doctor --timeout 60 --shim "$NOFAT" --python "$tmp/notorch"); rc=$?
  [ $rc = 1 ] || fail "no libelf, shim without kernels: exit $rc"
  has "$(line kernels "$out")" "[FAIL] kernels          kernels not built" "no libelf: kernels of $NOFAT"
  if [ "$BUILT" = 1 ]; then
    out=$(LD_LIBRARY_PATH=$FAKE "$NOELF" doctor --timeout 60 --shim "$SHIM" --python "$tmp/notorch")
    has "$(line kernels "$out")" "cannot list the shim's kernels" "no libelf: kernels of the shim"
    grep -q "kernels not built" <<<"$(line kernels "$out")" && fail "no libelf: a shim with kernels called one without"
  fi
fi

# A missing --shim is named.
out=$(doc --shim "$tmp/missing_shim.so" --python "$tmp/notorch"); rc=$?
[ $rc = 1 ] || fail "missing shim: exit $rc"
has "$(line shim "$out")" "[FAIL] shim" "missing shim"
has "$(line shim "$out")" "$tmp/missing_shim.so" "missing shim path"

# LD_PRELOAD of a missing file is named.
out=$(LD_PRELOAD="$tmp/gone.so" doc --shim "$SHIM" --python "$tmp/notorch" 2>/dev/null); rc=$?
[ $rc = 1 ] || fail "missing LD_PRELOAD file: exit $rc"
has "$(line LD_PRELOAD "$out")" "[FAIL] LD_PRELOAD" "LD_PRELOAD"
has "$(line LD_PRELOAD "$out")" "$tmp/gone.so" "LD_PRELOAD path"

# A python that does not exist.
out=$(doc --shim "$SHIM" --python "$tmp/no-python"); rc=$?
[ $rc = 1 ] || fail "missing python: exit $rc"
has "$(line python "$out")" "[FAIL] python" "missing python"
has "$(line python "$out")" "$tmp/no-python" "missing python path"

# JSON: parses, lists every check, ready false.
js=$(doc --json --shim "$SHIM" --python "$tmp/notorch"); rc=$?
[ $rc = 1 ] || fail "--json: exit $rc"
python3 - "$js" <<'PY' || fail "--json content"
import json, sys
d = json.loads(sys.argv[1])
names = [c["name"] for c in d["checks"]]
want = ["toolkit", "driver", "gpu", "runtime", "shim", "shim-load", "LD_PRELOAD", "kernels", "kernel-arch",
        "prefill-kernel", "python",
        "torch", "shim-python", "launches", "libraries", "attention", "attention-padded", "selftest"]
assert all(w in names for w in want), (set(want) - set(names))
st = {c["name"]: c for c in d["checks"]}
assert st["driver"]["status"] == "ok" and st["gpu"]["status"] == "ok", st["gpu"]
assert st["torch"]["status"] == "fail" and st["torch"]["what_to_do"], st["torch"]
assert st["prefill-kernel"]["status"] in ("ok", "skip") and not st["prefill-kernel"]["needed"], st["prefill-kernel"]
assert d["ready"] is False and d["verdict"].startswith("NOT READY")
PY

# No driver at all (only where this machine has none): driver and GPU fail, GPU checks skip.
if [ ! -e /dev/nvidiactl ]; then
  out=$(env -u LD_LIBRARY_PATH "$PT" doctor --shim "$SHIM" --python "$tmp/notorch" --timeout 60); rc=$?
  [ $rc = 1 ] || fail "no driver: exit $rc"
  has "$(line driver "$out")" "[FAIL] driver" "no driver"
  has "$(line gpu "$out")" "[FAIL] gpu" "no gpu"
  [ "$BUILT" = 1 ] && has "$(line kernel-arch "$out")" "[skip] kernel-arch      (no GPU" "kernel-arch without GPU"
fi
[ "$fails" = 0 ] && echo "doctor: all checks passed" || exit 1
