#!/usr/bin/env python3
"""Does `ponytail sleep` leave a CUDA graph capture of the program alone? Run under the shim (the
script asks the control socket of its own process through the CLI):

  LD_PRELOAD=build-gpu/shim/libponytail_shim.so python3 tests/gpu/checks/sleep_capture.py \\
      build-gpu/tools/ponytail

While a thread holds a `torch.cuda.graph` capture open (global mode, PyTorch's default), the
script asks `ponytail sleep --status`, `sleep` (must be refused: a capture is in progress),
`sleep --prepare` and `sleep --unprepare` (page-locking and freeing host memory while the program
captures), then lets the capture end: it must succeed and its graph replay correctly. Then a
sleep and a wake, and a capture begun right after the wake, while the shim frees the host memory
(the deferred release): it must succeed too. Last line: "sleep_capture: PASS" or "FAIL: ...".
Exit 0 only on PASS.
"""
import os
import subprocess
import sys
import threading
import time

import torch

PT = sys.argv[1] if len(sys.argv) > 1 else "build-gpu/tools/ponytail"
PID = str(os.getpid())
fails = []


def ask(*args):
    r = subprocess.run([PT] + list(args) + [PID], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip().splitlines()
    return r.returncode, out[0][:100] if out else ""


def held_capture(tag, requests):
    """Capture y.add_(1) in a thread, hold it open while the requests run, then end it; the
    graph must replay: y goes up by one per replay."""
    s = torch.cuda.Stream()
    go, done, res = threading.Event(), threading.Event(), {}
    g = torch.cuda.CUDAGraph()

    def body():
        try:
            with torch.cuda.graph(g, stream=s):
                y.add_(1)
                go.set()
                done.wait()
            res["ok"] = True
        except Exception as e:  # the capture was invalidated: what this check is for
            res["error"] = repr(e)[:160]
            go.set()

    t = threading.Thread(target=body)
    t.start()
    go.wait()
    answers = [(req, ask(*req)) for req in requests]
    done.set()
    t.join()
    for req, (rc, line) in answers:
        print("%-4s %-28s rc %d  %s" % (tag, " ".join(req), rc, line), flush=True)
    if not res.get("ok"):
        fails.append("%s: the capture failed: %s" % (tag, res.get("error")))
        return answers
    before = y.clone()
    g.replay()
    torch.cuda.synchronize()
    if not torch.equal(y, before + 1):
        fails.append("%s: the captured graph does not replay correctly" % tag)
    print("%-4s capture ended and replayed correctly" % tag, flush=True)
    return answers


x = torch.full((2 << 30,), 7, dtype=torch.uint8, device="cuda")  # 2 GiB in the pool
y = torch.zeros(1024, device="cuda")
torch.cuda.synchronize()
rc, line = ask("sleep", "--status")
if rc:
    print("sleep_capture: FAIL: no control socket (%s): run it under the shim" % line)
    sys.exit(1)

ans = held_capture("A", [("sleep", "--status"), ("sleep",), ("sleep", "--prepare"), ("sleep", "--unprepare")])
rc, line = ans[1][1]
if rc == 0 or "capture" not in line:
    fails.append("A: a sleep during a capture was not refused: rc %d %s" % (rc, line))
if ans[2][1][0] != 0:
    fails.append("A: prepare during a capture failed: %s" % ans[2][1][1])

# A sleep and a wake, then a capture at once, while the wake's host memory is being freed.
rc1, l1 = ask("sleep")
rc2, l2 = ask("wake")
print("B    sleep rc %d %s | wake rc %d %s" % (rc1, l1, rc2, l2), flush=True)
if rc1 or rc2:
    fails.append("B: sleep/wake failed: %s / %s" % (l1, l2))
g2 = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g2):
        y.add_(1)
        time.sleep(0.5)  # the deferred release runs meanwhile
    print("B    capture right after the wake succeeded", flush=True)
except Exception as e:
    fails.append("B: a capture right after the wake failed: %r" % e)
if not bool((x == 7).all()):
    fails.append("B: the pooled bytes changed across the sleep")
print("sleep_capture: " + ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
sys.exit(1 if fails else 0)
