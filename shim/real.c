/* The real CUDA functions. The shim links no CUDA library: everything is
 * found at run time, lazily, and a missing function is reported to the caller
 * as "no driver" rather than crashing (see PT_RT_NO_DRIVER in shim/shim.h). */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "shim/real.h"
#include "shim/shim.h"

struct pt_driver pt_drv;
void *pt_real_fn[PT_SYM_COUNT];

const char *const pt_sym_name[PT_SYM_COUNT] = {
#define PT_SYM(name, kind) #name,
#include "shim/syms.def"
#undef PT_SYM
};
const unsigned char pt_sym_kind[PT_SYM_COUNT] = {
#define PT_SYM(name, kind) PT_SYM_KIND_##kind,
#include "shim/syms.def"
#undef PT_SYM
};

/* Not instrumented and no libc calls: dlsym (shim/dlsym.c) asks this for
 * every name, including while a sanitizer runtime initialises. */
__attribute__((no_sanitize("address", "undefined"))) int pt_sym_find(const char *name) {
  if (!name || (name[0] != 'c' && name[0] != '_')) return -1;
  for (int i = 0; i < PT_SYM_COUNT; i++) {
    const char *a = pt_sym_name[i], *b = name;
    while (*a && *a == *b) a++, b++;
    if (*a == *b) return i;
  }
  return -1;
}

/* ---- the real dlsym ------------------------------------------------------
 * glibc's dlsym, found by version with dlvsym so that our own exported dlsym
 * (shim/dlsym.c) is skipped. dlsym moved from libdl to libc in glibc 2.34;
 * older versions carry the base version of their architecture. */
typedef void *(*pt_dlsym_fn)(void *, const char *);
pt_dlsym_fn pt_dlsym_real; /* read by the RTLD_NEXT trampoline in shim/dlsym.c */

/* Not instrumented: sanitizer runtimes call dlsym (i.e. us) while they
 * initialise, before their shadow memory exists. */
#define PT_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

PT_NO_SANITIZE void *pt_dlsym_resolve(void) {
  pt_dlsym_fn f = __atomic_load_n(&pt_dlsym_real, __ATOMIC_ACQUIRE);
  if (f) return (void *)f;
  f = (pt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!f) f = (pt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); /* x86_64 before 2.34 */
  if (!f) f = (pt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");  /* aarch64 before 2.34 */
  if (f) __atomic_store_n(&pt_dlsym_real, f, __ATOMIC_RELEASE);
  return (void *)f;
}

PT_NO_SANITIZE void *pt_real_dlsym(void *handle, const char *name) {
  pt_dlsym_fn f = (pt_dlsym_fn)pt_dlsym_resolve();
  return f ? f(handle, name) : NULL;
}

/* ---- libcuda.so.1 -------------------------------------------------------- */
static void *pt_libcuda;

void *pt_real_libcuda(void) {
  void *h = __atomic_load_n(&pt_libcuda, __ATOMIC_ACQUIRE);
  if (h) return h;
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return NULL;
  void *expected = NULL;
  if (!__atomic_compare_exchange_n(&pt_libcuda, &expected, h, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    dlclose(h); /* drop our extra reference */
    return expected;
  }
  return h;
}

/* ---- libcudart.so.* already in the process --------------------------------
 * For runtimes loaded RTLD_LOCAL (Python extensions): not in the global
 * scope, so dlsym(RTLD_NEXT) misses them, yet their callers reach our
 * exported entry points through the PLT. */
static int pt_find_cudart_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *name = info->dlpi_name;
  if (!name || !*name) return 0;
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libcudart.so", 12) != 0) return 0;
  size_t n = strlen(name);
  if (n >= 4096) return 0;
  memcpy(data, name, n + 1);
  return 1;
}

static void *pt_libcudart_handle(void) {
  static void *cached;
  void *h = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
  if (h) return h;
  char path[4096];
  path[0] = 0;
  if (!dl_iterate_phdr(pt_find_cudart_cb, path) || !path[0]) return NULL;
  h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) __atomic_store_n(&cached, h, __ATOMIC_RELEASE);
  return h;
}

void *pt_real_resolve(enum pt_sym s) {
  if ((unsigned)s >= PT_SYM_COUNT) return NULL;
  const char *name = pt_sym_name[s];
  void *p = NULL;
  if (pt_sym_kind[s] == PT_SYM_KIND_DRV) {
    void *h = pt_real_libcuda();
    if (h) p = pt_real_dlsym(h, name);
  } else {
    /* Called from inside the shim, so RTLD_NEXT means "after the shim". */
    p = pt_real_dlsym(RTLD_NEXT, name);
    if (!p) {
      void *h = pt_libcudart_handle();
      if (h) p = pt_real_dlsym(h, name);
    }
  }
  if (!p) {
    PT_LOG_ONCE(PT_LOG_WARN, "real %s not found; answering as if no CUDA driver were present", name);
    return NULL;
  }
  return pt_real_offer(s, p);
}

void *pt_real_offer(enum pt_sym s, void *p) {
  void *expected = NULL;
  if (__atomic_compare_exchange_n(&pt_real_fn[s], &expected, p, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return p;
  return expected;
}

/* ---- pt_drv -------------------------------------------------------------- */
static pthread_once_t pt_drv_once = PTHREAD_ONCE_INIT;
static bool pt_drv_ok;

static void pt_drv_load(void) {
  void *h = pt_real_libcuda();
  if (!h) {
    pt_info("libcuda.so.1 not found: driver features disabled");
    return;
  }
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)pt_real_dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) {
    pt_warn("cuGetProcAddress_v2 not found in libcuda.so.1: driver features disabled");
    return;
  }
  CUdriverProcAddressQueryResult st;
#define PT_DRV_LOAD(name, ver)                                                              \
  if (gpa(#name, (void **)&pt_drv.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS) \
    pt_drv.name = NULL;
  PT_DRIVER_FUNCS(PT_DRV_LOAD)
#undef PT_DRV_LOAD
  pt_drv_ok = true;
}

bool pt_real_driver(void) {
  pthread_once(&pt_drv_once, pt_drv_load);
  return pt_drv_ok;
}

void pt_thread_relax_capture(void) {
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (pt_real_driver() && pt_drv.cuThreadExchangeStreamCaptureMode) (void)pt_drv.cuThreadExchangeStreamCaptureMode(&m);
}
