/* GPU presence probe: dlopen(libcuda.so.1) + cuInit + cuDeviceGetCount in a
 * throwaway child; /dev/nvidiactl only explains a missing driver. Whatever
 * libcuda.so.1 the loader finds decides, so the CPU tests reach the GPU
 * paths of bench through the fake CUDA (tests/fakecuda) on LD_LIBRARY_PATH.
 * The tool links no CUDA library. */
#include "tools/lib/gpu_probe.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Child exit codes, mapped to reasons in the parent. */
enum { PROBE_OK = 0, PROBE_NO_LIB = 10, PROBE_NO_SYM, PROBE_INIT_FAIL, PROBE_NO_DEVICE };

static int pt_gpu_probe_child(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return PROBE_NO_LIB;
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
  if (!init || !count) return PROBE_NO_SYM;
  if (init(0) != 0) return PROBE_INIT_FAIL;
  int n = 0;
  if (count(&n) != 0 || n < 1) return PROBE_NO_DEVICE;
  return PROBE_OK;
}

int pt_gpu_probe(char *why, size_t whylen) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, whylen, "no GPU probe possible: fork: %s", strerror(errno));
    return 0;
  }
  if (pid == 0) _exit(pt_gpu_probe_child());
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) break;
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  switch (code) {
  case PROBE_OK: return 1;
  case PROBE_NO_LIB:
    if (access("/dev/nvidiactl", F_OK) != 0)
      snprintf(why, whylen, "no GPU: /dev/nvidiactl does not exist (no NVIDIA driver on this machine)");
    else
      snprintf(why, whylen, "no GPU: libcuda.so.1 cannot be loaded");
    break;
  case PROBE_NO_SYM: snprintf(why, whylen, "no GPU: libcuda.so.1 lacks cuInit/cuDeviceGetCount"); break;
  case PROBE_INIT_FAIL: snprintf(why, whylen, "no GPU: cuInit failed (driver present, no usable device)"); break;
  case PROBE_NO_DEVICE: snprintf(why, whylen, "no GPU: the driver reports no CUDA device"); break;
  default: snprintf(why, whylen, "no GPU: the probe process crashed (status %d)", st); break;
  }
  return 0;
}
