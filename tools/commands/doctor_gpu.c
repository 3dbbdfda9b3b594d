/* `ponytail doctor`: the driver, device 0 and the CUDA runtime, probed in this
 * process. libcuda.so.1 and libcudart.so.13 are dlopen'ed, never linked, so that
 * the doctor runs (and says what is missing) on a machine without them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands/doctor.h"

static void lib_path(void *h, const char *dflt, char *out, size_t len) {
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) {
    char real[PATH_MAX];
    snprintf(out, len, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
  } else {
    snprintf(out, len, "%s", dflt);
  }
}

void pt_doctor_probe_gpu(struct pt_doctor_gpu *g) {
  memset(g, 0, sizeof *g);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g->why, sizeof g->why, "libcuda.so.1 cannot be loaded (%s)", e ? e : "?");
    return;
  }
  g->have_lib = 1;
  lib_path(h, "libcuda.so.1", g->lib, sizeof g->lib);
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
  CUresult (*ver)(int *) = (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
  CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(h, "cuDeviceGetCount");
  CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
      (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(h, "cuDeviceGetAttribute");
  CUresult (*name)(char *, int, CUdevice) = (CUresult(*)(char *, int, CUdevice))dlsym(h, "cuDeviceGetName");
  if (!init || !count || !get || !attr) {
    snprintf(g->why, sizeof g->why, "%s lacks cuInit/cuDeviceGetCount/cuDeviceGet/cuDeviceGetAttribute", g->lib);
    return;
  }
  if (ver) ver(&g->drv_ver);
  CUresult rc = init(0);
  if (rc != CUDA_SUCCESS) {
    snprintf(g->why, sizeof g->why, "cuInit failed with CUDA error %d (driver present, no usable device)", (int)rc);
    return;
  }
  g->init_ok = 1;
  if (count(&g->count) != CUDA_SUCCESS || g->count < 1) {
    snprintf(g->why, sizeof g->why, "the driver reports no CUDA device");
    g->count = 0;
    return;
  }
  CUdevice d = 0;
  if (get(&d, 0) != CUDA_SUCCESS ||
      attr(&g->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) != CUDA_SUCCESS ||
      attr(&g->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) != CUDA_SUCCESS) {
    snprintf(g->why, sizeof g->why, "device 0's compute capability cannot be read");
    return;
  }
  if (!name || name(g->name, sizeof g->name, d) != CUDA_SUCCESS) snprintf(g->name, sizeof g->name, "(name unknown)");
  g->ok = 1;
}

void pt_doctor_check_driver_gpu(struct pt_doctor_gpu *g) {
  int built_major = CUDA_VERSION / 1000, built_minor = CUDA_VERSION % 1000 / 10;
  pt_doctor_add("toolkit", ST_OK, 0, NULL, "built against the CUDA %d.%d headers (CUDA_VERSION %d)", built_major, built_minor,
      CUDA_VERSION);
  if (!g->have_lib) {
    pt_doctor_add("driver", ST_FAIL, 1,
        "install the NVIDIA driver (it brings libcuda.so.1), or add its directory to LD_LIBRARY_PATH",
        "%s: no NVIDIA driver", g->why);
  } else if (g->drv_ver && g->drv_ver / 1000 < built_major) {
    char todo[256];
    snprintf(todo, sizeof todo, "update the NVIDIA driver to one that supports CUDA %d", built_major);
    pt_doctor_add("driver", ST_FAIL, 1, todo, "%s supports CUDA %d.%d, older than the CUDA %d.%d Ponytail was built for", g->lib,
        g->drv_ver / 1000, g->drv_ver % 1000 / 10, built_major, built_minor);
  } else if (!g->init_ok) {
    pt_doctor_add("driver", ST_FAIL, 1, "check `nvidia-smi`: the driver is installed but no device is usable",
        "%s (CUDA %d.%d): %s", g->lib, g->drv_ver / 1000, g->drv_ver % 1000 / 10, g->why);
  } else {
    pt_doctor_add("driver", ST_OK, 1, NULL, "%s, supports CUDA up to %d.%d", g->lib, g->drv_ver / 1000, g->drv_ver % 1000 / 10);
  }
  if (g->ok)
    pt_doctor_add("gpu", ST_OK, 1, NULL, "%d device%s; device 0: %s, compute capability %d.%d (sm_%d%d)", g->count,
        g->count == 1 ? "" : "s", g->name, g->major, g->minor, g->major, g->minor);
  else
    pt_doctor_add("gpu", ST_FAIL, 1, "run on a machine with an NVIDIA GPU (Ponytail's allocator and kernels need one)",
        "no GPU: %s", g->why);

  void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!rt) {
    pt_doctor_add("runtime", ST_SKIP, 0, NULL,
        "libcudart.so.13 is not on the library path: the shim binds the runtime the program loads "
        "(torch brings its own, see 'libraries')");
    return;
  }
  char path[PATH_MAX];
  lib_path(rt, "libcudart.so.13", path, sizeof path);
  int (*rver)(int *) = (int (*)(int *))dlsym(rt, "cudaRuntimeGetVersion");
  int v = 0;
  if (rver && rver(&v) == 0)
    pt_doctor_add("runtime", ST_OK, 0, NULL, "libcudart.so.13 %d.%d at %s", v / 1000, v % 1000 / 10, path);
  else
    pt_doctor_add("runtime", ST_OK, 0, NULL, "libcudart.so.13 at %s (version not readable)", path);
}
