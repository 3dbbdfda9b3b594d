/* The host memory of a sleep (allocator/pool_sleep_host.c), for the sleep
 * and the wake themselves (allocator/pool_sleep.c): getting it on helper
 * threads, freeing it, and the set kept between sleeps (sleep_reuse, a
 * prepare). Under the pool's mutex unless said otherwise. */
#ifndef PT_ALLOC_POOL_SLEEP_HOST_H
#define PT_ALLOC_POOL_SLEEP_HOST_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "allocator/pool_internal.h"

/* The bytes sleep in host handles (else in buffers from host_alloc). */
static inline bool pt_sleep_in_handles(const struct pt_pool *p) { return p->sleep_host == PT_SLEEP_IN_HANDLES; }
/* Mapped physical handles of the pool. */
uint64_t pt_sleep_count_handles(const struct pt_pool *p);
/* Whether the backend can copy the pool's bytes to its kind of host memory. */
bool pt_sleep_can_copy(const struct pt_pool *p);
/* Frees the host memory of entries [0, n), either kind. */
void pt_sleep_drop_host(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n);
/* Frees a set: its entries' host memory, its range, its array; empty after. */
void pt_sleep_drop_set(struct pt_pool *p, struct pt_sleep_set *s);
/* The host memory kept for the next sleep, all of it. */
void pt_sleep_drop_cache(struct pt_pool *p);
/* Entries [0, n) take the kept host memory of their size; what none takes
 * moves to *spare (freed by the caller after the device memory went back).
 * Returns the bytes taken. */
uint64_t pt_sleep_take_kept(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_sleep_set *spare);

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

/* Up to sleep_threads helpers getting host memory for entries [0, n), each
 * entry once (those that have memory already are skipped); the caller takes
 * each entry in order with pt_sleep_helpers_get and ends with pt_sleep_helpers_stop. */
enum { PT_SLEEP_HELPERS_MAX = 64 };
struct pt_sleep_helpers {
  struct host_run run;
  struct host_job jobs[PT_SLEEP_HELPERS_MAX];
  pthread_t tid[PT_SLEEP_HELPERS_MAX];
  uint64_t started; /* 0: no helper runs, pt_sleep_helpers_get gets each entry itself */
};

void pt_sleep_helpers_start(struct pt_pool *p, struct pt_sleep_ent *e, uint64_t n, struct pt_sleep_helpers *h);
/* Entry i's host memory, page-locked: the helper's (waited for) or got here.
 * 0, -1 (a helper failed: pt_sleep_helpers_stop says how), or the backend's error. */
int pt_sleep_helpers_get(struct pt_pool *p, struct pt_sleep_helpers *h, uint64_t i);
/* Stops and joins the helpers; rc: the caller's result, where -1 becomes the
 * failed helper's error. */
int pt_sleep_helpers_stop(struct pt_pool *p, struct pt_sleep_helpers *h, int rc);

#endif
