/* A small line chart drawn once against an abstract canvas, so the SVG writer
 * and the PNG rasteriser share the layout: axes with ticks, labels, legend,
 * and each series' peak marked and annotated (memory over time), or, for a
 * sweep, a log2 x axis, a marker at every point and a reference line; several
 * charts can share one image as panels. */
#ifndef PT_TOOLS_PLOT_H
#define PT_TOOLS_PLOT_H
#include <stddef.h>
#include <stdint.h>

enum { PT_ANCHOR_START, PT_ANCHOR_MIDDLE, PT_ANCHOR_END };

/* Coordinates are pixels from the top-left corner. */
struct pt_canvas_ops {
  void (*line)(void *c, double x0, double y0, double x1, double y1, uint32_t rgb, int width);
  void (*polyline)(void *c, const double *xs, const double *ys, size_t n, uint32_t rgb, int width);
  void (*rect)(void *c, double x, double y, double w, double h, uint32_t rgb); /* filled */
  /* Text with its baseline-ish bottom at y; vertical = rotated 90° counter-clockwise. */
  void (*text)(void *c, double x, double y, const char *s, uint32_t rgb, int anchor, int vertical);
};

/* Width and height of one character cell of the canvases' font, in pixels
 * (5x7 glyphs drawn at scale 2 in a 6x8 cell). The SVG uses a monospace font
 * of the same advance so both layouts agree. */
#define PT_PLOT_CHAR_W 12
#define PT_PLOT_CHAR_H 16

#define PT_PLOT_MAX_SERIES 4

struct pt_series {
  const char *name;
  const double *x, *y; /* n points; y may hold NAN for a missing sample (skipped) */
  size_t n;
  uint32_t rgb;
};

struct pt_chart {
  const char *title, *xlabel, *ylabel, *yunit; /* yunit for the peak annotation */
  struct pt_series s[PT_PLOT_MAX_SERIES];
  size_t ns;
  int width, height;
  /* Optional (all 0 for a timeline): */
  int x0, y0;      /* top-left corner of this chart on a shared image (panels) */
  int logx;        /* log2 x axis, ticks at powers of two (512, 1k, 2k, ...); x > 0 */
  int markers;     /* a square at every point */
  int no_peaks;    /* no peak markers or annotations */
  int has_yref;    /* a horizontal reference line at yref, labelled yref_label */
  double yref;
  const char *yref_label;
};

/* 1, 2 or 5 times a power of ten, >= raw. */
double pt_plot_nice_step(double raw);
/* Index of the largest finite y of s, or (size_t)-1 when it has none. */
size_t pt_series_peak(const struct pt_series *s);
void pt_chart_draw(const struct pt_chart *ch, const struct pt_canvas_ops *ops, void *canvas);

/* Writers. Return 0, or -1 with a message in why. The _charts forms draw n
 * charts on one image that spans them all (each at its x0, y0). */
int pt_chart_write_svg(const struct pt_chart *ch, const char *path, char *why, size_t whylen);
int pt_chart_write_png(const struct pt_chart *ch, const char *path, char *why, size_t whylen);
int pt_charts_write_svg(const struct pt_chart *ch, size_t n, const char *path, char *why, size_t whylen);
int pt_charts_write_png(const struct pt_chart *ch, size_t n, const char *path, char *why, size_t whylen);
/* The image size that holds n charts. */
void pt_charts_size(const struct pt_chart *ch, size_t n, int *width, int *height);

/* For the commands that write a chart (timeline, plot-sweep): the format an
 * output path names by its extension, case-insensitive: 1 SVG, 0 PNG, -1
 * neither; and a --size WxH within [minw, 8000] x [minh, 8000] (0, or -1 with
 * *w and *h unspecified). */
int pt_plot_format(const char *path);
int pt_plot_parse_size(const char *text, int minw, int minh, int *w, int *h);

#endif
