"""The shim's control socket, from Python: what `ponytail sleep PID` / `ponytail wake PID` send
(shim/control.c: one line per connection, owner-only socket in the control directory), so that a
serving arm can put an engine's model process to sleep without carrying the CLI.

The directory is the shim's: PONYTAIL_CONTROL_DIR, else $XDG_RUNTIME_DIR/ponytail, else
/tmp/ponytail-UID (common/control_path.c).
"""
import os
import socket
import time


def control_dir():
    d = os.environ.get("PONYTAIL_CONTROL_DIR", "")
    if d:
        return d
    x = os.environ.get("XDG_RUNTIME_DIR", "")
    return x + "/ponytail" if x.startswith("/") else "/tmp/ponytail-%d" % os.geteuid()


def _raw(pid, req, timeout):
    """The whole answer to one request, as text."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(os.path.join(control_dir(), "%d.sock" % pid))
        s.sendall((req + "\n").encode())
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
    finally:
        s.close()
    return data.decode(errors="replace")


def ask(pid, req, timeout=600):
    """One request ("status", "sleep", "sleep discard", "prepare", "wake"): the answer as a dict
    of its key=value lines, "ok" True or False, "error" the first line when it is not ok."""
    lines = _raw(pid, req, timeout).splitlines()
    out = {"ok": bool(lines) and lines[0] == "ok"}
    if not out["ok"]:
        out["error"] = lines[0] if lines else "no answer"
    for ln in lines[1:]:
        k, sep, v = ln.partition("=")
        if sep:
            try:
                out[k] = float(v) if "." in v else int(v)
            except ValueError:
                out[k] = v
    return out


# The pool's counters that say how much work it did (shim/route_stats.c's JSON "alloc" object).
POOL_WORK = ("grows", "trims", "syncs", "stitches", "map_ns", "wait_ns", "pooled_allocs", "pooled_frees")


def pool_work(pid, timeout=30):
    """The process's pool counters now ({name: value} of POOL_WORK, from its "stats json"
    answer), or None when it cannot be asked."""
    import json
    try:
        text = _raw(pid, "stats json", timeout)
    except OSError:
        return None
    if not text.startswith("ok\n"):
        return None
    try:
        alloc = json.loads(text[3:]).get("alloc") or {}
    except ValueError:
        return None
    return {k: alloc.get(k, 0) for k in POOL_WORK}


def work_delta(before, after):
    """What the pool did between two pool_work() readings (None when either is missing)."""
    if not before or not after:
        return None
    return {k: after[k] - before[k] for k in POOL_WORK}


def busiest(exclude=()):
    """The pid, among the processes with a live control socket (exclude left out), whose pool
    holds the most memory now: an engine's model process. None when there is none."""
    best, most = None, -1
    try:
        names = os.listdir(control_dir())
    except OSError:
        return None
    for n in names:
        if not n.endswith(".sock") or not n[:-5].isdigit():
            continue
        pid = int(n[:-5])
        if pid in exclude:
            continue
        try:
            os.kill(pid, 0)
            st = ask(pid, "status", timeout=10)
        except OSError:
            continue
        if st.get("ok") and st.get("now_pool_bytes", 0) > most:
            best, most = pid, st.get("now_pool_bytes", 0)
    return best


def _timed(pid, req, res, key, secs_key):
    """ask(pid, req): the answer in res[key], its seconds in res[secs_key] (kept when it failed
    too); RuntimeError when it is not ok."""
    t0 = time.time()
    res[key] = ask(pid, req)
    res[secs_key] = round(time.time() - t0, 3)
    if not res[key].get("ok"):
        raise RuntimeError("ponytail %s %d: %s" % (req, pid, res[key].get("error")))


def sleep_wake(nv, res):
    """`ponytail sleep` then `ponytail wake` of this process tree's busiest pool (an engine's model
    process), as the serving arms' --ponytail-sleep does: fills res with the pid, the shim's
    answers (psleep, pwake), sleep_s, wake_s and NVML's device figure before, asleep (half a
    second in) and freed. Raises RuntimeError when there is no such process or a request fails."""
    pid = busiest(exclude=(os.getpid(),))
    res["psleep_pid"] = pid
    if pid is None:
        raise RuntimeError("--ponytail-sleep: no engine process with a control socket in %s" % control_dir())
    before = nv.now_mib()
    _timed(pid, "sleep", res, "psleep", "sleep_s")
    time.sleep(0.5)
    asleep = nv.now_mib()
    _timed(pid, "wake", res, "pwake", "wake_s")
    res.update(sleep_before_mib=before, sleep_asleep_mib=asleep,
               sleep_freed_mib=(before - asleep) if before is not None and asleep is not None else None)


def prepared_cycle(nv, res):
    """After sleep_wake(): `ponytail sleep --prepare` of the same process while it runs, then a
    sleep and a wake that copy into that memory (the first sleep's cost is getting host memory):
    res gets pprep, prep_s, psleep2, sleep2_s, pwake2, wake2_s. Raises RuntimeError when a
    request fails."""
    pid = res.get("psleep_pid")
    if pid is None:
        raise RuntimeError("prepared_cycle: no process slept before")
    _timed(pid, "prepare", res, "pprep", "prep_s")
    _timed(pid, "sleep", res, "psleep2", "sleep2_s")
    _timed(pid, "wake", res, "pwake2", "wake2_s")
