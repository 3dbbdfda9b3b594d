/* The gate's slow paths and the closer's side: see gate.h. */
#include "shim/gate.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

int pt_gate_closed;
/* 0 until pt_gate_setup finds no membarrier: before the control thread starts
 * (which runs setup first) no close can happen, so no enter needs a fence;
 * without membarrier, setup sets it long before the first request can arrive
 * (a client must find and connect to the socket that is made after it). */
int pt_gate_fence;

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static uint64_t gate_waiting; /* under gate_mu */
static int shared_depth;      /* atomic: gated calls of threads without a block */
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int have_membarrier;

void pt_gate_shared_enter(void) {
  __atomic_fetch_add(&shared_depth, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&pt_gate_closed, __ATOMIC_SEQ_CST)) {
    __atomic_fetch_sub(&shared_depth, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&gate_mu);
    gate_waiting++;
    while (__atomic_load_n(&pt_gate_closed, __ATOMIC_ACQUIRE)) pthread_cond_wait(&gate_cv, &gate_mu);
    gate_waiting--;
    pthread_mutex_unlock(&gate_mu);
    __atomic_fetch_add(&shared_depth, 1, __ATOMIC_SEQ_CST);
  }
}

void pt_gate_shared_leave(void) { __atomic_fetch_sub(&shared_depth, 1, __ATOMIC_SEQ_CST); }

void pt_gate_wait(struct pt_tblock *b) {
  /* Inside a call admitted before the gate closed (runtime -> driver): pass,
   * the closer is waiting for that outer call to finish. */
  if (__atomic_load_n(&b->gate_depth, __ATOMIC_RELAXED) > 1) return;
  for (;;) {
    __atomic_store_n(&b->gate_depth, b->gate_depth - 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&gate_mu);
    gate_waiting++;
    while (__atomic_load_n(&pt_gate_closed, __ATOMIC_ACQUIRE)) pthread_cond_wait(&gate_cv, &gate_mu);
    gate_waiting--;
    pthread_mutex_unlock(&gate_mu);
    __atomic_store_n(&b->gate_depth, b->gate_depth + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&pt_gate_closed, __ATOMIC_RELAXED)) return;
  }
}

static void setup_run(void) {
  long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (q >= 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
    have_membarrier = 1;
  } else {
    __atomic_store_n(&pt_gate_fence, 1, __ATOMIC_SEQ_CST);
    pt_debug("gate: membarrier unavailable (%s): gated calls use a full fence", q < 0 ? "no syscall" : "no command");
  }
}

void pt_gate_setup(void) { (void)pthread_once(&setup_once, setup_run); }

/* Every thread's stores before its next barrier become visible here, and its
 * later loads see pt_gate_closed = 1 (gate.h). */
static void barrier_all(void) {
  if (have_membarrier && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  /* Without membarrier every enter fences itself (pt_gate_fence stays 1). */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static uint64_t inside(void) {
  return pt_gate_depth_total() + (uint64_t)__atomic_load_n(&shared_depth, __ATOMIC_ACQUIRE);
}

int pt_gate_close(uint64_t timeout_ms, uint64_t *busy) {
  pt_gate_setup();
  pthread_mutex_lock(&gate_mu);
  __atomic_store_n(&pt_gate_closed, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&gate_mu);
  barrier_all();
  uint64_t t0 = now_ms(), n;
  while ((n = inside()) != 0) {
    if (now_ms() - t0 >= timeout_ms) {
      if (busy) *busy = n;
      pt_gate_open();
      return -1;
    }
    struct timespec d = {0, 200000}; /* 0.2 ms: calls in flight usually end within microseconds */
    nanosleep(&d, NULL);
  }
  if (busy) *busy = 0;
  return 0;
}

void pt_gate_open(void) {
  pthread_mutex_lock(&gate_mu);
  __atomic_store_n(&pt_gate_closed, 0, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_mu);
}

uint64_t pt_gate_held(void) {
  pthread_mutex_lock(&gate_mu);
  uint64_t n = gate_waiting;
  pthread_mutex_unlock(&gate_mu);
  return n;
}
