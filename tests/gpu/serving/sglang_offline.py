#!/usr/bin/env python3
"""One arm of the serving check for SGLang 0.5.17: its offline engine (sglang.Engine) in this
process, with or without the shim preloaded (the caller sets LD_PRELOAD; SGLang's scheduler and
detokenizer subprocesses inherit it). The same workload and JSON keys as vllm_offline.py, so that
vllm_report.py reads both:

  start-up: import_s, init_s (Engine(): scheduler spawn, load, KV pool, CUDA graph capture),
            kv_cache_tokens (SGLang's max_total_num_tokens), NVML peak
  tokens:   greedy token ids of --prompts random prompts of 16-2048 tokens, EOS ignored, and each
            position's top-5 logprobs (near ties: workload.compare_tokens)
  --throughput N: N prompts of --tp-in tokens, --tp-out new tokens each, timed --tp-passes times (default 5)

Attention is FA3 (--attention-backend fa3) and sampling plain PyTorch: flashinfer, SGLang's
default for both, is staged without its JIT sources (tests/gpu/serving/sglang/stage.sh).
"""
import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_peak import NvmlPeak  # noqa: E402
from vllm_offline import digest, reap_children  # noqa: E402
import ponytail_control  # noqa: E402
from workload import await_snapshot, compare_text, compare_tokens, preloaded, throughput_passes, token_prompts  # noqa: E402


def output_ids(outs):
    return [list(o.get("output_ids") or []) for o in outs]


def output_logprobs(outs):
    """meta_info's output_top_logprobs (per position, (logprob, token_id, text) each) as
    workload.top_logprobs gives vLLM's: [[[id, logprob], ...], ...] per sequence; None if absent."""
    res = []
    for o in outs:
        top = (o.get("meta_info") or {}).get("output_top_logprobs")
        if top is None:
            res.append(None)
            continue
        res.append([[[int(e[1]), round(float(e[0]), 4)] for e in (pos or []) if e and e[0] is not None]
                    for pos in top])
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--eager", action="store_true", help="--disable-cuda-graph")
    p.add_argument("--ponytail-sleep", action="store_true",
                   help="under the shim: sleep and wake the scheduler through its control socket, generate again")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--mem-fraction", type=float, default=0.5)
    p.add_argument("--throughput", type=int, default=0)
    p.add_argument("--tp-in", type=int, default=512)
    p.add_argument("--tp-out", type=int, default=128)
    p.add_argument("--tp-passes", type=int, default=5,
                   help="times the throughput prompts run; the report takes the median of all but the first "
                        "(a pass is under a second on the 1B model, and the first warms the engine's shapes)")
    a = p.parse_args()
    res = dict(model=os.path.basename(a.model.rstrip("/")), eager=a.eager, engine="sglang",
               preload=os.environ.get("LD_PRELOAD", ""), ok=False)
    nv = NvmlPeak()

    def write():
        res.update(nv.stop())
        with open(a.out, "w") as f:
            json.dump(res, f)

    eng = None
    try:
        t0 = time.time()
        import sglang
        res["import_s"] = round(time.time() - t0, 2)
        t1 = time.time()
        eng = sglang.Engine(model_path=a.model, tokenizer_path=a.model, dtype="bfloat16",
                            random_seed=0, context_length=a.max_model_len,
                            mem_fraction_static=a.mem_fraction, attention_backend="fa3",
                            sampling_backend="pytorch", disable_cuda_graph=a.eager,
                            log_level="info")
        res["init_s"] = round(time.time() - t1, 2)
        try:
            info = eng.get_server_info()
            res["kv_cache_tokens"] = info.get("max_total_num_tokens")
        except Exception as e:
            res["server_info_error"] = str(e)
        res["nvml_after_init_mib"] = nv.now_mib()
        print("init %.1f s, KV cache %s tokens" % (res["init_s"], res.get("kv_cache_tokens")), flush=True)

        sp = dict(temperature=0.0, max_new_tokens=a.max_tokens, ignore_eos=True)
        hi = min(2048, a.max_model_len - a.max_tokens)
        prompts = token_prompts(a.prompts, 16, hi)
        t2 = time.time()
        outs = eng.generate(input_ids=prompts, sampling_params=sp, return_logprob=True, top_logprobs_num=5)
        res["gen_s"] = round(time.time() - t2, 3)
        toks = output_ids(outs)
        res["tokens"] = toks
        res["logprobs"] = output_logprobs(outs)  # near ties: workload.compare_tokens
        res["digest"] = digest(toks)
        res["prompt_lens"] = [len(x) for x in prompts]
        print("generate: %d prompts in %.2f s, digest %s" % (len(toks), res["gen_s"], res["digest"]),
              flush=True)
        if any(len(t) != a.max_tokens for t in toks):
            raise RuntimeError("an answer has not %d tokens: %s" % (a.max_tokens, [len(t) for t in toks]))

        def after_wake(key="wake"):
            """The same prompts again: tokens against those before the sleep (KEY_cmp)."""
            outs2 = eng.generate(input_ids=prompts, sampling_params=sp, return_logprob=True, top_logprobs_num=5)
            toks2 = output_ids(outs2)
            res["digest_after_" + key] = digest(toks2)
            res[key + "_same"] = toks2 == toks
            res[key + "_cmp"] = compare_tokens(res, dict(tokens=toks2, logprobs=output_logprobs(outs2)))

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
            tp = token_prompts(a.throughput, a.tp_in, a.tp_in, seed=7)
            spt = dict(temperature=0.0, max_new_tokens=a.tp_out, ignore_eos=True)
            runs = throughput_passes(a.tp_passes, a.throughput * a.tp_in,
                                     lambda: sum(len(o) for o in output_ids(eng.generate(input_ids=tp, sampling_params=spt))))
            res["throughput"] = runs
            print("throughput:", runs, flush=True)
        res["ok"] = True
        write()
    except BaseException as e:  # the arm's failure is a result, written before exiting non-zero
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["traceback"] = traceback.format_exc()[-4000:]
        print(res["traceback"], file=sys.stderr, flush=True)
        write()
    finally:
        if eng is not None:
            # The shutdown kills the scheduler (no exit stats): one more shim snapshot first.
            await_snapshot(preloaded())
            try:
                eng.shutdown()
            except Exception as e:
                print("engine shutdown: %s" % e, file=sys.stderr)
        reap_children()
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
