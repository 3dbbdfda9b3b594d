#!/usr/bin/env python3
"""One arm of the serving check: `vllm serve` as a subprocess (with --preload, only the server
runs under the shim; this client never does), then OpenAI-API requests, all at once from one
thread each: --per-kind of each of completions and chat, streaming and not (4 x 16 = 64 by
default), greedy, EOS ignored, every answer's token ids returned by the server
(`return_token_ids`). Two waves of the same requests: the first compares tokens, the second is
timed (tokens/s). Writes one JSON object to --out; the server's log goes to --log.
"""
import argparse
import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_peak import NvmlPeak  # noqa: E402
from workload import await_snapshot, chat_texts, parse_log, token_prompts  # noqa: E402

KINDS = ("completion", "completion-stream", "chat", "chat-stream")


def post(port, path, body, timeout=300):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def one_request(port, kind, payload, max_tokens, engine="vllm"):
    """The token ids of one answer (streamed answers: the deltas joined) and its text."""
    chat = kind.startswith("chat")
    stream = kind.endswith("stream")
    body = dict(model="m", max_tokens=max_tokens, temperature=0.0, ignore_eos=True, stream=stream)
    # SGLang answers 400 to return_token_ids on a streamed chat: that kind is compared by text.
    if not (engine == "sglang" and kind == "chat-stream"):
        body["return_token_ids"] = True
    if chat:
        body["messages"] = [{"role": "user", "content": payload}]
    else:
        body["prompt"] = payload
    path = "/v1/chat/completions" if chat else "/v1/completions"
    ids, text = [], []
    with post(port, path, body) as r:
        if not stream:
            d = json.loads(r.read())
            c = d["choices"][0]
            ids = list(c.get("token_ids") or [])
            text.append((c.get("message") or {}).get("content") or c.get("text") or "")
        else:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                d = json.loads(data)
                for c in d.get("choices", []):
                    ids += list(c.get("token_ids") or [])
                    text.append((c.get("delta") or {}).get("content") or c.get("text") or "")
    return ids, "".join(text)


def wave(port, reqs, max_tokens, engine="vllm"):
    t0 = time.time()
    with cf.ThreadPoolExecutor(len(reqs)) as ex:
        futs = [ex.submit(one_request, port, k, pl, max_tokens, engine) for k, pl in reqs]
        outs = []
        for f in futs:
            try:
                outs.append(f.result())
            except urllib.error.HTTPError as e:  # the server's own reason is in the body
                try:
                    body = e.read().decode(errors="replace")[:300]
                except Exception:
                    body = ""
                outs.append((None, "HTTP %d: %s" % (e.code, body or e.reason)))
            except Exception as e:
                outs.append((None, "%s: %s" % (type(e).__name__, e)))
    return outs, time.time() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--preload", default="")
    p.add_argument("--eager", action="store_true")
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--per-kind", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--gpu-util", type=float, default=0.5)
    p.add_argument("--start-timeout", type=float, default=300)
    p.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    a = p.parse_args()
    res = dict(model=os.path.basename(a.model.rstrip("/")), eager=a.eager, preload=a.preload,
               ok=False, batch_invariant=os.environ.get("VLLM_BATCH_INVARIANT", "0"))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if a.preload:
        env["LD_PRELOAD"] = a.preload
    res["engine"] = a.engine
    if a.engine == "vllm":
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", a.model,
               "--served-model-name", "m", "--port", str(a.port), "--dtype", "bfloat16", "--seed", "0",
               "--max-model-len", "4096", "--gpu-memory-utilization", str(a.gpu_util),
               "--max-num-seqs", "128", "--uvicorn-log-level", "warning"]
        if a.eager:
            cmd.append("--enforce-eager")
    else:  # SGLang: FA3 and PyTorch sampling (flashinfer is staged without its JIT sources)
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", a.model,
               "--served-model-name", "m", "--port", str(a.port), "--dtype", "bfloat16",
               "--random-seed", "0", "--context-length", "4096", "--mem-fraction-static",
               str(a.gpu_util), "--max-running-requests", "128", "--attention-backend", "fa3",
               "--sampling-backend", "pytorch", "--enable-deterministic-inference"]
        if a.eager:
            cmd.append("--disable-cuda-graph")
    nv = NvmlPeak()
    logf = open(a.log, "w")
    t0 = time.time()
    srv = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while True:
            if srv.poll() is not None:
                raise RuntimeError("server exited with %s before it was ready" % srv.returncode)
            if time.time() - t0 > a.start_timeout:
                raise RuntimeError("server not ready after %.0f s" % a.start_timeout)
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % a.port, timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            time.sleep(0.25)
        res["ready_s"] = round(time.time() - t0, 2)
        res["nvml_ready_mib"] = nv.now_mib()
        print("server ready in %.1f s" % res["ready_s"], flush=True)
        n = a.per_kind
        toks = token_prompts(2 * n, 16, 2048, seed=11)
        texts = chat_texts(2 * n, seed=11)
        reqs = ([("completion", t) for t in toks[:n]] + [("completion-stream", t) for t in toks[n:]] +
                [("chat", t) for t in texts[:n]] + [("chat-stream", t) for t in texts[n:]])
        res["kinds"] = [k for k, _ in reqs]
        outs, dt = wave(a.port, reqs, a.max_tokens, a.engine)
        res["tokens"] = [o[0] for o in outs]
        res["failed"] = [o[1] for o in outs if o[0] is None]
        res["wave1_s"] = round(dt, 3)
        outs2, dt2 = wave(a.port, reqs, a.max_tokens, a.engine)
        ok2 = [o for o in outs2 if o[0] is not None]
        res["failed"] += [o[1] for o in outs2 if o[0] is None]
        n_out = sum(len(o[0]) for o in ok2)
        res["wave2_s"] = round(dt2, 3)
        res["wave2_out_tok_s"] = round(n_out / dt2, 1)
        res["wave2_same_as_wave1"] = [o[0] for o in outs2] == res["tokens"]
        res["sample_text"] = outs[0][1][:80] if outs and outs[0][0] is not None else None
        if a.engine == "sglang":  # its streamed chat answers carry text, no token ids
            res["texts"] = [o[1] if k == "chat-stream" else None for (k, _), o in zip(reqs, outs)]
        res["ok"] = not res["failed"] and all(
            t is not None and (len(t) == a.max_tokens or (not t and a.engine == "sglang" and k == "chat-stream"))
            for k, t in zip(res["kinds"], res["tokens"]))
        print("wave 1 %.2f s, wave 2 %.2f s (%.0f tok/s), failed %d, same in both waves: %s" % (
            dt, dt2, res["wave2_out_tok_s"], len(res["failed"]), res["wave2_same_as_wave1"]), flush=True)
    except BaseException as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["traceback"] = traceback.format_exc()[-3000:]
        print(res["traceback"], file=sys.stderr, flush=True)
    finally:
        # The engine's model process leaves no exit stats (vLLM's engine core ends with _exit,
        # SGLang's scheduler is killed): wait for one more shim snapshot, so that it covers the
        # waves. Then SIGINT: the server shuts down in order.
        await_snapshot(bool(a.preload))
        t1 = time.time()
        for sig, wait_s in ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(srv.pid, sig)
                srv.wait(timeout=wait_s)
                break
            except Exception:
                continue
        res["shutdown_s"] = round(time.time() - t1, 2)
        logf.close()
        res.update(nv.stop())
        try:
            with open(a.log, errors="replace") as f:
                res.update(parse_log(f.read()))
        except OSError:
            pass
        with open(a.out, "w") as f:
            json.dump(res, f)
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
