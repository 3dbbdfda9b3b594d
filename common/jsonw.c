#include "common/jsonw.h"

#include <math.h>
#include <inttypes.h>
#include <stdlib.h>

void pt_jw_init(struct pt_jw *w, FILE *f, bool pretty) {
  w->f = f;
  w->depth = 0;
  w->pretty = pretty;
  for (int i = 0; i < PT_JSONW_DEPTH; i++) w->need_comma[i] = false;
}

void pt_jw_escape(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}

/* Comma, newline/indent and key before a value at the current depth. */
static void pt_jw_prefix(struct pt_jw *w, const char *key) {
  int d = w->depth < PT_JSONW_DEPTH ? w->depth : PT_JSONW_DEPTH - 1;
  if (w->need_comma[d]) fputc(',', w->f);
  w->need_comma[d] = true;
  if (w->pretty && w->depth > 0) {
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
  }
  if (key) {
    pt_jw_escape(w->f, key);
    fputs(w->pretty ? ": " : ":", w->f);
  }
}

static void pt_jw_open(struct pt_jw *w, const char *key, char c) {
  pt_jw_prefix(w, key);
  fputc(c, w->f);
  if (w->depth < PT_JSONW_DEPTH - 1) w->depth++;
  w->need_comma[w->depth] = false;
}

static void pt_jw_close(struct pt_jw *w, char c) {
  bool had = w->need_comma[w->depth];
  if (w->depth > 0) w->depth--;
  if (w->pretty && had) {
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
  }
  fputc(c, w->f);
}

void pt_jw_obj_begin(struct pt_jw *w, const char *key) { pt_jw_open(w, key, '{'); }
void pt_jw_obj_end(struct pt_jw *w) { pt_jw_close(w, '}'); }
void pt_jw_arr_begin(struct pt_jw *w, const char *key) { pt_jw_open(w, key, '['); }
void pt_jw_arr_end(struct pt_jw *w) { pt_jw_close(w, ']'); }

void pt_jw_str(struct pt_jw *w, const char *key, const char *val) {
  pt_jw_prefix(w, key);
  if (val) pt_jw_escape(w->f, val);
  else fputs("null", w->f);
}

void pt_jw_u64(struct pt_jw *w, const char *key, uint64_t val) {
  pt_jw_prefix(w, key);
  fprintf(w->f, "%" PRIu64, val);
}

void pt_jw_i64(struct pt_jw *w, const char *key, int64_t val) {
  pt_jw_prefix(w, key);
  fprintf(w->f, "%" PRId64, val);
}

void pt_jw_dbl(struct pt_jw *w, const char *key, double val) {
  pt_jw_prefix(w, key);
  if (!isfinite(val)) {
    fputs("null", w->f);
    return;
  }
  /* Shortest of %.15g / %.17g that reads back exactly: 0.1 stays 0.1. */
  char buf[40];
  snprintf(buf, sizeof buf, "%.15g", val);
  if (strtod(buf, NULL) != val) snprintf(buf, sizeof buf, "%.17g", val);
  fputs(buf, w->f);
}

void pt_jw_bool(struct pt_jw *w, const char *key, bool val) {
  pt_jw_prefix(w, key);
  fputs(val ? "true" : "false", w->f);
}

void pt_jw_finish(struct pt_jw *w) {
  fputc('\n', w->f);
  fflush(w->f);
}
