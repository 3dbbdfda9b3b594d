"""torch.cuda for the fake: one device; memory figures fixed so the tests can check them."""
import os

GiB = 1 << 30
_total = int(os.environ.get("FAKE_TORCH_TOTAL", str(140 * GiB)))


class _Props:
    total_memory = _total
    pci_domain_id = pci_bus_id = pci_device_id = 0


def current_device():
    return 0


def init():
    pass


def set_device(i):
    pass


def synchronize(d=None):
    pass


def empty_cache():
    pass


def reset_peak_memory_stats(d=None):
    pass


def max_memory_allocated(d=None):
    return 3 * GiB


def max_memory_reserved(d=None):
    return 4 * GiB


def memory_allocated(d=None):
    return 2 * GiB


def memory_reserved(d=None):
    return 3 * GiB


def get_device_name(d=None):
    return "Fake GPU"


def get_device_properties(d):
    return _Props()


def set_per_process_memory_fraction(fraction, d=None):
    os.environ["FAKE_TORCH_FRACTION"] = repr(fraction)
