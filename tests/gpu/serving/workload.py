"""The serving check's workload and log reading, shared by vllm_offline.py and vllm_serve.py.

Prompts are random token ids (ids 3..31999 of the models' 32000; 0-2 are specials), seeded, so
stock and the shim get the very same requests. Lengths are log-uniform over [lo, hi] tokens:
as many short prompts as long ones, 16-2048 by default.
"""
import math
import random
import re

VOCAB = 32000


def prompt_lengths(n, lo=16, hi=2048, seed=0):
    rng = random.Random(seed)
    out = [lo, hi]  # both ends always present
    while len(out) < n:
        out.append(int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))
    return out[:n]


def token_prompts(n, lo=16, hi=2048, seed=0):
    rng = random.Random(seed + 1)
    return [[rng.randrange(3, VOCAB) for _ in range(L)] for L in prompt_lengths(n, lo, hi, seed)]


WORDS = ("the of and to in is was for on that with as by at from his her which or had are but "
         "not be this have one all were they their an she he has been when who will more no if "
         "out so up said what its about into than them can only other new some could time these "
         "two may then do first any my now such like our over man me even most made after also").split()


def chat_texts(n, seed=0):
    """Chat messages of 5-200 words (byte-level tokens: about 5 per word)."""
    rng = random.Random(seed + 2)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 200))) for _ in range(n)]


LOG_PATTERNS = {
    "kv_cache_tokens": (r"GPU KV cache size: ([\d,]+) tokens", lambda s: int(s.replace(",", ""))),
    "kv_cache_gib": (r"Available KV cache memory: ([\d.]+) GiB", float),
    "model_load_gib": (r"Model loading took ([\d.]+) GiB", float),
    "init_engine_s": (r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)", float),
    "compile_s": (r"torch\.compile took ([\d.]+) s in total", float),
    "graph_capture_s": (r"Graph capturing finished in ([\d.]+) secs", float),
    "graph_capture_gib": (r"Graph capturing finished in [\d.]+ secs, took ([-\d.]+) GiB", float),
}


def parse_log(text):
    """Figures vLLM logs at start-up (the last occurrence of each), and its errors' last lines."""
    out = {}
    for key, (pat, conv) in LOG_PATTERNS.items():
        m = re.findall(pat, text)
        if m:
            try:
                out[key] = conv(m[-1])
            except ValueError:
                pass
    errs = [ln for ln in text.splitlines()
            if re.search(r"Error|Traceback|Segmentation|core dumped|CUDA error|ponytail\[\d+\]: (error|warn)", ln)]
    if errs:
        out["error_lines"] = errs[-8:]
    return out
