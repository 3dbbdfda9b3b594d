#!/usr/bin/env bash
# CPU check: every bench/records/<date>-<slug>.md named in a source or document exists, every
# record starts with its fixed header (# title, Date:, Issue:, Machine:, Command:) and has
# "## Prediction" and "## Outcome", and every record has exactly one line in the index (the table
# under "## Index of records" in bench/NOTES.md: question | answer | record, none empty), so that
# the index answers for every record and a new record cannot be left out of it.
# Usage: bench/check_records.sh [ROOT]   Exit 0 when all hold.
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root" || exit 2
bad=0 n=0
while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; name=${rest#*:}
  n=$((n + 1))
  [ -e "bench/records/$name" ] || { echo "$file:$line: bench/records/$name missing"; bad=1; }
done < <(grep -rnoE '20[0-9]{2}-[01][0-9]-[0-3][0-9]-[a-z0-9-]+\.md' \
           --include='*.sh' --include='*.py' --include='*.md' --include='*.c' --include='*.cu' \
           --include='*.h' --include='*.def' --include=meson.build \
           --exclude-dir=.git --exclude-dir='build*' --exclude-dir=.ext --exclude-dir=gpu-out . |
         sed 's|^\./||')
for f in bench/records/*.md; do
  head -6 "$f" | awk 'NR==1 && !/^# /{e=1} NR==3 && !/^Date: /{e=1} NR==4 && !/^Issue: /{e=1}
    NR==5 && !/^Machine: /{e=1} NR==6 && !/^Command: /{e=1} END{exit e}' || { echo "$f: header"; bad=1; }
  grep -q '^## Prediction$' "$f" && grep -q '^## Outcome$' "$f" || { echo "$f: sections"; bad=1; }
done
# The index's rows: from its heading to the next heading.
index=$(awk '/^## Index of records$/{on=1; next} /^## /{on=0} on && /^\| /' bench/NOTES.md)
[ -n "$index" ] || { echo "bench/NOTES.md: no \"## Index of records\" table"; bad=1; }
while IFS= read -r row; do
  case $row in '| question |'*|'|---'*) continue ;; esac
  # Three cells, none empty: | question | answer | record |
  printf '%s\n' "$row" | awk -F' [|] ' '{ sub(/^[|] /, ""); sub(/ [|]$/, "") } NF != 3 || $1 == "" || $2 == "" || $3 == "" { exit 1 }' ||
    { echo "bench/NOTES.md index: not question | answer | record: ${row:0:80}"; bad=1; }
done <<<"$index"
for f in bench/records/*.md; do
  c=$(printf '%s\n' "$index" | grep -cF "(records/${f#bench/records/})")
  [ "$c" = 1 ] || { echo "$f: $c lines in the index of bench/NOTES.md (one wanted)"; bad=1; }
done
[ $bad -eq 0 ] && echo "check_records: $n mentions of records, all exist; $(ls bench/records/*.md | wc -l) records well formed, each on one line of the index"
exit $bad
