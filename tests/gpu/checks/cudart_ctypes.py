"""The CUDA runtime's IPC and peer entry points through ctypes, for the GPU tests that do what
vLLM's custom all-reduce does (tests/gpu/checks/ipc_torch.py, tests/gpu/checks/tp_allreduce.py).

cudart() returns the entry points the application reaches: the shim's when it is preloaded (it
exports them), else the libcudart that torch loaded. torch's copy lives in its wheel's directory,
off the loader's search path, so it is found by name in /proc/self/maps: import torch first.
"""
import ctypes
import os


class Handle(ctypes.Structure):
    """cudaIpcMemHandle_t. Use handle_bytes(): the .reserved field stops at the first zero byte."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


def handle_bytes(h):
    return ctypes.string_at(ctypes.addressof(h), 64)


def handle_from(data):
    if len(data) != 64:
        raise ValueError("an IPC handle is 64 bytes, got %d" % len(data))
    h = Handle()
    ctypes.memmove(ctypes.addressof(h), data, 64)
    return h


class DevArray:
    """A float32 device buffer torch.as_tensor can wrap (__cuda_array_interface__)."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def _loaded_cudart():
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libcudart.so"):
                    return path
    except OSError:
        pass
    return "libcudart.so.13"


def cudart():
    for lib in os.environ.get("LD_PRELOAD", "").split(":"):
        if "ponytail" in os.path.basename(lib):
            rt = ctypes.CDLL(lib)
            break
    else:
        rt = ctypes.CDLL(_loaded_cudart())
    rt.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), ctypes.c_void_p]
    rt.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), Handle, ctypes.c_uint]
    rt.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
    rt.cudaDeviceEnablePeerAccess.argtypes = [ctypes.c_int, ctypes.c_uint]
    return rt
