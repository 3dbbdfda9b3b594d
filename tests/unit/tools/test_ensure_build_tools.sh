#!/usr/bin/env bash
# tools/ensure_build_tools.sh, each of its branches, in a sandbox: PATH is a dir of links
# to a few basic programs (no meson, ninja, pkg-config or python3, which the real
# /usr/bin may have) plus dirs of stubs, and HOME is a temp dir (a real ~/.local/bin
# could hold a pip meson). apt-get and python3 are stubs that record how they were run.
# $1: tools/ensure_build_tools.sh
set -u
HELPER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
T=$(mktemp -d "${TMPDIR:-/tmp}/pt-ebt.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

SB=$T/sandbox
mkdir -p "$SB" "$T/home" "$T/tmp"
for p in bash sh env mktemp mkdir rm ln chmod tail id dirname basename cat; do
  ln -s "$(command -v $p)" "$SB/$p" || { echo "no $p"; exit 1; }
done

# stub DIR NAME BODY: an executable /bin/sh script.
stub() { mkdir -p "$1"; printf '#!/bin/sh\n%s\n' "$3" >"$1/$2"; chmod +x "$1/$2"; }
meson_stub() { stub "$1" meson "[ \"\$1\" = --version ] && echo $2 || echo \"meson \$*\" >>$T/meson.calls"; }
ninja_stub() { stub "$1" ninja '[ "$1" = --version ] && echo 1.11.1'; }
# pkg-config that knows cmocka and libelf.
pkgconf_stub() { stub "$1" pkg-config 'case "$2" in cmocka|libelf) exit 0;; esac; exit 1'; }
# apt-get: records its argv and DEBIAN_FRONTEND; `install` puts meson, ninja and a
# pkg-config that knows cmocka/libelf into $T/aptbin (on the sandbox PATH).
stub "$T" apt-get "echo \"\$DEBIAN_FRONTEND|\$*\" >>$T/apt.argv
[ \"\$1\" = install ] || exit 0
[ -e $T/apt.fail ] && { echo 'E: Unable to locate package libcmocka-dev'; exit 100; }
mkdir -p $T/aptbin
printf '#!/bin/sh\necho 1.0.1\n' >$T/aptbin/meson
printf '#!/bin/sh\necho 1.11.1\n' >$T/aptbin/ninja
printf '#!/bin/sh\nexit 0\n' >$T/aptbin/pkg-config
chmod +x $T/aptbin/*"

# run NAME EXTRA_PATH [helper args]: sources the helper as tests/run.sh would, in a clean
# environment; stdout (rc, what meson/ninja resolve to, PATH) goes to $T/NAME.out,
# stderr to $T/NAME.err. PT_* and ROOT_UID come from the caller's environment.
run() {
  local name=$1 extra=$2; shift 2
  rm -f "$T/apt.argv" "$T/py.calls" "$T/meson.calls" "$T/apt.fail"
  rm -rf "$T/aptbin" "$T/tools"
  [ "${APT_FAIL:-0}" = 1 ] && touch "$T/apt.fail"
  env -i HOME="$T/home" TMPDIR="$T/tmp" PATH="$SB:$extra:$T/aptbin" \
    PT_ID_U="${UIDV:-0}" PT_APT_GET="${APT:-$T/apt-get}" PT_PYTHON="${PY:-$T/no-python}" \
    PT_TOOLS_DIR="$T/tools" \
    "$SB/bash" -c 'set -euo pipefail
      source "$1"; shift
      rc=0; pt_ensure_build_tools "$@" || rc=$?
      echo "rc=$rc"
      echo "meson=$(command -v meson || true)"; echo "mesonv=$(meson --version 2>/dev/null || true)"
      echo "ninja=$(command -v ninja || true)"
      echo "PATH=$PATH"
      [ $rc = 0 ] && meson setup probe >/dev/null 2>&1 || true' tests/run.sh "$HELPER" "$@" \
    >"$T/$name.out" 2>"$T/$name.err"
}
has() { grep -qxF -- "$2" "$T/$1.out" || fail "$1: expected '$2' in: $(cat "$T/$1.out") $(cat "$T/$1.err")"; }
no_apt() { [ ! -e "$T/apt.argv" ] || fail "$1: apt-get was run: $(cat "$T/apt.argv")"; }
quiet_err() {  # the one message, not a shell's complaints
  ! grep -qiE 'command not found|No such file|unbound variable|line [0-9]+:' "$T/$1.err" ||
    fail "$1: shell errors on stderr: $(cat "$T/$1.err")"
}

# (a) meson, ninja, pkg-config+cmocka on PATH: used as they are; nothing installed, python
# not asked, PATH unchanged.
meson_stub "$T/a" 1.2.0; ninja_stub "$T/a"; pkgconf_stub "$T/a"
stub "$T/pya" python3 "echo \"\$*\" >>$T/py.calls; exit 1"
PY=$T/pya/python3 run a "$T/a" --tests
has a rc=0; has a "meson=$T/a/meson"; has a "ninja=$T/a/ninja"; has a "PATH=$SB:$T/a:$T/aptbin"
no_apt a
[ ! -e "$T/py.calls" ] || fail "a: python was asked: $(cat "$T/py.calls")"

# (b1) pip-installed scripts in the python's bin dir (what it reports for -c): linked into
# the private dir, which goes first on PATH; no apt-get even though root and apt exist.
meson_stub "$T/py1/bin" 1.3.0; ninja_stub "$T/py1/bin"; pkgconf_stub "$T/pc"
stub "$T/py1/bin" python3 "case \"\$1\" in
  -c) echo $T/py1/bin/python3; echo $T/py1/bin;;
  *) exit 1;; esac"
PY=$T/py1/bin/python3 run b1 "$T/pc" --tests
has b1 rc=0; has b1 "meson=$T/tools/meson"; has b1 mesonv=1.3.0; has b1 "ninja=$T/tools/ninja"
has b1 "PATH=$T/tools:$SB:$T/pc:$T/aptbin"
[ "$(readlink -f "$T/tools/meson" 2>/dev/null)" = "$T/py1/bin/meson" ] || fail "b1: meson is not the python's script"
grep -qx "meson setup probe" "$T/meson.calls" 2>/dev/null || fail "b1: meson on PATH did not run the pip one"
no_apt b1

# (b2) only the modules (python3 -m mesonbuild.mesonmain / -m ninja, no scripts), and an
# old meson 0.61 on PATH that must not be taken: wrappers running `python3 -m`.
meson_stub "$T/old" 0.61.2; pkgconf_stub "$T/old"
stub "$T/py2" python3 "echo \"\$*\" >>$T/py.calls
case \"\$1 \$2 \$3\" in
  '-m mesonbuild.mesonmain --version') echo 1.4.0;;
  '-m ninja --version') echo 1.11.1.git.kitware.jobserver-1;;
  '-m mesonbuild.mesonmain '*) ;;
  *) exit 1;; esac"
PY=$T/py2/python3 run b2 "$T/old" --tests
has b2 rc=0; has b2 "meson=$T/tools/meson"; has b2 mesonv=1.4.0; has b2 "ninja=$T/tools/ninja"
grep -qx -- "-m mesonbuild.mesonmain setup probe" "$T/py.calls" 2>/dev/null ||
  fail "b2: the meson wrapper did not run python3 -m mesonbuild.mesonmain: $(cat "$T/py.calls" 2>&1)"
no_apt b2

# (b3) pip --user scripts in ~/.local/bin, a python that answers nothing useful.
meson_stub "$T/home/.local/bin" 1.5.0; ninja_stub "$T/home/.local/bin"
stub "$T/py3" python3 'exit 1'
PY=$T/py3/python3 run b3 "$T/pc" --tests
has b3 rc=0; has b3 mesonv=1.5.0
[ "$(readlink -f "$T/tools/ninja" 2>/dev/null)" = "$T/home/.local/bin/ninja" ] || fail "b3: ninja is not ~/.local/bin's"
no_apt b3
rm -rf "$T/home/.local"

# (c) root, apt-get, nothing else: `apt-get update`, then install of exactly the list,
# non-interactive; afterwards the installed tools are the ones found.
run c "$T/empty" --tests
has c rc=0; has c "meson=$T/aptbin/meson"; has c "ninja=$T/aptbin/ninja"
printf '|update\nnoninteractive|install -y meson ninja-build pkg-config libcmocka-dev libelf-dev\n' >"$T/apt.want"
cmp -s "$T/apt.want" "$T/apt.argv" 2>/dev/null || fail "c: apt-get argv: $(cat "$T/apt.argv" 2>&1)"
grep -q "log: " "$T/c.err" || fail "c: no log named: $(cat "$T/c.err")"
# (c2) the demo, tests' tools present except pkg-config: same list (so build/ gets cmocka).
meson_stub "$T/c2" 1.0.1; ninja_stub "$T/c2"
run c2 "$T/c2"
has c2 rc=0
cmp -s "$T/apt.want" "$T/apt.argv" 2>/dev/null || fail "c2: apt-get argv: $(cat "$T/apt.argv" 2>&1)"
# (c3) apt-get install fails: status 2, the end of its log shown.
APT_FAIL=1 run c3 "$T/empty" --tests
has c3 rc=2
grep -q "E: Unable to locate package libcmocka-dev" "$T/c3.err" || fail "c3: log tail not shown: $(cat "$T/c3.err")"
# (c4) cmocka missing only (meson, ninja, pkg-config there): root installs it (the stub
# pkg-config finds cmocka once the fake apt-get has installed).
stub "$T/c4" pkg-config "[ -d $T/aptbin ]"; meson_stub "$T/c4" 1.1.0; ninja_stub "$T/c4"
run c4 "$T/c4" --tests
has c4 rc=0
cmp -s "$T/apt.want" "$T/apt.argv" 2>/dev/null || fail "c4: apt-get argv: $(cat "$T/apt.argv" 2>&1)"

# (d) not root, nothing there: status 2, one message with the exact command; apt-get
# (present) not run.
UIDV=1000 run d "$T/empty" --tests
has d rc=2; no_apt d; quiet_err d
grep -qF "sudo apt-get install -y meson ninja-build pkg-config libcmocka-dev libelf-dev" "$T/d.err" ||
  fail "d: no install command: $(cat "$T/d.err")"
# (d2) the demo, not root, pkg-config there but no meson/ninja: the pip command too.
UIDV=1000 run d2 "$T/pc"
has d2 rc=2; no_apt d2; quiet_err d2
grep -qF "python3 -m pip install --user meson ninja" "$T/d2.err" || fail "d2: no pip command: $(cat "$T/d2.err")"
# (d3) root without apt-get: the command without sudo.
APT=$T/no-apt-get run d3 "$T/empty" --tests
has d3 rc=2; quiet_err d3
grep -qF "    apt-get install -y meson ninja-build pkg-config libcmocka-dev libelf-dev" "$T/d3.err" ||
  fail "d3: no install command: $(cat "$T/d3.err")"
# (d4) not root, tests, cmocka missing only: the message names cmocka.
UIDV=1000 run d4 "$T/c4" --tests
has d4 rc=2; no_apt d4
grep -q "missing cmocka" "$T/d4.err" || fail "d4: cmocka not named: $(cat "$T/d4.err")"

# (e) as tests/run.sh and tools/demo.sh use it: `pt_ensure_build_tools || exit` under
# set -e stops the script with status 2 and nothing after it runs.
env -i HOME="$T/home" PATH="$SB:$T/empty" PT_ID_U=1000 PT_PYTHON="$T/no-python" \
  "$SB/bash" -c 'set -euo pipefail; source "$1"; pt_ensure_build_tools || exit; echo AFTER' \
  demo.sh "$HELPER" >"$T/e.out" 2>"$T/e.err"
rc=$?
[ $rc = 2 ] || fail "e: exit $rc"; ! grep -q AFTER "$T/e.out" || fail "e: ran on after the failure"

[ "$fails" = 0 ] && echo "ensure_build_tools: all checks passed" || exit 1
