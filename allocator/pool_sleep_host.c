/* The host memory of a sleep (allocator/pool_sleep_host.h): getting it,
 * freeing it, and keeping it between sleeps, with the two requests that
 * manage the kept set while the process runs (pt_pool_sleep_prepare,
 * pt_pool_sleep_unprepare) and the release after a wake.
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

#include "allocator/pool_sleep_host.h"
#include "common/now_ns.h"

uint64_t pt_sleep_count_handles(const struct pt_pool *p) {
  uint64_t n = 0;
  for (int i = 0; i < p->narenas; i++) {
    const struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; s < a->nslots; s++)
      if (a->hlen[s] && pt_bit(a->bits, s)) n++;
  }
  return n;
}

/* host_alloc's kind of buffer for this pool. */
static int buf_kind(const struct pt_pool *p) {
  return p->sleep_host == PT_SLEEP_IN_REGISTERED ? PT_HOST_BUF_REGISTERED : PT_HOST_BUF_PINNED;
}

/* Frees the host memory of entries [0, n), either kind. */
void pt_sleep_drop_host(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n) {
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
void pt_sleep_drop_set(struct pt_pool *p, struct pt_sleep_set *s) {
  pt_sleep_drop_host(p, s->e, s->n);
  if (s->va_size) (void)p->bk.ops->unreserve(p->bk.ctx, s->va, s->va_size);
  free(s->e);
  *s = (struct pt_sleep_set){0};
}

/* The host memory kept for the next sleep (sleep_reuse), all of it. */
void pt_sleep_drop_cache(struct pt_pool *p) {
  pt_sleep_drop_set(p, &p->cache);
  p->st.host_kept_bytes = 0;
}

/* The first kept piece at or after index from that holds host memory of n
 * granules and is not marked in used (NULL: none marked); cache.n if none. */
static uint64_t kept_next(const struct pt_pool *p, uint64_t n, uint64_t from, const uint8_t *used) {
  for (uint64_t k = from; k < p->cache.n; k++) {
    const struct pt_sleep_ent *c = &p->cache.e[k];
    if (c->n == n && (c->host || c->hcreated) && !(used && used[k])) return k;
  }
  return p->cache.n;
}

/* Entries [0, n) take the kept host memory of their size (sleep_reuse, or
 * pt_pool_sleep_prepare): a buffer as it is, a host handle unmapped from the
 * kept range (it is mapped again at the entry's place). What no entry takes
 * moves to *spare, for the caller to free once the device memory is released
 * (pt_sleep_drop_set): a sleep gives the GPU back before it frees surplus host memory.
 * Returns the bytes taken. */
uint64_t pt_sleep_take_kept(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_sleep_set *spare) {
  uint64_t taken = 0;
  if (!p->cache.e) return 0;
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t k = kept_next(p, e[i].n, 0, NULL); k < p->cache.n; k = kept_next(p, e[i].n, k + 1, NULL)) {
      struct pt_sleep_ent *c = &p->cache.e[k];
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

/* Host memory (a buffer or a host handle, sleep_host) for one entry;
 * fault_only: a FAULTED buffer, to be registered by host_lock. */
static int get_one(struct pt_pool *p, struct pt_sleep_ent *e, bool fault_only) {
  const struct pt_backend_ops *o = p->bk.ops;
  size_t sz = e->n * p->gran;
  int rc;
  if (pt_sleep_in_handles(p)) {
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

void pt_sleep_helpers_start(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_sleep_helpers *h) {
  uint64_t t = (uint64_t)p->sleep_threads < n ? (uint64_t)p->sleep_threads : n;
  if (t > PT_SLEEP_HELPERS_MAX) t = PT_SLEEP_HELPERS_MAX;
  /* Registered memory on helpers: they fault it in, the calling thread
   * registers each piece (pt_sleep_helpers_get), so every driver call is its own. */
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

int pt_sleep_helpers_get(struct pt_pool *p, struct pt_sleep_helpers *h, uint64_t i) {
  struct pt_sleep_ent *e = &h->run.e[i];
  int rc = 0;
  if (h->started) rc = wait_ready(&h->run, i) ? -1 : 0;
  else if (!e->host && !e->hcreated) rc = get_one(p, e, false);
  if (!rc && e->faulted && !(rc = p->bk.ops->host_lock(p->bk.ctx, e->host, e->n * p->gran))) e->faulted = false;
  return rc;
}

int pt_sleep_helpers_stop(struct pt_pool *p, struct pt_sleep_helpers *h, int rc) {
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

/* Whether the pool can copy its bytes to its kind of host memory. */
bool pt_sleep_can_copy(const struct pt_pool *p) {
  const struct pt_backend_ops *o = p->bk.ops;
  return pt_sleep_in_handles(p) ? o->create_host && o->copy_d2d
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
  if (p->asleep || !pt_sleep_can_copy(p) || p->st.tier_bytes) {
    pthread_mutex_unlock(&p->mu);
    return o->err_invalid;
  }
  uint64_t n = pt_sleep_count_handles(p), nm = 0;
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
      uint64_t k = kept_next(p, a->hlen[s], 0, used);
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
  struct pt_sleep_helpers h;
  h.started = 0, h.run.state = NULL;
  pt_sleep_helpers_start(p, m, nm, &h);
  int rc = 0;
  for (uint64_t i = 0; i < nm && !rc; i++) rc = pt_sleep_helpers_get(p, &h, i);
  rc = pt_sleep_helpers_stop(p, &h, rc);
  info->host_ns = pt_now_ns() - t0;

  /* 3. Kept for the next sleep, beside what was kept already. */
  pthread_mutex_lock(&p->mu);
  struct pt_sleep_ent *grown = rc || p->asleep ? NULL : realloc(p->cache.e, (p->cache.n + nm + 1) * sizeof *grown);
  if (!rc && !grown) rc = p->asleep ? o->err_invalid : o->err_oom;
  if (rc) {
    pt_sleep_drop_host(p, m, nm);
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

/* Frees set s one entry at a time, the mutex released between them: the
 * process runs on and its allocations wait at most one free. */
static void drop_slowly(struct pt_pool *p, struct pt_sleep_set *s) {
  for (bool more = true; more;) {
    pthread_mutex_lock(&p->mu);
    more = s->n > 0;
    if (more) pt_sleep_drop_host(p, &s->e[--s->n], 1);
    else pt_sleep_drop_set(p, s); /* the range, and the array */
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
    pt_sleep_drop_cache(p);
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

