#!/usr/bin/env bash
# The README's options table must be exactly what `ponytail config --markdown`
# prints from common/options.def (one table of every PONYTAIL_* option).
# $1: ponytail; $2: README.md
set -u
want=$("$1" config --markdown) || { echo "FAIL: ponytail config --markdown exited $?"; exit 1; }
got=$(awk '/^\| Option \| Values \| Default \| Description \|$/{on=1} on&&/^\|/{print; next} on{exit}' "$2")
if [ "$want" != "$got" ]; then
  echo "FAIL: README options table differs from 'ponytail config --markdown':"
  diff <(echo "$want") <(echo "$got")
  exit 1
fi
echo "README options table matches ($(echo "$want" | wc -l) lines)"
