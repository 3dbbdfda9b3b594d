/* CPU tests of the prefill launcher (kernels/attn_prefill_launch.c and the
 * prefill module of attn_launch.c) against a fake driver table: what it
 * refuses and why, the three TMA descriptors it encodes (dims, byte strides,
 * boxes, swizzle), the launch geometry and parameter block, the module loaded
 * once per context and only on a compute capability 9.0 device, a refusal on
 * other GPUs that is remembered, and a failure under capture that is retried.
 * Built only when nvcc built the fatbins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/attn.h"
#include "kernels/attn_prefill.h"
#include "common/driver.h"
#include "tests/unit/kernels/hf_desc.h"

static struct pt_driver fk_drv;

#define STREAM ((CUstream)(uintptr_t)0x5A)

static struct {
  CUcontext ctx;        /* what the stream's context is */
  int cc_major, cc_minor;
  int dev;              /* the current context's device ordinal */
  int attr_calls;       /* device attribute queries */
  int capturing;        /* cuStreamIsCapturing answers "active" */
  CUresult load_rc;     /* what cuModuleLoadData answers for the prefill image */
  int loads, prefill_loads, launches, encodes;
  const char *fn_names[128];
  int nfn;
  const char *last_fn;
  unsigned grid[3], block[3], smem;
  int sms; /* the device's multiprocessor count */
  CUstream stream;
  struct pt_prefill_kparams last;
  struct {
    CUtensorMapDataType type;
    cuuint32_t rank;
    const void *base;
    cuuint64_t dims[4], strides[3];
    cuuint32_t box[4];
    CUtensorMapSwizzle swizzle;
  } enc[8];
} fk;

extern const unsigned char pt_prefill_fatbin[];

static CUresult fk_ctx_get(CUcontext *c) { *c = fk.ctx; return CUDA_SUCCESS; }
static CUresult fk_stream_ctx(CUstream s, CUcontext *c) { (void)s; *c = fk.ctx; return CUDA_SUCCESS; }
static CUresult fk_ctx_dev(CUdevice *d) { *d = fk.dev; return CUDA_SUCCESS; }
static CUresult fk_dev_attr(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  fk.attr_calls++;
  if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *v = fk.cc_major;
  else if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *v = fk.cc_minor;
  else if (a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *v = fk.sms;
  else *v = 0;
  return CUDA_SUCCESS;
}
static CUresult fk_load(CUmodule *m, const void *image) {
  fk.loads++;
  if (image == pt_prefill_fatbin) {
    fk.prefill_loads++;
    if (fk.load_rc != CUDA_SUCCESS) return fk.load_rc;
    *m = (CUmodule)(uintptr_t)0x800;
  } else {
    *m = (CUmodule)(uintptr_t)0x400;
  }
  return CUDA_SUCCESS;
}
static CUresult fk_get_fn(CUfunction *f, CUmodule m, const char *name) {
  (void)m;
  assert_true(fk.nfn < 128);
  fk.fn_names[fk.nfn] = name;
  *f = (CUfunction)(uintptr_t)(0x1000 + fk.nfn++);
  return CUDA_SUCCESS;
}
static CUresult fk_set_attr(CUfunction f, CUfunction_attribute a, int v) {
  (void)f; (void)a; (void)v;
  return CUDA_SUCCESS;
}
static CUresult fk_unload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
static CUresult fk_capturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  *st = fk.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
static CUresult fk_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *base,
                          const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                          const cuuint32_t *estr, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                          CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)estr; (void)il; (void)l2; (void)oob;
  assert_true(fk.encodes < 8);
  assert_int_equal(rank, 4);
  fk.enc[fk.encodes].type = type;
  fk.enc[fk.encodes].rank = rank;
  fk.enc[fk.encodes].base = base;
  memcpy(fk.enc[fk.encodes].dims, dims, sizeof fk.enc[0].dims);
  memcpy(fk.enc[fk.encodes].strides, strides, sizeof fk.enc[0].strides);
  memcpy(fk.enc[fk.encodes].box, box, sizeof fk.enc[0].box);
  fk.enc[fk.encodes].swizzle = sw;
  /* a recognisable map: its first word says which encode made it */
  memset(map, 0, sizeof *map);
  map->opaque[0] = 0xE0 + (cuuint64_t)fk.encodes;
  fk.encodes++;
  return CUDA_SUCCESS;
}
static CUresult fk_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                          void **extra) {
  (void)extra;
  uintptr_t i = (uintptr_t)f - 0x1000;
  assert_true(i < (uintptr_t)fk.nfn);
  fk.last_fn = fk.fn_names[i];
  fk.launches++;
  fk.grid[0] = gx, fk.grid[1] = gy, fk.grid[2] = gz;
  fk.block[0] = bx, fk.block[1] = by, fk.block[2] = bz;
  fk.smem = smem;
  fk.stream = s;
  memcpy(&fk.last, params[0], sizeof fk.last);
  return CUDA_SUCCESS;
}

static int setup(void **st) {
  (void)st;
  memset(&fk, 0, sizeof fk);
  fk.ctx = (CUcontext)(uintptr_t)0xC0;
  fk.cc_major = 9;
  fk.sms = 132;
  memset(&fk_drv, 0, sizeof fk_drv);
  fk_drv.cuCtxGetCurrent = fk_ctx_get;
  fk_drv.cuStreamGetCtx = fk_stream_ctx;
  fk_drv.cuCtxGetDevice = fk_ctx_dev;
  fk_drv.cuDeviceGetAttribute = fk_dev_attr;
  fk_drv.cuModuleLoadData = fk_load;
  fk_drv.cuModuleGetFunction = fk_get_fn;
  fk_drv.cuModuleUnload = fk_unload;
  fk_drv.cuFuncSetAttribute = fk_set_attr;
  fk_drv.cuStreamIsCapturing = fk_capturing;
  fk_drv.cuLaunchKernel = fk_launch;
  fk_drv.cuTensorMapEncodeTiled = fk_encode;
  pt_attn_set_driver(&fk_drv);
  return 0;
}

/* torch's flash layout for prefill: q, o [b, sq, h, d], k, v [b, sk, h_k, d], contiguous. */
static struct pt_attn_desc prefill_desc(int b, int h, int h_k, int sq, int sk, int d) {
  struct pt_attn_desc x = hf_desc(b, h, h_k, sk, d);
  x.seqlen_q = sq;
  x.q_row_stride = x.o_row_stride = (int64_t)h * d;
  x.q_head_stride = x.o_head_stride = d;
  x.q_batch_stride = x.o_batch_stride = (int64_t)sq * h * d;
  x.k_row_stride = x.v_row_stride = (int64_t)h_k * d;
  x.k_head_stride = x.v_head_stride = d;
  x.k_batch_stride = x.v_batch_stride = (int64_t)sk * h_k * d;
  x.causal = 1;
  return x;
}

static void test_supported(void **st) {
  (void)st;
  struct pt_attn_desc d = prefill_desc(2, 32, 8, 1000, 1000, 128);
  assert_null(pt_attn_prefill_supported(&d));
  d.seqlen_q = 300; /* chunked prefill: bottom-right causal */
  assert_null(pt_attn_prefill_supported(&d));
  d.seqlen_q = 1200;
  assert_string_equal(pt_attn_prefill_supported(&d), "causal with seqlen_q > seqlen_k");
  d.causal = 0;
  assert_null(pt_attn_prefill_supported(&d));

  d.scale = 0.f;
  assert_string_equal(pt_attn_prefill_supported(&d), "scale not positive");
  d.scale = -0.088f;
  assert_string_equal(pt_attn_prefill_supported(&d), "scale not positive");
  d.scale = 0.088f;
  assert_null(pt_attn_prefill_supported(&d));

  /* 2^30 tiles (512 m-blocks x 16384 heads x 128): the walk's int arithmetic could overflow */
  struct pt_attn_desc big = prefill_desc(128, 16384, 16384, 65536, 65536, 128);
  assert_string_equal(pt_attn_prefill_supported(&big), "too many tiles");
  big.b = 127; /* 2^30 - 2^23 tiles: taken */
  assert_null(pt_attn_prefill_supported(&big));

  struct pt_attn_desc x = prefill_desc(2, 32, 8, 1000, 1000, 256);
  assert_string_equal(pt_attn_prefill_supported(&x), "prefill head_dim not 64/128");
  /* v as wide as q/k only: 0 and head_dim itself are that */
  x = prefill_desc(2, 32, 8, 1000, 1000, 128);
  x.v_head_dim = 128;
  assert_null(pt_attn_prefill_supported(&x));
  x.v_head_dim = 64;
  assert_string_equal(pt_attn_prefill_supported(&x), "prefill head_dim of v differs");
  x = prefill_desc(2, 32, 8, 1000, 1000, 192);
  x.v_head_dim = 128;
  assert_string_equal(pt_attn_prefill_supported(&x), "prefill head_dim not 64/128");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.dtype = 7;
  assert_string_equal(pt_attn_prefill_supported(&x), "dtype not fp16/bf16");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.bias = FAKE(0x60000);
  assert_string_equal(pt_attn_prefill_supported(&x), "attention bias (prefill)");
  x = prefill_desc(2, 30, 8, 1000, 1000, 64);
  assert_string_equal(pt_attn_prefill_supported(&x), "h not a multiple of h_k");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.k = FAKE(0x20008);
  assert_string_equal(pt_attn_prefill_supported(&x), "misaligned pointer");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.v_head_stride = 0; /* a broadcast head: the TMA takes no zero stride */
  assert_string_equal(pt_attn_prefill_supported(&x), "prefill q/k/v stride not a positive multiple of 8");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.q_row_stride = 32 * 64 + 4;
  assert_string_equal(pt_attn_prefill_supported(&x), "prefill q/k/v stride not a positive multiple of 8");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.o_row_stride = 32 * 64 + 2;
  assert_string_equal(pt_attn_prefill_supported(&x), "stride not a multiple of 8");
  x = prefill_desc(2, 32, 8, 1000, 1000, 64);
  x.k_dim_stride = 2;
  assert_string_equal(pt_attn_prefill_supported(&x), "last dim not contiguous");
  x = prefill_desc(70000, 32, 8, 100, 100, 64);
  assert_string_equal(pt_attn_prefill_supported(&x), "batch or heads > 65535");
  /* refused descriptors never reach the driver */
  assert_int_equal(pt_attn_prefill_launch(&x, STREAM), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fk.loads + fk.launches + fk.encodes, 0);
}

/* GQA, bf16, d = 128, causal, sq < sk, a padded O: the maps, the grid, the
 * parameter block. */
static void test_launch(void **st) {
  (void)st;
  struct pt_attn_desc d = prefill_desc(3, 32, 8, 1000, 1500, 128);
  d.o_batch_stride += 64; /* strides travel, not shapes */
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.prefill_loads, 1);
  assert_int_equal(fk.loads, 2); /* the decode module first (verify and faults use it), then prefill */
  assert_int_equal(fk.launches, 1);
  assert_string_equal(fk.last_fn, "pt_attn_prefill_bf16_d128");
  const unsigned bm = PT_PREFILL_BM(128);
  /* the persistent walk: 8 m-blocks x 32 heads x 3 = 768 tiles on 132 SMs, a 1D grid */
  assert_int_equal(fk.grid[0], 132); /* dealt in order, the busiest SM 8.5 % over the mean */
  assert_int_equal(pt_prefill_ctas(&fk.last, (int)bm, 132), 132);
  assert_int_equal(fk.grid[1], 1);
  assert_int_equal(fk.grid[2], 1);
  assert_int_equal(fk.block[0], PT_PREFILL_THREADS(128));
  assert_int_equal(fk.block[1] * fk.block[2], 1);
  assert_int_equal(fk.smem, pt_prefill_smem_bytes(128));
  assert_ptr_equal(fk.stream, STREAM);

  assert_int_equal(fk.encodes, 3);
  /* Q: (d, sq, h, b), byte strides of row, head, batch; box (64, BM) */
  assert_int_equal(fk.enc[0].type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  assert_ptr_equal(fk.enc[0].base, d.q);
  assert_int_equal(fk.enc[0].dims[0], 128);
  assert_int_equal(fk.enc[0].dims[1], 1000);
  assert_int_equal(fk.enc[0].dims[2], 32);
  assert_int_equal(fk.enc[0].dims[3], 3);
  assert_int_equal(fk.enc[0].strides[0], 32 * 128 * 2);
  assert_int_equal(fk.enc[0].strides[1], 128 * 2);
  assert_int_equal(fk.enc[0].strides[2], 1000 * 32 * 128 * 2);
  assert_int_equal(fk.enc[0].box[0], PT_PREFILL_SUB);
  assert_int_equal(fk.enc[0].box[1], bm);
  assert_int_equal(fk.enc[0].swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  /* K and V: (d, sk, h_k, b), box (64, BN), never expanded to h heads */
  for (int i = 1; i <= 2; i++) {
    assert_ptr_equal(fk.enc[i].base, i == 1 ? d.k : d.v);
    assert_int_equal(fk.enc[i].dims[1], 1500);
    assert_int_equal(fk.enc[i].dims[2], 8);
    assert_int_equal(fk.enc[i].strides[0], 8 * 128 * 2);
    assert_int_equal(fk.enc[i].strides[2], 1500 * 8 * 128 * 2);
    assert_int_equal(fk.enc[i].box[1], PT_PREFILL_BN);
  }
  /* the parameter block carries the maps it was given and the problem */
  assert_int_equal(fk.last.tq.opaque[0], 0xE0);
  assert_int_equal(fk.last.tk.opaque[0], 0xE1);
  assert_int_equal(fk.last.tv.opaque[0], 0xE2);
  assert_ptr_equal(fk.last.o, d.o);
  assert_ptr_equal(fk.last.lse, d.lse);
  assert_int_equal(fk.last.o_bs, d.o_batch_stride);
  assert_int_equal(fk.last.o_rs, 32 * 128);
  assert_int_equal(fk.last.o_hs, 128);
  assert_int_equal(fk.last.b, 3);
  assert_int_equal(fk.last.h, 32);
  assert_int_equal(fk.last.h_k, 8);
  assert_int_equal(fk.last.sq, 1000);
  assert_int_equal(fk.last.sk, 1500);
  assert_int_equal(fk.last.group, 4);
  assert_int_equal(fk.last.causal, 1);
  assert_int_equal(fk.last.m_blocks, (int)((1000 + bm - 1) / bm));
  assert_int_equal(fk.last.tiles, fk.last.m_blocks * 32 * 3);
  /* K/V of one KV head: 1500 x 128 x 2 tensors x 2 bytes; all 96 (batch, head) pairs fit in
   * one section of the walk */
  assert_int_equal(fk.last.sec, 96);
  assert_true(fk.last.scale_log2 > 0.1269f && fk.last.scale_log2 < 0.1271f); /* 0.088 * log2(e) */

  /* fp16 d = 64: the other function, the module not loaded again */
  struct pt_attn_desc h = prefill_desc(1, 16, 16, 77, 77, 64);
  h.dtype = PT_DTYPE_FP16;
  h.causal = 0;
  h.lse = NULL;
  assert_int_equal(pt_attn_prefill_launch(&h, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_prefill_fp16_d64");
  assert_int_equal(fk.enc[3].type, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  assert_int_equal(fk.enc[3].box[1], PT_PREFILL_BM(64));
  assert_int_equal(fk.block[0], PT_PREFILL_THREADS(64));
  assert_null(fk.last.lse);
  assert_int_equal(fk.last.causal, 0);
  assert_int_equal(fk.prefill_loads, 1);
  assert_int_equal(fk.grid[0], (unsigned)fk.last.tiles); /* 16 tiles, fewer than the SMs */

  /* one sequence of 4096, causal: unevenly dealt on 132 SMs, so one CTA per tile (twice: the
   * second launch answered from the launcher's per-shape memory) */
  struct pt_attn_desc u = prefill_desc(1, 32, 8, 4096, 4096, 128);
  for (int i = 0; i < 2; i++) {
    fk.encodes = 0; /* the fake keeps the maps of a few launches */
    assert_int_equal(pt_attn_prefill_launch(&u, STREAM), CUDA_SUCCESS);
    assert_int_equal(fk.grid[0], 1024);
  }
  /* a context whose device did not give its SM count: one CTA per tile, for the shape that
   * took one per SM above */
  fk.ctx = (CUcontext)(uintptr_t)0xC6;
  fk.sms = 0;
  fk.encodes = 0;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.grid[0], 768);
}

/* The parameter block of a launch, as the launcher fills it (the walk's fields). */
static struct pt_prefill_kparams walk_params(int b, int h, int group, int sq, int sk, int d, int causal) {
  struct pt_prefill_kparams p;
  memset(&p, 0, sizeof p);
  p.b = b, p.h = h, p.h_k = h / group, p.group = group, p.sq = sq, p.sk = sk, p.causal = causal;
  p.m_blocks = (sq + PT_PREFILL_BM(d) - 1) / PT_PREFILL_BM(d);
  p.tiles = p.m_blocks * h * b;
  p.sec = pt_prefill_section(b, h, group, sk, d);
  return p;
}

/* The persistent walk visits every (m-block, head, batch) tile once; inside a section the
 * m-blocks come heaviest first (causal) and the section's pairs stay together. */
static void check_walk(const struct pt_prefill_kparams *p, int d) {
  static unsigned char seen[1 << 16];
  assert_true(p->tiles <= (int)sizeof seen);
  memset(seen, 0, sizeof seen);
  int prev_cost = 0, prev_sec = 0;
  for (int t = 0; t < p->tiles; ++t) {
    int mb, h, bi;
    pt_prefill_walk(p, t, &mb, &h, &bi);
    assert_true(mb >= 0 && mb < p->m_blocks && h >= 0 && h < p->h && bi >= 0 && bi < p->b);
    const int idx = (bi * p->h + h) * p->m_blocks + mb;
    assert_int_equal(seen[idx], 0);
    seen[idx] = 1;
    const int sec = (bi * p->h + h) / p->sec, cost = pt_prefill_tile_cost(p, PT_PREFILL_BM(d), t);
    assert_true(t == 0 ? sec == 0 : (sec == prev_sec || sec == prev_sec + 1));
    if (t > 0 && sec == prev_sec && p->causal) assert_true(cost <= prev_cost);
    prev_sec = sec;
    prev_cost = cost;
  }
}

/* The walk's sections and the grid's size (pt_prefill_ctas). */
static void test_grid(void **st) {
  (void)st;
  /* sections: the K/V of 24 MiB: one KV head at 32k keys (16 MiB), 24 at 2k (1 MiB each) */
  assert_int_equal(pt_prefill_section(1, 32, 4, 32768, 128), 4);
  assert_int_equal(pt_prefill_section(8, 32, 4, 2048, 128), 96);
  assert_int_equal(pt_prefill_section(1, 32, 4, 2048, 128), 32);   /* at most every pair */
  assert_int_equal(pt_prefill_section(1, 8, 1, 1 << 20, 128), 1);  /* at least one KV head */

  /* one sequence of 4096, causal: 1024 tiles of 1 to 32 K/V tiles; dealt out statically, the
   * busiest of 132 SMs would carry 12 % over the mean, so one CTA per tile */
  struct pt_prefill_kparams p = walk_params(1, 32, 4, 4096, 4096, 128, 1);
  assert_int_equal(p.tiles, 1024);
  assert_true(pt_prefill_imbalance(&p, PT_PREFILL_BM(128), 132) > 1100u);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 132), 1024);
  check_walk(&p, 128);
  /* the same at d = 64, B = 1, S = 2048: 352 tiles, 2.7 per SM */
  p = walk_params(1, 32, 4, 2048, 2048, 64, 1);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(64), 132), p.tiles);
  /* four sequences of 4096: evenly enough dealt, one CTA per SM */
  p = walk_params(4, 32, 4, 4096, 4096, 128, 1);
  assert_true(pt_prefill_imbalance(&p, PT_PREFILL_BM(128), 132) <= 1100u);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 132), 132);
  check_walk(&p, 128);
  /* not causal: every tile costs the same */
  p = walk_params(1, 32, 4, 4096, 4096, 128, 0);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 132), 132);
  check_walk(&p, 128);
  /* fewer tiles than SMs, or the SM count unknown: one CTA per tile; more than 8 per SM: one
   * CTA per SM without counting */
  p = walk_params(1, 8, 1, 512, 512, 128, 1);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 132), p.tiles);
  p = walk_params(4, 32, 4, 16384, 16384, 128, 1);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 0), p.tiles);
  assert_int_equal(pt_prefill_ctas(&p, PT_PREFILL_BM(128), 132), 132);
  /* several sections (GQA 32/8, 192-row m-blocks at d = 64, sq < sk): one KV head's 4 query
   * heads per section at 90000 keys (22 MiB of K/V), then sections of 36 pairs, the last short */
  p = walk_params(3, 32, 4, 1000, 90000, 64, 1);
  assert_int_equal(p.sec, 4);
  check_walk(&p, 64);
  p.sec = 36;
  check_walk(&p, 64);
}

/* d = 64: which launches take the kernel whose warpgroups skip the K/V tiles past their own
 * rows (pt_prefill_skip_pays), and that the launcher launches it. */
static void test_skip(void **st) {
  (void)st;
  static const struct {
    int b, sq, sk, d, causal, want;
  } cases[] = {
    /* causal, sq == sk: the surplus is 10 % of the warpgroup-tiles at 2048, 8 % at 4096, 2 % at
     * 16384 (the threshold is 5 %) */
    {8, 2048, 2048, 64, 1, 1},
    {1, 4096, 4096, 64, 1, 1},
    {1, 16384, 16384, 64, 1, 0},
    {1, 32768, 32768, 64, 1, 0},
    /* not causal: only an empty slab of the last tile, and the skipping loop measured slower */
    {8, 2048, 2048, 64, 0, 0},
    /* d = 128 has no such kernel */
    {8, 2048, 2048, 128, 1, 0},
    /* a chunk of 17 queries after 4079 cached keys: two of the three slabs have no rows */
    {1, 17, 4096, 64, 1, 1},
    /* 16384 queries after 16384 cached keys: every slab needs nearly every tile */
    {1, 16384, 32768, 64, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const struct pt_prefill_kparams p =
        walk_params(cases[i].b, 32, 4, cases[i].sq, cases[i].sk, cases[i].d, cases[i].causal);
    assert_int_equal(pt_prefill_skip_pays(&p, cases[i].d), cases[i].want);
  }

  /* the launcher: bf16 causal 2048 takes the _skip kernel, fp16 causal 16384 the plain one,
   * both from the one module (a context no other test has used: its module loads here) */
  fk.ctx = (CUcontext)(uintptr_t)0xC9;
  struct pt_attn_desc d = prefill_desc(8, 32, 8, 2048, 2048, 64);
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_prefill_bf16_d64_skip");
  assert_int_equal(fk.block[0], PT_PREFILL_THREADS(64));
  assert_int_equal(fk.smem, pt_prefill_smem_bytes(64));
  assert_int_equal(fk.last.m_blocks, (2048 + PT_PREFILL_BM(64) - 1) / PT_PREFILL_BM(64));
  fk.encodes = 0;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS); /* remembered per shape */
  assert_string_equal(fk.last_fn, "pt_attn_prefill_bf16_d64_skip");
  struct pt_attn_desc h = prefill_desc(1, 32, 8, 16384, 16384, 64);
  h.dtype = PT_DTYPE_FP16;
  fk.encodes = 0;
  assert_int_equal(pt_attn_prefill_launch(&h, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_prefill_fp16_d64");
  h.seqlen_q = h.seqlen_k = 2048;
  fk.encodes = 0;
  assert_int_equal(pt_attn_prefill_launch(&h, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_prefill_fp16_d64_skip");
  assert_int_equal(fk.prefill_loads, 1);
  int npf = 0; /* the prefill module's six functions, each looked up once */
  for (int i = 0; i < fk.nfn; i++) npf += !strncmp(fk.fn_names[i], "pt_attn_prefill_", 16);
  assert_int_equal(npf, 6);
}

/* The SDPA policy's question (pt_attn_prefill_available): asked of the
 * current context's device once, nothing loaded. */
static void test_available(void **st) {
  (void)st;
  fk.dev = 3;
  assert_int_equal(pt_attn_prefill_available(), 1);
  const int calls = fk.attr_calls;
  assert_int_equal(pt_attn_prefill_available(), 1);
  assert_int_equal(fk.attr_calls, calls); /* remembered per device */
  assert_int_equal(fk.loads, 0);
  fk.dev = 4;
  fk.cc_major = 8; /* another GPU */
  assert_int_equal(pt_attn_prefill_available(), 0);
  fk.dev = 5;
  fk.cc_major = 10;
  assert_int_equal(pt_attn_prefill_available(), 0);
  fk.dev = 3; /* the first device's answer stands */
  assert_int_equal(pt_attn_prefill_available(), 1);
  fk.ctx = NULL; /* no current context: 0, and not remembered for the device */
  fk.dev = 6;
  fk.cc_major = 9;
  assert_int_equal(pt_attn_prefill_available(), 0);
  fk.ctx = (CUcontext)(uintptr_t)0xC5;
  assert_int_equal(pt_attn_prefill_available(), 1);
  fk.dev = 64; /* an ordinal past the table: not asked */
  assert_int_equal(pt_attn_prefill_available(), 0);
  assert_int_equal(fk.loads, 0);
  /* a context where the prefill module failed to load: 0 there, 1 in another context */
  fk.dev = 3;
  fk.ctx = (CUcontext)(uintptr_t)0xC7;
  fk.load_rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
  struct pt_attn_desc d = prefill_desc(1, 8, 8, 512, 512, 128);
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NO_BINARY_FOR_GPU);
  fk.load_rc = CUDA_SUCCESS;
  assert_int_equal(pt_attn_prefill_available(), 0);
  fk.ctx = (CUcontext)(uintptr_t)0xC8;
  assert_int_equal(pt_attn_prefill_available(), 1);
}

/* Another GPU (compute capability 8.0, or 10.0): refused before any load,
 * and remembered for the context. */
static void test_other_gpu(void **st) {
  (void)st;
  fk.ctx = (CUcontext)(uintptr_t)0xC1; /* a context the module table has not seen */
  fk.cc_major = 8;
  struct pt_attn_desc d = prefill_desc(1, 8, 8, 512, 512, 128);
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fk.prefill_loads, 0);
  assert_int_equal(fk.launches, 0);
  fk.ctx = (CUcontext)(uintptr_t)0xC2;
  fk.cc_major = 10;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fk.prefill_loads, 0);
}

/* No load while the stream is captured (it could invalidate the capture):
 * refused without a try, and loaded by the next launch outside the capture;
 * once loaded, launches under capture go ahead. A load that fails outside a
 * capture is not retried. */
static void test_load_failure(void **st) {
  (void)st;
  fk.ctx = (CUcontext)(uintptr_t)0xC3;
  struct pt_attn_desc d = prefill_desc(1, 8, 8, 512, 512, 128);
  fk.capturing = 1;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(fk.loads, 0); /* not the decode module either: this context is new */
  assert_int_equal(fk.launches, 0);
  fk.capturing = 0;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.prefill_loads, 1);
  assert_int_equal(fk.launches, 1);
  fk.capturing = 1;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.prefill_loads, 1);
  assert_int_equal(fk.launches, 2);
  fk.capturing = 0;

  fk.ctx = (CUcontext)(uintptr_t)0xC4;
  fk.load_rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NO_BINARY_FOR_GPU);
  fk.load_rc = CUDA_SUCCESS;
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NO_BINARY_FOR_GPU);
  assert_int_equal(fk.prefill_loads, 2);
}

/* Without the tensor-map encoder (a driver older than CUDA 12) nothing is
 * launched. */
static void test_no_encoder(void **st) {
  (void)st;
  fk_drv.cuTensorMapEncodeTiled = NULL;
  struct pt_attn_desc d = prefill_desc(1, 8, 8, 512, 512, 128);
  assert_int_equal(pt_attn_prefill_launch(&d, STREAM), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.launches + fk.loads, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_supported, setup),
    cmocka_unit_test_setup(test_launch, setup),
    cmocka_unit_test_setup(test_grid, setup),
    cmocka_unit_test_setup(test_skip, setup),
    cmocka_unit_test_setup(test_available, setup),
    cmocka_unit_test_setup(test_other_gpu, setup),
    cmocka_unit_test_setup(test_load_failure, setup),
    cmocka_unit_test_setup(test_no_encoder, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
