#!/usr/bin/env bash
# The control flow of tests/gpu/checks/sleep_wake.py's 10 GiB kinds and --discard (issue 50),
# which CI cannot run on a GPU: targets and the ponytail CLI are replaced by fakes whose sleeps
# and wakes succeed or fail as each case says. A failed wake or sleep kills its target (a target
# left asleep holds its CUDA calls, and the check would hang on it) and the check goes on to the
# next kind; no command is sent to a killed target; --discard runs on the last kind's target, or
# on a fresh one when that was killed; --deadline stops starting kinds; every failure is a FAIL
# row and the last line says FAIL. Usage: test_sleep_wake_flow.sh SLEEP_WAKE_PY
set -euo pipefail
script=$1
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "SKIP: no python3"; exit 77; }
"$py" - "$script" <<'PY'
import importlib.util, io, os, sys, tempfile, types, contextlib
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
torch = types.ModuleType("torch")  # the check imports torch at its top; nothing here uses it
torch.__version__ = "fake"
torch.cuda = types.SimpleNamespace(get_device_name=lambda: "fake GPU")
sys.modules["torch"] = torch
spec = importlib.util.spec_from_file_location("sleep_wake", sys.argv[1])
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)

GiB = 10 << 30
class World:
    def __init__(self, fail=()):
        self.fail, self.targets, self.log = set(fail), [], []

def make(world):
    class FakeTarget:
        def __init__(self, a, args, env):
            self.i, self.asleep, self.dead, self.ended, self.discarded = len(world.targets), False, False, False, False
            world.targets.append(self)
            self.pid, self.ready = 1000 + self.i, {"ready": True, "pid": 1000 + self.i}
        def cmd(self, c):
            assert not self.dead and not self.ended, "command %s sent to a finished target %d" % (c, self.i)
            assert not self.asleep, "command %s sent to target %d while asleep: the check would hang" % (c, self.i)
            world.log.append((self.i, c))
            return {"intact": True, "checked": True}
        def end(self):
            assert not self.asleep, "quit sent to target %d while asleep: its exit would hang" % self.i
            self.ended = True
        def kill(self):
            self.dead = True
        def alive(self):
            return not (self.dead or self.ended)
    def pt(a, *args):
        pid = int(args[-1])
        t = world.targets[pid - 1000]
        op = "prepare" if "--prepare" in args else "status" if "--status" in args else \
            "discard" if "--discard" in args else args[0]
        if op == "wake" and t.discarded:
            op = "wake-discard"
        world.log.append((t.i, op))
        if op == "status":
            return 0, {"ok": True, "last_release_s": 0.1}, "ok"
        if (t.i, op) in world.fail:  # the CLI says no; a failed sleep may still leave it asleep
            if op in ("sleep", "wake", "wake-discard"):
                t.asleep = True
            return 1, None, "ponytail %s: failed (injected)" % op
        if op in ("sleep", "discard"):
            t.asleep, t.discarded = True, op == "discard"
        elif op in ("wake", "wake-discard"):
            t.asleep = False
        ans = {"ok": True, "seconds": 0.2, "copied_bytes": GiB, "bytes": GiB, "copy_s": 0.19, "host_s": 0.0,
               "map_s": 0.01, "reused_bytes": GiB if op == "sleep" else 0}
        return 0, ans, "ok"
    return FakeTarget, pt

def run(kinds, fail=(), deadline=0):
    world = World(fail)
    S.Target, S.pt = make(world)
    S.copy_bandwidth = lambda: {"h2d": 50.0, "d2h": 50.0, "pin_alloc": 2.0, "touch1": 2.0, "touch8": 10.0}
    S.host_breakdown = lambda: {"thp_enabled": "x", "thp_defrag": "x"}
    S.tms_compare = lambda: S.row("torch_memory_saver", "not installed here")
    S.verdicts = S.Verdicts("sleep_wake", 44, 28)
    S.row = S.verdicts.row
    shim = tempfile.NamedTemporaryFile(suffix=".so")
    sys.argv = ["sleep_wake.py", "--ponytail", "/bin/true", "--shim", shim.name, "--kinds-only", "--kinds", kinds]
    if deadline:
        sys.argv += ["--deadline", str(deadline)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = S.main()
    world.text = out.getvalue()
    return rc, world.text.strip().splitlines()[-1], world

K3 = "registered:1,registered:1:prepare,registered:1:reuse"
# Everything succeeds: PASS, three targets, --discard on the last one.
rc, last, w = run(K3)
assert (rc, last) == (0, "sleep_wake: PASS"), (rc, last)
assert len(w.targets) == 3 and all(t.ended for t in w.targets), [(t.ended, t.dead) for t in w.targets]
assert (2, "check") in w.log and ("prepare" in [op for i, op in w.log if i == 1])
# The first kind's wake fails: that target is killed (it may be asleep), never asked to verify,
# and the other kinds still run; the check FAILs.
rc, last, w = run(K3, fail={(0, "wake")})
assert rc == 1 and "registered x1: wake" in last, last
assert w.targets[0].dead and (0, "verify") not in w.log, w.log
assert len(w.targets) == 3 and w.targets[2].ended
# The last kind's sleep fails: killed, and --discard gets a fresh target.
rc, last, w = run(K3, fail={(2, "sleep")})
assert rc == 1 and "reuse, 2nd sleep: first cycle" in last, last  # the reuse kind's first sleep
assert w.targets[2].dead and len(w.targets) == 4 and w.targets[3].ended, len(w.targets)
rc, last, w = run("registered:1,pinned:1", fail={(1, "sleep")})
assert rc == 1 and "pinned x1: sleep" in last, last
assert w.targets[1].dead and len(w.targets) == 3 and w.targets[2].ended
# The wake after --discard fails: the target is killed, not sent a check.
rc, last, w = run("registered:1", fail={(0, "wake-discard")})
assert rc == 1 and "wake after --discard" in last, last
assert w.targets[0].dead and w.log[-1] == (0, "wake-discard"), w.log
# --deadline already spent: no kind starts (a row says so), --discard still runs on a fresh target.
rc, last, w = run(K3, deadline=1)
assert rc == 0 and len(w.targets) == 1 and w.targets[0].ended, (rc, last, len(w.targets))
assert "not run: --deadline" in w.text and (0, "discard") in w.log, w.text
print("sleep_wake flow: ok")
PY
