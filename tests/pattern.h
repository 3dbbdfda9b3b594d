/* Test patterns shared by the allocator and preload tests: one 64-bit word
 * every `step` bytes of a buffer, a function of a key and the offset, so a
 * granule lost, dropped or mapped at the wrong address anywhere shows. */
#ifndef PT_TESTS_PATTERN_H
#define PT_TESTS_PATTERN_H
#include <stdint.h>
#include <string.h>

static inline uint64_t pt_pat_word(uint64_t key, uint64_t off) { return (key * 0x9E3779B97F4A7C15ull) ^ off; }

static inline void pt_pat_fill(void *p, uint64_t size, uint64_t key, uint64_t step) {
  for (uint64_t off = 0; off + 8 <= size; off += step) memcpy((char *)p + off, &(uint64_t){pt_pat_word(key, off)}, 8);
}

/* The first offset whose word differs, or UINT64_MAX when all are intact. */
static inline uint64_t pt_pat_bad(const void *p, uint64_t size, uint64_t key, uint64_t step) {
  for (uint64_t off = 0; off + 8 <= size; off += step) {
    uint64_t v;
    memcpy(&v, (const char *)p + off, 8);
    if (v != pt_pat_word(key, off)) return off;
  }
  return UINT64_MAX;
}

#endif
