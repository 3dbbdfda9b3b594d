# Sourced by the tests/gpu scripts (checks/, bench/, check_all.sh): builds the project for the GPU machine in build-gpu/
# (no cmocka or libelf there: -Dtests=disabled) and sets bld, shim and pt.
#   pt_gpu_build ROOT LOGDIR   -> exits the script with the log's tail on failure; SHIM_PREBUILT=PATH (relative
#       to the repo) uses that shim and builds nothing
#   pt_gpu_step DIR NAME SECONDS COMMAND...  -> one stage of a bench/*_suite.sh or check_all.sh call: COMMAND with
#       OUT=DIR/NAME, output in DIR/NAME.log, killed after SECONDS; prints its rc and time
pt_gpu_build() {
  local root=$1 logs=$2
  bld="$root/build-gpu"
  if [ -n "${SHIM_PREBUILT:-}" ]; then
    # A shim built on the CPU machine (same toolkit; it links only libc), carried with the call
    # (run(carry=["build-gpu/shim/libponytail_shim.so"])): keeps the kernels' nvcc build out of
    # device time. Scripts that need the ponytail CLI too carry build-gpu/tools/ponytail.
    shim="$root/$SHIM_PREBUILT"; pt="$bld/tools/ponytail"
    [ -f "$shim" ] || { echo "SHIM_PREBUILT=$SHIM_PREBUILT: no such file"; exit 1; }
    return 0
  fi
  if [ ! -f "$bld/build.ninja" ]; then
    meson setup "$bld" "$root" -Dtests=disabled >"$logs/meson-setup.log" 2>&1 \
      || { tail -30 "$logs/meson-setup.log"; exit 1; }
  fi
  ninja -C "$bld" >"$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
  shim="$bld/shim/libponytail_shim.so"
  pt="$bld/tools/ponytail"
}

pt_gpu_step() {
  local dir=$1 name=$2 secs=$3; shift 3
  mkdir -p "$dir/$name"
  local t0=$SECONDS
  OUT="$dir/$name" timeout -k 10 "$secs" "$@" >"$dir/$name.log" 2>&1
  echo "== $name: rc $? in $(( SECONDS - t0 )) s"
}
