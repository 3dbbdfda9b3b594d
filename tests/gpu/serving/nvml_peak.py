"""NVML memory sampling shared by the serving-engine arms: the device's used memory every 20 ms in
a daemon thread (one arm runs on the GPU at a time, so the device's figure is the arm's, engine
subprocesses included)."""
import threading
import time


class NvmlPeak:
    def __init__(self, index=0, period=0.02):
        self.peak = 0
        self.last = 0
        self.base = 0
        self.ok = False
        self._stop = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nv = pynvml
            self.base = self.used()
            self.ok = True
        except Exception as e:  # no NVML: the figures stay 0 and the report says n/a
            self.error = str(e)
            return
        self._t = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._t.start()

    def used(self):
        return self._nv.nvmlDeviceGetMemoryInfo(self._h).used

    def _run(self, period):
        while not self._stop.is_set():
            try:
                self.last = self.used()
                self.peak = max(self.peak, self.last)
            except Exception:
                pass
            time.sleep(period)

    def now_mib(self):
        return round(self.used() / 2**20) if self.ok else None

    def stop(self):
        self._stop.set()
        return dict(nvml_peak_mib=round(self.peak / 2**20) if self.ok else None,
                    nvml_base_mib=round(self.base / 2**20) if self.ok else None)
