/* Per-thread counters (see counters.h): attaching blocks, reusing those of
 * exited threads, and summing. No lock anywhere: the list of blocks only
 * grows (lock-free push), a free block is claimed with a CAS, and a thread's
 * exit is seen through a pthread key destructor. */
#include "shim/counters.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

__thread struct pt_tblock *pt_tb __attribute__((tls_model("initial-exec")));

/* Counts made when no block could be had (out of memory). */
static uint64_t pt_calls_shared[PT_SYM_COUNT];

static struct pt_tblock *pt_blocks; /* atomic head */
static pthread_key_t pt_tb_key;
static pthread_once_t pt_tb_once = PTHREAD_ONCE_INIT;
static bool pt_tb_key_ok;

static void pt_tb_release(void *p) {
  struct pt_tblock *b = p;
  /* A destructor of another library may still make CUDA calls on this
   * thread after this one ran: those attach a block again (and get this
   * destructor again; glibc repeats destructors for keys set during them). */
  if (pt_tb == b) pt_tb = NULL;
  __atomic_store_n(&b->free, 1, __ATOMIC_RELEASE);
}

static void pt_tb_key_make(void) { pt_tb_key_ok = pthread_key_create(&pt_tb_key, pt_tb_release) == 0; }

struct pt_tblock *pt_tb_attach(void) {
  (void)pthread_once(&pt_tb_once, pt_tb_key_make);
  struct pt_tblock *b = NULL;
  for (struct pt_tblock *x = __atomic_load_n(&pt_blocks, __ATOMIC_ACQUIRE); x && !b; x = x->next) {
    int one = 1;
    if (__atomic_load_n(&x->free, __ATOMIC_RELAXED) &&
        __atomic_compare_exchange_n(&x->free, &one, 0, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      b = x;
  }
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->next = __atomic_load_n(&pt_blocks, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&pt_blocks, &b->next, b, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
  }
  /* Without the key the block is never handed on: counts stay exact, and a
   * process that makes threads without end makes blocks without end. */
  if (pt_tb_key_ok) (void)pthread_setspecific(pt_tb_key, b);
  pt_tb = b;
  return b;
}

void pt_count_call_slow(enum pt_sym s) {
  struct pt_tblock *b = pt_tb_attach(); /* only called while this thread has none */
  if (b) pt_count_bump(&b->calls[s]);
  else __atomic_fetch_add(&pt_calls_shared[s], 1, __ATOMIC_RELAXED);
}

void pt_count_launch_slow(struct pt_kernel *k) {
  struct pt_tblock *b = pt_tb ? pt_tb : pt_tb_attach();
  uint32_t i = k->index;
  if (b && i < PT_KPAGE * PT_KPAGES) {
    uint64_t *p = __atomic_load_n(&b->kpage[i / PT_KPAGE], __ATOMIC_RELAXED);
    if (!p) {
      /* Only this thread writes its block's page pointers. */
      p = calloc(PT_KPAGE, sizeof *p);
      if (p) __atomic_store_n(&b->kpage[i / PT_KPAGE], p, __ATOMIC_RELEASE);
    }
    if (p) {
      pt_count_bump(&p[i % PT_KPAGE]);
      return;
    }
  }
  __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED);
}

uint64_t pt_calls_total(enum pt_sym s) {
  uint64_t n = __atomic_load_n(&pt_calls_shared[s], __ATOMIC_RELAXED);
  for (struct pt_tblock *b = __atomic_load_n(&pt_blocks, __ATOMIC_ACQUIRE); b; b = b->next)
    n += __atomic_load_n(&b->calls[s], __ATOMIC_RELAXED);
  return n;
}

uint64_t pt_launches_total(const struct pt_kernel *k) {
  uint64_t n = __atomic_load_n(&k->launches, __ATOMIC_RELAXED);
  uint32_t i = k->index;
  if (i >= PT_KPAGE * PT_KPAGES) return n;
  for (struct pt_tblock *b = __atomic_load_n(&pt_blocks, __ATOMIC_ACQUIRE); b; b = b->next) {
    const uint64_t *p = __atomic_load_n(&b->kpage[i / PT_KPAGE], __ATOMIC_ACQUIRE);
    if (p) n += __atomic_load_n(&p[i % PT_KPAGE], __ATOMIC_RELAXED);
  }
  return n;
}

size_t pt_counter_blocks(void) {
  size_t n = 0;
  for (struct pt_tblock *b = __atomic_load_n(&pt_blocks, __ATOMIC_ACQUIRE); b; b = b->next) n++;
  return n;
}

uint64_t pt_gate_depth_total(void) {
  uint64_t n = 0;
  for (struct pt_tblock *b = __atomic_load_n(&pt_blocks, __ATOMIC_ACQUIRE); b; b = b->next)
    n += (uint64_t)__atomic_load_n(&b->gate_depth, __ATOMIC_ACQUIRE);
  return n;
}
