"""The serving check's workload and log reading, shared by vllm_offline.py and vllm_serve.py.

Prompts are random token ids (ids 3..31999 of the models' 32000; 0-2 are specials), seeded, so
stock and the shim get the very same requests. Lengths are log-uniform over [lo, hi] tokens:
as many short prompts as long ones, 16-2048 by default.
"""
import math
import os
import random
import re
import time

VOCAB = 32000


def await_snapshot(preloaded):
    """Waits one shim stats snapshot period (PONYTAIL_STATS_EVERY, plus half a second) when the
    shim is preloaded. The engine's model process leaves no exit stats (vLLM's engine core ends
    with _exit, SGLang's scheduler is killed by the engine's shutdown): its last snapshot must come
    after the work, or the record misses it (SGLang's eager arm showed 7 launches so, 2026-12-07:
    generate ran between two snapshots and the kill)."""
    every = os.environ.get("PONYTAIL_STATS_EVERY", "")
    if preloaded and every.isdigit() and 0 < int(every) <= 10:
        time.sleep(int(every) + 0.5)


def preloaded():
    """The shim is in this process's LD_PRELOAD (the offline scripts' caller sets it)."""
    return "ponytail" in os.environ.get("LD_PRELOAD", "")


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
    "model_load_s": (r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds", float),
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
    # The warm-up after graph capture (vLLM's sampler and kernel warm-up, Triton's JIT): seconds
    # from the capture's line to the engine's init line. On 2026-12-07 the first two arms of a
    # call paid ~17 s there, later ones ~1 s: a start-up that paid it is cold, like a compile.
    lines = text.splitlines()
    stamps = {}
    for ln in lines:
        key = "cap" if "Graph capturing finished" in ln else "init" if "init engine (profile" in ln else None
        m = key and re.search(r"(\d\d):(\d\d):(\d\d)", ln)
        if m:
            stamps[key] = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
    if "cap" in stamps and "init" in stamps:
        out["warmup_after_capture_s"] = (stamps["init"] - stamps["cap"]) % 86400
    errs = [ln for ln in lines
            if re.search(r"Error|Traceback|Segmentation|core dumped|CUDA error|ponytail\[\d+\]: (error|warn)", ln)]
    if errs:
        out["error_lines"] = errs[-8:]
    return out


# Greedy decoding of a random-weight model meets near ties often: two tokens whose logits lie a
# bf16 rounding step or two apart, so that any change in summation order (a different cuBLAS
# kernel for a differently aligned pointer, another CUDA-graph batch size) picks the other one.
# Stock shows it against itself (vLLM 0.26 eager with and without enable_sleep_mode, a memory
# allocator change only: 1 of 64 sequences differs). So a sequence that differs is a near tie
# when, at its first differing position, the reference ranks the other run's token within TIE
# nats of its own (or the other run ranks the reference's so); anything else is a real difference.
TIE = 0.1


def top_logprobs(lps):
    """vLLM's per-position logprobs (a list of {token_id: Logprob}) as [[[id, logprob], ...], ...]."""
    if lps is None:
        return None
    out = []
    for pos in lps:
        items = pos.items() if hasattr(pos, "items") else []
        out.append([[int(t), round(float(getattr(v, "logprob", v)), 4)] for t, v in items])
    return out


def _margin(lp_pos, mine, other):
    """How far below `mine` a position's logprobs put `other` (None when `other` is not listed)."""
    d = {t: v for t, v in lp_pos}
    if mine not in d or other not in d:
        return None
    return d[mine] - d[other]


def compare_tokens(ref, run, tie=TIE):
    """ref, run: {"tokens": [[id, ...], ...], "logprobs": (optional) per sequence top_logprobs}.
    Returns dict(n, same, ties, differ, tie_margins, first_diffs) or None when not comparable:
    same counts identical sequences, ties those that part at a near tie, differ the rest."""
    ta, tb = ref.get("tokens"), run.get("tokens")
    if not ta or not tb or len(ta) != len(tb):
        return None
    la, lb = ref.get("logprobs") or [None] * len(ta), run.get("logprobs") or [None] * len(tb)
    res = dict(n=len(ta), same=0, ties=0, differ=0, tie_margins=[], first_diffs=[])
    for i, (x, y) in enumerate(zip(ta, tb)):
        if x == y:
            res["same"] += 1
            continue
        j = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), None)
        margins = []
        if j is not None:
            if la[i] and j < len(la[i]):
                margins.append(_margin(la[i][j], x[j], y[j]))
            if lb[i] and j < len(lb[i]):
                margins.append(_margin(lb[i][j], y[j], x[j]))
        margins = [m for m in margins if m is not None]
        res["first_diffs"].append([i, j, round(min(margins), 4) if margins else None])
        if margins and min(margins) <= tie:
            res["ties"] += 1
            res["tie_margins"].append(round(min(margins), 4))
        else:
            res["differ"] += 1
    return res


def compare_text(c):
    """'64/64', or '62/64 +2 ties (<= 0.031)', or '61/64 +1 tie, 2 DIFFER'."""
    if not c:
        return "-"
    s = "%d/%d" % (c["same"], c["n"])
    if c["ties"]:
        s += " +%d tie%s (<=%.3f)" % (c["ties"], "s" if c["ties"] > 1 else "", max(c["tie_margins"]))
    if c["differ"]:
        s += " %d DIFFER" % c["differ"]
    return s


def throughput_passes(passes, prompt_tokens, generate):
    """The throughput arm's timed passes: generate() (one pass over the prompts, returning the
    output tokens it made) run `passes` times, each timed alone: [{s, out_tok_s, total_tok_s}]
    (total counts the prompt_tokens too). Under the shim each pass also gets "pool": what the
    engine's model process's pool did meanwhile (ponytail_control.pool_work, asked of it between
    passes, outside the timing)."""
    import ponytail_control
    wpid = ponytail_control.busiest(exclude=(os.getpid(),)) if preloaded() else None
    runs = []
    for _ in range(max(1, passes)):
        w0 = ponytail_control.pool_work(wpid) if wpid else None
        t0 = time.time()
        n_out = generate()
        dt = time.time() - t0
        runs.append(dict(s=round(dt, 3), out_tok_s=round(n_out / dt, 1),
                         total_tok_s=round((n_out + prompt_tokens) / dt, 1)))
        if wpid:
            runs[-1]["pool"] = ponytail_control.work_delta(w0, ponytail_control.pool_work(wpid))
    return runs
