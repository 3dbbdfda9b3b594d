"""Two processes taking turns, one decode step each, through their measured
generate() calls: a paired wall-time comparison (examples/generate.py
--lockstep DIR:ROLE; tests/gpu/bench/wall_pair.sh LOCKSTEP=1).

Why: this HF decode is CPU-bound, and the test machine's CPU speed drifts by
tens of percent between runs and between two processes running at the same
time (bench/records/2026-11-29-host-cost-per-allocation.md and
2026-11-29-wall-time-gpu-per-process.md), far more than the 3% to be
resolved. Taking turns at every step puts both runs' steps into the same tens
of milliseconds of machine conditions, and only one process runs at a time, so
neither contends with the other for CPUs, memory bandwidth or the GPU. Each
process times its own turns only: its clock (own_now) stops while the other
has the turn.

Protocol: two FIFOs in DIR, turn0 and turn1; a process waits on its own and
writes to the other's. Role 1 announces it is ready; role 0 waits for that,
then runs the first turn. Each turn ends after a device synchronize, so the
GPU is idle when the other process starts. A process that ends (normally or
not) writes "q": the other then runs alone, without waiting any more.
"""
import os
import select
import sys
import time


def parse_spec(spec):
    """DIR:ROLE -> (DIR, ROLE); ValueError unless ROLE is 0 or 1 and DIR is given."""
    d, _, role = spec.rpartition(":")
    if not d or role not in ("0", "1"):
        raise ValueError("--lockstep takes DIR:ROLE with ROLE 0 or 1, not %r" % spec)
    return d, int(role)


class Lockstep:
    def __init__(self, spec, timeout_s=120.0, first_timeout_s=600.0):
        d, self.role = parse_spec(spec)
        os.makedirs(d, exist_ok=True)
        paths = [os.path.join(d, "turn%d" % i) for i in (0, 1)]
        for p in paths:
            try:
                os.mkfifo(p, 0o600)
            except FileExistsError:
                pass
        # O_RDWR (Linux): opening waits for no peer, and a write never fails
        # with EPIPE after the peer has exited.
        self.rd = os.open(paths[self.role], os.O_RDWR)
        self.wr = os.open(paths[1 - self.role], os.O_RDWR)
        self.timeout_s, self.first_timeout_s = timeout_s, first_timeout_s
        self.turns = []  # seconds of each of this process's turns
        self.waited = 0.0  # seconds spent waiting for the turn since begin()
        self.wall0 = None
        self.on = None
        self.alone = None  # why this process stopped waiting for the other, if it did
        self.alone_from = None  # the turn (1-based) it then ran alone from
        self.closed = False

    def own_now(self):
        """perf_counter without the time spent waiting for the turn."""
        return time.perf_counter() - self.waited

    def begin(self):
        """Just before the measured call: returns once it is this process's turn."""
        self.wall0 = time.perf_counter()
        if self.role == 1:
            self._give(b"r")
            self._wait(self.first_timeout_s)  # role 0's first turn is over
        else:
            self._wait(self.first_timeout_s)  # role 1 is ready
        self.waited = time.perf_counter() - self.wall0
        self.on = time.perf_counter()

    def hand_over(self, sync):
        """Ends this turn (after sync() drained the device) and waits for the next."""
        sync()
        t = time.perf_counter()
        self.turns.append(t - self.on)
        self._give(b"x")
        self._wait(self.timeout_s)
        self.on = time.perf_counter()
        self.waited += self.on - t

    def end(self, sync):
        """After the measured call: its last turn; the other process goes on alone."""
        sync()
        self.turns.append(time.perf_counter() - self.on)
        self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            os.write(self.wr, b"q")
        except OSError:
            pass

    def record(self):
        return dict(role=self.role, turns=len(self.turns), turn_ms=[t * 1000.0 for t in self.turns],
                    waited_s=self.waited, alone=self.alone, alone_from=self.alone_from,
                    wall_s=(time.perf_counter() - self.wall0) if self.wall0 is not None else None)

    def _give(self, what):
        if self.alone is None:
            os.write(self.wr, what)

    def _wait(self, timeout_s):
        if self.alone is not None:
            return
        r, _, _ = select.select([self.rd], [], [], timeout_s)
        if not r:
            self._go_alone("no turn from the other process in %.0f s" % timeout_s)
            return
        if os.read(self.rd, 1) == b"q" and not self.closed:
            # Normal before this process's last turn; earlier, the other failed.
            self._go_alone("the other process ended", quiet=True)

    def _go_alone(self, why, quiet=False):
        self.alone, self.alone_from = why, len(self.turns) + 1
        if not quiet:
            print("lockstep: %s; running alone from turn %d" % (why, self.alone_from), file=sys.stderr,
                  flush=True)
