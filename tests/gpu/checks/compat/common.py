"""Shared by the compatibility-matrix programs (tests/gpu/checks/compat_matrix.py):
one RESULT line of JSON per program, with what the matrix compares."""
import hashlib
import json
import sys


def digest_tensors(*tensors):
    """sha256 of the tensors' bytes: equal only for bit-identical results."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def memory(torch):
    """torch's peak reserved and NVML's device memory in use now (MiB)."""
    rec = dict(torch_peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        rec["nvml_used_mib"] = pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
    except Exception:
        pass
    return rec


def result(ok, **fields):
    fields["ok"] = bool(ok)
    print("RESULT " + json.dumps(fields), flush=True)
    sys.exit(0 if ok else 1)
