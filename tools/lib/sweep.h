/* The sweep of `ponytail bench --sweep`, without running anything: the spec
 * (prompt and batch lists) and its points, one summary row per point from the
 * two arms' medians (speed-ups, TTFT ratio, memory saved, verdict), the
 * tables and the overall verdict line, and the exit status over all points.
 * tools/commands/bench_sweep.c runs the points; `ponytail plot-sweep` and the tests
 * read the rows back from a sweep result. */
#ifndef PT_TOOLS_SWEEP_H
#define PT_TOOLS_SWEEP_H
#include <stddef.h>
#include <stdio.h>

#include "tools/lib/json.h"

#define PT_SWEEP_MAX_VALUES 16 /* per key */
#define PT_SWEEP_MAX_POINTS 64

struct pt_sweep_spec {
  long prompt[PT_SWEEP_MAX_VALUES], batch[PT_SWEEP_MAX_VALUES];
  size_t nprompt, nbatch; /* 0: the key was not given */
};

/* Adds "prompt=512,2k,8192,batch=1,8" to spec: comma-separated values, a
 * KEY= starting each list (keys prompt and batch, each at most once over
 * every call), positive integers with an optional k (x1024). 0, or -1 with
 * the reason in why. */
int pt_sweep_parse(const char *text, struct pt_sweep_spec *spec, char *why, size_t whylen);

/* Points in run order: every batch (outer) with every prompt (inner). A key
 * with no list takes dflt (0 = the workload's own default). */
size_t pt_sweep_npoints(const struct pt_sweep_spec *spec);
void pt_sweep_point(const struct pt_sweep_spec *spec, size_t i, long dflt_prompt, long dflt_batch,
                    long *prompt, long *batch);

/* One arm's medians, NAN where unknown. */
struct pt_sweep_side {
  double ttft_s, step_ms, tokens_per_s, nvml_bytes, reserved_bytes;
};

/* What the summary shows of a point. */
struct pt_sweep_row {
  long prompt, batch;      /* 0: the workload's default */
  int failed;              /* a timed run failed: no figures */
  int judged;              /* the verdict ran (or was due) at this point */
  const char *verdict;     /* within|outside|nonfinite|no_reference|error, NULL when not judged */
  struct pt_sweep_side a, b;
  double step_speedup;     /* A's decode step p50 / B's */
  double tokens_speedup;   /* B's tokens/s / A's */
  double ttft_ratio;       /* B's TTFT / A's */
  double nvml_saved_mib, nvml_saved_pct;         /* A - B, and as % of A */
  double reserved_saved_mib, reserved_saved_pct; /* the same for torch's peak reserved */
};

/* Fills the derived figures of row from row->a and row->b. */
void pt_sweep_row_derive(struct pt_sweep_row *row);

/* A side from a result's summary object ({"prefill_s": .., "decode_step_ms.p50": ..}). */
void pt_sweep_side_from_json(const struct pt_json *summary_side, struct pt_sweep_side *s);

/* A row from one element of a sweep result's "points". The verdict string
 * points into p. 0, or -1 when p is not a sweep point. */
int pt_sweep_row_from_json(const struct pt_json *p, struct pt_sweep_row *row);

/* The point's table: both arms and B/A, then the verdict's status. */
void pt_sweep_print_point(FILE *f, const struct pt_sweep_row *row);
/* The summary table of every point. */
void pt_sweep_print_summary(FILE *f, const struct pt_sweep_row *rows, size_t n);
/* The overall verdict in one line ("verdict: ..."), worst point first. */
void pt_sweep_verdict_line(const struct pt_sweep_row *rows, size_t n, char *buf, size_t len);

/* The exit status over the points, worst first: 4 NaN/Inf at some point,
 * 3 OUTSIDE at some point, 1 a run or a verdict failed, else 0. */
int pt_sweep_exit_status(const struct pt_sweep_row *rows, size_t n);

#endif
