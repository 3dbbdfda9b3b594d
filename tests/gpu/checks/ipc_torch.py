#!/usr/bin/env python3
"""CUDA IPC of a >= 8 MiB CUDA tensor between two processes on one GPU (issue 6).

The parent fills a tensor, a spawned child opens it, checks every value,
writes into it; the parent checks the child's write. Prints one PASS/FAIL
line and exits 0/1. Run it under the shim and without:

  python3 tests/gpu/checks/ipc_torch.py --mode torch          # stock
  LD_PRELOAD=build/shim/libponytail_shim.so PONYTAIL_LOG=info \
      python3 tests/gpu/checks/ipc_torch.py --mode torch      # under Ponytail
  (same two with --mode raw)

--mode torch: torch.multiprocessing sends the tensor through a queue (torch
  calls cudaIpcGetMemHandle on the allocation base, the child
  cudaIpcOpenMemHandle). Torch refuses this with its cudaMallocAsync backend
  ("cudaMallocAsync does not yet support shareIpcHandle"), which
  PONYTAIL_TORCH_ALLOC=async selects, so this mode forces
  PYTORCH_CUDA_ALLOC_CONF=backend:native (the shim's default leaves it so)
  before torch loads: the allocator's segments come from cudaMalloc, which
  the shim pools (>= PONYTAIL_KV_MIN).
--mode raw: what vLLM's custom all-reduce does: cudaIpcGetMemHandle on the
  tensor's pointer through ctypes, the 64 bytes to the child, which calls
  cudaIpcOpenMemHandle and wraps the pointer (__cuda_array_interface__).
  Leaves the allocator configuration as it is (under the shim's default,
  PyTorch's segments are pooled; with PONYTAIL_TORCH_ALLOC=async every
  tensor is its own pooled block).
"""
import argparse
import ctypes
import os
import sys
import time

from cudart_ctypes import DevArray, cudart, handle_bytes, handle_from

N = 4 << 20  # float32 elements: 16 MiB


def child_torch(q_in, q_out):
    import torch
    try:
        t = q_in.get()
        ok = bool(torch.equal(t, torch.arange(N, device="cuda", dtype=torch.float32)))
        t[: N // 2].fill_(-1.0)
        torch.cuda.synchronize()
        del t
        q_out.put(("ok" if ok else "child saw wrong values", None))
    except Exception as e:  # reported by the parent
        q_out.put(("child error: %r" % (e,), None))


def child_raw(handle, q_out):
    import torch
    try:
        torch.cuda.init()
        torch.cuda.set_device(0)
        rt = cudart()
        h = handle_from(handle)
        p = ctypes.c_void_p()
        err = rt.cudaIpcOpenMemHandle(ctypes.byref(p), h, 1)  # cudaIpcMemLazyEnablePeerAccess
        if err:
            q_out.put(("child: cudaIpcOpenMemHandle returned %d" % err, None))
            return
        t = torch.as_tensor(DevArray(p.value, N), device="cuda")
        ok = bool(torch.equal(t, torch.arange(N, device="cuda", dtype=torch.float32)))
        t[: N // 2].fill_(-1.0)
        torch.cuda.synchronize()
        del t
        err = rt.cudaIpcCloseMemHandle(p)
        q_out.put(("ok" if ok and not err else "child: values %s, close %d" % (ok, err), None))
    except Exception as e:
        q_out.put(("child error: %r" % (e,), None))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["torch", "raw"], default="torch")
    args = ap.parse_args()
    if args.mode == "torch":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:native"
    import torch
    import torch.multiprocessing as mp

    shim = any("ponytail" in os.path.basename(x) for x in os.environ.get("LD_PRELOAD", "").split(":"))
    tag = "mode=%s shim=%s allocator=%s" % (args.mode, "yes" if shim else "no", torch.cuda.get_allocator_backend())
    t0 = time.time()
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    t = torch.arange(N, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    if args.mode == "torch":
        proc = ctx.Process(target=child_torch, args=(q_in, q_out))
        proc.start()
        q_in.put(t)
    else:
        rt = cudart()
        h = handle_from(bytes(64))
        err = rt.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(t.data_ptr()))
        if err:
            print("FAIL %s: cudaIpcGetMemHandle returned %d" % (tag, err))
            return 1
        proc = ctx.Process(target=child_raw, args=(handle_bytes(h), q_out))
        proc.start()
    try:
        msg, _ = q_out.get(timeout=60)
    except Exception:
        msg = "no answer from the child"
    proc.join(timeout=30)
    if msg == "ok":
        torch.cuda.synchronize()
        ref = torch.arange(N, device="cuda", dtype=torch.float32)
        ref[: N // 2] = -1.0
        if not torch.equal(t, ref):
            msg = "parent does not see the child's write"
    if msg == "ok" and proc.exitcode != 0:
        msg = "child exit code %s" % proc.exitcode
    print("%s %s (%.1f s)%s" % ("PASS" if msg == "ok" else "FAIL", tag, time.time() - t0,
                                "" if msg == "ok" else ": " + msg))
    return 0 if msg == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
