#!/usr/bin/env python3
"""Tensor-parallel exchange under the shim, one process per GPU (issue 6).

Run with torchrun on a machine with >= 2 GPUs (tests/gpu/checks/tp2.sh does both arms):

  torchrun --nproc-per-node 2 tests/gpu/checks/tp_allreduce.py [--steps N] [--mib M]

Each rank owns a pooled buffer (>= PONYTAIL_KV_MIN, so it lives in the shim's pool under
LD_PRELOAD) and, per step:
  1. NCCL all-reduce of a buffer whose expected sum is known (checked exactly);
  2. what vLLM's custom all-reduce does: cudaIpcGetMemHandle on its buffer, the 64-byte handles
     exchanged through all_gather_object, cudaIpcOpenMemHandle of every peer's buffer (after
     cudaDeviceEnablePeerAccess), a device-to-device copy out of each peer buffer, checked against
     the peer's fill value, then cudaIpcCloseMemHandle.
Prints, per rank: PASS/FAIL, the median step time, torch's peak allocated/reserved, and a digest
of the all-reduce results (equal with and without the shim). NVLink multicast stays off.
"""
import argparse
import ctypes
import hashlib
import os
import sys
import time

from cudart_ctypes import DevArray, cudart, handle_bytes, handle_from

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mib", type=int, default=64, help="buffer size per rank")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rt = cudart()
    n = (args.mib << 20) // 4
    fails = []
    for peer in range(world):
        if peer != local:
            rc = rt.cudaDeviceEnablePeerAccess(peer, 0)
            if rc not in (0, 704):  # 704: already enabled
                fails.append(f"cudaDeviceEnablePeerAccess({peer}) = {rc}")
    torch.cuda.reset_peak_memory_stats()
    digest = hashlib.sha256()
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        # 1. NCCL all-reduce: rank r contributes (r + 1) * (step + 1) everywhere.
        buf = torch.full((n,), float((rank + 1) * (step + 1)), device="cuda", dtype=torch.float32)
        dist.all_reduce(buf)
        want = float(world * (world + 1) // 2 * (step + 1))
        if not torch.all(buf == want):
            fails.append(f"step {step}: all_reduce result wrong")
        digest.update(buf[:1024].cpu().numpy().tobytes())
        # 2. IPC exchange of pooled buffers (vLLM custom all-reduce style).
        mine = torch.full((n,), float(1000 * rank + step), device="cuda", dtype=torch.float32)
        torch.cuda.synchronize()
        h = handle_from(bytes(64))
        rc = rt.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(mine.data_ptr()))
        if rc != 0:
            fails.append(f"step {step}: cudaIpcGetMemHandle = {rc}")
            break
        handles = [None] * world
        dist.all_gather_object(handles, handle_bytes(h))
        for peer in range(world):
            if peer == rank:
                continue
            ph = handle_from(handles[peer])
            ptr = ctypes.c_void_p()
            rc = rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), ph, 1)  # cudaIpcMemLazyEnablePeerAccess
            if rc != 0:
                fails.append(f"step {step}: cudaIpcOpenMemHandle(peer {peer}) = {rc}")
                continue
            seen = torch.as_tensor(DevArray(ptr.value, n), device="cuda").clone()
            if not torch.all(seen == float(1000 * peer + step)):
                fails.append(f"step {step}: peer {peer}'s buffer read wrong")
            torch.cuda.synchronize()
            rt.cudaIpcCloseMemHandle(ptr)
        dist.barrier()  # peers closed their mappings before `mine` is freed
        del mine, buf
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"rank {rank}: {'PASS' if not fails else 'FAIL'} steps {len(times)} "
          f"step p50 {1000 * times[len(times) // 2]:.2f} ms "
          f"peak allocated {torch.cuda.max_memory_allocated() >> 20} MiB "
          f"reserved {torch.cuda.max_memory_reserved() >> 20} MiB "
          f"allreduce digest {digest.hexdigest()[:16]}"
          + ("" if not fails else " | " + "; ".join(fails[:5])), flush=True)
    dist.destroy_process_group()
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
