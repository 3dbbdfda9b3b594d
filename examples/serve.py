#!/usr/bin/env python3
"""A minimal OpenAI-style HTTP server around Hugging Face transformers' generate(),
so that `LD_PRELOAD=$(ponytail shim-path) python examples/serve.py` is a server a
reader can run, and `ponytail sleep PID` / `ponytail wake PID` have one to act on.

  python examples/serve.py                       # random-weight Llama of examples/llama-1b-config.json
  python examples/serve.py --model DIR           # a saved model and its tokenizer (local files only)
  curl -s localhost:8000/v1/completions -d '{"prompt": "Hello", "max_tokens": 16}'

Endpoints: GET /health, GET /v1/models, POST /v1/completions and /v1/chat/completions
(OpenAI's request and response shapes: prompt or messages, max_tokens, temperature (0 =
greedy, the default), top_p, seed, stream; the answer's token ids too, as "token_ids").
Requests are served one at a time (one generate() at a time on the GPU); a request that
arrives while the process sleeps (`ponytail sleep`) waits for the wake. Nothing is
downloaded: without --model the weights are random (seeded) and the tokenizer is byte-level,
so the text is noise, but the work on the GPU is a real model's.
"""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a model directory (config, weights, tokenizer); default: random weights "
                                   "of --config")
    p.add_argument("--config", default=os.path.join(HERE, "llama-1b-config.json"),
                   help="the config of the random-weight model (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--max-tokens", type=int, default=256, help="upper bound of a request's max_tokens")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class ByteTokenizer:
    """Bytes as token ids 3..258 (0-2 are specials), for the random-weight model: any text
    encodes, any id decodes (ids past the bytes decode to nothing)."""
    eos_token_id = 2

    def encode(self, text):
        return [3 + b for b in text.encode("utf-8")]

    def decode(self, ids):
        return bytes(i - 3 for i in ids if 3 <= i < 259).decode("utf-8", "replace")

    def chat(self, messages):
        return self.encode("".join("%s: %s\n" % (m.get("role", "user"), m.get("content", "")) for m in messages)
                           + "assistant: ")


class Engine:
    def __init__(self, a):
        import torch
        self.torch = torch
        dtype = dict(bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32)[a.dtype]
        if a.model:
            from transformers import AutoModelForCausalLM, AutoTokenizer
            self.model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, local_files_only=True).cuda()
            self.tok = AutoTokenizer.from_pretrained(a.model, local_files_only=True)
            self.name = os.path.basename(os.path.normpath(a.model))
        else:
            from transformers import LlamaConfig, LlamaForCausalLM
            with open(a.config) as f:
                cfg = {k: v for k, v in json.load(f).items() if k not in ("architectures", "torch_dtype", "dtype")}
            torch.manual_seed(a.seed)
            old = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                with torch.device("cuda"):
                    self.model = LlamaForCausalLM(LlamaConfig(**cfg))
            finally:
                torch.set_default_dtype(old)
            self.tok = None
            self.bytes = ByteTokenizer()
            self.name = "random-" + os.path.splitext(os.path.basename(a.config))[0]
        self.model.eval()
        self.max_tokens = a.max_tokens
        self.lock = threading.Lock()

    def prompt_ids(self, req, chat):
        if chat:
            msgs = req.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise ValueError("messages must be a non-empty list")
            if self.tok is not None:
                return self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            return self.bytes.chat(msgs)
        p = req.get("prompt")
        if isinstance(p, list) and p and all(isinstance(i, int) for i in p):
            return p
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str) or not p:
            raise ValueError("prompt must be a non-empty string or a list of token ids")
        return self.tok.encode(p) if self.tok is not None else self.bytes.encode(p)

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=True) if self.tok is not None else self.bytes.decode(ids)

    def generate(self, ids, req, streamer=None):
        torch = self.torch
        n = int(req.get("max_tokens") or 16)
        if not 1 <= n <= self.max_tokens:
            raise ValueError("max_tokens must be within 1..%d" % self.max_tokens)
        temp = float(req.get("temperature") or 0.0)
        kw = dict(max_new_tokens=n, do_sample=temp > 0, pad_token_id=0)
        if temp > 0:
            kw.update(temperature=temp, top_p=float(req.get("top_p") or 1.0))
            if req.get("seed") is not None:
                torch.manual_seed(int(req["seed"]))
        if req.get("ignore_eos") or self.tok is None:
            kw["min_new_tokens"] = n  # the random model's EOS means nothing
        x = torch.tensor([ids], device="cuda")
        with self.lock, torch.inference_mode():
            out = self.model.generate(x, attention_mask=torch.ones_like(x), streamer=streamer, **kw)
        return out[0, len(ids):].tolist()


class Streamer:
    """transformers' streamer protocol (put/end) turned into token-id chunks for SSE."""

    def __init__(self):
        self.q, self.first = [], True
        self.cv = threading.Condition()
        self.done = False

    def put(self, value):
        if self.first:  # the prompt comes first
            self.first = False
            return
        with self.cv:
            self.q.append([int(v) for v in value.reshape(-1).tolist()])
            self.cv.notify()

    def end(self):
        with self.cv:
            self.done = True
            self.cv.notify()

    def chunks(self):
        while True:
            with self.cv:
                while not self.q and not self.done:
                    self.cv.wait()
                if self.q:
                    c = self.q.pop(0)
                elif self.done:
                    return
            yield c


def make_handler(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.send(200, {"status": "ok", "pid": os.getpid()})
            elif self.path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": engine.name, "object": "model"}]})
            else:
                self.send(404, {"error": {"message": "no such endpoint: " + self.path}})

        def do_POST(self):
            chat = self.path == "/v1/chat/completions"
            if not chat and self.path != "/v1/completions":
                return self.send(404, {"error": {"message": "no such endpoint: " + self.path}})
            try:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                ids = engine.prompt_ids(req, chat)
            except (ValueError, TypeError) as e:
                return self.send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            rid = "cmpl-%d-%d" % (os.getpid(), time.monotonic_ns())
            kind = "chat.completion" if chat else "text_completion"
            if req.get("stream"):
                return self.stream(engine, ids, req, chat, rid, kind)
            try:
                out = engine.generate(ids, req)
            except ValueError as e:
                return self.send(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            text = engine.decode(out)
            choice = {"index": 0, "finish_reason": "length", "token_ids": out}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            self.send(200, {"id": rid, "object": kind, "created": int(time.time()), "model": engine.name,
                            "choices": [choice],
                            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),
                                      "total_tokens": len(ids) + len(out)}})

        def stream(self, engine, ids, req, chat, rid, kind):
            st = Streamer()
            err = []

            def run():
                try:
                    engine.generate(ids, req, streamer=st)
                except Exception as e:  # reported in the stream's last event
                    err.append(str(e))
                    st.end()
            threading.Thread(target=run, daemon=True).start()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for c in st.chunks():
                text = engine.decode(c)
                choice = {"index": 0, "finish_reason": None, "token_ids": c}
                choice.update({"delta": {"content": text}} if chat else {"text": text})
                ev = {"id": rid, "object": kind + ".chunk", "model": engine.name, "choices": [choice]}
                self.wfile.write(("data: " + json.dumps(ev) + "\n\n").encode())
                self.wfile.flush()
            last = {"id": rid, "object": kind + ".chunk", "model": engine.name,
                    "choices": [{"index": 0, "finish_reason": "error" if err else "length",
                                 "token_ids": [], **({"delta": {}} if chat else {"text": ""})}]}
            if err:
                last["error"] = {"message": err[0]}
            self.wfile.write(("data: " + json.dumps(last) + "\n\ndata: [DONE]\n\n").encode())
            self.wfile.flush()
    return Handler


def main(argv=None):
    a = parse_args(argv)
    engine = Engine(a)
    srv = ThreadingHTTPServer((a.host, a.port), make_handler(engine))
    srv.daemon_threads = True
    print("serving %s on http://%s:%d (pid %d)" % (engine.name, a.host, srv.server_address[1], os.getpid()),
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
