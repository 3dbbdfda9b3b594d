// Test-only shared library around the prefill kernel (kernels/attn_prefill.cu) for
// tests/gpu/checks/prefill_check.py (ctypes). Built by tests/gpu/checks/prefill.sh with nvcc for
// sm_90a and linked with -lcuda for cuTensorMapEncodeTiled; the kernel is launched with the
// runtime here. The shim's own launcher (driver table, no CUDA library linked) comes with the
// hook, once this check passes.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_prefill.cu"

namespace {

// A 4D (d, seq, head, batch) view of a [b, seq, heads, d] tensor with element strides
// (row, head, batch); box (64, rows, 1, 1), 128-byte swizzle, zeros past the edges.
CUresult encode(CUtensorMap *m, const void *base, bool bf16, int d, int seq, int heads, int b, int64_t rs,
                int64_t hs, int64_t bs, int box_rows) {
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)seq, (cuuint64_t)heads, (cuuint64_t)b};
  const cuuint64_t strides[3] = {(cuuint64_t)rs * 2, (cuuint64_t)hs * 2, (cuuint64_t)bs * 2};
  const cuuint32_t box[4] = {PT_PREFILL_SUB, (cuuint32_t)box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return cuTensorMapEncodeTiled(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                                const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
bool strides_ok(const int64_t *s, int n) {
  for (int i = 0; i < n; ++i)
    if (s[i] <= 0 || (s[i] & 7)) return false;  // TMA: multiples of 16 bytes, no broadcast
  return true;
}

}  // namespace

// Returns 0 on success, -1 for a shape or layout the kernel does not take, or a CUDA error.
// st: element strides q_b, q_r, q_h, k_b, k_r, k_h, v_b, v_r, v_h, o_b, o_r, o_h (last dim
// contiguous). lse may be NULL.
extern "C" __attribute__((visibility("default"))) int pt_prefill_test(
    const void *q, const void *k, const void *v, void *o, float *lse, int bf16, int b, int h, int h_k, int sq,
    int sk, int d, const int64_t *st, float scale, int causal, void *stream) {
  if ((d != 64 && d != 128) || b < 1 || h < 1 || h_k < 1 || h % h_k || sq < 1 || sk < 1) return -1;
  if (causal && sq > sk) return -1;
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || ((uintptr_t)o & 3u) || !strides_ok(st, 9)) return -1;
  pt_prefill_kparams p;
  memset(&p, 0, sizeof p);
  CUresult r = encode(&p.tq, q, bf16, d, sq, h, b, st[1], st[2], st[0], PT_PREFILL_BM(d));
  if (r == CUDA_SUCCESS) r = encode(&p.tk, k, bf16, d, sk, h_k, b, st[4], st[5], st[3], PT_PREFILL_BN);
  if (r == CUDA_SUCCESS) r = encode(&p.tv, v, bf16, d, sk, h_k, b, st[7], st[8], st[6], PT_PREFILL_BN);
  if (r != CUDA_SUCCESS) return 1000 + (int)r;
  p.o = o;
  p.lse = lse;
  p.o_bs = st[9];
  p.o_rs = st[10];
  p.o_hs = st[11];
  p.b = b;
  p.h = h;
  p.h_k = h_k;
  p.sq = sq;
  p.sk = sk;
  p.group = h / h_k;
  p.causal = causal != 0;
  p.m_blocks = (sq + PT_PREFILL_BM(d) - 1) / PT_PREFILL_BM(d);
  p.tiles = p.m_blocks * h * b;
  p.sec = pt_prefill_section(b, h, p.group, sk, d);
  // Test hook: another section size, so that a small case walks several sections, the last short.
  if (const char *e = getenv("PT_PREFILL_SECTION")) {
    const int v = atoi(e);
    if (v > 0 && v <= h * b) p.sec = v;
  }
  p.scale_log2 = scale * 1.4426950408889634f;
  // d = 64: the kernel with tile skipping where the shim's launcher takes it
  // (pt_prefill_skip_pays). Forced: at build time by -DPT_PREFILL_TEST_SKIP=0 or 1 (a build of
  // PREFILL_VARIANTS, so that both are timed in one run), at run time by the environment's
  // PT_PREFILL_SKIP=0 or 1 (the correctness cases; it applies to every build in the process).
  int skip = pt_prefill_skip_pays(&p, d);
#ifdef PT_PREFILL_TEST_SKIP
  skip = d == 64 && PT_PREFILL_TEST_SKIP != 0;
#endif
  if (const char *e = getenv("PT_PREFILL_SKIP")) skip = d == 64 && atoi(e) != 0;
  void (*fn)(pt_prefill_kparams) = nullptr;
  if (bf16) fn = d == 64 ? (skip ? pt_attn_prefill_bf16_d64_skip : pt_attn_prefill_bf16_d64) : pt_attn_prefill_bf16_d128;
  else fn = d == 64 ? (skip ? pt_attn_prefill_fp16_d64_skip : pt_attn_prefill_fp16_d64) : pt_attn_prefill_fp16_d128;
  const unsigned smem = pt_prefill_smem_bytes(d);
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return (int)e;
  dim3 grid(p.m_blocks, h, b);
  if (PT_PREFILL_PERSISTENT) {
    int dev = 0, sms = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
      return (int)e;
    const int bm = PT_PREFILL_BM(d);
    const int ctas = pt_prefill_ctas(&p, bm, sms);
    grid = dim3(PT_PREFILL_PERSISTENT == 1 ? ctas : p.tiles, 1, 1);
    // Test hook: a given CTA count, so that a case walks several tiles per CTA whatever
    // pt_prefill_ctas would choose for it.
    if (const char *e = getenv("PT_PREFILL_CTAS")) {
      const int v = atoi(e);
      if (v > 0 && v <= p.tiles) grid = dim3(v, 1, 1);
    }
  }
  fn<<<grid, PT_PREFILL_THREADS(d), smem, (cudaStream_t)stream>>>(p);
  return (int)cudaGetLastError();
}
