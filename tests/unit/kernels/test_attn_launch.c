/* CPU tests of kernels/attn_launch.c against a fake driver table: which
 * driver call a plan leads to (cuLaunchKernel, or cuLaunchKernelEx with the
 * cluster dimension), the grid, and the switch to the workspace path after a
 * GPU refuses a cluster launch. Built only when nvcc built the fatbin (the
 * launcher is a stub otherwise). */
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
  CUresult ex_rc;
  struct pt_attn_kparams last;
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
  *f = (CUfunction)(uintptr_t)(0x1000 + strlen(name));
  return CUDA_SUCCESS;
}
static CUresult fk_set_attr(CUfunction f, CUfunction_attribute a, int v) {
  (void)f; (void)a; (void)v;
  return CUDA_SUCCESS;
}
static CUresult fk_capturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
static CUresult fk_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                          void **extra) {
  (void)f; (void)bx; (void)by; (void)bz; (void)smem; (void)s; (void)extra;
  fk.launches++;
  fk.grid[0] = gx, fk.grid[1] = gy, fk.grid[2] = gz;
  memcpy(&fk.last, params[0], sizeof fk.last);
  return CUDA_SUCCESS;
}
static CUresult fk_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  (void)f; (void)extra;
  fk.launches_ex++;
  fk.grid[0] = c->gridDimX, fk.grid[1] = c->gridDimY, fk.grid[2] = c->gridDimZ;
  fk.num_attrs = c->numAttrs;
  fk.cluster_x = 0;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
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

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_no_driver),
    cmocka_unit_test_setup(test_launch_paths, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
