#!/usr/bin/env bash
# `ponytail sleep` / `ponytail wake` / `ponytail stats` against a process under
# the shim (the fake CUDA; preload_sleep's "serve" scenario): the answers, the
# exit statuses, and every kind of bad request refused with one line while the
# process runs on.
#   sleep_cli.sh PONYTAIL PRELOAD_SLEEP DIR   (environment: the preload test's)
set -u
pt=$1 prog=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
fail=0
check() { # DESCRIPTION EXPECTED_RC PATTERN COMMAND...
  local what=$1 want=$2 pat=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  last=$out
  if [ "$rc" != "$want" ] || ! grep -qE "$pat" <<<"$out"; then
    echo "FAIL: $what: rc $rc (want $want), output:"; echo "$out" | sed 's/^/    /'; fail=1
  else
    echo "ok: $what"
  fi
}
# Stale sockets in the control directory (processes that ended by _exit or a signal): the target's
# control thread removes an old one nothing listens on, and leaves a live one and a young one.
ctl=${PONYTAIL_CONTROL_DIR:?}
rm -rf "$ctl" && mkdir -m 700 -p "$ctl"
mksock='import socket,sys,time
s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])
if sys.argv[2] == "live": s.listen(1); time.sleep(30)'
python3 -c "$mksock" "$ctl/999990.sock" dead && touch -h -d "2 minutes ago" "$ctl/999990.sock"
python3 -c "$mksock" "$ctl/999991.sock" dead
python3 -c "$mksock" "$ctl/999992.sock" live </dev/null >/dev/null 2>&1 &
live=$!
for _ in $(seq 100); do [ -S "$ctl/999992.sock" ] && break; sleep 0.02; done
touch -h -d "2 minutes ago" "$ctl/999992.sock"
"$prog" serve "$dir" &
runner=$!
for _ in $(seq 500); do [ -s "$dir/ready" ] && break; sleep 0.02; done
pid=$(cat "$dir/ready" 2>/dev/null)
[ -n "$pid" ] || { echo "FAIL: the target did not start"; kill $runner; exit 1; }

for _ in $(seq 100); do [ -e "$ctl/999990.sock" ] || break; sleep 0.02; done
if [ ! -e "$ctl/999990.sock" ] && [ -S "$ctl/999991.sock" ] && [ -S "$ctl/999992.sock" ]; then
  echo "ok: stale socket removed; a young one and a live one left"
else echo "FAIL: stale sockets: $(ls "$ctl" | tr '\n' ' ')"; fail=1; fi
kill $live 2>/dev/null
check "sleep" 0 "asleep \(copy\)" "$pt" sleep "$pid"
# A copying sleep says where the bytes went, and never that they were dropped.
if grep -q "kept .* GiB in" <<<"$last" && ! grep -q "dropped" <<<"$last"; then echo "ok: sleep says kept, not dropped"
else echo "FAIL: sleep's answer:"; echo "$last" | sed 's/^/    /'; fail=1; fi
check "status while asleep" 0 "asleep \(copy\) for .* 1 thread\(s\) waiting" "$pt" sleep --status "$pid"
check "second sleep" 1 "process $pid: already asleep" "$pt" sleep "$pid"
check "stats while asleep" 0 "\"sleeps\":1,.*\"asleep_bytes\":[1-9]" "$pt" stats --json "$pid"
check "wake" 0 "mapped .* back at the same addresses" "$pt" wake "$pid"
grep -q "freeing   the host memory that held them now" <<<"$last" && echo "ok: wake returns before the host memory is freed" ||
  { echo "FAIL: wake's answer:"; echo "$last" | sed 's/^/    /'; fail=1; }
check "status after wake" 0 "the last wake's host memory was released in [0-9.]+ s" "$pt" sleep --status "$pid"
# Every byte came back (the target checks its patterns on request).
touch "$dir/check"
for _ in $(seq 500); do [ -s "$dir/checked" ] && break; sleep 0.01; done
[ "$(cat "$dir/checked" 2>/dev/null)" = intact ] && echo "ok: bytes intact after the wake" ||
  { echo "FAIL: bytes after the wake: $(cat "$dir/checked" 2>/dev/null || echo 'no answer')"; fail=1; }
check "second wake" 1 "process $pid: not asleep" "$pt" wake "$pid"
check "sleep --discard --json" 0 '^\{"ok": true, "state": "asleep", "mode": "discard"' "$pt" sleep --discard --json "$pid"
check "wake --json" 0 '^\{"ok": true, "state": "awake"' "$pt" wake --json "$pid"
check "status while awake" 0 "awake; Ponytail's pool holds" "$pt" sleep --status "$pid"
# Its statistics now, as PONYTAIL_STATS writes them at exit: the table names the process and
# counts its launches; the JSON counts the two sleeps and wakes above, and nothing asleep.
check "stats" 0 "^ponytail\[$pid\]: stats" "$pt" stats "$pid"
check "stats: launches counted" 0 "kernels: [0-9]+ registered, [1-9][0-9]* launches" "$pt" stats "$pid"
check "stats --json" 0 "\"pid\":$pid,.*\"sleeps\":2,.*\"wakes\":2,.*\"asleep_bytes\":0" "$pt" stats --json "$pid"
# --prepare: host memory for the next sleep, got while the process runs; a second finds it
# there; the sleep after only copies (the memory "kept ready"); refused while asleep.
check "prepare" 0 "prepared in .*; the process runs on" "$pt" sleep --prepare "$pid"
check "second prepare" 0 "\(none missing\)" "$pt" sleep --prepare "$pid"
check "stats after prepare" 0 "alloc: sleep: .* host memory kept for the next sleep [1-9][0-9.]* MiB \(2 prepare" "$pt" stats "$pid"
check "sleep after prepare" 0 "in host memory kept ready" "$pt" sleep "$pid"
check "prepare while asleep" 1 "process $pid: asleep .*prepare is for a process that runs" "$pt" sleep --prepare "$pid"
check "wake after prepare" 0 "mapped .* back at the same addresses" "$pt" wake "$pid"
check "prepare --json" 0 '^\{"ok": true, "state": "awake", "mode": "prepare"' "$pt" sleep --prepare --json "$pid"
check "unprepare" 0 "freed [0-9.]+ GiB of host memory held for its next sleep" "$pt" sleep --unprepare "$pid"
check "stats after unprepare" 0 "host memory kept for the next sleep 0.0 MiB" "$pt" stats "$pid"
check "prepare --discard" 2 "one of --discard, --prepare, --unprepare, --status at a time" "$pt" sleep --prepare --discard "$pid"
check "prepare --status" 2 "one of --discard, --prepare" "$pt" sleep --status --prepare "$pid"
check "stats of a dead pid" 1 "no process with pid 999999" "$pt" stats 999999
check "dead pid" 1 "no process with pid 999999" "$pt" sleep 999999
env -u LD_PRELOAD sleep 30 &
plain=$!
# Until it has exec'd, the child is this shell's fork, with the shim mapped: wait for the exec.
for _ in $(seq 100); do grep -q libponytail "/proc/$plain/maps" 2>/dev/null || break; sleep 0.02; done
check "no shim" 1 "process $plain does not run under Ponytail" "$pt" sleep "$plain"
kill "$plain" 2>/dev/null
check "not a pid" 2 "not a process id: x" "$pt" wake x
check "no pid" 2 "expected one PID" "$pt" sleep
check "stats: no pid" 2 "expected one PID" "$pt" stats
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  check "another user" 1 "belongs to another user" setpriv --reuid=65534 --regid=65534 --clear-groups "$pt" sleep "$pid"
fi
# The process ran on through all of it: it checks its bytes and exits 0.
touch "$dir/stop"
wait $runner; rc=$?
[ "$rc" = 0 ] || { echo "FAIL: the target exited $rc"; fail=1; }
[ "$fail" = 0 ] && echo "sleep_cli: all checks passed"
exit $fail
