/* CUDA IPC between two processes on one GPU. The parent cudaMallocs 64 MiB
 * (pooled by the shim), writes pattern 1, exports it with
 * cudaIpcGetMemHandle and fork()s + execv()s itself as the child (so the
 * child initialises CUDA from scratch), the handle as hex on argv. The child
 * opens the handle, counts pattern-1 mismatches with a kernel, writes pattern
 * 2, closes the handle and exits 0 only when nothing mismatched. The parent
 * then checks pattern 2.
 *   ipc_pair                 the parent
 *   ipc_pair child HEX       the child (started by the parent) */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_common.h"

#define BYTES ((size_t)64 << 20)
#define N ((unsigned)(BYTES / 4))

__host__ __device__ static inline unsigned pat1(unsigned i) { return i * 2654435761u ^ 0xA5A5A5A5u; }
__host__ __device__ static inline unsigned pat2(unsigned i) { return ~(i * 40503u) + 17u; }

__global__ void k_write1(unsigned *p, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = pat1(i);
}
/* Counts pattern-1 mismatches, then writes pattern 2. */
__global__ void k_check_write2(unsigned *p, unsigned n, unsigned *bad) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    if (p[i] != pat1(i)) atomicAdd(bad, 1u);
    p[i] = pat2(i);
  }
}

static int child(const char *hex) {
  cudaIpcMemHandle_t hd;
  if (strlen(hex) != 2 * sizeof hd.reserved) FAIL("child: handle of %zu hex digits", strlen(hex));
  for (size_t i = 0; i < sizeof hd.reserved; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) FAIL("child: bad hex");
    hd.reserved[i] = (char)v;
  }
  CK(cudaSetDevice(0));
  void *p = NULL;
  CK(cudaIpcOpenMemHandle(&p, hd, cudaIpcMemLazyEnablePeerAccess));
  if (!p) FAIL("child: cudaIpcOpenMemHandle returned NULL");
  unsigned *bad = NULL, hbad = 0;
  CK(cudaMalloc((void **)&bad, sizeof *bad));
  CK(cudaMemset(bad, 0, sizeof *bad));
  k_check_write2<<<(N + 255) / 256, 256>>>((unsigned *)p, N, bad);
  CK_LAUNCH();
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost));
  CK(cudaIpcCloseMemHandle(p));
  CK(cudaFree(bad));
  printf("INFO ipc_pair child: %u mismatches of pattern 1\n", hbad);
  return hbad ? 3 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
  CK(cudaSetDevice(0));
  unsigned *d = NULL;
  CK(cudaMalloc((void **)&d, BYTES));
  k_write1<<<(N + 255) / 256, 256>>>(d, N);
  CK_LAUNCH();
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t hd;
  CK(cudaIpcGetMemHandle(&hd, d));
  char hex[2 * sizeof hd.reserved + 1];
  for (size_t i = 0; i < sizeof hd.reserved; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)hd.reserved[i]);

  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) FAIL("readlink /proc/self/exe: %s", strerror(errno));
  self[n] = 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    char *cargv[] = {argv[0], (char *)"child", hex, NULL};
    execv(self, cargv);
    _exit(127);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) FAIL("waitpid: %s", strerror(errno));
  if (WIFSIGNALED(st)) FAIL("child killed by signal %d", WTERMSIG(st));
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("child exited with %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

  unsigned *h = (unsigned *)xmalloc(BYTES);
  CK(cudaMemcpy(h, d, BYTES, cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < N; i++)
    if (h[i] != pat2(i)) FAIL("parent: element %u = 0x%08x, expected pattern 2 0x%08x", i, h[i], pat2(i));
  uint64_t dig = fnv1a(FNV_INIT, h, BYTES);
  CK(cudaFree(d));
  free(h);
  printf("RESULT ipc_pair %016llx bytes=%zu\n", (unsigned long long)dig, BYTES);
  return 0;
}
