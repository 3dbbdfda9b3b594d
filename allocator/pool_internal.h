/* Internals shared by the pool's files (pool.c: alloc/free and streams;
 * pool_fit.c: free-block index and live-pointer map; pool_grow.c: mapping,
 * stitching, trimming, executing the growth plans of pool_plan.c, which sees
 * none of this; pool_check.c: invariants for tests). */
#ifndef PT_ALLOC_POOL_INTERNAL_H
#define PT_ALLOC_POOL_INTERNAL_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "allocator/pool.h"

/* Streams whose pending work a free block may carry; more are resolved by
 * waiting (rare: it takes frees on this many streams coalescing into one). */
#define PT_POOL_FENCES 4
#define PT_POOL_MAX_ARENAS 32
/* First asks remembered for tier_ask_twice: threads asking past the device at
 * the same time each get their second ask covered. */
#define PT_TIER_ASKS 4

/* "Stream s freed this memory when the pool's free counter was seq": work on
 * s queued before that point may still use it. */
struct pt_fence {
  pt_bk_stream stream;
  uint64_t seq;
};

struct pt_blk {
  uintptr_t addr;
  uint64_t size;
  uint64_t req;               /* live block: the size the caller asked for */
  struct pt_blk *prev, *next; /* address neighbours in the same segment */
  struct pt_blk *tl, *tr;     /* free index (treap) children */
  uint32_t prio;              /* treap priority, from the address */
  uint8_t is_free, nfence;
  uint8_t tier; /* a host-tier block: alone in its range, freed by unmapping it (pool_tier.c) */
  struct pt_fence fence[PT_POOL_FENCES];
};

/* A reserved VA range; granule slot i is mapped when bit i of bits is set,
 * to part of handles[i]. A handle covers hlen[i] slots from its first slot i
 * (hlen is 0 on the others, which repeat its handle): it is mapped, moved and
 * released whole. */
struct pt_arena {
  uintptr_t base;
  uint64_t nslots;
  uint64_t *bits;
  pt_bk_handle *handles;
  uint8_t *hlen;
  uint8_t *host; /* 1 on every slot of a host-tier handle */
};

/* A handle and its size in granules, as the slow path moves them around. */
struct pt_hspan {
  pt_bk_handle h;
  uint64_t n;
};

/* Per stream: one reusable marker, recorded lazily when another stream needs
 * to know whether this one's frees are done. */
struct pt_stream_st {
  pt_bk_stream stream;
  pt_bk_marker marker;
  uint64_t marker_seq;    /* free counter when the marker was last recorded */
  uint64_t last_free_seq; /* free counter of this stream's last free */
  /* Every free of this stream with seq <= done_seq is known finished. Kept
   * apart from the marker: re-recording the one marker must not forget that
   * its previous record completed (else nothing freed before the latest
   * record is ever seen done while the device runs behind the host). */
  uint64_t done_seq;
  bool has_marker, done;  /* done: the last record is known complete */
};

struct pt_ptrmap {
  uintptr_t *keys; /* 0 = empty */
  struct pt_blk **vals;
  uint64_t cap, n; /* cap is a power of two */
};

struct pt_blk_chunk {
  struct pt_blk_chunk *next;
  struct pt_blk blks[];
};

struct pt_pool {
  pthread_mutex_t mu;
  struct pt_backend bk;
  int device;
  uint64_t gran;
  uint64_t keep, limit, arena_bytes;
  uint64_t chunk; /* granules per handle created when growing (1..255) */
  uint64_t tier_limit; /* host tier size in bytes (0: none) */
  uint64_t tier_reserve; /* with a tier: device bytes left free (pool.h) */
  bool tier_ask_twice;   /* pool.h; the recent first asks in tier_asks (pool_tier.c) */
  struct {
    uint64_t size, ns, thread; /* the asking thread: PyTorch asks again from the same one */
  } tier_asks[PT_TIER_ASKS];
  uintptr_t scratch;   /* promote's scratch range (255 granules), reserved at first use */
  bool order_up;  /* synchronous allocations' fresh ranges lowest first, as stream-ordered ones */

  struct pt_arena arenas[PT_POOL_MAX_ARENAS];
  int narenas; /* read without the lock (atomic acquire) by pt_pool_in_range */

  struct pt_blk *free_root; /* treap keyed by (size, addr) */
  uint64_t nfree_blocks;
  struct pt_ptrmap live;
  struct pt_blk *blk_spare;
  struct pt_blk_chunk *chunks;

  struct pt_stream_st *streams;
  uint64_t nstreams, cap_streams;
  uint64_t free_seq; /* bumped by every free */
  uint64_t sync_seq; /* every fence with seq <= sync_seq is done */

  uint64_t trim_floor; /* free physical bytes after the last automatic trim */
  /* Highs since the application last reset them (cudaMemPoolSetAttribute on
   * the default pool's ReservedMemHigh / UsedMemHigh, as torch's
   * reset_peak_memory_stats does); st's peaks stay the process's. */
  uint64_t high_live, high_physical;
  struct pt_pool_stats st;

  /* Sleep and wake (pool_sleep.c). A set of sleeping entries: the handles
   * released, by where they were mapped, with the host memory their bytes
   * wait in (none: dropped), and the range the host handles are mapped in
   * (sleep_host PT_SLEEP_IN_HANDLES; va_size 0 with buffers). A sleeping slot keeps its bit and
   * hlen; its handles[] is stale. */
  struct pt_sleep_set {
    struct pt_sleep_ent {
      int arena;
      uint64_t slot, n;
      void *host;      /* page-locked buffer (PT_SLEEP_IN_PINNED or _REGISTERED) */
      pt_bk_handle hh; /* host handle mapped at hva (PT_SLEEP_IN_HANDLES) */
      uintptr_t hva;
      bool hcreated, hmapped;
      bool faulted; /* host is a FAULTED buffer, not yet page-locked (host_lock) */
      bool mapped; /* a wake in progress has mapped new memory for it */
    } *e;
    uint64_t n;
    uintptr_t va;
    uint64_t va_size;
  } slept, /* while asleep */
      gone,  /* what the last wake left to free once the process runs again (pt_pool_release_kept) */
      cache; /* with sleep_reuse: what pt_pool_release_kept kept for the next sleep instead */
  bool asleep;
  int sleep_host;    /* pt_pool_config.sleep_host */
  int sleep_threads; /* pt_pool_config.sleep_threads */
  int sleep_reuse;   /* pt_pool_config.sleep_reuse */
};

/* pool_fit.c */
void pt_fit_insert(struct pt_pool *p, struct pt_blk *b);
void pt_fit_remove(struct pt_pool *p, struct pt_blk *b);
struct pt_blk *pt_fit_lower_bound(struct pt_pool *p, uint64_t size); /* best fit */
/* Appends free blocks of size >= min_size, ascending, to out (at most max). */
uint64_t pt_fit_collect(struct pt_pool *p, uint64_t min_size, struct pt_blk **out, uint64_t max);
/* Free blocks pt_fit_place weighs: the best fits, in order. 8 chose as all
 * of them did on the recorded traces; each costs a walk over its handles. */
#define PT_FIT_CANDIDATES 8
/* The fit for a block of size >= one granule, by the handles it would hold
 * (pool.h): among the PT_FIT_CANDIDATES best fits, the free block, and in it
 * the address *at (its start, or the end of a handle it shares with its live
 * neighbour), whose new block would hold the fewest granules of handles now
 * wholly free; ties keep the best fit. NULL when no free block holds size. */
struct pt_blk *pt_fit_place(struct pt_pool *p, uint64_t size, uintptr_t *at);
int pt_ptrmap_put(struct pt_ptrmap *m, uintptr_t key, struct pt_blk *b);
struct pt_blk *pt_ptrmap_get(const struct pt_ptrmap *m, uintptr_t key);
struct pt_blk *pt_ptrmap_del(struct pt_ptrmap *m, uintptr_t key);
void pt_ptrmap_free(struct pt_ptrmap *m);

/* pool.c */
struct pt_blk *pt_blk_new(struct pt_pool *p);
void pt_blk_put(struct pt_pool *p, struct pt_blk *b);
void pt_fence_merge(struct pt_pool *p, struct pt_blk *dst, const struct pt_blk *src);
/* Drops b's fences known done; with wait, waits for the others. 0 or error. */
int pt_fences_settle(struct pt_pool *p, struct pt_blk *b, bool wait);
/* Records a marker on every stream whose latest frees no marker covers, so a
 * later query can tell them done. */
void pt_streams_refresh(struct pt_pool *p);
void pt_stat_physical(struct pt_pool *p, int64_t delta_granules);
void pt_stat_live(struct pt_pool *p, int sign, uint64_t bytes, uint64_t req);

/* pool_sleep.c: under the mutex, drops a sleeping pool's state (its host
 * copies, and the slots of its released handles) so that it can be destroyed. */
void pt_sleep_forget(struct pt_pool *p);

/* pool_tier.c */
/* Under the mutex: a tier block for r bytes (size the caller asked: req),
 * or err_oom (counted in tier_refusals). */
int pt_tier_alloc(struct pt_pool *p, uint64_t r, uint64_t req, bool down, struct pt_blk **out);
/* Under the mutex, with tier_ask_twice: whether an allocation of size bytes
 * that only the tier could cover is the second ask (true: cover it), or a
 * first one, remembered (false: answer out-of-memory, tier_deferrals). */
bool pt_tier_second_ask(struct pt_pool *p, uint64_t size);
/* Under the mutex: this thread's first ask of size, if any, is answered. */
void pt_tier_ask_met(struct pt_pool *p, uint64_t size);
/* Under the mutex, b out of the live map: waits for stream's work (sync:
 * the device was synchronized already), unmaps and releases b's range. */
int pt_tier_free(struct pt_pool *p, struct pt_blk *b, pt_bk_stream stream, bool sync);
/* Granules of new device memory allowed now: within the limit and, with a
 * tier, leaving its reserve of the device free (spill: for a tier block's
 * device part or a move back), or a quarter of it (the pool's other growth)
 * (UINT64_MAX: no bound). */
uint64_t pt_dev_room(const struct pt_pool *p, bool spill);
/* Device bytes in use (live_bytes less the tier's host bytes). */
static inline uint64_t pt_dev_live(const struct pt_pool *p) { return p->st.live_bytes - p->st.tier_bytes; }

/* pool_grow.c */
/* A fresh range of k granules with guard slots (pt_grow's placement). */
int pt_place_fresh(struct pt_pool *p, uint64_t k, bool down, uintptr_t *va);
/* down: a fresh range goes at the highest free place (else the lowest). */
int pt_grow(struct pt_pool *p, uint64_t size, bool down);
uint64_t pt_trim_locked(struct pt_pool *p, uint64_t keep, bool wait);
int pt_arena_slot(const struct pt_pool *p, uintptr_t va, struct pt_arena **a, uint64_t *slot);
void pt_unmap_all(struct pt_pool *p);

static inline bool pt_bit(const uint64_t *bits, uint64_t i) { return bits[i >> 6] >> (i & 63) & 1; }
static inline void pt_bit_set(uint64_t *bits, uint64_t i) { bits[i >> 6] |= (uint64_t)1 << (i & 63); }
static inline void pt_bit_clr(uint64_t *bits, uint64_t i) { bits[i >> 6] &= ~((uint64_t)1 << (i & 63)); }
/* First slot of the handle that mapped slot s belongs to. */
static inline uint64_t pt_head_of(const struct pt_arena *a, uint64_t s) {
  while (!a->hlen[s]) s--;
  return s;
}

#endif
