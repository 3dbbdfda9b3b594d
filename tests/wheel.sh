#!/usr/bin/env bash
# Ponytail as people install it (tests/run.sh runs this after the meson tests): pip builds the
# wheel (pyproject.toml, meson-python), a fresh virtual environment installs it, and from there,
# with no build tree on the way: `ponytail --help`, `shim-path`, `run`, `doctor` (what it can
# check without a GPU), `config`, `capacity` on the installed model config, `replay` of the
# bundled traces (the same figures as the build tree's ponytail), the installed generate.py's
# --help under LD_PRELOAD=$(ponytail shim-path), and the preload and export tests (meson suite
# 'shim') against the installed shim (-Dpreload_shim). Then a second wheel as a machine with
# only Python and a C compiler builds it (no CUDA toolkit: cuda.h from PyPI, no nvcc, no
# libelf): it installs, runs, and its doctor says the kernels are not built. Needs python3 with
# venv and pip, and PyPI (pip fetches meson-python, meson, ninja and nvidia-cuda-runtime).
# Usage: tests/wheel.sh [BUILD_DIR]   (the build tree to compare with; default build)
# Works in build-wheel/ (ignored by git). Exit 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ref=${1:-build}
out=build-wheel
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
step() { echo "== wheel: $*"; }

for m in venv pip; do
  python3 -m $m --help >/dev/null 2>&1 || {
    echo "tests/wheel.sh: python3 has no '$m' module (Debian: apt-get install python3-venv python3-pip)" >&2
    exit 2
  }
done

rm -rf "$out/dist" "$out/dist-bare" "$out/venv" "$out/tests"
mkdir -p "$out/dist"
step "pip wheel . (log: $out/pip-wheel.log)"
# The meson build dir is kept between runs (-Cbuild-dir), so a second run rebuilds what changed.
if ! python3 -m pip wheel . --no-deps -w "$out/dist" -Cbuild-dir="$out/meson" >"$out/pip-wheel.log" 2>&1; then
  tail -30 "$out/pip-wheel.log"
  echo "FAIL: pip wheel ."
  exit 1
fi
whl=$(ls "$out"/dist/ponytail-*.whl)
echo "   $whl"
# No Python module in it: a py3-none tag (the CLI and the shim serve any Python).
case $whl in *-py3-none-linux_*.whl) ;; *) fail "wheel tag: $whl, want py3-none-linux_*" ;; esac
python3 - "$whl" <<'PY' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = ["scripts/ponytail", "data/lib/ponytail/libponytail_shim.so",
        "data/share/ponytail/examples/generate.py", "data/share/ponytail/examples/verdict.py",
        "data/share/ponytail/examples/llama-1b-config.json"]
miss = [w for w in want if not any(n.endswith(".data/" + w) for n in names)]
if miss:
    print("wheel lacks", miss, "of", names)
    sys.exit(1)
PY

step "a fresh virtual environment, pip install of the wheel"
python3 -m venv "$out/venv" || { echo "FAIL: python3 -m venv"; exit 1; }
venv=$(cd "$out/venv" && pwd)
"$venv/bin/python" -m pip install -q --no-index "$whl" || { echo "FAIL: pip install $whl"; exit 1; }
# As `source venv/bin/activate` would: the environment's bin/ first on PATH.
export PATH="$venv/bin:$PATH"
hash -r
[ "$(command -v ponytail)" = "$venv/bin/ponytail" ] || fail "ponytail on PATH is '$(command -v ponytail)', want $venv/bin/ponytail"

step "ponytail --help"
help=$(ponytail --help) || fail "ponytail --help: exit $?"
for c in run config capacity kernels replay doctor shim-path sleep wake; do
  grep -q "^  $c " <<<"$help" || fail "ponytail --help lacks $c"
done

step "ponytail shim-path, ponytail run"
shim=$(ponytail shim-path) || fail "ponytail shim-path: exit $?"
[ "$shim" = "$venv/lib/ponytail/libponytail_shim.so" ] && [ -r "$shim" ] ||
  fail "shim-path printed '$shim', want $venv/lib/ponytail/libponytail_shim.so"
got=$(LD_PRELOAD= ponytail run --off -- /bin/sh -c 'printf %s "$LD_PRELOAD"')
[ "$got" = "$shim" ] || fail "ponytail run preloads '$got', not the shim shim-path names"

step "ponytail doctor (no GPU needed for these lines)"
doc=$(ponytail doctor 2>&1); rc=$?
echo "$doc" | sed 's/^/   /'
[ $rc = 0 ] || [ $rc = 1 ] || fail "doctor: exit $rc"
grep -qF "[ ok ] shim             $shim" <<<"$doc" || fail "doctor: no '[ ok ] shim $shim'"
grep -qF "[ ok ] shim-load        dlopen succeeds" <<<"$doc" || fail "doctor: the installed shim does not load"
grep -qF "[ ok ] shim-python      loaded into" <<<"$doc" || fail "doctor: the installed shim is not mapped in python"
if "$ref/tools/ponytail" kernels "$ref/shim/libponytail_shim.so" >/dev/null 2>&1; then
  # The build tree has kernels: so has the wheel, built on this machine with the same nvcc.
  grep -qE '^\[ ok \] kernels +[0-9]+ Ponytail kernel entries' <<<"$doc" || fail "doctor: the wheel's kernels not listed"
fi

step "ponytail config"
n=$(grep -c '^PT_OPT(' common/options.def)
[ "$(ponytail config | grep -c '^PONYTAIL_')" = "$n" ] || fail "config does not list the $n options of common/options.def"

step "ponytail capacity on the installed model config"
cfg="$venv/share/ponytail/examples/llama-1b-config.json"
cap=$(ponytail capacity --model-config "$cfg" --batch 32 --seq 4096 --gpu-mem 140G --weights 1628M) ||
  fail "capacity: exit $?"
grep -qE 'largest batch at seq 4096 +995$' <<<"$cap" || fail "capacity: no 'largest batch at seq 4096 995' (docs/cli.md's figure)"

step "ponytail replay of the bundled traces (against $ref/tools/ponytail)"
for t in tests/data/traces/*.trace.gz; do
  # The same pool code: the same figures, but for the timings.
  a=$(ponytail replay "$t" | grep -Ev '^ns per') || { fail "replay $t: exit $?"; continue; }
  b=$("$ref/tools/ponytail" replay "$t" | grep -Ev '^ns per')
  [ "$a" = "$b" ] || fail "replay $t: the installed ponytail and $ref's differ"
  grep -q '^peak live' <<<"$a" || fail "replay $t: no peak live"
done

step "LD_PRELOAD=\$(ponytail shim-path) python generate.py --help"
for gen in "$venv/share/ponytail/examples/generate.py" examples/generate.py; do
  g=$(LD_PRELOAD=$(ponytail shim-path) python "$gen" --help 2>&1) || fail "$gen --help under the shim: exit $?"
  grep -q '^usage: generate.py' <<<"$g" || fail "$gen --help under the shim: no usage"
done
m=$(LD_PRELOAD=$(ponytail shim-path) python -c 'print(open("/proc/self/maps").read())')
grep -qF "$shim" <<<"$m" || fail "the shim is not mapped in a python started with LD_PRELOAD=\$(ponytail shim-path)"

step "the preload and export tests against the installed shim (meson suite shim)"
# A build of the tests only for their programs and the fake CUDA: the shim they preload and
# check is the installed one.
if meson setup "$out/tests" -Dpreload_shim="$shim" >"$out/tests-setup.log" 2>&1; then
  meson test -C "$out/tests" --suite shim --print-errorlogs >"$out/tests.log" 2>&1 ||
    { tail -40 "$out/tests.log"; fail "meson test --suite shim against $shim"; }
  grep -E '^(Ok|Fail): ' "$out/tests.log" | sed 's/^/   /'
  grep -q '^Ok: *[1-9]' "$out/tests.log" || fail "the shim suite ran no test"
else
  tail -20 "$out/tests-setup.log"
  fail "meson setup of the test build"
fi

step "a wheel built without the CUDA toolkit, nvcc or libelf (log: $out/pip-wheel-bare.log)"
# As on a machine with only Python and a C compiler: the toolkit's headers and nvcc out of
# reach (-Dcudadir, -Dnvcc, and no CUDA dir on PATH), libelf left out.
bare_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd: -)
if PATH=$bare_path python3 -m pip wheel . --no-deps -w "$out/dist-bare" -Cbuild-dir="$out/meson-bare" \
     -Csetup-args=-Dcudadir=/nonexistent -Csetup-args=-Dnvcc=/nonexistent/nvcc \
     -Csetup-args=-Dtools_libelf=disabled -v >"$out/pip-wheel-bare.log" 2>&1; then
  grep -qE 'CUDA headers +: .*/nvidia/cu13/include' "$out/pip-wheel-bare.log" ||
    fail "the bare build did not take cuda.h from nvidia-cuda-runtime"
  rm -rf "$out/venv-bare"
  python3 -m venv "$out/venv-bare" &&
    "$out/venv-bare/bin/python" -m pip install -q --no-index "$out"/dist-bare/ponytail-*.whl ||
    fail "pip install of the bare wheel"
  bare="$out/venv-bare/bin/ponytail"
  "$bare" --help | grep -q '^  shim-path ' || fail "bare wheel: ponytail --help"
  bshim=$("$bare" shim-path) && [ -r "$bshim" ] || fail "bare wheel: shim-path '$bshim'"
  d=$(PATH="$(dirname "$bare"):$PATH" "$bare" doctor 2>&1)
  grep -qF "[FAIL] kernels          kernels not built" <<<"$d" || fail "bare wheel: doctor does not say the kernels are not built"
  grep -qF "[ ok ] shim-load        dlopen succeeds" <<<"$d" || fail "bare wheel: its shim does not load"
  g=$(LD_PRELOAD=$bshim "$(dirname "$bare")/python" examples/generate.py --help 2>&1)
  grep -q '^usage: generate.py' <<<"$g" || fail "bare wheel: generate.py --help under its shim"
else
  tail -30 "$out/pip-wheel-bare.log"
  fail "pip wheel . without the CUDA toolkit"
fi

if [ $fails = 0 ]; then
  echo "wheel: every check passed ($(basename "$whl"))"
else
  echo "wheel: $fails check(s) failed"
fi
[ $fails = 0 ]
