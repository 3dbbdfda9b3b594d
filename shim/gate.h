/* The gate: lets `ponytail sleep` hold a process's CUDA work (issue 50).
 *
 * Every intercepted entry point that queues device work or touches pooled
 * memory (launches, graph launches, copies and sets, allocations and frees,
 * IPC) runs between pt_gate_enter and pt_gate_leave. Normally that costs a
 * thread-local increment and decrement, a compiler barrier and one load of a
 * flag that stays 0. To sleep, the control thread closes the gate: from then
 * on a thread entering from outside any gated call waits until it reopens,
 * and pt_gate_close returns once no thread is inside a gated call any more
 * (the device's queued work is then drained separately, with the driver).
 *
 * Why no locked instruction on the fast path: closing must not miss a thread
 * that is entering at the same moment (it stored its depth but its load of the
 * flag still saw 0). That is the store-then-load pattern that needs a full
 * barrier on one side; membarrier(2) (MEMBARRIER_CMD_PRIVATE_EXPEDITED) lets
 * the closer issue it on behalf of every running thread, so enter keeps only
 * a compiler barrier. Where membarrier is not available enter uses a full
 * fence (pt_gate_fence, a load that predicts well), from the moment the
 * control channel starts (nothing can close the gate before).
 *
 * Nesting: a runtime call forwards to gated driver calls; a thread already
 * inside a gated call passes (its outer call was admitted before the gate
 * closed, and the closer waits for it to leave). Threads whose control thread
 * is the closer never enter (they call the real functions directly). */
#ifndef PT_SHIM_GATE_H
#define PT_SHIM_GATE_H
#include <stdbool.h>
#include <stdint.h>

#include "shim/counters.h"

extern int pt_gate_closed; /* atomic: 1 while a sleep holds or is closing the gate */
extern int pt_gate_fence;  /* atomic: 1 when closing cannot use membarrier (gate.c) */

/* Slow paths (shim/gate.c). */
void pt_gate_wait(struct pt_tblock *b);
void pt_gate_shared_enter(void);
void pt_gate_shared_leave(void);

/* Returns what pt_gate_leave must be given (NULL: counted in the shared
 * fallback, when no per-thread block could be had). */
static inline struct pt_tblock *pt_gate_enter(void) {
  struct pt_tblock *b = pt_tb;
  if (PT_UNLIKELY(!b)) b = pt_tb_attach();
  if (PT_UNLIKELY(!b)) {
    pt_gate_shared_enter();
    return NULL;
  }
  __atomic_store_n(&b->gate_depth, b->gate_depth + 1, __ATOMIC_RELAXED);
  if (PT_UNLIKELY(__atomic_load_n(&pt_gate_fence, __ATOMIC_RELAXED)))
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  else
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  if (PT_UNLIKELY(__atomic_load_n(&pt_gate_closed, __ATOMIC_RELAXED))) pt_gate_wait(b);
  return b;
}

static inline void pt_gate_leave(struct pt_tblock *b) {
  if (PT_UNLIKELY(!b)) {
    pt_gate_shared_leave();
    return;
  }
  /* Release: what the call did happens before the closer sees it gone. */
  __atomic_store_n(&b->gate_depth, b->gate_depth - 1, __ATOMIC_RELEASE);
}

/* Closes the gate and waits up to timeout_ms for every thread to leave the
 * gated calls it is in. 0 on success (the gate stays closed until
 * pt_gate_open); -1 on timeout, with the gate open again and *busy set to the
 * number of calls still inside. */
int pt_gate_close(uint64_t timeout_ms, uint64_t *busy);
void pt_gate_open(void);
/* Threads currently held at the gate (for the status report). */
uint64_t pt_gate_held(void);
/* Registers membarrier once (idempotent); called when the control channel
 * starts, before any close. */
void pt_gate_setup(void);

#endif
