/* Explicit memory pools next to the default one: cudaMemPoolCreate (pinned,
 * device 0), cudaMallocFromPoolAsync from it and from the default pool,
 * cudaMemPoolGetAttribute (UsedMemCurrent / ReservedMemCurrent),
 * cudaMemPoolTrimTo, cudaDeviceSetMemPool to the explicit pool and a
 * cudaMallocAsync that must come from it (its UsedMemCurrent grows), then
 * back to the default pool. Every buffer's data is checked. */
#include "prog_common.h"

#define MiB ((size_t)1 << 20)

__global__ void fill(unsigned *p, size_t n, unsigned salt) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = (unsigned)i * 2654435761u ^ salt;
}

static uint64_t g_h = FNV_INIT;

/* Fills d (bytes) on s, copies it back and checks it. */
static void fill_check(unsigned *d, size_t bytes, unsigned salt, cudaStream_t s, const char *what) {
  size_t n = bytes / 4;
  unsigned *h = (unsigned *)xmalloc(bytes);
  memset(h, 0, bytes);
  fill<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(d, n, salt);
  CK_LAUNCH();
  CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; i++)
    if (h[i] != ((unsigned)i * 2654435761u ^ salt)) FAIL("%s: element %zu = 0x%08x", what, i, h[i]);
  g_h = fnv1a(g_h, h, bytes);
  free(h);
}

static uint64_t attr(cudaMemPool_t p, cudaMemPoolAttr a) {
  uint64_t v = 0;
  CK(cudaMemPoolGetAttribute(p, a, &v));
  return v;
}

int main(void) {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t def, cur, pool;
  CK(cudaDeviceGetDefaultMemPool(&def, 0));
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CK(cudaMemPoolCreate(&pool, &props));

  /* ---- one block from each pool ---- */
  unsigned *x = NULL, *y = NULL;
  CK(cudaMallocFromPoolAsync((void **)&x, 8 * MiB, pool, s));
  CK(cudaMallocFromPoolAsync((void **)&y, 8 * MiB, def, s));
  if (!x || !y) FAIL("cudaMallocFromPoolAsync returned NULL");
  fill_check(x, 8 * MiB, 0x1111u, s, "explicit pool block");
  fill_check(y, 8 * MiB, 0x2222u, s, "default pool block");
  uint64_t used_x = attr(pool, cudaMemPoolAttrUsedMemCurrent), res_x = attr(pool, cudaMemPoolAttrReservedMemCurrent);
  uint64_t used_d = attr(def, cudaMemPoolAttrUsedMemCurrent), res_d = attr(def, cudaMemPoolAttrReservedMemCurrent);
  printf("INFO explicit_pool: explicit used %llu reserved %llu; default used %llu reserved %llu\n",
         (unsigned long long)used_x, (unsigned long long)res_x, (unsigned long long)used_d, (unsigned long long)res_d);
  if (used_x < 8 * MiB || res_x < used_x) FAIL("explicit pool: used %llu reserved %llu with 8 MiB live",
                                             (unsigned long long)used_x, (unsigned long long)res_x);
  /* the default pool's figures (with the shim: the driver's plus its pool's) */
  if (used_d < 8 * MiB || res_d < used_d) FAIL("default pool: used %llu reserved %llu with 8 MiB live",
                                             (unsigned long long)used_d, (unsigned long long)res_d);
  CK(cudaFreeAsync(x, s));
  CK(cudaFreeAsync(y, s));
  CK(cudaStreamSynchronize(s));
  uint64_t before = attr(pool, cudaMemPoolAttrReservedMemCurrent);
  CK(cudaMemPoolTrimTo(pool, 0));
  CK(cudaMemPoolTrimTo(def, 0));
  uint64_t after = attr(pool, cudaMemPoolAttrReservedMemCurrent);
  printf("INFO explicit_pool: explicit reserved %llu -> %llu after TrimTo(0); explicit used %llu\n",
         (unsigned long long)before, (unsigned long long)after,
         (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemCurrent));
  if (after > before) FAIL("TrimTo(0) grew the explicit pool's reservation");
  if (attr(pool, cudaMemPoolAttrUsedMemCurrent) != 0) FAIL("explicit pool still has used memory");

  /* ---- the explicit pool as the device's current pool ---- */
  CK(cudaDeviceSetMemPool(0, pool));
  CK(cudaDeviceGetMemPool(&cur, 0));
  if (cur != pool) FAIL("cudaDeviceGetMemPool does not return the pool just set");
  uint64_t u0 = attr(pool, cudaMemPoolAttrUsedMemCurrent);
  unsigned *z = NULL;
  CK(cudaMallocAsync((void **)&z, 4 * MiB, s));
  if (!z) FAIL("cudaMallocAsync returned NULL");
  uint64_t u1 = attr(pool, cudaMemPoolAttrUsedMemCurrent);
  if (u1 < u0 + 4 * MiB)
    FAIL("cudaMallocAsync with the explicit pool current did not come from it (used %llu -> %llu)",
         (unsigned long long)u0, (unsigned long long)u1);
  fill_check(z, 4 * MiB, 0x3333u, s, "current explicit pool block");
  CK(cudaFreeAsync(z, s));

  /* ---- back to the default pool ---- */
  CK(cudaDeviceSetMemPool(0, def));
  CK(cudaDeviceGetMemPool(&cur, 0));
  if (cur != def) FAIL("cudaDeviceGetMemPool does not return the default pool after the reset");
  unsigned *w = NULL;
  uint64_t e0 = attr(pool, cudaMemPoolAttrUsedMemCurrent);
  CK(cudaMallocAsync((void **)&w, 4 * MiB, s));
  if (!w) FAIL("cudaMallocAsync returned NULL");
  uint64_t e1 = attr(pool, cudaMemPoolAttrUsedMemCurrent);
  if (e1 > e0) FAIL("cudaMallocAsync after the reset came from the explicit pool");
  fill_check(w, 4 * MiB, 0x4444u, s, "default pool block after the reset");
  CK(cudaFreeAsync(w, s));
  CK(cudaStreamSynchronize(s));

  /* ---- reuse loop on both pools ---- */
  for (int it = 0; it < 10; it++) {
    unsigned *p = NULL, *q = NULL;
    size_t sz = (size_t)(1 + it % 4) * MiB + (size_t)it * 4096;
    CK(cudaMallocFromPoolAsync((void **)&p, sz, pool, s));
    CK(cudaMallocAsync((void **)&q, sz, s));
    if (!p || !q) FAIL("NULL allocation in the reuse loop");
    fill_check(p, sz, 0x5000u + (unsigned)it, s, "explicit pool reuse");
    fill_check(q, sz, 0x6000u + (unsigned)it, s, "default pool reuse");
    CK(cudaFreeAsync(p, s));
    CK(cudaFreeAsync(q, s));
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaMemPoolDestroy(pool));
  CK(cudaStreamDestroy(s));
  CK(cudaDeviceSynchronize());
  printf("RESULT explicit_pool %016llx blocks=24\n", (unsigned long long)g_h);
  return 0;
}
