/* `ponytail bench`: the child processes of an A/B. One run of
 * examples/generate.py (a timed round, or an untimed verdict arm that saves
 * its logits) with or without the shim in LD_PRELOAD, and the verdict:
 * examples/verdict.py over the arms' logits. The workload flags forwarded to
 * generate.py are listed here, so that the parser (tools/commands/cmd_bench.c) and the
 * runs read one table. Shared with --sweep (tools/commands/bench_sweep.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/commands/bench.h"
#include "tools/lib/json.h"
#include "tools/lib/shimpath.h"
#include "tools/lib/spawn.h"

/* Workload flags forwarded to generate.py and how they are checked. */
enum { V_POSINT, V_NONNEG, V_FRAC, V_DTYPE, V_PATH };
static const struct {
  const char *flag;
  int check;
} pt_bench_fwd[] = {
    {"--layers", V_POSINT},    {"--hidden", V_POSINT}, {"--heads", V_POSINT}, {"--kv-heads", V_POSINT},
    {"--head-dim", V_POSINT},  {"--vocab", V_POSINT},  {"--batch", V_POSINT}, {"--prompt", V_POSINT},
    {"--new-tokens", V_POSINT}, {"--dtype", V_DTYPE},  {"--pad", V_FRAC},     {"--seed", V_NONNEG},
    {"--config", V_PATH},
};
_Static_assert(sizeof pt_bench_fwd / sizeof pt_bench_fwd[0] == PT_BENCH_NFWD,
               "tools/commands/bench.h's PT_BENCH_NFWD counts pt_bench_fwd");

int pt_bench_fwd_index(const char *flag) {
  for (size_t i = 0; i < PT_BENCH_NFWD; i++)
    if (!strcmp(pt_bench_fwd[i].flag, flag)) return (int)i;
  return -1;
}

const char *pt_bench_fwd_flag(size_t k) { return pt_bench_fwd[k].flag; }

int pt_bench_fwd_ok(size_t k, const char *v) {
  char *end;
  const int check = pt_bench_fwd[k].check;
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

const char pt_bench_varm_name[PT_NVARM] = {'a', 'b', 'r', 's'};

/* One run of generate.py; returns its parsed result or NULL (reason printed).
 * varm < 0: a timed run of the A/B; else an untimed verdict arm (PT_VA..PT_VS)
 * that saves its logits to bn->vpt[varm] (no warm-up, no timeline, --sdpa
 * sdpa, and bn->verdict_new_tokens tokens when set). */
struct pt_json *pt_bench_run(struct pt_bench *bn, int shimmed, int round, int varm, const char *sdpa) {
  char json[PATH_MAX + 32], tl[32], steps[32];
  if (varm >= 0) snprintf(json, sizeof json, "%s/v%c.json", bn->dir, pt_bench_varm_name[varm]);
  else snprintf(json, sizeof json, "%s/%c-%d.json", bn->dir, shimmed ? 'b' : 'a', round);
  snprintf(tl, sizeof tl, "%d", varm >= 0 ? 0 : bn->timeline_ms);
  snprintf(steps, sizeof steps, "%d", bn->verdict_steps);
  const char *args[2 * PT_BENCH_NFWD + 20];
  size_t n = 0;
  args[n++] = bn->python;
  args[n++] = bn->script;
  for (size_t i = 0; i < PT_BENCH_NFWD; i++) {
    const char *v = bn->fwd_val[i];
    if (varm >= 0 && bn->verdict_new_tokens && !strcmp(pt_bench_fwd[i].flag, "--new-tokens")) v = bn->verdict_new_tokens;
    if (v) {
      args[n++] = pt_bench_fwd[i].flag;
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
    snprintf(what, sizeof what, "verdict arm %c (%s%s%s)", pt_bench_varm_name[varm] - 'a' + 'A',
             shimmed ? "with the shim" : "stock", sdpa && strcmp(sdpa, "default") ? ", --sdpa " : "",
             sdpa && strcmp(sdpa, "default") ? sdpa : "");
    snprintf(who, sizeof who, "%c", pt_bench_varm_name[varm] - 'a' + 'A');
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
  /* The shim's exit stats of a timed B run, for the table's "attention swapped" line; set
   * before --shim-env, which may replace them (the line then says unknown). */
  char stats[PATH_MAX + 64], pattern[PATH_MAX + 64];
  snprintf(stats, sizeof stats, "%s/b-%d-stats-%%p.json", bn->dir, round);
  snprintf(pattern, sizeof pattern, "%s/b-%d-stats-*.json", bn->dir, round);
  if (shimmed && varm < 0 && (pt_env_set(&env, "PONYTAIL_STATS", "json") || pt_env_set(&env, "PONYTAIL_STATS_FILE", stats)))
    goto oom;
  for (size_t i = 0; shimmed && i < bn->nshim_env; i++)
    if (pt_env_put(&env, bn->shim_env[i])) goto oom;
  for (size_t i = 0; !shimmed && i < bn->nstock_env; i++)
    if (pt_env_put(&env, bn->stock_env[i])) goto oom;
  fprintf(stderr, "ponytail bench: %s ...\n", what);
  double wall = 0;
  unlink(json);
  int st = pt_spawn_wait((char *const *)args, env.v, 2, &wall);
  if (shimmed && varm < 0) pt_bench_swaps_collect(bn, pattern);
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
    fprintf(stderr, "ponytail bench: %s done in %.1f s: %.1f tokens/s\n", what, wall, pt_bench_metric(res, "tokens_per_s"));
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
int pt_bench_find_verdict(struct pt_bench *bn, char *why, size_t whylen) {
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
    snprintf(bn->vpt[v], sizeof bn->vpt[v], "%s/%c.pt", bn->dir, pt_bench_varm_name[v]);
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
