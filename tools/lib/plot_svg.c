/* SVG output of a chart: each canvas operation becomes one element. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tools/lib/plot.h"

static void svg_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void svg_line(void *c, double x0, double y0, double x1, double y1, uint32_t rgb, int w) {
  fprintf((FILE *)c,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#%06x\" stroke-width=\"%d\"/>\n",
          x0, y0, x1, y1, (unsigned)rgb, w);
}

static void svg_polyline(void *c, const double *xs, const double *ys, size_t n, uint32_t rgb, int w) {
  FILE *f = c;
  fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"#%06x\" stroke-width=\"%d\" "
             "stroke-linejoin=\"round\" points=\"", (unsigned)rgb, w);
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", xs[i], ys[i]);
  fputs("\"/>\n", f);
}

static void svg_rect(void *c, double x, double y, double w, double h, uint32_t rgb) {
  fprintf((FILE *)c, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#%06x\"/>\n",
          x, y, w, h, (unsigned)rgb);
}

static void svg_text(void *c, double x, double y, const char *s, uint32_t rgb, int anchor, int vertical) {
  FILE *f = c;
  static const char *const anchors[] = {"start", "middle", "end"};
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#%06x\" text-anchor=\"%s\"", x, y, (unsigned)rgb,
          anchors[anchor < 0 || anchor > 2 ? 0 : anchor]);
  if (vertical) fprintf(f, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
  fputc('>', f);
  svg_escape(f, s);
  fputs("</text>\n", f);
}

static const struct pt_canvas_ops svg_ops = {svg_line, svg_polyline, svg_rect, svg_text};

int pt_charts_write_svg(const struct pt_chart *ch, size_t n, const char *path, char *why, size_t whylen) {
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(why, whylen, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  int width, height;
  pt_charts_size(ch, n, &width, &height);
  /* Monospace at a 20px size advances about 12px a character, the layout's cell. */
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" font-size=\"20\">\n",
          width, height, width, height);
  for (size_t i = 0; i < n; i++) pt_chart_draw(&ch[i], &svg_ops, f);
  fputs("</svg>\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    snprintf(why, whylen, "error writing %s", path);
    return -1;
  }
  return 0;
}

int pt_chart_write_svg(const struct pt_chart *ch, const char *path, char *why, size_t whylen) {
  return pt_charts_write_svg(ch, 1, path, why, whylen);
}
