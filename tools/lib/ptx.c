/* .entry functions of PTX text and their parameter layout, from the .param
 * declarations: each parameter at its alignment (.align N, else its element
 * size), arrays ([N]) of N elements. Comments are skipped. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/kernels.h"

/* Element size of a PTX type token (.u64 .b8 .f16x2 .pred ...), 0 if none. */
static unsigned type_size(const char *t, size_t n) {
  if (n == 5 && !memcmp(t, ".pred", 5)) return 1;
  if (n < 3 || t[0] != '.' || !strchr("usbf", t[1])) return 0;
  unsigned bits = 0;
  size_t i = 2;
  for (; i < n && isdigit((unsigned char)t[i]); i++) bits = bits * 10 + (unsigned)(t[i] - '0');
  if (i == 2 || bits > 128) return 0;
  if (i < n) {
    if (n - i == 2 && t[i] == 'x' && isdigit((unsigned char)t[i + 1])) bits *= (unsigned)(t[i + 1] - '0');
    else return 0;
  }
  return bits / 8;
}

/* Decimal number at p, not reading at or past end (the text need not be
 * NUL-terminated). Saturates. */
static uint64_t num_at(const char *p, const char *end) {
  uint64_t v = 0;
  for (; p < end && isdigit((unsigned char)*p); p++) v = v < (1ull << 40) ? v * 10 + (uint64_t)(*p - '0') : v;
  return v;
}

/* Parses "(.param ..., .param ...)" starting at p (after '('), fills k. */
static const char *parse_params(const char *p, const char *end, struct pt_fatbin_kernel *k) {
  uint64_t off = 0;
  k->params_known = 1;
  while (p < end && *p != ')') {
    const char *q = p;
    while (q < end && *q != ',' && *q != ')') q++;
    /* tokens of one declaration in [p, q) */
    unsigned elem = 0, align = 0;
    uint64_t count = 1;
    int is_param = 0;
    const char *t = p;
    while (t < q) {
      while (t < q && isspace((unsigned char)*t)) t++;
      const char *te = t;
      while (te < q && !isspace((unsigned char)*te)) te++;
      size_t n = (size_t)(te - t);
      if (!n) break;
      if (n == 6 && !memcmp(t, ".param", 6)) is_param = 1;
      else if (n == 6 && !memcmp(t, ".align", 6)) {
        const char *v = te;
        while (v < q && isspace((unsigned char)*v)) v++;
        align = (unsigned)(num_at(v, q) & 0xffff);
      } else if (type_size(t, n)) elem = type_size(t, n);
      else {
        const char *br = memchr(t, '[', n);
        if (br) count = num_at(br + 1, te);
      }
      t = te;
    }
    if (is_param && elem) {
      if (!align) align = elem;
      if (align & (align - 1)) align = elem; /* not a power of two: ignore */
      off = (off + align - 1) & ~(uint64_t)(align - 1);
      struct pt_kparam *np = realloc(k->params, (k->nparams + 1) * sizeof *np);
      if (!np) return NULL;
      k->params = np;
      uint64_t size = elem * (count ? count : 1);
      np[k->nparams] = (struct pt_kparam){(uint32_t)k->nparams, (uint32_t)off, (uint32_t)size};
      k->nparams++;
      off += size;
    } else if (q > p) {
      k->params_known = 0; /* something we do not understand */
    }
    p = q < end && *q == ',' ? q + 1 : q;
  }
  k->param_bytes = off;
  return p;
}

int pt_ptx_list(const char *text, size_t len, unsigned arch, struct pt_kernel_list *l) {
  const char *p = text, *end = text + len;
  while (p < end) {
    if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
      while (p < end && *p != '\n') p++;
      continue;
    }
    if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
      p += 2;
      while (end - p >= 2 && !(p[0] == '*' && p[1] == '/')) p++;
      p = end - p >= 2 ? p + 2 : end;
      continue;
    }
    if (end - p < 7 || memcmp(p, ".entry", 6) || !isspace((unsigned char)p[6]) ||
        (p > text && !isspace((unsigned char)p[-1]))) {
      p++;
      continue;
    }
    p += 6;
    while (p < end && isspace((unsigned char)*p)) p++;
    const char *ns = p;
    while (p < end && (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '.')) p++;
    if (p == ns) continue;
    struct pt_fatbin_kernel k = {0};
    snprintf(k.arch, sizeof k.arch, "compute_%u", arch);
    k.ptx = 1;
    if (!(k.name = strndup(ns, (size_t)(p - ns)))) return -1;
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p < end && *p == '(') {
      const char *r = parse_params(p + 1, end, &k);
      if (!r) { free(k.name); free(k.params); return -1; }
      p = r;
    } else {
      k.params_known = 1; /* no parameter list: none */
    }
    if (pt_kernel_list_add(l, &k)) return -1;
  }
  return 0;
}
