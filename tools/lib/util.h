/* Small helpers shared by the tools/ sources: little-endian reads of
 * unaligned bytes (fatbin and cubin headers) and formatting a message into a
 * caller's error buffer. */
#ifndef PT_TOOLS_UTIL_H
#define PT_TOOLS_UTIL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static inline uint16_t pt_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t pt_rd32(const uint8_t *p) { return (uint32_t)pt_rd16(p) | (uint32_t)pt_rd16(p + 2) << 16; }
static inline uint64_t pt_rd64(const uint8_t *p) { return (uint64_t)pt_rd32(p) | (uint64_t)pt_rd32(p + 4) << 32; }

/* printf into err[errlen] (truncated); nothing when err is NULL or errlen 0. */
__attribute__((format(printf, 3, 4)))
static inline void pt_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#endif
