// Peer access and per-device pools inside one process, on two GPUs (issue 6). Runs the same with
// and without the shim; under the shim every allocation below is pooled (sizes >= 1 MiB for
// cudaMalloc, every size for cudaMallocAsync), so this checks that:
//   1. a kernel on device 1 reads and rewrites device 0's pooled memory after
//      cudaDeviceEnablePeerAccess (the grant covers the pool's existing mappings), and memory the
//      pool maps after the grant (new physical handles) too;
//   2. stream-ordered memory is reached through cudaMemPoolSetAccess on the default pool, as CUDA
//      requires (a peer enable does not cover memory pools), also with no peer enable at all;
//   3. device 0 reads device 1's pooled memory after its own peer enable;
//   4. a thread with no current context allocates on the runtime's default device (0), another
//      that calls cudaSetDevice(1) first gets device 1's memory;
//   5. cudaFree of a device's pointers (two from cudaMallocAsync) while the other device is
//      current goes to the right pool, and the memory is reusable afterwards.
// Every check writes a pattern on one device and verifies it on the other, with kernels.
// Built with -cudart shared so the preloaded shim sees the runtime's entry points.
// Prints "peer_check: PASS ..." or "peer_check: FAIL ..." (exit 1), or SKIP (exit 77) with < 2
// GPUs or no peer access between devices 0 and 1.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

__global__ void fill(uint32_t *p, size_t n, uint32_t pat) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pat ^ (uint32_t)(i * 2654435761u);
}

// Counts words that differ from `pat` and rewrites them with `next`.
__global__ void check_rewrite(uint32_t *p, size_t n, uint32_t pat, uint32_t next, unsigned long long *bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)(i * 2654435761u);
    b += p[i] != (pat ^ h);
    p[i] = next ^ h;
  }
  if (b) atomicAdd(bad, b);
}

static int fails;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      fails++;                                                                         \
      return;                                                                          \
    }                                                                                  \
  } while (0)

// Fills p (on device `owner`) there, checks and rewrites it from device `user`, then checks the
// rewrite back on `owner`: both directions of the access, verified word by word.
static void cross(const char *what, uint32_t *p, size_t bytes, int owner, int user, uint32_t seed) {
  size_t n = bytes / 4;
  unsigned long long *bad[2] = {0, 0}, got[2] = {0, 0};
  int dev[2] = {owner, user};
  for (int k = 0; k < 2; k++) {
    CK(cudaSetDevice(dev[k]));
    CK(cudaMalloc(&bad[k], sizeof **bad));
    CK(cudaMemset(bad[k], 0, sizeof **bad));
  }
  CK(cudaSetDevice(owner));
  fill<<<264, 256>>>(p, n, seed);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(user));
  check_rewrite<<<264, 256>>>(p, n, seed, ~seed, bad[1]);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(owner));
  check_rewrite<<<264, 256>>>(p, n, ~seed, seed, bad[0]);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  for (int k = 0; k < 2; k++) {
    CK(cudaSetDevice(dev[k]));
    CK(cudaMemcpy(&got[k], bad[k], sizeof got[k], cudaMemcpyDeviceToHost));
    CK(cudaFree(bad[k]));
  }
  int ok = got[0] == 0 && got[1] == 0;
  fails += !ok;
  printf("  %-40s %7zu KiB dev %d -> dev %d: %s (bad words %llu / %llu)\n", what, bytes >> 10, owner, user,
         ok ? "ok" : "CORRUPT", got[1], got[0]);
}

struct thr {
  int set_device; // -1: touch nothing before cudaMalloc
  void *p;
  int device;
  cudaError_t rc;
};

static void *thread_alloc(void *arg) {
  struct thr *t = (struct thr *)arg;
  if (t->set_device >= 0 && (t->rc = cudaSetDevice(t->set_device)) != cudaSuccess) return 0;
  if ((t->rc = cudaMalloc(&t->p, 8 << 20)) != cudaSuccess) return 0;
  cudaPointerAttributes a;
  if ((t->rc = cudaPointerGetAttributes(&a, t->p)) == cudaSuccess) t->device = a.device;
  return 0;
}

static void threads(void) {
  struct thr t[2] = {{-1, 0, -1, cudaSuccess}, {1, 0, -1, cudaSuccess}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], 0, thread_alloc, &t[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], 0);
  for (int k = 0; k < 2; k++) {
    int want = k == 0 ? 0 : 1;
    int ok = t[k].rc == cudaSuccess && t[k].device == want;
    fails += !ok;
    printf("  thread %s: 8 MiB on device %d (want %d): %s\n",
           k == 0 ? "without a context  " : "after cudaSetDevice(1)", t[k].device, want,
           ok ? "ok" : cudaGetErrorString(t[k].rc));
    if (t[k].rc == cudaSuccess) {
      cross("thread's block, read from the other device",
            (uint32_t *)t[k].p, 8 << 20, want, 1 - want, 0x7000u + k);
      cudaSetDevice(1 - want); // freed while the other device is current
      if (cudaFree(t[k].p) != cudaSuccess) fails++;
    }
  }
}

// Grants `user` read/write access to the default memory pool of `owner`: stream-ordered memory
// is reached through the pool's access list, not through cudaDeviceEnablePeerAccess.
static int pool_access(int owner, int user) {
  cudaMemPool_t mp;
  cudaMemAccessDesc d = {};
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = user;
  d.flags = cudaMemAccessFlagsProtReadWrite;
  return cudaDeviceGetDefaultMemPool(&mp, owner) || cudaMemPoolSetAccess(mp, &d, 1);
}

int main(void) {
  int n = 0, can01 = 0, can10 = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("peer_check: SKIP (%d GPU)\n", n);
    return 77;
  }
  cudaDeviceCanAccessPeer(&can10, 1, 0);
  cudaDeviceCanAccessPeer(&can01, 0, 1);
  if (!can10 || !can01) {
    printf("peer_check: SKIP (no peer access between devices 0 and 1)\n");
    return 77;
  }
  do {
    uint32_t *a = 0, *b = 0, *c = 0, *d = 0, *e = 0, *c1 = 0, *d1 = 0;
    cudaStream_t s0, s1;
    // 1. Device 0's pool holds `a` before device 1 is granted access.
    if (cudaSetDevice(0) || cudaMalloc(&a, 64 << 20) || cudaStreamCreate(&s0)) { fails++; break; }
    if (cudaSetDevice(1) || cudaDeviceEnablePeerAccess(0, 0)) { fails++; break; }
    cross("existing block after peer enable", a, 64 << 20, 0, 1, 0x1000u);
    // 2. Mapped after the grant: a large block (the pool grows).
    if (cudaSetDevice(0) || cudaMalloc(&b, 256 << 20)) { fails++; break; }
    cross("block mapped after peer enable", b, 256 << 20, 0, 1, 0x2000u);
    // 3. Stream-ordered memory of device 1, read from device 0, which has not enabled peer access:
    //    only cudaMemPoolSetAccess on device 1's default pool grants it.
    if (cudaSetDevice(1) || cudaStreamCreate(&s1) || cudaMallocAsync(&c1, 8 << 20, s1) ||
        cudaMallocAsync(&d1, 64 << 10, s1) || cudaStreamSynchronize(s1) || pool_access(1, 0)) {
      fails++;
      break;
    }
    cross("cudaMallocAsync block, pool access", c1, 8 << 20, 1, 0, 0x3000u);
    cross("cudaMallocAsync 64 KiB, pool access", d1, 64 << 10, 1, 0, 0x3100u);
    // 4. Stream-ordered memory of device 0, read from device 1 (pool access again, as CUDA needs).
    if (cudaSetDevice(0) || cudaMallocAsync(&c, 8 << 20, s0) || cudaMallocAsync(&d, 1 << 20, s0) ||
        cudaStreamSynchronize(s0) || pool_access(0, 1)) {
      fails++;
      break;
    }
    cross("cudaMallocAsync block", c, 8 << 20, 0, 1, 0x3200u);
    cross("cudaMallocAsync 1 MiB block", d, 1 << 20, 0, 1, 0x3300u);
    // 5. The other direction, by peer enable.
    if (cudaSetDevice(1) || cudaMalloc(&e, 64 << 20)) { fails++; break; }
    if (cudaSetDevice(0) || cudaDeviceEnablePeerAccess(1, 0)) { fails++; break; }
    cross("device 1's block after peer enable", e, 64 << 20, 1, 0, 0x4000u);
    // 6. Threads.
    threads();
    // 7. Frees while the other device is current.
    if (cudaSetDevice(1) || cudaFree(a) || cudaFree(b) || cudaFree(c) || cudaDeviceSynchronize()) fails++;
    if (cudaSetDevice(0) || cudaFreeAsync(d, s0) || cudaFree(e) || cudaFree(c1) || cudaFree(d1) ||
        cudaDeviceSynchronize())
      fails++;
    // The memory is reusable afterwards on its own device.
    if (cudaSetDevice(0) || cudaMalloc(&a, 64 << 20)) { fails++; break; }
    cross("reused after the frees", a, 64 << 20, 0, 1, 0x5000u);
    if (cudaFree(a)) fails++;
  } while (0);
  printf("peer_check: %s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
  return fails ? 1 : 0;
}
