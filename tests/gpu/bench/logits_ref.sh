#!/usr/bin/env bash
# How far apart are the first decode steps' logits of different attention kernels on the same
# model and prompt? Runs examples/generate.py (B=8, prompt 4096, 4 new tokens) with torch's flash,
# math and cuDNN SDPA backends and under the shim (Ponytail's kernel), in bf16 and in fp16, then
# prints the max relative difference (max |a-b| / max |a|) of each pair's logits at the prefill
# (step 0: the shim runs with PONYTAIL_ATTN_PREFILL=0, so its prefill is torch's kernel, as
# stock's) and the first decode steps, and whether the token ids agree. Torch's
# own backends give the noise scale against which Ponytail's difference to torch flash is judged.
#   DTYPES="bf16 fp16" (default)   results in $OUT/logits_ref.txt
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-$root/gpu-out}"; mkdir -p "$out"
tmp=$(mktemp -d)
. "$root/tests/gpu/build.sh"
pt_gpu_build "$root" "$tmp"
for dt in ${DTYPES:-bf16 fp16}; do
  gen=(python3 "$root/examples/generate.py" --batch 8 --prompt 4096 --new-tokens 4 --logits-steps 4
       --dtype "$dt")
  for b in flash math cudnn; do
    TORCH_CUDNN_SDPA_DEPRIORITIZED=1 "${gen[@]}" --sdpa "$b" --logits-out "$tmp/$dt-$b.pt" \
      --json "$tmp/$dt-$b.json" >"$tmp/$dt-$b.log" 2>&1 || { echo "$dt $b failed:"; tail -3 "$tmp/$dt-$b.log"; }
  done
  LD_PRELOAD="$shim" PONYTAIL_ATTN_PREFILL=0 PONYTAIL_STATS=json PONYTAIL_STATS_FILE="$tmp/$dt-ponytail.stats.json" "${gen[@]}" \
    --logits-out "$tmp/$dt-ponytail.pt" --json "$tmp/$dt-ponytail.json" >"$tmp/$dt-ponytail.log" 2>&1 \
    || { echo "$dt ponytail failed:"; tail -3 "$tmp/$dt-ponytail.log"; }
done
python3 - "$tmp" ${DTYPES:-bf16 fp16} <<'PY' | tee "$out/logits_ref.txt"
import itertools, json, os, sys, torch
d, dtypes = sys.argv[1], sys.argv[2:]
print("max |a-b| / max |a| of the logits (B=8, prompt 4096); step 0 = prefill (not swapped),")
print("steps 1-3 = first decode steps; tokens: token ids of the 4 new tokens equal")
for dt in dtypes:
    names = [n for n in ("flash", "math", "cudnn", "ponytail") if os.path.exists(f"{d}/{dt}-{n}.pt")]
    L = {n: torch.load(f"{d}/{dt}-{n}.pt")["logits"] for n in names}
    T = {}
    for n in names:
        try:
            T[n] = json.load(open(f"{d}/{dt}-{n}.json"))["token_ids"]
        except Exception:
            T[n] = None
    try:
        st = json.load(open(f"{d}/{dt}-ponytail.stats.json"))
        swapped = sum(k["launches"] for k in st["kernels"]["top"] if k.get("action") == "swapped")
    except Exception:
        swapped = "?"
    print(f"{dt}: (ponytail run: {swapped} launches swapped)")
    for a, b in itertools.combinations(names, 2):
        r = [((x.float() - y.float()).abs().max() / x.float().abs().max()).item() for x, y in zip(L[a], L[b])]
        steps = "  ".join(f"step{i} {v:.2e}" for i, v in enumerate(r))
        print(f"  {a:>8} vs {b:<8}  {steps}  tokens {'same' if T[a] == T[b] and T[a] is not None else 'DIFF'}")
PY
