/* Sleep and wake of a whole pool (pool.h). Every mapped handle is released
 * and re-created later at the same place: the arenas keep their reserved
 * ranges, slot bits and handle lengths, so blocks, the free index and every
 * address the application holds stay as they were; only handles[] of the
 * sleeping slots is 0 until the wake.
 *
 * Each step that can fail runs before the pool's memory changes (host memory,
 * copies), or is undone on failure (a wake that cannot get device memory
 * releases what it had mapped again), so a failed request leaves the pool
 * entirely asleep or entirely awake.
 *
 * The bytes wait in one of three kinds of host memory (pool.h, sleep_host):
 * page-locked buffers (host_alloc; on the H100 cuMemHostAlloc gave 12 GiB
 * at 1.4 GB/s, 8.6 s of a 8.9 s sleep, bench/records/2026-12-07-core-sleep.md),
 * ordinary memory faulted in by the thread that gets it and then registered
 * (host_alloc's PT_HOST_BUF_REGISTERED; with helper threads they only fault
 * it in, PT_HOST_BUF_FAULTED, and the copying thread registers each piece,
 * host_lock), or host handles (create_host, the host
 * tier's kind of memory) mapped in a range of their own, copied device to
 * device. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "allocator/pool_internal.h"
#include "common/now_ns.h"

int pt_pool_drain(struct pt_pool *p) {
  pthread_mutex_lock(&p->mu);
  int rc = p->bk.ops->device_sync(p->bk.ctx);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

bool pt_pool_asleep(struct pt_pool *p) {
  pthread_mutex_lock(&p->mu);
  bool a = p->asleep;
  pthread_mutex_unlock(&p->mu);
  return a;
}

static uint64_t count_handles(const struct pt_pool *p) {
  uint64_t n = 0;
  for (int i = 0; i < p->narenas; i++) {
    const struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; s < a->nslots; s++)
      if (a->hlen[s] && pt_bit(a->bits, s)) n++;
  }
  return n;
}

/* The bytes sleep in host handles (else in buffers from host_alloc). */
static bool in_handles(const struct pt_pool *p) { return p->sleep_host == PT_SLEEP_IN_HANDLES; }

/* host_alloc's kind of buffer for this pool. */
static int buf_kind(const struct pt_pool *p) {
  return p->sleep_host == PT_SLEEP_IN_REGISTERED ? PT_HOST_BUF_REGISTERED : PT_HOST_BUF_PINNED;
}

static uintptr_t ent_va(const struct pt_pool *p, const struct pt_sleep_ent *e) {
  return p->arenas[e->arena].base + e->slot * p->gran;
}

/* Frees the host memory of entries [0, n), either kind. */
static void drop_host(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n) {
  const struct pt_backend_ops *o = p->bk.ops;
  for (uint64_t i = 0; i < n; i++) {
    if (e[i].host) {
      (void)o->host_free(p->bk.ctx, e[i].host, e[i].n * p->gran, e[i].faulted ? PT_HOST_BUF_FAULTED : buf_kind(p));
      e[i].host = NULL;
      e[i].faulted = false;
    }
    if (e[i].hmapped) (void)o->unmap(p->bk.ctx, e[i].hva, e[i].n * p->gran);
    if (e[i].hcreated) (void)o->release(p->bk.ctx, e[i].hh);
    e[i].hmapped = e[i].hcreated = false;
  }
}

/* Frees a set: its entries' host memory, its range, its array; empty after. */
static void drop_set(struct pt_pool *p, struct pt_sleep_set *s) {
  drop_host(p, s->e, s->n);
  if (s->va_size) (void)p->bk.ops->unreserve(p->bk.ctx, s->va, s->va_size);
  free(s->e);
  *s = (struct pt_sleep_set){0};
}

/* The host memory kept for the next sleep (sleep_reuse), all of it. */
static void drop_cache(struct pt_pool *p) {
  drop_set(p, &p->cache);
  p->st.host_kept_bytes = 0;
}

/* Entries [0, n) take the kept host memory of their size (sleep_reuse, or
 * pt_pool_sleep_prepare): a buffer as it is, a host handle unmapped from the
 * kept range (it is mapped again at the entry's place). What no entry takes
 * moves to *spare, for the caller to free once the device memory is released
 * (drop_set): a sleep gives the GPU back before it frees surplus host memory.
 * Returns the bytes taken. */
static uint64_t take_cached(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_sleep_set *spare) {
  uint64_t taken = 0;
  if (!p->cache.e) return 0;
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t k = 0; k < p->cache.n; k++) {
      struct pt_sleep_ent *c = &p->cache.e[k];
      if (c->n != e[i].n || !(c->host || c->hcreated)) continue;
      if (c->hmapped && p->bk.ops->unmap(p->bk.ctx, c->hva, c->n * p->gran)) continue;
      c->hmapped = false;
      e[i].host = c->host, e[i].hh = c->hh, e[i].hcreated = c->hcreated;
      c->host = NULL, c->hcreated = false;
      taken += e[i].n * p->gran;
      break;
    }
  *spare = p->cache;
  p->cache = (struct pt_sleep_set){0};
  p->st.host_kept_bytes = 0;
  return taken;
}

/* Getting page-locked memory is the kernel zeroing and pinning every page
 * (1.4 GB/s on one thread on the H100, bench/records/2026-12-07-core-sleep.md,
 * against 54 GB/s for the copy), so with sleep_threads > 1 that many helper
 * threads get it, entry by entry, while this thread maps (host handles) and
 * copies each entry as soon as its memory is there: the sleep takes about
 * the longer of the two instead of their sum. */
struct host_run {
  struct pt_pool *p;
  struct pt_sleep_ent *e;
  uint64_t n, step;
  bool fault_only; /* registered memory: helpers fault it in, the copying thread registers it */
  uint8_t *state; /* per entry: 0 pending, 1 ready, 2 failed */
  int stop;       /* set on the first failure: helpers take no more */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

struct host_job {
  struct host_run *r;
  uint64_t first;
  int rc;
};

/* Host memory (a buffer or a host handle, sleep_host) for one entry;
 * fault_only: a FAULTED buffer, to be registered by host_lock. */
static int get_one(struct pt_pool *p, struct pt_sleep_ent *e, bool fault_only) {
  const struct pt_backend_ops *o = p->bk.ops;
  size_t sz = e->n * p->gran;
  int rc;
  if (in_handles(p)) {
    rc = o->create_host(p->bk.ctx, sz, &e->hh);
    e->hcreated = !rc;
  } else {
    rc = o->host_alloc(p->bk.ctx, sz, fault_only ? PT_HOST_BUF_FAULTED : buf_kind(p), &e->host);
    if (rc) e->host = NULL;
    e->faulted = !rc && fault_only;
  }
  return rc;
}

static void *host_worker(void *arg) {
  struct host_job *j = arg;
  struct host_run *r = j->r;
  if (r->p->bk.ops->thread_start) r->p->bk.ops->thread_start(r->p->bk.ctx);
  for (uint64_t i = j->first; i < r->n && !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE); i += r->step) {
    if (__atomic_load_n(&r->state[i], __ATOMIC_ACQUIRE)) continue; /* kept from the last sleep */
    j->rc = get_one(r->p, &r->e[i], r->fault_only);
    pthread_mutex_lock(&r->mu);
    __atomic_store_n(&r->state[i], j->rc ? 2 : 1, __ATOMIC_RELEASE);
    if (j->rc) __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (j->rc) break;
  }
  return NULL;
}

/* Waits until entry i's memory is there (0) or can no longer come (1). */
static int wait_ready(struct host_run *r, uint64_t i) {
  pthread_mutex_lock(&r->mu);
  while (!__atomic_load_n(&r->state[i], __ATOMIC_ACQUIRE) && !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
    pthread_cond_wait(&r->cv, &r->mu);
  int ok = __atomic_load_n(&r->state[i], __ATOMIC_ACQUIRE) == 1;
  pthread_mutex_unlock(&r->mu);
  return ok ? 0 : 1;
}

/* Up to sleep_threads helpers getting host memory for entries [0, n), each
 * entry once (those that have memory already are skipped); the caller takes
 * each entry in order with helpers_get and ends with helpers_stop. */
enum { MAXT = 64 };
struct helpers {
  struct host_run run;
  struct host_job jobs[MAXT];
  pthread_t tid[MAXT];
  uint64_t started; /* 0: no helper runs, helpers_get gets each entry itself */
};

static void helpers_start(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct helpers *h) {
  uint64_t t = (uint64_t)p->sleep_threads < n ? (uint64_t)p->sleep_threads : n;
  if (t > MAXT) t = MAXT;
  /* Registered memory on helpers: they fault it in, the calling thread
   * registers each piece (helpers_get), so every driver call is its own. */
  h->run = (struct host_run){.p = p, .e = e, .n = n, .step = t > 1 ? t : 1,
                             .fault_only = p->sleep_host == PT_SLEEP_IN_REGISTERED && p->bk.ops->host_lock};
  h->started = 0;
  if (t <= 1 || !(h->run.state = calloc(n, 1))) return;
  pthread_mutex_init(&h->run.mu, NULL);
  pthread_cond_init(&h->run.cv, NULL);
  for (uint64_t i = 0; i < n; i++)
    if (e[i].host || e[i].hcreated) h->run.state[i] = 1;
  for (uint64_t k = 0; k < t; k++) {
    h->jobs[k] = (struct host_job){.r = &h->run, .first = k};
    if (pthread_create(&h->tid[h->started], NULL, host_worker, &h->jobs[k]) != 0) break;
    h->started++;
  }
  if (h->started < t) { /* the helpers that did start stop; the caller does it all */
    __atomic_store_n(&h->run.stop, 1, __ATOMIC_RELEASE);
    for (uint64_t k = 0; k < h->started; k++) pthread_join(h->tid[k], NULL);
    h->started = 0;
  }
}

/* Entry i's host memory, page-locked: the helper's (waited for) or got here.
 * 0, -1 (a helper failed: helpers_stop says how), or the backend's error. */
static int helpers_get(struct pt_pool *p, struct helpers *h, uint64_t i) {
  struct pt_sleep_ent *e = &h->run.e[i];
  int rc = 0;
  if (h->started) rc = wait_ready(&h->run, i) ? -1 : 0;
  else if (!e->host && !e->hcreated) rc = get_one(p, e, false);
  if (!rc && e->faulted && !(rc = p->bk.ops->host_lock(p->bk.ctx, e->host, e->n * p->gran))) e->faulted = false;
  return rc;
}

/* Stops and joins the helpers; rc: the caller's result, where -1 becomes the
 * failed helper's error. */
static int helpers_stop(struct pt_pool *p, struct helpers *h, int rc) {
  if (h->started) {
    __atomic_store_n(&h->run.stop, 1, __ATOMIC_RELEASE); /* on a failure here: the helpers stop too */
    for (uint64_t k = 0; k < h->started; k++) pthread_join(h->tid[k], NULL);
    for (uint64_t k = 0; k < h->started && rc == -1; k++)
      if (h->jobs[k].rc) rc = h->jobs[k].rc; /* the helper's error, not the wait's */
    if (rc == -1) rc = p->bk.ops->err_oom;  /* (a wait ends only on a helper's failure) */
  }
  if (h->run.state) {
    pthread_cond_destroy(&h->run.cv);
    pthread_mutex_destroy(&h->run.mu);
    free(h->run.state);
    h->run.state = NULL;
  }
  return rc;
}

/* Host memory for set s's entries and their bytes copied into it; *spare
 * gets the kept host memory no entry took (take_cached). On failure the pool
 * itself was not touched; the caller frees what s and *spare hold (drop_set). */
static int keep(struct pt_pool *p, struct pt_sleep_set *s, struct pt_pool_sleep_info *info, struct pt_sleep_set *spare) {
  const struct pt_backend_ops *o = p->bk.ops;
  struct pt_sleep_ent *e = s->e;
  const uint64_t n = s->n;
  int rc = 0;
  uint64_t t0 = pt_now_ns();
  if (in_handles(p)) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += e[i].n * p->gran;
    if (total && !(rc = o->reserve(p->bk.ctx, total, &s->va))) s->va_size = total;
    uintptr_t at = s->va;
    for (uint64_t i = 0; i < n; i++) {
      e[i].hva = at;
      at += e[i].n * p->gran;
    }
  }
  uint64_t reused = rc ? 0 : take_cached(p, e, n, spare);
  p->st.host_reused_bytes += reused;
  info->reused_bytes += reused;
  uint64_t wait_ns = pt_now_ns() - t0, copy_ns = 0;

  struct helpers h;
  h.started = 0, h.run.state = NULL;
  if (!rc) helpers_start(p, e, n, &h);
  for (uint64_t i = 0; i < n && !rc; i++) {
    size_t sz = e[i].n * p->gran;
    uint64_t t1 = pt_now_ns();
    rc = helpers_get(p, &h, i);
    if (!rc && in_handles(p) && !(rc = o->map(p->bk.ctx, e[i].hva, sz, e[i].hh))) {
      e[i].hmapped = true;
      rc = o->set_access(p->bk.ctx, e[i].hva, sz);
    }
    uint64_t t2 = pt_now_ns();
    wait_ns += t2 - t1;
    if (rc) break;
    rc = in_handles(p) ? o->copy_d2d(p->bk.ctx, e[i].hva, ent_va(p, &e[i]), sz)
                       : o->copy_to_host(p->bk.ctx, e[i].host, ent_va(p, &e[i]), sz);
    copy_ns += pt_now_ns() - t2;
    info->copied_bytes += sz;
  }
  rc = helpers_stop(p, &h, rc);
  info->host_ns += wait_ns;
  info->copy_ns += copy_ns;
  if (rc) info->copied_bytes = 0;
  return rc;
}

/* Whether the pool can copy its bytes to its kind of host memory. */
static bool can_copy(const struct pt_pool *p) {
  const struct pt_backend_ops *o = p->bk.ops;
  return in_handles(p) ? o->create_host && o->copy_d2d
                       : o->host_alloc && o->host_free && o->copy_to_host && o->copy_to_device;
}

int pt_pool_sleep_prepare(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  const struct pt_backend_ops *o = p->bk.ops;
  struct pt_pool_sleep_info z = {0};
  if (!info) info = &z;
  *info = z;
  /* 1. Under the mutex: the sizes of the handles a sleep would copy now, less
   * those the kept memory covers already (each kept piece covers one). */
  pthread_mutex_lock(&p->mu);
  if (p->asleep || !can_copy(p) || p->st.tier_bytes) {
    pthread_mutex_unlock(&p->mu);
    return o->err_invalid;
  }
  uint64_t n = count_handles(p), nm = 0;
  struct pt_sleep_ent *m = calloc(n ? n : 1, sizeof *m);
  uint8_t *used = calloc(p->cache.n ? p->cache.n : 1, 1);
  uint8_t **inuse = calloc(p->narenas ? (size_t)p->narenas : 1, sizeof *inuse);
  bool ok = m && used && inuse;
  for (int i = 0; ok && i < p->narenas; i++) ok = (inuse[i] = calloc(p->arenas[i].nslots ? p->arenas[i].nslots : 1, 1)) != NULL;
  if (!ok) {
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; inuse && i < p->narenas; i++) free(inuse[i]);
    free(inuse);
    free(m);
    free(used);
    return o->err_oom;
  }
  /* The slots live blocks cover: a handle none of whose slots holds one is
   * wholly free, and the sleep gives it back instead of copying it. */
  for (uint64_t i = 0; i < p->live.cap; i++) {
    const struct pt_blk *b = p->live.keys[i] ? p->live.vals[i] : NULL;
    struct pt_arena *ar;
    uint64_t s0;
    if (!b || !b->size || pt_arena_slot(p, b->addr, &ar, &s0)) continue;
    uint64_t last = (b->addr + b->size - 1 - ar->base) / p->gran;
    for (uint64_t sl = s0; sl <= last && sl < ar->nslots; sl++) inuse[ar - p->arenas][sl] = 1;
  }
  for (int i = 0; i < p->narenas; i++) {
    struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; s < a->nslots; s++) {
      if (!a->hlen[s] || !pt_bit(a->bits, s)) continue;
      bool live = false;
      for (uint64_t j = s; j < s + a->hlen[s] && j < a->nslots && !live; j++) live = inuse[i][j];
      if (!live) continue;
      uint64_t k = 0;
      for (; k < p->cache.n; k++) {
        const struct pt_sleep_ent *c = &p->cache.e[k];
        if (!used[k] && c->n == a->hlen[s] && (c->host || c->hcreated)) break;
      }
      if (k < p->cache.n) {
        used[k] = 1;
        info->reused_bytes += a->hlen[s] * p->gran;
      } else {
        m[nm++] = (struct pt_sleep_ent){.arena = -1, .n = a->hlen[s]};
      }
    }
  }
  for (int i = 0; i < p->narenas; i++) free(inuse[i]);
  free(inuse);
  free(used);
  pthread_mutex_unlock(&p->mu);

  /* 2. Without the mutex (the process allocates on meanwhile): the missing
   * host memory, on the sleep's helper threads. */
  uint64_t t0 = pt_now_ns();
  struct helpers h;
  h.started = 0, h.run.state = NULL;
  helpers_start(p, m, nm, &h);
  int rc = 0;
  for (uint64_t i = 0; i < nm && !rc; i++) rc = helpers_get(p, &h, i);
  rc = helpers_stop(p, &h, rc);
  info->host_ns = pt_now_ns() - t0;

  /* 3. Kept for the next sleep, beside what was kept already. */
  pthread_mutex_lock(&p->mu);
  struct pt_sleep_ent *grown = rc || p->asleep ? NULL : realloc(p->cache.e, (p->cache.n + nm + 1) * sizeof *grown);
  if (!rc && !grown) rc = p->asleep ? o->err_invalid : o->err_oom;
  if (rc) {
    drop_host(p, m, nm);
  } else {
    p->cache.e = grown;
    for (uint64_t i = 0; i < nm; i++) {
      p->cache.e[p->cache.n++] = m[i];
      p->st.host_kept_bytes += m[i].n * p->gran;
      info->bytes += m[i].n * p->gran;
    }
    info->handles = nm;
    p->st.prepares++;
  }
  pthread_mutex_unlock(&p->mu);
  free(m);
  return rc;
}

/* Unmaps and releases the new memory of entries [0, n): they sleep again
 * (their host copies are kept). */
static void unmap_new(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) {
    struct pt_arena *a = &p->arenas[e[k].arena];
    if (!e[k].mapped) continue;
    (void)p->bk.ops->unmap(p->bk.ctx, ent_va(p, &e[k]), e[k].n * p->gran);
    (void)p->bk.ops->release(p->bk.ctx, a->handles[e[k].slot]);
    for (uint64_t j = 0; j < e[k].n; j++) a->handles[e[k].slot + j] = 0;
    e[k].mapped = false;
  }
}

/* A wake's mapping on a helper thread (pt_pool_wake_fill): how many entries
 * are mapped so far, and the helper's result once it is done. */
struct map_run {
  struct pt_pool *p;
  struct pt_sleep_ent *e;
  uint64_t n, done;
  int rc;
  bool finished;
  uint64_t map_ns;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static void map_progress(struct map_run *r, uint64_t done, int rc, bool finished) {
  pthread_mutex_lock(&r->mu);
  r->done = done, r->rc = rc, r->finished = finished;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Maps new physical memory for entries [0, n); on failure unmaps and
 * releases what it mapped and returns the error (the entries sleep on).
 * With r (a wake's helper) it reports each entry mapped and leaves the
 * undoing of a failure to the waking thread, which may be copying into the
 * entries mapped before it. */
static int map_new_run(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_pool_sleep_info *info,
                       struct map_run *r) {
  const struct pt_backend_ops *o = p->bk.ops;
  uint64_t i;
  int rc = 0;
  uint64_t t0 = pt_now_ns();
  for (i = 0; i < n; i++) {
    struct pt_arena *a = &p->arenas[e[i].arena];
    uintptr_t va = ent_va(p, &e[i]);
    size_t sz = e[i].n * p->gran;
    pt_bk_handle h = 0;
    rc = o->create(p->bk.ctx, sz, &h);
    if (rc) break;
    rc = o->map(p->bk.ctx, va, sz, h);
    if (rc) {
      (void)o->release(p->bk.ctx, h);
      break;
    }
    rc = o->set_access(p->bk.ctx, va, sz);
    if (rc) {
      (void)o->unmap(p->bk.ctx, va, sz);
      (void)o->release(p->bk.ctx, h);
      break;
    }
    for (uint64_t j = 0; j < e[i].n; j++) a->handles[e[i].slot + j] = h;
    e[i].mapped = true;
    if (r) map_progress(r, i + 1, 0, false);
  }
  if (info) info->map_ns += pt_now_ns() - t0;
  if (r) {
    r->map_ns = pt_now_ns() - t0;
    map_progress(r, i, rc, true);
    return rc;
  }
  if (rc) unmap_new(p, e, i);
  return rc;
}

static int map_new(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_pool_sleep_info *info) {
  return map_new_run(p, e, n, info, NULL);
}

static void *map_worker(void *arg) {
  struct map_run *r = arg;
  if (r->p->bk.ops->thread_start) r->p->bk.ops->thread_start(r->p->bk.ctx);
  (void)map_new_run(r->p, r->e, r->n, NULL, r);
  return NULL;
}

/* Copies entry e's kept bytes (if any) back to its new memory. */
static int copy_one_back(struct pt_pool *p, struct pt_sleep_ent *e, struct pt_pool_sleep_info *info) {
  if (!e->host && !e->hmapped) return 0;
  size_t sz = e->n * p->gran;
  uint64_t t0 = pt_now_ns();
  int rc = e->host ? p->bk.ops->copy_to_device(p->bk.ctx, ent_va(p, e), e->host, sz)
                   : p->bk.ops->copy_d2d(p->bk.ctx, ent_va(p, e), e->hva, sz);
  if (info) info->copy_ns += pt_now_ns() - t0;
  if (!rc && info) info->copied_bytes += sz;
  return rc;
}

/* Copies the kept bytes of entries [0, n) back to their new memory. */
static int copy_back(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_pool_sleep_info *info) {
  for (uint64_t i = 0; i < n; i++) {
    int rc = copy_one_back(p, &e[i], info);
    if (rc) return rc;
  }
  return 0;
}

int pt_pool_sleep(struct pt_pool *p, bool discard, struct pt_pool_sleep_info *info) {
  const struct pt_backend_ops *o = p->bk.ops;
  struct pt_pool_sleep_info z = {0};
  if (!info) info = &z;
  *info = z;
  struct pt_sleep_set spare = {0};
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  drop_set(p, &p->gone); /* a wake's host memory that nobody released yet */
  /* Host-tier granules would come back as device memory (or not at all):
   * a pool holding any is refused (pool.h). */
  if (p->asleep || (!discard && !can_copy(p)) || p->st.tier_bytes) {
    rc = o->err_invalid;
    goto out;
  }
  /* What is wholly free is given back, not kept; a failure here changes
   * nothing the application can see. */
  uint64_t before = p->st.physical_bytes;
  (void)pt_trim_locked(p, 0, true);
  info->trimmed_bytes = before - p->st.physical_bytes;
  rc = o->device_sync(p->bk.ctx);
  if (rc) goto out;

  const uint64_t n = count_handles(p);
  struct pt_sleep_set set = {.e = calloc(n ? n : 1, sizeof *set.e), .n = n};
  struct pt_sleep_ent *e = set.e;
  if (!e) {
    rc = o->err_oom;
    goto out;
  }
  uint64_t k = 0;
  for (int i = 0; i < p->narenas; i++) {
    struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; s < a->nslots; s++)
      if (a->hlen[s] && pt_bit(a->bits, s)) e[k++] = (struct pt_sleep_ent){.arena = i, .slot = s, .n = a->hlen[s]};
  }
  /* 1. Host memory and copies: the pool is untouched until both succeed. */
  if (!discard && (rc = keep(p, &set, info, &spare))) {
    drop_set(p, &set);
    goto out;
  }
  /* 2. Unmap and release. An unmap the driver refuses leaves that handle
   * where it was: everything released before it is mapped again. */
  uint64_t t0 = pt_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    struct pt_arena *a = &p->arenas[e[i].arena];
    size_t sz = e[i].n * p->gran;
    pt_bk_handle h = a->handles[e[i].slot];
    rc = o->unmap(p->bk.ctx, ent_va(p, &e[i]), sz);
    if (rc) {
      /* Best effort back to awake; the bytes of the released ones are on
       * the host, or were to be dropped. */
      int r2 = map_new(p, e, i, NULL);
      if (!r2) r2 = copy_back(p, e, i, NULL);
      if (r2) rc = r2;
      drop_set(p, &set);
      info->copied_bytes = 0;
      goto out;
    }
    (void)o->release(p->bk.ctx, h);
    for (uint64_t j = 0; j < e[i].n; j++) a->handles[e[i].slot + j] = 0;
    info->handles++;
    info->bytes += sz;
  }
  info->map_ns += pt_now_ns() - t0;
  p->slept = set;
  p->asleep = true;
  pt_stat_physical(p, -(int64_t)(info->bytes / p->gran));
  p->st.sleeps++;
  p->st.asleep_bytes = info->bytes;
  p->st.host_bytes = discard ? 0 : info->bytes;
out:
  drop_set(p, &spare); /* kept host memory no entry took: after the GPU memory went back */
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int pt_pool_wake_map(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  pthread_mutex_lock(&p->mu);
  int rc = p->asleep ? map_new(p, p->slept.e, p->slept.n, info) : p->bk.ops->err_invalid;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int pt_pool_wake_copy(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  pthread_mutex_lock(&p->mu);
  int rc = p->asleep ? copy_back(p, p->slept.e, p->slept.n, info) : p->bk.ops->err_invalid;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* map then copy on this thread alone; on failure nothing stays mapped. */
static int fill_serial(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  int rc = map_new(p, p->slept.e, p->slept.n, info);
  if (!rc && (rc = copy_back(p, p->slept.e, p->slept.n, info))) unmap_new(p, p->slept.e, p->slept.n);
  return rc;
}

int pt_pool_wake_fill(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  if (!p->asleep) {
    rc = p->bk.ops->err_invalid;
  } else if (p->sleep_threads <= 1 || p->slept.n < 2) {
    rc = fill_serial(p, info);
  } else {
    /* A helper maps new memory entry by entry while this thread copies each
     * entry back as soon as it is mapped: the wake takes about the longer of
     * the two instead of their sum. A failure of either undoes every mapping
     * once the helper is done (the host copies are untouched: asleep as before). */
    struct map_run r = {.p = p, .e = p->slept.e, .n = p->slept.n};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_t tid;
    if (pthread_create(&tid, NULL, map_worker, &r) != 0) {
      rc = fill_serial(p, info);
    } else {
      for (uint64_t i = 0; i < p->slept.n && !rc; i++) {
        pthread_mutex_lock(&r.mu);
        while (r.done <= i && !r.finished) pthread_cond_wait(&r.cv, &r.mu);
        bool mapped = r.done > i;
        pthread_mutex_unlock(&r.mu);
        if (!mapped) break; /* the helper failed before entry i */
        rc = copy_one_back(p, &p->slept.e[i], info);
      }
      pthread_join(tid, NULL);
      if (info) info->map_ns += r.map_ns;
      if (r.rc && !rc) rc = r.rc;
      if (rc) {
        unmap_new(p, p->slept.e, p->slept.n);
        if (info) info->copied_bytes = 0;
      }
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void pt_pool_wake_undo(struct pt_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->asleep) unmap_new(p, p->slept.e, p->slept.n);
  pthread_mutex_unlock(&p->mu);
}

void pt_pool_wake_finish(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  pthread_mutex_lock(&p->mu);
  if (!p->asleep) {
    pthread_mutex_unlock(&p->mu);
    return;
  }
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < p->slept.n; i++) bytes += p->slept.e[i].n * p->gran;
  if (info) {
    info->handles += p->slept.n;
    info->bytes += bytes;
  }
  /* The host memory waits for pt_pool_release_kept. */
  drop_set(p, &p->gone);
  p->gone = p->slept;
  p->slept = (struct pt_sleep_set){0};
  p->asleep = false;
  pt_stat_physical(p, (int64_t)(bytes / p->gran));
  p->st.wakes++;
  p->st.asleep_bytes = 0;
  p->st.host_bytes = 0;
  pthread_mutex_unlock(&p->mu);
}

int pt_pool_wake(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  struct pt_pool_sleep_info z = {0};
  if (!info) info = &z;
  *info = z;
  int rc = pt_pool_wake_fill(p, info);
  if (rc) {
    info->copied_bytes = 0;
    return rc;
  }
  pt_pool_wake_finish(p, info);
  pt_pool_release_kept(p, info);
  return 0;
}

/* Frees set s one entry at a time, the mutex released between them: the
 * process runs on and its allocations wait at most one free. */
static void drop_slowly(struct pt_pool *p, struct pt_sleep_set *s) {
  for (bool more = true; more;) {
    pthread_mutex_lock(&p->mu);
    more = s->n > 0;
    if (more) drop_host(p, &s->e[--s->n], 1);
    else drop_set(p, s); /* the range, and the array */
    pthread_mutex_unlock(&p->mu);
  }
}

void pt_pool_release_kept(struct pt_pool *p, struct pt_pool_sleep_info *info) {
  uint64_t t0 = pt_now_ns();
  pthread_mutex_lock(&p->mu);
  uint64_t held = 0;
  for (uint64_t i = 0; p->gone.e && i < p->gone.n; i++)
    if (p->gone.e[i].host || p->gone.e[i].hcreated) held += p->gone.e[i].n * p->gran;
  /* Kept for the next sleep instead (sleep_reuse). A discarding sleep's set
   * holds no host memory: the memory kept before it (a prepare's) stays. */
  if (p->sleep_reuse && held) {
    drop_cache(p);
    p->cache = p->gone;
    p->gone = (struct pt_sleep_set){0};
    p->st.host_kept_bytes = held;
  }
  pthread_mutex_unlock(&p->mu);
  drop_slowly(p, &p->gone); /* the process runs again meanwhile */
  if (info) info->host_ns += pt_now_ns() - t0;
}

uint64_t pt_pool_sleep_unprepare(struct pt_pool *p) {
  pthread_mutex_lock(&p->mu);
  struct pt_sleep_set c = p->cache;
  uint64_t bytes = p->st.host_kept_bytes;
  p->cache = (struct pt_sleep_set){0};
  p->st.host_kept_bytes = 0;
  pthread_mutex_unlock(&p->mu);
  drop_slowly(p, &c);
  return bytes;
}

void pt_sleep_forget(struct pt_pool *p) {
  drop_set(p, &p->gone);
  drop_cache(p);
  if (!p->asleep) return;
  for (uint64_t i = 0; i < p->slept.n; i++) {
    const struct pt_sleep_ent *e = &p->slept.e[i];
    struct pt_arena *a = &p->arenas[e->arena];
    for (uint64_t j = 0; j < e->n; j++) {
      pt_bit_clr(a->bits, e->slot + j);
      a->hlen[e->slot + j] = 0;
    }
  }
  drop_set(p, &p->slept);
  p->asleep = false;
}
