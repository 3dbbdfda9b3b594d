/* Per-thread call and launch counters. Every wrapper counts its call and
 * every launch its kernel; with shared atomic counters each count is a
 * locked read-modify-write, a full barrier on x86, several per launch and per
 * allocation. Here each thread counts into a block of its own with plain
 * loads and stores (relaxed atomics: the exit stats may read them while the
 * thread runs), and the totals are the sum over all blocks ever made. A block
 * whose thread has exited keeps its counts and is handed to the next new
 * thread, so counts are exact and memory stays bounded by the peak number of
 * threads. */
#ifndef PT_COUNTERS_H
#define PT_COUNTERS_H
#include <stddef.h>
#include <stdint.h>

#include "shim/registry.h"
#include "shim/shim.h"

/* Kernel records get a dense index (pt_kernel.index); a block holds their
 * launch counts in pages, made when the thread first launches a kernel of
 * that page. Indices past the last page count into the record, atomically. */
#define PT_KPAGE 1024
#define PT_KPAGES 256

struct pt_tblock {
  uint64_t calls[PT_SYM_COUNT];
  uint64_t *kpage[PT_KPAGES]; /* atomic pointers: published once, never freed */
  struct pt_tblock *next;     /* every block ever made (append-only list) */
  int free;                   /* atomic: 1 once its thread has exited */
  int gate_depth;             /* atomic: gated calls this thread is inside (shim/gate.h) */
};

extern __thread struct pt_tblock *pt_tb __attribute__((tls_model("initial-exec")));

/* Slow paths: attach a block to this thread, make a page, or (out of memory)
 * count into the shared fallback. */
struct pt_tblock *pt_tb_attach(void);
/* Sum of every block's gate_depth (shim/gate.c). */
uint64_t pt_gate_depth_total(void);
void pt_count_call_slow(enum pt_sym s);
void pt_count_launch_slow(struct pt_kernel *k);

static inline void pt_count_bump(uint64_t *c) {
  __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static inline void pt_count_call(enum pt_sym s) {
  struct pt_tblock *b = pt_tb;
  if (PT_LIKELY(b != NULL)) pt_count_bump(&b->calls[s]);
  else pt_count_call_slow(s);
}

static inline void pt_count_launch(struct pt_kernel *k) {
  struct pt_tblock *b = pt_tb;
  uint32_t i = k->index;
  if (PT_LIKELY(b != NULL && i < PT_KPAGE * PT_KPAGES)) {
    uint64_t *p = __atomic_load_n(&b->kpage[i / PT_KPAGE], __ATOMIC_RELAXED);
    if (PT_LIKELY(p != NULL)) {
      pt_count_bump(&p[i % PT_KPAGE]);
      return;
    }
  }
  pt_count_launch_slow(k);
}

/* Totals over every thread (exit stats; any time, from any thread). */
uint64_t pt_calls_total(enum pt_sym s);
uint64_t pt_launches_total(const struct pt_kernel *k);
/* Blocks made so far (at most the peak number of counting threads). */
size_t pt_counter_blocks(void);

#endif
