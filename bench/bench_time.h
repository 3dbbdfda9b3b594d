/* Timing helpers of the CPU benchmarks in bench/: a monotonic clock in ns and
 * the median of a few runs. */
#ifndef PT_BENCH_TIME_H
#define PT_BENCH_TIME_H
#include <stdlib.h>
#include <time.h>

static inline double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline int bench_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Sorts v[0..n) and returns its middle element. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  return v[n / 2];
}

#endif
