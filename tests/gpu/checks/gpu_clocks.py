"""The card's state while a timing runs: SM and memory clocks, power, temperature and NVML's clock
event reasons (why the clock is below its maximum), sampled on a thread every few milliseconds.

A kernel whose time has a fixed chain of dependent steps (a decode launch at the latency-bound
points) runs slower when the SM clock drops; a pure read of HBM barely moves. Timings taken on a
card in different states (idle, or just after seconds of heavy kernels) are then not comparable,
and these columns say which state each row saw. Used by tests/gpu/checks/attn_check.py.

    with Clocks() as ck:
        ...timed work...
    ck.columns()   # "sm 1980/1965 mem 3201 W 412 C 45 M 52 ev 0x0" (mean/min SM MHz, max W,
                   #  max GPU and HBM temperature C)
"""
import threading
import time

try:
    import pynvml
except ImportError:  # the columns read "-" without NVML's python binding
    pynvml = None

_handle = None


def _nvml():
    """NVML's handle of the CUDA device in use (by UUID when torch gives one), or None."""
    global _handle
    if _handle is not None or pynvml is None:
        return _handle
    try:
        import torch
        pynvml.nvmlInit()
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        if uuid is not None:
            s = str(uuid)
            _handle = pynvml.nvmlDeviceGetHandleByUUID(s if s.startswith("GPU-") else "GPU-" + s)
        else:
            _handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:
        _handle = None
    return _handle


# NVML_FI_DEV_MEMORY_TEMP: HBM's temperature (C), a field value; HBM refreshes more often when
# hot, which costs read bandwidth without touching the SM clock.
_FI_MEMORY_TEMP = 82


def _mem_temp(h):
    try:
        v = pynvml.nvmlDeviceGetFieldValues(h, [_FI_MEMORY_TEMP])[0]
        return v.value.uiVal if v.nvmlReturn == 0 else None
    except Exception:
        return None


def _reasons(h):
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(pynvml, name, None)
        if fn is not None:
            try:
                return fn(h)
            except Exception:
                pass
    return 0


class Clocks:
    """Samples the card every `period` seconds while the with-body runs (at least once)."""

    def __init__(self, period=0.002):
        self.period = period
        self.sm, self.mem, self.w, self.c, self.m, self.ev = [], [], [], [], [], 0
        self._stop = threading.Event()
        self._t = None

    def _sample(self, h):
        self.sm.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
        self.mem.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))
        self.w.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        self.c.append(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
        m = _mem_temp(h)
        if m is not None:
            self.m.append(m)
        self.ev |= _reasons(h)

    def _run(self, h):
        while True:
            try:
                self._sample(h)
            except Exception:
                return
            if self._stop.wait(self.period):
                return

    def __enter__(self):
        h = _nvml()
        if h is not None:
            self._t = threading.Thread(target=self._run, args=(h,), daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc):
        if self._t is not None:
            self._stop.set()
            self._t.join()
        return False

    def mean_sm(self):
        return sum(self.sm) / len(self.sm) if self.sm else float("nan")

    def columns(self):
        """One fixed-width text: mean/min SM MHz, mean memory MHz, max power W, max GPU and HBM
        temperature C (M: "-" where NVML does not report it), the OR of the clock event reasons
        seen (bit 0x1 idle, 0x4 power cap, 0x8 / 0x40 hardware slowdown / thermal, 0x20 software
        thermal)."""
        if not self.sm:
            return "sm    -/-    mem    - W   - C  - M  - ev -"
        return "sm %4.0f/%4d mem %4.0f W %3.0f C %2d M %2s ev %#x" % (
            self.mean_sm(), min(self.sm), sum(self.mem) / len(self.mem), max(self.w), max(self.c),
            "%d" % max(self.m) if self.m else "-", self.ev)
