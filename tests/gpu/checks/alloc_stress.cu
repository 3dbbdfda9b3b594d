// Allocator stress under the shim: T threads share S streams and run OPS
// cycles in all: allocate (cudaMallocAsync on a random stream, or cudaMalloc),
// fill with a pattern unique to the allocation, later check it on another
// random stream (after waiting for the fill), free it on a third random
// stream (after waiting for the check). Every block stays live for a while
// (K slots per thread), so a pool that handed memory still in use to another
// allocation shows up as a pattern mismatch. Built with -cudart shared so the
// preloaded shim sees the runtime's entry points.
//
//   alloc_stress [--ops N] [--threads T] [--streams S] [--seconds MAX]
// Prints one line "ops=... corruptions=... errors=... seconds=..."; exit 1 on
// any corruption or CUDA error.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K 8

__global__ void fill(uint32_t *p, size_t n, uint32_t pat) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pat ^ (uint32_t)i;
}

__global__ void check(const uint32_t *p, size_t n, uint32_t pat, unsigned long long *err) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    bad += p[i] != (pat ^ (uint32_t)i);
  if (bad) atomicAdd(err, bad);
}

static long g_ops = 1000000, g_per;
static int g_threads = 8, g_streams = 4;
static double g_seconds = 80;
static cudaStream_t g_s[64];
static unsigned long long *g_err; // device counters, one per thread
static long g_done, g_cuda_errors;
static double g_t0;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      if (__atomic_fetch_add(&g_cuda_errors, 1, __ATOMIC_RELAXED) < 5)                     \
        fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      goto out;                                                                           \
    }                                                                                     \
  } while (0)

struct slot {
  uint32_t *p;
  size_t n;
  uint32_t pat;
  int stream; // last stream that used it
  int sync;   // allocated with cudaMalloc: free with cudaFree
  cudaEvent_t ev;
};

static size_t pick_size(unsigned *seed) {
  unsigned r = rand_r(seed) % 100;
  if (r < 15) return 256 + rand_r(seed) % (512 << 10);          // small: passes through
  if (r < 90) return (1u << 20) + rand_r(seed) % (7u << 20);    // 1..8 MiB: pooled
  return (16u << 20) + rand_r(seed) % (48u << 20);              // 16..64 MiB
}

static void *worker(void *arg) {
  long id = (long)arg;
  unsigned seed = 12345u + (unsigned)id * 7919u;
  struct slot sl[K];
  memset(sl, 0, sizeof sl);
  unsigned long long *err = g_err + id;
  for (int j = 0; j < K; j++) CK(cudaEventCreateWithFlags(&sl[j].ev, cudaEventDisableTiming));
  for (long op = 0; op < g_per; op++) {
    if ((op & 255) == 0 && now() - g_t0 > g_seconds) break;
    struct slot *x = &sl[rand_r(&seed) % K];
    if (x->p) {
      int a = rand_r(&seed) % g_streams, b = rand_r(&seed) % g_streams;
      CK(cudaStreamWaitEvent(g_s[a], x->ev, 0));
      check<<<64, 256, 0, g_s[a]>>>(x->p, x->n, x->pat, err);
      CK(cudaGetLastError());
      CK(cudaEventRecord(x->ev, g_s[a]));
      if (x->sync) {
        CK(cudaFree(x->p));
      } else {
        CK(cudaStreamWaitEvent(g_s[b], x->ev, 0));
        CK(cudaFreeAsync(x->p, g_s[b])); // cross-stream free: reuse elsewhere must wait
      }
      x->p = NULL;
      __atomic_fetch_add(&g_done, 1, __ATOMIC_RELAXED);
    }
    size_t bytes = pick_size(&seed) & ~(size_t)3;
    int c = rand_r(&seed) % g_streams;
    x->sync = rand_r(&seed) % 8 == 0;
    if (x->sync) CK(cudaMalloc(&x->p, bytes));
    else CK(cudaMallocAsync(&x->p, bytes, g_s[c]));
    x->n = bytes / 4;
    x->pat = (uint32_t)(id << 24) ^ (uint32_t)op * 2654435761u;
    x->stream = c;
    fill<<<64, 256, 0, g_s[c]>>>(x->p, x->n, x->pat);
    CK(cudaGetLastError());
    CK(cudaEventRecord(x->ev, g_s[c]));
  }
out:
  for (int j = 0; j < K; j++) {
    if (sl[j].p) {
      cudaStreamWaitEvent(g_s[0], sl[j].ev, 0);
      check<<<64, 256, 0, g_s[0]>>>(sl[j].p, sl[j].n, sl[j].pat, err);
      cudaFreeAsync(sl[j].p, g_s[0]);
      __atomic_fetch_add(&g_done, 1, __ATOMIC_RELAXED);
    }
    if (sl[j].ev) cudaEventDestroy(sl[j].ev);
  }
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ops")) g_ops = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) g_threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--streams")) g_streams = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds")) g_seconds = atof(argv[i + 1]);
  }
  if (g_threads < 1 || g_threads > 64 || g_streams < 1 || g_streams > 64) return 2;
  g_per = (g_ops + g_threads - 1) / g_threads;
  for (int i = 0; i < g_streams; i++)
    if (cudaStreamCreateWithFlags(&g_s[i], cudaStreamNonBlocking) != cudaSuccess) return 2;
  if (cudaMalloc(&g_err, 64 * sizeof *g_err) != cudaSuccess || cudaMemset(g_err, 0, 64 * sizeof *g_err)) return 2;
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  g_t0 = now();
  pthread_t t[64];
  for (long i = 0; i < g_threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < g_threads; i++) pthread_join(t[i], NULL);
  cudaError_t e = cudaDeviceSynchronize();
  unsigned long long h[64], bad = 0;
  if (e == cudaSuccess) e = cudaMemcpy(h, g_err, sizeof h, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    fprintf(stderr, "final sync: %s\n", cudaGetErrorString(e));
    g_cuda_errors++;
  } else {
    for (int i = 0; i < g_threads; i++) bad += h[i];
  }
  double s = now() - g_t0;
  printf("ops=%ld corruptions=%llu errors=%ld seconds=%.1f ops_per_s=%.0f%s\n", g_done, bad, g_cuda_errors, s,
         g_done / s, g_done < g_ops ? " (time limit)" : "");
  return bad || g_cuda_errors ? 1 : 0;
}
