#!/usr/bin/env python3
"""examples/serve.py's HTTP layer on the CPU: the real handler and byte tokenizer around a
stand-in engine (no torch): endpoints, OpenAI response shapes, streaming, errors.
  test_serve.py examples/serve.py"""
import importlib.util
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

spec = importlib.util.spec_from_file_location("serve", sys.argv[1])
serve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve)
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


class FakeEngine:
    """The engine's interface, generating ids 100, 101, ... (one streamer chunk each)."""
    name = "fake"
    tok = None
    bytes = serve.ByteTokenizer()
    max_tokens = 64
    prompt_ids = serve.Engine.prompt_ids
    decode = serve.Engine.decode

    def generate(self, ids, req, streamer=None):
        n = int(req.get("max_tokens") or 16)
        if not 1 <= n <= self.max_tokens:
            raise ValueError("max_tokens must be within 1..%d" % self.max_tokens)
        out = [100 + i for i in range(n)]
        if streamer:
            streamer.put(FakeTensor(ids))
            for t in out:
                streamer.put(FakeTensor([t]))
            streamer.end()
        return out


class FakeTensor(list):
    def reshape(self, *a):
        return self

    def tolist(self):
        return list(self)


srv = serve.ThreadingHTTPServer(("127.0.0.1", 0), serve.make_handler(FakeEngine()))
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()


def call(path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


st, b = call("/health")
check(st == 200 and json.loads(b)["status"] == "ok", "health")
st, b = call("/v1/models")
check(st == 200 and json.loads(b)["data"][0]["id"] == "fake", "models")
st, b = call("/v1/completions", {"prompt": "Hi", "max_tokens": 3})
d = json.loads(b)
check(st == 200 and d["object"] == "text_completion" and d["choices"][0]["token_ids"] == [100, 101, 102]
      and d["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}, "completion: " + b)
check(d["choices"][0]["text"] == bytes([97, 98, 99]).decode(), "byte decode of ids 100..102")
st, b = call("/v1/completions", {"prompt": [5, 6, 7, 8], "max_tokens": 2})
check(st == 200 and json.loads(b)["usage"]["prompt_tokens"] == 4, "token-id prompt")
st, b = call("/v1/chat/completions", {"messages": [{"role": "user", "content": "hey"}], "max_tokens": 2})
d = json.loads(b)
check(st == 200 and d["object"] == "chat.completion" and d["choices"][0]["message"]["role"] == "assistant"
      and d["usage"]["prompt_tokens"] == len("user: hey\nassistant: "), "chat: " + b)
st, b = call("/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True})
events = [l[6:] for l in b.split("\n") if l.startswith("data: ")]
check(st == 200 and events[-1] == "[DONE]", "stream ends with [DONE]")
ids = [t for e in events[:-1] for t in json.loads(e)["choices"][0]["token_ids"]]
check(ids == [100, 101, 102], "stream token ids %s" % ids)
check(json.loads(events[-2])["choices"][0]["finish_reason"] == "length", "stream finish reason")
st, b = call("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2, "stream": True})
events = [l[6:] for l in b.split("\n") if l.startswith("data: ")]
check(st == 200 and "delta" in json.loads(events[0])["choices"][0], "chat stream deltas")
for body, what in (({"prompt": ""}, "empty prompt"), ({"messages": []}, "no messages"),
                   ({"prompt": "x", "max_tokens": 999}, "max_tokens over the bound")):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    st, b = call(path, body)
    check(st == 400 and json.loads(b)["error"]["type"] == "invalid_request_error", what + ": %d %s" % (st, b))
st, b = call("/v1/embeddings", {"input": "x"})
check(st == 404, "unknown endpoint")
# --help needs no torch (the machine running these tests has none).
r = subprocess.run([sys.executable, sys.argv[1], "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "--model" in r.stdout, "--help without torch")
srv.shutdown()
print("serve: %d failures" % len(fails))
sys.exit(1 if fails else 0)
