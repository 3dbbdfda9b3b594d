/* The limit's pass-through accounting (PONYTAIL_MEM_LIMIT).
 *
 * Limit (PONYTAIL_MEM_LIMIT, per device): pool physical bytes plus the
 * requested bytes of live pass-through allocations made outside capture. The
 * pass-through bytes are reserved before the real call (so concurrent calls
 * cannot overshoot together) and their pointers kept in a lock-striped hash
 * for their frees. Without a limit nothing is tracked. */
#include "shim/route_internal.h"

/* ---- pass-through pointers (only with a limit) ----------------------------
 * Open addressing, linear probing, backward-shift deletion; one mutex per
 * stripe so threads freeing different pointers rarely meet. */
#define PH_STRIPES 64
struct ph_stripe {
  pthread_mutex_t mu;
  struct ph_ent *t;
  uint64_t cap, n;
} __attribute__((aligned(64)));
static struct ph_stripe ph[PH_STRIPES] = {[0 ... PH_STRIPES - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};

static inline uint64_t ph_hash(uintptr_t k) { return (uint64_t)(k >> 8) * 0x9E3779B97F4A7C15ull; }

static int ph_put_locked(struct ph_stripe *s, uintptr_t k, uint64_t size, int dev) {
  if ((s->n + 1) * 2 > s->cap) {
    uint64_t cap = s->cap ? s->cap * 2 : 64;
    struct ph_ent *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (uint64_t i = 0; i < s->cap; i++) {
      if (!s->t[i].key) continue;
      uint64_t j = (ph_hash(s->t[i].key) >> 6) & (cap - 1);
      while (t[j].key) j = (j + 1) & (cap - 1);
      t[j] = s->t[i];
    }
    free(s->t);
    s->t = t;
    s->cap = cap;
  }
  uint64_t j = (ph_hash(k) >> 6) & (s->cap - 1);
  while (s->t[j].key && s->t[j].key != k) j = (j + 1) & (s->cap - 1);
  if (!s->t[j].key) s->n++;
  s->t[j] = (struct ph_ent){k, size, dev};
  return 0;
}

int rt_ph_put(const void *ptr, uint64_t size, int dev) {
  uintptr_t k = (uintptr_t)ptr;
  struct ph_stripe *s = &ph[ph_hash(k) & (PH_STRIPES - 1)];
  pthread_mutex_lock(&s->mu);
  int rc = ph_put_locked(s, k, size, dev);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Removes ptr; true with its entry when it was there. */
bool rt_ph_take(const void *ptr, struct ph_ent *out) {
  uintptr_t k = (uintptr_t)ptr;
  struct ph_stripe *s = &ph[ph_hash(k) & (PH_STRIPES - 1)];
  bool found = false;
  pthread_mutex_lock(&s->mu);
  if (s->n) {
    uint64_t m = s->cap - 1, j = (ph_hash(k) >> 6) & m;
    while (s->t[j].key && s->t[j].key != k) j = (j + 1) & m;
    if (s->t[j].key == k) {
      found = true;
      *out = s->t[j];
      s->n--;
      /* Backward shift: move later entries of the run into the hole when
       * their home slot is not between the hole and them. */
      uint64_t hole = j, i = j;
      for (;;) {
        i = (i + 1) & m;
        if (!s->t[i].key) break;
        uint64_t home = (ph_hash(s->t[i].key) >> 6) & m;
        if (((i - home) & m) >= ((i - hole) & m)) {
          s->t[hole] = s->t[i];
          hole = i;
        }
      }
      s->t[hole].key = 0;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

/* Reserves size pass-through bytes on pool under the limit (trimming the
 * pool's unused memory first if needed). false: over the limit. */
bool rt_limit_reserve(struct pt_pool *pool, uint64_t size) {
  pt_pool_note_passthrough(pool, (int64_t)size);
  struct pt_pool_usage u;
  pt_pool_usage(pool, &u);
  if (u.physical_bytes + u.passthrough_bytes <= R.limit) return true;
  if (u.physical_bytes > u.live_bytes && pt_pool_trim(pool, 0)) {
    pt_pool_usage(pool, &u);
    if (u.physical_bytes + u.passthrough_bytes <= R.limit) return true;
  }
  pt_pool_note_passthrough(pool, -(int64_t)size);
  return false;
}
