#!/usr/bin/env bash
# The options table of docs/options.md must be exactly what `ponytail config --markdown` prints
# from common/options.def (one table of every PONYTAIL_* option), so that the page cannot drift
# from the options the shim parses: edit options.def, then paste the command's output.
# $1: ponytail; $2: docs/options.md
set -u
want=$("$1" config --markdown) || { echo "FAIL: ponytail config --markdown exited $?"; exit 1; }
got=$(awk '/^\| Option \| Values \| Default \| Description \|$/{on=1} on&&/^\|/{print; next} on{exit}' "$2")
if [ "$want" != "$got" ]; then
  echo "FAIL: the options table of $2 differs from 'ponytail config --markdown':"
  diff <(echo "$want") <(echo "$got")
  exit 1
fi
echo "options table of $(basename "$2") matches ($(echo "$want" | wc -l) lines)"
