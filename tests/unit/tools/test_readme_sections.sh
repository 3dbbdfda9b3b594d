#!/usr/bin/env bash
# The README is the user's first page and fits on two screens; the details live in docs/. This
# catches an edit that loses a section, lets the README grow back, leaves a command without its
# reference, or puts a figure in the results table without the record it comes from:
#   - the README starts with the two commands (demo, tests) and is at most 250 lines;
#   - it has its sections, in this order;
#   - every `ponytail` command that `ponytail --help` lists has its section in docs/cli.md;
#   - every row of the README's results table links a record in bench/records/ that exists, or
#     says the capability was not run or not measured;
#   - every page "Where the details live" must list is listed, and every docs/ page the README
#     names exists.
# Usage: test_readme_sections.sh PONYTAIL README.md docs/cli.md
set -uo pipefail
pt=$1 readme=$2 cli=$3 bad=0
root=$(dirname "$readme")
fail() { echo "FAIL: $*"; bad=1; }
head -8 "$readme" | grep -q '^tools/demo.sh ' || fail "README does not start with tools/demo.sh"
head -8 "$readme" | grep -q '^tests/run.sh ' || fail "README's second command is not tests/run.sh"
lines=$(wc -l <"$readme")
[ "$lines" -le 250 ] || fail "README is $lines lines (at most 250: move the details to docs/)"

# The sections, in order.
prev=0
for h in "## What it does" "## Install" "## Use it" "### With Hugging Face transformers" \
         "### With a server" "### Serving engines: vLLM, SGLang, TGI" "### With llama.cpp" "## Results" \
         "## Known limits" "## Build and test" "## Where the details live"; do
  n=$(grep -nxF "$h" "$readme" | head -1 | cut -d: -f1)
  if [ -z "$n" ]; then fail "README lacks '$h'"
  elif [ "$n" -le "$prev" ]; then fail "README's '$h' (line $n) is out of order"
  else prev=$n; fi
done

# The CLI reference.
cmds=$("$pt" --help 2>&1 | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1}')
[ -n "$cmds" ] || fail "no commands in ponytail --help"
for c in $cmds; do
  grep -qE "^### \`ponytail $c( |\`)" "$cli" || fail "no section for ponytail $c in $(basename "$cli")"
done

# The results table: the rows under "## Results", up to the next section.
rows=$(awk '/^## Results$/{on=1; next} /^## /{on=0} on && /^\| /' "$readme" | tail -n +2)
[ -n "$rows" ] || fail "README's results table has no rows"
while IFS= read -r row; do
  [ -n "$row" ] || continue
  recs=$(grep -oE '\]\(bench/records/[^)]*\)' <<<"$row" | sed 's/^](//; s/)$//')
  if [ -z "$recs" ]; then
    grep -qE 'not (yet )?run|not measured' <<<"$row" ||
      fail "results row links no bench/records/ file and does not say 'not run': ${row:0:60}"
  fi
  for r in $recs; do
    [ -f "$root/$r" ] || fail "results row links $r, which does not exist"
  done
done <<<"$rows"

# Where the details live.
where=$(awk '/^## Where the details live$/{on=1; next} /^## /{on=0} on' "$readme")
for d in docs/cli.md docs/options.md docs/architecture.md docs/allocator.md docs/hooks.md \
         docs/compatibility.md docs/prefill.md docs/sleep.md docs/install.md docs/limits.md \
         docs/results.md bench/NOTES.md tests/gpu/README.md; do
  grep -qF "\`$d\`" <<<"$where" || fail "'Where the details live' does not list $d"
done
for d in $(grep -oE 'docs/[a-z_]+\.md' "$readme" | sort -u); do
  [ -f "$root/$d" ] || fail "README names $d, which does not exist"
done

[ $bad = 0 ] && echo "README sections: ok ($lines lines, $(echo $cmds | wc -w) commands in $(basename "$cli"))"
exit $bad
