/* Growing a dynamic array: the one doubling step the shim's exit stats and
 * the tools' lists share. */
#ifndef PT_COMMON_GROW_H
#define PT_COMMON_GROW_H
#include <stddef.h>
#include <stdlib.h>

/* Reallocates v (elements of elem bytes) to twice *cap, or to first when *cap
 * is 0, and then sets *cap. Returns the new array, or NULL (out of memory:
 * v and *cap stay as they were). */
static inline void *pt_grow(void *v, size_t *cap, size_t elem, size_t first) {
  size_t c = *cap ? *cap * 2 : first;
  void *nv = realloc(v, c * elem);
  if (nv) *cap = c;
  return nv;
}

#endif
