/* `ponytail bench`'s state and steps, shared by the single A/B
 * (tools/commands/cmd_bench.c: flags, the A/B and its table) and the sweep over prompt
 * lengths and batch sizes (tools/commands/bench_sweep.c), which runs the same steps
 * once per point. The steps: the runs and the verdict (tools/commands/bench_run.c),
 * medians and the result's keys (tools/commands/bench_result.c). */
#ifndef PT_TOOLS_BENCH_H
#define PT_TOOLS_BENCH_H
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "common/jsonw.h"
#include "tools/lib/json.h"
#include "tools/lib/sweep.h"

/* Workload flags forwarded to generate.py (bench_run.c's table). */
#define PT_BENCH_NFWD 13
/* Metrics of a result, medians in the table and the result's summary. */
#define PT_BENCH_NMETRICS 8

/* A metric of a generate.py result (tools/commands/bench_result.c's table). */
struct pt_bench_metric {
  const char *path, *label; /* path: "a" or "a.b" in the result */
  int bytes;                /* shown in GiB */
  int higher_ok;            /* 1: higher is better (for the verdict column) */
};
extern const struct pt_bench_metric pt_bench_metrics[PT_BENCH_NMETRICS];
/* A result's value at path ("a" or "a.b"), NAN when absent. */
double pt_bench_metric(const struct pt_json *res, const char *path);

/* The verdict's untimed arms (pt_bench.varm). */
enum { PT_VA, PT_VB, PT_VR, PT_VS, PT_NVARM };

/* The shim's attention counts over the B runs (tools/commands/bench_swaps.c). */
#define PT_BENCH_REASONS 8
struct pt_bench_swaps {
  uint64_t runs; /* stats files read (one per B process that exited normally) */
  uint64_t swapped, fallbacks, reasons_dropped;
  struct { char why[96]; uint64_t n; } reason[PT_BENCH_REASONS];
  int nreasons;
};

struct pt_bench {
  const char *fwd_val[PT_BENCH_NFWD];
  int repeats, timeline_ms, warmup;
  const char *python, *script_arg, *shim_arg, *out;
  const char **shim_env, **stock_env;
  size_t nshim_env, nstock_env;
  char script[PATH_MAX], shim[PATH_MAX], dir[PATH_MAX];
  struct pt_json **a, **b;
  /* Verdict. */
  int verdict_steps, same_path;
  double margin;
  const char *ref_sdpa, *same_sdpa; /* "default" = no --sdpa */
  /* The verdict arms' --new-tokens when set (the sweep: only the judged steps). */
  const char *verdict_new_tokens;
  char verdict_script[PATH_MAX];
  struct pt_json *varm[PT_NVARM]; /* the verdict runs' results (S: NULL when it reuses A's or R's) */
  char vpt[PT_NVARM][PATH_MAX + 16]; /* their logits files */
  struct pt_json *verdict;          /* examples/verdict.py's record */
  /* Sweep. */
  struct pt_sweep_spec sweep;
  int sweeping, verdict_every;
  int unjudged; /* this A/B has no verdict by design (a sweep point between the judged ones) */
  struct pt_bench_swaps sw; /* the timed B runs', summed (a sweep: over every point) */
};

/* Index of a workload flag ("--prompt") in fwd_val, or -1. */
int pt_bench_fwd_index(const char *flag);
/* Workload flag k ("--prompt"), and whether v is a valid value of it. */
const char *pt_bench_fwd_flag(size_t k);
int pt_bench_fwd_ok(size_t k, const char *v);
/* The verdict arms' letters in file and key names: a, b, r, s. */
extern const char pt_bench_varm_name[PT_NVARM];

/* One run of generate.py: its parsed result, or NULL (reason on stderr).
 * varm < 0: a timed run of round `round`; else an untimed verdict arm that
 * saves its logits (PT_VA..PT_VS) on SDPA backend sdpa. */
struct pt_json *pt_bench_run(struct pt_bench *bn, int shimmed, int round, int varm, const char *sdpa);

/* Finds examples/verdict.py for bn->verdict_script: 0, or -1 with why. */
int pt_bench_find_verdict(struct pt_bench *bn, char *why, size_t whylen);
/* The verdict's arms and examples/verdict.py: 0 with bn->verdict set, or -1
 * (reason on stderr). pt_bench_verdict_cleanup removes the logits files. */
int pt_bench_verdict(struct pt_bench *bn);
void pt_bench_verdict_cleanup(struct pt_bench *bn);

/* Medians of every metric over the rounds run (NAN where none is known). */
void pt_bench_medians(const struct pt_bench *bn, double med[2][PT_BENCH_NMETRICS]);
/* A side of the sweep's summary from those medians. */
void pt_bench_side(const double med[PT_BENCH_NMETRICS], struct pt_sweep_side *s);
/* 1 when every run generated the same token ids. */
int pt_bench_tokens_match(const struct pt_bench *bn, const char **sha);

/* Prints the verdict's lines (or why there is none) and a blank line. */
void pt_bench_print_verdict(const struct pt_bench *bn, int verdict_failed);

/* The keys of one A/B in an open JSON object: settings, summary,
 * verdict_settings, verdict, verdict_runs, a and b. */
void pt_bench_write_body(struct pt_jw *w, const struct pt_bench *bn, const double med[2][PT_BENCH_NMETRICS],
                         int match);
/* The environment lists and the shim/script of every run, in an open object. */
void pt_bench_write_setup(struct pt_jw *w, const struct pt_bench *bn);

/* Frees the runs and the verdict of one A/B (not the arrays a and b). */
void pt_bench_free_results(struct pt_bench *bn);

/* The shim's exit stats of the timed B runs (bench_swaps.c): pt_bench_run asks
 * for them in files matching pattern and collects them after each run (the
 * files are removed); print writes the table's line, json the "attention" key
 * (null when no stats came back). */
void pt_bench_swaps_collect(struct pt_bench *bn, const char *pattern);
void pt_bench_swaps_print(FILE *f, const struct pt_bench *bn);
void pt_bench_swaps_json(struct pt_jw *w, const struct pt_bench *bn);

/* `ponytail bench --sweep`: every point of bn->sweep (tools/commands/bench_sweep.c).
 * Returns the exit status. */
int pt_bench_sweep(struct pt_bench *bn);

#endif
