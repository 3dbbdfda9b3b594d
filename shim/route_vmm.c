/* PyTorch's own mapped memory (expandable segments): the handle table, the
 * translated calls, sleep and wake, the host tier (shim/route_vmm.h).
 *
 * One mutex guards the table: PyTorch makes a handle per 20 MiB (2 MiB in its
 * small pool) and calls these only when its cache grows or shrinks, never per
 * tensor, so the lock and the linear scans by address (a few thousand
 * entries on an 80 GiB card) cost nothing on a decode step.
 *
 * The shim holds exactly one driver reference per kept handle (the one
 * cuMemCreate gave): PyTorch's release drops the shim's entry, and the
 * driver's reference goes once the handle is neither PyTorch's nor mapped.
 * That is what lets sleep release the physical memory and wake make new
 * memory under the same handle value. */
#include <dlfcn.h>
#include <sys/mman.h>

#include "common/options.h"
#include "shim/control.h"
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

#define VMM_TAG ((uint64_t)0x5054u << 48) /* 'PT': not a canonical address, so never a driver pointer */
#define VMM_ACC 4                          /* access descriptors kept per handle (devices granted) */
#define VMM_ASK_NS (5ull * 1000000000ull)  /* the second ask of PONYTAIL_HOST_TIER_RETRY */

struct vh {
  CUmemGenericAllocationHandle real; /* the driver's; 0 while asleep */
  CUmemAllocationProp prop;          /* as PyTorch asked (a device location) */
  CUcontext ctx;                     /* current at creation: the sleep's copies run in it */
  uint64_t size;
  CUdeviceptr va;                    /* its one whole mapping (0: none) */
  CUmemAccessDesc acc[VMM_ACC];
  uint8_t nacc;
  uint8_t used, app;                 /* app: PyTorch has not released it */
  uint8_t host;                      /* on the host tier */
  uint8_t exported, twice;           /* exported; mapped more than once or in part: never moved */
  uint8_t asleep, woke;               /* woke: in the wake under way (undone if it fails) */
  uint8_t charged;                   /* counted under PONYTAIL_MEM_LIMIT */
  uint16_t gen;                      /* the slot's generation, in its handle value: a stale value misses */
  int dev;
  uint64_t host_off;                 /* its bytes in the sleep's host copy */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct vh *tab;
static uint64_t ntab, captab, nlive;
static int any_kept; /* atomic: set at the first kept handle */

static struct {
  uint64_t handles, bytes, peak_bytes, host_bytes, peak_host_bytes;
  uint64_t creates, releases, tier_allocs, tier_deferrals, tier_refusals, tier_moved_bytes, limit_rejections;
  uint64_t sleeps, slept_bytes, wakes, errors;
} S;

/* The sleep's host copy. */
static char *sleep_buf;
static uint64_t sleep_len;
static bool sleep_registered, sleep_discard;

static void count(uint64_t *c) {
  pthread_mutex_lock(&mu);
  (*c)++;
  pthread_mutex_unlock(&mu);
}

static __thread uint64_t denied_ns; /* PONYTAIL_HOST_TIER_RETRY: this thread's last refused first ask */

/* ---- helpers ------------------------------------------------------------- */

static bool push(CUcontext c) { return c && pt_drv.cuCtxPushCurrent && pt_drv.cuCtxPushCurrent(c) == CUDA_SUCCESS; }
static void pop(void) {
  CUcontext old;
  (void)pt_drv.cuCtxPopCurrent(&old);
}

/* A handle value: the tag, the slot's generation (bits 32-47), the slot + 1. */
static struct vh *find(CUmemGenericAllocationHandle h) {
  if (!pt_vmm_is_ours(h)) return NULL;
  uint64_t i = (h & 0xffffffffu) - 1;
  return i < ntab && tab[i].used && tab[i].gen == (uint16_t)(h >> 32) ? &tab[i] : NULL;
}

static CUmemGenericAllocationHandle id_of(const struct vh *e) {
  return VMM_TAG | (uint64_t)e->gen << 32 | (uint64_t)(e - tab + 1);
}

static struct vh *slot(void) {
  for (uint64_t i = 0; i < ntab && nlive < ntab; i++)
    if (!tab[i].used) return &tab[i];
  if (ntab == 0xffffffffu) return NULL;
  if (ntab == captab) {
    uint64_t cap = captab ? captab * 2 : 256;
    struct vh *n = realloc(tab, cap * sizeof *n);
    if (!n) return NULL;
    tab = n;
    captab = cap;
  }
  tab[ntab].gen = 0;
  return &tab[ntab++];
}

static void account(struct vh *e, int sign) {
  int64_t b = sign * (int64_t)e->size;
  if (e->host) {
    /* Read without the lock by pooled frees (pt_vmm_host_bytes). */
    __atomic_store_n(&S.host_bytes, S.host_bytes + b, __ATOMIC_RELAXED);
    if (S.host_bytes > S.peak_host_bytes) S.peak_host_bytes = S.host_bytes;
  } else {
    S.bytes += b;
    if (S.bytes > S.peak_bytes) S.peak_bytes = S.bytes;
  }
  S.handles += sign;
}

static void uncharge(int dev, uint64_t size);

/* Drops e: its driver handle released (the driver frees the memory once no
 * mapping holds it), the limit's charge returned. Under mu. */
static void drop(struct vh *e) {
  if (e->real && pt_drv.cuMemRelease && pt_drv.cuMemRelease(e->real) != CUDA_SUCCESS) {
    S.errors++;
    PT_INTERNAL_ERROR();
  }
  if (e->charged) uncharge(e->dev, e->size);
  account(e, -1);
  uint16_t gen = e->gen;
  memset(e, 0, sizeof *e);
  e->gen = (uint16_t)(gen + 1); /* the next handle in this slot has another value */
  nlive--;
  S.releases++;
}

/* ---- which calls ---------------------------------------------------------- */

static int vmm_on = -1; /* PONYTAIL_TORCH_VMM as it applies here, decided at the first cuMemCreate */

static bool from_torch(const void *ra) {
  static const void *base; /* libc10_cuda.so's load address, once seen */
  Dl_info di;
  if (!ra || !dladdr(ra, &di) || !di.dli_fname) return false;
  const void *b = __atomic_load_n(&base, __ATOMIC_RELAXED);
  if (b) return di.dli_fbase == b;
  const char *n = strrchr(di.dli_fname, '/');
  n = n ? n + 1 : di.dli_fname;
  if (strncmp(n, "libc10_cuda.", 12)) return false;
  __atomic_store_n(&base, di.dli_fbase, __ATOMIC_RELAXED);
  return true;
}

bool pt_vmm_wants(const CUmemAllocationProp *prop, unsigned long long flags, const void *ra) {
  int on = __atomic_load_n(&vmm_on, __ATOMIC_RELAXED);
  if (on < 0) {
    /* auto: only where the process asked Ponytail to manage memory; PyTorch's
     * own expandable_segments:True alone passes through, as it always did. */
    int v = pt_opt_enum(PT_OPT_TORCH_VMM);
    on = v == PT_TORCH_VMM_ON ||
         (v == PT_TORCH_VMM_AUTO && (pt_opt_enum(PT_OPT_TORCH_ALLOC) == PT_TORCH_ALLOC_EXPANDABLE || R.tier || R.limit));
    __atomic_store_n(&vmm_on, on, __ATOMIC_RELAXED);
  }
  return on && prop && !flags && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
         prop->location.id < PT_ROUTE_MAX_DEV && !prop->win32HandleMetaData && from_torch(ra);
}

bool pt_vmm_any(void) { return __atomic_load_n(&any_kept, __ATOMIC_ACQUIRE) != 0; }

/* ---- create: the device, the limit, the host tier ------------------------- */

/* Whether dev has size bytes free beyond the tier's reserve (true without a
 * tier, or when the driver cannot say). In the caller's context. */
static bool beyond_reserve(uint64_t size) {
  size_t fr = 0, tot = 0;
  if (!R.tier || !R.tier_reserve || !pt_drv.cuMemGetInfo || pt_drv.cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS)
    return true;
  return fr >= size + R.tier_reserve;
}

/* The limit's charge on dev's pool (the shim's pass-through figure, which
 * the pool's own growth counts too). true: within the limit. */
static bool charge(int dev, uint64_t size, uint8_t *charged) {
  *charged = 0;
  if (!R.limit || !R.pool_on) return true;
  struct pt_pool *p = rt_pool_get(dev);
  if (!p) return true;
  if (!rt_limit_reserve(p, size)) return false;
  *charged = 1;
  return true;
}

static void uncharge(int dev, uint64_t size) {
  struct pt_pool *p = pool_at(dev);
  if (p) pt_pool_note_passthrough(p, -(int64_t)size);
}

static CUresult create_host(PFN_cuMemCreate_v10020 real, CUmemGenericAllocationHandle *out, uint64_t size,
                            const CUmemAllocationProp *prop) {
  CUmemAllocationProp hp = *prop;
  int numa = -1;
  CUdevice d;
  if (!pt_drv.cuDeviceGet || pt_drv.cuDeviceGet(&d, prop->location.id) != CUDA_SUCCESS ||
      !pt_drv.cuDeviceGetAttribute ||
      pt_drv.cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, d) != CUDA_SUCCESS)
    numa = -1;
  hp.location.type = numa >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
  hp.location.id = numa >= 0 ? numa : 0;
  hp.allocFlags.gpuDirectRDMACapable = 0; /* a device property */
  CUresult r = real(out, size, &hp, 0);
  if (r == CUDA_ERROR_NOT_SUPPORTED && hp.requestedHandleTypes) {
    /* Host memory that cannot be exported: it still holds the bytes (an
     * export of it later fails as the driver fails it). */
    hp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    r = real(out, size, &hp, 0);
  }
  return r;
}

CUresult pt_vmm_create(void *realp, CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags) {
  PFN_cuMemCreate_v10020 real = (PFN_cuMemCreate_v10020)realp;
  CUcontext ctx = NULL;
  if (!h || !size || !pt_real_driver() || !pt_drv.cuCtxGetCurrent || pt_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS ||
      !ctx)
    return real(h, size, prop, flags); /* nothing to keep it by: as stock */
  const int dev = prop->location.id;
  CUmemGenericAllocationHandle rh = 0;
  uint8_t charged = 0, host = 0;
  bool device = charge(dev, size, &charged);
  if (!device) {
    count(&S.limit_rejections);
    RC_INC(passthrough_rejections);
  }
  device = device && beyond_reserve(size);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (device) r = real(&rh, size, prop, flags);
  if (r != CUDA_SUCCESS && charged) {
    uncharge(dev, size);
    charged = 0;
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY && R.tier) {
    /* The host tier, as for the pool: the first ask answered out-of-memory
     * (PyTorch then frees its cache and maps again), the next one within 5 s
     * covered, up to PONYTAIL_HOST_TIER less what the pool holds there. */
    uint64_t now = pt_now_ns();
    struct pt_pool *p = pool_at(dev);
    uint64_t used = (p ? pt_pool_tier_bytes(p) : 0) + pt_vmm_host_bytes();
    /* No second ask comes while a capture is open (PyTorch does not empty its cache then). */
    if (R.tier_retry && pt_captures_open() <= 0 && !(denied_ns && now - denied_ns < VMM_ASK_NS)) {
      denied_ns = now;
      count(&S.tier_deferrals);
      PT_LOG_ONCE(PT_LOG_INFO, "host tier: PyTorch's first mapping past device %d (%zu bytes) answered "
                  "out-of-memory, so that it empties its cache first; its next within 5 s goes to host memory",
                  dev, size);
    } else if (used + size > R.tier) {
      count(&S.tier_refusals);
      PT_LOG_ONCE(PT_LOG_WARN, "host tier: PyTorch's mapped memory is past PONYTAIL_HOST_TIER too; "
                  "its allocation fails with out-of-memory");
    } else if ((r = create_host(real, &rh, size, prop)) == CUDA_SUCCESS) {
      host = 1;
      PT_LOG_ONCE(PT_LOG_INFO, "host tier in use on device %d: PyTorch's mapped memory past the device goes to "
                  "page-locked host memory at its own addresses (read over PCIe), back to the device as it frees",
                  dev);
    } else {
      count(&S.tier_refusals);
      PT_LOG_ONCE(PT_LOG_WARN, "host tier: no page-locked host memory for PyTorch's mapped memory (CUDA error %d); "
                  "its allocation fails with out-of-memory", (int)r);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&mu);
  struct vh *e = slot();
  if (!e) {
    pthread_mutex_unlock(&mu);
    /* No record: PyTorch gets the driver's handle, as stock. */
    if (host) {
      (void)pt_drv.cuMemRelease(rh);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (charged) uncharge(dev, size);
    PT_INTERNAL_ERROR();
    *h = rh;
    return CUDA_SUCCESS;
  }
  uint16_t gen = e->gen;
  memset(e, 0, sizeof *e);
  e->gen = gen;
  e->real = rh;
  e->prop = *prop;
  e->ctx = ctx;
  e->size = size;
  e->used = e->app = 1;
  e->host = host;
  e->charged = charged;
  e->dev = dev;
  nlive++;
  account(e, 1);
  S.creates++;
  if (host) S.tier_allocs++;
  *h = id_of(e);
  pthread_mutex_unlock(&mu);
  if (!__atomic_exchange_n(&any_kept, 1, __ATOMIC_ACQ_REL)) {
    pt_control_start(); /* the process now has memory to put to sleep */
    pt_info("PyTorch maps its own memory (expandable segments): the shim keeps its handles, so that sleep, "
            "the host tier and PONYTAIL_MEM_LIMIT reach it (PONYTAIL_TORCH_VMM=off: not)");
  }
  return CUDA_SUCCESS;
}

/* ---- the other calls ------------------------------------------------------ */

CUresult pt_vmm_release(void *realp, CUmemGenericAllocationHandle h) {
  (void)realp;
  pthread_mutex_lock(&mu);
  struct vh *e = find(h);
  if (!e || !e->app) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->app = 0;
  bool kick = e->host || S.host_bytes;
  if (!e->va) drop(e); /* else its unmap drops it: the mapping keeps the memory */
  pthread_mutex_unlock(&mu);
  if (kick && R.tier) pt_tier_kick();
  return CUDA_SUCCESS;
}

CUresult pt_vmm_map(void *realp, CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                    unsigned long long flags) {
  PFN_cuMemMap_v10020 real = (PFN_cuMemMap_v10020)realp;
  pthread_mutex_lock(&mu);
  struct vh *e = find(h);
  CUresult r = e && e->real ? real(va, size, off, e->real, flags) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    if (!e->va && !e->twice && !off && size == e->size) e->va = va;
    else e->twice = 1; /* a second or partial mapping: its address is not known here */
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult pt_vmm_unmap(void *realp, CUdeviceptr va, size_t size) {
  PFN_cuMemUnmap_v10020 real = (PFN_cuMemUnmap_v10020)realp;
  pthread_mutex_lock(&mu);
  CUresult r = real(va, size);
  bool kick = false;
  if (r == CUDA_SUCCESS) {
    for (uint64_t i = 0; i < ntab; i++) {
      struct vh *e = &tab[i];
      if (!e->used || !e->va || e->va < va || e->va - va >= size) continue;
      e->va = 0;
      kick |= e->host;
      if (!e->app) drop(e);
    }
  }
  kick = kick && S.host_bytes; /* room freed while something is on the host */
  pthread_mutex_unlock(&mu);
  if (kick && R.tier) pt_tier_kick();
  return r;
}

CUresult pt_vmm_set_access(void *realp, CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count) {
  PFN_cuMemSetAccess_v10020 real = (PFN_cuMemSetAccess_v10020)realp;
  pthread_mutex_lock(&mu);
  CUresult r = real(va, size, desc, count);
  if (r == CUDA_SUCCESS && desc) {
    for (uint64_t i = 0; i < ntab; i++) {
      struct vh *e = &tab[i];
      if (!e->used || !e->va || e->va < va || e->va - va >= size) continue;
      /* The newest descriptor per location, as the driver keeps it. */
      for (size_t k = 0; k < count; k++) {
        uint8_t j = 0;
        while (j < e->nacc && (e->acc[j].location.type != desc[k].location.type ||
                               e->acc[j].location.id != desc[k].location.id))
          j++;
        if (j == e->nacc) {
          if (e->nacc == VMM_ACC) {
            e->twice = 1; /* more devices than kept: never remapped */
            continue;
          }
          e->nacc++;
        }
        e->acc[j] = desc[k];
      }
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult pt_vmm_export(void *realp, void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                       unsigned long long flags) {
  PFN_cuMemExportToShareableHandle_v10020 real = (PFN_cuMemExportToShareableHandle_v10020)realp;
  pthread_mutex_lock(&mu);
  struct vh *e = find(h);
  CUresult r = e && e->real ? real(out, e->real, type, flags) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) e->exported = 1; /* its memory may be mapped elsewhere: never released under it */
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult pt_vmm_props(void *realp, CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real = (PFN_cuMemGetAllocationPropertiesFromHandle_v10020)realp;
  pthread_mutex_lock(&mu);
  struct vh *e = find(h);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (e && prop) {
    /* What PyTorch asked for, wherever the bytes are now. */
    *prop = e->prop;
    r = CUDA_SUCCESS;
  }
  (void)real;
  pthread_mutex_unlock(&mu);
  return r;
}

/* ---- figures ------------------------------------------------------------- */

void pt_vmm_figures(struct pt_vmm_figures *f) {
  memset(f, 0, sizeof *f);
  pthread_mutex_lock(&mu);
  for (uint64_t i = 0; i < ntab; i++) {
    const struct vh *e = &tab[i];
    if (!e->used) continue;
    f->handles++;
    if (e->host) f->host_bytes += e->size;
    else f->device_bytes += e->size;
    if (e->exported) f->exported++;
    if (e->asleep) f->asleep_bytes += e->size;
  }
  pthread_mutex_unlock(&mu);
}

uint64_t pt_vmm_host_bytes(void) { return __atomic_load_n(&S.host_bytes, __ATOMIC_RELAXED); }

/* ---- sleep and wake -------------------------------------------------------- */

/* Whether sleep releases e: a device handle PyTorch mapped once and whole,
 * shared with no other process. */
static bool sleeper(const struct vh *e) {
  return e->used && e->real && e->va && !e->host && !e->exported && !e->twice && !e->asleep && e->nacc;
}

/* Every context that holds kept memory, synchronised (the gate is closed: no
 * new work comes). */
static int drain(void) {
  for (uint64_t i = 0; i < ntab; i++) {
    if (!tab[i].used || !tab[i].va) continue;
    bool seen = false;
    for (uint64_t j = 0; j < i && !seen; j++) seen = tab[j].used && tab[j].va && tab[j].ctx == tab[i].ctx;
    if (seen) continue;
    if (!push(tab[i].ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = pt_drv.cuCtxSynchronize();
    pop();
    if (r) return r;
  }
  return 0;
}

/* Host memory for n bytes of copies: ordinary memory (huge pages asked for),
 * page-locked where the driver can (full-speed copies; pageable ones work
 * too). 0, or out of memory. */
static int host_get(uint64_t n, char **buf, bool *reg) {
  char *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  (void)madvise(b, n, MADV_HUGEPAGE);
  *reg = pt_drv.cuMemHostRegister && pt_drv.cuMemHostRegister(b, n, 0) == CUDA_SUCCESS;
  *buf = b;
  return 0;
}

static void host_put(char *b, uint64_t n, bool reg) {
  if (!b) return;
  if (reg) (void)pt_drv.cuMemHostUnregister(b);
  munmap(b, n);
}

static void free_buf(void) {
  host_put(sleep_buf, sleep_len, sleep_registered);
  sleep_buf = NULL;
  sleep_len = 0;
  sleep_registered = false;
}

/* The host memory kept for the next sleep (`ponytail sleep --prepare`, or a
 * wake's under PONYTAIL_SLEEP_REUSE), as the pool keeps its own. */
static char *kept_buf;
static uint64_t kept_len;
static bool kept_registered;

static void free_kept(void) {
  host_put(kept_buf, kept_len, kept_registered);
  kept_buf = NULL;
  kept_len = 0;
  kept_registered = false;
}

/* New memory for e at its address, access as before; its bytes back from
 * the host copy unless discarded. */
static CUresult remake(struct vh *e, bool copy) {
  CUmemGenericAllocationHandle nh = 0;
  if (!push(e->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = pt_drv.cuMemCreate(&nh, e->size, &e->prop, 0);
  if (!r && (r = pt_drv.cuMemMap(e->va, e->size, 0, nh, 0)) != CUDA_SUCCESS) {
    (void)pt_drv.cuMemRelease(nh);
  } else if (!r && ((r = pt_drv.cuMemSetAccess(e->va, e->size, e->acc, e->nacc)) != CUDA_SUCCESS ||
                    (copy && (r = pt_drv.cuMemcpyHtoD(e->va, sleep_buf + e->host_off, e->size)) != CUDA_SUCCESS))) {
    (void)pt_drv.cuMemUnmap(e->va, e->size);
    (void)pt_drv.cuMemRelease(nh);
  }
  pop();
  if (!r) {
    e->real = nh;
    e->asleep = 0;
  }
  return r;
}

/* e's memory released (its bytes already copied). */
static CUresult unmake(struct vh *e) {
  if (!push(e->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = pt_drv.cuMemUnmap(e->va, e->size);
  if (!r) {
    (void)pt_drv.cuMemRelease(e->real);
    e->real = 0;
    e->asleep = 1;
  }
  pop();
  return r;
}

static void wake_done(uint64_t upto) {
  for (uint64_t i = 0; i < upto; i++)
    if (tab[i].used && tab[i].asleep && remake(&tab[i], !sleep_discard)) {
      S.errors++;
      PT_INTERNAL_ERROR();
    }
}

int pt_vmm_sleep(bool discard, struct pt_pool_sleep_info *sum, uint64_t *kept_bytes) {
  memset(sum, 0, sizeof *sum);
  *kept_bytes = 0;
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&mu);
  uint64_t total = 0, t0 = pt_now_ns();
  for (uint64_t i = 0; i < ntab; i++) {
    if (sleeper(&tab[i])) {
      tab[i].host_off = total;
      total += tab[i].size;
    } else if (tab[i].used && !tab[i].host) {
      *kept_bytes += tab[i].size;
    }
  }
  int rc = total ? drain() : 0;
  if (!rc && total && !discard) {
    if (kept_buf && kept_len >= total) { /* prepared: the sleep only copies */
      sleep_buf = kept_buf, sleep_len = kept_len, sleep_registered = kept_registered;
      kept_buf = NULL, kept_len = 0, kept_registered = false;
      sum->reused_bytes = total;
    } else {
      free_kept();
      rc = host_get(total, &sleep_buf, &sleep_registered);
      if (!rc) sleep_len = total;
    }
  }
  sum->host_ns = pt_now_ns() - t0;
  /* Every copy first: a failure then leaves nothing changed. */
  uint64_t t1 = pt_now_ns();
  for (uint64_t i = 0; !rc && !discard && i < ntab; i++) {
    struct vh *e = &tab[i];
    if (!sleeper(e)) continue;
    if (!push(e->ctx)) rc = CUDA_ERROR_INVALID_CONTEXT;
    else {
      rc = pt_drv.cuMemcpyDtoH(sleep_buf + e->host_off, e->va, e->size);
      pop();
    }
    if (!rc) sum->copied_bytes += e->size;
  }
  uint64_t t2 = pt_now_ns();
  sum->copy_ns = t2 - t1;
  uint64_t i = 0;
  for (; !rc && i < ntab; i++) {
    struct vh *e = &tab[i];
    if (!sleeper(e)) continue;
    rc = unmake(e);
    if (!rc) {
      sum->handles++;
      sum->bytes += e->size;
    }
  }
  sum->map_ns = pt_now_ns() - t2;
  sleep_discard = discard;
  if (rc) {
    wake_done(i); /* those released before the failure, back with their bytes */
    free_buf();
    memset(sum, 0, sizeof *sum);
    S.errors++;
  } else if (sum->bytes) {
    S.sleeps++;
    S.slept_bytes += sum->bytes;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int pt_vmm_wake(struct pt_pool_sleep_info *sum) {
  memset(sum, 0, sizeof *sum);
  pthread_mutex_lock(&mu);
  uint64_t t0 = pt_now_ns();
  int rc = 0;
  for (uint64_t i = 0; !rc && i < ntab; i++) {
    struct vh *e = &tab[i];
    if (!e->used || !e->asleep) continue;
    rc = remake(e, !sleep_discard);
    if (!rc) {
      e->woke = 1;
      sum->handles++;
      sum->bytes += e->size;
      if (!sleep_discard) sum->copied_bytes += e->size;
    }
  }
  if (rc) {
    /* All back to sleep: the host copy still holds their bytes. */
    for (uint64_t i = 0; i < ntab; i++)
      if (tab[i].used && tab[i].woke) {
        tab[i].woke = 0;
        if (unmake(&tab[i])) S.errors++;
      }
    memset(sum, 0, sizeof *sum);
  } else if (sum->bytes) {
    S.wakes++;
  }
  /* Mapping and copying alternate per handle: the time is both's. */
  sum->map_ns = pt_now_ns() - t0;
  if (!sleep_discard) sum->copy_ns = sum->map_ns;
  pthread_mutex_unlock(&mu);
  return rc;
}

void pt_vmm_resleep(void) {
  pthread_mutex_lock(&mu);
  for (uint64_t i = 0; i < ntab; i++)
    if (tab[i].used && tab[i].woke) {
      tab[i].woke = 0;
      if (unmake(&tab[i])) {
        S.errors++;
        PT_INTERNAL_ERROR();
      }
    }
  if (S.wakes) S.wakes--;
  pthread_mutex_unlock(&mu);
}

void pt_vmm_wake_release(void) {
  pthread_mutex_lock(&mu);
  for (uint64_t i = 0; i < ntab; i++) tab[i].woke = 0;
  if (sleep_buf && pt_opt_bool(PT_OPT_SLEEP_REUSE) && !kept_buf) {
    kept_buf = sleep_buf, kept_len = sleep_len, kept_registered = sleep_registered;
    sleep_buf = NULL, sleep_len = 0, sleep_registered = false;
  }
  free_buf();
  pthread_mutex_unlock(&mu);
}

int pt_vmm_prepare(struct pt_pool_sleep_info *sum) {
  memset(sum, 0, sizeof *sum);
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&mu);
  uint64_t total = 0;
  for (uint64_t i = 0; i < ntab; i++)
    if (sleeper(&tab[i])) total += tab[i].size;
  bool have = kept_len >= total;
  pthread_mutex_unlock(&mu);
  if (!total) return 0;
  if (have) {
    sum->reused_bytes = total;
    return 0;
  }
  /* Got without the lock: faulting in and pinning gigabytes takes seconds,
   * and PyTorch may map meanwhile (a later sleep then gets the rest). */
  uint64_t t0 = pt_now_ns();
  char *b = NULL;
  bool reg = false;
  int rc = host_get(total, &b, &reg);
  sum->host_ns = pt_now_ns() - t0;
  if (rc) return rc;
  pthread_mutex_lock(&mu);
  free_kept();
  kept_buf = b, kept_len = total, kept_registered = reg;
  pthread_mutex_unlock(&mu);
  sum->bytes = total;
  return 0;
}

uint64_t pt_vmm_unprepare(void) {
  pthread_mutex_lock(&mu);
  uint64_t n = kept_len;
  free_kept();
  pthread_mutex_unlock(&mu);
  return n;
}

/* ---- the host tier's move back --------------------------------------------- */

static bool movable(const struct vh *e) { return e->used && e->host && e->va && e->real && !e->exported && !e->twice && e->nacc; }

/* Room on e's device for e beyond the reserve (in e's context). */
static bool room_for(const struct vh *e) {
  size_t fr = 0, tot = 0;
  bool ok = push(e->ctx);
  if (ok) {
    ok = pt_drv.cuMemGetInfo && pt_drv.cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS && fr >= e->size + R.tier_reserve;
    pop();
  }
  if (ok && R.limit && R.pool_on) {
    struct pt_pool *p = pool_at(e->dev);
    struct pt_pool_usage u;
    if (p) {
      pt_pool_usage(p, &u);
      ok = u.physical_bytes + u.passthrough_bytes + e->size <= R.limit;
    }
  }
  return ok;
}

/* e's bytes into new device memory at its address. In e's context. */
static CUresult move_in(struct vh *e, uint8_t *charged) {
  CUmemGenericAllocationHandle nd = 0;
  CUdeviceptr tmp = 0;
  CUmemAccessDesc own = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = e->dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (!charge(e->dev, e->size, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = pt_drv.cuMemCreate(&nd, e->size, &e->prop, 0);
  if (r) goto out;
  r = pt_drv.cuMemAddressReserve(&tmp, e->size, 0, 0, 0);
  if (r) goto release;
  if ((r = pt_drv.cuMemMap(tmp, e->size, 0, nd, 0)) != CUDA_SUCCESS) goto unreserve;
  /* A device-to-device copy may return before it is done: waited for before
   * the host memory is unmapped. */
  if ((r = pt_drv.cuMemSetAccess(tmp, e->size, &own, 1)) != CUDA_SUCCESS ||
      (r = pt_drv.cuMemcpyDtoD(tmp, e->va, e->size)) != CUDA_SUCCESS || (r = pt_drv.cuCtxSynchronize()) != CUDA_SUCCESS) {
    (void)pt_drv.cuMemUnmap(tmp, e->size);
    goto unreserve;
  }
  (void)pt_drv.cuMemUnmap(tmp, e->size);
  (void)pt_drv.cuMemAddressFree(tmp, e->size);
  /* The host memory out, the copy in, at the same address. */
  if ((r = pt_drv.cuMemUnmap(e->va, e->size)) != CUDA_SUCCESS) goto release;
  if ((r = pt_drv.cuMemMap(e->va, e->size, 0, nd, 0)) != CUDA_SUCCESS ||
      (r = pt_drv.cuMemSetAccess(e->va, e->size, e->acc, e->nacc)) != CUDA_SUCCESS) {
    (void)pt_drv.cuMemUnmap(e->va, e->size);
    /* The host memory back where it was: the bytes never left it. */
    if (pt_drv.cuMemMap(e->va, e->size, 0, e->real, 0) ||
        pt_drv.cuMemSetAccess(e->va, e->size, e->acc, e->nacc)) {
      S.errors++;
      PT_INTERNAL_ERROR();
      pt_warn("host tier: PyTorch's memory at %#llx could not be mapped back after a failed move",
              (unsigned long long)e->va);
    }
    goto release;
  }
  (void)pt_drv.cuMemRelease(e->real);
  account(e, -1);
  e->real = nd;
  e->host = 0;
  e->charged = *charged;
  account(e, 1);
  S.tier_moved_bytes += e->size;
  return CUDA_SUCCESS;
unreserve:
  (void)pt_drv.cuMemAddressFree(tmp, e->size);
release:
  (void)pt_drv.cuMemRelease(nd);
out:
  if (*charged) uncharge(e->dev, e->size);
  *charged = 0;
  return r;
}

int pt_vmm_promote(uint64_t *moved) {
  *moved = 0;
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&mu);
  int rc = S.host_bytes ? drain() : 0;
  for (uint64_t i = 0; !rc && i < ntab; i++) {
    struct vh *e = &tab[i];
    if (!movable(e) || !room_for(e)) continue;
    uint8_t charged = 0;
    if (!push(e->ctx)) continue;
    CUresult r = move_in(e, &charged);
    pop();
    if (r == CUDA_SUCCESS) *moved += e->size;
    else if (r != CUDA_ERROR_OUT_OF_MEMORY) rc = r;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

bool pt_vmm_tier_room(void) {
  if (!pt_vmm_any()) return false;
  pthread_mutex_lock(&mu);
  bool room = false;
  /* One driver query per device, for its smallest movable segment (the
   * mover asks every second while anything stays on the host). */
  bool asked[PT_ROUTE_MAX_DEV] = {false};
  for (uint64_t i = 0; i < ntab && !room && S.host_bytes; i++) {
    const struct vh *e = &tab[i], *small = e;
    if (!movable(e) || asked[e->dev]) continue;
    asked[e->dev] = true;
    for (uint64_t j = i + 1; j < ntab; j++)
      if (movable(&tab[j]) && tab[j].dev == e->dev && tab[j].size < small->size) small = &tab[j];
    room = room_for(small);
  }
  pthread_mutex_unlock(&mu);
  return room;
}

/* ---- stats --------------------------------------------------------------- */

#define VMM_STATS(X)                                                                          \
  X(handles) X(bytes) X(peak_bytes) X(host_bytes) X(peak_host_bytes) X(creates) X(releases)   \
  X(tier_allocs) X(tier_deferrals) X(tier_refusals) X(tier_moved_bytes) X(limit_rejections)   \
  X(sleeps) X(slept_bytes) X(wakes) X(errors)

void pt_vmm_stats_json(struct pt_jw *w) {
  pthread_mutex_lock(&mu);
  pt_jw_obj_begin(w, "torch_vmm");
  pt_jw_bool(w, "on", __atomic_load_n(&vmm_on, __ATOMIC_RELAXED) > 0); /* false too where no cuMemCreate came */
#define VMM_JSON(n) pt_jw_u64(w, #n, __atomic_load_n(&S.n, __ATOMIC_RELAXED));
  VMM_STATS(VMM_JSON)
#undef VMM_JSON
  pt_jw_obj_end(w);
  pthread_mutex_unlock(&mu);
}

void pt_vmm_stats_text(FILE *f) {
  pthread_mutex_lock(&mu);
  if (S.creates)
    fprintf(f, "  alloc: PyTorch's own mapped memory (expandable segments): %" PRIu64 " handles kept, %.1f MiB on the "
               "device (peak %.1f MiB), %.1f MiB on the host tier (peak %.1f MiB, %" PRIu64 " handles, moved back "
               "%.1f MiB, first asks answered out-of-memory %" PRIu64 ", refused %" PRIu64 "), limit rejections %"
               PRIu64 ", sleeps %" PRIu64 " (%.1f MiB released), wakes %" PRIu64 "\n",
            S.creates, (double)S.bytes / 1048576.0, (double)S.peak_bytes / 1048576.0, (double)S.host_bytes / 1048576.0,
            (double)S.peak_host_bytes / 1048576.0, S.tier_allocs, (double)S.tier_moved_bytes / 1048576.0,
            S.tier_deferrals, S.tier_refusals, S.limit_rejections, S.sleeps, (double)S.slept_bytes / 1048576.0,
            S.wakes);
  pthread_mutex_unlock(&mu);
}

void pt_vmm_atfork_child(void) {
  /* The parent's handles are not the child's (CUDA does not survive fork). */
  pthread_mutex_init(&mu, NULL);
  free(tab);
  tab = NULL;
  ntab = captab = nlive = 0;
  memset(&S, 0, sizeof S);
  sleep_discard = sleep_registered = kept_registered = false;
  sleep_buf = kept_buf = NULL;
  sleep_len = kept_len = 0;
  __atomic_store_n(&any_kept, 0, __ATOMIC_RELEASE);
}
