// The one translation unit nvcc turns into the embedded fatbin: a module
// loaded with cuModuleLoadData holds one cubin (or one PTX), so every kernel
// the loader looks up must come from a single compilation.
#include "kernels/attn_decode.cu"
#include "kernels/attn_compare.cu"
#include "kernels/attn_fault.cu"
