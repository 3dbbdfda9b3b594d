/* Shared by the GPU programs of tests/gpu/checks/progs (run by tests/gpu/checks/cuda_programs.sh).
 * Every CUDA call is checked: a failure prints the call and exits 2; a wrong
 * result exits 3. The last line of a passing run is
 *   RESULT <name> <digest> <extra>
 * where digest is an FNV-1a 64 of the computed results (identical between a
 * stock run and a run under the shim) and extra holds only deterministic
 * facts; timings and addresses go to INFO lines. */
#ifndef PT_PROG_COMMON_H
#define PT_PROG_COMMON_H
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                                         \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      fprintf(stderr, "%s:%d: %s failed: %s (%s, %d)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
              cudaGetErrorString(e_), (int)e_);                                                          \
      exit(2);                                                                                           \
    }                                                                                                    \
  } while (0)
/* After every kernel launch: launch errors, and (with sync) errors of the run. */
#define CK_LAUNCH() CK(cudaGetLastError())

#define FAIL(...)                                      \
  do {                                                 \
    fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                      \
    fprintf(stderr, "\n");                             \
    exit(3);                                           \
  } while (0)

#define FNV_INIT 0xcbf29ce484222325ull
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
static inline uint64_t fnv_u64(uint64_t h, uint64_t v) { return fnv1a(h, &v, sizeof v); }

/* Deterministic inputs. */
static inline uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s;
}

static inline void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) FAIL("host malloc(%zu)", n);
  return p;
}
#endif
