/* `ponytail timeline RESULT.json -o OUT.png|OUT.svg`: the memory curves of a
 * bench result's stock (A) and shim (B) runs on one chart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cmd.h"
#include "tools/lib/json.h"
#include "tools/lib/plot.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail timeline RESULT.json -o OUT.png|OUT.svg [--title T] [--metric M]\n"
          "\n"
          "Plots the sampled device memory of both runs of a `ponytail bench` result\n"
          "(A = stock, B = with the shim; the first repeat of each) against time. A single\n"
          "examples/generate.py result (--json) is plotted as one series. Each series' peak is\n"
          "marked and annotated. The format follows the extension of OUT.\n"
          "\n"
          "Options:\n"
          "  -o, --out FILE   output file, .png or .svg\n"
          "  --title T        chart title (default: from the bench settings)\n"
          "  --metric M       auto|nvml|reserved|allocated|tier (default auto: NVML device memory\n"
          "                   used when both runs sampled it, else torch memory_reserved; tier:\n"
          "                   bytes in Ponytail's host tier, sampled under PONYTAIL_HOST_TIER)\n"
          "  --size WxH       image size in pixels (default 1200x700)\n"
          "  -h, --help       this help\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("timeline", usage, msg, arg); }

/* A bench side ({"runs": [...]}) or a generate.py result itself -> the result. */
static const struct pt_json *pt_tl_result(const struct pt_json *side) {
  const struct pt_json *runs = pt_json_get(side, "runs");
  if (pt_json_type(runs) == PT_JSON_ARR) return pt_json_at(runs, 0);
  return side;
}

static int pt_tl_has(const struct pt_json *res, const char *key) {
  const struct pt_json *tl = pt_json_get(res, "timeline");
  for (size_t i = 0; i < pt_json_len(tl); i++)
    if (pt_json_type(pt_json_get(pt_json_at(tl, i), key)) == PT_JSON_NUM) return 1;
  return 0;
}

/* Fills x (seconds) and y (GiB, NAN when the sample lacks the key). */
static int pt_tl_series(const struct pt_json *res, const char *key, double **x, double **y, size_t *n) {
  const struct pt_json *tl = pt_json_get(res, "timeline");
  *n = pt_json_len(tl);
  *x = calloc(*n ? *n : 1, sizeof **x);
  *y = calloc(*n ? *n : 1, sizeof **y);
  if (!*x || !*y) return -1;
  for (size_t i = 0; i < *n; i++) {
    const struct pt_json *s = pt_json_at(tl, i);
    (*x)[i] = pt_json_num(pt_json_get(s, "t"), NAN);
    (*y)[i] = pt_json_num(pt_json_get(s, key), NAN) / (1024.0 * 1024.0 * 1024.0);
  }
  return 0;
}

int pt_cmd_timeline(int argc, char **argv) {
  enum { O_TITLE = 256, O_METRIC, O_SIZE };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"out", required_argument, NULL, 'o'},
      {"title", required_argument, NULL, O_TITLE},
      {"metric", required_argument, NULL, O_METRIC},
      {"size", required_argument, NULL, O_SIZE},
      {NULL, 0, NULL, 0},
  };
  const char *in = NULL, *out = NULL, *title = NULL, *metric = "auto", *w;
  int width = 1200, height = 700, c;
  optind = 0;
  /* '-': RESULT.json may come before or after the flags. */
  while ((c = pt_getopt(argc, argv, "-:ho:", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case 'o': out = optarg; break;
    case O_TITLE: title = optarg; break;
    case O_METRIC: metric = optarg; break;
    case O_SIZE:
      if (pt_plot_parse_size(optarg, 320, 240, &width, &height))
        return bad("--size takes WxH between 320x240 and 8000x8000", optarg);
      break;
    case 1:
      if (in) return bad("more than one input file", optarg);
      in = optarg;
      break;
    case ':': return bad("missing value after", w);
    default: return bad("unknown option", w);
    }
  }
  if (optind < argc && !in) in = argv[optind++]; /* after "--" */
  if (optind < argc) return bad("more than one input file", argv[optind]);
  if (!in) return bad("no RESULT.json given", NULL);
  if (!out) return bad("no output file given (-o OUT.png|OUT.svg)", NULL);
  const int svg = pt_plot_format(out);
  if (svg < 0) return bad("the output must end in .png or .svg", out);
  if (strcmp(metric, "auto") && strcmp(metric, "nvml") && strcmp(metric, "reserved") &&
      strcmp(metric, "allocated") && strcmp(metric, "tier"))
    return bad("--metric takes auto|nvml|reserved|allocated|tier", metric);

  char err[512];
  struct pt_json *doc = pt_json_parse_file(in, err, sizeof err);
  if (!doc) {
    fprintf(stderr, "ponytail timeline: cannot read %s: %s\n", in, err);
    return 2;
  }
  const struct pt_json *res[2] = {NULL, NULL};
  const char *names[2] = {"A stock", "B ponytail"};
  size_t nres = 0;
  if (pt_json_get(doc, "a") || pt_json_get(doc, "b")) {
    const struct pt_json *a = pt_tl_result(pt_json_get(doc, "a")), *b = pt_tl_result(pt_json_get(doc, "b"));
    if (pt_json_get(a, "timeline")) res[nres++] = a;
    else names[0] = names[1];
    if (pt_json_get(b, "timeline")) res[nres++] = b;
  } else if (pt_json_get(doc, "timeline")) {
    res[nres++] = doc;
    names[0] = "run";
  }
  size_t points = 0;
  for (size_t i = 0; i < nres; i++) points += pt_json_len(pt_json_get(res[i], "timeline"));
  if (nres == 0 || points == 0) {
    fprintf(stderr, "ponytail timeline: %s holds no memory timeline (run bench with --timeline-ms > 0)\n", in);
    pt_json_free(doc);
    return 2;
  }

  const char *key = "reserved", *ylabel = "torch memory_reserved (GiB)";
  int use_nvml = !strcmp(metric, "nvml");
  if (!strcmp(metric, "auto")) {
    use_nvml = 1;
    for (size_t i = 0; i < nres; i++) use_nvml &= pt_tl_has(res[i], "nvml_used");
  }
  if (use_nvml) key = "nvml_used", ylabel = "device memory used, NVML (GiB)";
  else if (!strcmp(metric, "allocated")) key = "allocated", ylabel = "torch memory_allocated (GiB)";
  else if (!strcmp(metric, "tier")) {
    key = "host_tier", ylabel = "Ponytail host tier, bytes in host memory (GiB)";
    int any = 0;
    for (size_t i = 0; i < nres; i++) any |= pt_tl_has(res[i], "host_tier");
    if (!any) {
      fprintf(stderr, "ponytail timeline: %s has no host-tier samples (run with PONYTAIL_HOST_TIER set and "
                      "--timeline-ms > 0)\n", in);
      pt_json_free(doc);
      return 2;
    }
  }

  char deftitle[256];
  if (!title) {
    const struct pt_json *st = pt_json_get(doc, "settings");
    if (!st) st = pt_json_get(res[0], "settings");
    snprintf(deftitle, sizeof deftitle, "Memory over time: batch %.0f, prompt %.0f, %.0f new tokens",
             pt_json_num(pt_json_get(st, "batch"), NAN), pt_json_num(pt_json_get(st, "prompt"), NAN),
             pt_json_num(pt_json_get(st, "new_tokens"), NAN));
    title = st ? deftitle : "Memory over time";
  }

  static const uint32_t colors[2] = {0x1f77b4, 0xe4572e};
  struct pt_chart ch = {.title = title, .xlabel = "time since start (s)", .ylabel = ylabel,
                        .yunit = "GiB", .ns = nres, .width = width, .height = height};
  double *xs[2] = {NULL, NULL}, *ys[2] = {NULL, NULL};
  int rc = 0;
  for (size_t i = 0; i < nres; i++) {
    size_t n = 0;
    if (pt_tl_series(res[i], key, &xs[i], &ys[i], &n) != 0) {
      fprintf(stderr, "ponytail timeline: out of memory\n");
      rc = 1;
      goto done;
    }
    ch.s[i] = (struct pt_series){names[i], xs[i], ys[i], n, colors[i]};
  }
  rc = (svg ? pt_chart_write_svg : pt_chart_write_png)(&ch, out, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ponytail timeline: %s\n", err);
    rc = 1;
    goto done;
  }
  for (size_t i = 0; i < nres; i++) {
    size_t p = pt_series_peak(&ch.s[i]);
    if (p != (size_t)-1)
      printf("%-11s peak %.3f GiB at %.2f s (%zu samples)\n", names[i], ys[i][p], xs[i][p], ch.s[i].n);
  }
  printf("wrote %s (%s)\n", out, ylabel);
done:
  for (size_t i = 0; i < 2; i++) {
    free(xs[i]);
    free(ys[i]);
  }
  pt_json_free(doc);
  return rc;
}
