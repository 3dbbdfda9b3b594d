/* `ponytail plot-sweep RESULT.json -o OUT.png|OUT.svg`: what a
 * `ponytail bench --sweep` result gained against the prompt length, one line
 * per batch size, in three panels (decode step speed-up, tokens/s speed-up,
 * memory saved), drawn by the same chart code as `ponytail timeline`; the
 * figures are the sweep's own summary rows (tools/lib/sweep.c), printed too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cmd.h"
#include "tools/lib/json.h"
#include "tools/lib/plot.h"
#include "tools/lib/sweep.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail plot-sweep RESULT.json -o OUT.png|OUT.svg [--memory M] [--size WxH]\n"
          "\n"
          "Plots a `ponytail bench --sweep` result against the prompt length (log2 axis), one\n"
          "line per batch size, in three panels: the decode step speed-up (A stock's step p50 /\n"
          "B ponytail's), the tokens/s speed-up (B / A) and the memory Ponytail saved (A's peak\n"
          "minus B's, MiB). A point whose runs failed leaves a gap. Prints the sweep's summary\n"
          "table. The format follows the extension of OUT.\n"
          "\n"
          "Options:\n"
          "  -o, --out FILE   output file, .png or .svg\n"
          "  --memory M       auto|nvml|reserved: the memory panel's peak (default auto: NVML\n"
          "                   device memory used when every point has it, else torch's peak\n"
          "                   reserved)\n"
          "  --size WxH       image size in pixels (default 1200x1200)\n"
          "  -h, --help       this help\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("plot-sweep", usage, msg, arg); }

static int pt_ps_by_prompt(const void *x, const void *y) {
  const struct pt_sweep_row *a = x, *b = y;
  return a->batch != b->batch ? (a->batch > b->batch) - (a->batch < b->batch)
                              : (a->prompt > b->prompt) - (a->prompt < b->prompt);
}

/* One panel's y value of a row. */
enum { PS_STEP, PS_TOKENS, PS_MEMORY, PS_NPANELS };
static double pt_ps_value(const struct pt_sweep_row *r, int panel, int nvml) {
  switch (panel) {
  case PS_STEP: return r->step_speedup;
  case PS_TOKENS: return r->tokens_speedup;
  default: return nvml ? r->nvml_saved_mib : r->reserved_saved_mib;
  }
}

int pt_cmd_plot_sweep(int argc, char **argv) {
  enum { O_MEMORY = 256, O_SIZE };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"out", required_argument, NULL, 'o'},
      {"memory", required_argument, NULL, O_MEMORY},
      {"size", required_argument, NULL, O_SIZE},
      {NULL, 0, NULL, 0},
  };
  const char *in = NULL, *out = NULL, *memory = "auto", *w;
  int width = 1200, height = 1200, c;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "-:ho:", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case 'o': out = optarg; break;
    case O_MEMORY: memory = optarg; break;
    case O_SIZE:
      if (pt_plot_parse_size(optarg, 480, 600, &width, &height))
        return bad("--size takes WxH between 480x600 and 8000x8000", optarg);
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
  if (strcmp(memory, "auto") && strcmp(memory, "nvml") && strcmp(memory, "reserved"))
    return bad("--memory takes auto|nvml|reserved", memory);

  char err[512];
  struct pt_json *doc = pt_json_parse_file(in, err, sizeof err);
  if (!doc) {
    fprintf(stderr, "ponytail plot-sweep: cannot read %s: %s\n", in, err);
    return 2;
  }
  const struct pt_json *points = pt_json_get(doc, "points");
  size_t n = pt_json_len(points), ndone = 0;
  struct pt_sweep_row *rows = calloc(n ? n : 1, sizeof *rows);
  int rc = 2;
  if (!rows) {
    fprintf(stderr, "ponytail plot-sweep: out of memory\n");
    rc = 1;
    goto done;
  }
  if (pt_json_type(points) != PT_JSON_ARR || n == 0) {
    fprintf(stderr, "ponytail plot-sweep: %s is not a sweep result (no points; `ponytail bench --sweep` writes one)\n",
            in);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (pt_sweep_row_from_json(pt_json_at(points, i), &rows[i]) != 0) {
      fprintf(stderr, "ponytail plot-sweep: %s: point %zu has no prompt and batch\n", in, i + 1);
      goto done;
    }
    ndone += !rows[i].failed;
  }
  if (!ndone) {
    fprintf(stderr, "ponytail plot-sweep: no point of %s finished: nothing to plot\n", in);
    goto done;
  }

  /* The summary as the sweep printed it, in run order. */
  char line[1024];
  pt_sweep_verdict_line(rows, n, line, sizeof line);
  printf("%s\n\n", line);
  pt_sweep_print_summary(stdout, rows, n);

  int nvml = !strcmp(memory, "nvml");
  if (!strcmp(memory, "auto")) {
    nvml = 1;
    for (size_t i = 0; i < n; i++) nvml &= rows[i].failed || isfinite(rows[i].nvml_saved_mib);
  }
  /* One series per batch size, its points by prompt length. */
  qsort(rows, n, sizeof *rows, pt_ps_by_prompt);
  long batches[PT_PLOT_MAX_SERIES];
  size_t first[PT_PLOT_MAX_SERIES + 1], nb = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || rows[i].batch != rows[i - 1].batch) {
      if (nb == PT_PLOT_MAX_SERIES) {
        fprintf(stderr, "ponytail plot-sweep: more than %d batch sizes in %s: one line each does not fit\n",
                PT_PLOT_MAX_SERIES, in);
        goto done;
      }
      batches[nb] = rows[i].batch;
      first[nb++] = i;
    }
  first[nb] = n;
  double *xs = calloc(n, sizeof *xs), *ys = calloc((size_t)PS_NPANELS * n, sizeof *ys);
  char names[PT_PLOT_MAX_SERIES][32];
  if (!xs || !ys) {
    free(xs);
    free(ys);
    fprintf(stderr, "ponytail plot-sweep: out of memory\n");
    rc = 1;
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    xs[i] = (double)rows[i].prompt;
    for (int p = 0; p < PS_NPANELS; p++) ys[(size_t)p * n + i] = pt_ps_value(&rows[i], p, nvml);
  }
  static const uint32_t colors[PT_PLOT_MAX_SERIES] = {0x1f77b4, 0xe4572e, 0x2ca02c, 0x9467bd};
  static const char *const titles[PS_NPANELS] = {
      "Decode step speed-up: stock step p50 / Ponytail's",
      "Tokens/s speed-up: Ponytail / stock",
      NULL,
  };
  struct pt_chart ch[PS_NPANELS];
  memset(ch, 0, sizeof ch);
  int ph = height / PS_NPANELS;
  for (int p = 0; p < PS_NPANELS; p++) {
    struct pt_chart *k = &ch[p];
    k->title = titles[p] ? titles[p]
               : nvml ? "Memory saved by Ponytail: peak device memory used (NVML), stock - Ponytail"
                      : "Memory saved by Ponytail: torch's peak reserved, stock - Ponytail";
    k->xlabel = "prompt length (tokens, log2 scale)";
    k->ylabel = p == PS_MEMORY ? "saved (MiB)" : "speed-up (x)";
    k->width = width;
    k->height = ph;
    k->y0 = p * ph;
    k->logx = 1;
    k->markers = 1;
    k->no_peaks = 1;
    k->has_yref = 1;
    k->yref = p == PS_MEMORY ? 0.0 : 1.0;
    k->yref_label = p == PS_MEMORY ? NULL : "1x = parity";
    k->ns = nb;
    for (size_t b = 0; b < nb; b++) {
      snprintf(names[b], sizeof names[b], "batch %ld", batches[b]);
      k->s[b] = (struct pt_series){names[b], xs + first[b], ys + (size_t)p * n + first[b], first[b + 1] - first[b],
                                   colors[b]};
    }
  }
  rc = (svg ? pt_charts_write_svg : pt_charts_write_png)(ch, PS_NPANELS, out, err, sizeof err);
  free(xs);
  free(ys);
  if (rc != 0) {
    fprintf(stderr, "ponytail plot-sweep: %s\n", err);
    rc = 1;
    goto done;
  }
  printf("\nwrote %s (%zu of %zu points, %zu batch size%s; memory: %s)\n", out, ndone, n, nb, nb > 1 ? "s" : "",
         nvml ? "NVML peak device memory" : "torch peak reserved");
done:
  free(rows);
  pt_json_free(doc);
  return rc;
}
