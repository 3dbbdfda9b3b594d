"""tests/gpu/serving/ponytail_control.py against a stand-in for the shim's control socket (a Unix
socket answering as shim/control.c does, one line in, key=value lines out): where it looks, what
it sends, how it reads the answer, and which process busiest() picks (the largest pool, skipping
excluded, dead and stale entries).

  test_control.py SERVING_DIR   (tests/gpu/serving)
"""
import os
import socket
import sys
import tempfile
import threading
import unittest

SERVING = os.path.abspath(sys.argv.pop(1))
sys.path.insert(0, SERVING)
import ponytail_control as pc  # noqa: E402


class FakeShim:
    """Serves ANSWERS[request] on DIR/PID.sock; records the requests."""

    def __init__(self, d, pid, answers):
        self.path = os.path.join(d, "%d.sock" % pid)
        self.answers, self.got = answers, []
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.bind(self.path)
        self.s.listen(4)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            line = b""
            while not line.endswith(b"\n"):
                b = c.recv(64)
                if not b:
                    break
                line += b
            req = line.decode().strip()
            self.got.append(req)
            c.sendall(self.answers.get(req, "error: unknown request\n").encode())
            c.close()

    def close(self):
        self.s.close()


class Control(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="pt-ctl-")
        os.environ["PONYTAIL_CONTROL_DIR"] = self.d
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.close()

    def fake(self, pid, pool_bytes, **more):
        f = FakeShim(self.d, pid, dict({"status": "ok\nstate=awake\nnow_pool_bytes=%d\n" % pool_bytes}, **more))
        self.fakes.append(f)
        return f

    def test_dir(self):
        self.assertEqual(pc.control_dir(), self.d)
        del os.environ["PONYTAIL_CONTROL_DIR"]
        os.environ["XDG_RUNTIME_DIR"] = "/run/user/7"
        self.assertEqual(pc.control_dir(), "/run/user/7/ponytail")
        os.environ["XDG_RUNTIME_DIR"] = "relative"
        self.assertEqual(pc.control_dir(), "/tmp/ponytail-%d" % os.geteuid())
        os.environ["PONYTAIL_CONTROL_DIR"] = self.d

    def test_ask_parses(self):
        me = os.getpid()
        f = self.fake(me, 5, sleep="ok\nstate=asleep\nbytes=1048576\nseconds=0.250000\nhost=registered\n",
                      wake="error: not asleep\n")
        a = pc.ask(me, "sleep")
        self.assertEqual(f.got, ["sleep"])
        self.assertTrue(a["ok"])
        self.assertEqual((a["bytes"], a["seconds"], a["host"]), (1048576, 0.25, "registered"))
        w = pc.ask(me, "wake")
        self.assertFalse(w["ok"])
        self.assertEqual(w["error"], "error: not asleep")

    def test_pool_work(self):
        me = os.getpid()
        js = '{"pid": 1, "alloc": {"grows": 7, "trims": 2, "syncs": 3, "map_ns": 5000, "pooled_allocs": 9}}'
        self.fake(me, 5, **{"stats json": "ok\n" + js + "\n"})
        w = pc.pool_work(me)
        self.assertEqual((w["grows"], w["trims"], w["syncs"], w["map_ns"], w["stitches"]), (7, 2, 3, 5000, 0))
        later = dict(w, grows=9, map_ns=8000)
        self.assertEqual(pc.work_delta(w, later)["grows"], 2)
        self.assertEqual(pc.work_delta(w, later)["map_ns"], 3000)
        self.assertIsNone(pc.work_delta(None, later))
        self.assertIsNone(pc.pool_work(999999999))  # no socket: None, not an exception

    def test_prepared_cycle(self):
        me = os.getpid()
        f = self.fake(me, 5, prepare="ok\nstate=awake\nmode=prepare\nbytes=1048576\n",
                      sleep="ok\nstate=asleep\nreused_bytes=1048576\n", wake="ok\nstate=awake\n")
        res = dict(psleep_pid=me)
        pc.prepared_cycle(None, res)
        self.assertEqual(f.got, ["prepare", "sleep", "wake"])
        self.assertEqual((res["pprep"]["bytes"], res["psleep2"]["reused_bytes"]), (1048576, 1048576))
        self.assertTrue(all(k in res for k in ("prep_s", "sleep2_s", "wake2_s")))
        bad = self.fake(me + 1 if me + 1 != os.getppid() else me + 2, 5, prepare="error: asleep\n")
        with self.assertRaises(RuntimeError):
            pc.prepared_cycle(None, dict(psleep_pid=int(os.path.basename(bad.path)[:-5])))

    def test_throughput_passes(self):
        import workload
        # the engine's model process: another live pid (this one's parent), whose pool's counters
        # go up by one grow between two readings
        grows = iter(range(100))
        f = self.fake(os.getppid(), 9 << 30)

        class Answers(dict):
            def get(self, k, d=None):
                if k == "stats json":
                    return "ok\n" + '{"alloc": {"grows": %d, "map_ns": 1000}}\n' % next(grows)
                return dict.get(self, k, d)
        f.answers = Answers(status="ok\nstate=awake\nnow_pool_bytes=%d\n" % (9 << 30))
        import time

        def gen(outs):  # a pass takes a few ms, as a real one takes time
            time.sleep(0.005)
            return next(outs)
        outs = iter([100, 200, 300])
        os.environ.pop("LD_PRELOAD", None)
        runs = workload.throughput_passes(3, 50, lambda: gen(outs))
        self.assertEqual(len(runs), 3)
        self.assertNotIn("pool", runs[0])  # not under the shim: nothing asked
        self.assertTrue(all(r["out_tok_s"] > 0 and r["total_tok_s"] > r["out_tok_s"] for r in runs))
        outs = iter([100, 200])
        os.environ["LD_PRELOAD"] = "/x/libponytail_shim.so"
        try:
            runs = workload.throughput_passes(2, 50, lambda: gen(outs))
        finally:
            del os.environ["LD_PRELOAD"]
        self.assertEqual([r["pool"]["grows"] for r in runs], [1, 1])
        self.assertEqual([r["pool"]["map_ns"] for r in runs], [0, 0])

    def test_busiest(self):
        me, parent = os.getpid(), os.getppid()
        self.fake(me, 9 << 30)        # excluded below
        self.fake(parent, 3 << 30)    # alive: the answer
        self.fake(1, 1 << 30)         # alive (init), smaller
        open(os.path.join(self.d, "999999999.sock"), "w").close()  # no such process
        open(os.path.join(self.d, "notes.txt"), "w").close()
        self.assertEqual(pc.busiest(exclude=(me,)), parent)
        self.assertEqual(pc.busiest(), me)
        os.environ["PONYTAIL_CONTROL_DIR"] = os.path.join(self.d, "missing")
        self.assertIsNone(pc.busiest())
        os.environ["PONYTAIL_CONTROL_DIR"] = self.d


if __name__ == "__main__":
    unittest.main()
