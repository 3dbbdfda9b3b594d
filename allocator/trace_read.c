/* Trace reader: see trace.h. zlib's gz* functions read gzip and, as is,
 * plain text; a truncated gzip stream shows up as an error at its end. */
#include "allocator/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct pt_trace_reader {
  gzFile f;
  uint64_t line;
};

int pt_trace_reader_open(const char *path, struct pt_trace_reader **out, char *err, size_t errlen) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open: %s", errno ? strerror(errno) : "out of memory");
    return -1;
  }
  struct pt_trace_reader *r = calloc(1, sizeof *r);
  if (!r) {
    gzclose(f);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  r->f = f;
  *out = r;
  return 0;
}

uint64_t pt_trace_reader_line(const struct pt_trace_reader *r) { return r->line; }

void pt_trace_reader_close(struct pt_trace_reader *r) {
  if (!r) return;
  gzclose(r->f);
  free(r);
}

/* A pointer as %p writes it: "(nil)" or a hex number with 0x. */
static int parse_ptr(const char *tok, uint64_t *out) {
  if (!strcmp(tok, "(nil)")) {
    *out = 0;
    return 0;
  }
  if (tok[0] != '0' || (tok[1] != 'x' && tok[1] != 'X') || !tok[2]) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(tok + 2, &end, 16);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

static int parse_dec(const char *tok, uint64_t *out) {
  if (*tok < '0' || *tok > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(tok, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

int pt_trace_next(struct pt_trace_reader *r, struct pt_trace_event *ev, char *err, size_t errlen) {
  char buf[512];
  for (;;) {
    if (!gzgets(r->f, buf, sizeof buf)) {
      int zerr;
      const char *msg = gzerror(r->f, &zerr);
      if (zerr != Z_OK && zerr != Z_STREAM_END) {
        r->line++;
        snprintf(err, errlen, "read error: %s", zerr == Z_BUF_ERROR ? "truncated gzip data" : msg);
        return -1;
      }
      return 0;
    }
    r->line++;
    size_t len = strlen(buf);
    if (!len || buf[len - 1] != '\n') {
      /* A last line without its newline: a cut gzip stream ends like this,
       * and must be reported as such rather than as a short line. */
      int zerr;
      const char *msg = gzerror(r->f, &zerr);
      if (zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(err, errlen, "read error: %s", zerr == Z_BUF_ERROR ? "truncated gzip data" : msg);
        return -1;
      }
    }
    if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
      snprintf(err, errlen, "line too long");
      return -1;
    }
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = 0;
    if (memchr(buf, 0, len)) {
      snprintf(err, errlen, "NUL byte in line");
      return -1;
    }
    const char *p = buf;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') continue;
    char *tok[6];
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " \t", &save); t && n < 6; t = strtok_r(NULL, " \t", &save))
      tok[n++] = t;
    *ev = (struct pt_trace_event){0};
    const char *k = tok[0];
    if (k[1] || !strchr("ARPQ", k[0])) {
      snprintf(err, errlen, "unknown event '%.20s'", k);
      return -1;
    }
    ev->kind = k[0];
    bool sized = ev->kind == 'A' || ev->kind == 'P';
    int want = sized ? 4 : 3;
    if (n != want) {
      snprintf(err, errlen, "'%c' needs %d fields, got %d", ev->kind, want - 1, n - 1);
      return -1;
    }
    int i = 1;
    if (sized && parse_dec(tok[i++], &ev->bytes)) {
      snprintf(err, errlen, "bad size '%.40s'", tok[1]);
      return -1;
    }
    if (parse_ptr(tok[i], &ev->ptr)) {
      snprintf(err, errlen, "bad pointer '%.40s'", tok[i]);
      return -1;
    }
    if (parse_ptr(tok[i + 1], &ev->stream)) {
      snprintf(err, errlen, "bad stream '%.40s'", tok[i + 1]);
      return -1;
    }
    return 1;
  }
}
