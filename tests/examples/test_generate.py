#!/usr/bin/env python3
"""examples/generate.py's bookkeeping on the CPU, against the stand-in torch/transformers in
tests/examples/fake: the JSON record and its fields, exit codes, --tp's per-rank files and its
refusals, the out-of-memory and SIGTERM records. The GPU runs (tests/gpu/) measure; these check
that the script the measurements depend on still reports what it claims.

  python3 tests/examples/test_generate.py [path/to/generate.py]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "examples",
                                                                               "generate.py"))
SMALL = ["--batch", "3", "--prompt", "16", "--new-tokens", "6", "--pad", "0.5"]


def load(path):
    with open(path) as f:
        return json.load(f)


def run(args, env=None, timeout=60):
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD")}
    e["PYTHONPATH"] = os.path.join(HERE, "fake")
    e["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the source tree
    e.update(env or {})
    return subprocess.run([sys.executable, GENERATE] + args, env=e, capture_output=True, text=True,
                          timeout=timeout)


class Generate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_record(self):
        p = run(SMALL + ["--warmup", "--json", self.path("a.json")])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = load(self.path("a.json"))
        self.assertFalse(r["oom"])
        self.assertEqual(r["decode_step_ms"]["count"], 5)  # 6 tokens: 5 periods between them
        self.assertEqual(len(r["decode_profile_ms"]), 1)  # one block of up to 128 steps
        self.assertLessEqual(r["decode_step_ms"]["p50"], r["decode_step_ms"]["p99"])
        self.assertEqual(len(r["token_ids"]), 3)
        self.assertEqual(len(r["token_ids"][0]), 6)
        self.assertAlmostEqual(r["tokens_per_s"], 3 * 6 / r["total_s"], places=6)
        self.assertEqual(r["peak_allocated_bytes"], 3 << 30)
        self.assertEqual(r["peak_reserved_bytes"], 4 << 30)
        self.assertEqual(r["settings"]["tp_world"], 1)
        self.assertEqual(r["settings"]["batch"], 3)
        for k in ("main_thread_cpu_s", "process_cpu_s"):
            self.assertGreaterEqual(r[k], 0.0)
            self.assertLessEqual(r[k], r["total_s"] * 32 + 0.1)  # CPU time of a bounded process
        self.assertGreaterEqual(r["involuntary_switches"], 0)
        self.assertIn("generate: batch 3 prompt 16 new 6", p.stdout)
        # The same seed, the same tokens; another seed, other prompts.
        run(SMALL + ["--json", self.path("b.json")])
        run(SMALL + ["--seed", "7", "--json", self.path("c.json")])
        b, c = (load(self.path(n)) for n in ("b.json", "c.json"))
        self.assertEqual(r["token_ids_sha256"], b["token_ids_sha256"])
        self.assertNotEqual(r["token_ids_sha256"], c["token_ids_sha256"])

    def test_logits_file_has_token_ids(self):
        # examples/verdict.py compares a row's logits only while both runs fed the same tokens.
        p = run(SMALL + ["--json", self.path("l.json"), "--logits-out", self.path("l.pt"), "--logits-steps", "2"])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("l.pt")) as f:
            saved = eval(f.read())  # the fake torch.save writes repr()
        self.assertEqual(saved["token_ids"], load(self.path("l.json"))["token_ids"])
        self.assertEqual(saved["logits"], [])  # the fake model keeps no logits

    def test_prompt_vocab(self):
        # One id to draw from: every prompt token is 3 (the first after the special ids), and the
        # fake model's tokens follow from the prompt's sum, 16 * 3.
        p = run(SMALL + ["--pad", "0", "--prompt-vocab", "1", "--json", self.path("v.json")])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = load(self.path("v.json"))
        self.assertEqual(r["token_ids"], [[48 + k for k in range(6)]] * 3)
        self.assertEqual(r["settings"]["prompt_vocab"], 1)
        full = run(SMALL + ["--pad", "0", "--json", self.path("f.json")])
        self.assertEqual(full.returncode, 0, full.stderr)
        self.assertNotEqual(load(self.path("f.json"))["token_ids"], r["token_ids"])

    def test_prompt_vocab_range(self):
        for n in ("0", "31998"):
            p = run(SMALL + ["--prompt-vocab", n])
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("--prompt-vocab must be within 1..31997", p.stderr)

    def test_weights_missing(self):
        p = run(SMALL + ["--weights", self.path("none.pt")])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no such file", p.stderr)

    def test_tp_outside_torchrun(self):
        p = run(SMALL + ["--tp"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--tp runs under torchrun", p.stderr)

    def test_tp_indivisible(self):
        p = run(SMALL + ["--tp"], env={"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("heads (16) is not divisible by the 3 ranks", p.stderr)

    def test_tp_rank_files(self):
        log = self.path("dist.log")
        for rank, out in ((0, "t.json"), (1, "t-{rank}.json")):
            env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "FAKE_DIST_LOG": log}
            p = run(SMALL + ["--tp", "--json", self.path(out)], env=env)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("generate[rank %d/2]: batch 3" % rank, p.stdout)
        r0 = load(self.path("t.json.rank0"))
        r1 = load(self.path("t-1.json"))
        self.assertEqual(r0["settings"]["tp_world"], 2)
        self.assertEqual(r0["token_ids_sha256"], r1["token_ids_sha256"])
        with open(log) as f:
            calls = f.read().split("\n")
        for rank in (0, 1):
            mine = [c.split(" rank ")[0] for c in calls if c.endswith("rank %d" % rank)]
            self.assertEqual(mine, ["init nccl", "barrier", "destroy"])

    def test_oom(self):
        for at, phase, code in ((0, "prefill", 3), (3, "decode", 3)):
            p = run(SMALL + ["--json", self.path("o.json")], env={"FAKE_GEN_OOM_AT": str(at)})
            self.assertEqual(p.returncode, code, p.stderr)
            r = load(self.path("o.json"))
            self.assertTrue(r["oom"])
            self.assertEqual(r["oom_phase"], phase)
            self.assertEqual(r["decode_steps_done"], at)
            self.assertIn("out of memory in %s" % phase, p.stderr)

    def test_sigterm(self):
        e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD")}
        e.update(PYTHONPATH=os.path.join(HERE, "fake"), PYTHONDONTWRITEBYTECODE="1", FAKE_GEN_STEP_S="0.01")
        proc = subprocess.Popen([sys.executable, GENERATE, "--new-tokens", "100000", "--json", self.path("s.json")],
                                env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # well into the decode steps (10 ms each)
        self.assertIsNone(proc.poll())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 143, err)
        r = load(self.path("s.json"))
        self.assertTrue(r["interrupted"])
        self.assertFalse(r["oom"])
        # The step time it had reached, block by block (10 ms steps, ~100 of them in 1 s).
        self.assertGreaterEqual(len(r["decode_profile_ms"]), 1)
        self.assertGreaterEqual(r["decode_profile_ms"][0], 9.0)
        self.assertEqual(r["decode_steps_done"] - 1, r["decode_step_ms"]["count"])
        self.assertIn("interrupted (SIGTERM)", err)

    def lockstep_pair(self, env0, env1, n=8):
        """Runs roles 0 and 1 of --lockstep at once; returns their exit codes, stderr and JSON."""
        procs = []
        for role, extra in ((0, env0), (1, env1)):
            e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD")}
            e.update(PYTHONPATH=os.path.join(HERE, "fake"), PYTHONDONTWRITEBYTECODE="1", **extra)
            procs.append(subprocess.Popen(
                [sys.executable, GENERATE] + SMALL[:4] + ["--new-tokens", str(n), "--json", self.path("l%d.json" % role),
                                                          "--lockstep", "%s:%d" % (self.path("turns"), role)],
                env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        res = []
        for role, proc in enumerate(procs):
            _, err = proc.communicate(timeout=60)
            res.append((proc.returncode, err, load(self.path("l%d.json" % role))))
        return res

    def test_lockstep_turns(self):
        # Steps of 10 ms and 30 ms taking turns: each process's clock counts its own turns only
        # (total ratio ~3, where running freely would also give ~3 but the wall of each is the sum).
        (c0, e0, r0), (c1, e1, r1) = self.lockstep_pair({"FAKE_GEN_STEP_S": "0.01"}, {"FAKE_GEN_STEP_S": "0.03"})
        self.assertEqual((c0, c1), (0, 0), e0 + e1)
        l0, l1 = r0["lockstep"], r1["lockstep"]
        self.assertEqual((l0["role"], l1["role"]), (0, 1))
        self.assertEqual(l0["turns"], 9)  # the prefill's, 7 decode steps', the end's
        self.assertEqual(l1["turns"], 9)
        self.assertIsNone(l0["alone"])
        self.assertEqual(l1["alone_from"], 9)  # role 0 finished first: role 1's last turn is alone
        self.assertAlmostEqual(sum(l0["turn_ms"]) / 1000.0, r0["total_s"], delta=0.01)
        ratio = r1["total_s"] / r0["total_s"]
        self.assertGreater(ratio, 2.0)
        self.assertLess(ratio, 4.0)
        # Turns alternate: role 0 waited through role 1's turns 1-8 (its 9th runs alone, after role
        # 0 ended), so role 0's wall holds its own turns and those. Counted from the turns each
        # measured, not from the totals: a slow machine (the sanitizer build) stretches the
        # hand-overs and role 1's lone last turn, which a fixed share of the totals did not allow.
        other = sum(l1["turn_ms"][:8]) / 1000.0
        self.assertGreater(l0["waited_s"], 0.95 * other)
        self.assertGreater(l0["wall_s"], 0.95 * (sum(l0["turn_ms"]) / 1000.0 + other))
        self.assertLess(r1["decode_step_ms"]["p50"], 45.0)  # its own steps, not the pair's (40 ms)
        self.assertGreater(r1["decode_step_ms"]["p50"], 25.0)

    def test_lockstep_partner_fails(self):
        # Role 1 runs out of memory at its third step: role 0 runs on alone at once, no timeout.
        t = time.monotonic()
        (c0, e0, r0), (c1, _, r1) = self.lockstep_pair({"FAKE_GEN_STEP_S": "0.01"},
                                                        {"FAKE_GEN_STEP_S": "0.01", "FAKE_GEN_OOM_AT": "3"}, n=20)
        self.assertLess(time.monotonic() - t, 30.0)
        self.assertEqual((c0, c1), (0, 3), e0)
        self.assertTrue(r1["oom"])
        self.assertEqual(r1["lockstep"]["turns"], 3)
        self.assertEqual(r0["lockstep"]["turns"], 21)
        self.assertEqual(r0["lockstep"]["alone"], "the other process ended")
        self.assertLessEqual(r0["lockstep"]["alone_from"], 5)

    def test_lockstep_bad_spec(self):
        p = run(SMALL + ["--lockstep", self.path("t") + ":2"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ROLE 0 or 1", p.stderr)

    def test_mem_cap_too_large(self):
        p = run(SMALL + ["--mem-cap", "1T"], env={"FAKE_TORCH_TOTAL": str(1 << 30)})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("exceeds the device's", p.stderr)


    def test_timeline(self):
        p = run(SMALL + ["--timeline-ms", "5", "--json", self.path("t.json")], env={"FAKE_GEN_STEP_S": "0.02"})
        self.assertEqual(p.returncode, 0, p.stderr)
        tl = load(self.path("t.json"))["timeline"]
        self.assertGreaterEqual(len(tl), 2)  # one at the start, one at the end, more between
        self.assertEqual([s["t"] for s in tl], sorted(s["t"] for s in tl))
        self.assertEqual((tl[-1]["allocated"], tl[-1]["reserved"]), (2 << 30, 3 << 30))
        self.assertNotIn("host_tier", tl[-1])  # not under the shim's host tier: nothing asked

    def tier_timeline(self, env, sock_dir):
        """generate.py under a (stand-in) shim with a host tier: its timeline asks the control socket
        <sock_dir>/<pid>.sock, served here, for now_tier_bytes."""
        import socket
        import threading
        e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        e.update(PYTHONPATH=os.path.join(HERE, "fake"), PYTHONDONTWRITEBYTECODE="1", FAKE_GEN_STEP_S="0.03",
                 LD_PRELOAD=self.path("libponytail_shim.so"), PONYTAIL_HOST_TIER="1G")
        for k in ("PONYTAIL_CONTROL_DIR", "XDG_RUNTIME_DIR"):
            e.pop(k, None)
        e.update(env)
        proc = subprocess.Popen([sys.executable, GENERATE] + SMALL + ["--warmup", "--timeline-ms", "5", "--json",
                                self.path("tier.json")], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        # Owner-only, as the shim makes it. The default directory is shared with every shim that
        # runs meanwhile (the preload tests, in parallel): it is left in place, as the shim leaves it.
        os.makedirs(sock_dir, mode=0o700, exist_ok=True)
        path = os.path.join(sock_dir, "%d.sock" % proc.pid)
        # A socket file of that name is a stale one of an ended process whose pid this child got
        # (the shim replaces such a file the same way): nothing listens on it.
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(8)
        asked = []

        def serve():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                with c:
                    asked.append(c.recv(64))
                    c.sendall(b"state=awake\nnow_tier_bytes=12345\n")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            srv.close()
            os.unlink(path)
        self.assertEqual(proc.returncode, 0, err)
        self.assertTrue(asked and all(a == b"status\n" for a in asked), asked)
        tl = load(self.path("tier.json"))["timeline"]
        # The first sample may come before the socket is bound here; the last one cannot.
        self.assertEqual(tl[-1]["host_tier"], 12345)

    def test_timeline_tier_control_dir(self):
        d = self.path("ctl")
        self.tier_timeline({"PONYTAIL_CONTROL_DIR": d, "XDG_RUNTIME_DIR": self.path("xdg")}, d)

    def test_timeline_tier_xdg(self):
        self.tier_timeline({"XDG_RUNTIME_DIR": self.path("xdg")}, self.path("xdg/ponytail"))

    def test_timeline_tier_default_dir(self):
        # A relative XDG_RUNTIME_DIR is ignored, as the shim does (common/control_path.c).
        self.tier_timeline({"XDG_RUNTIME_DIR": "relative/xdg"}, "/tmp/ponytail-%d" % os.getuid())

if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
