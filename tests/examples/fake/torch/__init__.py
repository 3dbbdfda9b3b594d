"""A stand-in for the parts of torch that examples/generate.py touches, so that its bookkeeping
(JSON record, exit codes, per-rank files, out-of-memory and SIGTERM handling) runs in CI without a
GPU. Tensors are lists of rows; nothing is computed."""
import contextlib

__version__ = "0.0-fake"
bfloat16, float16, float32, long = "bfloat16", "float16", "float32", "long"


class OutOfMemoryError(RuntimeError):
    pass


_default_dtype = float32


def get_default_dtype():
    return _default_dtype


def set_default_dtype(d):
    global _default_dtype
    _default_dtype = d


def manual_seed(seed):
    return None


class device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Generator:
    def manual_seed(self, seed):
        import random
        self.rng = random.Random(seed)
        return self


class Tensor:
    def __init__(self, rows):
        self.rows = rows

    @property
    def shape(self):
        return (len(self.rows), len(self.rows[0]) if self.rows else 0)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            r, c = key
            return Tensor([row[c] for row in self.rows[r]])
        return Tensor(self.rows[key])

    def __setitem__(self, key, value):
        r, c = key
        for row in (self.rows[r] if isinstance(r, slice) else [self.rows[r]]):
            n = len(row[c])
            row[c] = [value] * n

    def __int__(self):
        return int(self.rows)

    def to(self, dev):
        return self

    def tolist(self):
        return [list(r) for r in self.rows]


def randint(lo, hi, shape, generator=None):
    rng = generator.rng
    if len(shape) == 1:
        return Tensor(rng.randint(lo, hi - 1))
    return Tensor([[rng.randint(lo, hi - 1) for _ in range(shape[1])] for _ in range(shape[0])])


def ones(b, p, dtype=None):
    return Tensor([[1] * p for _ in range(b)])


@contextlib.contextmanager
def inference_mode():
    yield


def save(obj, path):
    with open(path, "w") as f:
        f.write(repr(obj))


from . import cuda, distributed, nn  # noqa: E402
