#!/usr/bin/env python3
"""examples/verdict.py, the correctness verdict of `ponytail bench`, on hand-made logits (plain
nested lists: steps of [batch][vocab] rows) and, through its CLI, on recorded logits files in
JSON form. No torch needed.

  python3 tests/examples/test_verdict.py [path/to/verdict.py]
"""
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
VERDICT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "examples",
                                                                              "verdict.py"))
spec = importlib.util.spec_from_file_location("verdict", VERDICT)
verdict = importlib.util.module_from_spec(spec)
sys.dont_write_bytecode = True
spec.loader.exec_module(verdict)

# Two sequences, vocab 4, 3 steps. max |A| = 8 at every step, sum |A| per step = 40.
BASE = [[[1.0, -2.0, 4.0, 0.5], [8.0, 0.25, -3.0, 1.25]],
        [[2.0, 1.0, -1.0, 6.0], [0.5, 8.0, 2.0, 3.5]],
        [[8.0, 3.0, 2.0, -1.0], [1.0, 1.0, 4.0, 20.0 - 19.0]]]
TOKENS = [[2, 3, 0], [0, 1, 2]]


def copy(steps):
    return [[list(row) for row in rows] for rows in steps]


def bumped(steps, delta, step=None, row=0, col=0):
    """steps with `delta` added at [t][row][col] for every t (or only `step`)."""
    out = copy(steps)
    for t in range(len(out)):
        if step is None or t == step:
            out[t][row][col] += delta
    return out


def arm(logits, tokens=TOKENS):
    return dict(logits=copy(logits), token_ids=[list(t) for t in tokens] if tokens is not None else None)


class RelDiff(unittest.TestCase):
    def test_identical(self):
        d = verdict.rel_diff(BASE, copy(BASE))
        self.assertTrue(d["identical"])
        self.assertEqual(d["max_rel"], 0.0)
        self.assertEqual(d["mean_rel"], 0.0)
        self.assertEqual(d["steps"], 3)

    def test_values(self):
        # 0.08 at one element of step 1: max rel 0.08 / 8 = 1e-2 there; mean 0.08 / (3 * 40 - ...)
        x = bumped(BASE, 0.08, step=1)
        d = verdict.rel_diff(BASE, x)
        self.assertFalse(d["identical"])
        for got, want in zip([s["max_rel"] for s in d["per_step"]], [0.0, 0.01, 0.0]):
            self.assertAlmostEqual(got, want)
        sa = sum(abs(v) for rows in BASE for row in rows for v in row)
        self.assertAlmostEqual(d["mean_rel"], 0.08 / sa)
        self.assertAlmostEqual(d["max_rel"], 0.01)
        self.assertEqual(verdict.rel_diff(BASE, x, steps=1)["max_rel"], 0.0)  # only step 0 looked at

    def test_rows_after_divergence_skipped(self):
        # Sequence 1 diverges at step 1: its step 2 row (fed another token) is not compared,
        # its step 1 row (same inputs, the logits that made the difference) is.
        x = bumped(bumped(BASE, 5.0, step=2, row=1), 0.08, step=1, row=1)
        d = verdict.rel_diff(BASE, x, first=[None, 1])
        self.assertAlmostEqual(d["max_rel"], 0.01)
        self.assertEqual([s["rows"] for s in d["per_step"]], [2, 2, 1])


class Agreement(unittest.TestCase):
    def test_divergence_at_step_k(self):
        a = [[5, 6, 7, 8], [1, 2, 3, 4]]
        x = [[5, 6, 9, 8], [1, 2, 3, 4]]  # sequence 0 diverges at step 2
        g = verdict.agreement(a, x)
        self.assertFalse(g["identical"])
        self.assertEqual(g["first_divergent_step"], 2)
        self.assertEqual([p["first_divergent_step"] for p in g["per_sequence"]], [2, None])
        self.assertEqual([p["share"] for p in g["per_sequence"]], [0.5, 1.0])
        self.assertEqual(g["share_before_divergence"], 6 / 8)

    def test_overall_is_earliest(self):
        g = verdict.agreement([[1, 2, 3], [4, 5, 6]], [[1, 0, 3], [9, 5, 6]])
        self.assertEqual(g["first_divergent_step"], 0)
        self.assertEqual(g["share_before_divergence"], 1 / 6)

    def test_identical(self):
        g = verdict.agreement([[1, 2], [3, 4]], [[1, 2], [3, 4]])
        self.assertTrue(g["identical"])
        self.assertIsNone(g["first_divergent_step"])
        self.assertEqual(g["share_before_divergence"], 1.0)


class Verdict(unittest.TestCase):
    def test_identical_within(self):
        r = verdict.verdict(arm(BASE), arm(copy(BASE)), arm(bumped(BASE, 0.08)))
        self.assertEqual(r["status"], "within")
        self.assertTrue(r["b"]["identical"])
        self.assertTrue(r["line"].startswith("verdict: within PyTorch's own backend spread"))
        self.assertEqual(r["lines"][0], r["line"])
        self.assertEqual(verdict.EXIT[r["status"]], 0)

    def test_smaller_than_spread_within(self):
        r = verdict.verdict(arm(BASE), arm(bumped(BASE, 0.04)), arm(bumped(BASE, 0.08, row=1, col=2)))
        self.assertEqual(r["status"], "within")
        self.assertAlmostEqual(r["b"]["max_rel"], 0.005)
        self.assertAlmostEqual(r["spread"]["max_rel"], 0.01)
        self.assertIn("max rel diff 5.00e-03 vs 1.00e-02", r["line"])

    def test_larger_than_spread_outside(self):
        r = verdict.verdict(arm(BASE), arm(bumped(BASE, 0.8)), arm(bumped(BASE, 0.08)))
        self.assertEqual(r["status"], "outside")
        self.assertIn("OUTSIDE", r["line"])
        self.assertIn("1.00e-01 vs 1.00e-02", r["line"])  # both numbers
        self.assertEqual(verdict.EXIT[r["status"]], 3)

    def test_margin(self):
        # 1.5x the spread: within the default margin 2, outside margin 1.
        b, ref = arm(bumped(BASE, 0.12)), arm(bumped(BASE, 0.08))
        self.assertEqual(verdict.verdict(arm(BASE), b, ref)["status"], "within")
        self.assertEqual(verdict.verdict(arm(BASE), b, ref, margin=1.0)["status"], "outside")

    def test_mean_alone_can_be_outside(self):
        # Same max as the spread, but spread over every element: the mean is 8x the spread's.
        b = copy(BASE)
        for rows in b:
            for row in rows:
                row[:] = [v + 0.08 for v in row]
        r = verdict.verdict(arm(BASE), arm(b), arm(bumped(BASE, 0.08)))
        self.assertEqual(r["status"], "outside")
        self.assertIn("mean rel diff", r["line"])

    def test_nan_or_inf_fails_loudly(self):
        for which in ("a", "b", "r"):
            for bad in (float("nan"), float("inf"), float("-inf")):
                arms = dict(a=arm(BASE), b=arm(bumped(BASE, 0.0)), r=arm(bumped(BASE, 0.08)))
                arms[which]["logits"][1][1][3] = bad
                r = verdict.verdict(arms["a"], arms["b"], arms["r"])
                self.assertEqual(r["status"], "nonfinite", (which, bad))
                self.assertIn("FAIL: NaN/Inf", r["line"])
                self.assertIn("%s step 1: 1 value" % which.upper(), r["line"])
                self.assertEqual(verdict.EXIT[r["status"]], 4)
                json.dumps(verdict.clean(r), allow_nan=False)  # still strict JSON
                self.assertIsNone(verdict.clean(r)["b" if which != "r" else "spread"]["mean_rel"])

    def test_nan_beyond_the_steps_ignored(self):
        b = bumped(BASE, 0.0)
        b[2][0][0] = float("nan")
        self.assertEqual(verdict.verdict(arm(BASE), arm(b), arm(BASE), steps=2)["status"], "within")

    def test_tokens_in_record_and_lines(self):
        toks = [[2, 3, 0], [0, 9, 2]]  # sequence 1 diverges at step 1
        r = verdict.verdict(arm(BASE), arm(bumped(BASE, 0.04), toks), arm(bumped(BASE, 0.08)))
        t = r["tokens"]["b"]
        self.assertEqual(t["first_divergent_step"], 1)
        self.assertAlmostEqual(t["share_before_divergence"], 4 / 6)
        self.assertTrue(r["tokens"]["r"]["identical"])
        self.assertTrue(any("66.7% of positions before the first divergence; first divergent step 1 "
                            "(per sequence: -,1)" in line for line in r["lines"]))

    def test_same_path_identical(self):
        b = bumped(BASE, 0.04)
        r = verdict.verdict(arm(BASE), arm(b), arm(bumped(BASE, 0.08)), s=arm(copy(b)))
        self.assertTrue(r["same_path"]["identical"])
        self.assertTrue(any(line.startswith("  logits B vs S") and line.endswith("identical") for line in r["lines"]))

    def test_no_reference(self):
        r = verdict.verdict(arm(BASE), arm(bumped(BASE, 0.04)))
        self.assertEqual(r["status"], "no_reference")
        self.assertIsNone(r["spread"])

    def test_spread_zero_noted(self):
        r = verdict.verdict(arm(BASE), arm(bumped(BASE, 0.04)), arm(copy(BASE)))
        self.assertEqual(r["status"], "outside")
        self.assertIn("spread 0", r["line"])

    def test_without_tokens(self):
        r = verdict.verdict(arm(BASE, None), arm(bumped(BASE, 0.04), None), arm(bumped(BASE, 0.08), None))
        self.assertEqual(r["status"], "within")
        self.assertIsNone(r["tokens"]["b"])


class Cli(unittest.TestCase):
    """The CLI on recorded logits (JSON files of generate.py's .pt layout)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, logits, tokens=TOKENS):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            # json writes NaN/Infinity tokens for non-finite floats, as a recording may hold them
            json.dump(dict(logits=logits, token_ids=tokens), f)
        return path

    def run_cli(self, *args):
        return subprocess.run([sys.executable, VERDICT] + list(args), capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))

    def test_json_within(self):
        a, b, r = self.write("a.json", BASE), self.write("b.json", bumped(BASE, 0.04)), self.write(
            "r.json", bumped(BASE, 0.08))
        p = self.run_cli(a, b, r, "--json", "--label", "r=stock flash")
        self.assertEqual(p.returncode, 0, p.stderr)
        rec = json.loads(p.stdout)
        self.assertEqual(rec["status"], "within")
        self.assertEqual(rec["steps"], 3)
        self.assertEqual(rec["labels"]["r"], "stock flash")
        self.assertIn("stock flash", "\n".join(rec["lines"]))

    def test_outside_exit_3(self):
        a, b, r = self.write("a.json", BASE), self.write("b.json", bumped(BASE, 0.8)), self.write(
            "r.json", bumped(BASE, 0.08))
        p = self.run_cli(a, b, r, "--steps", "2")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertTrue(p.stdout.startswith("verdict: OUTSIDE PyTorch's own backend spread (max rel diff "
                                            "1.00e-01 vs 1.00e-02"), p.stdout)

    def test_nan_exit_4_strict_json(self):
        b = bumped(BASE, 0.0)
        b[0][0][1] = float("nan")
        a, b, r = self.write("a.json", BASE), self.write("b.json", b), self.write("r.json", bumped(BASE, 0.08))
        p = self.run_cli(a, b, r, "--json")
        self.assertEqual(p.returncode, 4, p.stderr)
        def strict(name):
            raise ValueError("non-strict JSON constant " + name)
        rec = json.loads(p.stdout, parse_constant=strict)  # strict JSON for ponytail's reader
        self.assertEqual(rec["status"], "nonfinite")
        self.assertEqual(rec["nonfinite"], [dict(arm="B", step=0, count=1)])

    def test_unreadable_exit_1(self):
        p = self.run_cli(os.path.join(self.tmp.name, "missing.pt"), self.write("b.json", BASE))
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot read the logits", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
