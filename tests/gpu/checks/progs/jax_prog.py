#!/usr/bin/env python3
"""JAX (XLA, no PyTorch) under the shim: jit-compiled matmuls and
reductions over arrays of several sizes, device_put of large arrays and
their release, 40 rounds. Run with XLA_PYTHON_CLIENT_PREALLOCATE=false (set
by tests/gpu/checks/cuda_programs.sh) so that XLA allocates as it goes; the runner
also runs it with XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async.

Inputs are small integers, so the float32 matmuls and sums are exact and are
compared with numpy's int64 results exactly; the digest hashes the results
(as float64). Last line: RESULT jax_prog <digest> rounds=40. Exit 3 on a
mismatch, 77 when JAX or its GPU backend is missing (JAX_PROG_ALLOW_CPU=1
runs on the CPU instead, to test this script without a GPU)."""
import os
import sys

try:
    import numpy as np
    import jax
    import jax.numpy as jnp
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP jax: {e!r}")
    sys.exit(77)

from result import Result

H = Result("jax_prog")
fail = H.fail


@jax.jit
def matmul(a, b):
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


@jax.jit
def reductions(x, m):
    # x: float32 entries -2..2; m: int32 entries 0..999
    return (jnp.sum(x), jnp.sum(x * x), jnp.max(m), jnp.min(m), jnp.sum(m), jnp.sum((m * m) % 97))


def main():
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if gpus:
        dev = gpus[0]
    elif os.environ.get("JAX_PROG_ALLOW_CPU") == "1":
        dev = jax.devices("cpu")[0]
    else:
        print(f"SKIP jax: no GPU backend (devices: {jax.devices()})")
        sys.exit(77)
    rng = np.random.default_rng(7)
    shapes = [(256, 384, 128), (1024, 512, 768), (64, 1024, 2048)]
    rounds = 40
    for r in range(rounds):
        m_, k_, n_ = shapes[r % len(shapes)]
        a = rng.integers(-2, 3, (m_, k_)).astype(np.float32)
        b = rng.integers(-2, 3, (k_, n_)).astype(np.float32)
        da = jax.device_put(a, dev)
        db = jax.device_put(b, dev)
        c = np.asarray(matmul(da, db).block_until_ready())
        ref = a.astype(np.int64) @ b.astype(np.int64)
        if c.dtype != np.float32 or not np.array_equal(c.astype(np.int64), ref) or not np.all(c == np.rint(c)):
            fail(f"round {r}: matmul {m_}x{k_}x{n_} differs from numpy")
        H.update(c.astype(np.float64).tobytes())

        size = (1 << 20) - 7 * (r % 3)
        x = rng.integers(-2, 3, size).astype(np.float32)
        m = rng.integers(0, 1000, size).astype(np.int32)
        got = [np.asarray(v) for v in reductions(jax.device_put(x, dev), jax.device_put(m, dev))]
        mi = m.astype(np.int64)
        want = [x.astype(np.int64).sum(), (x.astype(np.int64) ** 2).sum(), mi.max(), mi.min(), mi.sum(),
                ((mi * mi) % 97).sum()]
        for i, (g, w) in enumerate(zip(got, want)):
            if float(g) != float(w):
                fail(f"round {r}: reduction {i} = {g!r}, expected {w}")
        H.update(np.array([float(g) for g in got], dtype=np.float64).tobytes())

        if r % 4 == 0:
            # a large transient buffer: 64 MiB in, 64 MiB out, released
            big = jax.device_put(np.full(16 << 20, r, dtype=np.int32), dev)
            s = int(jnp.sum(big[:: 1 << 12]).block_until_ready())
            if s != r * 4096:
                fail(f"round {r}: strided sum {s} != {r * 4096}")
            del big
        del da, db
    print(f"INFO jax_prog: jax {jax.__version__} on {dev.platform} ({dev.device_kind}), "
          f"allocator {os.environ.get('XLA_PYTHON_CLIENT_ALLOCATOR', 'default')}, "
          f"preallocate {os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE', 'unset')}")
    print(f"RESULT jax_prog {H.hexdigest()} rounds={rounds}")


if __name__ == "__main__":
    main()
