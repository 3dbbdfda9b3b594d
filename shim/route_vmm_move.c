/* What moves the physical memory behind PyTorch's kept handles, with the
 * process held at its gate (shim/route_vmm.h): sleep and wake, the host
 * memory of the next sleep (prepare, PONYTAIL_SLEEP_REUSE), and the host
 * tier's move back to the device. The table is shim/route_vmm.c's. */
#include <sys/mman.h>

#include "common/options.h"
#include "shim/route_vmm_internal.h"

/* The sleep's host copy, under vmm_mu. */
static char *sleep_buf;
static uint64_t sleep_len;
static bool sleep_registered, sleep_discard;
/* The host memory kept for the next sleep (`ponytail sleep --prepare`, or a
 * wake's under PONYTAIL_SLEEP_REUSE), as the pool keeps its own. */
static char *kept_buf;
static uint64_t kept_len;
static bool kept_registered;

static bool push(CUcontext c) { return c && pt_drv.cuCtxPushCurrent && pt_drv.cuCtxPushCurrent(c) == CUDA_SUCCESS; }
static void pop(void) {
  CUcontext old;
  (void)pt_drv.cuCtxPopCurrent(&old);
}

/* ---- sleep and wake -------------------------------------------------------- */

/* Whether sleep releases e: a device handle PyTorch mapped once and whole,
 * shared with no other process. */
static bool sleeper(const struct vh *e) {
  return e->used && e->real && e->va && !e->host && !e->exported && !e->twice && !e->asleep && e->nacc;
}

/* Every context that holds kept memory, synchronised (the gate is closed: no
 * new work comes). */
static int drain(void) {
  for (uint64_t i = 0; i < vmm_ntab; i++) {
    if (!vmm_tab[i].used || !vmm_tab[i].va) continue;
    bool seen = false;
    for (uint64_t j = 0; j < i && !seen; j++) seen = vmm_tab[j].used && vmm_tab[j].va && vmm_tab[j].ctx == vmm_tab[i].ctx;
    if (seen) continue;
    if (!push(vmm_tab[i].ctx)) return CUDA_ERROR_INVALID_CONTEXT;
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
    if (vmm_tab[i].used && vmm_tab[i].asleep && remake(&vmm_tab[i], !sleep_discard)) {
      vmm_stats.errors++;
      PT_INTERNAL_ERROR();
    }
}

int pt_vmm_sleep(bool discard, struct pt_pool_sleep_info *sum, uint64_t *kept_bytes) {
  memset(sum, 0, sizeof *sum);
  *kept_bytes = 0;
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&vmm_mu);
  uint64_t total = 0, t0 = pt_now_ns();
  for (uint64_t i = 0; i < vmm_ntab; i++) {
    if (sleeper(&vmm_tab[i])) {
      vmm_tab[i].host_off = total;
      total += vmm_tab[i].size;
    } else if (vmm_tab[i].used && !vmm_tab[i].host) {
      *kept_bytes += vmm_tab[i].size;
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
  for (uint64_t i = 0; !rc && !discard && i < vmm_ntab; i++) {
    struct vh *e = &vmm_tab[i];
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
  for (; !rc && i < vmm_ntab; i++) {
    struct vh *e = &vmm_tab[i];
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
    vmm_stats.errors++;
  } else if (sum->bytes) {
    vmm_stats.sleeps++;
    vmm_stats.slept_bytes += sum->bytes;
  }
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

int pt_vmm_wake(struct pt_pool_sleep_info *sum) {
  memset(sum, 0, sizeof *sum);
  pthread_mutex_lock(&vmm_mu);
  uint64_t t0 = pt_now_ns();
  int rc = 0;
  for (uint64_t i = 0; !rc && i < vmm_ntab; i++) {
    struct vh *e = &vmm_tab[i];
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
    for (uint64_t i = 0; i < vmm_ntab; i++)
      if (vmm_tab[i].used && vmm_tab[i].woke) {
        vmm_tab[i].woke = 0;
        if (unmake(&vmm_tab[i])) vmm_stats.errors++;
      }
    memset(sum, 0, sizeof *sum);
  } else if (sum->bytes) {
    vmm_stats.wakes++;
  }
  /* Mapping and copying alternate per handle: the time is both's. */
  sum->map_ns = pt_now_ns() - t0;
  if (!sleep_discard) sum->copy_ns = sum->map_ns;
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

void pt_vmm_resleep(void) {
  pthread_mutex_lock(&vmm_mu);
  for (uint64_t i = 0; i < vmm_ntab; i++)
    if (vmm_tab[i].used && vmm_tab[i].woke) {
      vmm_tab[i].woke = 0;
      if (unmake(&vmm_tab[i])) {
        vmm_stats.errors++;
        PT_INTERNAL_ERROR();
      }
    }
  if (vmm_stats.wakes) vmm_stats.wakes--;
  pthread_mutex_unlock(&vmm_mu);
}

void pt_vmm_wake_release(void) {
  pthread_mutex_lock(&vmm_mu);
  for (uint64_t i = 0; i < vmm_ntab; i++) vmm_tab[i].woke = 0;
  if (sleep_buf && pt_opt_bool(PT_OPT_SLEEP_REUSE) && !kept_buf) {
    kept_buf = sleep_buf, kept_len = sleep_len, kept_registered = sleep_registered;
    sleep_buf = NULL, sleep_len = 0, sleep_registered = false;
  }
  free_buf();
  pthread_mutex_unlock(&vmm_mu);
}

int pt_vmm_prepare(struct pt_pool_sleep_info *sum) {
  memset(sum, 0, sizeof *sum);
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&vmm_mu);
  uint64_t total = 0;
  for (uint64_t i = 0; i < vmm_ntab; i++)
    if (sleeper(&vmm_tab[i])) total += vmm_tab[i].size;
  bool have = kept_len >= total;
  pthread_mutex_unlock(&vmm_mu);
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
  pthread_mutex_lock(&vmm_mu);
  free_kept();
  kept_buf = b, kept_len = total, kept_registered = reg;
  pthread_mutex_unlock(&vmm_mu);
  sum->bytes = total;
  return 0;
}

uint64_t pt_vmm_unprepare(void) {
  pthread_mutex_lock(&vmm_mu);
  uint64_t n = kept_len;
  free_kept();
  pthread_mutex_unlock(&vmm_mu);
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
  if (!vmm_charge(e->dev, e->size, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
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
      vmm_stats.errors++;
      PT_INTERNAL_ERROR();
      pt_warn("host tier: PyTorch's memory at %#llx could not be mapped back after a failed move",
              (unsigned long long)e->va);
    }
    goto release;
  }
  (void)pt_drv.cuMemRelease(e->real);
  vmm_account(e, -1);
  e->real = nd;
  e->host = 0;
  e->charged = *charged;
  vmm_account(e, 1);
  vmm_stats.tier_moved_bytes += e->size;
  return CUDA_SUCCESS;
unreserve:
  (void)pt_drv.cuMemAddressFree(tmp, e->size);
release:
  (void)pt_drv.cuMemRelease(nd);
out:
  if (*charged) vmm_uncharge(e->dev, e->size);
  *charged = 0;
  return r;
}

int pt_vmm_promote(uint64_t *moved) {
  *moved = 0;
  if (!pt_vmm_any() || !pt_real_driver()) return 0;
  pthread_mutex_lock(&vmm_mu);
  int rc = vmm_stats.host_bytes ? drain() : 0;
  for (uint64_t i = 0; !rc && i < vmm_ntab; i++) {
    struct vh *e = &vmm_tab[i];
    if (!movable(e) || !room_for(e)) continue;
    uint8_t charged = 0;
    if (!push(e->ctx)) continue;
    CUresult r = move_in(e, &charged);
    pop();
    if (r == CUDA_SUCCESS) *moved += e->size;
    else if (r != CUDA_ERROR_OUT_OF_MEMORY) rc = r;
  }
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

bool pt_vmm_tier_room(void) {
  if (!pt_vmm_any()) return false;
  pthread_mutex_lock(&vmm_mu);
  bool room = false;
  /* One driver query per device, for its smallest movable segment (the
   * mover asks every second while anything stays on the host). */
  bool asked[PT_ROUTE_MAX_DEV] = {false};
  for (uint64_t i = 0; i < vmm_ntab && !room && vmm_stats.host_bytes; i++) {
    const struct vh *e = &vmm_tab[i], *small = e;
    if (!movable(e) || asked[e->dev]) continue;
    asked[e->dev] = true;
    for (uint64_t j = i + 1; j < vmm_ntab; j++)
      if (movable(&vmm_tab[j]) && vmm_tab[j].dev == e->dev && vmm_tab[j].size < small->size) small = &vmm_tab[j];
    room = room_for(small);
  }
  pthread_mutex_unlock(&vmm_mu);
  return room;
}

void vmm_move_atfork_child(void) {
  sleep_discard = sleep_registered = kept_registered = false;
  sleep_buf = kept_buf = NULL;
  sleep_len = kept_len = 0;
}
