/* The host tier's mover (issue 49): host-tier granules go back to the device
 * when it has room again, at the same addresses (allocator/pool_tier.c).
 *
 * Why a thread and the gate: a granule can be copied and remapped only where
 * no work in flight touches it, and any kernel may touch any live block. So
 * the move holds the process at its gate (as `ponytail sleep` does), drains
 * the device, moves, and lets the process go on. A free that leaves the tier
 * holding memory kicks the thread; it waits PT_TIER_SETTLE_MS first, so that
 * a burst of frees (a batch finishing) makes one move, and it moves only
 * when some device has room. It starts at the first kick: a process that
 * never uses the tier has no such thread. */
#include <inttypes.h>
#include <pthread.h>
#include <time.h>

#include "common/log.h"
#include "common/now_ns.h"
#include "common/thread.h"
#include "shim/real.h"
#include "shim/route_sleep.h"
#include "shim/shim.h"
#include "shim/sleep.h"
#include "shim/tier.h"

#define PT_TIER_SETTLE_MS 50u
#define PT_TIER_HOLD_MS 2000u /* how long the move waits for calls in flight (then it tries later) */
#define PT_TIER_RETRY_MS 1000u /* while memory stays on the host, a look every second */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started, kicked;

struct promote_out {
  uint64_t moved, left;
};

static int promote(void *arg) {
  struct promote_out *o = arg;
  return pt_route_tier_promote(&o->moved, &o->left);
}

static void *mover(void *arg) {
  (void)arg;
  pt_thread_relax_capture();
  pthread_mutex_lock(&mu);
  for (;;) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PT_TIER_RETRY_MS / 1000u;
    while (!kicked && pthread_cond_timedwait(&cv, &mu, &until) == 0) {
    }
    kicked = 0;
    pthread_mutex_unlock(&mu);
    struct timespec settle = {0, (long)PT_TIER_SETTLE_MS * 1000000L};
    nanosleep(&settle, NULL);
    if (pt_route_tier_room()) {
      struct promote_out o = {0, 0};
      bool ran;
      uint64_t t0 = pt_now_ns();
      int rc = pt_sleep_hold_and_run(PT_TIER_HOLD_MS, promote, &o, &ran);
      if (rc) {
        PT_INTERNAL_ERROR();
        PT_LOG_ONCE(PT_LOG_WARN, "host tier: moving memory back to the device failed with CUDA error %d; "
                    "it stays on the host", rc);
      }
      if (ran && o.moved)
        pt_info("host tier: %" PRIu64 " bytes moved back to the device in %.3f s (process held meanwhile); "
                "%" PRIu64 " bytes still on the host", o.moved, (double)(pt_now_ns() - t0) / 1e9, o.left);
    }
    pthread_mutex_lock(&mu);
  }
  return NULL;
}

void pt_tier_kick(void) {
  pthread_mutex_lock(&mu);
  if (!started) {
    if (pt_thread_start(mover, NULL) == 0) started = 1;
    else PT_LOG_ONCE(PT_LOG_WARN, "host tier: no thread to move memory back to the device; it stays on the host");
  }
  kicked = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

void pt_tier_atfork_child(void) {
  /* The thread did not survive the fork: the next kick starts one. */
  pthread_mutex_init(&mu, NULL);
  pthread_cond_init(&cv, NULL);
  started = kicked = 0;
}
