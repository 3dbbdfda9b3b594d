# Sourced (bash) by tools/demo.sh and tests/run.sh, the README's two commands, so that
# they work on a fresh machine: pt_ensure_build_tools [--tests] makes meson (>= 1.0) and
# ninja usable, and with --tests also pkg-config and cmocka (meson.build only builds the
# tests when dependency('cmocka') finds it, and dependency() needs pkg-config). In order:
#   1. what is already on PATH;
#   2. a meson/ninja that pip installed for python3 (a machine with no apt and no network
#      but a pip-installed meson): its scripts, or `python3 -m ...` wrappers, are linked
#      into a private bin dir that goes first on PATH (only meson and ninja are put there,
#      so no other program on PATH changes);
#   3. as root with apt-get: apt-get install of the whole package list;
#   4. else one message with the exact command to run, and status 2.
# libelf (tests) and pkg-config (demo) are wanted, not needed: the build takes them when
# found (meson_options.txt: auto) and works without them, so their absence only starts
# apt-get (as root) or is noted.
# Returns (does not exit) so that callers say `pt_ensure_build_tools || exit`; it does not
# rely on set -e, which is off inside a function called from `||`.
# Overrides, for tests/unit/tools/test_ensure_build_tools.sh:
#   PT_PYTHON (python3), PT_APT_GET (apt-get), PT_ID_U (id -u), PT_TOOLS_DIR (the private
#   bin dir; default build-tools/bin in the checkout, ignored by git as /build*/).

# True when the meson command "$@" (default: meson on PATH) is >= 1.0, as meson.build's
# meson_version asks.
_pt_bt_meson_ok() {
  local v
  (( $# )) || set -- meson
  v=$("$@" --version 2>/dev/null) || return 1
  [[ $v =~ ^([0-9]+)\. ]] && (( BASH_REMATCH[1] >= 1 ))
}

# Fills _pt_bt_need (missing and required) and _pt_bt_want (missing, optional).
_pt_bt_check() {
  local tests=$1
  _pt_bt_need=() _pt_bt_want=()
  hash -r
  _pt_bt_meson_ok || _pt_bt_need+=(meson)
  ninja --version >/dev/null 2>&1 || _pt_bt_need+=(ninja)
  if command -v pkg-config >/dev/null 2>&1; then
    if [ "$tests" = 1 ]; then
      pkg-config --exists cmocka || _pt_bt_need+=(cmocka)
      pkg-config --exists libelf || _pt_bt_want+=(libelf)
    fi
  elif [ "$tests" = 1 ]; then
    _pt_bt_need+=(pkg-config cmocka)   # cmocka cannot be found without pkg-config
    _pt_bt_want+=(libelf)
  else
    _pt_bt_want+=(pkg-config)          # the demo build takes libelf/zlib only through it
  fi
}

# Step 2: meson/ninja installed by pip for $PT_PYTHON. Puts what it finds for the names
# in _pt_bt_need into the private bin dir and that dir first on PATH.
_pt_bt_from_python() {
  local py=${PT_PYTHON:-python3} root=$1 dir exe="" d tool mod found=0
  command -v "$py" >/dev/null 2>&1 || return 0
  local -a dirs=()
  # The interpreter's own path and its script dirs (venv bin/, pip --user's bin/, and
  # the bin/ beside the packages that pip --target writes; such a meson script needs the
  # PYTHONPATH that found the package, which then is in the environment).
  # A python without sysconfig user schemes just gives fewer candidates.
  while IFS= read -r d; do
    [ -n "$d" ] || continue
    if [ -z "$exe" ]; then exe=$d; else dirs+=("$d"); fi
  done < <("$py" -c 'import importlib.util, os, sys, sysconfig
print(sys.executable)
print(os.path.dirname(sys.executable))
print(sysconfig.get_path("scripts"))
try: print(sysconfig.get_path("scripts", os.name + "_user"))
except Exception: pass
for m in ("mesonbuild", "ninja"):
    try: print(os.path.join(os.path.dirname(os.path.dirname(importlib.util.find_spec(m).origin)), "bin"))
    except Exception: pass' 2>/dev/null)
  [ -n "${HOME:-}" ] && dirs+=("$HOME/.local/bin")
  [ -n "$exe" ] || exe=$(command -v "$py")
  dir=${PT_TOOLS_DIR:-$root/build-tools/bin}
  mkdir -p "$dir" 2>/dev/null || dir=$(mktemp -d "${TMPDIR:-/tmp}/ponytail-tools.XXXXXX") || return 0
  for tool in meson ninja; do
    [[ " ${_pt_bt_need[*]} " == *" $tool "* ]] || continue
    rm -f "$dir/$tool"
    # A script next to the interpreter: linked. meson records the path it was run by in
    # build.ninja (to regenerate), hence a private dir that stays: the checkout's.
    for d in "${dirs[@]}"; do
      [ -x "$d/$tool" ] || continue
      if [ $tool = meson ]; then _pt_bt_meson_ok "$d/$tool" || continue
      else "$d/$tool" --version >/dev/null 2>&1 || continue; fi
      ln -s "$d/$tool" "$dir/$tool" && found=1
      break
    done
    [ -e "$dir/$tool" ] && continue
    # Only the module (e.g. pip install --target, or no script dir known): a wrapper.
    if [ $tool = meson ]; then mod=mesonbuild.mesonmain; else mod=ninja; fi
    if "$py" -m $mod --version >/dev/null 2>&1 &&
       { [ $tool != meson ] || _pt_bt_meson_ok "$py" -m $mod; }; then
      printf '#!/bin/sh\nexec "%s" -m %s "$@"\n' "$exe" "$mod" >"$dir/$tool" &&
        chmod +x "$dir/$tool" && found=1
    fi
  done
  if [ $found = 1 ]; then
    case ":$PATH:" in *":$dir:"*) ;; *) PATH="$dir:$PATH" ;; esac
    export PATH
  fi
  return 0
}

pt_ensure_build_tools() {
  local tests=0 who root apt uid log
  [ "${1:-}" = --tests ] && tests=1
  who=$0
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  # One list for both commands: if tools/demo.sh (the README's first command) configured
  # build/ without cmocka, tests/run.sh would later reuse that build/ with no tests in it.
  local -a pkgs=(meson ninja-build pkg-config libcmocka-dev libelf-dev)

  _pt_bt_check $tests
  (( ${#_pt_bt_need[@]} + ${#_pt_bt_want[@]} == 0 )) && return 0

  if [[ " ${_pt_bt_need[*]} " == *" meson "* || " ${_pt_bt_need[*]} " == *" ninja "* ]]; then
    _pt_bt_from_python "$root"
    _pt_bt_check $tests
    (( ${#_pt_bt_need[@]} + ${#_pt_bt_want[@]} == 0 )) && return 0
  fi

  uid=${PT_ID_U:-$(id -u)}
  apt=${PT_APT_GET:-apt-get}
  if [ "$uid" = 0 ] && command -v "$apt" >/dev/null 2>&1; then
    log=$(mktemp "${TMPDIR:-/tmp}/ponytail-apt.XXXXXX") || log=/dev/null
    echo "$who: installing ${pkgs[*]} with apt-get (missing: ${_pt_bt_need[*]} ${_pt_bt_want[*]}; log: $log)" >&2
    if "$apt" update >>"$log" 2>&1 &&
       DEBIAN_FRONTEND=noninteractive "$apt" install -y "${pkgs[@]}" >>"$log" 2>&1; then
      _pt_bt_check $tests
    elif (( ${#_pt_bt_need[@]} )); then
      echo "$who: apt-get install failed; the end of $log:" >&2
      tail -n 20 "$log" >&2
      return 2
    fi
  fi

  if (( ${#_pt_bt_need[@]} )); then
    local sudo=""
    [ "$uid" = 0 ] || sudo="sudo "
    {
      echo "$who: cannot build: missing ${_pt_bt_need[*]}. Install with:"
      echo "    ${sudo}apt-get install -y ${pkgs[*]}"
      local t only_py=1
      for t in "${_pt_bt_need[@]}"; do [ "$t" = meson ] || [ "$t" = ninja ] || only_py=0; done
      [ $only_py = 1 ] && echo "or, without root: python3 -m pip install --user meson ninja"
    } >&2
    return 2
  fi
  if (( ${#_pt_bt_want[@]} )); then
    echo "$who: note: ${_pt_bt_want[*]} not found; building without it (apt-get install ${pkgs[*]} adds it)" >&2
  fi
  return 0
}
