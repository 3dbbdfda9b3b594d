/* Shared by the preload test programs: failure-recording checks (a failed
 * check marks the scenario failed and the run goes on, so one run reports
 * every broken expectation), a whole-file reader for stats and logs, and
 * lookups in the stats JSON. */
#ifndef PT_PRELOAD_CHECK_H
#define PT_PRELOAD_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failed;

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      g_failed = 1;                                                         \
    }                                                                       \
  } while (0)
#define CHECK_EQ(a, b)                                                                                     \
  do {                                                                                                     \
    long long a_ = (long long)(a), b_ = (long long)(b);                                                    \
    if (a_ != b_) {                                                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, a_, b_); \
      g_failed = 1;                                                                                        \
    }                                                                                                      \
  } while (0)

/* The whole file in a static buffer (1 MiB at most), or NULL. */
static __attribute__((unused)) char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Count of a symbol in the stats JSON's "calls" (0 if absent, -1 without
 * a "calls" object). */
static __attribute__((unused)) long long stat_call(const char *json, const char *sym) {
  const char *calls = strstr(json, "\"calls\":{");
  if (!calls) return -1;
  const char *end = strchr(calls, '}');
  char key[128];
  snprintf(key, sizeof key, "\"%s\":", sym);
  const char *p = strstr(calls, key);
  if (!p || p > end) return 0;
  return atoll(p + strlen(key));
}

/* The first number after "key" in the stats' "alloc" object (before its
 * per-device list), or -1. */
static __attribute__((unused)) long long alloc_stat(const char *js, const char *key) {
  const char *a = strstr(js, "\"alloc\":{");
  if (!a) return -1;
  const char *end = strstr(a, "\"devices\":");
  char k[128];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(a, k);
  if (!p || (end && p > end)) return -1;
  return atoll(p + strlen(k));
}

#endif
