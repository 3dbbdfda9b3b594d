#!/usr/bin/env bash
# CPU check: every raw output in bench/raw/ is cited (as raw/<name>, e.g. bench/raw/<name>) by a
# record in bench/records/ or by the index, bench/NOTES.md, so that a reader who walks from the
# index or a record reaches every raw file, and none is kept that nothing explains. Also fails
# when a raw output (.txt .json .png .svg) lies at bench/'s top level: raw outputs go to bench/raw/.
# Usage: bench/check_raw.sh [ROOT]   Exit 0 when all hold, 1 otherwise (each miss listed).
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root" || exit 2
bad=0 n=0
[ -d bench/raw ] || { echo "check_raw: no bench/raw/"; exit 1; }
citers=(bench/NOTES.md bench/records/*.md)
for f in bench/raw/*; do
  [ -e "$f" ] || continue
  name=${f#bench/raw/}
  n=$((n + 1))
  # The name as text (regex characters escaped), ended by a character no name holds or by a
  # sentence's full stop: raw/x.txt must not count as a citation of raw/x.t or of raw/x.
  if ! grep -qE "raw/$(printf '%s' "$name" | sed 's/[][\.*^$/]/\\&/g')\.?([^A-Za-z0-9_.-]|$)" "${citers[@]}"; then
    echo "$f: cited by no record (bench/records/*.md) and not by bench/NOTES.md"
    bad=1
  fi
done
for f in bench/*.txt bench/*.json bench/*.png bench/*.svg; do
  [ -e "$f" ] || continue
  echo "$f: a raw output at bench/'s top level: move it to bench/raw/ and cite it as bench/raw/${f#bench/}"
  bad=1
done
[ $bad -eq 0 ] && echo "check_raw: $n raw files in bench/raw/, each cited by a record or the index"
exit $bad
