/* See nvml_proc.h. NVML is loaded at run time: the CLI links no NVIDIA
 * library, and a machine without a driver simply has no figure. */
#include "tools/lib/nvml_proc.h"

#include <dlfcn.h>
#include <stdlib.h>

/* The parts of nvml.h used here (stable ABI: nvmlProcessInfo_t of the _v3
 * query, NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7). */
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nv_proc;
typedef int (*nv_init_fn)(void);
typedef int (*nv_count_fn)(unsigned int *);
typedef int (*nv_handle_fn)(unsigned int, void **);
typedef int (*nv_procs_fn)(void *, unsigned int *, nv_proc *);

static struct {
  int tried, ok;
  nv_count_fn count;
  nv_handle_fn handle;
  nv_procs_fn procs;
} N;

static int nv_load(void) {
  if (N.tried) return N.ok;
  N.tried = 1;
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  nv_init_fn init = (nv_init_fn)dlsym(h, "nvmlInit_v2");
  N.count = (nv_count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
  N.handle = (nv_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  N.procs = (nv_procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
  N.ok = init && N.count && N.handle && N.procs && init() == 0;
  return N.ok;
}

int pt_nvml_process_bytes(int pid, unsigned long long *bytes) {
  if (!nv_load()) return -1;
  unsigned int nd = 0;
  if (N.count(&nd)) return -1;
  unsigned long long sum = 0;
  int found = 0;
  for (unsigned int d = 0; d < nd; d++) {
    void *dev;
    if (N.handle(d, &dev)) continue;
    unsigned int n = 64;
    nv_proc *p = NULL;
    int rc;
    for (int tries = 0; tries < 4; tries++) {
      free(p);
      p = calloc(n, sizeof *p);
      if (!p) return -1;
      unsigned int m = n;
      rc = N.procs(dev, &m, p);
      if (rc == 7) { /* too small: m is what it needs */
        n = m + 16;
        continue;
      }
      n = m;
      break;
    }
    if (rc == 0)
      for (unsigned int i = 0; i < n; i++)
        if ((int)p[i].pid == pid && p[i].usedGpuMemory != ~0ull) { /* ~0: not available (no permission) */
          found = 1;
          sum += p[i].usedGpuMemory;
        }
    free(p);
  }
  if (!found) return -1;
  *bytes = sum;
  return 0;
}
