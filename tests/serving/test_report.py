"""tests/gpu/serving's verdict on hand-made arm results, no GPU and no vLLM: workload.compare_tokens
(identical, near tie, real difference) and vllm_report.py's exit status and table over a runs
directory (a near tie passes, a real difference, a sleep/wake change, a shim arm failing where
stock ran and internal errors fail).

  test_report.py SERVING_DIR   (tests/gpu/serving)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SERVING = os.path.abspath(sys.argv.pop(1))
sys.path.insert(0, SERVING)
from workload import TIE, compare_text, compare_tokens, top_logprobs  # noqa: E402

REF_TOKENS = [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]


def lps(tokens, close=None):
    """Top-2 logprobs per position: the token at -0.5, a runner-up at -3.0, or (close: {(seq, pos):
    token}) a runner-up `token` just TIE/4 below."""
    out = []
    for i, seq in enumerate(tokens):
        row = []
        for j, t in enumerate(seq):
            other = (close or {}).get((i, j))
            row.append([[t, -0.5], [other, -0.5 - TIE / 4]] if other is not None else [[t, -0.5], [3, -3.0]])
        out.append(row)
    return out


class Logprob:  # vLLM's vllm.logprobs.Logprob: a dataclass with .logprob
    def __init__(self, logprob):
        self.logprob = logprob


class CompareTokens(unittest.TestCase):
    def test_top_logprobs_of_vllm(self):
        # vLLM's per-position {token_id: Logprob} (a list, or FlatLogprobs iterating to the same)
        lp = [{5: Logprob(-0.1234567), 3: Logprob(-2.5)}, {6: Logprob(-0.25)}]
        self.assertEqual(top_logprobs(lp), [[[5, -0.1235], [3, -2.5]], [[6, -0.25]]])
        self.assertIsNone(top_logprobs(None))

    def test_identical(self):
        c = compare_tokens(dict(tokens=REF_TOKENS), dict(tokens=[list(s) for s in REF_TOKENS]))
        self.assertEqual((c["same"], c["ties"], c["differ"]), (3, 0, 0))
        self.assertEqual(compare_text(c), "3/3")

    def test_near_tie_in_either_run(self):
        run = [list(s) for s in REF_TOKENS]
        run[1][2:] = [99, 98]  # parts at position 2 of sequence 1
        # the reference lists 99 just below its own 11
        c = compare_tokens(dict(tokens=REF_TOKENS, logprobs=lps(REF_TOKENS, {(1, 2): 99})), dict(tokens=run))
        self.assertEqual((c["same"], c["ties"], c["differ"]), (2, 1, 0))
        self.assertEqual(c["first_diffs"], [[1, 2, round(TIE / 4, 4)]])
        # only the other run has logprobs, ranking 11 just below its 99
        c = compare_tokens(dict(tokens=REF_TOKENS), dict(tokens=run, logprobs=lps(run, {(1, 2): 11})))
        self.assertEqual((c["ties"], c["differ"]), (1, 0))
        self.assertIn("+1 tie", compare_text(c))

    def test_real_difference(self):
        run = [list(s) for s in REF_TOKENS]
        run[0][1] = 3  # the reference ranks 3 far below (2.5 nats)
        c = compare_tokens(dict(tokens=REF_TOKENS, logprobs=lps(REF_TOKENS)), dict(tokens=run))
        self.assertEqual((c["ties"], c["differ"]), (0, 1))
        self.assertEqual(c["first_diffs"], [[0, 1, 2.5]])
        run[0][1] = 77  # not listed at all: no margin, a difference
        c = compare_tokens(dict(tokens=REF_TOKENS, logprobs=lps(REF_TOKENS)), dict(tokens=run))
        self.assertEqual((c["ties"], c["differ"]), (0, 1))
        self.assertIn("1 DIFFER", compare_text(c))

    def test_no_logprobs_is_exact(self):
        run = [list(s) for s in REF_TOKENS]
        run[2][3] = 14
        c = compare_tokens(dict(tokens=REF_TOKENS), dict(tokens=run))
        self.assertEqual((c["same"], c["differ"]), (2, 1))

    def test_not_comparable(self):
        self.assertIsNone(compare_tokens(dict(tokens=REF_TOKENS), dict(tokens=REF_TOKENS[:2])))
        self.assertIsNone(compare_tokens(dict(), dict(tokens=REF_TOKENS)))


class BenchResult(unittest.TestCase):
    """bench_result.py: a `vllm bench throughput` run as an arm result."""

    def test_ok_and_failed(self):
        import bench_result
        b = dict(elapsed_time=2.0, num_requests=512, total_num_tokens=327680, tokens_per_second=163840.0)
        log = "INFO ...\nThroughput: 256.00 requests/s, 163840.00 total tokens/s\nTotal num prompt tokens:  262144\n" \
              "Total num output tokens:  65536\n"
        r = bench_result.result(b, log)
        self.assertTrue(r["ok"])
        self.assertEqual(r["throughput"], [dict(s=2.0, total_tok_s=163840.0, out_tok_s=32768.0)])
        r = bench_result.result(None, "Traceback ...\nRuntimeError: CUDA out of memory\n")
        self.assertFalse(r["ok"])
        self.assertIn("RuntimeError: CUDA out of memory", r["error"])
        r = bench_result.result(b, "no token line\n")
        self.assertFalse(r["ok"])
        self.assertIn("Total num output tokens", r["error"])
        self.assertNotIn("throughput", r)  # the report's throughput rows read out_tok_s


class Report(unittest.TestCase):
    def runs(self, arms, stats=None, logs=None, caches=None):
        """vllm_report.py over a folder of arm results, their logs, shim stats and cache snapshots
        (NAME.caches, the startup stage's); (exit status, output)."""
        d = tempfile.mkdtemp(prefix="serving-report-")
        for name, text in (caches or {}).items():
            with open(os.path.join(d, name + ".caches"), "w") as f:
                f.write(text)
        for name, r in arms.items():
            with open(os.path.join(d, name + ".json"), "w") as f:
                json.dump(r, f)
        for name, text in (logs or {}).items():
            with open(os.path.join(d, name + ".log"), "w") as f:
                f.write(text)
        for name, s in (stats or {}).items():
            with open(os.path.join(d, name), "w") as f:
                json.dump(s, f)
        p = subprocess.run([sys.executable, os.path.join(SERVING, "vllm_report.py"), d],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        return p.returncode, p.stdout

    @staticmethod
    def arm(tokens, logprobs=None, **kw):
        r = dict(ok=True, tokens=tokens, init_s=5.0, kv_blocks=100, block_size=16, nvml_peak_mib=1000)
        if logprobs is not None:
            r["logprobs"] = logprobs
        r.update(kw)
        return r

    def test_tie_passes_difference_fails(self):
        run = [list(s) for s in REF_TOKENS]
        run[1][2:] = [99, 98]
        rc, out = self.runs({"s.1.stock": self.arm(REF_TOKENS, lps(REF_TOKENS, {(1, 2): 99})),
                             "s.2.shim": self.arm(run, lps(run))})
        self.assertEqual(rc, 0, out)
        self.assertIn("2/3 +1 tie", out)
        self.assertIn("serving check: PASS", out)
        run[0][0] = 3
        rc, out = self.runs({"s.1.stock": self.arm(REF_TOKENS, lps(REF_TOKENS, {(1, 2): 99})),
                             "s.2.shim": self.arm(run, lps(run))})
        self.assertEqual(rc, 1, out)
        self.assertIn("1 of 3 token sequences differ from stock (not at a near tie", out)

    def test_sleep_wake(self):
        tie = dict(n=3, same=2, ties=1, differ=0, tie_margins=[0.02], first_diffs=[[1, 2, 0.02]])
        real = dict(tie, ties=0, differ=1, tie_margins=[], first_diffs=[[1, 2, 1.5]])
        base = dict(sleep=True, sleep_freed_mib=900, sleep_s=0.1, wake_s=0.1, wake_same=False)
        rc, out = self.runs({"z.1.stock": self.arm(REF_TOKENS, **base, wake_cmp=tie)})
        self.assertEqual(rc, 0, out)
        self.assertIn("after wake: 2/3 +1 tie", out)
        rc, out = self.runs({"z.1.stock": self.arm(REF_TOKENS, **base, wake_cmp=real)})
        self.assertEqual(rc, 1, out)
        self.assertIn("tokens changed after sleep/wake", out)

    def test_ponytail_sleep(self):
        # --ponytail-sleep: the shim's own sleep of the engine core; stock gives the tokens only
        tie = dict(n=3, same=2, ties=1, differ=0, tie_margins=[0.02], first_diffs=[[1, 2, 0.02]])
        real = dict(tie, ties=0, differ=1, tie_margins=[], first_diffs=[[1, 2, 1.5]])
        ps = dict(ok=True, bytes=900 << 20, copied_bytes=800 << 20)
        sh = dict(psleep=ps, sleep_freed_mib=900, sleep_s=0.5, wake_s=0.1, wake_same=False)
        rc, out = self.runs({"p.1.stock": self.arm(REF_TOKENS), "p.2.shim": self.arm(REF_TOKENS, **sh, wake_cmp=tie)})
        self.assertEqual(rc, 0, out)
        self.assertIn("ponytail sleep: 900 MiB of the pool (800 copied) in 0.5 s", out)
        self.assertIn("sleep freed 900 MiB in 0.5 s, wake 0.1 s, after wake: 2/3 +1 tie", out)
        rc, out = self.runs({"p.1.stock": self.arm(REF_TOKENS), "p.2.shim": self.arm(REF_TOKENS, **sh, wake_cmp=real)})
        self.assertEqual(rc, 1, out)
        self.assertIn("p.2.shim: tokens changed after sleep/wake", out)
        # the prepared second cycle: its figures, and its own token verdict
        pr = dict(pprep=dict(ok=True, bytes=900 << 20), prep_s=2.5, psleep2=dict(ok=True, reused_bytes=900 << 20),
                  sleep2_s=0.3, wake2_s=0.1)
        rc, out = self.runs({"p.1.stock": self.arm(REF_TOKENS),
                             "p.2.shim": self.arm(REF_TOKENS, **sh, **pr, wake_cmp=tie, wake2_cmp=tie)})
        self.assertEqual(rc, 0, out)
        self.assertIn("prepared: 900 MiB got in 2.5 s while it ran, then sleep 0.3 s (900 MiB into prepared "
                      "memory), wake 0.1 s, after: 2/3 +1 tie", out)
        rc, out = self.runs({"p.1.stock": self.arm(REF_TOKENS),
                             "p.2.shim": self.arm(REF_TOKENS, **sh, **pr, wake_cmp=tie, wake2_cmp=real)})
        self.assertEqual(rc, 1, out)
        self.assertIn("p.2.shim: tokens changed after the prepared sleep/wake", out)

    def test_throughput_warm_passes(self):
        # tok/s: the median of the passes after the first (a cold pass of 1000 tok/s in each arm
        # must not count), and the warm passes' range of each side in the summary
        def tp(*v):
            return [dict(s=1.0, out_tok_s=x, total_tok_s=x) for x in v]
        rc, out = self.runs({"t.1.stock": self.arm(REF_TOKENS, throughput=tp(1000, 4000, 4200, 3800)),
                             "t.2.shim": self.arm(REF_TOKENS, throughput=tp(1000, 4400, 4600, 4000))})
        self.assertEqual(rc, 0, out)
        self.assertIn("tok/s shim/stock 1.100 (warm passes: stock 3800-4200, shim 4000-4600)", out)
        # the shim arm's pool work in its warm passes (the first pass's left out)
        sh = tp(1000, 4400, 4600, 4000)
        for i, x in enumerate(sh):
            x["pool"] = dict(grows=10 * (i == 0) + 1, trims=1, syncs=2, map_ns=1500000, wait_ns=0,
                             stitches=0, pooled_allocs=1, pooled_frees=1)
        rc, out = self.runs({"t.1.stock": self.arm(REF_TOKENS, throughput=tp(1000, 4000, 4200, 3800)),
                             "t.2.shim": self.arm(REF_TOKENS, throughput=sh)})
        self.assertIn("(shim pool in warm passes: 3 grows, 3 trims, 6 syncs, 4.5 ms mapping)", out)
        rc, out = self.runs({"t.1.stock": self.arm(REF_TOKENS, throughput=tp(2000)),
                             "t.2.shim": self.arm(REF_TOKENS, throughput=tp(3000))})
        self.assertIn("tok/s shim/stock 1.500", out)  # a lone pass counts as it is
        self.assertNotIn("warm passes", out)

    def test_cold_warmup_left_out(self):
        # An arm whose warm-up after graph capture took 17 s started cold (as the first stock and
        # the first shim arm of a call did on 2026-12-07): marked, and left out of the start-up
        # ratio, which then compares the warm arms only.
        def log(cap, init):
            return ("(EngineCore pid=1) INFO 12-07 %s [model_runner.py:747] Graph capturing finished in 3 secs, "
                    "took 0.36 GiB\n(EngineCore pid=1) INFO 12-07 %s [core.py:340] init engine (profile, create kv "
                    "cache, warmup model) took 9.90 s (compilation: 3.21 s)\n" % (cap, init))
        rc, out = self.runs({"t.1.stock": self.arm(REF_TOKENS, init_s=30.0), "t.2.shim": self.arm(REF_TOKENS, init_s=28.0),
                             "t.3.stock": self.arm(REF_TOKENS, init_s=10.0), "t.4.shim": self.arm(REF_TOKENS, init_s=10.5)},
                            logs={"t.1.stock": log("15:31:27", "15:31:46"), "t.2.shim": log("15:32:32", "15:32:49"),
                                  "t.3.stock": log("15:33:36", "15:33:37"), "t.4.shim": log("23:59:59", "00:00:01")})
        self.assertEqual(rc, 0, out)
        self.assertIn("cold (17 s warm-up after capture)", out)
        self.assertIn("start-up shim/stock 1.050 (init_s, warm arms)", out)
        # two warm stock arms: start-up's own spread beside the ratio
        rc, out = self.runs({"t.1.stock": self.arm(REF_TOKENS, init_s=10.0), "t.2.shim": self.arm(REF_TOKENS, init_s=10.5),
                             "t.3.stock": self.arm(REF_TOKENS, init_s=11.0)})
        self.assertIn("(init_s, warm arms, stock-vs-stock 0.095)", out)

    def test_memory_from_warm_arms(self):
        # A compile-cold arm profiles more activation memory and sizes a smaller KV cache (the
        # fourth run's stock arm 1: 75,754 blocks, 42,263 MiB, against 75,854 and 42,327 in every
        # warm arm): KV and NVML compare the warm arms, as start-up does.
        def log(cap, init):
            return ("(EngineCore pid=1) INFO 12-07 %s [model_runner.py:747] Graph capturing finished in 3 secs, "
                    "took 0.36 GiB\n(EngineCore pid=1) INFO 12-07 %s [core.py:340] init engine (profile, create kv "
                    "cache, warmup model) took 9.90 s (compilation: 3.21 s)\n" % (cap, init))
        warm = dict(kv_blocks=75854, nvml_peak_mib=42327)
        rc, out = self.runs({"big.1.stock": self.arm(REF_TOKENS, init_s=66.8, kv_blocks=75754, nvml_peak_mib=42263),
                             "big.2.shim": self.arm(REF_TOKENS, init_s=15.1, **warm),
                             "big.3.stock": self.arm(REF_TOKENS, init_s=14.2, **warm),
                             "big.4.shim": self.arm(REF_TOKENS, init_s=15.1, **warm)},
                            logs={"big.1.stock": log("15:31:27", "15:31:46")})
        self.assertEqual(rc, 0, out)
        self.assertIn("KV tokens 1213664 vs 1213664, NVML peak 42327 vs 42327 MiB", out)

    def test_bench_arms(self):
        # `vllm bench throughput` arms: a throughput pass each, no tokens, no start-up or KV figures
        def b(x):
            return dict(ok=True, throughput=[dict(s=2.0, out_tok_s=x, total_tok_s=5 * x)])
        rc, out = self.runs({"bench.1.stock": b(30000), "bench.2.shim": b(31500),
                             "bench.3.stock": b(30000), "bench.4.shim": b(31500)})
        self.assertEqual(rc, 0, out)
        self.assertIn("tok/s shim/stock 1.050", out)
        self.assertIn("start-up shim/stock - ", out)  # no start-up figure anywhere: none made up
        # The bench's start-up is the engine core's "init engine ... took" line of each log (it
        # reports no constructor or readiness time); a cold arm stays out of the ratio.
        def log(secs, cold=False):
            return ("(EngineCore pid=1) INFO 12-07 16:53:36 [model_runner.py:747] Graph capturing finished in 4 "
                    "secs, took 0.43 GiB\n(EngineCore pid=1) INFO 12-07 %s [core.py:340] init engine (profile, "
                    "create kv cache, warmup model) took %.2f s (compilation: 3.55 s)\n"
                    % ("16:54:00" if cold else "16:53:37", secs))
        rc, out = self.runs({"bench.1.stock": b(30000), "bench.2.shim": b(31500),
                             "bench.3.stock": b(30000), "bench.4.shim": b(31500)},
                            logs={"bench.1.stock": log(53.39, cold=True), "bench.2.shim": log(35.80, cold=True),
                                  "bench.3.stock": log(10.92), "bench.4.shim": log(12.18)})
        self.assertEqual(rc, 0, out)
        self.assertIn("start-up shim/stock 1.115 (init_engine_s, warm arms)", out)

    def test_startup_phases_and_caches(self):
        # The startup stage: stock, shim and off (loaded, switched off) arms; each kind's warm
        # medians by phase and its ratio to stock; the caches that grew after each arm.
        def log(load, cap_at, init_at, engine):
            return ("(EngineCore pid=1) INFO 12-07 16:53:26 [model_runner.py:305] Model loading took 1.59 GiB and "
                    "%.2f seconds\n(EngineCore pid=1) INFO 12-07 16:53:30 [monitor.py:53] torch.compile took 3.55 s "
                    "in total\n(EngineCore pid=1) INFO 12-07 %s [model_runner.py:747] Graph capturing finished in "
                    "4 secs, took 0.43 GiB\n(EngineCore pid=1) INFO 12-07 %s [core.py:340] init engine (profile, "
                    "create kv cache, warmup model) took %.2f s (compilation: 3.55 s)\n" % (load, cap_at, init_at, engine))
        arms = {"startup.1.stock": self.arm(REF_TOKENS, init_s=40.0), "startup.2.shim": self.arm(REF_TOKENS, init_s=38.0),
                "startup.3.off": self.arm(REF_TOKENS, init_s=20.0), "startup.4.stock": self.arm(REF_TOKENS, init_s=20.0),
                "startup.5.shim": self.arm(REF_TOKENS, init_s=22.0), "startup.6.off": self.arm(REF_TOKENS, init_s=20.5),
                "startup.7.stock": self.arm(REF_TOKENS, init_s=21.0)}
        logs = {"startup.1.stock": log(2.5, "16:53:36", "16:54:00", 40.0), "startup.2.shim": log(2.6, "16:53:36", "16:54:00", 38.0),
                "startup.3.off": log(2.5, "16:53:36", "16:53:37", 10.9), "startup.4.stock": log(2.4, "16:53:36", "16:53:37", 10.9),
                "startup.5.shim": log(2.7, "16:53:36", "16:53:38", 12.2), "startup.6.off": log(2.5, "16:53:36", "16:53:37", 11.0),
                "startup.7.stock": log(2.5, "16:53:36", "16:53:37", 11.1)}
        caches = {"startup.0": "100 1 /c/vllm\n", "startup.1.stock": "100 1 /c/vllm\n%d 40 /c/triton\n" % (5 << 20),
                  "startup.2.shim": "%d 3 /c/vllm\n%d 40 /c/triton\n" % (2 << 20, 5 << 20)}
        rc, out = self.runs(arms, logs=logs, caches=caches)
        self.assertEqual(rc, 0, out)
        self.assertIn("summary: start-up shim/stock 1.073 (init_s, warm arms, stock-vs-stock 0.049)", out)
        self.assertIn("  stock  2 warm + 1 cold: 20.50  11.00  2.45  3.55  4.00  1.00  (spread 0.049)", out)
        self.assertIn("  shim   1 warm + 1 cold: 22.00  12.20  2.70  3.55  4.00  2.00  (shim/stock 1.073)", out)
        self.assertIn("  off    2 warm: 20.25  10.95  2.50  3.55  4.00  1.00  (off/stock 0.988)  (spread 0.025)", out)
        self.assertIn("caches after startup.1.stock: /c/triton +5.0 MiB +40 files", out)
        self.assertIn("caches after startup.2.shim: /c/vllm +2.0 MiB +2 files", out)
        # an off arm that fails where stock runs is a failure, as a shim arm's
        arms["startup.3.off"] = dict(ok=False, error="boom")
        rc, out = self.runs(arms, logs=logs, caches=caches)
        self.assertEqual(rc, 1, out)
        self.assertIn("startup.3.off: ran stock, failed under the shim", out)

    def test_startup_shim_first_and_gone_cache(self):
        # ARMS_startup may begin with a shim arm: its ratio still comes from the stock arms after
        # it; a cache directory that disappears between snapshots is said so, not dropped.
        rc, out = self.runs({name: self.arm(REF_TOKENS, init_s=init) for name, init in (
            ("startup.1.shim", 21.0), ("startup.2.stock", 20.0), ("startup.3.off", 20.0))},
            caches={"startup.0": "10 1 /c/a\n10 1 /c/b\n", "startup.1.shim": "10 1 /c/a\n",
                    "startup.2.stock": "10 1 /c/a\n"})
        self.assertIn("(shim/stock 1.050)", out)
        self.assertIn("(off/stock 1.000)", out)
        self.assertIn("caches after startup.1.shim: none changed; gone: /c/b", out)
        self.assertIn("caches after startup.2.stock: none changed", out)

    def test_failures(self):
        rc, out = self.runs({"s.1.stock": self.arm(REF_TOKENS), "s.2.shim": dict(ok=False, error="boom")})
        self.assertEqual(rc, 1)
        self.assertIn("s.2.shim: ran stock, failed under the shim", out)
        rc, out = self.runs({"s.1.stock": dict(ok=False, error="boom"), "s.2.shim": self.arm(REF_TOKENS)})
        self.assertEqual(rc, 1)
        self.assertIn("s.1.stock: failed (stock: nothing to compare)", out)
        rc, out = self.runs({"s.1.stock": self.arm(REF_TOKENS), "s.2.shim": self.arm(REF_TOKENS)},
                            {"s.2.shim.stats-7.json": {"written": "snapshot", "internal_errors": 2,
                                                       "kernels": {"launches": 10, "top": [
                                                           {"name": "flash_fwd_kernel", "launches": 10}]}}})
        self.assertEqual(rc, 1)
        self.assertIn("procs 1 (1 from a snapshot: killed), launches 10 (FA3 10)", out)
        self.assertIn("10 FA3 launches (of the top kernels), none hooked", out)
        self.assertIn("the shim counted 2 internal errors", out)

    def test_tensor_parallel_ipc(self):
        """tp2 (issue 53): two ranks' stats, pools on both devices, IPC counted; an IPC error fails."""
        a = {"tp2.1.stock": self.arm(REF_TOKENS, tensor_parallel=2), "tp2.2.shim": self.arm(REF_TOKENS, tensor_parallel=2)}
        st = {"tp2.2.shim.stats-%d.json" % pid: {"alloc": {
            "pooled_allocs": 5, "ipc_exports": 3, "ipc_opens": 3, "ipc_errors": 0,
            "devices": [{"device": dev, "pooled_allocs": 5}, {"device": 1 - dev, "pooled_allocs": 0}]}}
            for pid, dev in ((7, 0), (8, 1))}
        rc, out = self.runs(a, st)
        self.assertEqual(rc, 0, out)
        self.assertIn("pools on devices 0,1; CUDA IPC of pooled memory: 6 exports, 6 opens, 0 errors", out)
        st["tp2.2.shim.stats-8.json"]["alloc"]["ipc_errors"] = 1
        rc, out = self.runs(a, st)
        self.assertEqual(rc, 1)
        self.assertIn("tp2.2.shim: 1 CUDA IPC calls on pooled memory failed", out)


if __name__ == "__main__":
    unittest.main()
