#!/usr/bin/env python3
"""Triton (on torch tensors: Triton launches on torch's CUDA tensors, so torch
and its allocator are in the process too) under the shim: a vector-add
kernel over several sizes, 10 rounds, on the default stream and on a side
stream, every output compared with numpy's float32 x + y bit for bit.

Last line: RESULT triton_prog <digest> rounds=10 frontend=torch-tensors.
Exit 3 on a mismatch, 77 when triton, torch or a device is missing."""
import sys

try:
    import numpy as np
    import torch
    import triton
    import triton.language as tl
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP triton: {e!r}")
    sys.exit(77)

from result import Result

H = Result("triton_prog")
fail = H.fail


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


def main():
    if not torch.cuda.is_available():
        print("SKIP triton: torch sees no CUDA device")
        sys.exit(77)
    rng = np.random.default_rng(5)
    sizes = [98432, 1 << 20, (16 << 20) - 3]
    side = torch.cuda.Stream()
    rounds = 10
    for r in range(rounds):
        for n in sizes:
            x = rng.standard_normal(n, dtype=np.float32)
            y = rng.standard_normal(n, dtype=np.float32)
            if r % 2:
                with torch.cuda.stream(side):
                    out = add(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
                    got = out.cpu().numpy()
                side.synchronize()
            else:
                out = add(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
                got = out.cpu().numpy()
            torch.cuda.synchronize()
            ref = x + y
            if not np.array_equal(got, ref):
                bad = np.flatnonzero(got != ref)
                fail(f"round {r} size {n}: {len(bad)} elements differ (first {int(bad[0])})")
            H.update(got.tobytes())
            del out
    print(f"INFO triton_prog: triton {triton.__version__}, torch {torch.__version__}, "
          f"allocator backend {torch.cuda.get_allocator_backend()}")
    print(f"RESULT triton_prog {H.hexdigest()} rounds={rounds} frontend=torch-tensors")


if __name__ == "__main__":
    main()
