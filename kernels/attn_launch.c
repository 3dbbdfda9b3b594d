/* Loader and launcher of the fused attention kernels.
 *
 * The fatbin built by nvcc is embedded in this library (kernels/embed.py,
 * section .nv_fatbin). It is loaded through the real driver functions of the
 * table the shim hands the launcher (pt_attn_set_driver) once per CUDA
 * context, on first use, into a small table that is read without a lock:
 * entries are published by a release store of the count, so only the first
 * launch in a context takes the lock. Launches go through the table's
 * cuLaunchKernel on the caller's stream and do no
 * allocation, memset or synchronisation, so they may be captured into a CUDA
 * graph. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_kparams.h"
#include "kernels/attn_module.h"
#include "kernels/attn_plan.h"
#include "kernels/attn_prefill.h"
#include "common/driver.h"

#ifndef PT_ATTN_HAVE_FATBIN
/* Built without nvcc: nothing to load, every launch is refused (and no
 * driver function is called). */
static const struct pt_driver pt_attn_no_driver;
void pt_attn_set_driver(const struct pt_driver *drv) { (void)drv; }
const struct pt_driver *pt_attn_driver(void) { return &pt_attn_no_driver; }
CUresult pt_attn_prefill_functions(CUstream stream, const CUfunction **fns, int *sms) {
  (void)stream; (void)fns; (void)sms;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int pt_attn_prefill_available(void) { return 0; }
int pt_attn_workspace_prepare(void *ws, size_t bytes, void *stream) {
  (void)ws; (void)bytes; (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int pt_attn_decode_launch(const struct pt_attn_desc *d, void *workspace, size_t ws_bytes,
                          void *stream) {
  (void)d; (void)workspace; (void)ws_bytes; (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int pt_attn_compare_launch(const struct pt_attn_desc *ref, const void *test_o,
                           const float *test_lse, float *result, void *stream) {
  (void)ref; (void)test_o; (void)test_lse; (void)result; (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int pt_attn_fault_launch(const struct pt_attn_desc *d, float factor, void *stream) {
  (void)d; (void)factor; (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}
#else
extern const unsigned char pt_attn_fatbin[];

/* The driver table, handed once at load by the shim (shim/init.c), which
 * fills it before any hooked launch. Until then, or without the shim, a table
 * of NULL members: every launch fails as "not initialized". Read once per
 * call (one pointer load). */
static const struct pt_driver pt_attn_no_driver;
static const struct pt_driver *pt_attn_drv = &pt_attn_no_driver;

void pt_attn_set_driver(const struct pt_driver *drv) { pt_attn_drv = drv ? drv : &pt_attn_no_driver; }
const struct pt_driver *pt_attn_driver(void) { return pt_attn_drv; }

/* Decode kernels: the rows-as-M loop, then the same twelve with the keys-as-M loop (_kt,
 * launches with at most 8 rows per KV head); each holds only its loop (kernels/attn_decode.cu
 * says why). Per dtype, one kernel per head size pair in pt_attn_plan_dims/vdims order
 * (plan.dkind indexes it); d192v128: q/k 192, v 128. */
enum {
  PT_FN_BF16_D64, PT_FN_BF16_D80, PT_FN_BF16_D96, PT_FN_BF16_D128, PT_FN_BF16_D256,
  PT_FN_BF16_D192V128,
  PT_FN_FP16_D64, PT_FN_FP16_D80, PT_FN_FP16_D96, PT_FN_FP16_D128, PT_FN_FP16_D256,
  PT_FN_FP16_D192V128,
  PT_FN_KT_BF16_D64, PT_FN_KT_BF16_D80, PT_FN_KT_BF16_D96, PT_FN_KT_BF16_D128, PT_FN_KT_BF16_D256,
  PT_FN_KT_BF16_D192V128,
  PT_FN_KT_FP16_D64, PT_FN_KT_FP16_D80, PT_FN_KT_FP16_D96, PT_FN_KT_FP16_D128, PT_FN_KT_FP16_D256,
  PT_FN_KT_FP16_D192V128,
  PT_FN_CMP_BF16, PT_FN_CMP_FP16,
  PT_FN_FAULT_BF16, PT_FN_FAULT_FP16,
  PT_FN_COUNT
};
_Static_assert(PT_FN_FP16_D64 - PT_FN_BF16_D64 == PT_ATTN_NDKIND, "one decode kernel per head size pair");

static const char *const pt_attn_fn_names[PT_FN_COUNT] = {
  "pt_attn_decode_bf16_d64", "pt_attn_decode_bf16_d80", "pt_attn_decode_bf16_d96",
  "pt_attn_decode_bf16_d128", "pt_attn_decode_bf16_d256", "pt_attn_decode_bf16_d192v128",
  "pt_attn_decode_fp16_d64", "pt_attn_decode_fp16_d80", "pt_attn_decode_fp16_d96",
  "pt_attn_decode_fp16_d128", "pt_attn_decode_fp16_d256", "pt_attn_decode_fp16_d192v128",
  "pt_attn_decode_bf16_d64_kt", "pt_attn_decode_bf16_d80_kt", "pt_attn_decode_bf16_d96_kt",
  "pt_attn_decode_bf16_d128_kt", "pt_attn_decode_bf16_d256_kt", "pt_attn_decode_bf16_d192v128_kt",
  "pt_attn_decode_fp16_d64_kt", "pt_attn_decode_fp16_d80_kt", "pt_attn_decode_fp16_d96_kt",
  "pt_attn_decode_fp16_d128_kt", "pt_attn_decode_fp16_d256_kt", "pt_attn_decode_fp16_d192v128_kt",
  "pt_attn_compare_bf16",    "pt_attn_compare_fp16",
  "pt_attn_fault_bf16",      "pt_attn_fault_fp16",
};

#define PT_ATTN_MAX_CTX 64

struct pt_attn_module {
  CUcontext ctx;
  CUresult status; /* of the load: a failed context is not retried on every launch */
  CUmodule mod;
  CUfunction fn[PT_FN_COUNT];
  int big_clusters; /* clusters over 8 CTAs allowed (non-portable attribute set) */
  /* The prefill module (kernels/attn_prefill.cu, sm_90a), loaded on the first
   * prefill launch: 0 not yet, 1 loaded, 2 failed (pf_status says why). */
  atomic_int pf_state;
  CUresult pf_status;
  CUmodule pf_mod;
  CUfunction pf_fn[PT_PF_COUNT];
  int pf_sms; /* the device's SMs, for the persistent grid (0: unknown) */
};

static struct pt_attn_module pt_attn_mods[PT_ATTN_MAX_CTX];
static atomic_int pt_attn_nmods;
static pthread_mutex_t pt_attn_mods_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads the module into the current context and resolves every kernel. */
static CUresult pt_attn_load(struct pt_attn_module *m) {
  CUresult r = pt_attn_drv->cuModuleLoadData(&m->mod, pt_attn_fatbin);
  if (r != CUDA_SUCCESS) return r;
  for (int i = 0; i < PT_FN_COUNT; ++i) {
    r = pt_attn_drv->cuModuleGetFunction(&m->fn[i], m->mod, pt_attn_fn_names[i]);
    if (r != CUDA_SUCCESS) return r;
  }
  /* The decode kernels use more than the default 48 KB of dynamic smem.
   * Clusters over the portable 8 CTAs (only with pt_attn_plan_cluster_max
   * raised; the plan stays at 8) need the kernel's opt-in: a GPU that refuses
   * it gets such launches refused (the hook then runs the original kernel). */
  m->big_clusters = 1;
  for (int i = PT_FN_BF16_D64; i <= PT_FN_KT_FP16_D192V128; ++i) {
    const int hd = pt_attn_plan_dims[(i - PT_FN_BF16_D64) % PT_ATTN_NDKIND];
    r = pt_attn_drv->cuFuncSetAttribute(m->fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)pt_attn_plan_smem(hd));
    if (r != CUDA_SUCCESS) return r;
    /* Ask for the largest shared-memory carveout so that the 2 (d128, and d80
     * and d96 on its layout) or 3 (d64) CTAs per SM the split plan counts on
     * are resident; a hint only (d256 and d192v128: one CTA). */
    (void)pt_attn_drv->cuFuncSetAttribute(m->fn[i], CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                          100);
    if (pt_attn_drv->cuFuncSetAttribute(m->fn[i], CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                        1) != CUDA_SUCCESS)
      m->big_clusters = 0;
  }
  return CUDA_SUCCESS;
}

/* 1 while the stream is being captured (as far as the driver says). */
static int pt_attn_capturing(CUstream stream) {
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  return pt_attn_drv->cuStreamIsCapturing && pt_attn_drv->cuStreamIsCapturing(stream, &cap) == CUDA_SUCCESS &&
         cap != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Runs load(m), which loads *mod and resolves its kernels, with ctx current
 * (pushed when another context is), and unloads *mod again when it failed. */
static CUresult pt_attn_load_in_ctx(CUcontext ctx, struct pt_attn_module *m,
                                    CUresult (*load)(struct pt_attn_module *), CUmodule *mod) {
  if (!pt_attn_drv->cuModuleLoadData || !pt_attn_drv->cuModuleGetFunction || !pt_attn_drv->cuFuncSetAttribute)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext cur = NULL;
  int pushed = 0;
  if (pt_attn_drv->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != ctx && pt_attn_drv->cuCtxPushCurrent &&
      pt_attn_drv->cuCtxPushCurrent(ctx) == CUDA_SUCCESS)
    pushed = 1;
  const CUresult r = load(m);
  if (r != CUDA_SUCCESS && *mod && pt_attn_drv->cuModuleUnload) {
    pt_attn_drv->cuModuleUnload(*mod);
    *mod = NULL;
  }
  if (pushed) {
    CUcontext popped;
    pt_attn_drv->cuCtxPopCurrent(&popped);
  }
  return r;
}

/* The stream's context (the current one when the driver cannot say). */
static CUresult pt_attn_stream_ctx(CUstream stream, CUcontext *ctx) {
  *ctx = NULL;
  CUresult r = pt_attn_drv->cuStreamGetCtx ? pt_attn_drv->cuStreamGetCtx(stream, ctx)
                                          : pt_attn_drv->cuCtxGetCurrent(ctx);
  if (r != CUDA_SUCCESS) return r;
  return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* The published module entry of ctx, or NULL: a lookup without a lock that
 * never loads anything. */
static struct pt_attn_module *pt_attn_module_published(CUcontext ctx) {
  const int n = atomic_load_explicit(&pt_attn_nmods, memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (pt_attn_mods[i].ctx == ctx) return &pt_attn_mods[i];
  return NULL;
}

/* The module of ctx (the context of stream), loading it on first use. */
static CUresult pt_attn_module_in(CUcontext ctx, CUstream stream, struct pt_attn_module **out) {
  struct pt_attn_module *known = pt_attn_module_published(ctx);
  if (known) {
    *out = known;
    return known->status;
  }

  pthread_mutex_lock(&pt_attn_mods_lock);
  known = pt_attn_module_published(ctx);
  if (known) {
    pthread_mutex_unlock(&pt_attn_mods_lock);
    *out = known;
    return known->status;
  }
  const int n = atomic_load_explicit(&pt_attn_nmods, memory_order_relaxed);
  if (n == PT_ATTN_MAX_CTX) {
    pthread_mutex_unlock(&pt_attn_mods_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct pt_attn_module *m = &pt_attn_mods[n];
  memset(m, 0, sizeof *m);
  m->ctx = ctx;
  /* Load into the stream's context even if another one is current. */
  m->status = pt_attn_load_in_ctx(ctx, m, pt_attn_load, &m->mod);
  /* A failure while the stream is being captured may be the capture's doing
   * (loading is not a stream operation): leave the entry unpublished so the
   * next launch retries. Any other failure is remembered for the context. */
  const int retry = m->status != CUDA_SUCCESS && pt_attn_capturing(stream);
  const CUresult status = m->status;
  if (!retry) atomic_store_explicit(&pt_attn_nmods, n + 1, memory_order_release);
  pthread_mutex_unlock(&pt_attn_mods_lock);
  *out = m;
  return status;
}

/* The module of the stream's context, loading it on first use. */
static CUresult pt_attn_module_for(CUstream stream, struct pt_attn_module **out) {
  if (!pt_attn_drv->cuLaunchKernel || !pt_attn_drv->cuCtxGetCurrent) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext ctx;
  const CUresult r = pt_attn_stream_ctx(stream, &ctx);
  return r != CUDA_SUCCESS ? r : pt_attn_module_in(ctx, stream, out);
}

/* ---- the prefill module --------------------------------------------------- */

#ifndef PT_ATTN_HAVE_PREFILL_FATBIN
/* Built with the decode fatbin only (tests/gpu/checks/attn.sh's test library): no prefill. */
CUresult pt_attn_prefill_functions(CUstream stream, const CUfunction **fns, int *sms) {
  (void)stream; (void)fns; (void)sms;
  return CUDA_ERROR_NOT_SUPPORTED;
}
int pt_attn_prefill_available(void) { return 0; }
#else
extern const unsigned char pt_prefill_fatbin[];

static const char *const pt_pf_names[PT_PF_COUNT] = {
  "pt_attn_prefill_bf16_d64", "pt_attn_prefill_bf16_d128",
  "pt_attn_prefill_fp16_d64", "pt_attn_prefill_fp16_d128",
  "pt_attn_prefill_bf16_d64_skip", "pt_attn_prefill_fp16_d64_skip",
};

/* Compute capability 9.0 (the only one sm_90a code runs on), asked of the
 * context's device: a clear refusal instead of the loader's "no binary". */
static CUresult pt_pf_device_ok(int *sms) {
  const struct pt_driver *d = pt_attn_drv;
  if (!d->cuCtxGetDevice || !d->cuDeviceGetAttribute) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice dev;
  int major = 0, minor = 0;
  CUresult r = d->cuCtxGetDevice(&dev);
  if (r == CUDA_SUCCESS)
    r = d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (r == CUDA_SUCCESS)
    r = d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (r != CUDA_SUCCESS) return r;
  /* Not knowing the SM count only costs speed (one CTA per tile), so its failure is not one. */
  if (d->cuDeviceGetAttribute(sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS || *sms < 0)
    *sms = 0;
  return major == 9 && minor == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

/* Loads the prefill module into the current context (pt_attn_load_in_ctx makes
 * the module's context current) and sets each kernel's dynamic shared memory. */
static CUresult pt_pf_load(struct pt_attn_module *m) {
  CUresult r = pt_pf_device_ok(&m->pf_sms);
  if (r != CUDA_SUCCESS) return r;
  r = pt_attn_drv->cuModuleLoadData(&m->pf_mod, pt_prefill_fatbin);
  if (r != CUDA_SUCCESS) return r;
  for (int i = 0; i < PT_PF_COUNT; ++i) {
    r = pt_attn_drv->cuModuleGetFunction(&m->pf_fn[i], m->pf_mod, pt_pf_names[i]);
    if (r != CUDA_SUCCESS) return r;
    const int d = (i == PT_PF_BF16_D128 || i == PT_PF_FP16_D128) ? 128 : 64;
    r = pt_attn_drv->cuFuncSetAttribute(m->pf_fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)pt_prefill_smem_bytes(d));
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

/* Per device ordinal: 0 not asked yet, 1 compute capability 9.0, 2 another
 * (or the driver did not say). */
#define PT_PF_MAX_DEV 64
static atomic_int pt_pf_dev_ok[PT_PF_MAX_DEV];

int pt_attn_prefill_available(void) {
  const struct pt_driver *d = pt_attn_drv;
  if (!d->cuCtxGetCurrent || !d->cuCtxGetDevice || !d->cuDeviceGetAttribute) return 0;
  CUcontext ctx = NULL;
  CUdevice dev;
  if (d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS) return 0;
  if (dev < 0 || dev >= PT_PF_MAX_DEV) return 0;
  int v = atomic_load_explicit(&pt_pf_dev_ok[dev], memory_order_relaxed);
  if (v == 0) {
    int sms = 0;
    v = pt_pf_device_ok(&sms) == CUDA_SUCCESS ? 1 : 2;
    atomic_store_explicit(&pt_pf_dev_ok[dev], v, memory_order_relaxed);
  }
  if (v != 1) return 0;
  /* A module that failed to load in this context (an old driver, the context table full)
   * is remembered there and never retried: the kernel will not run. */
  const struct pt_attn_module *m = pt_attn_module_published(ctx);
  return !m || atomic_load_explicit(&m->pf_state, memory_order_acquire) != 2;
}

CUresult pt_attn_prefill_functions(CUstream stream, const CUfunction **fns, int *sms) {
  /* A module load (the decode module's too, which comes first) while the
   * stream is captured in global mode may count as an unsafe call, and the
   * application's capture must not be put at risk: the first prefill launch
   * of a context must come outside a capture (torch warms up eagerly before
   * it captures). Until then, refuse without trying. The decode module keeps
   * its older rule (it may load under capture and is retried on failure),
   * which the GPU checks have exercised. */
  CUcontext ctx = NULL;
  const CUresult cr = pt_attn_drv->cuCtxGetCurrent ? pt_attn_stream_ctx(stream, &ctx)
                                                   : CUDA_ERROR_NOT_INITIALIZED;
  struct pt_attn_module *m = cr == CUDA_SUCCESS ? pt_attn_module_published(ctx) : NULL;
  int st = m ? atomic_load_explicit(&m->pf_state, memory_order_acquire) : 0;
  if (st == 0) {
    if (pt_attn_capturing(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!pt_attn_drv->cuLaunchKernel || !pt_attn_drv->cuCtxGetCurrent) return CUDA_ERROR_NOT_INITIALIZED;
    if (cr != CUDA_SUCCESS) return cr;
    const CUresult r = pt_attn_module_in(ctx, stream, &m);
    if (r != CUDA_SUCCESS) return r;
    /* Not under capture (checked above): a failed load is remembered. */
    pthread_mutex_lock(&pt_attn_mods_lock);
    if (atomic_load_explicit(&m->pf_state, memory_order_relaxed) == 0) {
      m->pf_status = pt_attn_load_in_ctx(m->ctx, m, pt_pf_load, &m->pf_mod);
      atomic_store_explicit(&m->pf_state, m->pf_status == CUDA_SUCCESS ? 1 : 2, memory_order_release);
    }
    st = atomic_load_explicit(&m->pf_state, memory_order_relaxed);
    pthread_mutex_unlock(&pt_attn_mods_lock);
  }
  if (st != 1) return m->pf_status;
  *fns = m->pf_fn;
  if (sms) *sms = m->pf_sms;
  return CUDA_SUCCESS;
}
#endif /* PT_ATTN_HAVE_PREFILL_FATBIN */

int pt_attn_workspace_prepare(void *ws, size_t bytes, void *stream) {
  struct pt_attn_module *m;
  CUresult r = pt_attn_module_for((CUstream)stream, &m);
  if (r != CUDA_SUCCESS) return r;
  if (!ws || bytes == 0) return CUDA_SUCCESS;
  if (!pt_attn_drv->cuMemsetD8Async) return CUDA_ERROR_NOT_INITIALIZED;
  return pt_attn_drv->cuMemsetD8Async((CUdeviceptr)(uintptr_t)ws, 0, bytes, (CUstream)stream);
}

int pt_attn_decode_launch(const struct pt_attn_desc *d, void *workspace, size_t ws_bytes,
                          void *stream) {
  if (pt_attn_decode_supported(d)) return CUDA_ERROR_NOT_SUPPORTED;
  struct pt_attn_plan pl;
  pt_attn_plan_make(d, &pl);
  if (pl.ws_bytes > 0 && (!workspace || ws_bytes < pl.ws_bytes || ((uintptr_t)workspace & 15u)))
    return CUDA_ERROR_INVALID_VALUE;

  struct pt_attn_module *m;
  CUresult r = pt_attn_module_for((CUstream)stream, &m);
  if (r != CUDA_SUCCESS) return r;

  struct pt_attn_kparams p;
  memset(&p, 0, sizeof p);
  p.q = d->q;
  p.k = d->k;
  p.v = d->v;
  p.o = d->o;
  p.lse = d->lse;
  p.ws = pl.ws_bytes ? (unsigned char *)workspace : NULL;
  p.q_bs = d->q_batch_stride;
  p.q_rs = d->q_row_stride;
  p.q_hs = d->q_head_stride;
  p.k_bs = d->k_batch_stride;
  p.k_rs = d->k_row_stride;
  p.k_hs = d->k_head_stride;
  p.v_bs = d->v_batch_stride;
  p.v_rs = d->v_row_stride;
  p.v_hs = d->v_head_stride;
  p.o_bs = d->o_batch_stride;
  p.o_rs = d->o_row_stride;
  p.o_hs = d->o_head_stride;
  p.ws_ml_off = pl.ws_ml_off;
  p.ws_o_off = pl.ws_o_off;
  p.b = d->b;
  p.h = d->h;
  p.h_k = d->h_k;
  p.sq = d->seqlen_q;
  p.sk = d->seqlen_k;
  p.group = pl.group;
  p.rows = pl.rows;
  p.nsplit = pl.nsplit;
  p.tiles_per_split = pl.tiles_per_split;
  p.causal = d->causal != 0;
  p.scale_log2 = d->scale * 1.4426950408889634f;
  p.cluster = pl.cluster;
  p.bias = d->bias;
  p.bias_bs = d->bias_batch_stride;
  p.bias_hs = d->bias_head_stride;
  p.bias_rs = d->bias_row_stride;
  p.bias_rows = pl.bias_rows;

  const int fi = (d->dtype == PT_DTYPE_BF16 ? PT_FN_BF16_D64 : PT_FN_FP16_D64) + pl.dkind +
                 (pl.rows <= 8 ? PT_FN_KT_BF16_D64 - PT_FN_BF16_D64 : 0);
  void *args[1] = {&p};
  CUlaunchAttribute at[2];
  unsigned nat = 0;
  memset(at, 0, sizeof at);
  if (pl.cluster > 1) {
    /* The splits of one (batch, KV head) are one cluster along x. */
    if (!pt_attn_drv->cuLaunchKernelEx ||
        (pl.cluster > PT_ATTN_PORTABLE_CLUSTER && !m->big_clusters)) {
      __atomic_store_n(&pt_attn_plan_clusters_off, 1, __ATOMIC_RELAXED);
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    at[nat].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at[nat].value.clusterDim.x = (unsigned)pl.cluster;
    at[nat].value.clusterDim.y = 1;
    at[nat].value.clusterDim.z = 1;
    nat++;
  }
  if (__atomic_load_n(&pt_attn_plan_pdl, __ATOMIC_RELAXED) && pt_attn_drv->cuLaunchKernelEx) {
    at[nat].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at[nat].value.programmaticStreamSerializationAllowed = 1;
    nat++;
    p.pdl = 1;
  }
  if (nat) {
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = (unsigned)pl.nsplit;
    cfg.gridDimY = (unsigned)d->h_k;
    cfg.gridDimZ = (unsigned)d->b;
    cfg.blockDimX = PT_ATTN_THREADS;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = pl.smem_bytes;
    cfg.hStream = (CUstream)stream;
    cfg.attrs = at;
    cfg.numAttrs = nat;
    r = pt_attn_drv->cuLaunchKernelEx(&cfg, m->fn[fi], args, NULL);
    /* A GPU (or a MIG slice / MPS share) that cannot place the cluster:
     * plan without clusters from now on; this launch reports the error and
     * its caller runs the original kernel once. */
    if (pl.cluster > 1 && (r == CUDA_ERROR_INVALID_CLUSTER_SIZE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ||
                           r == CUDA_ERROR_NOT_SUPPORTED))
      __atomic_store_n(&pt_attn_plan_clusters_off, 1, __ATOMIC_RELAXED);
    return r;
  }
  return pt_attn_drv->cuLaunchKernel(m->fn[fi], (unsigned)pl.nsplit, (unsigned)d->h_k, (unsigned)d->b,
                                     PT_ATTN_THREADS, 1, 1, pl.smem_bytes, (CUstream)stream, args,
                                     NULL);
}

int pt_attn_compare_launch(const struct pt_attn_desc *ref, const void *test_o,
                           const float *test_lse, float *result, void *stream) {
  if (!ref || !ref->o || !test_o || !result) return CUDA_ERROR_INVALID_VALUE;
  if (ref->dtype != PT_DTYPE_FP16 && ref->dtype != PT_DTYPE_BF16) return CUDA_ERROR_INVALID_VALUE;
  if (ref->b < 1 || ref->h < 1 || ref->seqlen_q < 1 || pt_attn_v_dim(ref) < 1 ||
      (ref->o_dim_stride != 0 && ref->o_dim_stride != 1))
    return CUDA_ERROR_INVALID_VALUE;
  struct pt_attn_module *m;
  CUresult r = pt_attn_module_for((CUstream)stream, &m);
  if (r != CUDA_SUCCESS) return r;

  struct pt_attn_cmp_kparams p;
  memset(&p, 0, sizeof p);
  p.ref_o = ref->o;
  p.test_o = test_o;
  p.ref_lse = test_lse ? ref->lse : NULL;
  p.test_lse = ref->lse ? test_lse : NULL;
  p.result = result;
  p.o_bs = ref->o_batch_stride;
  p.o_rs = ref->o_row_stride;
  p.o_hs = ref->o_head_stride;
  p.b = ref->b;
  p.h = ref->h;
  p.sq = ref->seqlen_q;
  p.d = pt_attn_v_dim(ref); /* O's head size */
  void *args[1] = {&p};
  const int fi = ref->dtype == PT_DTYPE_BF16 ? PT_FN_CMP_BF16 : PT_FN_CMP_FP16;
  return pt_attn_drv->cuLaunchKernel(m->fn[fi], 1, 1, 1, PT_ATTN_CMP_THREADS, 1, 1, 0,
                                     (CUstream)stream, args, NULL);
}
int pt_attn_fault_launch(const struct pt_attn_desc *d, float factor, void *stream) {
  if (!d || !d->o) return CUDA_ERROR_INVALID_VALUE;
  if (d->dtype != PT_DTYPE_FP16 && d->dtype != PT_DTYPE_BF16) return CUDA_ERROR_INVALID_VALUE;
  if (d->b < 1 || d->h < 1 || d->seqlen_q < 1 || pt_attn_v_dim(d) < 1 ||
      (d->o_dim_stride != 0 && d->o_dim_stride != 1))
    return CUDA_ERROR_INVALID_VALUE;
  struct pt_attn_module *m;
  CUresult r = pt_attn_module_for((CUstream)stream, &m);
  if (r != CUDA_SUCCESS) return r;

  struct pt_attn_fault_kparams p;
  memset(&p, 0, sizeof p);
  p.o = d->o;
  p.o_bs = d->o_batch_stride;
  p.o_rs = d->o_row_stride;
  p.o_hs = d->o_head_stride;
  p.b = d->b;
  p.h = d->h;
  p.sq = d->seqlen_q;
  p.d = pt_attn_v_dim(d); /* O's head size */
  p.factor = factor;
  void *args[1] = {&p};
  const int fi = d->dtype == PT_DTYPE_BF16 ? PT_FN_FAULT_BF16 : PT_FN_FAULT_FP16;
  /* One CTA per query row (b * seqlen_q <= 65535 * 16: within gridDim.x). */
  return pt_attn_drv->cuLaunchKernel(m->fn[fi], (unsigned)(d->b * d->seqlen_q), 1, 1,
                                     PT_ATTN_FAULT_THREADS, 1, 1, 0, (CUstream)stream, args, NULL);
}
#endif /* PT_ATTN_HAVE_FATBIN */
