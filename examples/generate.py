#!/usr/bin/env python3
"""Ponytail's standard A/B workload: greedy generation with a random-weight
Hugging Face Llama built from a config (nothing is downloaded).

Defaults are workload W (16 layers, hidden 2048, 16 heads, 4 KV heads,
head_dim 128, vocab 32000, intermediate 5632, bf16). Runs the same with or
without the Ponytail shim preloaded; `ponytail bench` runs it once each way.

What is measured (host clock, time.perf_counter):
  * prefill_s: from the call of model.generate() to the first call of the
    logits processor, which runs after the prefill forward produced the first
    logits. That one call synchronises the device once, so prefill_s covers the
    prefill's GPU work (time to first token).
  * decode_step_ms: differences between successive calls of the logits
    processor, i.e. the period of one decode step (forward of one token for
    the whole batch plus HF's per-step host work). No extra sync is added:
    HF's greedy loop already waits for the device every step when it checks
    whether all sequences finished. decode_profile_ms: the mean step of each
    128 consecutive steps, in order (also in a run cut short by SIGTERM).
  * total_s: the whole generate() call, ended with a device synchronize;
    tokens_per_s = batch * new_tokens / total_s. main_thread_cpu_s and
    process_cpu_s: CPU time over the same call (time spent preempted is in
    total_s, not here); involuntary_switches: preemptions meanwhile.
  * --lockstep (two processes taking turns, one step each; examples/lockstep.py):
    every figure above counts this process's turns only, and each turn ends
    with a device synchronize.
  * memory: torch's peak allocated/reserved after a reset following the
    warm-up, NVML's device memory used (whole device, via pynvml when it is
    importable), and a timeline sampled by a thread every --timeline-ms (under the shim with
    PONYTAIL_HOST_TIER, each sample also has host_tier: the bytes in host memory, from the
    shim's control socket; `ponytail timeline --metric tier` plots them).

Capacity runs: --mem-cap caps torch's caching allocator (stock torch) with
set_per_process_memory_fraction before the model is built. Running out of
device memory anywhere is a result, not a crash: the JSON gets "oom": true,
"oom_phase" (load = model, inputs and warm-up; prefill = the measured
generate() up to its first logits; decode = after that) and the peak figures
known at that point, one line goes to stderr, and the exit status is 3.
SIGTERM (e.g. from `timeout`) likewise writes the JSON with "interrupted":
true and the decode steps done, then exits with status 143.

Tensor parallelism: `torchrun --nproc-per-node N examples/generate.py --tp ...`
splits every layer over the N ranks (examples/tensor_parallel.py; heads, KV
heads and the MLP width must divide by N); every rank computes the same
tokens and writes its own JSON (tests/gpu/checks/tp2.sh runs it with and without the
shim).
"""
import argparse
import hashlib
import json
import math
import os
import re
import resource
import signal
import sys
import threading
import time

DEFAULTS = dict(layers=16, hidden=2048, heads=16, kv_heads=4, head_dim=128, vocab=32000,
                intermediate=5632, batch=8, prompt=512, new_tokens=64, dtype="bf16", pad=0.0,
                seed=0, prompt_vocab=None, weights=None)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--prompt", type=int, help="prompt length in tokens")
    p.add_argument("--new-tokens", type=int)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--pad", type=float,
                   help="fraction of the batch given shorter, left-padded prompts (0..1)")
    p.add_argument("--seed", type=int)
    p.add_argument("--prompt-vocab", type=int, metavar="N",
                   help="draw the prompts' tokens from the N ids after the 3 special ones (default: "
                        "the whole vocabulary); a model trained on a small language "
                        "(tests/gpu/bench/margin_model.py) is prompted in its own tokens")
    p.add_argument("--weights", metavar="FILE",
                   help="load this state dict (torch.save of a model of the same settings, e.g. "
                        "tests/gpu/bench/margin_model.py's) over the random weights")
    p.add_argument("--config", help="Hugging Face config.json whose keys override the defaults "
                                    "(explicit flags still win)")
    p.add_argument("--warmup", action="store_true",
                   help="a generate() of the same prompt shape and 2 new tokens first, so that the "
                        "measured prefill (time to first token) is a warm one")
    p.add_argument("--cache", choices=["dynamic", "static"], default="dynamic",
                   help="HF KV cache: dynamic (eager), or static (transformers then compiles the "
                        "forward itself: inductor with CUDA-graph trees; the first generate() "
                        "compiles, so prefill_s includes compilation unless --warmup ran the "
                        "same shapes first)")
    p.add_argument("--json", metavar="OUT", help="write the result JSON here")
    p.add_argument("--timeline-ms", type=int, default=0,
                   help="sample memory every N ms (0 = no timeline)")
    p.add_argument("--logits-out", metavar="FILE", help="save the first steps' logits (.pt)")
    p.add_argument("--logits-steps", type=int, default=4)
    p.add_argument("--sdpa", choices=["default", "flash", "math", "efficient", "cudnn"], default="default",
                   help="force one SDPA backend for the whole run (default: torch's choice); "
                        "math computes attention in the inputs' dtype without fusion, the reference "
                        "used to judge other kernels' logits")
    p.add_argument("--barrier", metavar="DIR:N",
                   help="after the warm-up, wait until N processes given the same DIR reach this "
                        "point, so that concurrent runs (tests/gpu/bench/wall_pair.sh) time their "
                        "generate() calls over the same seconds")
    p.add_argument("--lockstep", metavar="DIR:ROLE",
                   help="take turns with one other process (ROLE 0 or 1, the same DIR), one decode "
                        "step each, through the measured generate() calls, and time only this "
                        "process's turns (examples/lockstep.py): a paired A/B that both runs see "
                        "under the same machine conditions (tests/gpu/bench/wall_pair.sh LOCKSTEP=1)")
    p.add_argument("--tp", action="store_true",
                   help="tensor parallelism over the ranks of torchrun (torchrun --nproc-per-node N "
                        "examples/generate.py --tp ...): each rank keeps 1/N of every layer "
                        "(examples/tensor_parallel.py); --json OUT and --logits-out FILE write one file "
                        "per rank, {rank} in the name replaced, or .rankR appended")
    p.add_argument("--mem-cap", metavar="BYTES", type=parse_size,
                   help="cap torch's caching allocator at BYTES (24G, 24GiB or 25769803776; binary "
                        "units) with torch.cuda.set_per_process_memory_fraction before the model is "
                        "built: stock torch capacity runs")
    args = p.parse_args(argv)
    if args.lockstep is not None:
        import lockstep
        try:
            lockstep.parse_spec(args.lockstep)
        except ValueError as e:
            p.error(str(e))
    return args


def parse_size(text):
    """Bytes from '25769803776', '24G', '24GiB', '24GB', '1.5T' (K/M/G/T are binary)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError("not a size: %r (e.g. 24G, 24GiB, 25769803776)" % text)
    n = float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
    if n < 1:
        raise argparse.ArgumentTypeError("size must be positive: %r" % text)
    return int(n)


# HF config keys that map onto our settings (for --config).
CONFIG_KEYS = dict(num_hidden_layers="layers", hidden_size="hidden", num_attention_heads="heads",
                   num_key_value_heads="kv_heads", head_dim="head_dim", vocab_size="vocab",
                   intermediate_size="intermediate")


def settings_from(args):
    s = dict(DEFAULTS)
    extra = {}
    if args.config:
        with open(args.config) as f:
            cfg = json.load(f)
        for k, v in cfg.items():
            if k in CONFIG_KEYS:
                s[CONFIG_KEYS[k]] = v
            else:
                extra[k] = v
    for k in DEFAULTS:
        v = getattr(args, k)
        if v is not None:
            s[k] = v
    if args.hidden is not None and args.head_dim is None and not (args.config and "head_dim" in extra):
        s["head_dim"] = s["hidden"] // s["heads"]
    if not 0.0 <= s["pad"] <= 1.0:
        sys.exit("--pad must be within 0..1")
    if s["prompt_vocab"] is not None and not 1 <= s["prompt_vocab"] <= s["vocab"] - 3:
        sys.exit("--prompt-vocab must be within 1..%d (the vocabulary less its 3 special ids)" % (s["vocab"] - 3))
    if s["weights"] is not None and not os.path.isfile(s["weights"]):
        sys.exit("--weights %s: no such file" % s["weights"])
    return s, extra


class MemorySampler:
    """Samples torch and NVML memory figures from a thread."""

    def __init__(self, torch, device, period_ms, t0):
        self.torch, self.device, self.t0 = torch, device, t0
        self.period = period_ms / 1000.0
        self.samples = []
        self.nvml = None
        self.nvml_peak = None
        self.stop_event = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(device)
            try:
                bus = "%08x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
            except Exception:
                handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
            self.nvml = (pynvml, handle)
        except Exception:
            self.nvml = None  # no pynvml or no NVML: skip NVML figures
        # Under the shim with a host tier: its control socket, by common/control_path.c's rule
        # (tests/unit/shim/test_control_path.c and tests/examples/test_generate.py hold both copies
        # to the same cases).
        self.tier_sock = None
        tier = os.environ.get("PONYTAIL_HOST_TIER", "0").strip()
        if "libponytail_shim" in os.environ.get("LD_PRELOAD", "") and tier not in ("", "0"):
            d = os.environ.get("PONYTAIL_CONTROL_DIR", "")
            if not d:
                xdg = os.environ.get("XDG_RUNTIME_DIR", "")
                d = os.path.join(xdg, "ponytail") if xdg.startswith("/") else "/tmp/ponytail-%d" % os.getuid()
            self.tier_sock = os.path.join(d, "%d.sock" % os.getpid())
        self.thread = threading.Thread(target=self.run, daemon=True)

    def nvml_used(self):
        if self.nvml is None:
            return None
        pynvml, handle = self.nvml
        try:
            used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:
            return None
        self.nvml_peak = used if self.nvml_peak is None else max(self.nvml_peak, used)
        return used

    def host_tier(self):
        """Bytes in Ponytail's host tier (PONYTAIL_HOST_TIER), from the shim's control socket
        (the `status` request `ponytail sleep --status` makes); None when not under the tier."""
        if self.tier_sock is None:
            return None
        import socket
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                s.connect(self.tier_sock)
                s.sendall(b"status\n")
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            for line in data.decode(errors="replace").splitlines():
                if line.startswith("now_tier_bytes="):
                    return int(line.split("=", 1)[1])
        except (OSError, ValueError):
            pass
        return None

    def sample(self):
        t = self.torch.cuda
        rec = dict(t=round(time.perf_counter() - self.t0, 4),
                   allocated=int(t.memory_allocated(self.device)),
                   reserved=int(t.memory_reserved(self.device)),
                   nvml_used=self.nvml_used())
        if self.tier_sock is not None:
            rec["host_tier"] = self.host_tier()
        self.samples.append(rec)

    def run(self):
        while not self.stop_event.wait(self.period):
            self.sample()

    def start(self):
        if self.period > 0:
            self.sample()
            self.thread.start()

    def stop(self):
        if self.period > 0:
            self.stop_event.set()
            self.thread.join()
            self.sample()
        else:
            self.nvml_used()


def make_model(torch, s, extra, device, longest):
    """The random-weight Llama of settings s (and a config's extra keys) on device, in eval mode,
    with positions for sequences of up to longest tokens. Seeded by s["seed"]; s["weights"], when
    set, is a state dict loaded over the random weights (strict: same names and shapes)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    dtype = dict(bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32)[s["dtype"]]
    cfg = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
               num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
               num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"],
               max_position_embeddings=max(4096, longest + 16),
               pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg.update({k: v for k, v in extra.items() if k not in ("torch_dtype", "dtype", "architectures")})
    config = LlamaConfig(**cfg)
    torch.manual_seed(s["seed"])
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old_dtype)
    if s.get("weights"):
        model.load_state_dict(torch.load(s["weights"], map_location=device), strict=True)
    model.eval()
    return model


def make_inputs(torch, s, device):
    """Random prompts (over the whole vocabulary, or its first s["prompt_vocab"] ordinary ids);
    the first round(pad * batch) rows are shorter and left-padded."""
    g = torch.Generator().manual_seed(s["seed"] + 1)
    b, p = s["batch"], s["prompt"]
    hi = 3 + s["prompt_vocab"] if s.get("prompt_vocab") else s["vocab"]
    ids = torch.randint(3, hi, (b, p), generator=g)
    mask = torch.ones(b, p, dtype=torch.long)
    n_pad = int(round(s["pad"] * b))
    for row in range(n_pad):
        length = int(torch.randint(max(1, p // 2), p + 1, (1,), generator=g))
        ids[row, :p - length] = 0  # pad_token_id
        mask[row, :p - length] = 0
    return ids.to(device), mask.to(device)


def percentile(sorted_values, q):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def step_profile(stamps, block=128):
    """Mean decode step (ms) of each run of `block` consecutive steps, in order: where a run slows
    as it goes (a KV cache growing past the device into host memory) and, for a run cut short,
    the step time it had reached."""
    d = [(b - a) * 1000.0 for a, b in zip(stamps, stamps[1:])]
    return [round(sum(d[i:i + block]) / len(d[i:i + block]), 3) for i in range(0, len(d), block)]


class Interrupted(Exception):
    """Raised in the main thread by SIGTERM so the result JSON is still written."""


class RunState:
    """What a run has reached so far, for the JSON of a run that ends early
    (out of memory, SIGTERM)."""

    def __init__(self, args, s):
        self.args, self.s = args, s
        self.t0 = time.perf_counter()
        self.phase = "load"  # load -> prefill -> decode
        self.torch = self.transformers = self.device = self.model = self.sampler = None
        self.start = None  # perf_counter at the call of the measured generate()
        self.stamps = []
        self.mem_cap = None
        self.tp = None  # (rank, world, local rank) under --tp
        self.dist = None
        self.lockstep = None  # examples/lockstep.Lockstep under --lockstep

    def now(self):
        """The clock of the measured call: under --lockstep, this process's turns only."""
        return self.lockstep.own_now() if self.lockstep else time.perf_counter()

    def json_path(self):
        return self.rank_path(self.args.json)

    def rank_path(self, path):
        """Under --tp, one file per rank: {rank} in `path` replaced, or .rankR appended."""
        if not path or self.tp is None:
            return path
        rank = self.tp[0]
        return path.replace("{rank}", str(rank)) if "{rank}" in path else "%s.rank%d" % (path, rank)

    def who(self):
        return "generate" if self.tp is None else "generate[rank %d/%d]" % (self.tp[0], self.tp[1])


def settings_record(st):
    s, args, torch = st.s, st.args, st.torch
    rec = dict(s, warmup=args.warmup, cache=args.cache, timeline_ms=args.timeline_ms, config=args.config,
               tp_world=st.tp[1] if st.tp else 1,
               attn_implementation=getattr(getattr(st.model, "config", None), "_attn_implementation", None),
               device=None, torch=None, transformers=None)
    try:
        rec["device"] = torch.cuda.get_device_name(st.device)
        rec["torch"] = torch.__version__
        rec["transformers"] = st.transformers.__version__
    except Exception:
        pass
    return rec


def env_record():
    env = {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "TORCH_CUDNN_SDPA_DEPRIORITIZED")}
    env["LD_PRELOAD_set"] = bool(os.environ.get("LD_PRELOAD"))
    env["LD_PRELOAD"] = os.environ.get("LD_PRELOAD")
    return env


def run(args, s, extra, st):
    t0 = st.t0

    import torch
    st.torch = torch
    import transformers
    st.transformers = transformers
    from transformers import LogitsProcessor, LogitsProcessorList

    if st.tp:
        import tensor_parallel
        st.dist = tensor_parallel.init(torch, st.tp[2])
    device = torch.device("cuda", torch.cuda.current_device())
    st.device = device
    torch.cuda.init()
    if args.mem_cap is not None:
        total_mem = torch.cuda.get_device_properties(device).total_memory
        if args.mem_cap > total_mem:
            sys.exit("--mem-cap %d exceeds the device's %d bytes" % (args.mem_cap, total_mem))
        torch.cuda.set_per_process_memory_fraction(args.mem_cap / total_mem, device)
        st.mem_cap = args.mem_cap
    sampler = MemorySampler(torch, device, args.timeline_ms, t0)
    st.sampler = sampler
    sampler.start()

    model = make_model(torch, s, extra, device, s["prompt"] + s["new_tokens"])
    st.model = model
    if st.tp:
        tensor_parallel.shard_llama(torch, st.dist, model, st.tp[0], st.tp[1])

    ids, mask = make_inputs(torch, s, device)
    stamps = st.stamps

    class StepTimer(LogitsProcessor):
        """Timestamps each step; called once per generated token, after that
        step's forward produced its logits and before the token is chosen."""

        def __call__(self, input_ids, scores):
            if st.lockstep:  # the turn ends with the device idle: the other's starts on it so
                st.lockstep.hand_over(lambda: torch.cuda.synchronize(device))
            elif not stamps:
                torch.cuda.synchronize(device)  # once: prefill_s covers the prefill's GPU work
            stamps.append(st.now())
            st.phase = "decode"  # the prefill's logits exist: what follows is decode
            return scores

    gen = dict(do_sample=False, pad_token_id=0)
    if args.cache == "static":
        gen["cache_implementation"] = "static"
    want_logits = bool(args.logits_out)
    import contextlib
    sdpa_ctx = contextlib.nullcontext()
    if args.sdpa != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa_ctx = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH,
                                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                                "cudnn": SDPBackend.CUDNN_ATTENTION}[args.sdpa])
    with torch.inference_mode(), sdpa_ctx:
        if args.warmup and args.cache == "static":
            # A static cache is sized by prompt + new tokens and its compiled graphs by the
            # batch: only the measured call's own shapes warm it up (compile + graph capture).
            model.generate(input_ids=ids, attention_mask=mask, min_new_tokens=s["new_tokens"],
                           max_new_tokens=s["new_tokens"], **gen)
            torch.cuda.synchronize(device)
        elif args.warmup:
            # The measured call's own prompt shape, two new tokens: prefill_s (the time to first
            # token) then leaves out what only a cold process pays for a new shape (cuDNN builds
            # a plan per sequence length, the allocators grow their segments), in every arm alike.
            model.generate(input_ids=ids, attention_mask=mask, min_new_tokens=2, max_new_tokens=2,
                           **gen)
            torch.cuda.synchronize(device)
        if args.barrier:
            barrier_wait(args.barrier)
        if st.dist is not None:
            st.dist.barrier()  # the ranks start the measured call together
        torch.cuda.reset_peak_memory_stats(device)
        n = s["new_tokens"]
        torch.cuda.synchronize(device)
        if args.lockstep:
            import lockstep
            st.lockstep = lockstep.Lockstep(args.lockstep)
            st.lockstep.begin()
        st.phase = "prefill"
        cpu0 = (time.thread_time(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF))
        start = st.now()
        st.start = start
        out = model.generate(input_ids=ids, attention_mask=mask, min_new_tokens=n, max_new_tokens=n,
                             logits_processor=LogitsProcessorList([StepTimer()]),
                             return_dict_in_generate=True, output_logits=want_logits, **gen)
        if st.lockstep:
            st.lockstep.end(lambda: torch.cuda.synchronize(device))
        else:
            torch.cuda.synchronize(device)
        end = st.now()
        cpu1 = (time.thread_time(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF))
    sampler.stop()

    new_ids = out.sequences[:, ids.shape[1]:].tolist()
    digest = hashlib.sha256(json.dumps(new_ids, separators=(",", ":")).encode()).hexdigest()
    steps = sorted((b - a) * 1000.0 for a, b in zip(stamps, stamps[1:]))
    total = end - start
    if want_logits:
        k = max(0, args.logits_steps)
        # token_ids: what each sequence generated (examples/verdict.py compares a row's logits only
        # while both runs had fed the same tokens).
        torch.save(dict(logits=[l.float().cpu() for l in out.logits[:k]], settings=s, token_ids=new_ids),
                   st.rank_path(args.logits_out))

    result = dict(
        settings=settings_record(st),
        env=env_record(),
        prefill_s=(stamps[0] - start) if stamps else None,
        decode_step_ms=dict(p50=percentile(steps, 0.50), p99=percentile(steps, 0.99),
                            mean=(sum(steps) / len(steps)) if steps else None, count=len(steps)),
        decode_profile_ms=step_profile(stamps),
        tokens_per_s=s["batch"] * n / total if total > 0 else None,
        total_s=total,
        # CPU time of the measured call: the main thread's (the Python loop, and CUDA's spin
        # while it waits for the device) and the process's; involuntary context switches count
        # how often its threads were preempted, which wall time includes and CPU time does not.
        main_thread_cpu_s=cpu1[0] - cpu0[0],
        process_cpu_s=cpu1[1] - cpu0[1],
        involuntary_switches=cpu1[2].ru_nivcsw - cpu0[2].ru_nivcsw,
        peak_allocated_bytes=int(torch.cuda.max_memory_allocated(device)),
        peak_reserved_bytes=int(torch.cuda.max_memory_reserved(device)),
        nvml_peak_used_bytes=sampler.nvml_peak,
        token_ids_sha256=digest,
        token_ids=new_ids,
        timeline=sampler.samples,
        oom=False,
        mem_cap_bytes=st.mem_cap,
        lockstep=st.lockstep.record() if st.lockstep else None,
    )
    if args.json:
        with open(st.json_path(), "w") as f:
            json.dump(result, f)
    p50 = result["decode_step_ms"]["p50"]
    print(st.who() + ": batch %d prompt %d new %d: %.1f tokens/s, prefill %.3f s, step p50 %s ms, "
          "peak allocated %.2f GiB, reserved %.2f GiB, tokens %s"
          % (s["batch"], s["prompt"], n, result["tokens_per_s"] or 0.0, result["prefill_s"] or 0.0,
             "%.2f" % p50 if p50 is not None else "n/a", result["peak_allocated_bytes"] / 2**30,
             result["peak_reserved_bytes"] / 2**30, digest[:16]), flush=True)
    if st.dist is not None:
        st.dist.destroy_process_group()
    return 0


def is_oom(torch, e):
    """torch's OutOfMemoryError, or a RuntimeError that reports out of memory
    (a library's own allocation failing, e.g. "CUDA error: out of memory")."""
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(e, oom_type):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def ended_early(st, e, oom):
    """JSON and one stderr line for a run that ran out of memory (exit 3) or
    was sent SIGTERM (exit 143)."""
    torch, now = st.torch, st.now()
    if st.sampler is not None:
        try:
            st.sampler.stop()
        except Exception:
            pass

    def peak(fn):
        try:
            return int(fn(st.device))
        except Exception:
            return None

    pa = peak(torch.cuda.max_memory_allocated) if torch is not None else None
    pr = peak(torch.cuda.max_memory_reserved) if torch is not None else None
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
    stamps = st.stamps
    steps = sorted((b - a) * 1000.0 for a, b in zip(stamps, stamps[1:]))
    result = dict(
        settings=settings_record(st),
        env=env_record(),
        oom=bool(oom),
        oom_phase=st.phase if oom else None,
        oom_error=type(e).__name__ if oom else None,
        oom_message=msg if oom else None,
        interrupted=not oom,
        phase=st.phase,
        mem_cap_bytes=st.mem_cap,
        elapsed_s=now - st.t0,
        generate_s=(now - st.start) if st.start is not None else None,
        prefill_s=(stamps[0] - st.start) if stamps and st.start is not None else None,
        decode_steps_done=len(stamps),
        decode_step_ms=dict(p50=percentile(steps, 0.50), p99=percentile(steps, 0.99),
                            mean=(sum(steps) / len(steps)) if steps else None, count=len(steps)),
        decode_profile_ms=step_profile(stamps),
        peak_allocated_bytes=pa,
        peak_reserved_bytes=pr,
        nvml_peak_used_bytes=st.sampler.nvml_peak if st.sampler is not None else None,
        total_s=None,
        tokens_per_s=None,
        token_ids_sha256=None,
        timeline=st.sampler.samples if st.sampler is not None else [],
        lockstep=st.lockstep.record() if st.lockstep else None,
    )
    if st.args.json:
        try:
            with open(st.json_path(), "w") as f:
                json.dump(result, f)
        except OSError as err:
            print("%s: cannot write %s: %s" % (st.who(), st.json_path(), err), file=sys.stderr)
    s = st.s
    gib = lambda b: "%.2f GiB" % (b / 2**30) if b is not None else "n/a"
    what = ("out of memory in %s" % st.phase) if oom else ("interrupted (SIGTERM) in %s" % st.phase)
    print("%s: %s: batch %d prompt %d new %d%s, after %.1f s, %d tokens generated, peak allocated "
          "%s, reserved %s: %s" % (st.who(), what, s["batch"], s["prompt"], s["new_tokens"],
                                   ", cap %s" % gib(st.mem_cap) if st.mem_cap else "", now - st.t0,
                                   len(stamps), gib(pa), gib(pr), msg),
          file=sys.stderr, flush=True)
    return 3 if oom else 143


def barrier_wait(spec, timeout_s=300.0):
    """DIR:N: marks this process ready in DIR, then waits for N ready marks (or timeout_s)."""
    d, _, n = spec.rpartition(":")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "ready.%d" % os.getpid()), "w").close()
    end = time.monotonic() + timeout_s
    while sum(f.startswith("ready.") for f in os.listdir(d)) < int(n):
        if time.monotonic() > end:
            print("barrier %s: timed out, running alone" % spec, file=sys.stderr)
            return
        time.sleep(0.005)


def main(argv=None):
    args = parse_args(argv)
    s, extra = settings_from(args)
    st = RunState(args, s)
    if args.tp:
        import tensor_parallel
        st.tp = tensor_parallel.env_rank()
        if st.tp is None:
            sys.exit("--tp runs under torchrun (RANK, WORLD_SIZE and LOCAL_RANK unset): "
                     "torchrun --nproc-per-node N examples/generate.py --tp ...")
        why = tensor_parallel.check_divisible(s, st.tp[1])
        if why:
            sys.exit(why)

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Interrupted("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    try:
        return run(args, s, extra, st)
    except Interrupted as e:
        return ended_early(st, e, oom=False)
    except Exception as e:
        if not is_oom(st.torch, e):
            raise
        return ended_early(st, e, oom=True)
    finally:
        if st.lockstep:  # the other process runs on alone instead of timing out
            st.lockstep.close()


if __name__ == "__main__":
    sys.exit(main())
