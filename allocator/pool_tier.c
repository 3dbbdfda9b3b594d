/* The host tier: allocations the device cannot hold, backed partly by
 * page-locked host memory at the same virtual addresses (pool.h). Under the
 * pool's mutex, except the two relaxed readers at the end.
 *
 * Why a tier block has a range of its own and is never reused: host granules
 * are ~60x slower to read than device ones, so none should linger in the
 * free index where a later allocation, fitting on the device, could land on
 * them; and unmapping the whole range at its free gives the pinned host
 * memory back at once. */
#include <stdlib.h>
#include "allocator/pool_internal.h"
#include "common/now_ns.h"

struct tspan {
  pt_bk_handle h;
  uint64_t n;
  bool host;
};

uint64_t pt_dev_room(const struct pt_pool *p, bool spill) {
  uint64_t room = UINT64_MAX;
  if (p->limit) {
    uint64_t used = p->st.physical_bytes + __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED);
    room = used < p->limit ? (p->limit - used) / p->gran : 0;
  }
  /* The reserve: with the tier, the engine sized from the tier's memory
   * (PONYTAIL_HOST_TIER_INFO) and would otherwise take the device to its
   * last granule, leaving nothing for what comes after (a CUDA graph's
   * instantiation failed with out-of-memory so, in vLLM's capture:
   * bench/records/2026-12-07-serving-second-run.md). What spills to the
   * host (a tier block's device part, a move back) leaves all of it, so
   * the program's later allocations (graph pools, activations) still find
   * device memory; those dip into it down to a quarter, which stays the
   * driver's. A failed query leaves the bound to the device's own
   * out-of-memory. */
  uint64_t free_b;
  if (p->tier_reserve && !p->bk.ops->device_free(p->bk.ctx, &free_b)) {
    uint64_t keep = spill ? p->tier_reserve : p->tier_reserve / 4;
    uint64_t r = free_b > keep ? (free_b - keep) / p->gran : 0;
    if (r < room) room = r;
  }
  return room;
}

/* Up to want granules in handles of at most chunk, halving on out-of-memory;
 * appended to sp. Stops short at out-of-memory of a single granule (0), or
 * returns another error. */
static int create_some(struct pt_pool *p, bool host, uint64_t want, struct tspan *sp, uint64_t *nsp, uint64_t *got) {
  const struct pt_backend_ops *o = p->bk.ops;
  while (*got < want) {
    uint64_t n = want - *got < p->chunk ? want - *got : p->chunk;
    for (;;) {
      int rc = host ? o->create_host(p->bk.ctx, n * p->gran, &sp[*nsp].h) : o->create(p->bk.ctx, n * p->gran, &sp[*nsp].h);
      if (!rc) break;
      if (rc != o->err_oom) return rc;
      if (n == 1) return 0;
      n /= 2;
    }
    sp[*nsp].n = n;
    sp[(*nsp)++].host = host;
    *got += n;
  }
  return 0;
}

/* Why a first ask fails: past the device, PyTorch's caching allocator asks
 * cudaMalloc, and on out-of-memory frees every cached segment it holds and
 * asks once more. Covering the first ask from the host would keep that cache
 * (dead segments of a KV cache grown by torch.cat step after step) on the
 * device and put the live tensor on the host, and the cache would never be
 * emptied while the tier has room. So the program's own recovery runs first,
 * as it would stock, and the tier covers only what it still cannot place. */
/* The slot of thread's first ask of size, however old; -1 if none. */
static int ask_find(const struct pt_pool *p, uint64_t size, uint64_t thread) {
  for (int i = 0; i < PT_TIER_ASKS; i++)
    if (p->tier_asks[i].ns && p->tier_asks[i].size == size && p->tier_asks[i].thread == thread) return i;
  return -1;
}

bool pt_tier_second_ask(struct pt_pool *p, uint64_t size) {
  uint64_t now = pt_now_ns(), thread = (uint64_t)pthread_self();
  int i = ask_find(p, size, thread);
  if (i >= 0 && now - p->tier_asks[i].ns < PT_TIER_ASK_NS) {
    p->tier_asks[i].ns = 0;
    return true;
  }
  if (i < 0) { /* a free slot (ns 0) first, else the oldest ask; an expired ask of its own is renewed */
    i = 0;
    for (int j = 1; j < PT_TIER_ASKS; j++)
      if (p->tier_asks[j].ns < p->tier_asks[i].ns) i = j;
  }
  p->tier_asks[i].size = size;
  p->tier_asks[i].thread = thread;
  p->tier_asks[i].ns = now ? now : 1;
  return false;
}

/* On the success path of every retrying allocation with the tier on: no
 * clock read (an expired ask is as good as answered). */
void pt_tier_ask_met(struct pt_pool *p, uint64_t size) {
  int i = ask_find(p, size, (uint64_t)pthread_self());
  if (i >= 0) p->tier_asks[i].ns = 0;
}

int pt_tier_alloc(struct pt_pool *p, uint64_t r, uint64_t req, bool down, struct pt_blk **out) {
  const struct pt_backend_ops *o = p->bk.ops;
  const uint64_t G = p->gran, k = (r + G - 1) / G;
  struct tspan *sp = malloc(k * sizeof *sp);
  struct pt_blk *b = pt_blk_new(p);
  uint64_t nsp = 0, dev = 0, host = 0, mapped = 0;
  uintptr_t va = 0;
  struct pt_arena *ar = NULL;
  uint64_t s0 = 0;
  int rc = o->err_oom;
  if (!sp || !b) goto fail;
  /* As much as the device and the limit give, then the host for the rest. */
  uint64_t room = pt_dev_room(p, true);
  if ((rc = create_some(p, false, k < room ? k : room, sp, &nsp, &dev))) goto fail;
  uint64_t tier_left = (p->tier_limit - p->st.tier_bytes) / G;
  if (k - dev > tier_left) {
    rc = o->err_oom;
    goto refuse;
  }
  if ((rc = create_some(p, true, k - dev, sp, &nsp, &host))) goto fail;
  if (dev + host < k) {
    rc = o->err_oom; /* the host could not pin that much */
    goto refuse;
  }
  if ((rc = pt_place_fresh(p, k, down, &va)) || (rc = pt_arena_slot(p, va, &ar, &s0) ? o->err_invalid : 0)) goto fail;
  for (uint64_t i = 0; i < nsp; i++) {
    if ((rc = o->map(p->bk.ctx, va + mapped * G, sp[i].n * G, sp[i].h))) goto unmap;
    ar->hlen[s0 + mapped] = (uint8_t)sp[i].n;
    for (uint64_t j = 0; j < sp[i].n; j++) {
      ar->handles[s0 + mapped + j] = sp[i].h;
      ar->host[s0 + mapped + j] = sp[i].host;
      pt_bit_set(ar->bits, s0 + mapped + j);
    }
    mapped += sp[i].n;
  }
  if ((rc = o->set_access(p->bk.ctx, va, k * G))) goto unmap;
  *b = (struct pt_blk){.addr = va, .size = k * G, .req = req, .tier = 1};
  if (pt_ptrmap_put(&p->live, va, b)) {
    rc = o->err_oom;
    goto unmap;
  }
  pt_stat_physical(p, (int64_t)dev);
  p->st.tier_bytes += host * G;
  if (p->st.tier_bytes > p->st.peak_tier_bytes) p->st.peak_tier_bytes = p->st.tier_bytes;
  p->st.tier_allocs++;
  pt_stat_live(p, 1, k * G, req);
  free(sp);
  *out = b;
  return 0;
unmap:
  if (mapped) (void)o->unmap(p->bk.ctx, va, mapped * G);
  for (uint64_t j = 0; j < mapped; j++) {
    pt_bit_clr(ar->bits, s0 + j);
    ar->hlen[s0 + j] = 0;
    ar->host[s0 + j] = 0;
  }
  goto fail;
refuse:
  p->st.tier_refusals++;
fail:
  for (uint64_t i = 0; i < nsp; i++) (void)o->release(p->bk.ctx, sp[i].h);
  if (b) pt_blk_put(p, b);
  free(sp);
  return rc;
}

int pt_tier_free(struct pt_pool *p, struct pt_blk *b, pt_bk_stream stream, bool sync) {
  const struct pt_backend_ops *o = p->bk.ops;
  const uint64_t G = p->gran, k = b->size / G;
  (void)stream;
  struct pt_arena *ar;
  uint64_t s0;
  /* Its memory goes back at once, so the work queued on it must be done:
   * the whole device is waited for (a slow path, and the stream may have
   * work on other streams waiting on it). */
  int rc = sync ? 0 : o->device_sync(p->bk.ctx);
  if (!sync && !rc) p->st.syncs++;
  if (!rc) rc = pt_arena_slot(p, b->addr, &ar, &s0) ? o->err_invalid : 0;
  if (!rc) rc = o->unmap(p->bk.ctx, b->addr, b->size);
  if (rc) {
    (void)pt_ptrmap_put(&p->live, b->addr, b); /* still live: nothing was released */
    return rc;
  }
  uint64_t dev = 0, host = 0;
  for (uint64_t s = s0; s < s0 + k; s++) {
    if (ar->hlen[s]) (void)o->release(p->bk.ctx, ar->handles[s]);
    if (ar->host[s]) host++;
    else dev++;
    ar->hlen[s] = 0;
    ar->host[s] = 0;
    pt_bit_clr(ar->bits, s);
  }
  pt_stat_physical(p, -(int64_t)dev);
  p->st.tier_bytes -= host * G;
  pt_stat_live(p, -1, b->size, b->req);
  p->st.tier_frees++;
  pt_blk_put(p, b);
  return 0;
}

/* Moves the host handle at slots [s, s+n) of ar (mapped at va) to new device
 * memory, through the scratch range. 0 (moved), err_oom (no device memory:
 * nothing changed), or another error: the host handle is mapped back where it
 * was (its bytes never left it). */
static int move_one(struct pt_pool *p, struct pt_arena *ar, uint64_t s, uint64_t n, uintptr_t va) {
  const struct pt_backend_ops *o = p->bk.ops;
  const uint64_t G = p->gran, bytes = n * G;
  pt_bk_handle d;
  int rc = o->create(p->bk.ctx, bytes, &d);
  if (rc) return rc;
  if ((rc = o->map(p->bk.ctx, p->scratch, bytes, d))) goto release;
  /* A device-to-device copy may return before it is done: waited for before
   * the source is unmapped. */
  if ((rc = o->set_access(p->bk.ctx, p->scratch, bytes)) || (rc = o->copy_d2d(p->bk.ctx, p->scratch, va, bytes)) ||
      (rc = o->device_sync(p->bk.ctx))) {
    (void)o->unmap(p->bk.ctx, p->scratch, bytes);
    goto release;
  }
  if ((rc = o->unmap(p->bk.ctx, p->scratch, bytes)) || (rc = o->unmap(p->bk.ctx, va, bytes))) goto release;
  if ((rc = o->map(p->bk.ctx, va, bytes, d)) || (rc = o->set_access(p->bk.ctx, va, bytes))) {
    /* Put the host granule back where it was: its bytes are still there. */
    (void)o->unmap(p->bk.ctx, va, bytes);
    if (!o->map(p->bk.ctx, va, bytes, ar->handles[s])) (void)o->set_access(p->bk.ctx, va, bytes);
    goto release;
  }
  (void)o->release(p->bk.ctx, ar->handles[s]);
  for (uint64_t j = s; j < s + n; j++) {
    ar->handles[j] = d;
    ar->host[j] = 0;
  }
  pt_stat_physical(p, (int64_t)n);
  p->st.tier_bytes -= bytes;
  p->st.tier_moved_bytes += bytes;
  return 0;
release:
  (void)o->release(p->bk.ctx, d);
  return rc;
}

int pt_pool_tier_promote(struct pt_pool *p, uint64_t max_bytes, uint64_t *moved) {
  const struct pt_backend_ops *o = p->bk.ops;
  *moved = 0;
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  if (!p->st.tier_bytes || p->asleep) goto out;
  if (!o->copy_d2d) {
    rc = o->err_invalid;
    goto out;
  }
  if (!p->scratch && (rc = o->reserve(p->bk.ctx, 255 * p->gran, &p->scratch))) {
    p->scratch = 0;
    goto out;
  }
  /* The pool's own free device memory first: under a limit it counts as
   * used, and on a full device it is what new handles need. */
  (void)pt_trim_locked(p, 0, true);
  for (uint64_t i = 0; i < p->live.cap && !rc; i++) {
    struct pt_blk *b = p->live.keys[i] ? p->live.vals[i] : NULL;
    struct pt_arena *ar;
    uint64_t s0;
    if (!b || !b->tier || pt_arena_slot(p, b->addr, &ar, &s0)) continue;
    for (uint64_t s = s0; s < s0 + b->size / p->gran && !rc;) {
      uint64_t n = ar->hlen[s];
      if (!n) { /* cannot happen in a consistent pool; never loop on it */
        s++;
        continue;
      }
      if (ar->host[s]) {
        if (max_bytes && *moved >= max_bytes) goto out;
        if (pt_dev_room(p, true) < n) goto out; /* the limit or the reserve: stop, not an error */
        rc = move_one(p, ar, s, n, ar->base + s * p->gran);
        if (rc == o->err_oom) { /* the device is full: what moved stays moved */
          rc = 0;
          goto out;
        }
        if (!rc) *moved += n * p->gran;
      }
      s += n;
    }
  }
out:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Under the mutex: the smallest host handle of the live tier blocks, in
 * bytes (0: none). */
static uint64_t min_move(const struct pt_pool *p) {
  uint64_t min = 0;
  for (uint64_t i = 0; p->st.tier_bytes && i < p->live.cap; i++) {
    struct pt_blk *b = p->live.keys[i] ? p->live.vals[i] : NULL;
    struct pt_arena *ar;
    uint64_t s0;
    if (!b || !b->tier || pt_arena_slot(p, b->addr, &ar, &s0)) continue;
    for (uint64_t s = s0; s < s0 + b->size / p->gran;) {
      uint64_t n = ar->hlen[s] ? ar->hlen[s] : 1;
      if (ar->host[s] && (!min || n * p->gran < min)) min = n * p->gran;
      s += n;
    }
  }
  return min;
}

bool pt_pool_tier_movable(struct pt_pool *p) {
  pthread_mutex_lock(&p->mu);
  /* What promote can give the device: the driver's free memory plus the
   * pool's own free device memory (it trims that first), less the reserve,
   * within the limit (which counts the pool's free memory as used until
   * the trim). A failed query counts the pool's free memory alone. */
  uint64_t dev_live = pt_dev_live(p), pool_free = p->st.physical_bytes - dev_live, fr = 0;
  if (!p->bk.ops->device_free || p->bk.ops->device_free(p->bk.ctx, &fr)) fr = 0;
  uint64_t room = fr + pool_free;
  room = room > p->tier_reserve ? room - p->tier_reserve : 0;
  if (p->limit) {
    uint64_t used = p->st.physical_bytes + __atomic_load_n(&p->st.passthrough_bytes, __ATOMIC_RELAXED) - pool_free;
    uint64_t lim_room = used < p->limit ? p->limit - used : 0;
    if (lim_room < room) room = lim_room;
  }
  uint64_t need = min_move(p);
  pthread_mutex_unlock(&p->mu);
  return need && room >= need;
}

uint64_t pt_pool_tier_bytes(const struct pt_pool *p) { return __atomic_load_n(&p->st.tier_bytes, __ATOMIC_RELAXED); }

uint64_t pt_pool_tier_room(const struct pt_pool *p) {
  uint64_t t = pt_pool_tier_bytes(p);
  return t < p->tier_limit ? p->tier_limit - t : 0;
}
