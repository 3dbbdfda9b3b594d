/* `ponytail trace`'s report, computed from files so it can be produced (and
 * tested) offline: the CUPTI records file(s) shim/cupti.c writes and the shim's
 * JSON stats file(s).
 *
 * Records file format (one process per file):
 *   # ponytail-cupti 1 pid=<pid>
 *   # start start_ns=<t> kind=<concurrent_kernel|kernel> lib=<libcupti loaded>
 *   K <start_ns> <end_ns> <stream_id> <kernel name...>
 *   E <reason>                      (CUPTI could not attach or failed)
 *   # end stop_ns=<t> records=<n> dropped=<n>
 * A timestamp of 0 means unknown.
 * Timestamps are CUPTI's (one clock for all processes of a machine). */
#ifndef PT_TOOLS_TRACE_REPORT_H
#define PT_TOOLS_TRACE_REPORT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct pt_trace_kernel {
  char *name;
  uint64_t launches, total_ns;
  const char *action; /* from the stats' kernels.top (static string), or "-" */
};

struct pt_trace_shim_kernel {
  char *name;
  uint64_t launches;
  char *action;
};

struct pt_trace_report {
  struct pt_trace_kernel *k; /* by total GPU time, descending */
  size_t nk;
  uint64_t records, dropped, total_ns, busy_ns, span_ns;
  uint64_t attn_ns, attn_launches, cat_ns, cat_launches;
  double wall_s;   /* process wall time from the caller; 0 = use span_ns */
  int processes;   /* records files read */
  int cupti_ok;    /* some file had records and none reported an error */
  char cupti_error[512];
  /* From the stats: the shim's own launch counts, by launches descending. */
  struct pt_trace_shim_kernel *sk;
  size_t nsk;
  int have_stats;
  uint64_t shim_registered;
};

/* Reads every records and stats file (missing files are noted, not fatal).
 * Returns 0, or -1 with a reason (out of memory, unreadable stats JSON). */
int pt_trace_load(struct pt_trace_report *r, const char *const *records, size_t nrecords,
                  const char *const *stats, size_t nstats, double wall_s, char *why, size_t whylen);
void pt_trace_report_free(struct pt_trace_report *r);

/* top = 0: every kernel. */
void pt_trace_print_text(const struct pt_trace_report *r, FILE *f, size_t top);
void pt_trace_print_json(const struct pt_trace_report *r, FILE *f, size_t top);

/* Classification and display helpers (exposed for tests). */
int pt_trace_is_attention(const char *name); /* flash/fmha/sdpa/attention/attn, any case */
int pt_trace_is_cat(const char *name);       /* CatArrayBatchedCopy */
/* A readable short form: Itanium-mangled nested names become a::b::c<...>,
 * template arguments and parameter lists are elided, then cut to len-1 chars. */
void pt_trace_short_name(const char *name, char *out, size_t len);

#endif
