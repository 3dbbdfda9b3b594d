#!/usr/bin/env bash
# CPU check (no GPU needed): every `tests/gpu/<path>` named in the repository's sources and docs
# (*.sh *.py *.md *.c *.cu *.h, meson.build) must exist, so that moving or renaming a GPU script
# cannot leave a stale reference behind. Mentions with a wildcard or a placeholder
# (tests/gpu/bench/*_suite.sh, tests/gpu/<name>) are skipped; build directories, .ext/ and
# gpu-out/ are not searched, nor raw result files (bench/raw/*.txt, which quote old paths as run).
# Usage: tests/gpu/check_paths.sh [ROOT]   Exit 0 when every path exists, 1 otherwise (each listed
# as file:line: path).
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root" || exit 2
bad=0 n=0
while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; path=${rest#*:}
  case $path in *'*'|*'<'|*'{'|*'$') continue ;; esac  # a glob or a placeholder follows
  path=${path%%[.,;:-]}   # sentence punctuation
  path=${path%%[.,;:-]}
  n=$((n + 1))
  if [ ! -e "$path" ]; then
    echo "$file:$line: $path"
    bad=1
  fi
done < <(grep -rnoE 'tests/gpu/[A-Za-z0-9_./-]*[*<{$]?' \
           --include='*.sh' --include='*.py' --include='*.md' --include='*.c' --include='*.cu' \
           --include='*.h' --include=meson.build \
           --exclude-dir=.git --exclude-dir='build*' --exclude-dir=.ext --exclude-dir=gpu-out \
           --exclude-dir=__pycache__ . | sed 's|^\./||')
if [ $bad -eq 0 ]; then
  echo "check_paths: $n mentions of tests/gpu/ paths, all exist"
else
  echo "check_paths: stale tests/gpu/ paths above (of $n mentions)"
fi
exit $bad
