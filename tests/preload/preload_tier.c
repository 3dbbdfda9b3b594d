/* The host tier under the shim (issue 49), against the fake CUDA with a
 * 64 MiB device (FAKECUDA_DEVMEM, set by meson):
 *
 *   preload_tier SCENARIO DIR
 *
 * tier: PONYTAIL_HOST_TIER=256M, PONYTAIL_HOST_TIER_INFO=1,
 *       PONYTAIL_HOST_TIER_RESERVE=8M. Allocations past the device (less the
 *       8 MiB the pool leaves free) succeed, partly and then wholly on host
 *       memory, and keep every byte; cudaMemGetInfo counts the tier, less the
 *       reserve; a free gives host memory
 *       back at once; once device memory frees, the mover brings the host
 *       bytes back (same addresses, bytes intact) while a worker thread keeps
 *       launching copies; past device + tier: out of memory, said once in the
 *       log; the exit stats count it all.
 * limit: PONYTAIL_MEM_LIMIT=32M beside the tier (64M, _INFO, an 8M reserve):
 *       cudaMemGetInfo offers the limit's 32 MiB (the reserve binds only where
 *       the device itself runs short) plus the tier; past the limit the host
 *       takes the rest.
 * engine: vLLM's start-up in miniature (the tier arm that failed on the H100,
 *       bench/records/2026-12-07-serving-second-run.md), HOST_TIER=64M, _INFO,
 *       an 8M reserve: size the KV cache as 0.85 of the reported total less
 *       the weights, allocate it layer by layer, then the CUDA-graph pools,
 *       then what the driver takes for itself: the low layers on the device,
 *       the rest on the host, every byte kept; the graph pools on the device;
 *       the device never filled past the reserve's quarter, so the driver's
 *       own allocation succeeds.
 * retry: the default PONYTAIL_HOST_TIER_RETRY: a first ask past the device
 *       is answered out-of-memory; PyTorch's second ask, after it freed its
 *       cache, lands on the device when the cache made room, else on the tier;
 *       a stream-ordered allocation and one made while a graph capture is
 *       open get no second ask: covered at once.
 *       (limit runs with PONYTAIL_HOST_TIER_RETRY=0: the first ask is covered.)
 * off:  no tier (the default): the allocation past the device fails with
 *       out-of-memory as stock, no host memory is used. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "tests/fakecuda/fakecuda.h"
#include "tests/pattern.h"
#include "tests/preload/preload_check.h"

#define MiB (1ull << 20)

static const char *g_dir;
static int g_stop;
static uint64_t g_copies;
static pid_t g_worker_tid;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}
static void fill(void *p, uint64_t size, uint64_t key) { pt_pat_fill(p, size, key, 4096); }
static int intact(const void *p, uint64_t size, uint64_t key) { return pt_pat_bad(p, size, key, 4096) == UINT64_MAX; }

/* Copies out of a small (not pooled) buffer, all the time: the process
 * runs on while the mover holds it for a moment. */
/* What PyTorch's caching allocator does past the device: cudaMalloc, and on
 * out-of-memory it frees every segment it caches (*cached, if any) and asks
 * once more (c10's CUDACachingAllocator, release_cached_blocks). */
static cudaError_t torch_malloc(void **p, size_t size, void **cached) {
  cudaError_t e = cudaMalloc(p, size);
  if (e != cudaErrorMemoryAllocation) return e;
  (void)cudaGetLastError();
  if (cached && *cached) {
    CHECK_EQ(cudaFree(*cached), cudaSuccess);
    *cached = NULL;
  }
  return cudaMalloc(p, size);
}

static void *worker(void *arg) {
  void *x = arg;
  static char host[4096];
  __atomic_store_n(&g_worker_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
  while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
    if (cuMemcpyDtoH_v2(host, (CUdeviceptr)(uintptr_t)x, sizeof host) == CUDA_SUCCESS)
      __atomic_fetch_add(&g_copies, 1, __ATOMIC_RELAXED);
    sleep_ms(1);
  }
  return NULL;
}

static int sc_tier(void) {
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  size_t fr0 = 0, tot0 = 0, fr = 0, tot = 0;
  void *x = NULL; /* the worker's, passed through (below PONYTAIL_KV_MIN), taken first */
  CHECK_EQ(cudaMalloc(&x, 4096), cudaSuccess);
  CHECK_EQ(cudaMalloc(&a, 46 * MiB), cudaSuccess);
  fill(a, 46 * MiB, 1);
  CHECK_EQ(cudaMemGetInfo(&fr0, &tot0), cudaSuccess);
  CHECK_EQ(tot0, (64 + 256) * MiB); /* PONYTAIL_HOST_TIER_INFO: the tier counts as memory */
  CHECK_EQ(fr0, (18 - 8 + 256) * MiB - 4096); /* the 8 MiB reserve is not offered */
  /* The device has 18 MiB less 4096 bytes free: the pool takes whole
   * granules up to the reserve (8 MiB), the host the other 32. */
  CHECK_EQ(torch_malloc(&b, 40 * MiB, NULL), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 32 * MiB);
  fill(b, 40 * MiB, 2);
  CHECK_EQ(torch_malloc(&c, 64 * MiB, NULL), cudaSuccess); /* all on the host */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 96 * MiB);
  fill(c, 64 * MiB, 3);
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(fr, (2 + 256 - 96) * MiB - 4096);
  CHECK(intact(a, 46 * MiB, 1) && intact(b, 40 * MiB, 2) && intact(c, 64 * MiB, 3));
  /* Past the device and the tier: out of memory, nothing else changes. */
  CHECK_EQ(torch_malloc(&d, 200 * MiB, NULL), cudaErrorMemoryAllocation);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 96 * MiB);
  pthread_t w;
  CHECK_EQ(pthread_create(&w, NULL, worker, x), 0);
  /* A free of a tier block gives its host memory back at once. */
  CHECK_EQ(cudaFree(c), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 32 * MiB);
  sleep_ms(300); /* the device is still at its reserve: nothing moves */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 32 * MiB);
  /* a's 46 MiB go back to the device (a synchronous free trims): the mover
   * brings b's 32 MiB from the host, at b's addresses. */
  CHECK_EQ(cudaFree(a), cudaSuccess);
  for (int i = 0; i < 300 && fakecuda_host_vmm_bytes(); i++) sleep_ms(10);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK(intact(b, 40 * MiB, 2));
  uint64_t before = __atomic_load_n(&g_copies, __ATOMIC_RELAXED);
  /* The process runs on (up to 2 s for the worker to be scheduled on a loaded machine). */
  for (int i = 0; i < 200 && __atomic_load_n(&g_copies, __ATOMIC_RELAXED) == before; i++) sleep_ms(10);
  CHECK(__atomic_load_n(&g_copies, __ATOMIC_RELAXED) > before);
  int seen = 0; /* the mover, and any other thread of the shim's, takes no signal */
  CHECK_EQ(shim_threads_unblocked(__atomic_load_n(&g_worker_tid, __ATOMIC_ACQUIRE), &seen), 0);
  CHECK(seen >= 1);
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
  pthread_join(w, NULL);
  CHECK_EQ(cudaFree(b), cudaSuccess);
  CHECK_EQ(cudaFree(x), cudaSuccess);
  char *log = read_log(g_dir, (int)getpid());
  CHECK(log && strstr(log, "host tier in use on device 0"));
  CHECK(log && strstr(log, "fits neither the device nor the tier"));
  CHECK(log && strstr(log, "host tier: 33554432 bytes moved back to the device"));
  return g_failed;
}

static void check_tier(const char *js) {
  CHECK_EQ(alloc_stat(js, "tier_allocs"), 2);
  CHECK_EQ(alloc_stat(js, "tier_frees"), 2); /* c, and b (a tier block still, moved or not) */
  CHECK_EQ(alloc_stat(js, "peak_tier_bytes"), 96 * MiB);
  CHECK_EQ(alloc_stat(js, "tier_moved_bytes"), 32 * MiB);
  CHECK_EQ(alloc_stat(js, "tier_refusals"), 1);
  CHECK_EQ(alloc_stat(js, "tier_deferrals"), 3); /* b, c and d each asked twice */
  /* One hold, the move: while the device sat at its reserve the mover did
   * not hold the process to move nothing. */
  CHECK_EQ(alloc_stat(js, "tier_holds"), 1);
  CHECK_EQ(alloc_stat(js, "tier_bytes"), 0);
  CHECK(strstr(js, "\"internal_errors\":0"));
}

static int sc_limit(void) {
  void *a = NULL;
  size_t fr = 0, tot = 0;
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(tot, (32 + 64) * MiB);
  CHECK_EQ(fr, (32 + 64) * MiB);
  CHECK_EQ(cudaMalloc(&a, 40 * MiB), cudaSuccess); /* 32 MiB on the device, 8 on the host */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 8 * MiB);
  fill(a, 40 * MiB, 4);
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(fr, (64 - 8) * MiB);
  CHECK(intact(a, 40 * MiB, 4));
  CHECK_EQ(cudaFree(a), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  return g_failed;
}

static int sc_engine(void) {
  enum { LAYERS = 12 };
  void *x = NULL, *w = NULL, *kv[LAYERS] = {0}, *g[2] = {0}, *drv = NULL;
  size_t fr = 0, tot = 0;
  CHECK_EQ(cudaMalloc(&x, 4096), cudaSuccess); /* small, passed through: the context's share */
  CHECK_EQ(cudaMalloc(&w, 6 * MiB), cudaSuccess); /* the weights */
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(tot, (64 + 64) * MiB);
  /* gpu_memory_utilization 0.85 of the total, less the weights, in 8 MiB layer tensors */
  uint64_t layer = 8 * MiB, n = ((uint64_t)(0.85 * (double)tot) - 6 * MiB) / layer;
  CHECK_EQ(n, LAYERS);
  CHECK(n * layer <= fr);
  uint64_t host_before = 0;
  for (uint64_t i = 0; i < LAYERS; i++) {
    CHECK_EQ(torch_malloc(&kv[i], layer, NULL), cudaSuccess);
    if (kv[i]) fill(kv[i], layer, 10 + i);
    if (i == 5) CHECK_EQ(fakecuda_host_vmm_bytes(), 0); /* six layers on the device */
  }
  host_before = fakecuda_host_vmm_bytes();
  CHECK_EQ(host_before, 6 * layer); /* the seventh would pass the reserve: it and the rest on the host */
  /* The graph pools after the KV cache: on the device, in the reserve. */
  for (int i = 0; i < 2; i++) CHECK_EQ(cudaMalloc(&g[i], 2 * MiB), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host_before);
  /* The driver's own (graph instantiation, modules): a quarter of the reserve stays free. */
  CHECK(64 * MiB - fakecuda_device_bytes(0) >= 2 * MiB);
  CHECK_EQ(cudaMalloc(&drv, 1 * MiB - 4096), cudaSuccess);
  for (uint64_t i = 0; i < LAYERS; i++) CHECK(kv[i] && intact(kv[i], layer, 10 + i));
  for (uint64_t i = 0; i < LAYERS; i++) CHECK_EQ(cudaFree(kv[i]), cudaSuccess);
  for (int i = 0; i < 2; i++) CHECK_EQ(cudaFree(g[i]), cudaSuccess);
  CHECK_EQ(cudaFree(drv), cudaSuccess);
  CHECK_EQ(cudaFree(w), cudaSuccess);
  CHECK_EQ(cudaFree(x), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  return g_failed;
}

/* PONYTAIL_HOST_TIER_RETRY (the default): the first ask past the device is
 * answered out-of-memory, so that PyTorch frees its cached segments and asks
 * again; what then fits stays on the device, and only what still does not
 * goes to the tier. Two first asks at once are each covered at their second. */
static int sc_retry(void) {
  void *x = NULL, *cache = NULL, *a = NULL, *b = NULL, *c = NULL, *e1 = NULL, *e2 = NULL;
  CHECK_EQ(cudaMalloc(&x, 4096), cudaSuccess);
  CHECK_EQ(cudaMalloc(&cache, 30 * MiB), cudaSuccess); /* a dead segment PyTorch still caches */
  CHECK_EQ(cudaMalloc(&a, 16 * MiB), cudaSuccess);
  fill(a, 16 * MiB, 5);
  /* 18 MiB less 4096 bytes left, 8 of them the reserve: 24 MiB is past the device. */
  CHECK_EQ(cudaMalloc(&b, 24 * MiB), cudaErrorMemoryAllocation); /* the first ask */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(cudaFree(cache), cudaSuccess); /* PyTorch empties its cache, */
  CHECK_EQ(cudaMalloc(&b, 24 * MiB), cudaSuccess); /* asks again, */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0); /* and the freed cache made room: all on the device */
  fill(b, 24 * MiB, 6);
  void *b2 = NULL; /* b's first ask is answered: another 24 MiB past the device is a first ask */
  CHECK_EQ(cudaMalloc(&b2, 24 * MiB), cudaErrorMemoryAllocation);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(torch_malloc(&c, 40 * MiB, NULL), cudaSuccess); /* nothing cached: the tier */
  CHECK(fakecuda_host_vmm_bytes() > 0);
  fill(c, 40 * MiB, 7);
  uint64_t host = fakecuda_host_vmm_bytes();
  CHECK_EQ(cudaMalloc(&e1, 8 * MiB), cudaErrorMemoryAllocation);
  CHECK_EQ(cudaMalloc(&e2, 10 * MiB), cudaErrorMemoryAllocation);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host);
  CHECK_EQ(cudaMalloc(&e1, 8 * MiB), cudaSuccess);
  CHECK_EQ(cudaMalloc(&e2, 10 * MiB), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host + 18 * MiB);
  /* Stream-ordered (here on the per-thread stream) gets no second ask: covered at once (the
   * pool's 6 free MiB, left by the cache, do not hold it). */
  void *s1 = NULL;
  CHECK_EQ(cudaMallocAsync(&s1, 8 * MiB, cudaStreamPerThread), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host + 26 * MiB);
  CHECK_EQ(cudaFreeAsync(s1, cudaStreamPerThread), cudaSuccess); /* a tier block: unmapped at once */
  CHECK_EQ(fakecuda_host_vmm_bytes(), host + 18 * MiB);
  /* While a graph capture is open PyTorch does not empty its cache and ask again: covered at once. */
  CUstream cs = NULL;
  void *k = NULL;
  CHECK_EQ(cuStreamCreate(&cs, 0), CUDA_SUCCESS);
  CHECK_EQ(cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CHECK_EQ(cudaMalloc(&k, 12 * MiB), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host + 30 * MiB);
  CUgraph cg = NULL;
  CHECK_EQ(cuStreamEndCapture(cs, &cg), CUDA_SUCCESS);
  CHECK_EQ(cudaFree(k), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), host + 18 * MiB);
  CHECK(intact(a, 16 * MiB, 5) && intact(b, 24 * MiB, 6) && intact(c, 40 * MiB, 7));
  void *all[] = {a, b, c, e1, e2, x};
  for (unsigned i = 0; i < sizeof all / sizeof *all; i++) CHECK_EQ(cudaFree(all[i]), cudaSuccess);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  char *log = read_log(g_dir, (int)getpid());
  CHECK(log && strstr(log, "the first ask past device 0"));
  return g_failed;
}

static void check_retry(const char *js) {
  CHECK_EQ(alloc_stat(js, "tier_deferrals"), 5); /* the first asks of b, b2, c, e1 and e2 */
  CHECK_EQ(alloc_stat(js, "tier_allocs"), 5);    /* c, e1, e2, s1, k */
  CHECK_EQ(alloc_stat(js, "tier_refusals"), 0);
}

static int sc_off(void) {
  void *a = NULL, *b = NULL;
  size_t fr = 0, tot = 0;
  CHECK_EQ(cudaMalloc(&a, 48 * MiB), cudaSuccess);
  CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  CHECK_EQ(tot, 64 * MiB);
  CHECK_EQ(cudaMalloc(&b, 40 * MiB), cudaErrorMemoryAllocation);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(cudaFree(a), cudaSuccess);
  return g_failed;
}

int main(int argc, char **argv) {
  static const struct preload_scenario sc[] = {{"tier", sc_tier, check_tier}, {"off", sc_off, NULL},
                                               {"limit", sc_limit, NULL}, {"engine", sc_engine, NULL},
                                               {"retry", sc_retry, check_retry}};
  const struct preload_scenario *s = preload_args(argc, argv, sc, sizeof sc / sizeof sc[0], &g_dir);
  return s ? run_scenario(g_dir, s->name, s->run, s->check, NULL, 3000) : 2;
}
