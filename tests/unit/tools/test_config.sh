#!/usr/bin/env bash
# `ponytail config`: every option of common/options.def is listed, values set in
# the environment are shown as set, bad values warn and keep the default.
# $1: ponytail; $2: common/options.def
set -u
PT=$1 DEF=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
out=$(PONYTAIL_KV_MIN=2M PONYTAIL_LOG=bogus "$PT" config --json 2>"${TMPDIR:-/tmp}/cfg.err.$$") || fail "config --json exited $?"
python3 - "$out" "$DEF" <<'PY' || fail "config --json content"
import json, re, sys
opts = {o["name"]: o for o in json.loads(sys.argv[1])}
rows = re.findall(r"^PT_OPT\((\w+),", open(sys.argv[2]).read(), re.M)
assert rows and sorted(opts) == sorted("PONYTAIL_" + r for r in rows), (sorted(opts), rows)
kv = opts["PONYTAIL_KV_MIN"]
assert kv["set"] is True and kv["value"] in ("2M", "2097152"), kv
log = opts["PONYTAIL_LOG"]
assert log["set"] is False and log["value"] == "warn", log
PY
grep -q 'PONYTAIL_LOG="bogus" is not a valid value' "${TMPDIR:-/tmp}/cfg.err.$$" || fail "no warning for a bad value"
rm -f "${TMPDIR:-/tmp}/cfg.err.$$"
"$PT" config --help >/dev/null 2>&1 || fail "config --help"
"$PT" config --bogus >/dev/null 2>&1; [ $? = 2 ] || fail "config --bogus should exit 2"
[ "$fails" = 0 ] && echo "config: all checks passed" || exit 1
