#!/usr/bin/env python3
"""Issue 53's rows on a machine with two GPUs: stock against the default shim in one call.

Rows (--rows, default all; each arm its own process or torchrun job, the shim by LD_PRELOAD):
  tp_plan     torchrun 2 ranks, a random-weight Llama loaded with tp_plan="auto" (transformers'
              tensor parallel, NCCL), greedy generate: tokens equal across ranks; the shim with
              PONYTAIL_ATTN=off gives stock's tokens (only the allocator differs); the default
              shim's decode step per rank against stock's, and the same ratio on one GPU for a
              model of one rank's shapes (half the heads and MLP): goal within 10%
  device_map  one process, the model split over both GPUs by device_map="auto" (max_memory puts
              about half on each): tokens as above, decode step, both devices' pools used
  mp_cross    torch.multiprocessing: CUDA tensors made on GPU 0 (8-256 MiB, pooled under the
              shim) read on GPU 1 by another process and written back in place, checked by both
  nccl_bw     torchrun 2 ranks, NCCL all-reduce of 1 MiB - 1 GiB (the result checked), bus
              bandwidth stock and shim in alternating rounds: goal >= 0.98x stock at every size
              (or within stock's own round-to-round spread where that is wider)
Every shim process leaves its stats (shim_exit_stats.py), which name each pool's device: the
table shows where each torchrun rank pooled, and every rank must have pooled. vLLM with tensor_parallel_size=2 is
tests/gpu/serving/vllm_check.sh's stage tp2. Prints a table last (also OUT/multi_gpu.txt);
exit 1 on a failure, 2 when fewer than two GPUs are there (nothing run).
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs  # noqa: E402
import shim_exit_stats  # noqa: E402

ROWS = ("tp_plan", "device_map", "mp_cross", "nccl_bw")
SIZES_MIB = (1, 4, 16, 64, 256, 1024)
# The examples' model shape (examples/generate.py), fewer layers: the rows are about the
# allocator and the collectives, the decode step only needs every layer kind.
MODEL = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=4, head_dim=128, max_position_embeddings=8192)


# ---- verdicts (CPU-tested: tests/unit/tools/test_multi_gpu_verdicts.sh) ----------------------

def busbw_gbs(nbytes, secs, world):
    """NCCL's bus bandwidth of an all-reduce: 2 (n-1)/n of the bytes per rank, per second."""
    return 2.0 * (world - 1) / world * nbytes / secs / 1e9


def bw_verdict(stock, shim):
    """stock, shim: bus bandwidths of one size over rounds. (ratio of medians, spread, verdict):
    PASS at >= 0.98x, or within stock's own spread (max/min - 1 over its rounds) where that is
    wider than 2%; FAIL otherwise."""
    s, p = statistics.median(stock), statistics.median(shim)
    ratio = p / s
    spread = max(stock) / min(stock) - 1 if len(stock) > 1 else 0.0
    ok = ratio >= 0.98 or ratio >= 1 - spread
    return ratio, spread, "PASS" if ok else "FAIL"


def speedup_verdict(tp, one):
    """The per-rank decode speed-up under TP (stock step / shim step) against the one-GPU speed-up
    of a rank's shapes: PASS within 10% of it, or above."""
    return "PASS" if tp >= 0.9 * one else "FAIL"


def pooled_devices(stat):
    """The devices on which one process's pools hold allocations (its stats' alloc.devices)."""
    devs = (stat.get("alloc") or {}).get("devices") or []
    return sorted(d["device"] for d in devs if d.get("pooled_allocs"))


def rank_pools(stats, world):
    """The devices each torchrun rank pooled on (from the stats, which name the device of every
    pool), and the problem, if any: every rank must have pooled something. A rank that also
    allocates on another GPU is the program's choice, shown, not failed."""
    used = [u for u in (pooled_devices(s) for s in stats) if u]  # the launcher makes no CUDA allocation
    bad = [] if len(used) == world else ["%d of %d ranks pooled anything" % (len(used), world)]
    return used, bad


def token_digest(rows):
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def steps_p50(stamps):
    """Decode step p50 in ms from the per-step time stamps (s), the first step (prefill) left out."""
    d = [(b - a) * 1e3 for a, b in zip(stamps[1:], stamps[2:])]
    return statistics.median(d) if d else None


# ---- children: each runs on the GPU in its own process --------------------------------------

def child_mkmodel(a):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    for name, scale in (("full", 1), ("rank", 2)):  # rank: one TP rank's attention and MLP shapes
        cfg = dict(MODEL, num_attention_heads=MODEL["num_attention_heads"] // scale,
                   num_key_value_heads=MODEL["num_key_value_heads"] // scale,
                   intermediate_size=MODEL["intermediate_size"] // scale)
        m = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16)
        m.save_pretrained(os.path.join(a.models, name))


def child_gen(a):
    import torch
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    kw = dict(dtype=torch.bfloat16, attn_implementation="sdpa")
    if world > 1:
        try:  # transformers 5.17: tp_plan through DistributedConfig (the keyword is deprecated)
            from transformers.distributed.configuration_utils import DistributedConfig
            kw["distributed_config"] = DistributedConfig(tp_plan="auto")
        except ImportError:
            kw["tp_plan"] = "auto"
    elif a.split:
        # about half of the weights on each GPU
        kw.update(device_map="auto", max_memory={0: "%dMiB" % a.split, 1: "60GiB"})
    m = AutoModelForCausalLM.from_pretrained(a.model, **kw)
    if world == 1 and not a.split:
        m = m.to(a.device)
    dev = m.device
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(100, MODEL["vocab_size"] - 100, (a.batch, a.prompt), generator=g).to(dev)
    stamps = []
    devmap = getattr(m, "hf_device_map", None)
    # The GPUs the model runs on (device_map: both; a TP rank: its own only, so that no rank
    # opens a context on the other's GPU), synchronised at every step's stamp.
    # device_map="auto" names GPUs by their index ("cpu" and "disk" are not GPUs).
    gpus = sorted({v for v in devmap.values() if isinstance(v, int)}) if devmap else \
        ([dev.index or 0] if dev.type == "cuda" else [])

    class Stamp(LogitsProcessor):
        def __call__(self, input_ids, scores):
            for d in gpus:
                torch.cuda.synchronize(d)
            stamps.append(time.perf_counter())
            return scores

    out = None
    for _ in range(2):  # a warm-up, then the timed run
        stamps.clear()
        out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new, do_sample=False,
                         min_new_tokens=a.new, logits_processor=LogitsProcessorList([Stamp()]), pad_token_id=0)
    toks = out[:, a.prompt:].tolist()
    res = dict(ok=True, rank=rank, world=world, tokens=toks, digest=token_digest(toks), step_ms=steps_p50(stamps),
               devices=sorted({str(v) for v in devmap.values()}) if devmap else [str(dev)])
    with open(a.out.replace("{rank}", str(rank)), "w") as f:
        json.dump(res, f)


def _mp_consumer(q, done):
    import torch
    torch.cuda.set_device(1)
    while True:
        item = q.get()
        if item is None:
            break
        t, want = item
        local = t.to("cuda:1")  # a copy across the GPUs from the other process's memory
        got = float(local.double().sum().item())
        t.add_(1)  # in place, in the producer's memory on GPU 0
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        done.put((got == want, t.numel()))
        del t, local


def child_mp(a):
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_mp_consumer, args=(q, done))
    p.start()
    res = dict(ok=True, sizes=[])
    for mib in (8, 64, 256):
        n = mib * 2**20 // 4
        t = torch.arange(n, dtype=torch.float32, device="cuda:0") % 1024
        want = float(t.double().sum().item())
        q.put((t, want))
        read_ok, numel = done.get(timeout=120)
        back_ok = bool(torch.equal(t, (torch.arange(n, dtype=torch.float32, device="cuda:0") % 1024) + 1))
        res["sizes"].append(dict(mib=mib, read_on_gpu1=read_ok, written_back=back_ok))
        res["ok"] &= read_ok and back_ok and numel == n
    q.put(None)
    p.join(60)
    res["consumer_rc"] = p.exitcode
    res["ok"] &= p.exitcode == 0
    with open(a.out.replace("{rank}", "0"), "w") as f:
        json.dump(res, f)


def child_nccl(a):
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    res = dict(ok=True, rank=rank, sizes=[])
    for mib in SIZES_MIB:
        n = mib * 2**20 // 4
        x = torch.full((n,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        correct = bool((x == want).all().item())
        iters = max(5, min(200, 2048 // mib))
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            dist.all_reduce(x)
        e1.record()
        torch.cuda.synchronize()
        secs = e0.elapsed_time(e1) / 1e3 / iters
        res["sizes"].append(dict(mib=mib, correct=correct, us=secs * 1e6, busbw=busbw_gbs(n * 4, secs, world)))
        res["ok"] &= correct
        del x
    dist.destroy_process_group()
    with open(a.out.replace("{rank}", str(rank)), "w") as f:
        json.dump(res, f)


# ---- the check ------------------------------------------------------------------------------

class Check:
    def __init__(self, a):
        self.a, self.out, self.t0 = a, a.out, time.time()
        self.lines, self.fails = [], []

    def say(self, s=""):
        print(s, flush=True)
        self.lines.append(s)

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def run(self, tag, arm, args, torchrun=False, timeout=300):
        """One arm of a row: stock, shim (defaults) or shim_off (PONYTAIL_ATTN=off). The child's
        JSON results (one per rank), or [] on a failure (said in the table)."""
        env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", PYTHONUNBUFFERED="1")
        name = "%s.%s" % (tag, arm)
        if arm != "stock":
            env.update(shim_exit_stats.env(self.out, name), LD_PRELOAD=self.a.shim)
            if arm == "shim_off":
                env["PONYTAIL_ATTN"] = "off"
        res = os.path.join(self.out, name + ".rank{rank}.json")
        me = [sys.executable, os.path.abspath(__file__)]
        cmd = (["torchrun", "--standalone", "--nproc-per-node", "2"] + me[1:] if torchrun else me) + \
            args + ["--out", res]
        with open(os.path.join(self.out, name + ".out"), "w") as log:
            rc = procs.run_proc(cmd, env, log, min(timeout, max(30, self.left())), 20)
        got = []
        for r in range(2 if torchrun else 1):
            p = res.replace("{rank}", str(r))
            if os.path.exists(p):
                with open(p) as f:
                    got.append(json.load(f))
        if rc != 0 or not got or not all(g.get("ok") for g in got):
            self.fails.append("%s: rc %s" % (name, rc))
            self.say("  %-22s FAILED (rc %s; log %s.out)" % (name, rc, name))
            return []
        return got

    def stats(self, tag, arm):
        return shim_exit_stats.read(self.out, "%s.%s" % (tag, arm))

    def gen_rows(self, tag, res):
        """Tokens against stock and the steps of one generate row; the step ratio (stock / shim)."""
        st = res.get("stock")
        for arm, got in res.items():
            if not got:
                continue
            digests = {g["digest"] for g in got}
            steps = [g["step_ms"] for g in got]
            same = st and got[0]["digest"] == st[0]["digest"]
            note = "ranks agree" if len(digests) == 1 else "RANKS DIFFER"
            if len(digests) != 1:
                self.fails.append("%s.%s: ranks gave different tokens" % (tag, arm))
            if arm == "shim_off" and st and not same:
                self.fails.append("%s.shim_off: tokens differ from stock's with the allocator alone" % tag)
            self.say("  %-22s step p50 %s ms, tokens %s (%s), devices %s" % (
                "%s.%s" % (tag, arm), "/".join("%.2f" % s for s in steps), "ref" if arm == "stock"
                else ("identical" if same else "differ"), note, ",".join(got[0]["devices"])))
        if st and res.get("shim"):
            return statistics.median(g["step_ms"] for g in st) / statistics.median(g["step_ms"] for g in res["shim"])
        return None

    def gen_args(self, model):
        return ["gen", "--model", os.path.join(self.a.models, model), "--batch", str(self.a.batch),
                "--prompt", str(self.a.prompt), "--new", str(self.a.new)]

    def row_tp_plan(self):
        res = {arm: self.run("tp", arm, self.gen_args("full"), torchrun=True) for arm in ("stock", "shim_off", "shim")}
        tp = self.gen_rows("tp", res)
        for arm in ("shim_off", "shim"):
            used, bad = rank_pools(self.stats("tp", arm), 2)
            self.fails += ["tp.%s: %s" % (arm, b) for b in bad if res[arm]]
            self.say("  %-22s pooled devices per rank %s %s" % ("tp.%s" % arm, used, "; ".join(bad)))
        one = {arm: self.run("one", arm, self.gen_args("rank")) for arm in ("stock", "shim")}
        one_ratio = self.gen_rows("one", one)
        if tp and one_ratio:
            v = speedup_verdict(tp, one_ratio)
            self.say("  tp_plan speed-up per rank %.2fx, one GPU with a rank's shapes %.2fx: %s" % (tp, one_ratio, v))
            if v == "FAIL":
                self.fails.append("tp_plan: per-rank speed-up %.2fx below 90%% of one GPU's %.2fx" % (tp, one_ratio))

    def row_device_map(self):
        full = os.path.join(self.a.models, "full")
        weights = sum(os.path.getsize(os.path.join(full, f)) for f in os.listdir(full) if f.endswith(".safetensors"))
        gen = self.gen_args("full") + ["--split", str(max(1, weights // 2 // 2**20))]
        res = {arm: self.run("split", arm, gen) for arm in ("stock", "shim_off", "shim")}
        r = self.gen_rows("split", res)
        if res["stock"] and len(res["stock"][0]["devices"]) < 2:
            self.fails.append("split: device_map put the model on one device (%s)" % res["stock"][0]["devices"])
        for arm in ("shim_off", "shim"):
            s = self.stats("split", arm)
            devs = sorted({d for x in s for d in pooled_devices(x)})
            self.say("  %-22s pools on devices %s" % ("split.%s" % arm, devs))
            if res[arm] and devs != [0, 1]:
                self.fails.append("split.%s: pooled on %s, not on both GPUs" % (arm, devs))
        if r:
            self.say("  device_map decode speed-up %.2fx" % r)

    def row_mp_cross(self):
        for arm in ("stock", "shim"):
            got = self.run("mp", arm, ["mp"], timeout=180)
            if got:
                a = shim_exit_stats.alloc_sums(self.stats("mp", arm)) if arm == "shim" else {}
                self.say("  %-22s %s%s" % ("mp.%s" % arm, ", ".join(
                    "%d MiB read on GPU 1 %s, written back %s" % (s["mib"], s["read_on_gpu1"], s["written_back"])
                    for s in got[0]["sizes"]), "; IPC exports %s opens %s errors %s" % (
                    a.get("ipc_exports"), a.get("ipc_opens"), a.get("ipc_errors")) if a else ""))

    def row_nccl_bw(self):
        bw = {"stock": {}, "shim": {}}
        for rnd in range(self.a.rounds):
            for arm in (("stock", "shim") if rnd % 2 == 0 else ("shim", "stock")):
                got = self.run("nccl%d" % rnd, arm, ["nccl"], torchrun=True, timeout=180)
                for s in (got[0]["sizes"] if got else []):
                    bw[arm].setdefault(s["mib"], []).append(s["busbw"])
        self.say("  %8s %22s %22s %7s %7s" % ("MiB", "stock GB/s (rounds)", "shim GB/s (rounds)", "ratio", "spread"))
        for mib in SIZES_MIB:
            s, p = bw["stock"].get(mib), bw["shim"].get(mib)
            if not s or not p:
                self.say("  %8d NOT RUN" % mib)
                continue
            ratio, spread, v = bw_verdict(s, p)
            self.say("  %8d %22s %22s %7.3f %6.1f%% %s" % (mib, "/".join("%.1f" % x for x in s),
                                                       "/".join("%.1f" % x for x in p), ratio, spread * 100, v))
            if v == "FAIL":
                self.fails.append("nccl_bw %d MiB: %.3fx stock" % (mib, ratio))
        used, bad = rank_pools(self.stats("nccl0", "shim"), 2)
        self.say("  pooled devices per rank (shim) %s %s" % (used, "; ".join(bad)))
        self.fails += ["nccl_bw: " + b for b in bad]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("child", nargs="?", choices=("mkmodel", "gen", "mp", "nccl"))
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/multi-gpu"))
    p.add_argument("--shim", default=os.environ.get("SHIM", "build-gpu/shim/libponytail_shim.so"))
    p.add_argument("--models", default="/tmp/multi-gpu-models")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--budget", type=float, default=560)
    p.add_argument("--rounds", type=int, default=4, help="nccl_bw rounds (arms alternate)")
    p.add_argument("--model")
    p.add_argument("--device", default="cuda:0", help="gen without TP or split (cpu: a dry run)")
    p.add_argument("--split", type=int, default=0, help="gen: device_map='auto' with this many MiB on GPU 0")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=64)
    a = p.parse_args()
    if a.child:
        return {"mkmodel": child_mkmodel, "gen": child_gen, "mp": child_mp, "nccl": child_nccl}[a.child](a)
    os.makedirs(a.out, exist_ok=True)
    a.shim = os.path.abspath(a.shim)
    rows = [r for r in a.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        sys.exit("multi_gpu: unknown rows %s (rows: %s)" % (unknown, ", ".join(ROWS)))
    import torch
    if torch.cuda.device_count() < 2:
        print("multi_gpu: NOT RUN: needs 2 GPUs (found %d)" % torch.cuda.device_count())
        return 2
    c = Check(a)
    procs.raise_on_sigterm()
    try:
        if {"tp_plan", "device_map"} & set(rows) and not os.path.exists(os.path.join(a.models, "rank")):
            subprocess.run([sys.executable, os.path.abspath(__file__), "mkmodel", "--models", a.models], check=True)
        for r in rows:
            if c.left() < 60:
                c.say("== %s: NOT RUN (%.0f s left)" % (r, c.left()))
                continue
            c.say("== %s (%.0f s)" % (r, time.time() - c.t0))
            getattr(c, "row_" + r)()
    except procs.Stopped:
        c.say("stopped at the limit")
        c.fails.append("stopped before the end")
    c.say("multi_gpu: %s" % ("PASS" if not c.fails else "FAIL: " + "; ".join(c.fails)))
    with open(os.path.join(a.out, "multi_gpu.txt"), "w") as f:
        f.write("\n".join(c.lines) + "\n")
    return 1 if c.fails else 0


if __name__ == "__main__":
    sys.exit(main())
