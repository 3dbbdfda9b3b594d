/* `ponytail bench`: what the shim did to attention in the B runs. Each timed B
 * run writes the shim's exit stats (PONYTAIL_STATS=json) into the bench's
 * temporary directory; their kernel counts are summed here, so that the table
 * can say when nothing was swapped: a model whose attention never reaches one
 * of Ponytail's kernels (eager attention, a head_dim the kernel does not take)
 * would otherwise show B/A ratios near 1.0 that read like a measured speed-up
 * of nothing, when they measure the allocator and the interception only. */
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/commands/bench.h"
#include "tools/lib/json.h"

static void add_reason(struct pt_bench_swaps *s, const char *why, uint64_t n) {
  for (int i = 0; i < s->nreasons; i++)
    if (!strcmp(s->reason[i].why, why)) {
      s->reason[i].n += n;
      return;
    }
  if (s->nreasons == PT_BENCH_REASONS) {
    s->reasons_dropped += n;
    return;
  }
  snprintf(s->reason[s->nreasons].why, sizeof s->reason[0].why, "%s", why);
  s->reason[s->nreasons++].n = n;
}

void pt_bench_swaps_collect(struct pt_bench *bn, const char *pattern) {
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return; /* none: the user's own PONYTAIL_STATS won */
  for (size_t i = 0; i < g.gl_pathc; i++) {
    char err[256];
    struct pt_json *j = pt_json_parse_file(g.gl_pathv[i], err, sizeof err);
    const struct pt_json *k = pt_json_get(j, "kernels");
    uint64_t sw = 0, fb = 0;
    if (k && pt_json_u64(pt_json_get(k, "swapped"), &sw) == 0 && pt_json_u64(pt_json_get(k, "fallbacks"), &fb) == 0) {
      bn->sw.runs++;
      bn->sw.swapped += sw;
      bn->sw.fallbacks += fb;
      const struct pt_json *r = pt_json_get(k, "fallback_reasons");
      for (size_t x = 0; x < pt_json_len(r); x++) {
        uint64_t n = 0;
        if (pt_json_u64(pt_json_at(r, x), &n) == 0 && n) add_reason(&bn->sw, pt_json_key_at(r, x), n);
      }
    }
    pt_json_free(j);
    unlink(g.gl_pathv[i]);
  }
  globfree(&g);
}

/* "reason N; reason N" by count, then a count of the ones not kept. */
static void reasons_text(const struct pt_bench_swaps *s, char *buf, size_t len) {
  int used[PT_BENCH_REASONS] = {0};
  size_t o = 0;
  buf[0] = 0;
  for (int k = 0; k < s->nreasons && o < len; k++) {
    int best = -1;
    for (int i = 0; i < s->nreasons; i++)
      if (!used[i] && (best < 0 || s->reason[i].n > s->reason[best].n)) best = i;
    used[best] = 1;
    o += (size_t)snprintf(buf + o, len - o, "%s%s %llu", k ? "; " : "", s->reason[best].why,
                          (unsigned long long)s->reason[best].n);
  }
  if (s->reasons_dropped && o < len)
    snprintf(buf + o, len - o, "; others %llu", (unsigned long long)s->reasons_dropped);
}

void pt_bench_swaps_print(FILE *f, const struct pt_bench *bn) {
  const struct pt_bench_swaps *s = &bn->sw;
  char why[512];
  reasons_text(s, why, sizeof why);
  if (!s->runs) {
    fprintf(f, "  %-26s unknown (no shim stats from the B runs: PONYTAIL_STATS set in --shim-env?)\n",
            "attention swapped (B)");
  } else if (!s->swapped) {
    fprintf(f, "  %-26s NONE: no attention launch ran on Ponytail's kernels, so B/A measures the\n"
               "  %-26s allocator and the interception only; %s\n",
            "attention swapped (B)", "",
            s->fallbacks ? "fallbacks:" : "no attention launch reached a hook (eager attention, or "
                                          "kernels the hooks do not know)");
    if (s->fallbacks) fprintf(f, "  %-26s %s\n", "", why);
  } else {
    fprintf(f, "  %-26s %llu of %llu hooked launches (%.1f%%)%s%s\n", "attention swapped (B)",
            (unsigned long long)s->swapped, (unsigned long long)(s->swapped + s->fallbacks),
            100.0 * (double)s->swapped / (double)(s->swapped + s->fallbacks), s->fallbacks ? "; fallbacks: " : "",
            s->fallbacks ? why : "");
  }
}

void pt_bench_swaps_json(struct pt_jw *w, const struct pt_bench *bn) {
  const struct pt_bench_swaps *s = &bn->sw;
  if (!s->runs) {
    pt_jw_str(w, "attention", NULL);
    return;
  }
  pt_jw_obj_begin(w, "attention");
  pt_jw_u64(w, "stats_files", s->runs);
  pt_jw_u64(w, "swapped", s->swapped);
  pt_jw_u64(w, "fallbacks", s->fallbacks);
  pt_jw_bool(w, "none_swapped", s->swapped == 0);
  pt_jw_obj_begin(w, "fallback_reasons");
  for (int i = 0; i < s->nreasons; i++) pt_jw_u64(w, s->reason[i].why, s->reason[i].n);
  if (s->reasons_dropped) pt_jw_u64(w, "(others)", s->reasons_dropped);
  pt_jw_obj_end(w);
  pt_jw_obj_end(w);
}
