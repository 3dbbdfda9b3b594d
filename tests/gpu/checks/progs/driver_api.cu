/* The driver API alone (no runtime call): cuInit, the primary context,
 * cuMemAlloc_v2 of 4 KiB / 1 MiB / 64 MiB (the shim pools from 1 MiB by
 * default; 4 KiB passes through), cuMemAllocAsync / cuMemFreeAsync on a
 * non-blocking stream (reused across iterations), cuMemsetD32(Async), a
 * kernel from PTX through cuModuleLoadData + cuLaunchKernel, cuMemcpyDtoH,
 * cuMemGetInfo before and after. Every result is checked on the host.
 * Build: nvcc -arch=sm_90 driver_api.cu -lcuda */
#include <cuda.h>

#include "prog_common.h"

#define CKD(call)                                                                                     \
  do {                                                                                                \
    CUresult r_ = (call);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                         \
      const char *n_ = NULL, *s_ = NULL;                                                              \
      cuGetErrorName(r_, &n_);                                                                        \
      cuGetErrorString(r_, &s_);                                                                      \
      fprintf(stderr, "%s:%d: %s failed: %s (%s, %d)\n", __FILE__, __LINE__, #call, n_ ? n_ : "?", \
              s_ ? s_ : "?", (int)r_);                                                                \
      exit(2);                                                                                        \
    }                                                                                                 \
  } while (0)

/* p[i] = p[i] * 3 + (i ^ salt), from
 *   extern "C" __global__ void mix(unsigned *p, unsigned n, unsigned salt) */
static const char kPtx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry mix(\n"
    "  .param .u64 mix_param_0,\n"
    "  .param .u32 mix_param_1,\n"
    "  .param .u32 mix_param_2\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<10>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [mix_param_0];\n"
    "  ld.param.u32 %r3, [mix_param_1];\n"
    "  ld.param.u32 %r2, [mix_param_2];\n"
    "  mov.u32 %r4, %ctaid.x;\n"
    "  mov.u32 %r5, %ntid.x;\n"
    "  mov.u32 %r6, %tid.x;\n"
    "  mad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "  setp.ge.u32 %p1, %r1, %r3;\n"
    "  @%p1 bra $L__BB0_2;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r1, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n"
    "  xor.b32 %r8, %r1, %r2;\n"
    "  mad.lo.s32 %r9, %r7, 3, %r8;\n"
    "  st.global.u32 [%rd4], %r9;\n"
    "$L__BB0_2:\n"
    "  ret;\n"
    "}\n";

static CUfunction g_mix;

static void launch_mix(CUdeviceptr d, unsigned n, unsigned salt, CUstream s) {
  void *args[] = {&d, &n, &salt};
  CKD(cuLaunchKernel(g_mix, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void verify(const unsigned *h, unsigned n, unsigned v, unsigned salt, const char *what) {
  for (unsigned j = 0; j < n; j++) {
    unsigned want = v * 3u + (j ^ salt);
    if (h[j] != want) FAIL("%s: element %u = 0x%08x, expected 0x%08x", what, j, h[j], want);
  }
}

int main(void) {
  CKD(cuInit(0));
  CUdevice dev;
  CKD(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CKD(cuDevicePrimaryCtxRetain(&ctx, dev));
  CKD(cuCtxSetCurrent(ctx));
  size_t free0 = 0, total0 = 0;
  CKD(cuMemGetInfo(&free0, &total0));

  CUmodule mod;
  CKD(cuModuleLoadData(&mod, kPtx));
  CKD(cuModuleGetFunction(&g_mix, mod, "mix"));

  uint64_t h = FNV_INIT;
  const size_t max_bytes = (size_t)64 << 20;
  unsigned *host = (unsigned *)xmalloc(max_bytes);

  /* ---- synchronous allocations, kept live together ---- */
  const size_t sizes[3] = {4096, (size_t)1 << 20, (size_t)64 << 20};
  CUdeviceptr d[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    CKD(cuMemAlloc(&d[i], sizes[i]));
    if (!d[i]) FAIL("cuMemAlloc returned 0");
  }
  for (int i = 0; i < 3; i++) {
    unsigned n = (unsigned)(sizes[i] / 4), v = 0x01010101u * (unsigned)(i + 1), salt = 0x9E3779B9u * (unsigned)(i + 1);
    CKD(cuMemsetD32(d[i], v, n));
    launch_mix(d[i], n, salt, NULL);
    CKD(cuCtxSynchronize());
    memset(host, 0, sizes[i]);
    CKD(cuMemcpyDtoH(host, d[i], sizes[i]));
    verify(host, n, v, salt, "cuMemAlloc buffer");
    h = fnv1a(h, host, sizes[i]);
  }
  size_t free1 = 0, total1 = 0;
  CKD(cuMemGetInfo(&free1, &total1));

  /* ---- stream-ordered allocations on a non-blocking stream ---- */
  CUstream s;
  CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const size_t asizes[3] = {(size_t)256 << 10, (size_t)8 << 20, ((size_t)3 << 20) + 123 * 4};
  for (int it = 0; it < 8; it++) {
    for (int k = 0; k < 3; k++) {
      CUdeviceptr x = 0;
      unsigned n = (unsigned)(asizes[k] / 4), v = 0x00FF00FFu ^ (unsigned)(it * 3 + k), salt = (unsigned)(it * 7919 + k);
      CKD(cuMemAllocAsync(&x, asizes[k], s));
      if (!x) FAIL("cuMemAllocAsync returned 0");
      CKD(cuMemsetD32Async(x, v, n, s));
      launch_mix(x, n, salt, s);
      CKD(cuMemcpyDtoHAsync(host, x, asizes[k], s)); /* pageable: returns once copied */
      CKD(cuMemFreeAsync(x, s));
      CKD(cuStreamSynchronize(s));
      verify(host, n, v, salt, "cuMemAllocAsync buffer");
      h = fnv1a(h, host, asizes[k]);
    }
  }
  CKD(cuStreamSynchronize(s));
  CKD(cuStreamDestroy(s));

  for (int i = 0; i < 3; i++) CKD(cuMemFree(d[i]));
  size_t free2 = 0, total2 = 0;
  CKD(cuMemGetInfo(&free2, &total2));
  if (total0 != total1 || total1 != total2)
    printf("INFO driver_api: total changed %zu -> %zu -> %zu\n", total0, total1, total2);
  if (free1 > free0) printf("INFO driver_api: free grew while 65 MiB were live (%zu -> %zu)\n", free0, free1);
  printf("INFO driver_api: cuMemGetInfo free MiB: before %zu, with buffers %zu, after %zu (total %zu)\n",
         free0 >> 20, free1 >> 20, free2 >> 20, total0 >> 20);
  CKD(cuModuleUnload(mod));
  CKD(cuDevicePrimaryCtxRelease(dev));
  free(host);
  printf("RESULT driver_api %016llx sync=3 async=24\n", (unsigned long long)h);
  return 0;
}
