"""Child processes of the GPU checks (families.py, host_tier.py): one run under a time limit that
ends it as a call's limit would (SIGTERM, so that it can write what it has, then SIGKILL), and
SIGTERM turned into an exception, so that a check killed at its limit unwinds to its table."""
import signal
import subprocess


def run_proc(cmd, env, log, timeout, grace):
    """cmd, its output into log, until it exits or timeout s pass: then SIGTERM, and SIGKILL grace
    s later. The return code, or "timeout"."""
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        return "timeout"


class Stopped(Exception):
    """Raised in the main thread by SIGTERM once raise_on_sigterm() is set."""


def raise_on_sigterm():
    """SIGTERM (check_all's limit) raises Stopped, once: a second one is ignored while the check
    writes its table (nothing is printed in the handler itself)."""
    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Stopped()
    signal.signal(signal.SIGTERM, on_term)
