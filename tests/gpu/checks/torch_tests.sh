#!/usr/bin/env bash
# PyTorch's own CUDA tests under the shim: test/test_cuda.py's memory, caching-allocator, mempool,
# CUDA-graph and stream cases, run stock and with LD_PRELOAD=$SHIM; no test that passes stock may
# fail under the shim (tests/gpu/checks/torch_tests_compare.py compares the two junit XMLs).
#
# test_cuda.py is NOT in the torch wheel and is not committed here (PyTorch's code, BSD-licensed,
# ~313 KB): put the file of the PyTorch release that matches the installed torch (2.11) at
# $TESTS_DIR/test_cuda.py, by default .ext/pytorch/test/ (git-ignored: `.gitignore` lists
# `/.ext/`), copied from a checkout of PyTorch's tag v2.11.0 (or release/2.11):
#   mkdir -p .ext/pytorch/test && cp PYTORCH_CHECKOUT/test/test_cuda.py .ext/pytorch/test/
# A newer one (main) works too: a pytest plugin written below fills in the few names it imports
# that 2.11's torch.testing._internal lacks; its tests of post-2.11 APIs then fail in both arms.
# Without a checkout: a copy of early-2026 main (312,535 characters, no `torch._six`, with
# TestMemPool and `use_on_oom`) was read on 2026-12-02 from the public PyTorch fork
# ataerabbi-meta/pytorch at commit ac90d12b0bd4dab5d09b8cdc2ca6d56c11b9befb, test/test_cuda.py.
# A copy that imports `torch._six` is from PyTorch 1.x: it does not collect, and the
# comparison then exits 3 ("nothing compared").
# It imports only the torch wheel (torch.testing._internal.*) plus psutil, expecttest and numpy;
# stand-ins for a missing psutil or expecttest (the H200 machine has no expecttest) are written
# to a temporary folder. With the device tool, carry .ext: run(carry=[".ext"], ...).
#
# Measured on the H200 (torch 2.11.0+cu130, test_cuda.py of main, early 2026): the default
# selection is 183 tests; native: ~170 s stock, ~150 s under the shim (160 pass, 3 xfail, 16 fail
# in both: post-2.11 APIs, no network, snapshot-format changes); async: ~175 / ~145 s, 5 tests
# abort the worker in both arms (reported as crashed, the worker is replaced).
#
# Usage: SHIM=build-gpu/shim/libponytail_shim.so OUT=/tmp/o tests/gpu/checks/torch_tests.sh
#   SHIM        the shim (required unless ARMS=stock; BUILD=1 builds it with tests/gpu/build.sh)
#   OUT         results (default ./gpu-out): torch-tests-<backend>.txt (the whole comparison, its
#               table last) and torch-tests-logs.tgz (each arm's junit XML and pytest log, the
#               compat plugin's notes at the log's end); KEEP_LOOSE=1 leaves the XMLs and logs
#               unpacked in OUT (the device tool brings back at most 8 files)
#   TESTS_DIR   where test_cuda.py is (default .ext/pytorch/test)
#   K_EXPR      pytest -k selection (default below: 183 tests, memory/allocator/mempool/graph/stream)
#   BACKENDS    native (default; PYTORCH_CUDA_ALLOC_CONF left unset in both arms, so the shim's
#               own default applies), async (backend:cudaMallocAsync set in both arms) and/or
#               expandable (expandable_segments:True in both arms, PyTorch's own
#               test_cuda_expandable_segments.py setting; the shim arm with PONYTAIL_TORCH_VMM=on,
#               so that the shim keeps and translates PyTorch's handles, shim/route_vmm.c: exit 2
#               when no process of that arm kept any)
#   ARMS        "stock shim" (default); the arms of each backend run one after the other
#   TIMEOUT_S   limit per arm (240); TEST_TIMEOUT per test (120, pytest-timeout, thread method:
#               a hung test kills the xdist worker, which is reported as crashed and replaced)
#   PYTEST_ARGS extra pytest arguments
# Exit: 0 no regression, 1 a test passing stock does not pass under the shim, 2 setup error.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
py="${PYTHON:-python3}"
case $py in /*) ;; */*) py="$PWD/$py" ;; esac  # the arms run in the tests dir
tests_dir="${TESTS_DIR:-.ext/pytorch/test}"
case $tests_dir in /*) ;; *) tests_dir="$root/$tests_dir" ;; esac
backends="${BACKENDS:-native}"
arms="${ARMS:-stock shim}"
timeout_s="${TIMEOUT_S:-240}"
test_timeout="${TEST_TIMEOUT:-120}"
# Selection (pytest -k: case-insensitive substrings of the test, class or module name). Classes:
# TestMemPool (MemPool, pluggable allocators, graph-capture stream reuse), TestBlockStateAbsorption
# (graph-pool checkpointing), TestCudaMallocAsync (allocator settings, snapshots, OOM, fuzz; the
# name matches "alloc"), TestCachingHostAllocatorCudaGraph (pinned memory under capture, "graph"),
# and by name in TestCuda / TestCudaOptimsCUDA / others: graphs (capture, replay, pools, graphed
# callables, capturable optimizers), streams and events, memory stats/fraction/OOM, pinned memory,
# non-blocking copies, record_stream, cudaHostRegister, and lazy init (no cuInit at import).
default_k="graph or stream or memory or alloc or pool or empty_cache or pinned or caching or oom"
default_k+=" or event or non_blocking or lazy_init or cudart or TestBlockStateAbsorption"
default_k+=" or TestMemPool"
default_k="($default_k) and not compile_kernel"
k_expr="${K_EXPR:-$default_k}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$tests_dir/test_cuda.py" ]; then
  echo "torch_tests: no $tests_dir/test_cuda.py (see this script's header for how to get it)"
  exit 2
fi
if [[ " $arms " == *" shim "* ]]; then
  if [ "${BUILD:-0}" = 1 ] && [ -z "${SHIM:-}" ]; then
    . "$root/tests/gpu/build.sh"
    pt_gpu_build "$root" "$tmp"
    # shellcheck disable=SC2154  # shim: set by pt_gpu_build
    SHIM="$shim"
  fi
  [ -n "${SHIM:-}" ] || { echo "torch_tests: set SHIM=path/to/libponytail_shim.so (or BUILD=1)"; exit 2; }
  case $SHIM in /*) ;; *) SHIM="$root/$SHIM" ;; esac
  [ -f "$SHIM" ] || { echo "torch_tests: no shim at $SHIM"; exit 2; }
fi

# Stand-ins for optional modules test_cuda.py or torch.testing._internal import at top level.
pymods="$tmp/pymods"; mkdir -p "$pymods"
if ! "$py" -c "import psutil" 2>/dev/null; then
  echo "torch_tests: psutil missing, using a stand-in (only TestGDS uses it)"
  printf '%s\n' '"""Stand-in written by tests/gpu/checks/torch_tests.sh: psutil is not installed."""' \
    'def disk_partitions(all=False):' '    return []' >"$pymods/psutil.py"
fi
if ! "$py" -c "import expecttest" 2>/dev/null; then
  echo "torch_tests: expecttest missing, using a stand-in"
  printf '%s\n' '"""Stand-in written by tests/gpu/checks/torch_tests.sh: expecttest is not installed."""' \
    'import unittest' '' '' 'class TestCase(unittest.TestCase):' \
    '    def assertExpectedInline(self, actual, expect, skip=0):' \
    '        self.assertMultiLineEqual(str(expect).strip(), str(actual).strip())' '' \
    '    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):' \
    '        with self.assertRaises(exc_type) as cm:' '            callable(*args, **kwargs)' \
    '        self.assertExpectedInline(str(cm.exception), expect)' >"$pymods/expecttest.py"
fi
# test_cuda.py from PyTorch's main branch may import names this torch's torch.testing._internal
# lacks (e.g. TEST_CUDAMALLOCASYNC, defined in test_cuda.py itself up to 2.11, later moved to
# common_utils): this pytest plugin (-p torch_tests_compat) fills them in before test_cuda.py is
# imported and undoes settings a half-failed test leaks to later tests (see its docstring); what
# it did ends each arm's log. Tests using an API this torch lacks then fail in both arms alike.
cat >"$pymods/torch_tests_compat.py" <<'PYEOF'
"""pytest plugin written by tests/gpu/checks/torch_tests.sh (the same in both arms).
1. Backfills names that test_cuda.py imports from torch.testing._internal.* but this torch does
   not have there: copied from a sibling module, computed (TEST_CUDAMALLOCASYNC), or a stand-in
   (upper-case flags False, anything else a pass-through decorator).
2. After each test, undoes the two process-wide settings a test that fails half-way leaves
   behind for every later test in the worker: the per-process memory fraction (TestMemPool's
   limited-memory tests) and expandable_segments:True (test_mempool_expandable)."""
import ast
import importlib
import os

SIBLINGS = ("common_utils", "common_cuda", "common_device_type", "common_optimizers",
            "autocast_test_lists", "common_dtype")
_done = False
_fraction = None


def _note(line, mode="a"):
    log = os.environ.get("TORCH_TESTS_COMPAT_LOG")
    if log:
        with open(log, mode) as f:
            f.write(line + "\n")


def _computed(name):
    import torch
    if name == "TEST_CUDAMALLOCASYNC":
        return torch.cuda.is_available() and torch.cuda.get_allocator_backend() == "cudaMallocAsync"
    raise KeyError(name)


def _standin(name):
    if name.isupper():
        return False

    def missing(*args, **kwargs):  # decorator with or without arguments: leaves the test as is
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn
    missing.__name__ = name
    return missing


def _backfill(path):
    notes = []
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith("torch.testing._internal.")):
            continue
        try:
            mod = importlib.import_module(node.module)
        except Exception as e:  # the import error itself is reported by pytest
            notes.append(f"{node.module}: cannot import ({type(e).__name__}: {e})")
            continue
        for alias in node.names:
            name = alias.name
            if hasattr(mod, name):
                continue
            for sib in SIBLINGS:
                try:
                    other = importlib.import_module("torch.testing._internal." + sib)
                except Exception:
                    continue
                if hasattr(other, name):
                    setattr(mod, name, getattr(other, name))
                    notes.append(f"{node.module}.{name} <- torch.testing._internal.{sib}")
                    break
            else:
                try:
                    value = _computed(name)
                    how = f"computed: {value}"
                except KeyError:
                    value = _standin(name)
                    how = "stand-in " + ("False" if name.isupper() else "pass-through decorator")
                setattr(mod, name, value)
                notes.append(f"{node.module}.{name}: not in this torch, {how}")
    return notes


def pytest_collectstart(collector):
    global _done
    if _done or not str(getattr(collector, "path", "")).endswith("test_cuda.py"):
        return
    _done = True
    notes = _backfill(str(collector.path))
    _note("\n".join(notes) if notes else "nothing to backfill", "w")


def pytest_runtest_setup(item):
    global _fraction
    import torch
    if _fraction is None and torch.cuda.is_available():
        try:
            _fraction = torch.cuda.get_per_process_memory_fraction()
        except Exception:
            _fraction = False


def pytest_runtest_teardown(item, nextitem):
    import torch
    if not torch.cuda.is_initialized():
        return
    try:
        if _fraction and torch.cuda.get_per_process_memory_fraction() != _fraction:
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(_fraction)
            _note(f"restored the memory fraction {_fraction} after {item.name}")
    except Exception:
        pass
    if "expandable" in item.name and "expandable_segments:True" not in (
            os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")):
        try:
            torch.cuda.memory._set_allocator_settings("expandable_segments:False")
        except Exception:
            pass
PYEOF
pypath="$pymods${PYTHONPATH:+:$PYTHONPATH}"

xdist=(-n 1 --dist=load --max-worker-restart=100)
"$py" -c "import xdist" 2>/dev/null \
  || { echo "torch_tests: pytest-xdist missing: one process, a crash ends the arm"; xdist=(); }
tmo=(--timeout="$test_timeout" --timeout-method=thread)
"$py" -c "import pytest_timeout" 2>/dev/null || { echo "torch_tests: pytest-timeout missing"; tmo=(); }
extra=()
[ -n "${PYTEST_ARGS:-}" ] && read -r -a extra <<<"$PYTEST_ARGS"

# One arm: pytest in the tests dir; timeout sends SIGINT first so pytest still writes its junit XML
# and -rA summary (compare falls back on the summary when the XML is missing).
declare -A arm_rc
vmm_unused=0
run_arm() { # backend arm
  local be=$1 arm=$2 name="torch-$1-$2" t0=$SECONDS rc
  local e=(env -u CI -u LD_PRELOAD -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF
           PYTHONPATH="$pypath" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
           PYTORCH_TEST_WITH_SLOW=0 PYTORCH_TESTING_DEVICE_ONLY_FOR=cuda
           PYTORCH_PRINT_REPRO_ON_FAILURE=0 TORCH_TESTS_COMPAT_LOG="$tmp/$name.compat")
  [ "$be" = async ] && e+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)
  [ "$be" = expandable ] && e+=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  [ "$arm" = shim ] && e+=(LD_PRELOAD="$SHIM" PONYTAIL_LOG=warn)
  # expandable: the shim keeps PyTorch's handles (PONYTAIL_TORCH_VMM=on, since the program set
  # expandable segments itself); its info log per process says whether it did.
  [ "$arm" = shim ] && [ "$be" = expandable ] &&
    { mkdir -p "$tmp/$name.shimlog"; e+=(PONYTAIL_TORCH_VMM=on PONYTAIL_LOG=info PONYTAIL_LOG_FILE="$tmp/$name.shimlog/log.%p"); }
  rm -f "$out/$name.xml"
  # env (not timeout) carries LD_PRELOAD: only python and its children run under the shim.
  (cd "$tests_dir" && timeout --signal=INT --kill-after=30 "$timeout_s" "${e[@]}" \
    "$py" -m pytest test_cuda.py -p no:cacheprovider -p torch_tests_compat --rootdir="$tests_dir" \
    "${xdist[@]}" "${tmo[@]}" -q -rA --junitxml="$out/$name.xml" -k "$k_expr" ${extra[@]+"${extra[@]}"}) \
    >"$out/$name.log" 2>&1
  rc=$?
  arm_rc[$name]=$rc
  if [ -f "$tmp/$name.compat" ]; then
    { echo "== torch_tests_compat"; cat "$tmp/$name.compat"; } >>"$out/$name.log"
    [ "$arm" = stock ] && grep -v '^nothing' "$tmp/$name.compat" | sed 's/^/   compat: /' | head -8
  fi
  if [ -d "$tmp/$name.shimlog" ]; then
    local kept
    kept=$(grep -l "PyTorch maps its own memory" "$tmp/$name.shimlog"/log.* 2>/dev/null | wc -l)
    echo "== $name: the shim kept PyTorch's handles in $kept process(es)"
    echo "== the shim kept PyTorch's handles in $kept process(es)" >>"$out/$name.log"
    [ "$kept" -gt 0 ] || vmm_unused=1
  fi
  printf '== %-18s rc %3d in %4d s%s  %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$([ "$rc" = 124 ] && echo ' (arm timeout)')" "$(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' \
    "$out/$name.log" | tail -1 | tr -d '=' | sed 's/^ *//')"
}

echo "== test_cuda.py: $tests_dir; backends: $backends; arms: $arms; -k: $k_expr"
"$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])' 2>&1 | tail -1
for be in $backends; do
  for arm in $arms; do run_arm "$be" "$arm"; done
done

status=0
tables=()
for be in $backends; do
  [[ " $arms " == *" stock "* && " $arms " == *" shim "* ]] || continue
  res=$("$py" "$root/tests/gpu/checks/torch_tests_compare.py" --name "$be" \
    --stock "$out/torch-$be-stock.xml" --shim "$out/torch-$be-shim.xml" \
    --stock-log "$out/torch-$be-stock.log" --shim-log "$out/torch-$be-shim.log" \
    --stock-rc "${arm_rc[torch-$be-stock]:-}" --shim-rc "${arm_rc[torch-$be-shim]:-}" \
    --report "$out/torch-tests-$be.txt")
  rc=$?
  echo "$res"
  [ $rc -gt $status ] && status=$rc
  tables+=("$(sed -n '/^torch tests \[/,$p' <<<"$res")")
done
# Each arm's XML and log into one archive (the device tool brings back at most 8 files).
arts=()
for be in $backends; do
  for arm in $arms; do
    for f in "torch-$be-$arm.xml" "torch-$be-$arm.log"; do [ -f "$out/$f" ] && arts+=("$f"); done
  done
done
if [ ${#arts[@]} -gt 0 ] && [ "${KEEP_LOOSE:-0}" != 1 ]; then
  tar -czf "$out/torch-tests-logs.tgz" -C "$out" "${arts[@]}" && (cd "$out" && rm -f "${arts[@]}")
fi
if [ ${#tables[@]} -gt 1 ]; then
  echo "== all backends"
  printf '%s\n' "${tables[@]}"
fi
if [ "$vmm_unused" = 1 ]; then
  echo "torch_tests: the expandable backend's shim arm never kept PyTorch's handles: it did not test the translation"
  [ $status -lt 2 ] && status=2
fi
exit $status
