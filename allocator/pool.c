/* The pool's hot path (alloc, free), stream ordering, and its public API.
 * Growth, stitching and trimming are in pool_grow.c. */
#include <stdlib.h>
#include <string.h>
#include "allocator/pool_internal.h"

#define PT_BLK_CHUNK 256
/* Free physical bytes (above the keep threshold) that must accumulate after
 * an automatic trim before the next one is tried: keeps frees O(log n). */
#define PT_TRIM_STEP ((uint64_t)32 << 20)

struct pt_blk *pt_blk_new(struct pt_pool *p) {
  if (!p->blk_spare) {
    struct pt_blk_chunk *c = malloc(sizeof *c + PT_BLK_CHUNK * sizeof(struct pt_blk));
    if (!c) return NULL;
    c->next = p->chunks;
    p->chunks = c;
    for (int i = 0; i < PT_BLK_CHUNK; i++) {
      c->blks[i].next = p->blk_spare;
      p->blk_spare = &c->blks[i];
    }
  }
  struct pt_blk *b = p->blk_spare;
  p->blk_spare = b->next;
  memset(b, 0, sizeof *b);
  return b;
}

void pt_blk_put(struct pt_pool *p, struct pt_blk *b) {
  b->next = p->blk_spare;
  b->addr = 0;
  p->blk_spare = b;
}

void pt_stat_physical(struct pt_pool *p, int64_t delta_granules) {
  p->st.physical_bytes += (uint64_t)(delta_granules * (int64_t)p->gran);
  if (p->st.physical_bytes > p->st.peak_physical_bytes)
    p->st.peak_physical_bytes = p->st.physical_bytes;
  if (p->st.physical_bytes > p->high_physical) __atomic_store_n(&p->high_physical, p->st.physical_bytes, __ATOMIC_RELAXED);
}

/* A block of `bytes` (the caller asked for req) goes live (sign 1) or is
 * freed (-1): the pooled counts, live and requested bytes, and their peaks. */
void pt_stat_live(struct pt_pool *p, int sign, uint64_t bytes, uint64_t req) {
  if (sign < 0) {
    p->st.live_bytes -= bytes;
    p->st.requested_bytes -= req;
    p->st.pooled_frees++;
    return;
  }
  p->st.pooled_allocs++;
  p->st.live_bytes += bytes;
  if (p->st.live_bytes > p->st.peak_live_bytes) p->st.peak_live_bytes = p->st.live_bytes;
  if (p->st.live_bytes > p->high_live) __atomic_store_n(&p->high_live, p->st.live_bytes, __ATOMIC_RELAXED);
  p->st.requested_bytes += req;
  if (p->st.requested_bytes > p->st.peak_requested_bytes) p->st.peak_requested_bytes = p->st.requested_bytes;
}

/* ---- streams and fences ------------------------------------------------ */

static struct pt_stream_st *stream_get(struct pt_pool *p, pt_bk_stream s, bool add) {
  for (uint64_t i = 0; i < p->nstreams; i++)
    if (p->streams[i].stream == s) return &p->streams[i];
  if (!add) return NULL;
  if (p->nstreams == p->cap_streams) {
    uint64_t cap = p->cap_streams ? p->cap_streams * 2 : 8;
    struct pt_stream_st *n = realloc(p->streams, cap * sizeof *n);
    if (!n) return NULL;
    p->streams = n;
    p->cap_streams = cap;
  }
  struct pt_stream_st *st = &p->streams[p->nstreams++];
  *st = (struct pt_stream_st){.stream = s};
  return st;
}

/* A marker on st's stream covering every free up to seq: reuses the last
 * record if it covers seq, else records now (which covers more: all work
 * queued so far). 0 or error. */
static void stream_mark_done(struct pt_stream_st *st) {
  st->done = true;
  if (st->marker_seq > st->done_seq) st->done_seq = st->marker_seq;
}

static int stream_cover(struct pt_pool *p, struct pt_stream_st *st, uint64_t seq) {
  if (st->has_marker && st->marker_seq >= seq) return 0;
  int rc;
  /* Before the marker is recorded again: did its last record finish? */
  if (st->has_marker && !st->done && p->bk.ops->marker_query(p->bk.ctx, st->marker) == 0)
    stream_mark_done(st);
  if (!st->has_marker) {
    if ((rc = p->bk.ops->marker_create(p->bk.ctx, &st->marker))) return rc;
    st->has_marker = true;
    st->marker_seq = 0;
  }
  if ((rc = p->bk.ops->marker_record(p->bk.ctx, st->marker, st->stream))) return rc;
  st->marker_seq = p->free_seq;
  st->done = false;
  return 0;
}

/* true when the fence's work is known finished (may query the backend). */
static bool fence_done(struct pt_pool *p, const struct pt_fence *f, bool query) {
  if (f->seq <= p->sync_seq) return true;
  struct pt_stream_st *st = stream_get(p, f->stream, false);
  if (st && f->seq <= st->done_seq) return true;
  if (!st || !st->has_marker || st->marker_seq < f->seq) return false;
  if (st->done) return true;
  if (query && p->bk.ops->marker_query(p->bk.ctx, st->marker) == 0) stream_mark_done(st);
  return st->done;
}

void pt_streams_refresh(struct pt_pool *p) {
  for (uint64_t i = 0; i < p->nstreams; i++) {
    struct pt_stream_st *st = &p->streams[i];
    if (st->last_free_seq > p->sync_seq && (!st->has_marker || st->marker_seq < st->last_free_seq))
      (void)stream_cover(p, st, st->last_free_seq); /* best effort: a failure only delays reuse */
  }
}

int pt_fences_settle(struct pt_pool *p, struct pt_blk *b, bool wait) {
  uint8_t keep = 0;
  for (uint8_t i = 0; i < b->nfence; i++) {
    struct pt_fence *f = &b->fence[i];
    if (!fence_done(p, f, true)) {
      if (!wait) {
        b->fence[keep++] = *f;
        continue;
      }
      struct pt_stream_st *st = stream_get(p, f->stream, true);
      int rc = st ? stream_cover(p, st, f->seq) : p->bk.ops->err_oom;
      if (!rc) rc = p->bk.ops->marker_sync(p->bk.ctx, st->marker);
      if (rc) {
        /* Keep what is not settled: the block stays correct, only busier. */
        memmove(&b->fence[keep], f, (size_t)(b->nfence - i) * sizeof *f);
        b->nfence = (uint8_t)(keep + b->nfence - i);
        return rc;
      }
      stream_mark_done(st);
      p->st.syncs++;
    }
  }
  b->nfence = keep;
  return 0;
}

/* Unites src's fences into dst's (blocks that coalesce). Fences known done
 * are dropped; past PT_POOL_FENCES streams, the union is waited for. */
void pt_fence_merge(struct pt_pool *p, struct pt_blk *dst, const struct pt_blk *src) {
  for (uint8_t i = 0; i < src->nfence; i++) {
    const struct pt_fence *f = &src->fence[i];
    if (fence_done(p, f, false)) continue;
    uint8_t j = 0;
    while (j < dst->nfence && dst->fence[j].stream != f->stream) j++;
    if (j < dst->nfence) {
      if (f->seq > dst->fence[j].seq) dst->fence[j].seq = f->seq;
      continue;
    }
    if (dst->nfence == PT_POOL_FENCES) {
      (void)pt_fences_settle(p, dst, false);
      if (dst->nfence == PT_POOL_FENCES && pt_fences_settle(p, dst, true)) {
        /* Could not wait per stream: wait for the whole device instead. */
        if (!p->bk.ops->device_sync(p->bk.ctx)) {
          p->sync_seq = p->free_seq;
          p->st.syncs++;
        }
        dst->nfence = 0;
      }
    }
    dst->fence[dst->nfence++] = *f;
  }
}

/* Before stream t uses b: t waits for every other stream's pending frees.
 * A fence t waited for becomes a fence of t itself (t's later work orders
 * after it), so the rest of the block does not make t wait again. The kept
 * fences are gathered apart and replace b's only at the end: on an error b
 * keeps all of its own (it stays free, and its next user must wait for every
 * one of them). */
static int fences_order_for(struct pt_pool *p, struct pt_blk *b, pt_bk_stream t) {
  bool waited = false;
  uint8_t keep = 0;
  struct pt_fence kept[PT_POOL_FENCES];
  for (uint8_t i = 0; i < b->nfence; i++) {
    struct pt_fence *f = &b->fence[i];
    if (f->stream == t) {
      kept[keep++] = *f;
      continue;
    }
    if (fence_done(p, f, true)) continue;
    struct pt_stream_st *st = stream_get(p, f->stream, true);
    int rc = st ? stream_cover(p, st, f->seq) : p->bk.ops->err_oom;
    if (rc) return rc;
    /* A query right after the record is cheap and often saves the wait when
     * the other stream is idle. */
    if (p->bk.ops->marker_query(p->bk.ctx, st->marker) == 0) {
      stream_mark_done(st);
      continue;
    }
    if ((rc = p->bk.ops->stream_wait(p->bk.ctx, t, st->marker))) return rc;
    p->st.cross_stream_waits++;
    waited = true;
  }
  if (waited) {
    struct pt_stream_st *st = stream_get(p, t, true);
    if (st) {
      uint8_t j = 0;
      while (j < keep && kept[j].stream != t) j++;
      kept[j] = (struct pt_fence){t, ++p->free_seq};
      st->last_free_seq = p->free_seq;
      if (j == keep) keep++;
    } else {
      return 0; /* keep the original fences: correct, only more waiting */
    }
  }
  memcpy(b->fence, kept, keep * sizeof *kept);
  b->nfence = keep;
  return 0;
}

/* ---- create / destroy -------------------------------------------------- */

int pt_pool_create(struct pt_backend bk, int device, const struct pt_pool_config *cfg,
                   struct pt_pool **out) {
  struct pt_pool *p = calloc(1, sizeof *p);
  if (!p) return bk.ops->err_oom;
  size_t g = 0;
  int rc = bk.ops->granularity(bk.ctx, &g);
  if (rc || !g || g % PT_POOL_ALIGN || (g & (g - 1))) {
    free(p);
    return rc ? rc : bk.ops->err_invalid;
  }
  pthread_mutex_init(&p->mu, NULL);
  p->bk = bk;
  p->device = device;
  p->gran = g;
  p->keep = cfg ? cfg->keep_bytes : PT_POOL_KEEP_DEFAULT;
  p->limit = cfg ? cfg->limit_bytes : 0;
  p->arena_bytes = cfg && cfg->arena_bytes ? cfg->arena_bytes : (uint64_t)256 << 30;
  p->arena_bytes = (p->arena_bytes + g - 1) / g * g;
  uint64_t chunk = cfg && cfg->chunk_bytes ? cfg->chunk_bytes : PT_POOL_CHUNK_DEFAULT;
  p->chunk = (chunk + g - 1) / g;
  if (p->chunk > 255) p->chunk = 255;
  p->order_up = cfg && cfg->order_up;
  p->sleep_host = cfg ? cfg->sleep_host : 0;
  p->sleep_reuse = cfg && cfg->sleep_reuse;
  p->sleep_threads = cfg && cfg->sleep_threads > 1 ? cfg->sleep_threads : 1; /* keep() takes at most 64 */
  p->tier_limit = cfg && bk.ops->create_host ? cfg->tier_bytes / g * g : 0;
  p->tier_reserve = p->tier_limit && bk.ops->device_free ? cfg->tier_reserve_bytes : 0;
  p->tier_ask_twice = p->tier_limit && cfg->tier_ask_twice;
  *out = p;
  return 0;
}

void pt_pool_destroy(struct pt_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  /* Nothing may be unmapped while the GPU could still use it. */
  (void)p->bk.ops->device_sync(p->bk.ctx);
  pt_sleep_forget(p); /* a sleeping pool has nothing mapped: only host copies to free */
  pt_unmap_all(p);
  if (p->scratch) (void)p->bk.ops->unreserve(p->bk.ctx, p->scratch, 255 * p->gran);
  for (int i = 0; i < p->narenas; i++) {
    struct pt_arena *a = &p->arenas[i];
    (void)p->bk.ops->unreserve(p->bk.ctx, a->base, a->nslots * p->gran);
    free(a->bits);
    free(a->handles);
    free(a->hlen);
    free(a->host);
  }
  for (uint64_t i = 0; i < p->nstreams; i++)
    if (p->streams[i].has_marker) (void)p->bk.ops->marker_destroy(p->bk.ctx, p->streams[i].marker);
  free(p->streams);
  pt_ptrmap_free(&p->live);
  while (p->chunks) {
    struct pt_blk_chunk *c = p->chunks;
    p->chunks = c->next;
    free(c);
  }
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
  if (p->bk.ops->destroy) p->bk.ops->destroy(p->bk.ctx);
  free(p);
}

int pt_pool_device(const struct pt_pool *p) { return p->device; }

/* ---- alloc / free ------------------------------------------------------ */

static int pool_alloc(struct pt_pool *p, size_t size, pt_bk_stream stream, bool any, bool *deferred, void **ptr);

int pt_pool_alloc(struct pt_pool *p, size_t size, pt_bk_stream stream, void **ptr) {
  return pool_alloc(p, size, stream, false, NULL, ptr);
}

int pt_pool_alloc_any(struct pt_pool *p, size_t size, void **ptr) { return pool_alloc(p, size, 0, true, NULL, ptr); }

int pt_pool_alloc_any_retry(struct pt_pool *p, size_t size, void **ptr, bool *deferred) {
  bool d = false;
  int rc = pool_alloc(p, size, 0, true, &d, ptr);
  if (deferred) *deferred = d;
  return rc;
}

/* The free block for r bytes and the address *at in it where the block
 * goes: best fit below a granule, by the handles it would hold from a
 * granule up (pt_fit_place). NULL when none holds r. */
static struct pt_blk *pool_fit(struct pt_pool *p, uint64_t r, uintptr_t *at) {
  if (r >= p->gran) return pt_fit_place(p, r, at);
  struct pt_blk *b = pt_fit_lower_bound(p, r);
  if (b) *at = b->addr;
  return b;
}

static int pool_alloc(struct pt_pool *p, size_t size, pt_bk_stream stream, bool any, bool *deferred, void **ptr) {
  if (size > ((uint64_t)1 << 62)) return p->bk.ops->err_oom;
  uint64_t r = size ? ((uint64_t)size + PT_POOL_ALIGN - 1) & ~(uint64_t)(PT_POOL_ALIGN - 1) : PT_POOL_ALIGN;
  /* Large requests (PT_POOL_ROUND_GRANULES granules and up) take whole
   * granules. A tensor that grows a little every step (a KV cache extended
   * by torch.cat) then fits the block its predecessor freed, for 2 MiB of
   * growth, and past that the block can grow in place at its segment's tail
   * (pool_grow.c), instead of moving to a new range every step: a stitch or
   * a grow costs ~50 us of mapping per granule on H200. The rounding costs
   * under one granule per block, under 1/PT_POOL_ROUND_GRANULES of it. */
  if (r >= PT_POOL_ROUND_GRANULES * p->gran) r = (r + p->gran - 1) / p->gran * p->gran;
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  uintptr_t at = 0;
  struct pt_blk *b = pool_fit(p, r, &at), *rest = NULL, *left = NULL;
  if (!b) {
    /* cudaMalloc semantics (any): a fresh range goes where the driver would
     * put it, below the earlier ones (pool.h, order_up). */
    if ((rc = pt_grow(p, r, any && !p->order_up))) {
      /* The device (or the limit) cannot hold it: the host tier, if any. */
      struct pt_blk *tb;
      if (rc != p->bk.ops->err_oom || !p->tier_limit) goto out;
      if (deferred && p->tier_ask_twice && !pt_tier_second_ask(p, size)) {
        p->st.tier_deferrals++;
        *deferred = true;
        goto out;
      }
      if ((rc = pt_tier_alloc(p, r, size, any && !p->order_up, &tb))) goto out;
      *ptr = (void *)tb->addr;
      pthread_mutex_unlock(&p->mu);
      return 0;
    }
    if (!(b = pool_fit(p, r, &at))) {
      rc = p->bk.ops->err_oom;
      goto out;
    }
  }
  /* Reserve what may fail before touching the block. */
  if ((at > b->addr && !(left = pt_blk_new(p))) || (at + r < b->addr + b->size && !(rest = pt_blk_new(p)))) {
    rc = p->bk.ops->err_oom;
    goto undo;
  }
  if (pt_ptrmap_put(&p->live, at, b)) {
    rc = p->bk.ops->err_oom;
    goto undo;
  }
  if (any && b->nfence && !(rc = pt_fences_settle(p, b, true)) && b->nfence) rc = p->bk.ops->err_not_ready;
  if (rc || (!any && (rc = fences_order_for(p, b, stream)))) {
    pt_ptrmap_del(&p->live, at);
    goto undo;
  }
  pt_fit_remove(p, b);
  if (left) {
    /* The block starts further in (pt_fit_place): what lies before it stays
     * free, with the fences. */
    left->addr = b->addr;
    left->size = at - b->addr;
    left->is_free = 1;
    left->nfence = b->nfence;
    memcpy(left->fence, b->fence, sizeof b->fence);
    left->prev = b->prev;
    left->next = b;
    if (b->prev) b->prev->next = left;
    b->prev = left;
    b->addr = at;
    b->size -= left->size;
    pt_fit_insert(p, left);
  }
  if (rest) {
    /* The block keeps the low part; the rest stays free, with the fences. */
    rest->addr = b->addr + r;
    rest->size = b->size - r;
    rest->is_free = 1;
    rest->nfence = b->nfence;
    memcpy(rest->fence, b->fence, sizeof b->fence);
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = r;
    pt_fit_insert(p, rest);
  }
  b->is_free = 0;
  b->nfence = 0;
  b->req = size;
  pt_stat_live(p, 1, r, size);
  if (p->st.physical_bytes - pt_dev_live(p) < p->trim_floor) p->trim_floor = p->st.physical_bytes - pt_dev_live(p);
  /* A second ask the device met (the caller freed its cache): its first ask
   * is answered, so that the next one past the device is a first ask again. */
  if (deferred && p->tier_ask_twice) pt_tier_ask_met(p, size);
  *ptr = (void *)b->addr;
  pthread_mutex_unlock(&p->mu);
  return 0;
undo:
  if (rest) pt_blk_put(p, rest);
  if (left) pt_blk_put(p, left);
out:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Joins nb, the block right after b, into b (fences, size, links) and
 * recycles nb's record. */
static inline void pt_blk_absorb(struct pt_pool *p, struct pt_blk *b, struct pt_blk *nb) {
  pt_fence_merge(p, b, nb);
  b->size += nb->size;
  b->next = nb->next;
  if (nb->next) nb->next->prev = b;
  pt_blk_put(p, nb);
}

/* Frees b (already out of the live map) with its fence, coalescing. */
static void free_block(struct pt_pool *p, struct pt_blk *b, const struct pt_fence *f) {
  pt_stat_live(p, -1, b->size, b->req);
  b->req = 0;
  b->is_free = 1;
  b->nfence = 0;
  if (f) b->fence[b->nfence++] = *f;
  struct pt_blk *n = b->next, *v = b->prev;
  if (n && n->is_free) {
    pt_fit_remove(p, n);
    pt_blk_absorb(p, b, n);
  }
  if (v && v->is_free) {
    pt_fit_remove(p, v);
    pt_blk_absorb(p, v, b);
    b = v;
  }
  pt_fit_insert(p, b);
  uint64_t free_phys = p->st.physical_bytes - pt_dev_live(p);
  if (free_phys > p->keep && free_phys > p->trim_floor + PT_TRIM_STEP) {
    pt_streams_refresh(p);
    pt_trim_locked(p, p->keep, false);
    p->trim_floor = p->st.physical_bytes - pt_dev_live(p);
  }
}

int pt_pool_free(struct pt_pool *p, void *ptr, pt_bk_stream stream) {
  pthread_mutex_lock(&p->mu);
  struct pt_blk *b = pt_ptrmap_del(&p->live, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return p->bk.ops->err_invalid;
  }
  if (b->tier) {
    int rc = pt_tier_free(p, b, stream, false);
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  struct pt_stream_st *st = stream_get(p, stream, true);
  struct pt_fence f = {stream, ++p->free_seq};
  if (st) {
    st->last_free_seq = f.seq;
  } else if (!p->bk.ops->device_sync(p->bk.ctx)) {
    /* No memory to track this stream: settle it now instead. */
    p->sync_seq = f.seq;
  }
  free_block(p, b, &f);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int pt_pool_free_sync(struct pt_pool *p, void *ptr) {
  pthread_mutex_lock(&p->mu);
  bool live = pt_ptrmap_get(&p->live, (uintptr_t)ptr) != NULL;
  uint64_t seq = p->free_seq;
  pthread_mutex_unlock(&p->mu);
  if (!live) return p->bk.ops->err_invalid;
  /* cudaFree waits for the device; unlocked so other threads keep going. */
  int rc = p->bk.ops->device_sync(p->bk.ctx);
  pthread_mutex_lock(&p->mu);
  if (!rc && seq > p->sync_seq) p->sync_seq = seq;
  if (!rc) p->st.syncs++;
  struct pt_blk *b = pt_ptrmap_del(&p->live, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return p->bk.ops->err_invalid; /* freed meanwhile by another thread */
  }
  if (b->tier) {
    /* After a failed sync its work may still run: wait for it like an async free. */
    int trc = pt_tier_free(p, b, 0, !rc);
    pthread_mutex_unlock(&p->mu);
    return rc ? rc : trc;
  }
  if (rc) {
    /* The sync failed: still free it, fenced on the legacy stream (which
     * orders after all blocking streams), and report the error. */
    struct pt_fence f = {0, ++p->free_seq};
    struct pt_stream_st *st = stream_get(p, 0, true);
    if (st) st->last_free_seq = f.seq;
    free_block(p, b, &f);
  } else {
    free_block(p, b, NULL);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

bool pt_pool_in_range(const struct pt_pool *p, const void *ptr) {
  uintptr_t a = (uintptr_t)ptr;
  int n = __atomic_load_n(&p->narenas, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (a - p->arenas[i].base < p->arenas[i].nslots * p->gran) return true;
  return false;
}

bool pt_pool_owns(struct pt_pool *p, const void *ptr) {
  if (!pt_pool_in_range(p, ptr)) return false;
  pthread_mutex_lock(&p->mu);
  bool own = pt_ptrmap_get(&p->live, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&p->mu);
  return own;
}

size_t pt_pool_block_size(struct pt_pool *p, const void *ptr) {
  if (!pt_pool_in_range(p, ptr)) return 0;
  pthread_mutex_lock(&p->mu);
  struct pt_blk *b = pt_ptrmap_get(&p->live, (uintptr_t)ptr);
  size_t s = b ? b->size : 0;
  pthread_mutex_unlock(&p->mu);
  return s;
}

uint64_t pt_pool_trim(struct pt_pool *p, uint64_t keep) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = pt_trim_locked(p, keep, true);
  pthread_mutex_unlock(&p->mu);
  return n;
}

void pt_pool_set_limit(struct pt_pool *p, uint64_t limit) {
  pthread_mutex_lock(&p->mu);
  p->limit = limit;
  pthread_mutex_unlock(&p->mu);
}

void pt_pool_set_keep(struct pt_pool *p, uint64_t keep) {
  pthread_mutex_lock(&p->mu);
  p->keep = keep;
  p->trim_floor = 0;
  pthread_mutex_unlock(&p->mu);
}

/* Lock-free: called on the pass-through path. The caller pairs every + with
 * its -, so the counter never goes below zero. */
void pt_pool_note_passthrough(struct pt_pool *p, int64_t delta) {
  __atomic_fetch_add(&p->st.passthrough_bytes, (uint64_t)delta, __ATOMIC_RELAXED);
}

void pt_pool_usage(const struct pt_pool *p, struct pt_pool_usage *out) {
  out->physical_bytes = __atomic_load_n(&p->st.physical_bytes, __ATOMIC_RELAXED);
  out->live_bytes = __atomic_load_n(&p->st.live_bytes, __ATOMIC_RELAXED);
  out->passthrough_bytes = __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED);
  out->peak_physical_bytes = __atomic_load_n(&p->st.peak_physical_bytes, __ATOMIC_RELAXED);
  out->peak_live_bytes = __atomic_load_n(&p->st.peak_live_bytes, __ATOMIC_RELAXED);
  out->high_physical_bytes = __atomic_load_n(&p->high_physical, __ATOMIC_RELAXED);
  out->high_live_bytes = __atomic_load_n(&p->high_live, __ATOMIC_RELAXED);
}

void pt_pool_reset_highs(struct pt_pool *p, bool live, bool physical) {
  pthread_mutex_lock(&p->mu);
  uint64_t l = live ? p->st.live_bytes : p->high_live;
  uint64_t ph = physical ? p->st.physical_bytes : p->high_physical;
  __atomic_store(&p->high_live, &l, __ATOMIC_RELAXED);
  __atomic_store(&p->high_physical, &ph, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->mu);
}

int pt_pool_grant_access(struct pt_pool *p, int device) {
  if (!p->bk.ops->add_accessor) return p->bk.ops->err_invalid;
  pthread_mutex_lock(&p->mu);
  int rc = p->bk.ops->add_accessor(p->bk.ctx, device);
  /* Re-set access on every mapped run: set_access now names the new device. */
  for (int i = 0; !rc && i < p->narenas; i++) {
    struct pt_arena *a = &p->arenas[i];
    for (uint64_t s = 0; !rc && s < a->nslots;) {
      if (!pt_bit(a->bits, s)) {
        s++;
        continue;
      }
      uint64_t e = s;
      while (e < a->nslots && pt_bit(a->bits, e)) e++;
      rc = p->bk.ops->set_access(p->bk.ctx, a->base + s * p->gran, (e - s) * p->gran);
      s = e;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int pt_pool_stream_retire(struct pt_pool *p, pt_bk_stream s) {
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  struct pt_stream_st *st = stream_get(p, s, false);
  if (st) {
    if (st->last_free_seq > p->sync_seq && !(st->has_marker && st->marker_seq >= st->last_free_seq && st->done)) {
      if (!(rc = stream_cover(p, st, st->last_free_seq)))
        rc = p->bk.ops->marker_sync(p->bk.ctx, st->marker);
      if (!rc) p->st.syncs++;
    }
    if (!rc) {
      /* Every fence of s is done now: drop them from the free blocks, so
       * that no marker is recorded on s again. */
      uint64_t n = p->nfree_blocks;
      struct pt_blk **all = n ? malloc(n * sizeof *all) : NULL;
      if (n && !all) rc = p->bk.ops->err_oom;
      n = all ? pt_fit_collect(p, 0, all, n) : 0;
      for (uint64_t i = 0; i < n; i++) {
        struct pt_blk *b = all[i];
        uint8_t k = 0;
        for (uint8_t j = 0; j < b->nfence; j++)
          if (b->fence[j].stream != s) b->fence[k++] = b->fence[j];
        b->nfence = k;
      }
      free(all);
      if (!rc) {
        if (st->has_marker) (void)p->bk.ops->marker_destroy(p->bk.ctx, st->marker);
        *st = p->streams[--p->nstreams];
      }
    }
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void pt_pool_stats(struct pt_pool *p, struct pt_pool_stats *out) {
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  out->passthrough_bytes = __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->mu);
  if (p->bk.ops->busy_ns) p->bk.ops->busy_ns(p->bk.ctx, &out->map_ns, &out->wait_ns);
}

void pt_pool_stats_add(struct pt_pool_stats *dst, const struct pt_pool_stats *src) {
#define PT_POOL_STAT_ADD(name) dst->name += src->name;
  PT_POOL_STATS(PT_POOL_STAT_ADD)
#undef PT_POOL_STAT_ADD
}
