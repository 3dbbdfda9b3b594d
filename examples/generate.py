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
    whether all sequences finished.
  * total_s: the whole generate() call, ended with a device synchronize;
    tokens_per_s = batch * new_tokens / total_s.
  * memory: torch's peak allocated/reserved after a reset following the
    warm-up, NVML's device memory used (whole device, via pynvml when it is
    importable), and a timeline sampled by a thread every --timeline-ms.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import threading
import time

DEFAULTS = dict(layers=16, hidden=2048, heads=16, kv_heads=4, head_dim=128, vocab=32000,
                intermediate=5632, batch=8, prompt=512, new_tokens=64, dtype="bf16", pad=0.0,
                seed=0)


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
    p.add_argument("--config", help="Hugging Face config.json whose keys override the defaults "
                                    "(explicit flags still win)")
    p.add_argument("--warmup", action="store_true", help="a short generate() first")
    p.add_argument("--json", metavar="OUT", help="write the result JSON here")
    p.add_argument("--timeline-ms", type=int, default=0,
                   help="sample memory every N ms (0 = no timeline)")
    p.add_argument("--logits-out", metavar="FILE", help="save the first steps' logits (.pt)")
    p.add_argument("--logits-steps", type=int, default=4)
    p.add_argument("--sdpa", choices=["default", "flash", "math", "efficient", "cudnn"], default="default",
                   help="force one SDPA backend for the whole run (default: torch's choice); "
                        "math computes attention in the inputs' dtype without fusion, the reference "
                        "used to judge other kernels' logits")
    return p.parse_args(argv)


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

    def sample(self):
        t = self.torch.cuda
        self.samples.append(dict(t=round(time.perf_counter() - self.t0, 4),
                                 allocated=int(t.memory_allocated(self.device)),
                                 reserved=int(t.memory_reserved(self.device)),
                                 nvml_used=self.nvml_used()))

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


def make_inputs(torch, s, device):
    """Random prompts; the first round(pad * batch) rows are shorter and left-padded."""
    g = torch.Generator().manual_seed(s["seed"] + 1)
    b, p = s["batch"], s["prompt"]
    ids = torch.randint(3, s["vocab"], (b, p), generator=g)
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


def main(argv=None):
    args = parse_args(argv)
    s, extra = settings_from(args)
    t0 = time.perf_counter()

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    dtype = dict(bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32)[s["dtype"]]
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    sampler = MemorySampler(torch, device, args.timeline_ms, t0)
    sampler.start()

    cfg = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
               num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
               num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"],
               max_position_embeddings=max(4096, s["prompt"] + s["new_tokens"] + 16),
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
    model.eval()

    ids, mask = make_inputs(torch, s, device)
    stamps = []

    class StepTimer(LogitsProcessor):
        """Timestamps each step; called once per generated token, after that
        step's forward produced its logits and before the token is chosen."""

        def __call__(self, input_ids, scores):
            if not stamps:
                torch.cuda.synchronize(device)  # once: prefill_s covers the prefill's GPU work
            stamps.append(time.perf_counter())
            return scores

    gen = dict(do_sample=False, pad_token_id=0)
    want_logits = bool(args.logits_out)
    import contextlib
    sdpa_ctx = contextlib.nullcontext()
    if args.sdpa != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa_ctx = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH,
                                "efficient": SDPBackend.EFFICIENT_ATTENTION,
                                "cudnn": SDPBackend.CUDNN_ATTENTION}[args.sdpa])
    with torch.inference_mode(), sdpa_ctx:
        if args.warmup:
            wp = min(s["prompt"], 64)
            model.generate(input_ids=ids[:, -wp:], attention_mask=mask[:, -wp:], min_new_tokens=4,
                           max_new_tokens=4, **gen)
            torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        n = s["new_tokens"]
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, min_new_tokens=n, max_new_tokens=n,
                             logits_processor=LogitsProcessorList([StepTimer()]),
                             return_dict_in_generate=True, output_logits=want_logits, **gen)
        torch.cuda.synchronize(device)
        end = time.perf_counter()
    sampler.stop()

    new_ids = out.sequences[:, ids.shape[1]:].tolist()
    digest = hashlib.sha256(json.dumps(new_ids, separators=(",", ":")).encode()).hexdigest()
    steps = sorted((b - a) * 1000.0 for a, b in zip(stamps, stamps[1:]))
    total = end - start
    if want_logits:
        k = max(0, args.logits_steps)
        torch.save(dict(logits=[l.float().cpu() for l in out.logits[:k]], settings=s), args.logits_out)

    env = {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "TORCH_CUDNN_SDPA_DEPRIORITIZED")}
    env["LD_PRELOAD_set"] = bool(os.environ.get("LD_PRELOAD"))
    env["LD_PRELOAD"] = os.environ.get("LD_PRELOAD")
    result = dict(
        settings=dict(s, warmup=args.warmup, timeline_ms=args.timeline_ms, config=args.config,
                      attn_implementation=getattr(model.config, "_attn_implementation", None),
                      device=torch.cuda.get_device_name(device), torch=torch.__version__,
                      transformers=transformers.__version__),
        env=env,
        prefill_s=(stamps[0] - start) if stamps else None,
        decode_step_ms=dict(p50=percentile(steps, 0.50), p99=percentile(steps, 0.99),
                            mean=(sum(steps) / len(steps)) if steps else None, count=len(steps)),
        tokens_per_s=s["batch"] * n / total if total > 0 else None,
        total_s=total,
        peak_allocated_bytes=int(torch.cuda.max_memory_allocated(device)),
        peak_reserved_bytes=int(torch.cuda.max_memory_reserved(device)),
        nvml_peak_used_bytes=sampler.nvml_peak,
        token_ids_sha256=digest,
        token_ids=new_ids,
        timeline=sampler.samples,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    p50 = result["decode_step_ms"]["p50"]
    print("generate: batch %d prompt %d new %d: %.1f tokens/s, prefill %.3f s, step p50 %s ms, "
          "peak allocated %.2f GiB, reserved %.2f GiB, tokens %s"
          % (s["batch"], s["prompt"], n, result["tokens_per_s"] or 0.0, result["prefill_s"] or 0.0,
             "%.2f" % p50 if p50 is not None else "n/a", result["peak_allocated_bytes"] / 2**30,
             result["peak_reserved_bytes"] / 2**30, digest[:16]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
