#!/usr/bin/env bash
# Triage of shim behaviour on a real PyTorch run: stock determinism, pass-through,
# and the shim's features one at a time, with each run's log tail and a logits
# comparison. Usage: tests/gpu/bench/triage.sh; results in $OUT (or ./gpu-out).
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"; tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
gen=(python3 "$root/examples/generate.py" --batch "${B:-4}" --prompt "${P:-256}" --new-tokens "${N:-32}")
run() { # name env...
  local n=$1; shift
  env "$@" "${gen[@]}" --json "$tmp/$n.json" --logits-out "$tmp/$n.pt" >"$tmp/$n.log" 2>&1
  echo "== $n rc=$?"; grep -v "^\s*$" "$tmp/$n.log" | tail -${TAIL:-6}
}
PT="LD_PRELOAD=$shim"
PASS=("$PT" PONYTAIL_POOL=0 PONYTAIL_ATTN=off PONYTAIL_TORCH_SDPA=keep PONYTAIL_TORCH_ALLOC=keep)
run stock1
run stock2
run pass1 "${PASS[@]}"
run pass2 "${PASS[@]}"
run flash TORCH_CUDNN_SDPA_DEPRIORITIZED=1
run pass_flash "${PASS[@]}" TORCH_CUDNN_SDPA_DEPRIORITIZED=1
run attn "$PT" PONYTAIL_LOG=info PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/attn.stats.json"
run verify "$PT" PONYTAIL_ATTN=verify PONYTAIL_LOG=info PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/verify.stats.json"
python3 - "$tmp" <<'PY'
import json, os, sys, torch
d = sys.argv[1]
def L(n):
    p = os.path.join(d, n + ".pt")
    return torch.load(p)["logits"] if os.path.exists(p) else None
def sha(n):
    p = os.path.join(d, n + ".json")
    return json.load(open(p))["token_ids_sha256"][:10] if os.path.exists(p) else "-"
for a, b in [("stock1","stock2"),("stock1","pass1"),("stock2","pass2"),("pass1","pass2"),("flash","pass_flash"),("flash","attn"),("flash","verify")]:
    la, lb = L(a), L(b)
    rel = max(((x-y).abs().max()/x.abs().max()).item() for x, y in zip(la, lb)) if la and lb else float("nan")
    if la and lb:
        print("   per step:", " ".join(f"{((x-y).abs().max()/x.abs().max()).item():.1e}" for x, y in zip(la, lb)))
    print(f"{a:>8} vs {b:<15} tokens {sha(a)} {sha(b)} {'same' if sha(a)==sha(b) else 'DIFF'}  logits max rel {rel:.2e}")
PY
for f in "$tmp"/*.stats.json; do python3 -c "import json,sys; s=json.load(open(sys.argv[1])); k=s['kernels']; print(sys.argv[1].split('/')[-1], 'hooks', s.get('hooks'), 'fallbacks', k.get('fallback_reasons')); [print('  ', t['launches'], t['action'], t['name'][:90]) for t in k['top'] if t['action']!='passthrough']" "$f"; done
grep -h "ponytail\[" "$tmp"/*.log | sed "s/ponytail\[[0-9]*\]//" | sort | uniq -c | sort -rn | head -20
tar czf "$out/triage.tgz" -C "$tmp" .
