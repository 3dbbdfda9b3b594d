#!/usr/bin/env bash
# CPU check: every bench/records/<date>-<slug>.md named in a source or document exists, and every
# record starts with its fixed header (# title, Date:, Issue:, Machine:, Command:) and has
# "## Prediction" and "## Outcome". Usage: bench/check_records.sh [ROOT]   Exit 0 when all hold.
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
[ $bad -eq 0 ] && echo "check_records: $n mentions of records, all exist; $(ls bench/records/*.md | wc -l) records well formed"
exit $bad
