/* PyTorch's own mapped memory (expandable segments): the handle table, the
 * translated calls, the host tier's placement, the figures and stats
 * (shim/route_vmm.h; sleep, wake and the move back: shim/route_vmm_move.c).
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

#include "common/options.h"
#include "shim/control.h"
#include "shim/route_vmm_internal.h"

#define VMM_ASK_NS (5ull * 1000000000ull) /* the second ask of PONYTAIL_HOST_TIER_RETRY */

pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
struct vh *vmm_tab;
uint64_t vmm_ntab;
static uint64_t captab, nlive;
static int any_kept; /* atomic: set at the first kept handle */

struct pt_vmm_stats vmm_stats;

static void count(uint64_t *c) {
  pthread_mutex_lock(&vmm_mu);
  (*c)++;
  pthread_mutex_unlock(&vmm_mu);
}

static __thread uint64_t denied_ns; /* PONYTAIL_HOST_TIER_RETRY: this thread's last refused first ask */

/* ---- helpers ------------------------------------------------------------- */

static struct vh *find(CUmemGenericAllocationHandle h) {
  if (!pt_vmm_is_ours(h)) return NULL;
  uint64_t i = (h & 0xffffffffu) - 1;
  return i < vmm_ntab && vmm_tab[i].used && vmm_tab[i].gen == (uint16_t)(h >> 32) ? &vmm_tab[i] : NULL;
}

static CUmemGenericAllocationHandle id_of(const struct vh *e) {
  return VMM_TAG | (uint64_t)e->gen << 32 | (uint64_t)(e - vmm_tab + 1);
}

static struct vh *slot(void) {
  for (uint64_t i = 0; i < vmm_ntab && nlive < vmm_ntab; i++)
    if (!vmm_tab[i].used) return &vmm_tab[i];
  if (vmm_ntab == 0xffffffffu) return NULL;
  if (vmm_ntab == captab) {
    uint64_t cap = captab ? captab * 2 : 256;
    struct vh *n = realloc(vmm_tab, cap * sizeof *n);
    if (!n) return NULL;
    vmm_tab = n;
    captab = cap;
  }
  vmm_tab[vmm_ntab].gen = 0;
  return &vmm_tab[vmm_ntab++];
}

void vmm_account(struct vh *e, int sign) {
  int64_t b = sign * (int64_t)e->size;
  if (e->host) {
    /* Read without the lock by pooled frees (pt_vmm_host_bytes). */
    __atomic_store_n(&vmm_stats.host_bytes, vmm_stats.host_bytes + b, __ATOMIC_RELAXED);
    if (vmm_stats.host_bytes > vmm_stats.peak_host_bytes) vmm_stats.peak_host_bytes = vmm_stats.host_bytes;
  } else {
    vmm_stats.bytes += b;
    if (vmm_stats.bytes > vmm_stats.peak_bytes) vmm_stats.peak_bytes = vmm_stats.bytes;
  }
  vmm_stats.handles += sign;
}

/* Drops e: its driver handle released (the driver frees the memory once no
 * mapping holds it), the limit's charge returned. Under vmm_mu. */
static void drop(struct vh *e) {
  if (e->real && pt_drv.cuMemRelease && pt_drv.cuMemRelease(e->real) != CUDA_SUCCESS) {
    vmm_stats.errors++;
    PT_INTERNAL_ERROR();
  }
  if (e->charged) vmm_uncharge(e->dev, e->size);
  vmm_account(e, -1);
  uint16_t gen = e->gen;
  memset(e, 0, sizeof *e);
  e->gen = (uint16_t)(gen + 1); /* the next handle in this slot has another value */
  nlive--;
  vmm_stats.releases++;
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
bool vmm_charge(int dev, uint64_t size, uint8_t *charged) {
  *charged = 0;
  if (!R.limit || !R.pool_on) return true;
  struct pt_pool *p = rt_pool_get(dev);
  if (!p) return true;
  if (!rt_limit_reserve(p, size)) return false;
  *charged = 1;
  return true;
}

void vmm_uncharge(int dev, uint64_t size) {
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
  bool device = vmm_charge(dev, size, &charged);
  if (!device) {
    count(&vmm_stats.limit_rejections);
    RC_INC(passthrough_rejections);
  }
  device = device && beyond_reserve(size);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (device) r = real(&rh, size, prop, flags);
  if (r != CUDA_SUCCESS && charged) {
    vmm_uncharge(dev, size);
    charged = 0;
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY && R.tier) {
    /* The host tier: the first ask answered out-of-memory (PyTorch then
     * frees its cache and maps again), then every ask of this thread for 5 s
     * covered, up to PONYTAIL_HOST_TIER less what the pool holds there. Not
     * the pool's ask-twice (pt_tier_second_ask), which covers one second ask
     * and treats the third as a first: one PyTorch map asks for many segments
     * of the same size, and a denial in the middle would fail it again at
     * each of its retries, until PyTorch raised out-of-memory. */
    uint64_t now = pt_now_ns();
    struct pt_pool *p = pool_at(dev);
    uint64_t used = (p ? pt_pool_tier_bytes(p) : 0) + pt_vmm_host_bytes();
    /* No second ask comes while a capture is open (PyTorch does not empty its cache then). */
    if (R.tier_retry && pt_captures_open() <= 0 && !(denied_ns && now - denied_ns < VMM_ASK_NS)) {
      denied_ns = now;
      count(&vmm_stats.tier_deferrals);
      PT_LOG_ONCE(PT_LOG_INFO, "host tier: PyTorch's first mapping past device %d (%zu bytes) answered "
                  "out-of-memory, so that it empties its cache first; its next within 5 s goes to host memory",
                  dev, size);
    } else if (used + size > R.tier) {
      count(&vmm_stats.tier_refusals);
      PT_LOG_ONCE(PT_LOG_WARN, "host tier: PyTorch's mapped memory is past PONYTAIL_HOST_TIER too; "
                  "its allocation fails with out-of-memory");
    } else if ((r = create_host(real, &rh, size, prop)) == CUDA_SUCCESS) {
      host = 1;
      PT_LOG_ONCE(PT_LOG_INFO, "host tier in use on device %d: PyTorch's mapped memory past the device goes to "
                  "page-locked host memory at its own addresses (read over PCIe), back to the device as it frees",
                  dev);
    } else {
      count(&vmm_stats.tier_refusals);
      PT_LOG_ONCE(PT_LOG_WARN, "host tier: no page-locked host memory for PyTorch's mapped memory (CUDA error %d); "
                  "its allocation fails with out-of-memory", (int)r);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&vmm_mu);
  struct vh *e = slot();
  if (!e) {
    pthread_mutex_unlock(&vmm_mu);
    /* No record: PyTorch gets the driver's handle, as stock. */
    if (host) {
      (void)pt_drv.cuMemRelease(rh);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (charged) vmm_uncharge(dev, size);
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
  vmm_account(e, 1);
  vmm_stats.creates++;
  if (host) vmm_stats.tier_allocs++;
  *h = id_of(e);
  pthread_mutex_unlock(&vmm_mu);
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
  pthread_mutex_lock(&vmm_mu);
  struct vh *e = find(h);
  if (!e || !e->app) {
    pthread_mutex_unlock(&vmm_mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->app = 0;
  bool kick = e->host || vmm_stats.host_bytes;
  if (!e->va) drop(e); /* else its unmap drops it: the mapping keeps the memory */
  pthread_mutex_unlock(&vmm_mu);
  if (kick && R.tier) pt_tier_kick();
  return CUDA_SUCCESS;
}

CUresult pt_vmm_map(void *realp, CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                    unsigned long long flags) {
  PFN_cuMemMap_v10020 real = (PFN_cuMemMap_v10020)realp;
  pthread_mutex_lock(&vmm_mu);
  struct vh *e = find(h);
  CUresult r = e && e->real ? real(va, size, off, e->real, flags) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    if (!e->va && !e->twice && !off && size == e->size) e->va = va;
    else e->twice = 1; /* a second or partial mapping: its address is not known here */
  }
  pthread_mutex_unlock(&vmm_mu);
  return r;
}

CUresult pt_vmm_unmap(void *realp, CUdeviceptr va, size_t size) {
  PFN_cuMemUnmap_v10020 real = (PFN_cuMemUnmap_v10020)realp;
  pthread_mutex_lock(&vmm_mu);
  CUresult r = real(va, size);
  bool kick = false;
  if (r == CUDA_SUCCESS) {
    for (uint64_t i = 0; i < vmm_ntab; i++) {
      struct vh *e = &vmm_tab[i];
      if (!e->used || !e->va || e->va < va || e->va - va >= size) continue;
      e->va = 0;
      kick |= e->host;
      if (!e->app) drop(e);
    }
  }
  kick = kick && vmm_stats.host_bytes; /* room freed while something is on the host */
  pthread_mutex_unlock(&vmm_mu);
  if (kick && R.tier) pt_tier_kick();
  return r;
}

CUresult pt_vmm_set_access(void *realp, CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count) {
  PFN_cuMemSetAccess_v10020 real = (PFN_cuMemSetAccess_v10020)realp;
  pthread_mutex_lock(&vmm_mu);
  CUresult r = real(va, size, desc, count);
  if (r == CUDA_SUCCESS && desc) {
    for (uint64_t i = 0; i < vmm_ntab; i++) {
      struct vh *e = &vmm_tab[i];
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
  pthread_mutex_unlock(&vmm_mu);
  return r;
}

CUresult pt_vmm_export(void *realp, void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                       unsigned long long flags) {
  PFN_cuMemExportToShareableHandle_v10020 real = (PFN_cuMemExportToShareableHandle_v10020)realp;
  pthread_mutex_lock(&vmm_mu);
  struct vh *e = find(h);
  CUresult r = e && e->real ? real(out, e->real, type, flags) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) e->exported = 1; /* its memory may be mapped elsewhere: never released under it */
  pthread_mutex_unlock(&vmm_mu);
  return r;
}

CUresult pt_vmm_props(void *realp, CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real = (PFN_cuMemGetAllocationPropertiesFromHandle_v10020)realp;
  pthread_mutex_lock(&vmm_mu);
  struct vh *e = find(h);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (e && prop) {
    /* What PyTorch asked for, wherever the bytes are now. */
    *prop = e->prop;
    r = CUDA_SUCCESS;
  }
  (void)real;
  pthread_mutex_unlock(&vmm_mu);
  return r;
}

/* ---- figures ------------------------------------------------------------- */

void pt_vmm_figures(struct pt_vmm_figures *f) {
  memset(f, 0, sizeof *f);
  pthread_mutex_lock(&vmm_mu);
  for (uint64_t i = 0; i < vmm_ntab; i++) {
    const struct vh *e = &vmm_tab[i];
    if (!e->used) continue;
    f->handles++;
    if (e->host) f->host_bytes += e->size;
    else f->device_bytes += e->size;
    if (e->exported) f->exported++;
    if (e->asleep) f->asleep_bytes += e->size;
  }
  pthread_mutex_unlock(&vmm_mu);
}

uint64_t pt_vmm_host_bytes(void) { return __atomic_load_n(&vmm_stats.host_bytes, __ATOMIC_RELAXED); }

/* ---- stats --------------------------------------------------------------- */

#define VMM_STATS(X)                                                                          \
  X(handles) X(bytes) X(peak_bytes) X(host_bytes) X(peak_host_bytes) X(creates) X(releases)   \
  X(tier_allocs) X(tier_deferrals) X(tier_refusals) X(tier_moved_bytes) X(limit_rejections)   \
  X(sleeps) X(slept_bytes) X(wakes) X(errors)

void pt_vmm_stats_json(struct pt_jw *w) {
  pthread_mutex_lock(&vmm_mu);
  pt_jw_obj_begin(w, "torch_vmm");
  pt_jw_bool(w, "on", __atomic_load_n(&vmm_on, __ATOMIC_RELAXED) > 0); /* false too where no cuMemCreate came */
#define VMM_JSON(n) pt_jw_u64(w, #n, __atomic_load_n(&vmm_stats.n, __ATOMIC_RELAXED));
  VMM_STATS(VMM_JSON)
#undef VMM_JSON
  pt_jw_obj_end(w);
  pthread_mutex_unlock(&vmm_mu);
}

void pt_vmm_stats_text(FILE *f) {
  pthread_mutex_lock(&vmm_mu);
  if (vmm_stats.creates)
    fprintf(f, "  alloc: PyTorch's own mapped memory (expandable segments): %" PRIu64 " handles kept, %.1f MiB on the "
               "device (peak %.1f MiB), %.1f MiB on the host tier (peak %.1f MiB, %" PRIu64 " handles, moved back "
               "%.1f MiB, first asks answered out-of-memory %" PRIu64 ", refused %" PRIu64 "), limit rejections %"
               PRIu64 ", sleeps %" PRIu64 " (%.1f MiB released), wakes %" PRIu64 "\n",
            vmm_stats.creates, (double)vmm_stats.bytes / 1048576.0, (double)vmm_stats.peak_bytes / 1048576.0, (double)vmm_stats.host_bytes / 1048576.0,
            (double)vmm_stats.peak_host_bytes / 1048576.0, vmm_stats.tier_allocs, (double)vmm_stats.tier_moved_bytes / 1048576.0,
            vmm_stats.tier_deferrals, vmm_stats.tier_refusals, vmm_stats.limit_rejections, vmm_stats.sleeps, (double)vmm_stats.slept_bytes / 1048576.0,
            vmm_stats.wakes);
  pthread_mutex_unlock(&vmm_mu);
}

void pt_vmm_atfork_child(void) {
  /* The parent's handles are not the child's (CUDA does not survive fork). */
  pthread_mutex_init(&vmm_mu, NULL);
  free(vmm_tab);
  vmm_tab = NULL;
  vmm_ntab = captab = nlive = 0;
  memset(&vmm_stats, 0, sizeof vmm_stats);
  vmm_move_atfork_child();
  __atomic_store_n(&any_kept, 0, __ATOMIC_RELEASE);
}
