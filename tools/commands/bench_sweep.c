/* `ponytail bench --sweep`: the A/B of tools/commands/cmd_bench.c at every point of a
 * prompt x batch grid. At each point A then B (then again for --repeats), so
 * drift between points hits both arms alike; the point's verdict (first and
 * last point, or every point with --verdict-every) and its table are printed
 * as soon as it finishes, then a summary of every point. The result file is
 * rewritten after every point, so an interrupted sweep keeps what it measured.
 * A point whose runs fail (out of memory at the longest prompt, say) is
 * recorded as failed and the sweep goes on. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/commands/bench.h"

struct pt_sweep_pt {
  char prompt_s[24], batch_s[24]; /* the values passed to generate.py ("" = its default) */
  struct pt_json **a, **b;        /* one result per round */
  struct pt_json *varm[PT_NVARM], *verdict;
  double med[2][PT_BENCH_NMETRICS];
  int match, judged, ran;
  struct pt_sweep_row row;
};

/* Points bn's shared steps at point p (they read the runs and the verdict
 * from bn). */
static void pt_sweep_bind(struct pt_bench *bn, struct pt_sweep_pt *p, int ip, int ib) {
  if (p->prompt_s[0]) bn->fwd_val[ip] = p->prompt_s;
  if (p->batch_s[0]) bn->fwd_val[ib] = p->batch_s;
  bn->a = p->a;
  bn->b = p->b;
  memcpy(bn->varm, p->varm, sizeof bn->varm);
  bn->verdict = p->verdict;
  bn->unjudged = !p->judged;
}

/* The value generate.py ran with: its recorded settings, else what was
 * passed, else (its default, for a point whose first run failed) the value
 * another point recorded for its default, remembered in *dflt; 0 if none. */
static long pt_sweep_setting(const struct pt_json *res, const char *key, const char *passed, long *dflt) {
  int64_t v;
  if (pt_json_i64(pt_json_get(pt_json_get(res, "settings"), key), &v) == 0) {
    if (!passed[0]) *dflt = (long)v;
    return (long)v;
  }
  return passed[0] ? atol(passed) : *dflt;
}

static void pt_sweep_write_row(struct pt_jw *w, const struct pt_sweep_row *r) {
  pt_jw_obj_begin(w, NULL);
  pt_jw_i64(w, "prompt", r->prompt);
  pt_jw_i64(w, "batch", r->batch);
  pt_jw_dbl(w, "step_speedup", r->step_speedup);
  pt_jw_dbl(w, "tokens_per_s_speedup", r->tokens_speedup);
  pt_jw_dbl(w, "ttft_ratio", r->ttft_ratio);
  pt_jw_dbl(w, "nvml_saved_mib", r->nvml_saved_mib);
  pt_jw_dbl(w, "nvml_saved_pct", r->nvml_saved_pct);
  pt_jw_dbl(w, "reserved_saved_mib", r->reserved_saved_mib);
  pt_jw_dbl(w, "reserved_saved_pct", r->reserved_saved_pct);
  pt_jw_str(w, "verdict", r->failed ? "failed" : r->verdict);
  pt_jw_obj_end(w);
}

/* A point's value for the headings; 0 = generate.py's default, never recorded. */
static const char *pt_sweep_num(char *buf, size_t len, long v) {
  if (v > 0) snprintf(buf, len, "%ld", v);
  else snprintf(buf, len, "(default)");
  return buf;
}

/* Writes every point run so far (through a temporary file, renamed over
 * bn->out, so a reader never sees half a file). 0 or -1 (reason printed). */
static int pt_sweep_write(struct pt_bench *bn, struct pt_sweep_pt *pts, size_t n, size_t done,
                          const struct pt_sweep_row *rows, int ip, int ib, int final) {
  char tmp[PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", bn->out);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "ponytail bench: cannot write %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  char line[1024];
  pt_sweep_verdict_line(rows, done, line, sizeof line);
  struct pt_jw w;
  pt_jw_init(&w, f, true);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "tool", "ponytail bench --sweep");
  pt_bench_write_setup(&w, bn);
  pt_jw_obj_begin(&w, "sweep");
  pt_jw_arr_begin(&w, "prompt");
  for (size_t i = 0; i < bn->sweep.nprompt; i++) pt_jw_i64(&w, NULL, bn->sweep.prompt[i]);
  pt_jw_arr_end(&w);
  pt_jw_arr_begin(&w, "batch");
  for (size_t i = 0; i < bn->sweep.nbatch; i++) pt_jw_i64(&w, NULL, bn->sweep.batch[i]);
  pt_jw_arr_end(&w);
  pt_jw_str(&w, "verdict_points", !bn->verdict_steps ? "none" : bn->verdict_every ? "every" : "first and last");
  pt_jw_i64(&w, "verdict_steps", bn->verdict_steps);
  if (bn->verdict_new_tokens) pt_jw_i64(&w, "verdict_new_tokens", atol(bn->verdict_new_tokens));
  else pt_jw_str(&w, "verdict_new_tokens", NULL); /* the workload's own */
  pt_jw_u64(&w, "points", n);
  pt_jw_u64(&w, "done", done);
  pt_jw_bool(&w, "complete", final);
  pt_jw_obj_end(&w);
  pt_jw_obj_begin(&w, "summary");
  pt_jw_str(&w, "line", line);
  pt_jw_i64(&w, "exit_status", pt_sweep_exit_status(rows, done));
  pt_jw_arr_begin(&w, "points");
  for (size_t i = 0; i < done; i++) pt_sweep_write_row(&w, &rows[i]);
  pt_jw_arr_end(&w);
  pt_bench_swaps_json(&w, bn); /* over every point's B runs so far */
  pt_jw_obj_end(&w);
  pt_jw_arr_begin(&w, "points");
  for (size_t i = 0; i < done; i++) {
    struct pt_sweep_pt *p = &pts[i];
    pt_jw_obj_begin(&w, NULL);
    pt_jw_i64(&w, "prompt", p->row.prompt);
    pt_jw_i64(&w, "batch", p->row.batch);
    pt_jw_str(&w, "status", p->row.failed ? "failed" : "done");
    pt_jw_bool(&w, "judged", p->judged);
    if (!p->row.failed) {
      pt_sweep_bind(bn, p, ip, ib);
      pt_bench_write_body(&w, bn, (const double(*)[PT_BENCH_NMETRICS])p->med, p->match);
    }
    pt_jw_obj_end(&w);
  }
  pt_jw_arr_end(&w);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
  int bad_io = ferror(f);
  if (fclose(f) != 0 || bad_io || rename(tmp, bn->out) != 0) {
    fprintf(stderr, "ponytail bench: error writing %s\n", bn->out);
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* The timed rounds and (when judged) the verdict of point p. 0, or -1 when a
 * timed run failed (the verdict failing is recorded in the row instead). */
static int pt_sweep_run_point(struct pt_bench *bn, struct pt_sweep_pt *p, int ip, int ib) {
  pt_sweep_bind(bn, p, ip, ib);
  for (int r = 0; r < bn->repeats; r++) {
    if (!(p->a[r] = pt_bench_run(bn, 0, r + 1, -1, NULL))) return -1;
    if (!(p->b[r] = pt_bench_run(bn, 1, r + 1, -1, NULL))) return -1;
  }
  if (p->judged) {
    (void)pt_bench_verdict(bn); /* a failure leaves bn->verdict NULL: "error" in the row */
    memcpy(p->varm, bn->varm, sizeof p->varm);
    p->verdict = bn->verdict;
    pt_bench_verdict_cleanup(bn);
  }
  return 0;
}

static void pt_sweep_free_point(struct pt_bench *bn, struct pt_sweep_pt *p) {
  for (int r = 0; r < bn->repeats; r++) {
    if (p->a) pt_json_free(p->a[r]);
    if (p->b) pt_json_free(p->b[r]);
  }
  for (int v = 0; v < PT_NVARM; v++) pt_json_free(p->varm[v]);
  pt_json_free(p->verdict);
  free(p->a);
  free(p->b);
}

int pt_bench_sweep(struct pt_bench *bn) {
  const size_t n = pt_sweep_npoints(&bn->sweep);
  const int ip = pt_bench_fwd_index("--prompt"), ib = pt_bench_fwd_index("--batch");
  const int in = pt_bench_fwd_index("--new-tokens");
  /* Flags given beside the sweep hold the unswept key (or generate.py's default). */
  const long dflt_prompt = bn->fwd_val[ip] ? atol(bn->fwd_val[ip]) : 0;
  const long dflt_batch = bn->fwd_val[ib] ? atol(bn->fwd_val[ib]) : 0;
  /* The verdict compares the first --verdict-steps steps: its arms need no
   * more tokens than that, which keeps a judged point's extra cost to about
   * three prefills. */
  char vnt[24];
  snprintf(vnt, sizeof vnt, "%d", bn->verdict_steps);
  if (bn->verdict_steps && (!bn->fwd_val[in] || bn->verdict_steps < atol(bn->fwd_val[in])))
    bn->verdict_new_tokens = vnt;

  long seen_prompt = 0, seen_batch = 0; /* generate.py's defaults, once a run recorded them */
  struct pt_sweep_pt *pts = calloc(n, sizeof *pts);
  struct pt_sweep_row *rows = calloc(n, sizeof *rows);
  int rc = 1;
  if (!pts || !rows) {
    fprintf(stderr, "ponytail bench: out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    struct pt_sweep_pt *p = &pts[i];
    long prompt, batch;
    pt_sweep_point(&bn->sweep, i, dflt_prompt, dflt_batch, &prompt, &batch);
    if (prompt) snprintf(p->prompt_s, sizeof p->prompt_s, "%ld", prompt);
    if (batch) snprintf(p->batch_s, sizeof p->batch_s, "%ld", batch);
    p->judged = bn->verdict_steps && (bn->verdict_every || i == 0 || i + 1 == n);
    p->a = calloc((size_t)bn->repeats, sizeof *p->a);
    p->b = calloc((size_t)bn->repeats, sizeof *p->b);
    if (!p->a || !p->b) {
      fprintf(stderr, "ponytail bench: out of memory\n");
      goto out;
    }
    fprintf(stderr, "ponytail bench: sweep point %zu/%zu: batch %s, prompt %s%s\n", i + 1, n,
            p->batch_s[0] ? p->batch_s : "(default)", p->prompt_s[0] ? p->prompt_s : "(default)",
            p->judged ? ", with the verdict" : "");
    int failed = pt_sweep_run_point(bn, p, ip, ib) != 0;
    struct pt_sweep_row *r = &rows[i];
    r->prompt = pt_sweep_setting(p->a[0], "prompt", p->prompt_s, &seen_prompt);
    r->batch = pt_sweep_setting(p->a[0], "batch", p->batch_s, &seen_batch);
    r->judged = p->judged;
    r->failed = failed;
    if (!failed) {
      pt_bench_medians(bn, p->med);
      const char *sha;
      p->match = pt_bench_tokens_match(bn, &sha);
      pt_bench_side(p->med[0], &r->a);
      pt_bench_side(p->med[1], &r->b);
      r->verdict = p->verdict ? pt_json_str(pt_json_get(p->verdict, "status")) : p->judged ? "error" : NULL;
    }
    pt_sweep_row_derive(r);
    p->row = *r;

    /* The verdict first: correctness before speed. */
    char nb[24], np[24];
    printf("== point %zu/%zu: batch %s, prompt %s", i + 1, n, pt_sweep_num(nb, sizeof nb, r->batch),
           pt_sweep_num(np, sizeof np, r->prompt));
    if (failed) {
      printf(": a run failed (see stderr); going on with the next point\n\n");
    } else {
      printf(" (median of %d round%s)\n", bn->repeats, bn->repeats > 1 ? "s" : "");
      bn->verdict = p->verdict;
      pt_bench_print_verdict(bn, p->judged && !p->verdict);
      pt_sweep_print_point(stdout, r);
      printf("\n");
    }
    fflush(stdout);
    if (pt_sweep_write(bn, pts, n, i + 1, rows, ip, ib, 0) != 0) goto out;
  }

  char line[1024];
  pt_sweep_verdict_line(rows, n, line, sizeof line);
  printf("== sweep summary: %zu point%s (A stock, B ponytail; median of %d round%s each)\n", n, n > 1 ? "s" : "",
         bn->repeats, bn->repeats > 1 ? "s" : "");
  printf("%s\n\n", line);
  pt_sweep_print_summary(stdout, rows, n);
  printf("\n");
  pt_bench_swaps_print(stdout, bn); /* over every point's B runs */
  if (pt_sweep_write(bn, pts, n, n, rows, ip, ib, 1) != 0) goto out;
  printf("\nwrote %s (plot: ponytail plot-sweep %s -o sweep.png)\n", bn->out, bn->out);
  fflush(stdout);
  rc = pt_sweep_exit_status(rows, n);
  if (rc == 3 || rc == 4) fprintf(stderr, "ponytail bench: %s\n", line);
out:
  /* bn's own pointers lent to the points: nothing of them is freed twice. */
  bn->a = bn->b = NULL;
  memset(bn->varm, 0, sizeof bn->varm);
  bn->verdict = NULL;
  for (size_t i = 0; pts && i < n; i++) pt_sweep_free_point(bn, &pts[i]);
  free(pts);
  free(rows);
  return rc;
}
