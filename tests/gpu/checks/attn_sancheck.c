/* Tiny driver for compute-sanitizer (memcheck, racecheck) over the decode
 * and compare kernels: a few small shapes covering one and several KV
 * splits, the partial last tile, causal rows that see no key in a split,
 * d = 64/80/96/128/256, q/k 192 with v 128, and both dtypes. Every buffer
 * is allocated at its exact size (workspace included) so an out-of-bounds
 * access leaves the allocation and is reported: at d = 80 and 96 (padded onto
 * the d = 128 kernel's tiles) a copy of a padding chunk of the last key's
 * row, or a store past the head dim of O, leaves q, k, v or o; with MLA's q/k
 * 192 and v 128 (padded onto d = 256) so does a V chunk copied at K's width,
 * or O written at it. Exit 0 when every call succeeded. */
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_plan.h"

bool pt_real_driver(void); /* tests/gpu/checks/attn_testlib.c */

#define CK(x)                                                                      \
  do {                                                                             \
    CUresult r_ = (x);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                      \
      fprintf(stderr, "%s:%d: %s -> CUresult %d\n", __FILE__, __LINE__, #x, r_);   \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static uint16_t rnd_half(unsigned *s, int bf16) {
  *s = *s * 1664525u + 1013904223u;
  const float f = ((float)(*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (bf16) return (uint16_t)(u >> 16);
  /* fp16 of a value in [-1, 1): sign, exponent rebias, 10-bit mantissa. */
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int e = (int)((u >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)e << 10) | ((u >> 13) & 0x3ffu));
}

static CUdeviceptr dev_random(size_t n, int bf16, unsigned seed) {
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; ++i) h[i] = rnd_half(&seed, bf16);
  CUdeviceptr p;
  CK(cuMemAlloc(&p, n * 2));
  CK(cuMemcpyHtoD(p, h, n * 2));
  free(h);
  return p;
}

/* Masked runs (masked != 0): a bias [b, 1, sq, sk] broadcast over heads,
 * rows a multiple of 8 keys apart as torch pads them (bias_pitch), and the
 * allocation ends right after the last row's sk-th key, so memcheck sees any
 * read past the keys; batch entry i masks its first i * sk / (2 b) keys with
 * -inf, the rest 0. */
static int masked;

static int64_t bias_pitch(int sk) { return ((int64_t)sk + 7) / 8 * 8; }

static CUdeviceptr dev_bias(int b, int sq, int sk, int bf16) {
  const int64_t pitch = bias_pitch(sk);
  const size_t n = (size_t)((int64_t)b * sq - 1) * (size_t)pitch + (size_t)sk;
  uint16_t *h = calloc(n, 2);
  const uint16_t ninf = bf16 ? 0xff80u : 0xfc00u;
  for (int i = 0; i < b; ++i)
    for (int r = 0; r < sq; ++r)
      for (int j = 0; j < i * sk / (2 * b); ++j) h[((size_t)i * sq + r) * (size_t)pitch + j] = ninf;
  CUdeviceptr p;
  CK(cuMemAlloc(&p, n * 2));
  CK(cuMemcpyHtoD(p, h, n * 2));
  free(h);
  return p;
}

/* FA layout [b, s, h, d] contiguous for q, k, v, o; v and o dv wide (MLA: 128 under a q/k
 * head of 192), each allocation at its own exact size. */
static void run_dv(int dtype, int b, int h, int h_k, int sq, int sk, int hd, int dv, int causal) {
  const int bf16 = dtype == PT_DTYPE_BF16;
  CUdeviceptr q = dev_random((size_t)b * sq * h * hd, bf16, 1);
  CUdeviceptr k = dev_random((size_t)b * sk * h_k * hd, bf16, 2);
  CUdeviceptr v = dev_random((size_t)b * sk * h_k * dv, bf16, 3);
  CUdeviceptr o, lse, res;
  CK(cuMemAlloc(&o, (size_t)b * sq * h * dv * 2));
  CK(cuMemAlloc(&lse, (size_t)b * h * sq * 4));
  CK(cuMemAlloc(&res, 16));
  struct pt_attn_desc d;
  memset(&d, 0, sizeof d);
  d.q = (void *)q;
  d.k = (void *)k;
  d.v = (void *)v;
  d.o = (void *)o;
  d.lse = (float *)lse;
  d.dtype = dtype;
  d.b = b;
  d.h = h;
  d.h_k = h_k;
  d.seqlen_q = sq;
  d.seqlen_k = sk;
  d.head_dim = hd;
  d.v_head_dim = dv;
  d.q_batch_stride = (int64_t)sq * h * hd;
  d.q_row_stride = (int64_t)h * hd;
  d.q_head_stride = hd;
  d.k_batch_stride = (int64_t)sk * h_k * hd;
  d.k_row_stride = (int64_t)h_k * hd;
  d.k_head_stride = hd;
  d.v_batch_stride = (int64_t)sk * h_k * dv;
  d.v_row_stride = (int64_t)h_k * dv;
  d.v_head_stride = dv;
  d.o_batch_stride = (int64_t)sq * h * dv;
  d.o_row_stride = (int64_t)h * dv;
  d.o_head_stride = dv;
  d.scale = 0.125f;
  d.causal = causal;
  CUdeviceptr bias = 0;
  if (masked) {
    bias = dev_bias(b, sq, sk, bf16);
    d.bias = (void *)bias;
    d.bias_batch_stride = (int64_t)sq * bias_pitch(sk);
    d.bias_row_stride = bias_pitch(sk);
    d.bias_head_stride = 0;
  }
  const char *why = pt_attn_decode_supported(&d);
  if (why) {
    fprintf(stderr, "unsupported: %s\n", why);
    exit(1);
  }
  const size_t wsb = pt_attn_decode_workspace_bytes(&d);
  CUdeviceptr ws = 0;
  if (wsb) {
    CK(cuMemAlloc(&ws, wsb));
    CK(pt_attn_workspace_prepare((void *)ws, wsb, NULL));
  }
  for (int rep = 0; rep < 2; ++rep) CK(pt_attn_decode_launch(&d, (void *)ws, wsb, NULL));
  /* Compare our output with itself (both O and LSE). */
  CK(pt_attn_compare_launch(&d, (void *)o, (float *)lse, (float *)res, NULL));
  CK(cuCtxSynchronize());
  float r[4];
  CK(cuMemcpyDtoH(r, res, 16));
  printf("dtype %s b%d h%d h_k%d sq%d sk%d d%d v%d causal%d%s ws %zu B: compare %g %g %g %g\n",
         bf16 ? "bf16" : "fp16", b, h, h_k, sq, sk, hd, dv, causal, masked ? " masked" : "", wsb, r[0],
         r[1], r[2], r[3]);
  if (r[0] != 0.f || r[2] != 0.f || !(r[1] > 0.f)) {
    fprintf(stderr, "self-compare not zero\n");
    exit(1);
  }
  cuMemFree(q);
  cuMemFree(k);
  cuMemFree(v);
  cuMemFree(o);
  cuMemFree(lse);
  cuMemFree(res);
  if (ws) cuMemFree(ws);
  if (bias) cuMemFree(bias);
}

static void run(int dtype, int b, int h, int h_k, int sq, int sk, int hd, int causal) {
  run_dv(dtype, b, h, h_k, sq, sk, hd, hd, causal);
}

/* MLA's head sizes: q/k 192, v and o 128 (the d192v128 kernels, padded onto d = 256). */
static void run_mla(int dtype, int b, int h, int h_k, int sq, int sk, int causal) {
  run_dv(dtype, b, h, h_k, sq, sk, 192, 128, causal);
}

int main(void) {
  if (!pt_real_driver()) {
    fprintf(stderr, "no CUDA driver\n");
    return 1;
  }
  CUdevice dev;
  CUcontext ctx;
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  run(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 128, 0);   /* several splits, partial tile */
  run(PT_DTYPE_BF16, 1, 1, 1, 1, 1, 128, 0);     /* one key */
  run(PT_DTYPE_FP16, 1, 4, 4, 4, 70, 64, 1);     /* causal, sq 4 */
  run(PT_DTYPE_BF16, 1, 2, 1, 8, 130, 64, 1);    /* causal, 16 rows, split with masked rows */
  run(PT_DTYPE_FP16, 1, 8, 1, 1, 300, 256, 0);   /* d 256 */
  run(PT_DTYPE_BF16, 40, 8, 8, 1, 100, 128, 0);  /* many units, one split */
  run(PT_DTYPE_BF16, 1, 1, 1, 1, 2000, 128, 0);  /* 8 splits in one cluster */
  run(PT_DTYPE_BF16, 6, 8, 8, 1, 2000, 128, 0);  /* 5 long splits: workspace merge */
  run(PT_DTYPE_BF16, 8, 8, 8, 1, 130, 128, 0);   /* 64 units: clusters of two (3 tiles) */
  run(PT_DTYPE_FP16, 8, 16, 8, 2, 1000, 128, 1); /* clusters of two, causal, sq 2 */
  /* d 80 and 96: padded onto the d = 128 kernel (issue 51), every plan and both loops. */
  run(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 80, 0);    /* several splits (cluster), partial tile, kt */
  run(PT_DTYPE_FP16, 1, 8, 1, 1, 300, 96, 0);    /* 8 rows: keys as the mma's M */
  run(PT_DTYPE_BF16, 1, 2, 1, 8, 130, 96, 1);    /* causal, 16 rows: rows as the mma's M */
  run(PT_DTYPE_FP16, 6, 8, 8, 1, 2000, 80, 0);   /* 5 long splits: workspace merge (staged) */
  run(PT_DTYPE_BF16, 40, 32, 32, 1, 100, 96, 0); /* Phi-3-mini's 32 heads, one split */
  run(PT_DTYPE_FP16, 1, 16, 1, 1, 3000, 80, 0);  /* 16 rows, cluster of 8 */
  /* q/k 192 with v 128 (MLA): padded onto the d = 256 kernel, K and V to their own widths. */
  run_mla(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 0);     /* cluster of 2, partial tile, kt */
  run_mla(PT_DTYPE_FP16, 1, 8, 1, 1, 300, 0);     /* 8 rows: keys as the mma's M, cluster of 3 */
  run_mla(PT_DTYPE_BF16, 1, 2, 1, 8, 130, 1);     /* causal, 16 rows: rows as the mma's M */
  run_mla(PT_DTYPE_FP16, 6, 8, 8, 1, 2000, 0);    /* 2 long splits: workspace merge (staged) */
  run_mla(PT_DTYPE_BF16, 2, 128, 128, 1, 100, 0); /* DeepSeek-V3's 128 heads, one split */
  run_mla(PT_DTYPE_FP16, 1, 16, 1, 1, 3000, 0);   /* 16 rows, cluster of 8 */
  run_mla(PT_DTYPE_BF16, 1, 128, 128, 2, 300, 1); /* a speculative token, causal */
  /* The small-split shapes above merged in a cluster; again through the workspace. */
  pt_attn_plan_cluster_max = 1;
  run(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 128, 0);
  run(PT_DTYPE_BF16, 1, 2, 1, 8, 130, 64, 1);
  run(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 96, 0);
  run(PT_DTYPE_FP16, 1, 2, 1, 8, 130, 80, 1);
  run(PT_DTYPE_BF16, 1, 16, 1, 1, 4000, 96, 0);  /* 16 splits of 16 rows: the batched merge */
  run_mla(PT_DTYPE_BF16, 2, 8, 2, 1, 200, 0);
  run_mla(PT_DTYPE_FP16, 1, 16, 1, 1, 4000, 0);   /* 16 splits of 16 rows: staged (d 256's ring) */
  run_mla(PT_DTYPE_BF16, 1, 16, 1, 1, 8200, 0);   /* 26 splits of 16 rows: the batched merge */
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  /* Masked (additive bias, left padding): splits through the cluster, the
   * workspace and one split, several query rows with causal. */
  masked = 1;
  run(PT_DTYPE_BF16, 4, 8, 2, 1, 2000, 128, 0);
  run(PT_DTYPE_FP16, 2, 4, 4, 4, 130, 64, 1);
  run(PT_DTYPE_BF16, 40, 8, 8, 1, 100, 128, 0);
  run(PT_DTYPE_BF16, 1, 8, 8, 1, 3000, 128, 0);  /* cluster splits of 6 tiles: workspace (short rule) */
  run(PT_DTYPE_BF16, 8, 16, 8, 1, 4100, 128, 0); /* clusters of two */
  run(PT_DTYPE_FP16, 2, 16, 2, 1, 700, 64, 0);    /* 8 rows: keys as the mma's M, d 64 */
  run(PT_DTYPE_BF16, 2, 16, 1, 1, 700, 128, 0);   /* 16 rows: rows as the mma's M */
  run(PT_DTYPE_BF16, 2, 6, 2, 1, 700, 256, 0);    /* 3 rows, d 256 */
  run(PT_DTYPE_BF16, 4, 8, 2, 1, 2000, 96, 0);    /* d 96, masked, splits */
  run(PT_DTYPE_FP16, 2, 16, 1, 1, 700, 80, 0);    /* d 80, 16 rows */
  run(PT_DTYPE_BF16, 2, 16, 2, 1, 700, 96, 0);    /* d 96, 8 rows */
  run_mla(PT_DTYPE_BF16, 4, 8, 2, 1, 2000, 0);    /* MLA, masked, splits */
  run_mla(PT_DTYPE_FP16, 2, 16, 1, 1, 700, 0);    /* MLA, 16 rows */
  run_mla(PT_DTYPE_BF16, 2, 16, 2, 1, 700, 0);    /* MLA, 8 rows */
  run_mla(PT_DTYPE_FP16, 2, 128, 128, 1, 700, 0); /* MLA, DeepSeek-V3's heads */
  pt_attn_plan_cluster_max = 1;
  run(PT_DTYPE_BF16, 6, 8, 8, 1, 2000, 128, 0);
  run(PT_DTYPE_FP16, 6, 8, 8, 1, 2000, 80, 0);
  run_mla(PT_DTYPE_FP16, 6, 8, 8, 1, 2000, 0);
  pt_attn_plan_cluster_max = PT_ATTN_PLAN_CLUSTER;
  masked = 0;
  printf("sancheck ok\n");
  return 0;
}
