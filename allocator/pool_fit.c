/* The free-block index (best fit, and the fit by handles for blocks of a
 * granule or more) and the live-pointer map.
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

/* Granules of the handles wholly inside free block b that [at, at + r)
 * touches: memory free now that the new block would hold. A handle b shares
 * with a live neighbour (at b's ends) is held already and counts nothing.
 * *touched: the handles it touches, all of them. */
static uint64_t fit_pins(const struct pt_pool *p, const struct pt_blk *b, uintptr_t at, uint64_t r,
                         uint64_t *touched) {
  const uint64_t G = p->gran;
  struct pt_arena *ar;
  uint64_t s, pins = 0;
  *touched = 0;
  if (pt_arena_slot(p, at / G * G, &ar, &s)) return UINT64_MAX;
  for (s = pt_head_of(ar, s); ar->base + s * G < at + r; s += ar->hlen[s], ++*touched) {
    uintptr_t hs = ar->base + s * G, he = hs + ar->hlen[s] * G;
    if (hs >= b->addr && he <= b->addr + b->size) pins += ar->hlen[s];
  }
  return pins;
}

/* Handles are stitched and trimmed whole, so free granules in a handle that
 * also holds a live block are stranded: neither growth nor trim can use
 * them, and the pool creates new memory above its peak instead. Best fit at
 * a free block's start let blocks spill from a handle shared with their
 * neighbour into free ones, and took free handles whole where a rest in a
 * partly used handle would do: on the padded batch-16 trace 332 MiB (of 339
 * over peak live, 7.7%) sat in such handles at the peak. With the rest of the
 * policy as it is, best fit leaves that trace at 3.3% over peak live, this
 * fit at 0.8% (bench/records/2026-12-01-pool-padded-b16.md). Runs only from
 * a granule up, where a block can span handles; the cost is a walk over the
 * handles under each candidate's place, no driver call. */
struct pt_blk *pt_fit_place(struct pt_pool *p, uint64_t r, uintptr_t *at) {
  const uint64_t G = p->gran;
  struct pt_blk *c[PT_FIT_CANDIDATES];
  uint64_t n = pt_fit_collect(p, r, c, PT_FIT_CANDIDATES), best_pins = UINT64_MAX;
  if (!n) return NULL;
  struct pt_blk *best = c[0];
  *at = best->addr;
  for (uint64_t i = 0; i < n && best_pins; i++) {
    struct pt_blk *b = c[i];
    uintptr_t lo = b->addr, pos = lo;
    uint64_t touched, pins = fit_pins(p, b, lo, r, &touched);
    /* b starts inside a handle it shares with its live neighbour: the block
     * may start at that handle's end instead, leaving the shared handle's
     * part free (held by the neighbour anyway). It does when that holds no
     * more free granules and touches fewer handles: its handles are then its
     * own, and the neighbour's handle is whole again once the neighbour is
     * freed, for trimming and stitching. */
    struct pt_arena *ar;
    uint64_t s;
    if (b->size > r && !pt_arena_slot(p, lo / G * G, &ar, &s)) {
      uint64_t h = pt_head_of(ar, s), t;
      uintptr_t next = ar->base + (h + ar->hlen[h]) * G;
      if (ar->base + h * G < lo && next + r <= lo + b->size) {
        uint64_t q = fit_pins(p, b, next, r, &t);
        if (q < pins || (q == pins && t < touched)) pins = q, pos = next;
      }
    }
    if (pins < best_pins) best = b, best_pins = pins, *at = pos;
  }
  return best;
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
