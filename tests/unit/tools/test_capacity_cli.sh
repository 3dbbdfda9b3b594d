#!/usr/bin/env bash
# CLI tests of `ponytail capacity`: exit codes, usage on stderr, the table and
# --json. $1: a ponytail with the capacity subcommand; $2: the source root.
set -u
PT=$1 SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect RC ARGS...: runs `capacity ARGS`, checks the exit status.
expect() {
  local want=$1; shift
  "$PT" capacity "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: capacity $* -> exit $rc, want $want"; cat "$tmp/err"; fails=$((fails + 1)); return 1
  fi
}
has() { # has FILE TEXT
  if ! grep -qF -- "$2" "$tmp/$1"; then
    echo "FAIL: $1 lacks '$2'"; cat "$tmp/$1"; fails=$((fails + 1))
  fi
}
usage_on_stderr() { has err "usage: ponytail capacity"; [ -s "$tmp/out" ] && { echo "FAIL: stdout not empty"; fails=$((fails + 1)); }; }

expect 2 && usage_on_stderr
expect 2 --layers x --hidden 4096 --seq 1 && usage_on_stderr && has err "bad value 'x'"
expect 2 --layers 0 --hidden 4096 --seq 1 && usage_on_stderr
expect 2 --layers -3 --hidden 4096 --seq 1 && usage_on_stderr
expect 2 --layers 32 --hidden 4096 --seq 1 --bogus 3 && usage_on_stderr && has err "unknown flag '--bogus'"
expect 2 --layers 32 --hidden 4096 --seq && usage_on_stderr && has err "--seq needs a value"
expect 2 --layers 32 --hidden 4096 && usage_on_stderr && has err "sequence length is missing"
expect 2 --layers 32 --seq 8 && usage_on_stderr && has err "head geometry is missing"
expect 2 --layers 32 --hidden 4096 --seq 8 --dtype int4 && usage_on_stderr && has err "unknown dtype"
expect 2 --layers 32 --hidden 4096 --seq 8 --gpu-mem 80G && usage_on_stderr && has err "--gpu-mem needs --weights"
expect 2 --layers 32 --hidden 4096 --seq 8 --weights 8G && usage_on_stderr
expect 2 --layers 32 --hidden 4096 --seq 8 --gpu-mem 80Q --weights 1G && usage_on_stderr && has err "bad --gpu-mem"
expect 2 --layers 32 --hidden 4096 --seq 8 --gpu-mem 80G --weights 1G --headroom 1.5 && usage_on_stderr
expect 2 --layers 32 --hidden 4096 --seq 8 stray && usage_on_stderr
expect 2 --layers 999999999999 --hidden 99999999999 --seq 99999999 && has err "overflows 64 bits"
expect 1 --model-config "$tmp/does-not-exist.json" --seq 8 && has err "does-not-exist.json"
echo '{"num_hidden_layers": 2,' >"$tmp/bad.json"
expect 1 --model-config "$tmp/bad.json" --seq 8 && has err "line 2 col 1: object key"

expect 0 --help && for f in --model-config --layers --hidden --heads --kv-heads --head-dim --seq --batch \
    --dtype --gpu-mem --weights --headroom --json GiB; do has out "$f"; done

# The example: 8,589,934,592 bytes (8.0 GiB).
expect 0 --layers 32 --hidden 4096 --batch 8 --seq 2048 --dtype fp16 && has out "8,589,934,592 bytes" && has out "8.0 GiB"
expect 0 --layers=32 --hidden=4096 --batch=8 --seq=2048 --dtype=fp16 --json && has out '"kv_bytes": 8589934592' \
  && has out '"per_token_bytes": 524288'
# W from the bundled config, 24 GiB, 10% headroom, 1628 MiB weights: 160 × 4096 tokens.
expect 0 --model-config "$SRC/examples/llama-1b-config.json" --seq 4096 --batch 8 --gpu-mem 24GiB \
  --weights 1628M --json && has out '"max_batch": 160' && has out '"max_seq": 81961' && has out '"kv_bytes": 1073741824'
expect 0 --model-config "$SRC/examples/llama-1b-config.json" --seq 4096 --batch 8 --gpu-mem 24G --weights 1628M \
  && has out "largest batch at seq 4096" && has out "bf16"
# weights larger than the GPU: zero, said plainly
expect 0 --layers 2 --hidden 64 --seq 8 --gpu-mem 1G --weights 2G --json && has out '"max_batch": 0'

[ "$fails" = 0 ] && echo "all capacity CLI checks passed"
exit $((fails > 0))
