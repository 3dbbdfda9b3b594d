/* CPU tests of kernels/attn_launch.c against a fake driver table: which
 * driver call a plan leads to (cuLaunchKernel, or cuLaunchKernelEx with the
 * cluster dimension), the grid, and the switch to the workspace path after a
 * GPU refuses a cluster launch; which decode kernel runs (by rows per KV
 * head); the planted-fault launch (PONYTAIL_TEST_FAULT) and what it is
 * handed. Built only when nvcc built the fatbin (the launcher is a stub
 * otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/attn.h"
#include "kernels/attn_kparams.h"
#include "kernels/attn_plan.h"
#include "common/driver.h"
#include "tests/unit/kernels/hf_desc.h"

/* The driver table the launcher is handed (pt_attn_set_driver), here filled
 * with fakes: no shim object is linked. */
static struct pt_driver fk_drv;

#define CTX ((CUcontext)(uintptr_t)0xC0)
#define STREAM ((CUstream)(uintptr_t)0x5A)

static struct {
  int launches, launches_ex, loads;
  unsigned grid[3], cluster_x;
  unsigned num_attrs;
  int pdl; /* the last cuLaunchKernelEx asked for programmatic dependent launch */
  CUresult ex_rc;
  struct pt_attn_kparams last;
  /* the functions looked up, by handle (0x1000 + index), and the last launched */
  const char *fn_names[64];
  int fn_smem[64]; /* each function's dynamic shared memory attribute */
  int nfn;
  const char *last_fn;
  unsigned block_x, smem;
  CUstream stream;
  struct pt_attn_fault_kparams fault;
  struct pt_attn_cmp_kparams cmp;
} fk;

static CUresult fk_ctx_get(CUcontext *c) { *c = CTX; return CUDA_SUCCESS; }
static CUresult fk_stream_ctx(CUstream s, CUcontext *c) { (void)s; *c = CTX; return CUDA_SUCCESS; }
static CUresult fk_load(CUmodule *m, const void *image) {
  (void)image;
  fk.loads++;
  *m = (CUmodule)(uintptr_t)0x400;
  return CUDA_SUCCESS;
}
static CUresult fk_get_fn(CUfunction *f, CUmodule m, const char *name) {
  (void)m;
  assert_true(fk.nfn < 64);
  fk.fn_names[fk.nfn] = name; /* the launcher's own string literals */
  *f = (CUfunction)(uintptr_t)(0x1000 + fk.nfn++);
  return CUDA_SUCCESS;
}
static const char *fk_fn_name(CUfunction f) {
  uintptr_t i = (uintptr_t)f - 0x1000;
  assert_true(i < (uintptr_t)fk.nfn);
  return fk.fn_names[i];
}
static CUresult fk_set_attr(CUfunction f, CUfunction_attribute a, int v) {
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    const uintptr_t i = (uintptr_t)f - 0x1000;
    assert_true(i < (uintptr_t)fk.nfn);
    fk.fn_smem[i] = v;
  }
  return CUDA_SUCCESS;
}
/* The dynamic shared memory attribute the loader set on the function of this name (-1: none). */
static int fk_smem_of(const char *name) {
  for (int i = 0; i < fk.nfn; i++)
    if (!strcmp(fk.fn_names[i], name)) return fk.fn_smem[i];
  return -1;
}
static CUresult fk_capturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
static CUresult fk_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                          void **extra) {
  (void)by; (void)bz; (void)extra;
  fk.launches++;
  fk.grid[0] = gx, fk.grid[1] = gy, fk.grid[2] = gz;
  fk.last_fn = fk_fn_name(f);
  fk.block_x = bx;
  fk.smem = smem;
  fk.stream = s;
  /* each kernel's parameter block has its own type */
  if (!strncmp(fk.last_fn, "pt_attn_fault_", 14)) memcpy(&fk.fault, params[0], sizeof fk.fault);
  else if (!strncmp(fk.last_fn, "pt_attn_compare_", 16)) memcpy(&fk.cmp, params[0], sizeof fk.cmp);
  else memcpy(&fk.last, params[0], sizeof fk.last);
  return CUDA_SUCCESS;
}
static CUresult fk_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  (void)extra;
  fk.launches_ex++;
  fk.last_fn = fk_fn_name(f);
  fk.grid[0] = c->gridDimX, fk.grid[1] = c->gridDimY, fk.grid[2] = c->gridDimZ;
  fk.num_attrs = c->numAttrs;
  fk.smem = c->sharedMemBytes;
  fk.cluster_x = 0;
  fk.pdl = 0;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      fk.pdl = c->attrs[i].value.programmaticStreamSerializationAllowed;
    else if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      fk.cluster_x = c->attrs[i].value.clusterDim.x;
      assert_int_equal(c->attrs[i].value.clusterDim.y, 1);
      assert_int_equal(c->attrs[i].value.clusterDim.z, 1);
    }
  memcpy(&fk.last, params[0], sizeof fk.last);
  return fk.ex_rc;
}

static int setup(void **st) {
  (void)st;
  memset(&fk_drv, 0, sizeof fk_drv);
  fk_drv.cuCtxGetCurrent = fk_ctx_get;
  fk_drv.cuStreamGetCtx = fk_stream_ctx;
  fk_drv.cuModuleLoadData = fk_load;
  fk_drv.cuModuleGetFunction = fk_get_fn;
  fk_drv.cuFuncSetAttribute = fk_set_attr;
  fk_drv.cuStreamIsCapturing = fk_capturing;
  fk_drv.cuLaunchKernel = fk_launch;
  fk_drv.cuLaunchKernelEx = fk_launch_ex;
  pt_attn_set_driver(&fk_drv);
  return 0;
}

/* Before the shim hands it a table (or with none) the launcher calls nothing
 * and answers "not initialized". */
static void test_no_driver(void **st) {
  (void)st;
  pt_attn_set_driver(NULL);
  struct pt_attn_desc one = hf_desc(32, 32, 8, 4096, 128);
  assert_int_equal(pt_attn_decode_launch(&one, NULL, 0, STREAM), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.loads + fk.launches + fk.launches_ex, 0);
}

static void test_launch_paths(void **st) {
  (void)st;
  /* One split: a plain launch, no workspace. */
  struct pt_attn_desc one = hf_desc(32, 32, 8, 4096, 128);
  assert_int_equal(pt_attn_decode_workspace_bytes(&one), 0);
  assert_int_equal(pt_attn_decode_launch(&one, NULL, 0, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.loads, 1);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.launches_ex, 0);
  assert_int_equal(fk.grid[0], 1);
  assert_int_equal(fk.grid[1], 8);
  assert_int_equal(fk.grid[2], 32);
  assert_int_equal(fk.last.cluster, 1);

  /* Two splits merged in a cluster: cuLaunchKernelEx, cluster of 2 along x,
   * no workspace. */
  struct pt_attn_desc two = hf_desc(8, 32, 8, 4096, 128);
  assert_int_equal(pt_attn_decode_workspace_bytes(&two), 0);
  assert_int_equal(pt_attn_decode_launch(&two, NULL, 0, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.launches_ex, 1);
  assert_int_equal(fk.num_attrs, 1);
  assert_int_equal(fk.cluster_x, 2);
  assert_int_equal(fk.grid[0], 2);
  assert_int_equal(fk.last.nsplit, 2);
  assert_int_equal(fk.last.cluster, 2);
  assert_null(fk.last.ws);
  assert_int_equal(fk.loads, 1); /* loaded once per context */

  /* The GPU refuses the cluster: the error comes back, and from then on the
   * same shape plans the workspace path (4 splits), launched plainly. */
  fk.ex_rc = CUDA_ERROR_INVALID_CLUSTER_SIZE;
  assert_int_equal(pt_attn_decode_launch(&two, NULL, 0, STREAM), CUDA_ERROR_INVALID_CLUSTER_SIZE);
  assert_int_equal(pt_attn_plan_clusters_off, 1);
  const size_t need = pt_attn_decode_workspace_bytes(&two);
  assert_true(need > PT_ATTN_WS_COUNTER_BYTES);
  /* a launch still holding the cluster plan's (empty) workspace is refused */
  assert_int_equal(pt_attn_decode_launch(&two, NULL, 0, STREAM), CUDA_ERROR_INVALID_VALUE);
  void *ws = (void *)(uintptr_t)0x900000;
  const int ex_before = fk.launches_ex;
  assert_int_equal(pt_attn_decode_launch(&two, ws, need, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.launches_ex, ex_before);
  assert_int_equal(fk.launches, 2);
  assert_int_equal(fk.grid[0], 4);
  assert_int_equal(fk.last.cluster, 1);
  assert_ptr_equal(fk.last.ws, ws);
}

/* PONYTAIL_TEST_FAULT's kernel: one CTA per query row over the real O with
 * its strides, the factor passed through, the dtype's variant, the caller's
 * stream; bad descriptors are refused before any driver call. */
static void test_fault_launch(void **st) {
  (void)st;
  struct pt_attn_desc d = hf_desc(8, 32, 8, 4096, 128);
  d.seqlen_q = 2;
  d.o_row_stride = 32 * 128;
  d.o_batch_stride = 2 * 32 * 128 + 64; /* padded batch: strides travel, not shapes */
  /* fk and the module table carry over from the tests before (loaded once per context) */
  const int launches = fk.launches, loads = fk.loads;
  assert_int_equal(pt_attn_fault_launch(&d, -1.0f, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.launches, launches + 1);
  assert_string_equal(fk.last_fn, "pt_attn_fault_bf16");
  assert_int_equal(fk.grid[0], 16);
  assert_int_equal(fk.grid[1], 1);
  assert_int_equal(fk.grid[2], 1);
  assert_int_equal(fk.block_x, PT_ATTN_FAULT_THREADS);
  assert_int_equal(fk.smem, 0);
  assert_ptr_equal(fk.stream, STREAM);
  assert_ptr_equal(fk.fault.o, FAKE(0x40000));
  assert_int_equal(fk.fault.o_bs, 2 * 32 * 128 + 64);
  assert_int_equal(fk.fault.o_rs, 32 * 128);
  assert_int_equal(fk.fault.o_hs, 128);
  assert_int_equal(fk.fault.b, 8);
  assert_int_equal(fk.fault.h, 32);
  assert_int_equal(fk.fault.sq, 2);
  assert_int_equal(fk.fault.d, 128);
  assert_true(fk.fault.factor == -1.0f);
  d.dtype = PT_DTYPE_FP16;
  assert_int_equal(pt_attn_fault_launch(&d, 0.95f, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_fault_fp16");
  assert_true(fk.fault.factor == 0.95f);
  assert_int_equal(fk.loads, loads < 1 ? 1 : loads);
  /* MLA: O is v's width (128), not q/k's (192) */
  struct pt_attn_desc m = mla_desc(8, 32, 8, 4096);
  assert_int_equal(pt_attn_fault_launch(&m, 0.5f, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.fault.d, 128);
  assert_int_equal(fk.fault.o_hs, 128);
  assert_int_equal(fk.fault.o_rs, 32 * 128);
  assert_int_equal(fk.launches, launches + 3);
  /* refused: nothing launched */
  struct pt_attn_desc bad = d;
  bad.o = NULL;
  assert_int_equal(pt_attn_fault_launch(&bad, 0.5f, STREAM), CUDA_ERROR_INVALID_VALUE);
  bad = d;
  bad.dtype = 7;
  assert_int_equal(pt_attn_fault_launch(&bad, 0.5f, STREAM), CUDA_ERROR_INVALID_VALUE);
  bad = d;
  bad.o_dim_stride = 2;
  assert_int_equal(pt_attn_fault_launch(&bad, 0.5f, STREAM), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(pt_attn_fault_launch(NULL, 0.5f, STREAM), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.launches, launches + 3);
  /* without a driver table: not initialized, no call */
  pt_attn_set_driver(NULL);
  assert_int_equal(pt_attn_fault_launch(&d, 0.5f, STREAM), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.launches, launches + 3);
}

/* Verify mode's compare kernel walks O at its own head size: v's under MLA. */
static void test_compare_launch(void **st) {
  (void)st;
  struct pt_attn_desc d = hf_desc(8, 32, 8, 4096, 128);
  void *test_o = FAKE(0xA0000);
  float *res = (float *)FAKE(0xB0000);
  assert_int_equal(pt_attn_compare_launch(&d, test_o, NULL, res, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_compare_bf16");
  assert_int_equal(fk.cmp.d, 128);
  struct pt_attn_desc m = mla_desc(8, 32, 8, 4096);
  m.dtype = PT_DTYPE_FP16;
  assert_int_equal(pt_attn_compare_launch(&m, test_o, NULL, res, STREAM), CUDA_SUCCESS);
  assert_string_equal(fk.last_fn, "pt_attn_compare_fp16");
  assert_int_equal(fk.cmp.d, 128);
  assert_int_equal(fk.cmp.o_hs, 128);
  assert_int_equal(fk.cmp.o_rs, 32 * 128);
  assert_int_equal(fk.cmp.b, 8);
  assert_int_equal(fk.cmp.h, 32);
  assert_ptr_equal(fk.cmp.test_o, test_o);
  assert_ptr_equal(fk.cmp.result, res);
}

/* pt_attn_plan_pdl (a timing experiment): every decode launch goes through cuLaunchKernelEx
 * with the programmatic-serialization attribute, next to the cluster attribute when there is
 * one; off again, a one-split launch is a plain cuLaunchKernel. */
static void test_pdl_launch(void **st) {
  (void)st;
  pt_attn_plan_clusters_off = 0;
  fk.ex_rc = CUDA_SUCCESS;
  pt_attn_plan_pdl = 1;
  struct pt_attn_desc one = hf_desc(32, 32, 8, 4096, 128);
  int plain = fk.launches, ex = fk.launches_ex;
  assert_int_equal(pt_attn_decode_launch(&one, NULL, 0, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.launches, plain);
  assert_int_equal(fk.launches_ex, ex + 1);
  assert_int_equal(fk.num_attrs, 1);
  assert_int_equal(fk.pdl, 1);
  assert_int_equal(fk.last.pdl, 1); /* the kernel waits for the previous grid */
  assert_int_equal(fk.cluster_x, 0);
  assert_int_equal(fk.grid[0], 1);
  struct pt_attn_desc two = hf_desc(8, 32, 8, 4096, 128);
  assert_int_equal(pt_attn_decode_launch(&two, NULL, 0, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.num_attrs, 2);
  assert_int_equal(fk.pdl, 1);
  assert_int_equal(fk.cluster_x, 2);
  pt_attn_plan_pdl = 0;
  ex = fk.launches_ex;
  assert_int_equal(pt_attn_decode_launch(&one, NULL, 0, STREAM), CUDA_SUCCESS);
  assert_int_equal(fk.launches_ex, ex);
  assert_int_equal(fk.launches, plain + 1);
  assert_int_equal(fk.last.pdl, 0);
}

/* Which decode kernel a launch runs: the keys-as-M kernels (_kt) for at most 8 rows per KV head
 * (seqlen_q x h / h_k), the rows-as-M ones past that, by dtype and head size; the rows and the
 * plan reach the kernel's parameters either way (kernels/attn_decode.cu: each kernel holds only
 * its loop). One split, cluster and workspace plans alike. */
static void test_kernel_by_rows(void **st) {
  (void)st;
  pt_attn_plan_clusters_off = 0;
  fk.ex_rc = CUDA_SUCCESS;
  static const struct {
    int b, h, h_k, sq, s, d, fp16, rows;
    const char *fn;
  } cases[] = {
      /* d 192: MLA (q/k 192, v 128; mla_desc), DeepSeek-V3's 128 heads of their own and GQA */
      {1, 128, 128, 1, 4096, 192, 0, 1, "pt_attn_decode_bf16_d192v128_kt"},  /* one split */
      {8, 128, 128, 1, 4096, 192, 1, 1, "pt_attn_decode_fp16_d192v128_kt"},
      {1, 16, 16, 1, 32768, 192, 0, 1, "pt_attn_decode_bf16_d192v128_kt"},   /* cluster */
      {1, 72, 8, 1, 32768, 192, 0, 9, "pt_attn_decode_bf16_d192v128"},       /* workspace */
      {2, 32, 2, 1, 1000, 192, 1, 16, "pt_attn_decode_fp16_d192v128"},
      {4, 16, 2, 2, 4096, 192, 1, 16, "pt_attn_decode_fp16_d192v128"},       /* 2 positions x 8 */
      {4, 64, 64, 8, 4096, 192, 0, 8, "pt_attn_decode_bf16_d192v128_kt"},    /* 8 positions */
      {32, 32, 32, 1, 4096, 128, 0, 1, "pt_attn_decode_bf16_d128_kt"}, /* one split */
      {8, 64, 8, 1, 4096, 128, 0, 8, "pt_attn_decode_bf16_d128_kt"},   /* cluster */
      {1, 72, 8, 1, 32768, 128, 0, 9, "pt_attn_decode_bf16_d128"},     /* 9 rows, workspace */
      {8, 128, 8, 1, 4096, 64, 1, 16, "pt_attn_decode_fp16_d64"},
      {8, 32, 8, 2, 4096, 256, 1, 8, "pt_attn_decode_fp16_d256_kt"},   /* 2 positions x 4 heads */
      {8, 32, 8, 4, 4096, 64, 0, 16, "pt_attn_decode_bf16_d64"},       /* 4 positions x 4 heads */
      /* Phi (80) and Phi-3 (96): their own padded kernels, both loops, both dtypes */
      {32, 32, 32, 1, 4096, 80, 0, 1, "pt_attn_decode_bf16_d80_kt"},
      {8, 64, 8, 1, 4096, 96, 1, 8, "pt_attn_decode_fp16_d96_kt"},
      {1, 72, 8, 1, 32768, 80, 1, 9, "pt_attn_decode_fp16_d80"},
      {8, 128, 8, 1, 4096, 96, 0, 16, "pt_attn_decode_bf16_d96"},
      {8, 32, 8, 2, 4096, 96, 0, 8, "pt_attn_decode_bf16_d96_kt"},
      {2, 32, 2, 1, 1000, 80, 1, 16, "pt_attn_decode_fp16_d80"},
  };
  void *ws = (void *)(uintptr_t)0x900000;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct pt_attn_desc d = cases[i].d == 192
                                ? mla_desc(cases[i].b, cases[i].h, cases[i].h_k, cases[i].s)
                                : hf_desc(cases[i].b, cases[i].h, cases[i].h_k, cases[i].s, cases[i].d);
    d.seqlen_q = cases[i].sq;
    d.q_batch_stride = (int64_t)cases[i].sq * cases[i].h * cases[i].d;
    d.o_batch_stride = (int64_t)cases[i].sq * cases[i].h * pt_attn_v_dim(&d);
    if (cases[i].fp16) d.dtype = PT_DTYPE_FP16;
    assert_null(pt_attn_decode_supported(&d));
    const size_t need = pt_attn_decode_workspace_bytes(&d);
    fk.last_fn = NULL;
    assert_int_equal(pt_attn_decode_launch(&d, need ? ws : NULL, need, STREAM), CUDA_SUCCESS);
    assert_non_null(fk.last_fn);
    assert_string_equal(fk.last_fn, cases[i].fn);
    assert_int_equal(fk.last.rows, cases[i].rows);
    /* the launch asks for the plan's shared memory, within what the kernel was given */
    assert_true(fk.smem <= (unsigned)fk_smem_of(cases[i].fn));
    /* V and O travel with their own strides (MLA: 128 wide, K and Q 192) */
    assert_int_equal(fk.last.v_rs, d.v_row_stride);
    assert_int_equal(fk.last.v_hs, d.v_head_stride);
    assert_int_equal(fk.last.v_bs, d.v_batch_stride);
    assert_int_equal(fk.last.k_hs, d.k_head_stride);
    assert_int_equal(fk.last.o_hs, d.o_head_stride);
    assert_int_equal(fk.last.o_bs, d.o_batch_stride);
    if (need) { /* the O partials end inside the workspace at v's width */
      assert_ptr_equal(fk.last.ws, ws);
      const int64_t parts = (int64_t)cases[i].b * cases[i].h_k * fk.last.nsplit * fk.last.rows;
      assert_int_equal((int64_t)need, fk.last.ws_o_off + parts * pt_attn_v_dim(&d) * 4);
    }
  }
  /* The padded kernels are given d = 128's shared memory (their tiles are 128 wide). */
  static const char *const padded[] = {"pt_attn_decode_bf16_d80", "pt_attn_decode_fp16_d96_kt"};
  for (size_t i = 0; i < sizeof padded / sizeof *padded; i++)
    assert_int_equal(fk_smem_of(padded[i]), (int)pt_attn_plan_smem(128));
  assert_int_equal(fk_smem_of("pt_attn_decode_bf16_d64"), (int)pt_attn_plan_smem(64));
  assert_int_equal(fk_smem_of("pt_attn_decode_fp16_d256_kt"), (int)pt_attn_plan_smem(256));
  /* MLA's kernels: d = 256's (tiles 256 wide) */
  static const char *const mla[] = {"pt_attn_decode_bf16_d192v128", "pt_attn_decode_fp16_d192v128",
                                    "pt_attn_decode_bf16_d192v128_kt", "pt_attn_decode_fp16_d192v128_kt"};
  for (size_t i = 0; i < sizeof mla / sizeof *mla; i++)
    assert_int_equal(fk_smem_of(mla[i]), (int)pt_attn_plan_smem(256));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_no_driver),
    cmocka_unit_test_setup(test_launch_paths, setup),
    cmocka_unit_test_setup(test_fault_launch, setup),
    cmocka_unit_test_setup(test_compare_launch, setup),
    cmocka_unit_test_setup(test_pdl_launch, setup),
    cmocka_unit_test_setup(test_kernel_by_rows, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
