/* Aggregation of CUPTI kernel records and shim stats into `ponytail trace`'s
 * report (see trace_report.h for the file format). */
#include "tools/lib/trace_report.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/jsonw.h"
#include "tools/lib/json.h"

/* ---- name -> aggregate, open addressing (FNV-1a), grown at half load ---- */

struct pt_kmap {
  struct pt_trace_kernel *slot;
  size_t cap, n;
};

static uint64_t pt_fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int pt_kmap_grow(struct pt_kmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 256;
  struct pt_trace_kernel *s = calloc(cap, sizeof *s);
  if (!s) return -1;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slot[i].name) continue;
    size_t j = pt_fnv(m->slot[i].name) & (cap - 1);
    while (s[j].name) j = (j + 1) & (cap - 1);
    s[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = s;
  m->cap = cap;
  return 0;
}

static struct pt_trace_kernel *pt_kmap_get(struct pt_kmap *m, const char *name) {
  if ((m->n + 1) * 2 > m->cap && pt_kmap_grow(m) != 0) return NULL;
  size_t j = pt_fnv(name) & (m->cap - 1);
  while (m->slot[j].name) {
    if (!strcmp(m->slot[j].name, name)) return &m->slot[j];
    j = (j + 1) & (m->cap - 1);
  }
  if (!(m->slot[j].name = strdup(name))) return NULL;
  m->n++;
  return &m->slot[j];
}

/* ---- intervals ---- */

struct pt_ival {
  uint64_t a, b;
};

static int pt_ival_cmp(const void *x, const void *y) {
  const struct pt_ival *p = x, *q = y;
  return p->a < q->a ? -1 : p->a > q->a;
}

/* Total length of the union of the intervals (sorts them). */
static uint64_t pt_ival_union(struct pt_ival *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, pt_ival_cmp);
  uint64_t total = 0, a = v[0].a, b = v[0].b;
  for (size_t i = 1; i < n; i++) {
    if (v[i].a > b) {
      total += b - a;
      a = v[i].a;
      b = v[i].b;
    } else if (v[i].b > b) {
      b = v[i].b;
    }
  }
  return total + (b - a);
}

/* ---- classification ---- */

int pt_trace_is_attention(const char *name) {
  static const char *const pats[] = {"flash", "fmha", "sdpa", "attention", "attn"};
  for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
    if (strcasestr(name, pats[i])) return 1;
  return 0;
}

int pt_trace_is_cat(const char *name) { return strstr(name, "CatArrayBatchedCopy") != NULL; }

/* Appends up to n bytes of s to out (bounded by len). */
static void pt_append(char *out, size_t len, const char *s, size_t n) {
  size_t used = strlen(out);
  if (used + 1 >= len) return;
  if (n > len - 1 - used) n = len - 1 - used;
  memcpy(out + used, s, n);
  out[used + n] = '\0';
}

/* _ZN<len><id>...<len><id>E... or _Z<len><id>...: the qualified name. */
static int pt_demangle_head(const char *m, char *out, size_t len) {
  const char *p = m + 2;
  int nested = *p == 'N';
  if (nested) {
    p++;
    while (*p == 'r' || *p == 'V' || *p == 'K' || *p == 'R' || *p == 'O') p++;
  }
  out[0] = '\0';
  int parts = 0;
  for (;;) {
    if (p[0] == 'S' && p[1] == 't') {
      pt_append(out, len, "std", 3);
      parts++;
      p += 2;
      continue;
    }
    if (!isdigit((unsigned char)*p)) break;
    char *end;
    unsigned long n = strtoul(p, &end, 10);
    if (n == 0 || strnlen(end, n) < n) return -1;
    if (parts++) pt_append(out, len, "::", 2);
    /* Anonymous namespaces are "_GLOBAL__N_1". */
    if (n >= 12 && !strncmp(end, "_GLOBAL__N_", 11)) pt_append(out, len, "(anonymous)", 11);
    else pt_append(out, len, end, n);
    p = end + n;
    if (*p == 'I') {
      /* Template arguments: where they end is not worth parsing for a
       * display name; stop here. */
      pt_append(out, len, "<...>", 5);
      break;
    }
    if (!nested) break;
  }
  return parts ? 0 : -1;
}

void pt_trace_short_name(const char *name, char *out, size_t len) {
  if (!len) return;
  char buf[512];
  const char *src = buf;
  if (!strncmp(name, "_Z", 2) && pt_demangle_head(name, buf, sizeof buf) == 0) {
    /* buf holds it */
  } else {
    /* Demangled or C name: drop a leading return type "void ", the parameter
     * list and the inside of template argument lists. */
    const char *p = name;
    if (!strncmp(p, "void ", 5)) p += 5;
    buf[0] = '\0';
    int depth = 0;
    for (; *p; p++) {
      if (*p == '<') {
        if (depth++ == 0) pt_append(buf, sizeof buf, "<...>", 5);
      } else if (*p == '>') {
        if (depth > 0) depth--;
      } else if (*p == '(' && depth == 0) {
        break;
      } else if (depth == 0) {
        pt_append(buf, sizeof buf, p, 1);
      }
    }
    if (!buf[0]) src = name;
  }
  size_t n = strlen(src);
  if (n < len) {
    memcpy(out, src, n + 1);
  } else if (len > 4) { /* cut, and say so */
    memcpy(out, src, len - 4);
    memcpy(out + len - 4, "...", 4);
  } else {
    memcpy(out, src, len - 1);
    out[len - 1] = '\0';
  }
}

/* ---- loading ---- */

static const char *pt_action_static(const char *a) {
  if (!a) return "-";
  if (!strcmp(a, "swapped")) return "swapped";
  if (!strcmp(a, "fallback")) return "fallback";
  if (!strcmp(a, "passthrough")) return "passthrough";
  return "other";
}

static int pt_shim_cmp(const void *x, const void *y) {
  const struct pt_trace_shim_kernel *p = x, *q = y;
  return p->launches < q->launches ? 1 : p->launches > q->launches ? -1 : strcmp(p->name, q->name);
}

static int pt_kernel_cmp(const void *x, const void *y) {
  const struct pt_trace_kernel *p = x, *q = y;
  return p->total_ns < q->total_ns ? 1 : p->total_ns > q->total_ns ? -1 : strcmp(p->name, q->name);
}

/* Merges one stats file's kernels.top into r->sk (launches summed by name). */
static int pt_trace_load_stats(struct pt_trace_report *r, const struct pt_json *st) {
  const struct pt_json *kern = pt_json_get(st, "kernels"), *top = pt_json_get(kern, "top");
  uint64_t reg = 0;
  if (pt_json_u64(pt_json_get(kern, "registered"), &reg) == 0) r->shim_registered += reg;
  for (size_t i = 0; i < pt_json_len(top); i++) {
    const struct pt_json *e = pt_json_at(top, i);
    const char *name = pt_json_str(pt_json_get(e, "name"));
    if (!name) continue;
    uint64_t n = 0;
    pt_json_u64(pt_json_get(e, "launches"), &n);
    const char *action = pt_json_str(pt_json_get(e, "action"));
    size_t j = 0;
    while (j < r->nsk && strcmp(r->sk[j].name, name)) j++;
    if (j == r->nsk) {
      struct pt_trace_shim_kernel *s = realloc(r->sk, (r->nsk + 1) * sizeof *s);
      if (!s) return -1;
      r->sk = s;
      s[j].name = strdup(name);
      s[j].action = strdup(action ? action : "-");
      s[j].launches = 0;
      r->nsk++;
      if (!s[j].name || !s[j].action) return -1;
    } else if (action && strcmp(action, "passthrough") && strcmp(action, r->sk[j].action)) {
      /* A process that swapped or fell back says more than one that passed through. */
      char *a = strdup(action);
      if (!a) return -1;
      free(r->sk[j].action);
      r->sk[j].action = a;
    }
    r->sk[j].launches += n;
  }
  return 0;
}

static int pt_trace_load_records(struct pt_trace_report *r, FILE *f, struct pt_kmap *m,
                                 struct pt_ival **iv, size_t *niv, size_t *capiv,
                                 uint64_t *tmin, uint64_t *tmax) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  int rc = 0;
  while ((got = getline(&line, &cap, f)) > 0) {
    while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
    if (line[0] == 'K' && line[1] == ' ') {
      uint64_t a, b;
      unsigned stream;
      int off = 0;
      if (sscanf(line + 2, "%" SCNu64 " %" SCNu64 " %u %n", &a, &b, &stream, &off) < 3 || !off ||
          b < a)
        continue;
      const char *name = line + 2 + off;
      struct pt_trace_kernel *k = pt_kmap_get(m, *name ? name : "(unnamed)");
      if (!k) {
        rc = -1;
        break;
      }
      k->launches++;
      k->total_ns += b - a;
      r->records++;
      if (*niv == *capiv) {
        size_t nc = *capiv ? *capiv * 2 : 4096;
        struct pt_ival *v = realloc(*iv, nc * sizeof *v);
        if (!v) {
          rc = -1;
          break;
        }
        *iv = v;
        *capiv = nc;
      }
      (*iv)[(*niv)++] = (struct pt_ival){a, b};
      if (a < *tmin) *tmin = a;
      if (b > *tmax) *tmax = b;
    } else if (line[0] == 'E' && line[1] == ' ') {
      if (!r->cupti_error[0]) snprintf(r->cupti_error, sizeof r->cupti_error, "%s", line + 2);
    } else if (line[0] == '#') {
      const char *s;
      uint64_t v;
      /* 0 = the tracer had no timestamp function. */
      if ((s = strstr(line, "start_ns=")) && sscanf(s + 9, "%" SCNu64, &v) == 1 && v && v < *tmin) *tmin = v;
      if ((s = strstr(line, "stop_ns=")) && sscanf(s + 8, "%" SCNu64, &v) == 1 && v && v > *tmax) *tmax = v;
      if ((s = strstr(line, "dropped=")) && sscanf(s + 8, "%" SCNu64, &v) == 1) r->dropped += v;
    }
  }
  free(line);
  return rc;
}

int pt_trace_load(struct pt_trace_report *r, const char *const *records, size_t nrecords,
                  const char *const *stats, size_t nstats, double wall_s, char *why, size_t whylen) {
  memset(r, 0, sizeof *r);
  r->wall_s = wall_s;
  struct pt_kmap m = {0};
  struct pt_ival *iv = NULL;
  size_t niv = 0, capiv = 0;
  uint64_t tmin = UINT64_MAX, tmax = 0;
  int rc = -1;
  for (size_t i = 0; i < nrecords; i++) {
    FILE *f = fopen(records[i], "r");
    if (!f) continue;
    r->processes++;
    int e = pt_trace_load_records(r, f, &m, &iv, &niv, &capiv, &tmin, &tmax);
    fclose(f);
    if (e) {
      snprintf(why, whylen, "out of memory reading %s", records[i]);
      goto out;
    }
  }
  if (!r->processes && !r->cupti_error[0])
    snprintf(r->cupti_error, sizeof r->cupti_error,
             "no CUPTI records file was written (the shim did not start the tracer)");
  r->cupti_ok = r->processes > 0 && !r->cupti_error[0];

  for (size_t i = 0; i < nstats; i++) {
    char err[512];
    struct pt_json *st = pt_json_parse_file(stats[i], err, sizeof err);
    if (!st) {
      FILE *probe = fopen(stats[i], "r");
      if (!probe) continue; /* a process that wrote none */
      fclose(probe);
      snprintf(why, whylen, "shim stats %s: %s", stats[i], err);
      goto out;
    }
    r->have_stats = 1;
    int e = pt_trace_load_stats(r, st);
    pt_json_free(st);
    if (e) {
      snprintf(why, whylen, "out of memory");
      goto out;
    }
  }
  if (r->nsk) qsort(r->sk, r->nsk, sizeof *r->sk, pt_shim_cmp);

  r->k = calloc(m.n ? m.n : 1, sizeof *r->k);
  if (!r->k) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < m.cap; i++) {
    struct pt_trace_kernel *k = &m.slot[i];
    if (!k->name) continue;
    k->action = "-";
    for (size_t j = 0; j < r->nsk; j++)
      if (!strcmp(r->sk[j].name, k->name)) {
        k->action = pt_action_static(r->sk[j].action);
        break;
      }
    r->total_ns += k->total_ns;
    if (pt_trace_is_attention(k->name)) {
      r->attn_ns += k->total_ns;
      r->attn_launches += k->launches;
    }
    if (pt_trace_is_cat(k->name)) {
      r->cat_ns += k->total_ns;
      r->cat_launches += k->launches;
    }
    r->k[r->nk++] = *k;
    k->name = NULL; /* ownership moved */
  }
  qsort(r->k, r->nk, sizeof *r->k, pt_kernel_cmp);
  r->busy_ns = pt_ival_union(iv, niv);
  r->span_ns = tmax > tmin ? tmax - tmin : 0;
  rc = 0;
out:
  for (size_t i = 0; i < m.cap; i++) free(m.slot[i].name);
  free(m.slot);
  free(iv);
  if (rc) pt_trace_report_free(r);
  return rc;
}

void pt_trace_report_free(struct pt_trace_report *r) {
  for (size_t i = 0; i < r->nk; i++) free(r->k[i].name);
  free(r->k);
  for (size_t i = 0; i < r->nsk; i++) {
    free(r->sk[i].name);
    free(r->sk[i].action);
  }
  free(r->sk);
  memset(r, 0, sizeof *r);
}

/* ---- output ---- */

static double pt_wall_ns(const struct pt_trace_report *r) {
  return r->wall_s > 0 ? r->wall_s * 1e9 : (double)r->span_ns;
}

/* ns as a readable duration. */
static const char *pt_dur(char *buf, size_t len, double ns) {
  if (ns >= 1e9) snprintf(buf, len, "%.3f s", ns / 1e9);
  else if (ns >= 1e6) snprintf(buf, len, "%.3f ms", ns / 1e6);
  else snprintf(buf, len, "%.3f us", ns / 1e3);
  return buf;
}

static double pt_share(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0.0; }

static void pt_trace_print_shim(const struct pt_trace_report *r, FILE *f, size_t top) {
  if (!r->have_stats) {
    fprintf(f, "no shim statistics were written (was the shim loaded?)\n");
    return;
  }
  fprintf(f, "shim launch counts (%" PRIu64 " kernels registered; the most launched):\n\n", r->shim_registered);
  fprintf(f, "  %3s  %-60s %10s  %s\n", "#", "kernel", "launches", "ponytail");
  char sn[61];
  for (size_t i = 0; i < r->nsk && (!top || i < top); i++) {
    pt_trace_short_name(r->sk[i].name, sn, sizeof sn);
    fprintf(f, "  %3zu  %-60s %10" PRIu64 "  %s\n", i + 1, sn, r->sk[i].launches, r->sk[i].action);
  }
}

void pt_trace_print_text(const struct pt_trace_report *r, FILE *f, size_t top) {
  if (!r->cupti_ok) {
    fprintf(f, "CUPTI could not attach: %s\n", r->cupti_error[0] ? r->cupti_error : "unknown reason");
    fprintf(f, "(GPU times are unavailable; another CUPTI subscriber such as nsys/ncu, or a\n"
               " missing libcupti, are the usual causes)\n\n");
    pt_trace_print_shim(r, f, top);
    return;
  }
  uint64_t launches = 0;
  for (size_t i = 0; i < r->nk; i++) launches += r->k[i].launches;
  fprintf(f, "%" PRIu64 " kernel launches, %.3f ms of GPU time, %zu distinct kernels", launches,
          (double)r->total_ns / 1e6, r->nk);
  if (r->processes > 1) fprintf(f, ", %d processes", r->processes);
  if (r->dropped) fprintf(f, " (%" PRIu64 " records dropped by CUPTI)", r->dropped);
  fprintf(f, "\n\n  %3s  %-60s %9s %13s %10s %6s  %s\n", "#", "kernel", "launches", "total us",
          "mean us", "share", "ponytail");
  char sn[61];
  for (size_t i = 0; i < r->nk && (!top || i < top); i++) {
    const struct pt_trace_kernel *k = &r->k[i];
    pt_trace_short_name(k->name, sn, sizeof sn);
    fprintf(f, "  %3zu  %-60s %9" PRIu64 " %13.1f %10.2f %5.1f%%  %s\n", i + 1, sn, k->launches,
            (double)k->total_ns / 1e3, (double)k->total_ns / 1e3 / (double)k->launches,
            100.0 * pt_share(k->total_ns, r->total_ns), k->action);
  }
  if (top && r->nk > top) fprintf(f, "  ... %zu more kernels (--top 0 lists all)\n", r->nk - top);
  fprintf(f, "\nattention (flash/fmha/sdpa/attention/attn, incl. Ponytail's pt_attn): %5.1f%% of GPU time, "
             "%" PRIu64 " launches, %.1f us\n",
          100.0 * pt_share(r->attn_ns, r->total_ns), r->attn_launches, (double)r->attn_ns / 1e3);
  fprintf(f, "torch.cat (CatArrayBatchedCopy):                                     %5.1f%% of GPU time, "
             "%" PRIu64 " launches, %.1f us\n",
          100.0 * pt_share(r->cat_ns, r->total_ns), r->cat_launches, (double)r->cat_ns / 1e3);
  double wall = pt_wall_ns(r);
  if (wall > 0) {
    double busy = (double)r->busy_ns / wall;
    char b1[32], b2[32];
    fprintf(f, "GPU busy (union of kernel intervals) %s of %s %s wall time: %.1f%% (wall/GPU-busy = %.1fx)%s\n",
            pt_dur(b1, sizeof b1, (double)r->busy_ns), pt_dur(b2, sizeof b2, wall),
            r->wall_s > 0 ? "process" : "traced", 100.0 * busy,
            r->busy_ns ? wall / (double)r->busy_ns : 0.0,
            busy < 0.5 ? ": the CPU side is the bottleneck" : "");
  }
}

void pt_trace_print_json(const struct pt_trace_report *r, FILE *f, size_t top) {
  struct pt_jw w;
  pt_jw_init(&w, f, true);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_obj_begin(&w, "cupti");
  pt_jw_bool(&w, "ok", r->cupti_ok);
  pt_jw_str(&w, "error", r->cupti_ok ? NULL : r->cupti_error);
  pt_jw_u64(&w, "records", r->records);
  pt_jw_u64(&w, "dropped", r->dropped);
  pt_jw_i64(&w, "processes", r->processes);
  pt_jw_obj_end(&w);
  pt_jw_dbl(&w, "gpu_time_us", (double)r->total_ns / 1e3);
  pt_jw_dbl(&w, "gpu_busy_us", (double)r->busy_ns / 1e3);
  pt_jw_dbl(&w, "wall_us", pt_wall_ns(r) / 1e3);
  pt_jw_dbl(&w, "gpu_busy_fraction", pt_wall_ns(r) > 0 ? (double)r->busy_ns / pt_wall_ns(r) : 0.0);
  pt_jw_obj_begin(&w, "attention");
  pt_jw_dbl(&w, "share", pt_share(r->attn_ns, r->total_ns));
  pt_jw_dbl(&w, "time_us", (double)r->attn_ns / 1e3);
  pt_jw_u64(&w, "launches", r->attn_launches);
  pt_jw_obj_end(&w);
  pt_jw_obj_begin(&w, "cat");
  pt_jw_dbl(&w, "share", pt_share(r->cat_ns, r->total_ns));
  pt_jw_dbl(&w, "time_us", (double)r->cat_ns / 1e3);
  pt_jw_u64(&w, "launches", r->cat_launches);
  pt_jw_obj_end(&w);
  pt_jw_arr_begin(&w, "kernels");
  for (size_t i = 0; i < r->nk && (!top || i < top); i++) {
    const struct pt_trace_kernel *k = &r->k[i];
    pt_jw_obj_begin(&w, NULL);
    pt_jw_str(&w, "name", k->name);
    pt_jw_u64(&w, "launches", k->launches);
    pt_jw_dbl(&w, "total_us", (double)k->total_ns / 1e3);
    pt_jw_dbl(&w, "mean_us", (double)k->total_ns / 1e3 / (double)k->launches);
    pt_jw_dbl(&w, "share", pt_share(k->total_ns, r->total_ns));
    pt_jw_str(&w, "action", k->action);
    pt_jw_obj_end(&w);
  }
  pt_jw_arr_end(&w);
  pt_jw_obj_begin(&w, "shim");
  pt_jw_bool(&w, "stats", r->have_stats);
  pt_jw_u64(&w, "registered", r->shim_registered);
  pt_jw_arr_begin(&w, "kernels");
  for (size_t i = 0; i < r->nsk && (!top || i < top); i++) {
    pt_jw_obj_begin(&w, NULL);
    pt_jw_str(&w, "name", r->sk[i].name);
    pt_jw_u64(&w, "launches", r->sk[i].launches);
    pt_jw_str(&w, "action", r->sk[i].action);
    pt_jw_obj_end(&w);
  }
  pt_jw_arr_end(&w);
  pt_jw_obj_end(&w);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
}
