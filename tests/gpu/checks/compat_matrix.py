#!/usr/bin/env python3
"""The compatibility matrix (issue 15): each program runs stock and under the
shim's defaults, one process at a time on the GPU, and one table says whether
it ran, whether its outputs are identical, and what it cost.

  python3 tests/gpu/checks/compat_matrix.py --shim build-gpu/shim/libponytail_shim.so --out DIR
      [--rows hf_eager,hf_padded:stock+shim,...] [--arms stock,shim,same,...]

Arms (each row runs its DEFAULT_ARMS, stock,shim,same for most, unless --arms says otherwise):
  stock       no preload
  shim        LD_PRELOAD of the shim, every PONYTAIL_* at its default
  same        the shim with PONYTAIL_TORCH_SDPA=keep PONYTAIL_ATTN=off: the same attention
              path as stock, so its outputs must be bit-identical to stock's (what the
              allocator and interception may never change)
  stock_flash stock with TORCH_CUDNN_SDPA_DEPRIORITIZED=1: stock on the flash path (every SDPA
              call off cuDNN; the shim's default, auto, does that for decode calls and for the
              prefill calls Ponytail's prefill kernel takes)
  same_flash  the shim with PONYTAIL_TORCH_SDPA=flash PONYTAIL_ATTN=off: stock_flash's path
              (every SDPA call off cuDNN), nothing swapped, so its outputs must be
              bit-identical to stock_flash's
  expandable  the shim with PONYTAIL_TORCH_ALLOC=expandable (memory comparison)
  stock_expandable  stock with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  async       the shim with PONYTAIL_TORCH_ALLOC=async (memory comparison)
  aa, aa_flash  stock and stock_flash again: whether the program gives the same tokens twice
              (run by themselves after a same-path arm differs from stock / stock_flash)
  prefill     the shim with PONYTAIL_TORCH_SDPA=flash PONYTAIL_ATTN_PREFILL=1: prefill on torch's
              flash path, swapped for Ponytail's prefill kernel (issue 18)
  prefill_auto  the shim with PONYTAIL_ATTN_PREFILL=1 under the default policy: prefill moved
              from cuDNN to flash where the kernel takes it, and swapped. Its run (6 programs,
              0 regressions, bench/records/2026-12-02-prefill-default.md) made that option the
              default, so this arm now equals "shim"; it stays so that the run is named
  prefill_off the shim with PONYTAIL_ATTN_PREFILL=0: prefill on cuDNN, as before that default
  masked      the shim's defaults plus PONYTAIL_ATTN_MASKED=1: masked decode (padded batches,
              masked SDPA) on Ponytail's kernel (issue 17). Its run (7 programs, 0 regressions)
              made that option the default, so this arm now equals "shim"; it stays so that
              the masked decode run is named, whatever the default
The "shim" arm takes another attention path than stock where the policy sends SDPA to
flash (cuDNN stock): its outputs are compared too, and the table names both paths.

Memory: NVML's device-wide use, sampled every 20 ms by this driver while the program runs
(only one program uses the GPU at a time, so its peak is the program's plus the driver's
context), and torch's peak reserved where the program reports it. Time: TTFT (prefill) and
decode step p50 for the generate rows (examples/generate.py's JSON).
Every run's stdout/stderr, the shim's log and stats JSON land in --out; the table is printed
last and written to --out/compat-matrix.txt, the records to compat-matrix.json. Exit 1 when a
program that runs stock fails under the shim, or an identical-path output differs.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import shim_exit_stats

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # HERE is tests/gpu/checks
GEN = [sys.executable, os.path.join(ROOT, "examples", "generate.py")]
HF = ["--batch", "8", "--prompt", "2048", "--new-tokens", "128", "--warmup"]
COMPAT = os.path.join(HERE, "compat")

# name: (command, kind, timeout s, what attention stock / the shim run)
ROWS = {
    "hf_eager": (GEN + HF, "gen", 240, "HF eager, dynamic cache, equal-length batch"),
    "hf_padded": (GEN + HF + ["--pad", "0.5"], "gen", 240, "HF eager, left-padded batch"),
    "hf_b32": (GEN + ["--batch", "32", "--prompt", "2048", "--new-tokens", "1024", "--warmup"], "gen", 300,
               "HF eager B=32, prompt 2048, 1024 new tokens (the memory goal's workload)"),
    "hf_padded16": (GEN + ["--batch", "16", "--prompt", "2048", "--new-tokens", "128", "--warmup", "--pad", "0.5"],
                    "gen", 240, "HF eager, left-padded batch of 16 (the pool-overhead trace)"),
    "hf_static": (GEN + HF + ["--cache", "static"], "gen", 420,
                  "HF static cache (transformers compiles: inductor, CUDA-graph trees)"),
    "compile_ro": ([sys.executable, os.path.join(COMPAT, "compile_decode.py")], "prog", 300,
                   "torch.compile(mode='reduce-overhead') decode"),
    "cuda_graph": ([sys.executable, os.path.join(COMPAT, "graph_capture.py")], "prog", 120,
                   "torch.cuda.graph capture + replay, shared private pool"),
    "mp_share": ([sys.executable, os.path.join(HERE, "ipc_torch.py"), "--mode", "torch"], "rc", 120,
                 "torch.multiprocessing sharing a CUDA tensor"),
    "cont_batch": ([sys.executable, os.path.join(COMPAT, "cont_batch.py")], "prog", 300,
                   "transformers continuous batching (generate_batch, paged cache)"),
    # needs two GPUs (kind nvidia-h200-x2); skipped with one. NVLink multicast stays off.
    "torchrun_nccl": ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                       os.path.join(HERE, "tp_allreduce.py"), "--steps", "10", "--mib", "64"], "rc", 180,
                      "torchrun, 2 ranks: NCCL all-reduce + cudaIpc* of pooled buffers"),
}
NEEDS_GPUS = {"torchrun_nccl": 2}
ARMS = {
    "stock": {},
    "aa": {},  # stock again: whether the program is deterministic between processes at all
    "stock_flash": {"TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"},  # stock on the flash SDPA path
    "aa_flash": {"TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"},  # stock_flash again
    "shim": {"": "shim"},
    "same": {"": "shim", "PONYTAIL_TORCH_SDPA": "keep", "PONYTAIL_ATTN": "off"},
    # stock_flash's path under the shim, nothing swapped. PONYTAIL_TORCH_SDPA=flash, not the
    # default (auto): with PONYTAIL_ATTN=off auto keeps cuDNN for prefill, so its tokens differ
    # from stock_flash's.
    "same_flash": {"": "shim", "PONYTAIL_TORCH_SDPA": "flash", "PONYTAIL_ATTN": "off"},
    "expandable": {"": "shim", "PONYTAIL_TORCH_ALLOC": "expandable"},
    "async": {"": "shim", "PONYTAIL_TORCH_ALLOC": "async"},
    "masked": {"": "shim", "PONYTAIL_ATTN_MASKED": "1"},
    # prefill on torch's flash path with its launches swapped for Ponytail's prefill kernel
    # (issue 18): another attention path than stock, compared as such
    "prefill": {"": "shim", "PONYTAIL_TORCH_SDPA": "flash", "PONYTAIL_ATTN_PREFILL": "1"},
    # the same kernel reached through the default policy (auto moves prefill to flash for it);
    # the default since 2026-12-02, so equal to "shim"
    "prefill_auto": {"": "shim", "PONYTAIL_ATTN_PREFILL": "1"},
    "prefill_off": {"": "shim", "PONYTAIL_ATTN_PREFILL": "0"},
    "stock_expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
}
# Each row's arms unless --arms or the row's own list says otherwise. HF generate runs SDPA on cuDNN
# stock, and cuDNN's decode differs between two stock processes (2026-12-01, again 2026-12-07:
# bench/records/2026-12-07-compat-same-path.md), so those rows' bit-for-bit pair is the flash one
# (stock_flash against same_flash); `same` on cuDNN could only ever be "not judged" there.
DEFAULT_ARMS = {r: "stock,shim,stock_flash,same_flash" for r in ("hf_eager", "hf_padded", "hf_b32", "hf_padded16",
                                                                   "hf_static")}
# The arm whose outputs each arm's must equal bit for bit: the same attention path, so only the
# allocator and the interception differ (or nothing, for aa). Arms not listed are compared with
# stock and may differ (another attention path).
SAME_AS = {"aa": "stock", "aa_flash": "stock_flash", "same": "stock", "same_flash": "stock_flash"}
# Each reference arm's repeat: when a same-path arm differs from its reference, the reference
# is run once more (if the call did not already), and the difference counts against the shim
# only when the reference gives the same tokens twice. A program that is not deterministic
# between processes on that path cannot be judged bit for bit.
REPEAT = {"stock": "aa", "stock_flash": "aa_flash"}


class NvmlPeak:
    """Device-wide NVML memory in use, sampled from a thread."""

    def __init__(self):
        self.peak, self.h, self.stop = None, None, threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        except Exception:
            self.h = None

    def __enter__(self):
        if self.h is not None:
            self.t = threading.Thread(target=self.run, daemon=True)
            self.t.start()
        return self

    def run(self):
        while not self.stop.wait(0.02):
            used = self.nv.nvmlDeviceGetMemoryInfo(self.h).used
            self.peak = used if self.peak is None else max(self.peak, used)

    def __exit__(self, *a):
        self.stop.set()
        if self.h is not None:
            self.t.join()


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        return sum(1 for l in out.splitlines() if l.startswith("GPU "))
    except Exception:
        return 0


def run_one(row, arm, args, rep=0):
    cmd, kind, tmo, _ = ROWS[row]
    # A row may be listed more than once (repeated runs of one program): each repeat keeps its
    # own logs and stats, or the stats of earlier repeats would be summed into later ones.
    tag = "%s-%s" % (row, arm) + (".%d" % rep if rep else "")
    if row in NEEDS_GPUS and NEEDS_GPUS[row] > args.gpus:
        return dict(row=row, arm=arm, rc="needs %d GPUs" % NEEDS_GPUS[row], ok=False, skipped=True,
                    seconds=0.0, tail=[])
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (COMPAT, HERE, os.path.join(ROOT, "examples"),
                                                     env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(args.out, "inductor-cache"))
    for k, v in ARMS[arm].items():
        if k == "":
            env.update(shim_exit_stats.env(args.out, tag), LD_PRELOAD=args.shim)
            if args.trace:  # the allocation trace, for `ponytail replay` (tests/data/traces)
                env["PONYTAIL_TRACE"] = os.path.join(args.out, tag + ".trace.%p")
        else:
            env[k] = v
    full = list(cmd)
    jpath = os.path.join(args.out, tag + ".json")
    if kind == "gen":
        full += ["--json", jpath]
    t0 = time.time()
    with NvmlPeak() as nv, open(os.path.join(args.out, tag + ".out"), "w") as f:
        try:
            p = subprocess.run(full, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=tmo, cwd=ROOT)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    rec = dict(row=row, arm=arm, rc=rc, seconds=round(time.time() - t0, 1),
               nvml_peak_mib=nv.peak / 2**20 if nv.peak else None)
    text = open(os.path.join(args.out, tag + ".out"), errors="replace").read()
    rec["tail"] = text.strip().splitlines()[-3:] if text.strip() else []
    if kind == "gen" and os.path.exists(jpath):
        j = json.load(open(jpath))
        rec.update(digest=j.get("token_ids_sha256"), ttft_s=j.get("prefill_s"),
                   step_p50_ms=(j.get("decode_step_ms") or {}).get("p50"),
                   torch_peak_reserved_mib=(j.get("peak_reserved_bytes") or 0) / 2**20 or None,
                   attn_impl=(j.get("settings") or {}).get("attn_implementation"))
    elif kind == "prog":
        for line in text.splitlines():
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                rec.update(digest=r.get("digest"), torch_peak_reserved_mib=r.get("torch_peak_reserved_mib"),
                           prog=r)
        if rc == 77:
            rec["skipped"] = True
    rec["ok"] = rc == 0
    stats = shim_exit_stats.read(args.out, tag)
    if stats:  # (a stock arm leaves none and keeps its record free of the shim's keys)
        rec.update(shim_exit_stats.kernel_sums(stats))
    return rec


def fmt(v, f="%.0f"):
    return "-" if v is None else (f % v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v))


def repeats_due(row, recs):
    """The repeat arms due in row now (needs_repeat of each of its same-path records), each once,
    whichever order the row's arms ran in (a reference may run after its same-path arm)."""
    due = []
    for r in recs:
        rep = needs_repeat(r, recs) if r["row"] == row else None
        if rep and rep not in due:
            due.append(rep)
    return due


def needs_repeat(rec, recs):
    """The repeat arm to run after rec (see REPEAT), or None: rec is a same-path arm that ran,
    its reference ran in the same row with another digest, and the repeat has not run there."""
    ref_arm = SAME_AS.get(rec["arm"])
    rep_arm = REPEAT.get(ref_arm or "")
    if not rep_arm or rec["arm"] == rep_arm or not rec.get("ok") or rec.get("digest") is None:
        return None
    # the reference's last run, as judge() reads it
    ref = next((x for x in reversed(recs) if x["row"] == rec["row"] and x["arm"] == ref_arm), None)
    if (not ref or not ref.get("ok") or ref.get("digest") == rec["digest"]
            or any(x["row"] == rec["row"] and x["arm"] == rep_arm and not x.get("skipped") for x in recs)):
        return None
    return rep_arm


def judge(recs):
    """The table's lines, the regressions and the differences that could not be judged. A
    same-path arm whose tokens differ from its reference's is a regression only when the
    reference gave the same tokens twice (its REPEAT arm ran and matched); when the repeat did
    not run, the difference is listed as not judged, never as a pass or a failure."""
    bad, unjudged = [], []
    lines = ["| row | arm | runs | output | TTFT s | step p50 ms | torch peak reserved MiB "
             "| NVML peak MiB | pool peak MiB | attention (swapped; fallbacks) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    by = {(r["row"], r["arm"]): r for r in recs}
    for r in recs:
        st = by.get((r["row"], "stock"))
        if r.get("skipped"):
            runs = "skip (%s)" % r["rc"]
        else:
            runs = "yes" if r["ok"] else "NO (rc %s)" % r["rc"]
        same = "-"
        ref_arm = SAME_AS.get(r["arm"], "stock")
        ref = by.get((r["row"], ref_arm))
        if r["arm"] != "stock" and ref and ref.get("ok") and r.get("ok"):
            if r.get("digest") is None or ref.get("digest") is None:
                same = "n/a (rc only)"
            elif r["digest"] == ref["digest"]:
                same = "identical to " + ref_arm
            else:
                same = "differs from " + ref_arm
                if r["arm"] in SAME_AS and r["arm"] not in REPEAT.values():
                    aa = by.get((r["row"], REPEAT.get(ref_arm, "")))
                    if aa and aa.get("ok") and aa.get("digest") is not None and aa.get("digest") != ref.get("digest"):
                        same += " (%s differs from itself too)" % ref_arm
                    elif not aa or not aa.get("ok") or aa.get("digest") is None:
                        why = ("did not run" if not aa or aa.get("skipped")
                               else "gave no tokens" if aa.get("ok") else "failed (rc %s)" % aa.get("rc"))
                        same += " (not judged: %s's repeat %s)" % (ref_arm, why)
                        unjudged.append("%s/%s: output differs from %s; %s %s, so whether %s gives the same "
                                        "tokens twice is unknown" % (r["row"], r["arm"], ref_arm,
                                                                     REPEAT.get(ref_arm), why, ref_arm))
                    else:
                        bad.append("%s/%s: output differs from %s on the same attention path"
                                   % (r["row"], r["arm"], ref_arm))
                elif r["arm"] in REPEAT.values():
                    same += " (the program is not deterministic on this path)"
                else:
                    same += " (other attention path)"
        shim_arm = "" in ARMS.get(r["arm"], {})
        if shim_arm and st and st.get("ok") and not r.get("ok") and not r.get("skipped"):
            bad.append("%s/%s: runs stock, fails under the shim (rc %s)" % (r["row"], r["arm"], r["rc"]))
        fb = "; ".join("%s x%d" % (k, v) for k, v in sorted((r.get("fallback_reasons") or {}).items()))
        shimmed = "" in ARMS.get(r["arm"], {})
        att = "-" if not shimmed else "%s swapped%s" % (r.get("swapped", 0), "; " + fb if fb else "")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["row"], r["arm"], runs, same, fmt(r.get("ttft_s"), "%.3f"), fmt(r.get("step_p50_ms"), "%.2f"),
            fmt(r.get("torch_peak_reserved_mib")), fmt(r.get("nvml_peak_mib")),
            fmt(r.get("pool_peak_physical_mib")) if shimmed else "-", att))
    return lines, bad, unjudged


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shim", required=True)
    ap.add_argument("--out", default="gpu-out/compat")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--arms", default="", help="arms of every row (default: each row's DEFAULT_ARMS)")
    ap.add_argument("--trace", action="store_true", help="shim arms record PONYTAIL_TRACE files")
    ap.add_argument("--deadline", type=float, default=0, help="seconds: start no run after this")
    args = ap.parse_args()
    args.shim = os.path.abspath(args.shim)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    args.gpus = gpu_count()
    recs = []
    seen = {}  # (row, arm) -> runs so far

    def deadline_passed():
        return args.deadline and time.time() - t_start > args.deadline

    def run(row, arm, note=""):
        rep = seen.get((row, arm), 0)
        seen[(row, arm)] = rep + 1
        rec = run_one(row, arm, args, rep)
        recs.append(rec)
        print("%-11s %-10s rc %-7s %5.1fs %s%s" % (row, arm, rec["rc"], rec["seconds"],
                                                   " | ".join(rec["tail"][-1:]), note), flush=True)
        return rec

    for spec in [r for r in args.rows.split(",") if r]:
        row, _, own = spec.partition(":")  # "row:arm+arm" gives a row its own arms
        if row not in ROWS:
            ap.error("unknown row %r (rows: %s)" % (row, ", ".join(ROWS)))
        arms = own.split("+") if own else (args.arms or DEFAULT_ARMS.get(row, "stock,shim,same")).split(",")
        for arm in [a for a in arms if a]:
            if arm not in ARMS:
                ap.error("unknown arm %r (arms: %s)" % (arm, ", ".join(ARMS)))
            if deadline_passed():
                recs.append(dict(row=row, arm=arm, rc="not run (deadline)", ok=False, skipped=True))
                continue
            if arm in REPEAT.values() and any(x["row"] == row and x["arm"] == arm and not x.get("skipped")
                                              for x in recs):
                continue  # ran already in this row, as a repeat
            run(row, arm)
            # A same-path arm that differs from its reference: the reference runs again at once,
            # before the next row (a repeat left to the end of the call is the first thing a
            # deadline cuts, and without it the difference cannot be judged; see REPEAT).
            for rep_arm in repeats_due(row, recs):
                ref_arm = next(k for k, v in REPEAT.items() if v == rep_arm)
                if deadline_passed():
                    print("%s: differs from %s on the same path; no time left to run %s (deadline)"
                          % (row, ref_arm, rep_arm))
                    break
                run(row, rep_arm, " (repeat of %s: a same-path arm differs from it)" % ref_arm)
    json.dump(recs, open(os.path.join(args.out, "compat-matrix.json"), "w"), indent=1)

    lines, bad, unjudged = judge(recs)
    table = "\n".join(lines)
    with open(os.path.join(args.out, "compat-matrix.txt"), "w") as f:
        f.write(table + "\n" + "\n".join(bad + ["not judged: " + u for u in unjudged]) + "\n")
    print(table)
    for b in bad:
        print("FAIL " + b)
    for u in unjudged:
        print("NOT JUDGED " + u)
    print("compat matrix: %d runs, %d regressions%s" % (
        len(recs), len(bad), ", %d same-path differences not judged (repeat not run)" % len(unjudged) if unjudged else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
