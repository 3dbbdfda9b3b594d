/* The free-block index (best fit) and the live-pointer map.
 *
 * Free blocks sit in a treap keyed by (size, address): lower_bound(size) is
 * the best fit, lowest address among equals, in O(log n) expected. The
 * priority is a hash of the address, so runs are deterministic. Live blocks
 * are found by address in an open-addressing hash map (linear probing,
 * backward-shift deletion: no tombstones, so probes stay short). */
#include <stdlib.h>
#include "allocator/pool_internal.h"

static inline bool fit_less(const struct pt_blk *a, const struct pt_blk *b) {
  return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static inline uint32_t fit_prio(uintptr_t addr) {
  uint64_t x = (uint64_t)addr * 0x9E3779B97F4A7C15ull;
  return (uint32_t)(x >> 32);
}

/* Splits t into keys < k (to *l) and keys >= k (to *r). */
static void fit_split(struct pt_blk *t, const struct pt_blk *k, struct pt_blk **l, struct pt_blk **r) {
  while (t) {
    if (fit_less(t, k)) {
      *l = t;
      l = &t->tr;
      t = t->tr;
    } else {
      *r = t;
      r = &t->tl;
      t = t->tl;
    }
  }
  *l = *r = NULL;
}

void pt_fit_insert(struct pt_pool *p, struct pt_blk *b) {
  b->prio = fit_prio(b->addr);
  struct pt_blk **pp = &p->free_root;
  while (*pp && (*pp)->prio >= b->prio) pp = fit_less(b, *pp) ? &(*pp)->tl : &(*pp)->tr;
  fit_split(*pp, b, &b->tl, &b->tr);
  *pp = b;
  p->nfree_blocks++;
}

void pt_fit_remove(struct pt_pool *p, struct pt_blk *b) {
  struct pt_blk **pp = &p->free_root;
  while (*pp && *pp != b) pp = fit_less(b, *pp) ? &(*pp)->tl : &(*pp)->tr;
  if (!*pp) return; /* not indexed: a caller bug, but never corrupt the tree */
  struct pt_blk *a = b->tl, *c = b->tr;
  while (a && c) {
    if (a->prio > c->prio) {
      *pp = a;
      pp = &a->tr;
      a = a->tr;
    } else {
      *pp = c;
      pp = &c->tl;
      c = c->tl;
    }
  }
  *pp = a ? a : c;
  b->tl = b->tr = NULL;
  p->nfree_blocks--;
}

struct pt_blk *pt_fit_lower_bound(struct pt_pool *p, uint64_t size) {
  struct pt_blk *best = NULL, *t = p->free_root;
  while (t) {
    if (t->size >= size) {
      best = t;
      t = t->tl;
    } else {
      t = t->tr;
    }
  }
  return best;
}

static void fit_walk(struct pt_blk *t, uint64_t min_size, struct pt_blk **out, uint64_t max,
                     uint64_t *n) {
  while (t && *n < max) {
    if (t->size >= min_size) fit_walk(t->tl, min_size, out, max, n);
    if (*n >= max) return;
    if (t->size >= min_size) out[(*n)++] = t;
    t = t->tr;
  }
}

uint64_t pt_fit_collect(struct pt_pool *p, uint64_t min_size, struct pt_blk **out, uint64_t max) {
  uint64_t n = 0;
  fit_walk(p->free_root, min_size, out, max, &n);
  return n;
}

static inline uint64_t map_hash(uintptr_t key, uint64_t cap) {
  return ((uint64_t)(key >> 8) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static int map_grow(struct pt_ptrmap *m) {
  uint64_t cap = m->cap ? m->cap * 2 : 1024;
  uintptr_t *keys = calloc(cap, sizeof *keys);
  struct pt_blk **vals = calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return -1;
  }
  for (uint64_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    uint64_t j = map_hash(m->keys[i], cap);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    vals[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  return 0;
}

int pt_ptrmap_put(struct pt_ptrmap *m, uintptr_t key, struct pt_blk *b) {
  if ((m->n + 1) * 2 > m->cap && map_grow(m)) return -1;
  uint64_t j = map_hash(key, m->cap);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (m->cap - 1);
  if (!m->keys[j]) m->n++;
  m->keys[j] = key;
  m->vals[j] = b;
  return 0;
}

struct pt_blk *pt_ptrmap_get(const struct pt_ptrmap *m, uintptr_t key) {
  if (!m->cap || !key) return NULL;
  uint64_t j = map_hash(key, m->cap);
  while (m->keys[j]) {
    if (m->keys[j] == key) return m->vals[j];
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

struct pt_blk *pt_ptrmap_del(struct pt_ptrmap *m, uintptr_t key) {
  if (!m->cap || !key) return NULL;
  uint64_t mask = m->cap - 1, j = map_hash(key, m->cap);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & mask;
  if (!m->keys[j]) return NULL;
  struct pt_blk *b = m->vals[j];
  /* Backward shift: pull later entries of the probe run into the hole when
   * their home slot does not lie (cyclically) between the hole and them. */
  uint64_t hole = j;
  for (uint64_t k = (j + 1) & mask; m->keys[k]; k = (k + 1) & mask) {
    uint64_t home = map_hash(m->keys[k], m->cap);
    bool stays = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
    if (stays) continue;
    m->keys[hole] = m->keys[k];
    m->vals[hole] = m->vals[k];
    hole = k;
  }
  m->keys[hole] = 0;
  m->vals[hole] = NULL;
  m->n--;
  return b;
}

void pt_ptrmap_free(struct pt_ptrmap *m) {
  free(m->keys);
  free(m->vals);
  *m = (struct pt_ptrmap){0};
}
