#!/usr/bin/env python3
"""One arm of the serving check: vLLM's offline engine (LLM.generate) in this process, with or
without the shim preloaded (the caller sets LD_PRELOAD; vLLM's engine-core subprocess inherits
it). Writes one JSON object to --out:

  start-up: import_s, init_s (LLM() constructor: engine core spawn, load, profile, compile,
            graph capture), kv_blocks/kv_cache_tokens (what the engine got), NVML peak
  tokens:   greedy token ids of --prompts random prompts of 16-2048 tokens (--max-tokens each,
            EOS ignored), their digest, and each position's top-5 logprobs (so that a sequence
            that differs from stock can be told a near tie: workload.compare_tokens)
  --sleep:  enable_sleep_mode=True; sleep(level=1), NVML used asleep, wake_up(), the same prompts
            again: the same tokens, or sequences that part only at near ties (wake_cmp)
  --ponytail-sleep: no vLLM sleep mode; the shim's own sleep of the engine core instead (its
            control socket, as `ponytail sleep PID`), NVML used asleep, wake, the same prompts
            again (wake_cmp): issue 50's sleep of an unchanged engine, CUDA graphs included
  --throughput N: N prompts of --tp-in tokens, --tp-out new tokens each, timed --tp-passes times after the
            token run (which warmed the engine): output tokens/s and total tokens/s
"""
import argparse
import gc
import hashlib
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_peak import NvmlPeak  # noqa: E402
import ponytail_control  # noqa: E402
from workload import await_snapshot, compare_text, compare_tokens, preloaded, throughput_passes, token_prompts, top_logprobs  # noqa: E402


def digest(seqs):
    h = hashlib.sha256()
    for s in seqs:
        h.update((",".join(map(str, s)) + ";").encode())
    return h.hexdigest()[:16]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--eager", action="store_true")
    p.add_argument("--sleep", action="store_true")
    p.add_argument("--ponytail-sleep", action="store_true")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--gpu-util", type=float, default=0.5)
    p.add_argument("--tensor-parallel", type=int, default=1,
                   help="tensor_parallel_size (issue 53: 2 exercises vLLM's custom all-reduce, which "
                        "exchanges CUDA IPC handles of buffers the shim pools)")
    p.add_argument("--throughput", type=int, default=0)
    p.add_argument("--tp-in", type=int, default=512)
    p.add_argument("--tp-out", type=int, default=128)
    p.add_argument("--tp-passes", type=int, default=5,
                   help="times the throughput prompts run; the report takes the median of all but the first "
                        "(a pass is under a second on the 1B model, and the first warms the engine's shapes)")
    a = p.parse_args()
    res = dict(model=os.path.basename(a.model.rstrip("/")), eager=a.eager, sleep=a.sleep, tensor_parallel=a.tensor_parallel,
               preload=os.environ.get("LD_PRELOAD", ""), ok=False)
    nv = NvmlPeak()

    def write():
        res.update(nv.stop())
        with open(a.out, "w") as f:
            json.dump(res, f)

    try:
        t0 = time.time()
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        res["import_s"] = round(time.time() - t0, 2)
        t1 = time.time()
        llm = LLM(model=a.model, tokenizer=a.model, dtype="bfloat16", seed=0,
                  max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                  gpu_memory_utilization=a.gpu_util, enforce_eager=a.eager,
                  enable_sleep_mode=a.sleep, tensor_parallel_size=a.tensor_parallel)
        res["init_s"] = round(time.time() - t1, 2)
        cc = llm.llm_engine.vllm_config.cache_config
        res["kv_blocks"] = cc.num_gpu_blocks
        res["block_size"] = cc.block_size
        res["nvml_after_init_mib"] = nv.now_mib()
        print("init %.1f s, %s KV blocks of %s" % (res["init_s"], cc.num_gpu_blocks, cc.block_size),
              flush=True)

        sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True, logprobs=5)
        hi = min(2048, a.max_model_len - a.max_tokens)
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in token_prompts(a.prompts, 16, hi)]
        t2 = time.time()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        res["gen_s"] = round(time.time() - t2, 3)
        toks = [list(o.outputs[0].token_ids) for o in outs]
        res["tokens"] = toks
        res["logprobs"] = [top_logprobs(o.outputs[0].logprobs) for o in outs]
        res["digest"] = digest(toks)
        res["prompt_lens"] = [len(pr["prompt_token_ids"]) for pr in prompts]
        print("generate: %d prompts in %.2f s, digest %s" % (len(toks), res["gen_s"], res["digest"]),
              flush=True)

        def after_wake(key="wake"):
            """The same prompts again: tokens against those before the sleep (KEY_cmp)."""
            outs2 = llm.generate(prompts, sp, use_tqdm=False)
            toks2 = [list(o.outputs[0].token_ids) for o in outs2]
            res["digest_after_" + key] = digest(toks2)
            res[key + "_same"] = toks2 == toks
            res[key + "_cmp"] = compare_tokens(
                res, dict(tokens=toks2, logprobs=[top_logprobs(o.outputs[0].logprobs) for o in outs2]))

        if a.sleep:
            torch_sync()
            before = nv.now_mib()
            t3 = time.time()
            llm.sleep(level=1)
            res["sleep_s"] = round(time.time() - t3, 3)
            time.sleep(0.5)
            asleep = nv.now_mib()
            t4 = time.time()
            llm.wake_up()
            res["wake_s"] = round(time.time() - t4, 3)
            res.update(sleep_before_mib=before, sleep_asleep_mib=asleep,
                       sleep_freed_mib=(before - asleep) if before is not None else None)
            after_wake()
            print("sleep %.2f s (freed %s MiB), wake %.2f s, tokens after wake against before: %s" % (
                res["sleep_s"], res["sleep_freed_mib"], res["wake_s"], compare_text(res["wake_cmp"])),
                flush=True)

        if a.ponytail_sleep and preloaded():  # a stock arm only gives the reference tokens
            ponytail_control.sleep_wake(nv, res)
            after_wake()
            print("ponytail sleep of %d: %s bytes in %.2f s (NVML freed %s MiB), wake %.2f s, tokens after "
                  "wake against before: %s" % (res["psleep_pid"], res["psleep"].get("bytes"), res["sleep_s"],
                                               res["sleep_freed_mib"], res["wake_s"], compare_text(res["wake_cmp"])),
                  flush=True)
            ponytail_control.prepared_cycle(nv, res)  # the same with its host memory got ahead
            after_wake("wake2")
            print("prepared: %.2f s to prepare, sleep %.2f s, wake %.2f s, tokens after: %s" % (
                res["prep_s"], res["sleep2_s"], res["wake2_s"], compare_text(res["wake2_cmp"])), flush=True)

        if a.throughput:
            tp = [TokensPrompt(prompt_token_ids=ids)
                  for ids in token_prompts(a.throughput, a.tp_in, a.tp_in, seed=7)]
            spt = SamplingParams(temperature=0.0, max_tokens=a.tp_out, ignore_eos=True)
            runs = throughput_passes(a.tp_passes, a.throughput * a.tp_in,
                                     lambda: sum(len(o.outputs[0].token_ids) for o in llm.generate(tp, spt, use_tqdm=False)))
            res["throughput"] = runs
            print("throughput:", runs, flush=True)
        res["ok"] = True
        write()
        # The engine core is a fork child that ends with _exit: no exit stats, only the shim's
        # snapshots (PONYTAIL_STATS_EVERY); one more after the work. Shut down in order all the same.
        await_snapshot(preloaded())
        try:
            llm.llm_engine.engine_core.shutdown(timeout=30)
        except Exception as e:
            print("engine shutdown: %s" % e, file=sys.stderr)
        del llm
        gc.collect()
        reap_children()
    except BaseException as e:  # the arm's failure is a result, written before exiting non-zero
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["traceback"] = traceback.format_exc()[-4000:]
        print(res["traceback"], file=sys.stderr, flush=True)
        write()
        reap_children()
        sys.exit(1)
    # A normal exit, so that the shim's exit stats of this process are written (the harness
    # kills the arm's process group if teardown hangs).
    sys.exit(0)


def reap_children(wait_s=20):
    """Waits for the engine-core subprocess to exit after the engine is released, then asks it
    with SIGTERM, then kills it."""
    try:
        import psutil
    except ImportError:
        return
    kids = psutil.Process().children(recursive=True)
    _, alive = psutil.wait_procs(kids, timeout=wait_s)
    for k in alive:
        try:
            k.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=10)
    for k in alive:
        try:
            k.kill()
        except psutil.Error:
            pass


def torch_sync():
    try:
        import torch
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass


if __name__ == "__main__":
    main()
