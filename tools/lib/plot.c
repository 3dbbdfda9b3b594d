/* Chart layout shared by the SVG and PNG outputs (see plot.h): the timeline's
 * linear axes from 0, and the sweep's log2 x axis, markers, reference line and
 * y range that may go below 0. */
#include "tools/lib/plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define COL_BG 0xffffffu
#define COL_AXIS 0x222222u
#define COL_GRID 0xe0e0e0u
#define COL_TEXT 0x111111u

double pt_plot_nice_step(double raw) {
  if (!(raw > 0) || !isfinite(raw)) return 1.0;
  double p = pow(10.0, floor(log10(raw)));
  double m = raw / p;
  double f = m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0;
  return f * p;
}

size_t pt_series_peak(const struct pt_series *s) {
  size_t best = (size_t)-1;
  for (size_t i = 0; i < s->n; i++)
    if (isfinite(s->y[i]) && isfinite(s->x[i]) && (best == (size_t)-1 || s->y[i] > s->y[best]))
      best = i;
  return best;
}

/* Decimals that show a tick step exactly enough (0.25 -> 2, 5 -> 0). */
static int pt_plot_decimals(double step) {
  int d = (int)ceil(-log10(step) - 1e-9);
  return d < 0 ? 0 : d > 6 ? 6 : d;
}

struct pt_frame {
  double px0, px1, py0, py1; /* plot area */
  double xmin, xmax, ymin, ymax; /* data range (x in log2 units on a log axis) */
  int logx;
};

static double fx(const struct pt_frame *f, double x) {
  if (f->logx) x = log2(x);
  return f->px0 + (f->px1 - f->px0) * (x - f->xmin) / (f->xmax - f->xmin);
}
static double fy(const struct pt_frame *f, double y) {
  return f->py1 - (f->py1 - f->py0) * (y - f->ymin) / (f->ymax - f->ymin);
}

/* A power of two as a prompt length is written: 512, 1k, 2k, ..., 1M. */
static void pt_plot_pow2_label(char *buf, size_t len, double v) {
  if (v >= 1048576 && fmod(v, 1048576) == 0) snprintf(buf, len, "%.0fM", v / 1048576);
  else if (v >= 1024 && fmod(v, 1024) == 0) snprintf(buf, len, "%.0fk", v / 1024);
  else snprintf(buf, len, "%g", v);
}

static void pt_chart_xtick(const struct pt_frame *f, double v, int grid, const char *label,
                           const struct pt_canvas_ops *o, void *c) {
  double x = fx(f, v);
  if (grid) o->line(c, x, f->py0, x, f->py1, COL_GRID, 1);
  o->line(c, x, f->py1, x, f->py1 + 6, COL_AXIS, 1);
  o->text(c, x, f->py1 + 8 + PT_PLOT_CHAR_H, label, COL_TEXT, PT_ANCHOR_MIDDLE, 0);
}

static void pt_chart_axes(const struct pt_chart *ch, const struct pt_frame *f, double xstep,
                          double ystep, const struct pt_canvas_ops *o, void *c) {
  char buf[64];
  if (f->logx) {
    /* Every power of two in range (every second one past 12 octaves). */
    int k0 = (int)ceil(f->xmin - 1e-9), k1 = (int)floor(f->xmax + 1e-9), by = k1 - k0 > 12 ? 2 : 1;
    for (int k = k0; k <= k1; k += by) {
      double v = ldexp(1.0, k);
      pt_plot_pow2_label(buf, sizeof buf, v);
      pt_chart_xtick(f, v, 1, buf, o, c);
    }
  } else {
    int xd = pt_plot_decimals(xstep);
    for (int i = 0;; i++) {
      double v = i * xstep;
      if (v > f->xmax * (1 + 1e-9)) break;
      snprintf(buf, sizeof buf, "%.*f", xd, v);
      pt_chart_xtick(f, v, i > 0, buf, o, c);
    }
  }
  int yd = pt_plot_decimals(ystep);
  for (int i = 0;; i++) {
    double v = f->ymin + i * ystep;
    if (v > f->ymax + ystep * 1e-9) break;
    if (fabs(v) < ystep * 1e-9) v = 0; /* no "-0.0" */
    double y = fy(f, v);
    if (i > 0) o->line(c, f->px0, y, f->px1, y, COL_GRID, 1);
    o->line(c, f->px0 - 6, y, f->px0, y, COL_AXIS, 1);
    snprintf(buf, sizeof buf, "%.*f", yd, v);
    o->text(c, f->px0 - 9, y + PT_PLOT_CHAR_H / 2 - 2, buf, COL_TEXT, PT_ANCHOR_END, 0);
  }
  if (ch->has_yref && ch->yref >= f->ymin && ch->yref <= f->ymax) {
    double y = fy(f, ch->yref);
    o->line(c, f->px0, y, f->px1, y, COL_AXIS, 1);
    if (ch->yref_label)
      o->text(c, f->px1 - 6, y - 4, ch->yref_label, COL_AXIS, PT_ANCHOR_END, 0);
  }
  /* The frame last so grid lines never cover it. */
  o->line(c, f->px0, f->py1, f->px1, f->py1, COL_AXIS, 2);
  o->line(c, f->px0, f->py0, f->px0, f->py1, COL_AXIS, 2);
  o->line(c, f->px0, f->py0, f->px1, f->py0, COL_AXIS, 1);
  o->line(c, f->px1, f->py0, f->px1, f->py1, COL_AXIS, 1);
  if (ch->xlabel)
    o->text(c, (f->px0 + f->px1) / 2, f->py1 + 14 + 2 * PT_PLOT_CHAR_H, ch->xlabel, COL_TEXT, PT_ANCHOR_MIDDLE, 0);
  if (ch->ylabel)
    o->text(c, ch->x0 + 8 + PT_PLOT_CHAR_H, (f->py0 + f->py1) / 2, ch->ylabel, COL_TEXT, PT_ANCHOR_MIDDLE, 1);
}

static int pt_point_ok(const struct pt_frame *f, double x, double y) {
  return isfinite(x) && isfinite(y) && (!f->logx || x > 0);
}

/* One polyline per run of finite samples (a missing sample breaks the line). */
static void pt_chart_series(const struct pt_chart *ch, const struct pt_series *s, const struct pt_frame *f,
                            const struct pt_canvas_ops *o, void *c, double *xs, double *ys) {
  size_t k = 0;
  for (size_t i = 0; i <= s->n; i++) {
    int ok = i < s->n && pt_point_ok(f, s->x[i], s->y[i]);
    if (ok) {
      xs[k] = fx(f, s->x[i]);
      ys[k] = fy(f, s->y[i]);
      k++;
    }
    if (!ok || i == s->n) {
      if (k == 1 && !ch->markers) o->rect(c, xs[0] - 1, ys[0] - 1, 3, 3, s->rgb);
      else if (k > 1) o->polyline(c, xs, ys, k, s->rgb, 2);
      for (size_t j = 0; ch->markers && j < k; j++) o->rect(c, xs[j] - 4, ys[j] - 4, 9, 9, s->rgb);
      k = 0;
    }
  }
}

static void pt_chart_peak(const struct pt_chart *ch, size_t si, const struct pt_frame *f,
                          const struct pt_canvas_ops *o, void *c) {
  const struct pt_series *s = &ch->s[si];
  size_t p = pt_series_peak(s);
  if (p == (size_t)-1) return;
  double mx = fx(f, s->x[p]), my = fy(f, s->y[p]);
  o->rect(c, mx - 5, my - 5, 11, 11, COL_AXIS);
  o->rect(c, mx - 3, my - 3, 7, 7, s->rgb);
  char buf[128];
  snprintf(buf, sizeof buf, "%s peak %.2f %s at %.1f s", s->name ? s->name : "", s->y[p],
           ch->yunit ? ch->yunit : "", s->x[p]);
  /* Peak labels go in a right-aligned list at the top of the plot, one row per
   * series: labels placed beside their markers collide whenever two runs peak
   * at similar heights, which is the common case in an A/B. */
  double ty = f->py0 + 8 + PT_PLOT_CHAR_H + (double)si * (PT_PLOT_CHAR_H + 6);
  o->text(c, f->px1 - 10, ty, buf, s->rgb, PT_ANCHOR_END, 0);
}

static void pt_chart_legend(const struct pt_chart *ch, const struct pt_frame *f,
                            const struct pt_canvas_ops *o, void *c) {
  size_t longest = 0;
  for (size_t i = 0; i < ch->ns; i++)
    if (ch->s[i].name && strlen(ch->s[i].name) > longest) longest = strlen(ch->s[i].name);
  double w = 44 + (double)longest * PT_PLOT_CHAR_W, h = 10 + (double)ch->ns * (PT_PLOT_CHAR_H + 4);
  double x = f->px0 + 12, y = f->py0 + 12;
  o->rect(c, x, y, w, h, COL_AXIS);
  o->rect(c, x + 1, y + 1, w - 2, h - 2, COL_BG);
  for (size_t i = 0; i < ch->ns; i++) {
    double ly = y + 5 + (double)i * (PT_PLOT_CHAR_H + 4) + PT_PLOT_CHAR_H / 2.0;
    o->line(c, x + 6, ly, x + 30, ly, ch->s[i].rgb, 3);
    o->text(c, x + 36, ly + PT_PLOT_CHAR_H / 2.0 - 2, ch->s[i].name ? ch->s[i].name : "", COL_TEXT,
            PT_ANCHOR_START, 0);
  }
}

void pt_chart_draw(const struct pt_chart *ch, const struct pt_canvas_ops *o, void *c) {
  struct pt_frame f = {.px0 = ch->x0 + 100, .px1 = ch->x0 + ch->width - 30, .py0 = ch->y0 + 50,
                       .py1 = ch->y0 + ch->height - 70, .logx = ch->logx};
  double xmax = 0, ymax = 0, ymin = 0, lxmin = INFINITY, lxmax = -INFINITY;
  for (size_t i = 0; i < ch->ns; i++) {
    const struct pt_series *s = &ch->s[i];
    for (size_t j = 0; j < s->n; j++) {
      if (isfinite(s->x[j]) && (!ch->logx || s->x[j] > 0)) {
        if (s->x[j] > xmax) xmax = s->x[j];
        if (ch->logx) {
          lxmin = fmin(lxmin, log2(s->x[j]));
          lxmax = fmax(lxmax, log2(s->x[j]));
        }
      }
      if (isfinite(s->y[j]) && s->y[j] > ymax) ymax = s->y[j];
      if (isfinite(s->y[j]) && s->y[j] < ymin) ymin = s->y[j];
    }
  }
  if (ch->has_yref) {
    if (ch->yref > ymax) ymax = ch->yref;
    if (ch->yref < ymin) ymin = ch->yref;
  }
  double xstep = pt_plot_nice_step((xmax > 0 ? xmax : 1) / 8);
  double span = (ymax - ymin) > 0 ? (ymax - ymin) * 1.15 : 1;
  double ystep = pt_plot_nice_step(span / 6);
  if (ch->logx) {
    /* Half an octave beyond the outer points, so their markers clear the frame. */
    if (!isfinite(lxmin)) lxmin = lxmax = 10;
    f.xmin = lxmin - 0.5;
    f.xmax = lxmax + 0.5;
  } else {
    f.xmin = 0;
    f.xmax = ceil((xmax > 0 ? xmax : 1) / xstep - 1e-9) * xstep;
  }
  /* Headroom above the highest point (and below a negative lowest) for
   * the annotations; a range of 0 .. 1 when there is nothing to show. */
  f.ymin = ymin < 0 ? floor((ymin - (ymax - ymin) * 0.15) / ystep + 1e-9) * ystep : 0;
  double top = ymax - ymin > 0 ? ymax + (ymax - ymin) * 0.15 : f.ymin + 1;
  f.ymax = ceil(top / ystep - 1e-9) * ystep;

  o->rect(c, ch->x0, ch->y0, ch->width, ch->height, COL_BG);
  pt_chart_axes(ch, &f, xstep, ystep, o, c);
  double xs[4096], ys[4096];
  for (size_t i = 0; i < ch->ns; i++) {
    struct pt_series s = ch->s[i];
    /* Long timelines are drawn in chunks that overlap by one point. */
    for (size_t off = 0; off < s.n; off += 4095) {
      struct pt_series part = s;
      part.x = s.x + off;
      part.y = s.y + off;
      part.n = s.n - off < 4096 ? s.n - off : 4096;
      pt_chart_series(ch, &part, &f, o, c, xs, ys);
      if (off + 4096 >= s.n) break;
    }
  }
  for (size_t i = 0; i < ch->ns && !ch->no_peaks; i++) pt_chart_peak(ch, i, &f, o, c);
  pt_chart_legend(ch, &f, o, c);
  if (ch->title)
    o->text(c, ch->x0 + ch->width / 2.0, ch->y0 + 12 + PT_PLOT_CHAR_H, ch->title, COL_TEXT, PT_ANCHOR_MIDDLE, 0);
}

void pt_charts_size(const struct pt_chart *ch, size_t n, int *width, int *height) {
  *width = *height = 0;
  for (size_t i = 0; i < n; i++) {
    if (ch[i].x0 + ch[i].width > *width) *width = ch[i].x0 + ch[i].width;
    if (ch[i].y0 + ch[i].height > *height) *height = ch[i].y0 + ch[i].height;
  }
}

int pt_plot_format(const char *path) {
  const char *dot = strrchr(path, '.');
  const char *ext = dot && !strchr(dot, '/') ? dot + 1 : "";
  return !strcasecmp(ext, "svg") ? 1 : !strcasecmp(ext, "png") ? 0 : -1;
}

int pt_plot_parse_size(const char *text, int minw, int minh, int *w, int *h) {
  char tail;
  if (sscanf(text, "%dx%d%c", w, h, &tail) != 2) return -1;
  return *w < minw || *h < minh || *w > 8000 || *h > 8000 ? -1 : 0;
}
