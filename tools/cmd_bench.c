/* `ponytail bench`: the A/B of examples/generate.py, stock (A) then with the
 * shim (B), same seed and settings, repeated alternately; medians in a table
 * and every run's full result (timelines included) in RESULT.json. Then the
 * correctness verdict: untimed runs that save the first steps' logits (A, B,
 * R = stock on another SDPA backend, optionally S = stock on the shim's
 * attention path), judged by examples/verdict.py; its lines are printed first.
 * The steps are shared (tools/bench.h) with --sweep (tools/bench_sweep.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "tools/bench.h"
#include "tools/cmd.h"
#include "tools/gpu_probe.h"
#include "tools/json.h"
#include "tools/shimpath.h"
#include "tools/spawn.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail bench [options]\n"
          "\n"
          "A/B test of examples/generate.py (a random-weight Hugging Face Llama, greedy decoding):\n"
          "run A without the shim, run B with it, same seed and settings, alternating for\n"
          "--repeats rounds (progress on stderr). Prints medians of peak device memory (torch\n"
          "allocated and reserved, NVML used), tokens/s, prefill time and decode step p50/p99,\n"
          "and whether the generated token ids match; writes every run's result, memory\n"
          "timeline included, to --out (plot it with `ponytail timeline`). Needs a GPU.\n"
          "\n"
          "First it prints the correctness verdict: untimed runs A, B and R (stock with another\n"
          "SDPA backend) save their logits of the first --verdict-steps decode steps, and\n"
          "examples/verdict.py compares B against A (max and mean relative difference) next to\n"
          "PyTorch's own backend spread (R against A): \"within PyTorch's own backend spread\" or\n"
          "\"OUTSIDE\" it; a NaN or Inf in any logits fails it. Token agreement: the share of\n"
          "positions before the first divergence and the first divergent step, per sequence.\n"
          "\n"
          "Workload (passed to generate.py; defaults are its own: workload W):\n"
          "  --layers N --hidden N --heads N --kv-heads N --head-dim N --vocab N\n"
          "  --batch N --prompt N --new-tokens N --dtype bf16|fp16|fp32\n"
          "  --pad F             left-pad this fraction of the batch with shorter prompts\n"
          "                      (--dtype fp32: greedy tokens should stay identical A vs B)\n"
          "  --seed N            (default 0)\n"
          "  --config FILE       Hugging Face config.json overrides\n"
          "Bench:\n"
          "  --repeats N         A/B rounds (default 1)\n"
          "  --timeline-ms N     memory sampling period (default 50; 0 = no timeline)\n"
          "  --no-warmup         skip generate.py's warm-up generate (same prompt shape, 2 new\n"
          "                      tokens), which keeps first-shape costs out of the TTFT\n"
          "  --shim-env K=V      extra environment for the shim run (repeatable)\n"
          "  --stock-env K=V     extra environment for the stock run (repeatable), e.g.\n"
          "                      TORCH_CUDNN_SDPA_DEPRIORITIZED=1 to compare with torch's flash path\n"
          "  --out FILE          result JSON (default ponytail-bench.json)\n"
          "  --python EXE        interpreter (default python3)\n"
          "  --script PATH       generate.py to run (default: the one next to ponytail)\n"
          "  --shim PATH         shim to preload (default: the one next to ponytail)\n"
          "  -h, --help          this help\n"
          "Verdict:\n"
          "  --verdict-steps N   decode steps whose logits are compared (default 8; 0 = no\n"
          "                      verdict and no extra runs)\n"
          "  --reference-sdpa B  R's backend: flash|math|efficient|cudnn|default (default: flash\n"
          "                      for bf16/fp16, the path the shim takes; math for fp32)\n"
          "  --same-path         also S, stock on the shim's attention path (flash; fp32: torch's\n"
          "                      default): with --shim-env PONYTAIL_ATTN=off B must equal S\n"
          "  --verdict-margin F  within = B's max and mean rel diff <= F x R's (default 2)\n"
          "  (--stock-env applies to A, R and S, --shim-env to B)\n"
          "Sweep:\n"
          "  --sweep SPEC        the A/B at every point of SPEC, e.g. prompt=512,2048,8192,32768\n"
          "                      or prompt=512,4k,batch=1,8 (k = x1024; every batch with every\n"
          "                      prompt; a key left out takes --prompt / --batch); A then B at\n"
          "                      each point, one table per point as it finishes, then a summary\n"
          "                      (speed-ups, TTFT ratio, memory saved, verdict per point); every\n"
          "                      result in one --out (default ponytail-sweep.json; plot it with\n"
          "                      `ponytail plot-sweep`). The verdict runs at the first and the\n"
          "                      last point, its arms generating --verdict-steps tokens only\n"
          "  --verdict-every     judge every point of a sweep\n"
          "\n"
          "Exit status: 0 done (verdict within, or no verdict), 1 a run failed or no GPU,\n"
          "2 usage error, 3 verdict OUTSIDE PyTorch's own backend spread, 4 NaN/Inf in the\n"
          "logits (3 and 4 still print the table and write --out). A sweep exits with the\n"
          "worst over its points: 4, then 3, then 1.\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("bench", usage, msg, arg); }

/* Workload flags forwarded to generate.py and how they are checked. */
enum { V_POSINT, V_NONNEG, V_FRAC, V_DTYPE, V_PATH };
static const struct {
  const char *flag;
  int check;
} pt_fwd[] = {
    {"--layers", V_POSINT},    {"--hidden", V_POSINT}, {"--heads", V_POSINT}, {"--kv-heads", V_POSINT},
    {"--head-dim", V_POSINT},  {"--vocab", V_POSINT},  {"--batch", V_POSINT}, {"--prompt", V_POSINT},
    {"--new-tokens", V_POSINT}, {"--dtype", V_DTYPE},  {"--pad", V_FRAC},     {"--seed", V_NONNEG},
    {"--config", V_PATH},
};
#define PT_NFWD (sizeof pt_fwd / sizeof pt_fwd[0])
_Static_assert(PT_NFWD == PT_BENCH_NFWD, "tools/bench.h's PT_BENCH_NFWD counts pt_fwd");

int pt_bench_fwd_index(const char *flag) {
  for (size_t i = 0; i < PT_NFWD; i++)
    if (!strcmp(pt_fwd[i].flag, flag)) return (int)i;
  return -1;
}

static int pt_bench_check(int check, const char *v) {
  char *end;
  switch (check) {
  case V_POSINT:
  case V_NONNEG: {
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return !*end && end != v && !errno && (check == V_NONNEG ? x >= 0 : x > 0) && x < (1ll << 40);
  }
  case V_FRAC: {
    double x = strtod(v, &end);
    return !*end && end != v && x >= 0 && x <= 1;
  }
  case V_DTYPE: return !strcmp(v, "bf16") || !strcmp(v, "fp16") || !strcmp(v, "fp32");
  default: return *v != '\0';
  }
}

/* Metrics of a result, by path ("a" or "a.b"). */
static const struct {
  const char *path, *label;
  int bytes;      /* shown in GiB */
  int higher_ok;  /* 1: higher is better (for the verdict column) */
} pt_metrics[] = {
    {"peak_allocated_bytes", "peak allocated (torch)", 1, 0},
    {"peak_reserved_bytes", "peak reserved (torch)", 1, 0},
    {"nvml_peak_used_bytes", "peak device used (NVML)", 1, 0},
    {"tokens_per_s", "tokens/s", 0, 1},
    {"prefill_s", "prefill (s)", 0, 0},
    {"decode_step_ms.p50", "decode step p50 (ms)", 0, 0},
    {"decode_step_ms.p99", "decode step p99 (ms)", 0, 0},
    {"total_s", "generate total (s)", 0, 0},
};
#define PT_NMETRICS (sizeof pt_metrics / sizeof pt_metrics[0])
_Static_assert(PT_NMETRICS == PT_BENCH_NMETRICS, "tools/bench.h's PT_BENCH_NMETRICS counts pt_metrics");

static double pt_metric(const struct pt_json *res, const char *path) {
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
    double x = pt_metric(runs[i], path);
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

static const char pt_varm_name[PT_NVARM] = {'a', 'b', 'r', 's'};

/* One run of generate.py; returns its parsed result or NULL (reason printed).
 * varm < 0: a timed run of the A/B; else an untimed verdict arm (PT_VA..PT_VS)
 * that saves its logits to bn->vpt[varm] (no warm-up, no timeline, --sdpa
 * sdpa, and bn->verdict_new_tokens tokens when set). */
struct pt_json *pt_bench_run(struct pt_bench *bn, int shimmed, int round, int varm, const char *sdpa) {
  char json[PATH_MAX + 32], tl[32], steps[32];
  if (varm >= 0) snprintf(json, sizeof json, "%s/v%c.json", bn->dir, pt_varm_name[varm]);
  else snprintf(json, sizeof json, "%s/%c-%d.json", bn->dir, shimmed ? 'b' : 'a', round);
  snprintf(tl, sizeof tl, "%d", varm >= 0 ? 0 : bn->timeline_ms);
  snprintf(steps, sizeof steps, "%d", bn->verdict_steps);
  const char *args[2 * PT_NFWD + 20];
  size_t n = 0;
  args[n++] = bn->python;
  args[n++] = bn->script;
  for (size_t i = 0; i < PT_NFWD; i++) {
    const char *v = bn->fwd_val[i];
    if (varm >= 0 && bn->verdict_new_tokens && !strcmp(pt_fwd[i].flag, "--new-tokens")) v = bn->verdict_new_tokens;
    if (v) {
      args[n++] = pt_fwd[i].flag;
      args[n++] = v;
    }
  }
  args[n++] = "--json";
  args[n++] = json;
  args[n++] = "--timeline-ms";
  args[n++] = tl;
  if (bn->warmup && varm < 0) args[n++] = "--warmup";
  if (varm >= 0) {
    args[n++] = "--logits-out";
    args[n++] = bn->vpt[varm];
    args[n++] = "--logits-steps";
    args[n++] = steps;
    if (sdpa && strcmp(sdpa, "default")) {
      args[n++] = "--sdpa";
      args[n++] = sdpa;
    }
  }
  args[n] = NULL;
  char what[64], who[8];
  if (varm >= 0) {
    snprintf(what, sizeof what, "verdict arm %c (%s%s%s)", pt_varm_name[varm] - 'a' + 'A',
             shimmed ? "with the shim" : "stock", sdpa && strcmp(sdpa, "default") ? ", --sdpa " : "",
             sdpa && strcmp(sdpa, "default") ? sdpa : "");
    snprintf(who, sizeof who, "%c", pt_varm_name[varm] - 'a' + 'A');
  } else {
    snprintf(what, sizeof what, "round %d/%d, %s", round, bn->repeats, shimmed ? "B (with the shim)" : "A (stock)");
    snprintf(who, sizeof who, "%s", shimmed ? "B" : "A");
  }

  struct pt_env env;
  struct pt_json *res = NULL;
  char *pre = NULL;
  if (pt_env_from_environ(&env) != 0) goto oom;
  const char *old = pt_env_get(&env, "LD_PRELOAD");
  pre = shimmed ? pt_preload_compose(bn->shim, old) : pt_preload_remove(bn->shim, old);
  if (!pre || pt_env_set(&env, "LD_PRELOAD", *pre ? pre : NULL)) goto oom;
  for (size_t i = 0; shimmed && i < bn->nshim_env; i++)
    if (pt_env_put(&env, bn->shim_env[i])) goto oom;
  for (size_t i = 0; !shimmed && i < bn->nstock_env; i++)
    if (pt_env_put(&env, bn->stock_env[i])) goto oom;
  fprintf(stderr, "ponytail bench: %s ...\n", what);
  double wall = 0;
  unlink(json);
  int st = pt_spawn_wait((char *const *)args, env.v, 2, &wall);
  if (st != 0) {
    fprintf(stderr, "ponytail bench: %s run failed: '%s %s' exited with status %d\n", what, bn->python,
            bn->script, st);
    goto out;
  }
  char err[512];
  if (!(res = pt_json_parse_file(json, err, sizeof err))) {
    fprintf(stderr, "ponytail bench: cannot read the result of the %s run: %s\n", who, err);
    goto out;
  }
  if (varm >= 0) fprintf(stderr, "ponytail bench: %s done in %.1f s\n", what, wall);
  else
    fprintf(stderr, "ponytail bench: %s done in %.1f s: %.1f tokens/s\n", what, wall, pt_metric(res, "tokens_per_s"));
  goto out;
oom:
  fprintf(stderr, "ponytail bench: out of memory\n");
out:
  unlink(json);
  free(pre);
  pt_env_free(&env);
  return res;
}

/* examples/verdict.py: next to the generate.py being run, else next to the
 * default one, else in the source tree this ponytail was built from. 0 or -1. */
static int pt_bench_find_verdict(struct pt_bench *bn, char *why, size_t whylen) {
  char def[PATH_MAX], w[PATH_MAX * 3];
  const char *dirs[3] = {bn->script, NULL, NULL};
  if (pt_tool_find_script(NULL, def, sizeof def, w, sizeof w) == 0) dirs[1] = def;
#ifdef PT_SOURCE_ROOT
  dirs[2] = PT_SOURCE_ROOT "/examples/generate.py";
#endif
  for (int i = 0; i < 3; i++) {
    if (!dirs[i]) continue;
    const char *slash = strrchr(dirs[i], '/');
    int len = slash ? (int)(slash - dirs[i]) + 1 : 0;
    snprintf(bn->verdict_script, sizeof bn->verdict_script, "%.*sverdict.py", len, dirs[i]);
    if (access(bn->verdict_script, R_OK) == 0) return 0;
  }
  snprintf(why, whylen, "examples/verdict.py not found next to %s; --verdict-steps 0 skips the verdict",
           bn->script);
  return -1;
}

/* The verdict: untimed runs saving their logits, then examples/verdict.py.
 * 0 with bn->verdict set, or -1 (reason printed). */
int pt_bench_verdict(struct pt_bench *bn) {
  for (int v = 0; v < PT_NVARM; v++)
    snprintf(bn->vpt[v], sizeof bn->vpt[v], "%s/%c.pt", bn->dir, pt_varm_name[v]);
  const char *ref = bn->ref_sdpa;
  if (!(bn->varm[PT_VA] = pt_bench_run(bn, 0, 0, PT_VA, "default"))) return -1;
  if (!(bn->varm[PT_VB] = pt_bench_run(bn, 1, 0, PT_VB, "default"))) return -1;
  if (!(bn->varm[PT_VR] = pt_bench_run(bn, 0, 0, PT_VR, ref))) return -1;
  const char *spt = NULL;
  if (bn->same_path) {
    /* S reuses a run already made on the same backend. */
    if (!strcmp(bn->same_sdpa, ref)) spt = bn->vpt[PT_VR];
    else if (!strcmp(bn->same_sdpa, "default")) spt = bn->vpt[PT_VA];
    else if (!(bn->varm[PT_VS] = pt_bench_run(bn, 0, 0, PT_VS, bn->same_sdpa))) return -1;
    else spt = bn->vpt[PT_VS];
  }
  char steps[32], margin[32], rlabel[64], slabel[64], out[PATH_MAX + 32];
  snprintf(steps, sizeof steps, "%d", bn->verdict_steps);
  snprintf(margin, sizeof margin, "%g", bn->margin);
  snprintf(rlabel, sizeof rlabel, "r=stock %s", ref);
  snprintf(slabel, sizeof slabel, "s=stock %s", bn->same_sdpa);
  snprintf(out, sizeof out, "%s/verdict.json", bn->dir);
  const char *args[24];
  size_t n = 0;
  args[n++] = bn->python;
  args[n++] = bn->verdict_script;
  args[n++] = bn->vpt[PT_VA];
  args[n++] = bn->vpt[PT_VB];
  args[n++] = bn->vpt[PT_VR];
  if (spt) {
    args[n++] = "--same";
    args[n++] = spt;
  }
  args[n++] = "--steps";
  args[n++] = steps;
  args[n++] = "--margin";
  args[n++] = margin;
  args[n++] = "--label";
  args[n++] = rlabel;
  args[n++] = "--label";
  args[n++] = slabel;
  args[n++] = "--json";
  args[n] = NULL;
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "ponytail bench: cannot write %s: %s\n", out, strerror(errno));
    return -1;
  }
  struct pt_env env;
  if (pt_env_from_environ(&env) != 0) {
    fclose(f);
    fprintf(stderr, "ponytail bench: out of memory\n");
    return -1;
  }
  /* The verdict reads files: no shim (nor the user's preload) in it. */
  pt_env_set(&env, "LD_PRELOAD", NULL);
  fprintf(stderr, "ponytail bench: verdict (%s) ...\n", bn->verdict_script);
  int st = pt_spawn_wait((char *const *)args, env.v, fileno(f), NULL);
  pt_env_free(&env);
  fclose(f);
  char err[512];
  if (st != 0 && st != 3 && st != 4) {
    fprintf(stderr, "ponytail bench: '%s %s' exited with status %d\n", bn->python, bn->verdict_script, st);
  } else if (!(bn->verdict = pt_json_parse_file(out, err, sizeof err))) {
    fprintf(stderr, "ponytail bench: cannot read the verdict: %s\n", err);
  } else if (!pt_json_str(pt_json_get(bn->verdict, "line")) || !pt_json_str(pt_json_get(bn->verdict, "status"))) {
    fprintf(stderr, "ponytail bench: the verdict has no line or status\n");
    pt_json_free(bn->verdict);
    bn->verdict = NULL;
  }
  unlink(out);
  return bn->verdict ? 0 : -1;
}

void pt_bench_verdict_cleanup(struct pt_bench *bn) {
  for (int v = 0; v < PT_NVARM; v++)
    if (bn->vpt[v][0]) unlink(bn->vpt[v]);
}

void pt_bench_medians(const struct pt_bench *bn, double med[2][PT_BENCH_NMETRICS]) {
  for (int s = 0; s < 2; s++)
    for (size_t m = 0; m < PT_NMETRICS; m++)
      med[s][m] = pt_median((const struct pt_json *const *)(s ? bn->b : bn->a), (size_t)bn->repeats,
                            pt_metrics[m].path);
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
    for (size_t m = 0; m < PT_NMETRICS; m++)
      if (!strcmp(pt_metrics[m].path, map[i].path)) *map[i].to = med[m];
  }
}

void pt_bench_print_verdict(const struct pt_bench *bn, int verdict_failed) {
  if (bn->verdict) {
    const struct pt_json *lines = pt_json_get(bn->verdict, "lines");
    if (pt_json_len(lines))
      for (size_t i = 0; i < pt_json_len(lines); i++) {
        const char *l = pt_json_str(pt_json_at(lines, i));
        printf("%s\n", l ? l : "");
      }
    else printf("%s\n", pt_json_str(pt_json_get(bn->verdict, "line")));
    printf("\n");
  } else if (verdict_failed) {
    printf("verdict: n/a (the verdict runs or examples/verdict.py failed: see stderr)\n\n");
  }
}

static void pt_bench_cell(char *buf, size_t len, double v, int bytes) {
  if (!isfinite(v)) snprintf(buf, len, "n/a");
  else if (bytes) snprintf(buf, len, "%.3f GiB", v / (1024.0 * 1024.0 * 1024.0));
  else snprintf(buf, len, "%.3f", v);
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
    for (size_t m = 0; m < PT_NMETRICS; m++) pt_jw_dbl(w, pt_metrics[m].path, med[s][m]);
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
      char key[2] = {pt_varm_name[v], 0};
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

static int pt_bench_write(const struct pt_bench *bn, double med[2][PT_NMETRICS], int match) {
  FILE *f = fopen(bn->out, "w");
  if (!f) {
    fprintf(stderr, "ponytail bench: cannot write %s: %s\n", bn->out, strerror(errno));
    return -1;
  }
  struct pt_jw w;
  pt_jw_init(&w, f, true);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "tool", "ponytail bench");
  pt_bench_write_setup(&w, bn);
  pt_bench_write_body(&w, bn, (const double(*)[PT_BENCH_NMETRICS])med, match);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
  int bad_io = ferror(f);
  if (fclose(f) != 0 || bad_io) {
    fprintf(stderr, "ponytail bench: error writing %s\n", bn->out);
    return -1;
  }
  return 0;
}

int pt_cmd_bench(int argc, char **argv) {
  struct pt_bench bn = {.repeats = 1, .timeline_ms = 50, .warmup = 1, .python = "python3",
                        .out = "ponytail-bench.json", .verdict_steps = 8, .margin = 2.0};
  const char *envs[64], *stock_envs[64];
  bn.shim_env = envs;
  bn.stock_env = stock_envs;
  /* The workload flags (pt_fwd[k]) are O_FWD + k. */
  enum { O_NO_WARMUP = 256, O_REPEATS, O_TIMELINE_MS, O_SHIM_ENV, O_STOCK_ENV, O_OUT, O_PYTHON, O_SCRIPT,
         O_SHIM, O_VERDICT_STEPS, O_REFERENCE_SDPA, O_SAME_PATH, O_VERDICT_MARGIN, O_SWEEP, O_VERDICT_EVERY,
         O_FWD };
  static const struct option own[] = {
      {"help", no_argument, NULL, 'h'},
      {"no-warmup", no_argument, NULL, O_NO_WARMUP},
      {"repeats", required_argument, NULL, O_REPEATS},
      {"timeline-ms", required_argument, NULL, O_TIMELINE_MS},
      {"shim-env", required_argument, NULL, O_SHIM_ENV},
      {"stock-env", required_argument, NULL, O_STOCK_ENV},
      {"out", required_argument, NULL, O_OUT},
      {"python", required_argument, NULL, O_PYTHON},
      {"script", required_argument, NULL, O_SCRIPT},
      {"shim", required_argument, NULL, O_SHIM},
      {"verdict-steps", required_argument, NULL, O_VERDICT_STEPS},
      {"reference-sdpa", required_argument, NULL, O_REFERENCE_SDPA},
      {"same-path", no_argument, NULL, O_SAME_PATH},
      {"verdict-margin", required_argument, NULL, O_VERDICT_MARGIN},
      {"sweep", required_argument, NULL, O_SWEEP},
      {"verdict-every", no_argument, NULL, O_VERDICT_EVERY},
  };
  struct option opts[sizeof own / sizeof own[0] + PT_NFWD + 1];
  memcpy(opts, own, sizeof own);
  for (size_t k = 0; k < PT_NFWD; k++)
    opts[sizeof own / sizeof own[0] + k] = (struct option){pt_fwd[k].flag + 2, required_argument, NULL, O_FWD + (int)k};
  opts[sizeof opts / sizeof opts[0] - 1] = (struct option){NULL, 0, NULL, 0};
  const char *w;
  int c, out_set = 0;
  char sweep_why[256];
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    const char *v = optarg;
    char *end;
    long x;
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_NO_WARMUP: bn.warmup = 0; break;
    case O_REPEATS:
    case O_TIMELINE_MS:
      x = strtol(v, &end, 10);
      if (*end || end == v || x < (c == O_REPEATS ? 1 : 0) || x > 100000)
        return bad("bad value", c == O_REPEATS ? "--repeats" : "--timeline-ms");
      if (c == O_REPEATS) bn.repeats = (int)x;
      else bn.timeline_ms = (int)x;
      break;
    case O_SHIM_ENV:
      if (!strchr(v, '=') || v[0] == '=') return bad("--shim-env takes KEY=VALUE", v);
      if (bn.nshim_env >= sizeof envs / sizeof envs[0]) return bad("too many --shim-env", v);
      envs[bn.nshim_env++] = v;
      break;
    case O_STOCK_ENV:
      if (!strchr(v, '=') || v[0] == '=') return bad("--stock-env takes KEY=VALUE", v);
      if (bn.nstock_env >= sizeof stock_envs / sizeof stock_envs[0]) return bad("too many --stock-env", v);
      stock_envs[bn.nstock_env++] = v;
      break;
    case O_OUT:
      bn.out = v;
      out_set = 1;
      break;
    case O_PYTHON: bn.python = v; break;
    case O_SCRIPT: bn.script_arg = v; break;
    case O_SHIM: bn.shim_arg = v; break;
    case O_VERDICT_STEPS:
      x = strtol(v, &end, 10);
      if (*end || end == v || x < 0 || x > 100000) return bad("bad value", "--verdict-steps");
      bn.verdict_steps = (int)x;
      break;
    case O_REFERENCE_SDPA:
      if (strcmp(v, "flash") && strcmp(v, "math") && strcmp(v, "efficient") && strcmp(v, "cudnn") &&
          strcmp(v, "default"))
        return bad("--reference-sdpa takes flash|math|efficient|cudnn|default", v);
      bn.ref_sdpa = v;
      break;
    case O_SAME_PATH: bn.same_path = 1; break;
    case O_VERDICT_MARGIN: {
      double m = strtod(v, &end);
      if (*end || end == v || !(m >= 1.0) || m > 1e6) return bad("bad value (>= 1)", "--verdict-margin");
      bn.margin = m;
      break;
    }
    case O_SWEEP:
      if (pt_sweep_parse(v, &bn.sweep, sweep_why, sizeof sweep_why)) {
        char msg[320];
        snprintf(msg, sizeof msg, "--sweep: %s", sweep_why);
        return bad(msg, v);
      }
      bn.sweeping = 1;
      break;
    case O_VERDICT_EVERY: bn.verdict_every = 1; break;
    case ':': return bad("missing value after", w);
    case '?': return bad("unknown option", w);
    default: /* O_FWD + k */
      if (!pt_bench_check(pt_fwd[c - O_FWD].check, v)) return bad("bad value", pt_fwd[c - O_FWD].flag);
      bn.fwd_val[c - O_FWD] = v;
      break;
    }
  }
  if (optind < argc) return bad("unexpected argument", argv[optind]);
  if (bn.sweeping) {
    /* A swept key replaces its flag: both would leave one of them unused. */
    if (bn.sweep.nprompt && bn.fwd_val[pt_bench_fwd_index("--prompt")])
      return bad("--prompt and --sweep prompt=... both set the prompt length", NULL);
    if (bn.sweep.nbatch && bn.fwd_val[pt_bench_fwd_index("--batch")])
      return bad("--batch and --sweep batch=... both set the batch size", NULL);
    if (!out_set) bn.out = "ponytail-sweep.json";
  } else if (bn.verdict_every) {
    return bad("--verdict-every applies to --sweep only", NULL);
  }
  /* R: flash for 16-bit models (what the shim runs, cuDNN being stock's pick on the
   * H200); fp32 has neither flash nor cuDNN, so math. S: the shim's path. */
  const char *dtype = "bf16";
  for (size_t k = 0; k < PT_NFWD; k++)
    if (pt_fwd[k].check == V_DTYPE && bn.fwd_val[k]) dtype = bn.fwd_val[k];
  int fp32 = !strcmp(dtype, "fp32");
  if (!bn.ref_sdpa) bn.ref_sdpa = fp32 ? "math" : "flash";
  bn.same_sdpa = fp32 ? "default" : "flash";

  char why[PATH_MAX * 3];
  if (!pt_gpu_probe(why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s; the A/B needs a GPU\n", why);
    return 1;
  }
  if (pt_tool_find_script(bn.script_arg, bn.script, sizeof bn.script, why, sizeof why) ||
      pt_tool_find_shim(bn.shim_arg, bn.shim, sizeof bn.shim, why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s\n", why);
    return 1;
  }
  if (bn.verdict_steps && pt_bench_find_verdict(&bn, why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s\n", why);
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(bn.dir, sizeof bn.dir, "%s/ponytail-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(bn.dir)) {
    fprintf(stderr, "ponytail bench: cannot create a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  if (bn.sweeping) {
    int src = pt_bench_sweep(&bn);
    rmdir(bn.dir);
    return src;
  }
  bn.a = calloc((size_t)bn.repeats, sizeof *bn.a);
  bn.b = calloc((size_t)bn.repeats, sizeof *bn.b);
  int rc = 1;
  if (!bn.a || !bn.b) goto out;
  /* Alternate A and B so drift (clocks, thermals) hits both alike. */
  for (int r = 0; r < bn.repeats; r++) {
    if (!(bn.a[r] = pt_bench_run(&bn, 0, r + 1, -1, NULL))) goto out;
    if (!(bn.b[r] = pt_bench_run(&bn, 1, r + 1, -1, NULL))) goto out;
  }
  /* A failed verdict still leaves the table and the result (exit 1). */
  int verdict_failed = bn.verdict_steps && pt_bench_verdict(&bn) != 0;
  double med[2][PT_NMETRICS];
  pt_bench_medians(&bn, med);
  const char *sha = NULL;
  int match = pt_bench_tokens_match(&bn, &sha);

  /* The verdict first: correctness before speed. */
  const char *vstatus = bn.verdict ? pt_json_str(pt_json_get(bn.verdict, "status")) : NULL;
  pt_bench_print_verdict(&bn, verdict_failed);
  printf("ponytail bench: %s, median of %d round%s\n\n", bn.script, bn.repeats, bn.repeats > 1 ? "s" : "");
  printf("  %-26s %14s %14s %8s\n", "", "A stock", "B ponytail", "B/A");
  for (size_t m = 0; m < PT_NMETRICS; m++) {
    char ca[32], cb[32], cr[16] = "";
    pt_bench_cell(ca, sizeof ca, med[0][m], pt_metrics[m].bytes);
    pt_bench_cell(cb, sizeof cb, med[1][m], pt_metrics[m].bytes);
    if (isfinite(med[0][m]) && isfinite(med[1][m]) && med[0][m] != 0)
      snprintf(cr, sizeof cr, "%.3f", med[1][m] / med[0][m]);
    printf("  %-26s %14s %14s %8s\n", pt_metrics[m].label, ca, cb, cr);
  }
  printf("  %-26s %s\n", "generated token ids",
         match ? "identical (sha256 equal in every run)" : "DIFFER between runs (see token_ids in the result)");
  if (pt_bench_write(&bn, med, match) != 0) goto out;
  printf("\nwrote %s (plot: ponytail timeline %s -o timeline.png)\n", bn.out, bn.out);
  rc = verdict_failed ? 1 : !vstatus ? 0 : !strcmp(vstatus, "outside") ? 3 : !strcmp(vstatus, "nonfinite") ? 4 : 0;
  if (rc == 3 || rc == 4) fprintf(stderr, "ponytail bench: %s\n", pt_json_str(pt_json_get(bn.verdict, "line")));
out:
  pt_bench_free_results(&bn);
  free(bn.a);
  free(bn.b);
  rmdir(bn.dir);
  return rc;
}
