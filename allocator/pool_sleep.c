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
 * The host memory that holds the bytes: allocator/pool_sleep_host.c. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "allocator/pool_internal.h"
#include "allocator/pool_sleep_host.h"
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

static uintptr_t ent_va(const struct pt_pool *p, const struct pt_sleep_ent *e) {
  return p->arenas[e->arena].base + e->slot * p->gran;
}

/* Host memory for set s's entries and their bytes copied into it; *spare
 * gets the kept host memory no entry took (pt_sleep_take_kept). On failure the pool
 * itself was not touched; the caller frees what s and *spare hold (pt_sleep_drop_set). */
static int keep(struct pt_pool *p, struct pt_sleep_set *s, struct pt_pool_sleep_info *info, struct pt_sleep_set *spare) {
  const struct pt_backend_ops *o = p->bk.ops;
  struct pt_sleep_ent *e = s->e;
  const uint64_t n = s->n;
  int rc = 0;
  uint64_t t0 = pt_now_ns();
  if (pt_sleep_in_handles(p)) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += e[i].n * p->gran;
    if (total && !(rc = o->reserve(p->bk.ctx, total, &s->va))) s->va_size = total;
    uintptr_t at = s->va;
    for (uint64_t i = 0; i < n; i++) {
      e[i].hva = at;
      at += e[i].n * p->gran;
    }
  }
  uint64_t reused = rc ? 0 : pt_sleep_take_kept(p, e, n, spare);
  p->st.host_reused_bytes += reused;
  info->reused_bytes += reused;
  uint64_t wait_ns = pt_now_ns() - t0, copy_ns = 0;

  struct pt_sleep_helpers h;
  h.started = 0, h.run.state = NULL;
  if (!rc) pt_sleep_helpers_start(p, e, n, &h);
  for (uint64_t i = 0; i < n && !rc; i++) {
    size_t sz = e[i].n * p->gran;
    uint64_t t1 = pt_now_ns();
    rc = pt_sleep_helpers_get(p, &h, i);
    if (!rc && pt_sleep_in_handles(p) && !(rc = o->map(p->bk.ctx, e[i].hva, sz, e[i].hh))) {
      e[i].hmapped = true;
      rc = o->set_access(p->bk.ctx, e[i].hva, sz);
    }
    uint64_t t2 = pt_now_ns();
    wait_ns += t2 - t1;
    if (rc) break;
    rc = pt_sleep_in_handles(p) ? o->copy_d2d(p->bk.ctx, e[i].hva, ent_va(p, &e[i]), sz)
                       : o->copy_to_host(p->bk.ctx, e[i].host, ent_va(p, &e[i]), sz);
    copy_ns += pt_now_ns() - t2;
    info->copied_bytes += sz;
  }
  rc = pt_sleep_helpers_stop(p, &h, rc);
  info->host_ns += wait_ns;
  info->copy_ns += copy_ns;
  if (rc) info->copied_bytes = 0;
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
  pt_sleep_drop_set(p, &p->gone); /* a wake's host memory that nobody released yet */
  /* Host-tier granules would come back as device memory (or not at all):
   * a pool holding any is refused (pool.h). */
  if (p->asleep || (!discard && !pt_sleep_can_copy(p)) || p->st.tier_bytes) {
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

  const uint64_t n = pt_sleep_count_handles(p);
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
    pt_sleep_drop_set(p, &set);
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
      pt_sleep_drop_set(p, &set);
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
  pt_sleep_drop_set(p, &spare); /* kept host memory no entry took: after the GPU memory went back */
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
  pt_sleep_drop_set(p, &p->gone);
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

void pt_sleep_forget(struct pt_pool *p) {
  pt_sleep_drop_set(p, &p->gone);
  pt_sleep_drop_cache(p);
  if (!p->asleep) return;
  for (uint64_t i = 0; i < p->slept.n; i++) {
    const struct pt_sleep_ent *e = &p->slept.e[i];
    struct pt_arena *a = &p->arenas[e->arena];
    for (uint64_t j = 0; j < e->n; j++) {
      pt_bit_clr(a->bits, e->slot + j);
      a->hlen[e->slot + j] = 0;
    }
  }
  pt_sleep_drop_set(p, &p->slept);
  p->asleep = false;
}
