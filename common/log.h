/* Logging: prefix "ponytail[pid]: ", formatted into a stack buffer (never
 * allocates), recursion-guarded, one write(2) per line. Level and destination
 * come from PONYTAIL_LOG / PONYTAIL_LOG_FILE. */
#ifndef PT_LOG_H
#define PT_LOG_H
#include <stdarg.h>
#include <stdbool.h>
#include "common/options.h"

void pt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pt_vlog(int level, const char *fmt, va_list ap);
bool pt_log_enabled(int level);
/* Formats one line as pt_log would write it (for tests): returns its length. */
int pt_log_format(char *buf, size_t len, int level, const char *fmt, va_list ap);
/* Reopen the destination (after fork, or when options are reloaded). */
void pt_log_reopen(void);
/* Expands %p to the pid (log, stats and trace file names). 0 or -1 if too
 * long. */
int pt_path_expand(const char *pattern, char *out, size_t len);

#define pt_error(...) pt_log(PT_LOG_ERROR, __VA_ARGS__)
#define pt_warn(...) pt_log(PT_LOG_WARN, __VA_ARGS__)
#define pt_info(...) pt_log(PT_LOG_INFO, __VA_ARGS__)
#define pt_debug(...) pt_log(PT_LOG_DEBUG, __VA_ARGS__)

/* Log a message once per call site (e.g. an internal failure that is then
 * counted and passed through). */
#define PT_LOG_ONCE(level, ...)                                                     \
  do {                                                                              \
    static int pt_once_flag_;                                                       \
    if (!__atomic_exchange_n(&pt_once_flag_, 1, __ATOMIC_RELAXED)) pt_log(level, __VA_ARGS__); \
  } while (0)

#endif
