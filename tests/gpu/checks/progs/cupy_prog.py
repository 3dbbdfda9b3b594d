#!/usr/bin/env python3
"""CuPy (no PyTorch) under the shim: an ElementwiseKernel, a matmul (cuBLAS),
an integer reduction and an allocate/fill/free loop through CuPy's memory
pool, first with its default pool (cudaMalloc underneath) on the legacy
stream, then, where CuPy has it, with cupy.cuda.MemoryAsyncPool
(cudaMallocAsync / cudaFreeAsync) on a non-blocking stream.

Inputs are small integers or binary fractions, so every result is exact and
is compared with numpy bit for bit. Last line: RESULT cupy_prog <digest>
phases=N. Exit 3 on a mismatch, 77 when CuPy or a device is missing."""
import sys

try:
    import numpy as np
    import cupy as cp
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP cupy: {e!r}")
    sys.exit(77)

from result import Result

H = Result("cupy_prog")
fail = H.fail
RNG = np.random.default_rng(1234)


def check_equal(what, got, ref):
    if got.shape != ref.shape or got.dtype != ref.dtype or not np.array_equal(got, ref):
        bad = np.flatnonzero(got.ravel() != ref.ravel()) if got.shape == ref.shape else []
        first = int(bad[0]) if len(bad) else -1
        fail(f"{what}: {len(bad)} elements differ (first {first}), dtype {got.dtype} vs {ref.dtype}")
    H.update(got.tobytes())


AXPY = None


def workload(tag):
    global AXPY
    if AXPY is None:
        AXPY = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * 2.0f + y", "pt_axpy2")
    # elementwise: binary fractions, x * 2 + y is exact in float32
    for size in (1000, 1 << 20, (3 << 20) + 5):
        x = (RNG.integers(-4096, 4096, size) / 8).astype(np.float32)
        y = (RNG.integers(-4096, 4096, size) / 8).astype(np.float32)
        z = cp.asnumpy(AXPY(cp.asarray(x), cp.asarray(y)))
        check_equal(f"{tag} elementwise {size}", z, x * np.float32(2) + y)
    # matmul: entries -2..2, every partial sum exact in float32
    a = RNG.integers(-2, 3, (512, 384)).astype(np.float32)
    b = RNG.integers(-2, 3, (384, 256)).astype(np.float32)
    c = cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b)))
    check_equal(f"{tag} matmul", c, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))
    # reduction
    v = RNG.integers(0, 1 << 20, 4 << 20, dtype=np.int64)
    s = int(cp.asarray(v).sum())
    if s != int(v.sum()):
        fail(f"{tag} sum {s} != {int(v.sum())}")
    H.update(np.int64(s).tobytes())
    # allocate / fill / check / free through the pool, 8 arrays alive at a time
    sizes = [4096, 1 << 20, (2 << 20) + 256, 8 << 20, 300_000, 32 << 20]
    live = [None] * 8
    acc = 0
    for i in range(300):
        n = sizes[i % len(sizes)] // 4
        arr = cp.arange(n, dtype=cp.uint32)
        arr += cp.uint32(i)
        live[i % 8] = (i, arr)
        j, old = live[(i + 3) % 8] or (None, None)
        if old is not None:
            last = int(old[-1])
            want = (old.size - 1 + j) & 0xFFFFFFFF
            if last != want:
                fail(f"{tag} pool loop: array {j} ends with {last}, expected {want}")
            acc = (acc * 31 + last) & 0xFFFFFFFFFFFF
            live[(i + 3) % 8] = None
    cp.cuda.get_current_stream().synchronize()
    H.update(np.int64(acc).tobytes())


def main():
    try:
        ndev = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        print(f"SKIP cupy: no device ({e!r})")
        sys.exit(77)
    if ndev < 1:
        print("SKIP cupy: no device")
        sys.exit(77)
    cp.cuda.Device(0).use()
    phases = 1
    workload("default-pool")
    cp.get_default_memory_pool().free_all_blocks()
    try:
        apool = cp.cuda.MemoryAsyncPool()
    except Exception as e:  # noqa: BLE001
        apool = None
        print(f"INFO cupy_prog: no MemoryAsyncPool phase ({e!r})")
    if apool is not None:
        cp.cuda.set_allocator(apool.malloc)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            workload("async-pool")
            s.synchronize()
        phases = 2
        cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
    cp.cuda.Device(0).synchronize()
    print(f"INFO cupy_prog: cupy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}")
    print(f"RESULT cupy_prog {H.hexdigest()} phases={phases}")


if __name__ == "__main__":
    main()
