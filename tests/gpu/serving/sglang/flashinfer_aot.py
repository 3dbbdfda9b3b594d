"""Build flashinfer's `norm` JIT module for sm_90a here, where the sources are, and drop it where
flashinfer looks for ahead-of-time builds (SITE/flashinfer/data/aot/norm/norm.so).

Why: the staged tree leaves out flashinfer/data (88 MiB of JIT sources), and sgl_kernel 0.4.5's
rmsnorm / fused_add_rmsnorm call flashinfer.norm, which JIT-compiles on first use. With the
sources gone that compile fails ("norm.cu missing"); with this file present flashinfer loads it
the way it loads a module from its own flashinfer-jit-cache package, and nothing compiles on the
GPU machine. Needs Python >= 3.12 (tvm_ffi's wheel is cp312-abi3) and nvcc; torch is not
needed: the build reads only two torch attributes, given here by a stand-in.

  python3.12 flashinfer_aot.py SITE FULL   # FULL: an unpacked flashinfer + tvm_ffi (with data/)
"""
import os
import shutil
import sys
import tempfile
import types


def main():
    site, full = sys.argv[1], sys.argv[2]
    sys.path[:0] = [full]
    import tvm_ffi  # noqa: F401  before the torch stand-in: tvm_ffi maps torch dtypes when torch imports
    stub = tempfile.mkdtemp()
    os.makedirs(os.path.join(stub, "torch"))
    with open(os.path.join(stub, "torch", "__init__.py"), "w") as f:
        f.write("class _C: _GLIBCXX_USE_CXX11_ABI = True  # torch 2.11 wheels use the C++11 ABI\n"
                "class version: cuda = '13.0'\n"
                "def __getattr__(name): return 'torch.' + name  # dtypes are only dict keys there\n")
    sys.path.insert(0, stub)
    # flashinfer/__init__ and flashinfer/jit/__init__ import torch for real: load the two
    # packages as bare namespaces so only the JIT build modules run.
    for name in ("flashinfer", "flashinfer.jit"):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(full, *name.split("."))]
        sys.modules[name] = m
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    os.environ["FLASHINFER_WORKSPACE_BASE"] = tempfile.mkdtemp()
    from flashinfer.jit.norm import gen_norm_module
    spec = gen_norm_module()
    spec.build(verbose=False)
    dst = os.path.join(site, "flashinfer", "data", "aot", "norm", "norm.so")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(spec.jit_library_path, dst)
    print("flashinfer norm (sm_90a, ahead of time): %s, %d KiB" % (dst, os.path.getsize(dst) // 1024))
    shutil.rmtree(stub)
    shutil.rmtree(os.environ["FLASHINFER_WORKSPACE_BASE"])


if __name__ == "__main__":
    main()
