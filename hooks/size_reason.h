/* Refusal reasons that name a parameter-block size no known layout has
 * ("param size 480 not a known Flash_fwd_params layout"). A reason must be a
 * static string that outlives the call and is the same pointer-stable text
 * for the same size (it is a stats key), so the texts are interned: a few
 * slots per table, filled on first use; past them a generic text without the
 * number. Sizes seen in one process are few (one per kernel build). */
#ifndef PT_SIZE_REASON_H
#define PT_SIZE_REASON_H
#include <pthread.h>
#include <stddef.h>

#define PT_SIZE_REASON_SLOTS 8

struct pt_size_reasons {
  const char *prefix, *suffix; /* text = prefix N suffix */
  const char *generic;         /* when every slot is taken */
  pthread_mutex_t lock;
  int used; /* published with release after the slot is written */
  struct { size_t bytes; char text[96]; } slot[PT_SIZE_REASON_SLOTS];
};

#define PT_SIZE_REASONS_INIT(prefix, suffix, generic) \
  {(prefix), (suffix), (generic), PTHREAD_MUTEX_INITIALIZER, 0, {{0, {0}}}}

/* The interned text for `bytes` (callers handle 0, "unknown", themselves). */
const char *pt_size_reason(struct pt_size_reasons *t, size_t bytes);

#endif
