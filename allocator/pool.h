/* The pooled, compacting allocator: one pool per (backend, device).
 *
 * Policy (why, in short; details in pool_grow.c):
 * - Sizes are rounded up to 256 B; every block is 256-byte aligned.
 * - Blocks live in "segments": runs of whole granules mapped at contiguous
 *   addresses inside large reserved VA arenas, made of physical handles of
 *   up to a chunk (PT_POOL_CHUNK_DEFAULT), each mapped, moved and given back
 *   whole. Free blocks are kept mapped and reused, with splitting and
 *   coalescing of address neighbours: below a granule, best fit (smallest
 *   block that fits, lowest address on ties); from a granule up, among the
 *   best fits, where the new block would hold the fewest granules of wholly
 *   free handles (at a free block's start, or at the end of a handle it
 *   shares with a live neighbour when that touches fewer handles; ties keep
 *   the best fit). A block that spills into a free handle pins all of it:
 *   free granules in a partly used handle can be neither stitched nor
 *   trimmed (pool_fit.c).
 * - When no free block fits, the pool maps more granules, preferably right
 *   after a segment that ends in a free block (it grows in place, the free
 *   tail is used). The granules come, in order, from wholly free granules
 *   whose work is finished ("stitching": unmapped from where they were and
 *   mapped into the new place), from new physical memory while that stays
 *   under the pool's peak physical so far (and the limit), then from wholly
 *   free granules whose work is still pending (after waiting for it), and
 *   last from new memory; a free handle larger than what is missing is
 *   stitched whole (the rest stays free after the block) before new memory
 *   above the peak is created (growing in place, only when the range then
 *   still fits after the segment). A new range's handles are mapped largest
 *   first, so that handle ends fall on the chunk's grid from the block's
 *   start (pool_grow.c). So fragmentation never causes an out-of-memory
 *   while enough physical memory is free, and physical memory stays close to
 *   live memory even when the device runs far behind the host.
 * - Trim gives wholly free granules back to the backend: on request, and
 *   after frees when free physical memory exceeds the keep threshold.
 * - Stream order: a block freed on stream S is reusable at once on S. Another
 *   stream T gets it only after a marker recorded on S (at reuse time) is
 *   done, or after T was made to wait on it. Memory is unmapped or released
 *   only once every stream that freed it is known done.
 *
 * Thread-safe: one mutex per pool; backend calls happen under it.
 * Errors: functions return 0 or the backend's error code (a CUresult for the
 * VMM backend; ops->err_oom when memory or the limit runs out; ops->err_invalid
 * for a pointer the pool does not own). The pool never aborts. */
#ifndef PT_ALLOC_POOL_H
#define PT_ALLOC_POOL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "allocator/backend.h"

struct pt_pool;
struct pt_jw;

#define PT_POOL_ALIGN 256u
/* Requests of at least this many granules are rounded up to whole granules. */
#define PT_POOL_ROUND_GRANULES 4u
/* Requests of at least this many granules that grow a free block's tail get
 * the rest of the last new handle as free slack after them (pool_grow.c). */
#define PT_POOL_SLACK_MIN_GRANULES 4u
/* The default of PONYTAIL_POOL_KEEP, for callers without the options table. */
#define PT_POOL_KEEP_DEFAULT ((uint64_t)2 << 30)
/* Physical memory per handle when the pool grows (chunk_bytes 0). The
 * driver's VMM calls cost about the same per handle whatever its size (H200:
 * create + map + set access + unmap + release ~58 us for 2 MiB, ~68 us for
 * 32 MiB; bench/records/2026-11-29-physical-handles-32mib.md), so growing by 2 MiB handles
 * spent most of a prefill's allocator time in the driver. A handle is mapped and moved
 * whole, so stitching and trimming work in whole handles: smaller chunks
 * leave less free memory stranded in partly used handles. The fit by handles,
 * the largest-first order of a range's handles and stitching a larger free
 * handle before creating above the peak keep that stranding within 2% of
 * peak live on every recorded trace at 32 MiB, with the device in step or
 * behind (7.7% on a padded batch-16 trace before;
 * bench/records/2026-12-01-pool-padded-b16.md). */
#define PT_POOL_CHUNK_DEFAULT ((uint64_t)32 << 20)
/* The chunk the shim and `ponytail replay` use when none is asked for: one
 * granule under a limit, where stitching must be able to reclaim any free
 * granule ("fragmentation never causes an OOM while enough memory is free");
 * PT_POOL_CHUNK_DEFAULT otherwise. */
static inline uint64_t pt_pool_chunk_auto(uint64_t chunk_bytes, uint64_t limit_bytes) {
  return chunk_bytes ? chunk_bytes : limit_bytes ? 1 : PT_POOL_CHUNK_DEFAULT;
}

/* pt_pool_config.sleep_host; the values of PONYTAIL_SLEEP_HOST's choices
 * (common/options.h). */
enum { PT_SLEEP_IN_PINNED, PT_SLEEP_IN_HANDLES, PT_SLEEP_IN_REGISTERED };

/* How long a first ask past the device is remembered (tier_ask_twice):
 * PyTorch's second ask follows the release of its whole cache, a device
 * synchronisation and a free per cached segment. */
#define PT_TIER_ASK_NS 5000000000ull

struct pt_pool_config {
  uint64_t keep_bytes;  /* free physical memory kept mapped (PONYTAIL_POOL_KEEP) */
  uint64_t limit_bytes; /* cap on physical + pass-through bytes; 0 = none (PONYTAIL_MEM_LIMIT) */
  uint64_t arena_bytes; /* VA reserved at a time; 0 = 256 GiB */
  uint64_t chunk_bytes; /* largest handle created when growing (rounded up to granules, at most
                           255 granules); 0 = PT_POOL_CHUNK_DEFAULT; a granule or less = one
                           granule per handle, so stitching can move any free granule */
  uint64_t tier_bytes;  /* host tier (PONYTAIL_HOST_TIER): page-locked host bytes that may back
                           allocations the device (or the limit) cannot; 0 = none (pool_tier.c) */
  uint64_t tier_reserve_bytes; /* with a tier: device bytes new device memory leaves free (backend
                           op device_free), for what is allocated outside the pool and by the
                           driver itself (PONYTAIL_HOST_TIER_RESERVE); past it, the tier */
  int tier_ask_twice;   /* with a tier: pt_pool_alloc_any_retry's allocations only the tier could
                           cover fail once with out-of-memory and are covered when the same thread
                           asks the same size again within PT_TIER_ASK_NS (PONYTAIL_HOST_TIER_RETRY):
                           a caching allocator (PyTorch empties its cache and asks once more) first
                           gives back what it holds */
  int order_up;         /* synchronous allocations (pt_pool_alloc_any, cudaMalloc semantics):
                           0 = a fresh range goes at the highest free place, below the ranges
                           placed before it, where the driver's cudaMalloc puts large
                           allocations; 1 = the lowest, as for stream-ordered allocations,
                           whose ranges always go lowest first, with room to grow in place
                           (PONYTAIL_POOL_ORDER). PyTorch's caching allocator breaks ties
                           between free blocks of one size by address, so segments in the
                           driver's order keep its choices, and its memory use, as stock's
                           (bench/records/2026-12-01-pool-order.md) */
  int sleep_host;       /* where a sleep keeps the bytes (PONYTAIL_SLEEP_HOST), PT_SLEEP_IN_*:
                           PINNED page-locked buffers (host_alloc: cuMemHostAlloc), HANDLES host
                           handles (create_host: cuMemCreate on the host) mapped in a range of
                           their own and copied device to device, REGISTERED ordinary memory
                           faulted in and then page-locked (host_alloc: cuMemHostRegister)
                           (pool_sleep.c) */
  int sleep_reuse;      /* 1: a wake keeps the host memory for the next sleep (PONYTAIL_SLEEP_REUSE):
                           held while awake, every sleep after the first copies at once */
  int sleep_threads;    /* threads that get a sleep's host memory in parallel (PONYTAIL_SLEEP_THREADS;
                           0 or 1: the calling thread alone): the kernel zeroes and pins every
                           page, one thread at ~1.4 GB/s on the H100 */
};

/* Counters; the JSON keys are the member names. */
#define PT_POOL_STATS(X)                                                           \
  X(pooled_allocs)     /* successful pt_pool_alloc calls */                        \
  X(pooled_frees)      /* successful pt_pool_free / pt_pool_free_sync calls */     \
  X(live_bytes)        /* live block sizes (256 B multiples; granules when large) */ \
  X(peak_live_bytes)                                                               \
  X(requested_bytes)   /* sum of the sizes callers asked for, live blocks */       \
  X(peak_requested_bytes)                                                          \
  X(physical_bytes)    /* granules currently mapped by the pool */                 \
  X(peak_physical_bytes)                                                           \
  X(passthrough_bytes) /* as reported by pt_pool_note_passthrough */               \
  X(grows)             /* times new physical memory was created */                 \
  X(stitches)          /* times free granules were remapped to a new place */      \
  X(stitched_bytes)                                                                \
  X(trims)             /* trim passes that released memory */                      \
  X(trimmed_bytes)                                                                 \
  X(limit_rejections)  /* growths refused by the limit (or a host tier's reserve) */ \
  X(cross_stream_waits) /* reuses that made a stream wait on another */            \
  X(syncs)             /* blocking waits for the device (stitch/trim/free_sync) */ \
  X(map_ns)            /* host ns in the backend's mapping calls (0: not measured) */ \
  X(wait_ns)           /* host ns blocked waiting for the device (0: not measured) */ \
  X(sleeps)            /* pt_pool_sleep calls that put the pool to sleep */        \
  X(wakes)             /* pt_pool_wake calls that woke it */                       \
  X(asleep_bytes)      /* physical bytes released by the current sleep (0 awake) */ \
  X(host_bytes)        /* of those, kept in host memory (the rest was dropped) */ \
  X(host_kept_bytes)   /* host memory held while awake for the next sleep (sleep_reuse) */ \
  X(host_reused_bytes) /* bytes of sleeps that found their host memory kept */ \
  X(prepares)          /* successful pt_pool_sleep_prepare calls */             \
  X(tier_bytes)        /* host-tier bytes now backing live allocations */          \
  X(peak_tier_bytes)                                                               \
  X(tier_allocs)       /* allocations given host-tier granules */                  \
  X(tier_frees)                                                                    \
  X(tier_moved_bytes)  /* host-tier bytes moved back to the device */              \
  X(tier_refusals)     /* allocations the tier could not cover either */            \
  X(tier_deferrals)    /* first asks past the device answered out-of-memory (tier_ask_twice) */

struct pt_pool_stats {
#define PT_POOL_STAT_MEMBER(name) uint64_t name;
  PT_POOL_STATS(PT_POOL_STAT_MEMBER)
#undef PT_POOL_STAT_MEMBER
};

/* Creates a pool over bk for device (the ordinal is only recorded: the
 * backend is already bound to its device). The pool owns bk from then on and
 * calls bk->ops->destroy at pt_pool_destroy. cfg NULL = defaults. 0 or error. */
int pt_pool_create(struct pt_backend bk, int device, const struct pt_pool_config *cfg,
                   struct pt_pool **out);
/* Releases everything (synchronizes the device first). Live blocks are
 * dropped: their memory is unmapped too. */
void pt_pool_destroy(struct pt_pool *pool);
int pt_pool_device(const struct pt_pool *pool);

/* size 0 is treated as 1. *ptr is 256-byte aligned. */
int pt_pool_alloc(struct pt_pool *pool, size_t size, pt_bk_stream stream, void **ptr);
/* cudaMalloc semantics: the block may be used at once by any stream, so the
 * pending work of earlier frees into it is waited for on the host (rare: only
 * when it reuses memory freed stream-ordered and not finished yet). */
int pt_pool_alloc_any(struct pt_pool *pool, size_t size, void **ptr);
/* The same, for a caller that asks again after out-of-memory (cudaMalloc as
 * PyTorch's caching allocator uses it, outside graph capture): with
 * tier_ask_twice, an allocation only the host tier could cover fails with
 * err_oom at this thread's first ask of that size and is covered at its
 * second within PT_TIER_ASK_NS (*deferred, if not NULL, says whether this
 * call was such a first ask). pt_pool_alloc_any never defers. */
int pt_pool_alloc_any_retry(struct pt_pool *pool, size_t size, void **ptr, bool *deferred);
/* cudaFreeAsync semantics: reusable at once on stream, elsewhere after it. */
int pt_pool_free(struct pt_pool *pool, void *ptr, pt_bk_stream stream);
/* cudaFree semantics: synchronizes the device, then frees. */
int pt_pool_free_sync(struct pt_pool *pool, void *ptr);
/* true when ptr is the start of a live block of this pool. Addresses outside
 * the pool's arenas answer false without taking the lock. */
bool pt_pool_owns(struct pt_pool *pool, const void *ptr);
/* Quick range check only (no lock): ptr lies in the pool's address space. */
bool pt_pool_in_range(const struct pt_pool *pool, const void *ptr);
/* The block's size (the request rounded to 256 B), 0 if ptr is not live. */
size_t pt_pool_block_size(struct pt_pool *pool, const void *ptr);

/* Releases wholly free granules until free physical memory (physical - live)
 * is at most keep_bytes, waiting for pending work where needed. Returns the
 * bytes released. Call it when a pass-through allocation failed for lack of
 * memory, then retry that allocation. */
uint64_t pt_pool_trim(struct pt_pool *pool, uint64_t keep_bytes);
void pt_pool_set_limit(struct pt_pool *pool, uint64_t limit_bytes);
void pt_pool_set_keep(struct pt_pool *pool, uint64_t keep_bytes);
/* The shim reports pass-through device bytes (+ on alloc, - on free); they
 * count against the limit. */
void pt_pool_note_passthrough(struct pt_pool *pool, int64_t delta_bytes);
/* Before the application destroys a stream: waits for the stream's frees and
 * forgets it, so that no marker is ever recorded on a dead stream. */
int pt_pool_stream_retire(struct pt_pool *pool, pt_bk_stream stream);

void pt_pool_stats(struct pt_pool *pool, struct pt_pool_stats *out);

/* Sleep and wake (issue 50; pool_sleep.c, their host memory pool_sleep_host.c). The caller guarantees that nothing
 * uses the pool's memory meanwhile: no allocation or free on the pool, no
 * device work touching it (the shim holds the process at its gate and drains
 * the device first).
 *
 * pt_pool_sleep releases every physical handle and keeps every virtual
 * range: blocks keep their addresses (a CUDA graph captured on them stays
 * valid), and their bytes are copied to host memory first (sleep_host says
 * which kind) unless discard is set (or the backend has no host memory of
 * that kind: then it fails with err_invalid unless discard). Wholly free memory is trimmed, not copied. All
 * or nothing: on any failure the pool is as it was. pt_pool_wake maps new
 * physical memory at the same addresses and copies the bytes back (dropped
 * bytes come back undefined); on failure (the device is full) the pool stays
 * asleep and may be woken later. Errors: err_invalid for a sleep while asleep
 * or a wake while awake, else the backend's. */
struct pt_pool_sleep_info {
  uint64_t handles;      /* physical handles released / re-created */
  uint64_t bytes;        /* their bytes */
  uint64_t copied_bytes; /* bytes copied to or from the host */
  uint64_t trimmed_bytes; /* wholly free memory released before sleeping */
  uint64_t reused_bytes;  /* of the copied bytes, those whose host memory was kept from the last sleep */
  uint64_t copy_ns, map_ns, host_ns; /* copying; mapping calls; host memory alloc/free */
};
int pt_pool_sleep(struct pt_pool *pool, bool discard, struct pt_pool_sleep_info *info);
/* Gets now, while the process runs, the host memory the next sleep will copy
 * into (getting it is most of a first sleep: the kernel zeroes and pins every
 * page), and keeps it as a wake keeps it under sleep_reuse: one piece for
 * each physical handle the pool maps now that the kept memory does not cover
 * yet; handles that hold no live block are left out (the sleep gives them
 * back instead of copying them). The next copying sleep takes the pieces of
 * its handles' sizes and frees the rest after releasing the device memory;
 * without sleep_reuse, the wake after it frees them (a discarding sleep
 * leaves them kept). The pool's mutex is held only to list the handles and to
 * keep the pieces: allocations go on meanwhile (the backend's host ops run
 * without it, backend.h). info: handles and bytes got now, reused_bytes
 * covered already, host_ns. err_invalid while asleep, with host-tier memory
 * or without host memory ops; the backend's error (nothing kept from this
 * call) when host memory runs out. */
int pt_pool_sleep_prepare(struct pt_pool *pool, struct pt_pool_sleep_info *info);
/* Frees the host memory kept for the next sleep (a prepare's, or the last
 * wake's under sleep_reuse), one piece at a time with the mutex released
 * between them. Returns its bytes. */
uint64_t pt_pool_sleep_unprepare(struct pt_pool *pool);
int pt_pool_wake(struct pt_pool *pool, struct pt_pool_sleep_info *info);
bool pt_pool_asleep(struct pt_pool *pool);
/* pt_pool_wake in steps, so that a caller waking several pools gets all of
 * them or none: map new memory for every sleeping handle (on failure nothing
 * is mapped), copy the kept bytes back, then finish (awake) or undo (unmaps
 * what map mapped: asleep as before). finish leaves the host memory that
 * held the bytes to pt_pool_release_kept, which the caller runs once the
 * process runs again (freeing 12 GiB of page-locked memory takes about a
 * second; the pool is usable meanwhile: it frees one buffer at a time under
 * the pool's mutex). Counts add up in info (release: host_ns). pt_pool_wake
 * does all of it. */
int pt_pool_wake_map(struct pt_pool *pool, struct pt_pool_sleep_info *info);
int pt_pool_wake_copy(struct pt_pool *pool, struct pt_pool_sleep_info *info);
void pt_pool_wake_finish(struct pt_pool *pool, struct pt_pool_sleep_info *info);
void pt_pool_wake_undo(struct pt_pool *pool);
void pt_pool_release_kept(struct pt_pool *pool, struct pt_pool_sleep_info *info);
/* map and copy of one pool in one step (on failure nothing stays mapped):
 * with sleep_threads > 1 a helper thread maps while this one copies each
 * entry back as soon as it is mapped. */
int pt_pool_wake_fill(struct pt_pool *pool, struct pt_pool_sleep_info *info);
/* Waits for all work on the pool's device (before a sleep of several pools:
 * each device's work may read another's pool). 0 or the backend's error. */
int pt_pool_drain(struct pt_pool *pool);
/* The host tier (pool_tier.c). When neither free blocks nor new device
 * memory (within the limit) can hold an allocation, the pool maps it into a
 * range of its own: as many device granules as the device and the limit
 * still give, the rest host-tier granules (backend op create_host) at the
 * following addresses, up to the tier's size. Such a block is never split,
 * stitched or reused: its free unmaps and releases the whole range (after
 * the freeing stream's work), so host memory lives exactly as long as the
 * allocation that needed it. Its device granules count in physical_bytes
 * and live_bytes as usual; its host granules count in tier_bytes only.
 * The sleep of a pool that holds tier blocks is refused (err_invalid), as is
 * exporting one by IPC.
 *
 * pt_pool_tier_promote moves host granules of live tier blocks back to the
 * device, at the same addresses, while the device and the limit give room
 * (after giving back the pool's wholly free device memory, as a trim to 0):
 * for each, new device memory is mapped at a scratch range, the bytes
 * copied (copy_d2d), the host granule unmapped and the device one mapped in
 * its place. The caller guarantees that no device work touches tier blocks
 * meanwhile (the shim holds the process at its gate and drains the device,
 * as for sleep). Moves at most max_bytes (0: all it can); returns the bytes
 * moved, or the backend's error with *moved set to what was moved before it
 * (each granule is moved whole or not at all). */
int pt_pool_tier_promote(struct pt_pool *pool, uint64_t max_bytes, uint64_t *moved);
/* tier_bytes now, without the lock (relaxed). */
uint64_t pt_pool_tier_bytes(const struct pt_pool *pool);
uint64_t pt_pool_tier_room(const struct pt_pool *pool); /* tier size left */
/* Whether pt_pool_tier_promote would move something now: room on the
 * device (the driver's free memory and the pool's own free device memory,
 * less the tier's reserve, within the limit) for the tier's smallest host
 * handle. False when the tier holds nothing. */
bool pt_pool_tier_movable(struct pt_pool *pool);

/* Current figures without the lock (relaxed reads; for the limit check and
 * cudaMemGetInfo on the pass-through path, where a lock would serialise). */
struct pt_pool_usage {
  uint64_t physical_bytes, live_bytes, passthrough_bytes, peak_physical_bytes, peak_live_bytes;
  uint64_t high_physical_bytes, high_live_bytes; /* since the last pt_pool_reset_highs */
};
void pt_pool_usage(const struct pt_pool *pool, struct pt_pool_usage *out);
/* Restarts the highs reported through the memory-pool attributes at the
 * current figures (the stats' peaks are not touched). */
void pt_pool_reset_highs(struct pt_pool *pool, bool live, bool physical);
/* Peer access: grants read/write on every mapped range, and on every later
 * mapping, to device (backend op add_accessor). 0, the backend's error, or
 * err_invalid when the backend cannot. */
int pt_pool_grant_access(struct pt_pool *pool, int device);
/* dst += src for counters; peaks add too (an upper bound for a sum of pools). */
void pt_pool_stats_add(struct pt_pool_stats *dst, const struct pt_pool_stats *src);
/* Writes the counters as members of the JSON object the caller has open. */
void pt_pool_stats_json(const struct pt_pool_stats *st, struct pt_jw *w);

/* Test support: checks every internal invariant (no overlap, alignment,
 * coalescing, index and accounting consistency). 0 when consistent, else a
 * line number in pool_check.c, with a reason in *why. */
int pt_pool_check(struct pt_pool *pool, const char **why);
/* Test support: number of segments, free blocks, and segments that hold
 * exactly one block which is free. */
void pt_pool_shape(struct pt_pool *pool, uint64_t *segments, uint64_t *free_blocks,
                   uint64_t *all_free_segments);

#endif
