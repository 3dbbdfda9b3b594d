#!/usr/bin/env python3
"""numba-cuda (no PyTorch) under the shim: a @cuda.jit kernel and a
@cuda.reduce reduction on device arrays that numba allocates itself
(cuMemAlloc through its driver bindings), transfers on a non-blocking
stream, 30 rounds of allocate / launch / copy back / free.

Integer data, compared with numpy exactly. Last line: RESULT numba_prog
<digest> rounds=30. Exit 3 on a mismatch, 77 ("SKIP numba") when numba-cuda
cannot be imported or sees no device."""
import sys

try:
    import numpy as np

    # numba-cuda 0.x registers an overload for np.row_stack when it first
    # compiles a kernel; the NumPy on the GPU machine no longer has that alias
    # of np.vstack, so numba failed stock there, before any CUDA call. Restoring the alias
    # lets this program test the shim instead of that version mismatch.
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from numba import cuda
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP numba: {e!r}")
    sys.exit(77)

try:
    if not cuda.is_available():
        print("SKIP numba: no CUDA device")
        sys.exit(77)
except Exception as e:  # noqa: BLE001
    print(f"SKIP numba: {e!r}")
    sys.exit(77)

from result import Result

H = Result("numba_prog")
fail = H.fail


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.reduce
def sum_reduce(a, b):
    return a + b


def main():
    rng = np.random.default_rng(31)
    sizes = [1000, (1 << 20) + 3, 4 << 20]
    rounds = 30
    stream = cuda.stream()
    for r in range(rounds):
        n = sizes[r % len(sizes)]
        x = rng.integers(-1_000_000, 1_000_000, n, dtype=np.int64)
        y = rng.integers(-1_000_000, 1_000_000, n, dtype=np.int64)
        dx = cuda.to_device(x, stream=stream)
        dy = cuda.to_device(y, stream=stream)
        dout = cuda.device_array(n, dtype=np.int64, stream=stream)
        threads = 256
        blocks = (n + threads - 1) // threads
        axpy[blocks, threads, stream](dout, np.int64(3), dx, dy)
        out = dout.copy_to_host(stream=stream)
        stream.synchronize()
        ref = 3 * x + y
        if not np.array_equal(out, ref):
            bad = np.flatnonzero(out != ref)
            fail(f"round {r}: {len(bad)} elements differ (first {int(bad[0])})")
        total = int(sum_reduce(dout))
        if total != int(ref.sum()):
            fail(f"round {r}: reduce {total} != {int(ref.sum())}")
        H.update(out.tobytes())
        H.update(np.int64(total).tobytes())
        del dx, dy, dout
    cuda.synchronize()
    try:
        name = cuda.get_current_device().name
    except Exception:  # noqa: BLE001 - informational only
        name = "?"
    print(f"INFO numba_prog: numba on {name!r}")
    print(f"RESULT numba_prog {H.hexdigest()} rounds={rounds}")


if __name__ == "__main__":
    main()
