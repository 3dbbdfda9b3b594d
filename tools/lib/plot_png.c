/* PNG output of a chart: a tiny RGB rasteriser (lines, filled rectangles, the
 * 5x7 font at scale 2) and a PNG encoder (one IDAT, filter 0) on zlib. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/font5x7.h"
#include "tools/lib/plot.h"

#if PT_HAVE_ZLIB
#include <zlib.h>
#endif

#define FONT_SCALE 2

struct raster {
  uint8_t *px; /* w*h*3, RGB */
  int w, h;
};

static void put(struct raster *r, int x, int y, uint32_t rgb) {
  if (x < 0 || y < 0 || x >= r->w || y >= r->h) return;
  uint8_t *p = r->px + ((size_t)y * (size_t)r->w + (size_t)x) * 3;
  p[0] = (uint8_t)(rgb >> 16);
  p[1] = (uint8_t)(rgb >> 8);
  p[2] = (uint8_t)rgb;
}

static void fill(struct raster *r, int x0, int y0, int x1, int y1, uint32_t rgb) {
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x1 > r->w) x1 = r->w;
  if (y1 > r->h) y1 = r->h;
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) put(r, x, y, rgb);
}

/* Clamp far-off coordinates so the integer stepping below cannot overflow. */
static int clampi(double v) {
  if (!(v > -1e6)) return -1000000;
  if (v > 1e6) return 1000000;
  return (int)lround(v);
}

static void png_line(void *c, double fx0, double fy0, double fx1, double fy1, uint32_t rgb, int w) {
  struct raster *r = c;
  int x0 = clampi(fx0), y0 = clampi(fy0), x1 = clampi(fx1), y1 = clampi(fy1);
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy, lo = -(w - 1) / 2, hi = w / 2;
  /* Bresenham with a w x w square brush. */
  for (;;) {
    fill(r, x0 + lo, y0 + lo, x0 + hi + 1, y0 + hi + 1, rgb);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

static void png_polyline(void *c, const double *xs, const double *ys, size_t n, uint32_t rgb, int w) {
  for (size_t i = 1; i < n; i++) png_line(c, xs[i - 1], ys[i - 1], xs[i], ys[i], rgb, w);
}

static void png_rect(void *c, double x, double y, double w, double h, uint32_t rgb) {
  fill(c, clampi(x), clampi(y), clampi(x + w), clampi(y + h), rgb);
}

/* Glyph pixel (u, v) of the horizontal text, u rightwards and v downwards from
 * the text's top-left, lands at (X + u, Y + v), or rotated counter-clockwise
 * at (X + v, Y - u). */
static void png_text(void *c, double x, double y, const char *s, uint32_t rgb, int anchor, int vertical) {
  struct raster *r = c;
  int len = (int)strlen(s), tw = len * PT_PLOT_CHAR_W, th = 7 * FONT_SCALE;
  int shift = anchor == PT_ANCHOR_MIDDLE ? tw / 2 : anchor == PT_ANCHOR_END ? tw : 0;
  int X, Y;
  if (!vertical) {
    X = clampi(x) - shift;
    Y = clampi(y) - th;
  } else {
    X = clampi(x) - th;
    Y = clampi(y) + shift;
  }
  for (int i = 0; i < len; i++) {
    unsigned ch = (unsigned char)s[i];
    if (ch < PT_FONT_FIRST || ch > PT_FONT_LAST) ch = '?';
    const uint8_t *g = pt_font5x7[ch - PT_FONT_FIRST];
    for (int row = 0; row < 7; row++)
      for (int col = 0; col < 5; col++) {
        if (!(g[row] & (0x10 >> col))) continue;
        for (int a = 0; a < FONT_SCALE; a++)
          for (int b = 0; b < FONT_SCALE; b++) {
            int u = i * PT_PLOT_CHAR_W + col * FONT_SCALE + a, v = row * FONT_SCALE + b;
            if (!vertical) put(r, X + u, Y + v, rgb);
            else put(r, X + v, Y - u, rgb);
          }
      }
  }
}

static const struct pt_canvas_ops png_ops = {png_line, png_polyline, png_rect, png_text};

#if PT_HAVE_ZLIB
static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* length, type, data, CRC over type and data. */
static int png_chunk(FILE *f, const char *type, const uint8_t *data, size_t len) {
  uint8_t hdr[8], crc[4];
  be32(hdr, (uint32_t)len);
  memcpy(hdr + 4, type, 4);
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, (const Bytef *)type, 4);
  if (len) c = crc32(c, data, (uInt)len);
  be32(crc, (uint32_t)c);
  return fwrite(hdr, 1, 8, f) == 8 && (len == 0 || fwrite(data, 1, len, f) == len) &&
                 fwrite(crc, 1, 4, f) == 4
             ? 0
             : -1;
}
#endif

int pt_chart_write_png(const struct pt_chart *ch, const char *path, char *why, size_t whylen) {
  return pt_charts_write_png(ch, 1, path, why, whylen);
}

int pt_charts_write_png(const struct pt_chart *ch, size_t n, const char *path, char *why, size_t whylen) {
#if !PT_HAVE_ZLIB
  (void)ch;
  (void)n;
  (void)path;
  (void)png_ops;
  snprintf(why, whylen, "this ponytail was built without zlib: PNG output unavailable, write .svg");
  return -1;
#else
  int width, height;
  pt_charts_size(ch, n, &width, &height);
  struct raster r = {calloc((size_t)width * (size_t)height, 3), width, height};
  size_t stride = (size_t)width * 3 + 1, rawlen = stride * (size_t)height;
  uint8_t *raw = malloc(rawlen);
  uLongf zlen = compressBound((uLong)rawlen);
  uint8_t *z = malloc(zlen);
  int rc = -1;
  FILE *f = NULL;
  if (!r.px || !raw || !z) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) pt_chart_draw(&ch[i], &png_ops, &r);
  for (int y = 0; y < height; y++) {
    raw[(size_t)y * stride] = 0; /* filter type None */
    memcpy(raw + (size_t)y * stride + 1, r.px + (size_t)y * (size_t)width * 3, (size_t)width * 3);
  }
  if (compress2(z, &zlen, raw, (uLong)rawlen, 6) != Z_OK) {
    snprintf(why, whylen, "zlib compression failed");
    goto out;
  }
  if (!(f = fopen(path, "wb"))) {
    snprintf(why, whylen, "cannot write %s: %s", path, strerror(errno));
    goto out;
  }
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t ihdr[13];
  be32(ihdr, (uint32_t)width);
  be32(ihdr + 4, (uint32_t)height);
  ihdr[8] = 8;  /* bit depth */
  ihdr[9] = 2;  /* colour type: RGB */
  ihdr[10] = 0; /* deflate */
  ihdr[11] = 0; /* adaptive filtering */
  ihdr[12] = 0; /* no interlace */
  if (fwrite(sig, 1, 8, f) != 8 || png_chunk(f, "IHDR", ihdr, 13) || png_chunk(f, "IDAT", z, zlen) ||
      png_chunk(f, "IEND", NULL, 0)) {
    snprintf(why, whylen, "error writing %s", path);
    goto out;
  }
  rc = 0;
out:
  if (f && fclose(f) != 0 && rc == 0) {
    snprintf(why, whylen, "error writing %s", path);
    rc = -1;
  }
  free(r.px);
  free(raw);
  free(z);
  return rc;
#endif
}
