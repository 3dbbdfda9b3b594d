/* Strict JSON reader: recursive descent into a tree of nodes. See json.h. */
#include "tools/lib/json.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pt_json {
  enum pt_json_type type;
  int boolean;
  double num;
  int exact;        /* 1: the number is an integer held exactly in u (neg says its sign) */
  int neg;
  uint64_t mag;     /* magnitude of the exact integer */
  char *str;        /* NUL-terminated; slen bytes (may hold NULs) */
  size_t slen;
  size_t n, cap;    /* array/object members */
  struct pt_json **items;
  char **keys;      /* objects only */
};

struct parser {
  const char *p, *end, *start;
  char *err;
  size_t errlen;
  int failed;
};

static void fail(struct parser *ps, const char *at, const char *fmt, ...) {
  if (ps->failed) return;
  ps->failed = 1;
  if (!ps->err || !ps->errlen) return;
  /* Line and column of the offending byte, both 1-based; the column counts bytes. */
  size_t line = 1, col = 1;
  for (const char *q = ps->start; q < at && q < ps->end; q++) {
    if (*q == '\n') { line++; col = 1; } else col++;
  }
  int n = snprintf(ps->err, ps->errlen, "line %zu col %zu: ", line, col);
  if (n < 0 || (size_t)n >= ps->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static void skip_ws(struct parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static struct pt_json *node_new(struct parser *ps, enum pt_json_type t) {
  struct pt_json *v = calloc(1, sizeof *v);
  if (!v) fail(ps, ps->p, "out of memory");
  else v->type = t;
  return v;
}

void pt_json_free(struct pt_json *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    pt_json_free(v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

/* ---- strings ---- */

struct buf { char *d; size_t n, cap; };

static int buf_put(struct buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 32;
    while (cap < b->n + n + 1) cap *= 2;
    char *d = realloc(b->d, cap);
    if (!d) return -1;
    b->d = d;
    b->cap = cap;
  }
  memcpy(b->d + b->n, s, n);
  b->n += n;
  b->d[b->n] = 0;
  return 0;
}

static size_t utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the valid UTF-8 sequence at p (shortest form, no surrogates,
 * at most U+10FFFF), or 0 if invalid. */
static size_t utf8_valid(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  uint32_t cp, min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if ((size_t)(end - p) < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

static int hex4(struct parser *ps, uint32_t *out) {
  if (ps->end - ps->p < 4) { fail(ps, ps->p, "truncated \\u escape"); return -1; }
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = ps->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else { fail(ps, ps->p + i, "bad hex digit in \\u escape"); return -1; }
  }
  ps->p += 4;
  *out = v;
  return 0;
}

/* Parses a string literal at ps->p (the opening quote); returns a malloc'd
 * NUL-terminated copy with its length in *len, or NULL (error set). */
static char *parse_string(struct parser *ps, size_t *len) {
  struct buf b = {0};
  const char *open = ps->p;
  ps->p++;
  if (buf_put(&b, "", 0)) goto oom;
  for (;;) {
    if (ps->p >= ps->end) { fail(ps, open, "unterminated string"); goto err; }
    unsigned char c = (unsigned char)*ps->p;
    if (c == '"') { ps->p++; break; }
    if (c < 0x20) { fail(ps, ps->p, "control character in string"); goto err; }
    if (c == '\\') {
      const char *esc = ps->p;
      ps->p++;
      if (ps->p >= ps->end) { fail(ps, esc, "truncated escape"); goto err; }
      char e = *ps->p++, out[4];
      size_t on = 1;
      switch (e) {
      case '"': out[0] = '"'; break;
      case '\\': out[0] = '\\'; break;
      case '/': out[0] = '/'; break;
      case 'b': out[0] = '\b'; break;
      case 'f': out[0] = '\f'; break;
      case 'n': out[0] = '\n'; break;
      case 'r': out[0] = '\r'; break;
      case 't': out[0] = '\t'; break;
      case 'u': {
        uint32_t cp, lo;
        if (hex4(ps, &cp)) goto err;
        if (cp >= 0xDC00 && cp <= 0xDFFF) { fail(ps, esc, "lone low surrogate"); goto err; }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
            fail(ps, esc, "high surrogate without a low surrogate");
            goto err;
          }
          ps->p += 2;
          if (hex4(ps, &lo)) goto err;
          if (lo < 0xDC00 || lo > 0xDFFF) { fail(ps, esc, "high surrogate without a low surrogate"); goto err; }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        on = utf8_encode(cp, out);
        break;
      }
      default: fail(ps, esc, "bad escape '\\%c'", (e >= 0x20 && e < 0x7f) ? e : '?'); goto err;
      }
      if (buf_put(&b, out, on)) goto oom;
      continue;
    }
    size_t n = utf8_valid((const unsigned char *)ps->p, (const unsigned char *)ps->end);
    if (!n) { fail(ps, ps->p, "invalid UTF-8 in string"); goto err; }
    if (buf_put(&b, ps->p, n)) goto oom;
    ps->p += n;
  }
  *len = b.n;
  return b.d;
oom:
  fail(ps, ps->p, "out of memory");
err:
  free(b.d);
  return NULL;
}

/* ---- numbers ---- */

/* Sets v->exact/neg/mag when the literal is an integer that fits in 64 bits
 * of magnitude: digits = int part + frac part, scaled by 10^(exp - fraclen). */
static void exact_integer(struct pt_json *v, int neg, const char *ip, size_t il, const char *fp,
                          size_t fl, long exp10) {
  char digits[64];
  size_t nd = 0;
  const char *parts[2] = {ip, fp};
  size_t lens[2] = {il, fl};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < lens[k]; i++) {
      if (nd == 0 && parts[k][i] == '0') continue; /* leading zeros */
      if (nd == sizeof digits) return;              /* far beyond 2^64 */
      digits[nd++] = parts[k][i];
    }
  long e = exp10 - (long)fl;
  uint64_t m = 0;
  if (nd) {
    while (e < 0 && nd && digits[nd - 1] == '0') { nd--; e++; }
    if (e < 0) return;                               /* has a fractional part */
    if (e > 20) return;                              /* > 2^64 */
    for (size_t i = 0; i < nd; i++)
      if (__builtin_mul_overflow(m, 10, &m) || __builtin_add_overflow(m, (uint64_t)(digits[i] - '0'), &m))
        return;
    for (long i = 0; i < e; i++)
      if (__builtin_mul_overflow(m, 10, &m)) return;
  }
  v->exact = 1;
  v->neg = neg && m != 0;
  v->mag = m;
}

static struct pt_json *parse_number(struct parser *ps) {
  const char *s = ps->p, *q = s;
  int neg = 0;
  if (q < ps->end && *q == '-') { neg = 1; q++; }
  const char *ip = q;
  if (q >= ps->end || *q < '0' || *q > '9') { fail(ps, q, "bad number"); return NULL; }
  if (*q == '0') {
    q++;
    if (q < ps->end && *q >= '0' && *q <= '9') { fail(ps, q, "leading zero in number"); return NULL; }
  } else {
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  size_t il = (size_t)(q - ip);
  const char *fp = q;
  size_t fl = 0;
  if (q < ps->end && *q == '.') {
    q++;
    fp = q;
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
    fl = (size_t)(q - fp);
    if (!fl) { fail(ps, q, "digit expected after '.'"); return NULL; }
  }
  long exp10 = 0;
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    q++;
    int eneg = 0;
    if (q < ps->end && (*q == '+' || *q == '-')) { eneg = *q == '-'; q++; }
    if (q >= ps->end || *q < '0' || *q > '9') { fail(ps, q, "digit expected in exponent"); return NULL; }
    while (q < ps->end && *q >= '0' && *q <= '9') {
      if (exp10 < 100000) exp10 = exp10 * 10 + (*q - '0'); /* saturate: only exactness cares */
      q++;
    }
    if (eneg) exp10 = -exp10;
  }
  struct pt_json *v = node_new(ps, PT_JSON_NUM);
  if (!v) return NULL;
  /* strtod needs a NUL-terminated copy; the grammar above already matched,
   * so this only converts. (The CLI never calls setlocale: '.' is the radix.) */
  size_t n = (size_t)(q - s);
  char small[128], *tmp = n < sizeof small ? small : malloc(n + 1);
  if (!tmp) { free(v); fail(ps, s, "out of memory"); return NULL; }
  memcpy(tmp, s, n);
  tmp[n] = 0;
  v->num = strtod(tmp, NULL);
  if (tmp != small) free(tmp);
  exact_integer(v, neg, ip, il, fp, fl, exp10);
  ps->p = q;
  return v;
}

/* ---- values ---- */

static struct pt_json *parse_value(struct parser *ps, int depth);

static int push(struct parser *ps, struct pt_json *c, struct pt_json *item, char *key) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 4;
    struct pt_json **items = realloc(c->items, cap * sizeof *items);
    if (!items) goto oom;
    c->items = items;
    if (c->type == PT_JSON_OBJ) {
      char **keys = realloc(c->keys, cap * sizeof *keys);
      if (!keys) goto oom;
      c->keys = keys;
    }
    c->cap = cap;
  }
  c->items[c->n] = item;
  if (c->type == PT_JSON_OBJ) c->keys[c->n] = key;
  c->n++;
  return 0;
oom:
  fail(ps, ps->p, "out of memory");
  return -1;
}

static struct pt_json *parse_container(struct parser *ps, int depth, int obj) {
  const char *open = ps->p;
  char close = obj ? '}' : ']';
  if (depth >= PT_JSON_MAX_DEPTH) { fail(ps, open, "nesting deeper than %d", PT_JSON_MAX_DEPTH); return NULL; }
  struct pt_json *c = node_new(ps, obj ? PT_JSON_OBJ : PT_JSON_ARR);
  if (!c) return NULL;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) { ps->p++; return c; }
  for (;;) {
    char *key = NULL;
    skip_ws(ps);
    if (obj) {
      size_t kl;
      if (ps->p >= ps->end || *ps->p != '"') { fail(ps, ps->p, "object key (a string) expected"); goto err; }
      if (!(key = parse_string(ps, &kl))) goto err;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') { free(key); fail(ps, ps->p, "':' expected"); goto err; }
      ps->p++;
    }
    struct pt_json *item = parse_value(ps, depth + 1);
    if (!item || push(ps, c, item, key)) { pt_json_free(item); free(key); goto err; }
    skip_ws(ps);
    if (ps->p >= ps->end) { fail(ps, open, "unterminated %s", obj ? "object" : "array"); goto err; }
    if (*ps->p == close) { ps->p++; return c; }
    if (*ps->p != ',') { fail(ps, ps->p, "',' or '%c' expected", close); goto err; }
    ps->p++;
  }
err:
  pt_json_free(c);
  return NULL;
}

static int literal(struct parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return 0;
  ps->p += n;
  return 1;
}

static struct pt_json *parse_value(struct parser *ps, int depth) {
  skip_ws(ps);
  if (ps->p >= ps->end) { fail(ps, ps->p, "value expected, got end of input"); return NULL; }
  char c = *ps->p;
  struct pt_json *v;
  switch (c) {
  case '{': return parse_container(ps, depth, 1);
  case '[': return parse_container(ps, depth, 0);
  case '"': {
    size_t len;
    char *s = parse_string(ps, &len);
    if (!s) return NULL;
    if (!(v = node_new(ps, PT_JSON_STR))) { free(s); return NULL; }
    v->str = s;
    v->slen = len;
    return v;
  }
  case 't': case 'f':
    if (literal(ps, "true") || literal(ps, "false")) {
      if ((v = node_new(ps, PT_JSON_BOOL))) v->boolean = c == 't';
      return v;
    }
    break;
  case 'n':
    if (literal(ps, "null")) return node_new(ps, PT_JSON_NULL);
    break;
  default:
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps);
  }
  if (c >= 0x20 && c < 0x7f) fail(ps, ps->p, "unexpected '%c'", c);
  else fail(ps, ps->p, "unexpected byte 0x%02x", (unsigned char)c);
  return NULL;
}

struct pt_json *pt_json_parse(const char *text, size_t len, char *err, size_t errlen) {
  struct parser ps = {text, text + len, text, err, errlen, 0};
  if (err && errlen) err[0] = 0;
  if (!text) { ps.p = ps.end = ps.start = ""; }
  struct pt_json *v = parse_value(&ps, 0);
  if (!v) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) {
    fail(&ps, ps.p, "trailing data after the value");
    pt_json_free(v);
    return NULL;
  }
  return v;
}

struct pt_json *pt_json_parse_file(const char *path, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct buf b = {0};
  char chunk[65536];
  size_t n;
  int oom = 0;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (buf_put(&b, chunk, n)) { oom = 1; break; }
  int ioerr = ferror(f);
  fclose(f);
  if (oom || ioerr) {
    if (err && errlen) snprintf(err, errlen, "%s: %s", path, oom ? "out of memory" : "read error");
    free(b.d);
    return NULL;
  }
  char e[200];
  struct pt_json *v = pt_json_parse(b.d ? b.d : "", b.n, e, sizeof e);
  if (!v && err && errlen) snprintf(err, errlen, "%s: %s", path, e);
  free(b.d);
  return v;
}

/* ---- getters ---- */

enum pt_json_type pt_json_type(const struct pt_json *v) { return v ? v->type : PT_JSON_NULL; }

const struct pt_json *pt_json_get(const struct pt_json *obj, const char *key) {
  if (!obj || obj->type != PT_JSON_OBJ || !key) return NULL;
  for (size_t i = obj->n; i-- > 0;)
    if (!strcmp(obj->keys[i], key)) return obj->items[i];
  return NULL;
}

size_t pt_json_len(const struct pt_json *v) {
  return v && (v->type == PT_JSON_ARR || v->type == PT_JSON_OBJ) ? v->n : 0;
}

const struct pt_json *pt_json_at(const struct pt_json *arr, size_t i) {
  return i < pt_json_len(arr) ? arr->items[i] : NULL;
}

const char *pt_json_key_at(const struct pt_json *obj, size_t i) {
  return obj && obj->type == PT_JSON_OBJ && i < obj->n ? obj->keys[i] : NULL;
}

double pt_json_num(const struct pt_json *v, double dflt) {
  return v && v->type == PT_JSON_NUM ? v->num : dflt;
}

int pt_json_u64(const struct pt_json *v, uint64_t *out) {
  if (!v || v->type != PT_JSON_NUM || !v->exact || v->neg) return -1;
  if (out) *out = v->mag;
  return 0;
}

int pt_json_i64(const struct pt_json *v, int64_t *out) {
  if (!v || v->type != PT_JSON_NUM || !v->exact) return -1;
  if (v->neg) {
    if (v->mag > (uint64_t)INT64_MAX + 1) return -1;
    if (out) *out = v->mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v->mag;
  } else {
    if (v->mag > (uint64_t)INT64_MAX) return -1;
    if (out) *out = (int64_t)v->mag;
  }
  return 0;
}

const char *pt_json_str(const struct pt_json *v) {
  return v && v->type == PT_JSON_STR ? v->str : NULL;
}

size_t pt_json_str_len(const struct pt_json *v) {
  return v && v->type == PT_JSON_STR ? v->slen : 0;
}

int pt_json_bool(const struct pt_json *v, int dflt) {
  return v && v->type == PT_JSON_BOOL ? v->boolean : dflt;
}
