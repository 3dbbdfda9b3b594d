/* Interned size reasons (size_reason.h). Lookups are lock-free; only a size
 * seen for the first time takes the table's lock. */
#include "hooks/size_reason.h"

#include <stdio.h>

const char *pt_size_reason(struct pt_size_reasons *t, size_t bytes) {
  int n = __atomic_load_n(&t->used, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (t->slot[i].bytes == bytes) return t->slot[i].text;
  const char *r = t->generic;
  pthread_mutex_lock(&t->lock);
  n = t->used;
  int i;
  for (i = 0; i < n; i++)
    if (t->slot[i].bytes == bytes) break;
  if (i < n) {
    r = t->slot[i].text;
  } else if (n < PT_SIZE_REASON_SLOTS) {
    t->slot[n].bytes = bytes;
    snprintf(t->slot[n].text, sizeof t->slot[n].text, "%s%zu%s", t->prefix, bytes, t->suffix);
    r = t->slot[n].text;
    __atomic_store_n(&t->used, n + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&t->lock);
  return r;
}
