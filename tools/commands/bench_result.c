/* `ponytail bench`: what an A/B's runs add up to. The metrics read from each
 * generate.py result, their medians over the rounds, the sweep's summary side,
 * whether the token ids agree, and the keys of RESULT.json (every run copied
 * whole). Shared by the single A/B (tools/commands/cmd_bench.c) and --sweep
 * (tools/commands/bench_sweep.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "tools/commands/bench.h"
#include "tools/lib/json.h"

/* In the order of the table and of the result's summary. */
const struct pt_bench_metric pt_bench_metrics[PT_BENCH_NMETRICS] = {
    {"peak_allocated_bytes", "peak allocated (torch)", 1, 0},
    {"peak_reserved_bytes", "peak reserved (torch)", 1, 0},
    {"nvml_peak_used_bytes", "peak device used (NVML)", 1, 0},
    {"tokens_per_s", "tokens/s", 0, 1},
    {"prefill_s", "prefill (s)", 0, 0},
    {"decode_step_ms.p50", "decode step p50 (ms)", 0, 0},
    {"decode_step_ms.p99", "decode step p99 (ms)", 0, 0},
    {"total_s", "generate total (s)", 0, 0},
};

double pt_bench_metric(const struct pt_json *res, const char *path) {
  char head[64];
  const char *dot = strchr(path, '.');
  if (!dot) return pt_json_num(pt_json_get(res, path), NAN);
  snprintf(head, sizeof head, "%.*s", (int)(dot - path), path);
  return pt_json_num(pt_json_get(pt_json_get(res, head), dot + 1), NAN);
}

static int pt_dbl_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Median of the finite values (NAN when none). */
static double pt_median(const struct pt_json *const *runs, size_t n, const char *path) {
  double v[n ? n : 1];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    double x = pt_bench_metric(runs[i], path);
    if (isfinite(x)) v[k++] = x;
  }
  if (!k) return NAN;
  qsort(v, k, sizeof *v, pt_dbl_cmp);
  return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

/* Re-emits a parsed JSON value (results are copied into RESULT.json whole). */
static void pt_json_copy(struct pt_jw *w, const char *key, const struct pt_json *v) {
  uint64_t u;
  int64_t s;
  switch (pt_json_type(v)) {
  case PT_JSON_NULL: pt_jw_str(w, key, NULL); break;
  case PT_JSON_BOOL: pt_jw_bool(w, key, pt_json_bool(v, 0)); break;
  case PT_JSON_NUM:
    if (pt_json_u64(v, &u) == 0) pt_jw_u64(w, key, u);
    else if (pt_json_i64(v, &s) == 0) pt_jw_i64(w, key, s);
    else pt_jw_dbl(w, key, pt_json_num(v, NAN));
    break;
  case PT_JSON_STR: pt_jw_str(w, key, pt_json_str(v)); break;
  case PT_JSON_ARR:
    pt_jw_arr_begin(w, key);
    for (size_t i = 0; i < pt_json_len(v); i++) pt_json_copy(w, NULL, pt_json_at(v, i));
    pt_jw_arr_end(w);
    break;
  case PT_JSON_OBJ:
    pt_jw_obj_begin(w, key);
    for (size_t i = 0; i < pt_json_len(v); i++) pt_json_copy(w, pt_json_key_at(v, i), pt_json_at(v, i));
    pt_jw_obj_end(w);
    break;
  }
}


void pt_bench_medians(const struct pt_bench *bn, double med[2][PT_BENCH_NMETRICS]) {
  for (int s = 0; s < 2; s++)
    for (size_t m = 0; m < PT_BENCH_NMETRICS; m++)
      med[s][m] = pt_median((const struct pt_json *const *)(s ? bn->b : bn->a), (size_t)bn->repeats,
                            pt_bench_metrics[m].path);
}

void pt_bench_side(const double med[PT_BENCH_NMETRICS], struct pt_sweep_side *s) {
  struct { const char *path; double *to; } map[] = {
      {"prefill_s", &s->ttft_s},
      {"decode_step_ms.p50", &s->step_ms},
      {"tokens_per_s", &s->tokens_per_s},
      {"nvml_peak_used_bytes", &s->nvml_bytes},
      {"peak_reserved_bytes", &s->reserved_bytes},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    *map[i].to = NAN;
    for (size_t m = 0; m < PT_BENCH_NMETRICS; m++)
      if (!strcmp(pt_bench_metrics[m].path, map[i].path)) *map[i].to = med[m];
  }
}

/* 1 when every run carries the same token_ids_sha256. */
int pt_bench_tokens_match(const struct pt_bench *bn, const char **sha) {
  *sha = pt_json_str(pt_json_get(bn->a[0], "token_ids_sha256"));
  if (!*sha) return 0;
  for (int r = 0; r < bn->repeats; r++)
    for (int s = 0; s < 2; s++) {
      const char *x = pt_json_str(pt_json_get((s ? bn->b : bn->a)[r], "token_ids_sha256"));
      if (!x || strcmp(x, *sha)) return 0;
    }
  return 1;
}

void pt_bench_write_setup(struct pt_jw *w, const struct pt_bench *bn) {
  pt_jw_str(w, "version", PT_VERSION);
  pt_jw_str(w, "shim", bn->shim);
  pt_jw_str(w, "script", bn->script);
  pt_jw_i64(w, "repeats", bn->repeats);
  pt_jw_arr_begin(w, "shim_env");
  for (size_t i = 0; i < bn->nshim_env; i++) pt_jw_str(w, NULL, bn->shim_env[i]);
  pt_jw_arr_end(w);
  pt_jw_arr_begin(w, "stock_env");
  for (size_t i = 0; i < bn->nstock_env; i++) pt_jw_str(w, NULL, bn->stock_env[i]);
  pt_jw_arr_end(w);
}

void pt_bench_write_body(struct pt_jw *w, const struct pt_bench *bn, const double med[2][PT_BENCH_NMETRICS],
                         int match) {
  /* The workload's own settings, as generate.py recorded them. */
  pt_json_copy(w, "settings", pt_json_get(bn->a[0], "settings"));
  pt_jw_obj_begin(w, "summary");
  for (int s = 0; s < 2; s++) {
    pt_jw_obj_begin(w, s ? "b" : "a");
    for (size_t m = 0; m < PT_BENCH_NMETRICS; m++) pt_jw_dbl(w, pt_bench_metrics[m].path, med[s][m]);
    pt_jw_obj_end(w);
  }
  pt_jw_bool(w, "token_ids_match", match);
  pt_jw_str(w, "verdict", bn->verdict ? pt_json_str(pt_json_get(bn->verdict, "status"))
                          : bn->verdict_steps && !bn->unjudged ? "error" : NULL);
  pt_jw_obj_end(w);
  pt_jw_obj_begin(w, "verdict_settings");
  pt_jw_i64(w, "steps", bn->verdict_steps);
  pt_jw_str(w, "reference_sdpa", bn->verdict_steps ? bn->ref_sdpa : NULL);
  pt_jw_str(w, "same_path_sdpa", bn->verdict_steps && bn->same_path ? bn->same_sdpa : NULL);
  pt_jw_dbl(w, "margin", bn->margin);
  pt_jw_obj_end(w);
  if (bn->verdict) pt_json_copy(w, "verdict", bn->verdict);
  else pt_jw_str(w, "verdict", NULL);
  pt_jw_obj_begin(w, "verdict_runs");
  for (int v = 0; v < PT_NVARM; v++)
    if (bn->varm[v]) {
      char key[2] = {pt_bench_varm_name[v], 0};
      pt_json_copy(w, key, bn->varm[v]);
    }
  pt_jw_obj_end(w);
  for (int s = 0; s < 2; s++) {
    pt_jw_obj_begin(w, s ? "b" : "a");
    pt_jw_str(w, "label", s ? "with the shim" : "stock");
    pt_jw_arr_begin(w, "runs");
    for (int r = 0; r < bn->repeats; r++) pt_json_copy(w, NULL, (s ? bn->b : bn->a)[r]);
    pt_jw_arr_end(w);
    pt_jw_obj_end(w);
  }
}

void pt_bench_free_results(struct pt_bench *bn) {
  for (int r = 0; r < bn->repeats; r++) {
    if (bn->a) {
      pt_json_free(bn->a[r]);
      bn->a[r] = NULL;
    }
    if (bn->b) {
      pt_json_free(bn->b[r]);
      bn->b[r] = NULL;
    }
  }
  for (int v = 0; v < PT_NVARM; v++) {
    pt_json_free(bn->varm[v]);
    bn->varm[v] = NULL;
  }
  pt_bench_verdict_cleanup(bn);
  pt_json_free(bn->verdict);
  bn->verdict = NULL;
}
