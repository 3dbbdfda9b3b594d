#!/usr/bin/env bash
# The README is the user's page: it starts with the two commands (demo, tests), and documents
# every `ponytail` command that `ponytail --help` lists, each under its own heading, plus the
# build, options and known-limits sections. Catches a section lost in an edit.
# Usage: test_readme_sections.sh PONYTAIL README.md
set -uo pipefail
pt=$1 readme=$2 bad=0
fail() { echo "FAIL: $*"; bad=1; }
head -8 "$readme" | grep -q '^tools/demo.sh ' || fail "README does not start with tools/demo.sh"
head -8 "$readme" | grep -q '^tests/run.sh ' || fail "README's second command is not tests/run.sh"
cmds=$("$pt" --help 2>&1 | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1}')
[ -n "$cmds" ] || fail "no commands in ponytail --help"
for c in $cmds; do
  grep -q "^### \`ponytail $c" "$readme" || fail "no README section for ponytail $c"
done
for h in "## Quick start" "## Options" "## The \`ponytail\` CLI" "## Build and test" "## Known limits"; do
  grep -qF "$h" "$readme" || fail "README lacks '$h'"
done
[ $bad = 0 ] && echo "README sections: ok ($(echo $cmds | wc -w) commands)"
exit $bad
