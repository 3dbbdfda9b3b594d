/* The sweep's spec, rows, tables, verdict line and exit status (sweep.h).
 * Pure: nothing here runs a process, so the tests check it on recorded
 * results and `ponytail plot-sweep` shares the figures the sweep printed. */
#include "tools/lib/sweep.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/util.h"

#define MIB (1024.0 * 1024.0)

/* ---- the spec ------------------------------------------------------------- */

static int pt_sweep_value(const char *s, long *out) {
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return -1;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s) return -1;
  if (*end == 'k' || *end == 'K') {
    x *= 1024;
    end++;
  }
  if (*end || x <= 0 || x > (1ll << 30)) return -1;
  *out = (long)x;
  return 0;
}

int pt_sweep_parse(const char *text, struct pt_sweep_spec *spec, char *why, size_t whylen) {
  char buf[1024];
  if (!text || !*text) {
    pt_seterr(why, whylen, "empty (want prompt=N,N,... and/or batch=N,N,...)");
    return -1;
  }
  if (strlen(text) >= sizeof buf) {
    pt_seterr(why, whylen, "too long");
    return -1;
  }
  memcpy(buf, text, strlen(text) + 1);
  const char *key = NULL;
  long *list = NULL;
  size_t *n = NULL;
  char *tok = buf;
  /* strtok would merge empty fields; an empty value is an error here. */
  for (char *next; tok; tok = next) {
    next = strchr(tok, ',');
    if (next) *next++ = '\0';
    const char *val = tok;
    char *eq = strchr(tok, '=');
    if (eq) {
      *eq = '\0';
      if (!strcmp(tok, "prompt")) list = spec->prompt, n = &spec->nprompt, key = "prompt";
      else if (!strcmp(tok, "batch")) list = spec->batch, n = &spec->nbatch, key = "batch";
      else {
        pt_seterr(why, whylen, "unknown key '%s' (the keys are prompt and batch)", tok);
        return -1;
      }
      if (*n) {
        pt_seterr(why, whylen, "%s given twice", key);
        return -1;
      }
      val = eq + 1;
      if (!*val) {
        pt_seterr(why, whylen, "%s= has no values", key);
        return -1;
      }
    } else if (!list) {
      pt_seterr(why, whylen, "'%s' has no key: start with prompt= or batch=", tok);
      return -1;
    }
    long v;
    if (!*val) {
      pt_seterr(why, whylen, "an empty %s value", key);
      return -1;
    }
    if (pt_sweep_value(val, &v)) {
      pt_seterr(why, whylen, "bad %s value '%s' (a positive integer; k = x1024)", key, val);
      return -1;
    }
    for (size_t i = 0; i < *n; i++)
      if (list[i] == v) {
        pt_seterr(why, whylen, "%s %ld given twice", key, v);
        return -1;
      }
    if (*n == PT_SWEEP_MAX_VALUES) {
      pt_seterr(why, whylen, "more than %d %s values", PT_SWEEP_MAX_VALUES, key);
      return -1;
    }
    list[(*n)++] = v;
  }
  size_t points = pt_sweep_npoints(spec);
  if (points > PT_SWEEP_MAX_POINTS) {
    pt_seterr(why, whylen, "%zu points (prompts x batches); at most %d", points, PT_SWEEP_MAX_POINTS);
    return -1;
  }
  return 0;
}

size_t pt_sweep_npoints(const struct pt_sweep_spec *spec) {
  return (spec->nprompt ? spec->nprompt : 1) * (spec->nbatch ? spec->nbatch : 1);
}

void pt_sweep_point(const struct pt_sweep_spec *spec, size_t i, long dflt_prompt, long dflt_batch,
                    long *prompt, long *batch) {
  size_t np = spec->nprompt ? spec->nprompt : 1;
  *prompt = spec->nprompt ? spec->prompt[i % np] : dflt_prompt;
  *batch = spec->nbatch ? spec->batch[i / np] : dflt_batch;
}

/* ---- rows ----------------------------------------------------------------- */

static double pt_ratio(double num, double den) {
  return isfinite(num) && isfinite(den) && den > 0 ? num / den : NAN;
}

void pt_sweep_row_derive(struct pt_sweep_row *r) {
  const struct pt_sweep_side *a = &r->a, *b = &r->b;
  if (r->failed) {
    r->step_speedup = r->tokens_speedup = r->ttft_ratio = NAN;
    r->nvml_saved_mib = r->nvml_saved_pct = r->reserved_saved_mib = r->reserved_saved_pct = NAN;
    return;
  }
  r->step_speedup = pt_ratio(a->step_ms, b->step_ms);
  r->tokens_speedup = pt_ratio(b->tokens_per_s, a->tokens_per_s);
  r->ttft_ratio = pt_ratio(b->ttft_s, a->ttft_s);
  int nv = isfinite(a->nvml_bytes) && isfinite(b->nvml_bytes);
  r->nvml_saved_mib = nv ? (a->nvml_bytes - b->nvml_bytes) / MIB : NAN;
  r->nvml_saved_pct = nv ? 100.0 * pt_ratio(a->nvml_bytes - b->nvml_bytes, a->nvml_bytes) : NAN;
  int rs = isfinite(a->reserved_bytes) && isfinite(b->reserved_bytes);
  r->reserved_saved_mib = rs ? (a->reserved_bytes - b->reserved_bytes) / MIB : NAN;
  r->reserved_saved_pct = rs ? 100.0 * pt_ratio(a->reserved_bytes - b->reserved_bytes, a->reserved_bytes) : NAN;
}

void pt_sweep_side_from_json(const struct pt_json *side, struct pt_sweep_side *s) {
  s->ttft_s = pt_json_num(pt_json_get(side, "prefill_s"), NAN);
  s->step_ms = pt_json_num(pt_json_get(side, "decode_step_ms.p50"), NAN);
  s->tokens_per_s = pt_json_num(pt_json_get(side, "tokens_per_s"), NAN);
  s->nvml_bytes = pt_json_num(pt_json_get(side, "nvml_peak_used_bytes"), NAN);
  s->reserved_bytes = pt_json_num(pt_json_get(side, "peak_reserved_bytes"), NAN);
}

int pt_sweep_row_from_json(const struct pt_json *p, struct pt_sweep_row *row) {
  memset(row, 0, sizeof *row);
  int64_t prompt, batch;
  if (pt_json_type(p) != PT_JSON_OBJ || pt_json_i64(pt_json_get(p, "prompt"), &prompt) ||
      pt_json_i64(pt_json_get(p, "batch"), &batch))
    return -1;
  row->prompt = (long)prompt;
  row->batch = (long)batch;
  const char *status = pt_json_str(pt_json_get(p, "status"));
  row->failed = !status || strcmp(status, "done") != 0;
  row->judged = pt_json_bool(pt_json_get(p, "judged"), 0);
  const struct pt_json *sum = pt_json_get(p, "summary");
  row->verdict = pt_json_str(pt_json_get(sum, "verdict"));
  pt_sweep_side_from_json(pt_json_get(sum, "a"), &row->a);
  pt_sweep_side_from_json(pt_json_get(sum, "b"), &row->b);
  pt_sweep_row_derive(row);
  return 0;
}

/* ---- tables --------------------------------------------------------------- */

static const char *pt_sweep_verdict_long(const struct pt_sweep_row *r) {
  const char *v = r->verdict;
  if (r->failed) return "n/a (a run failed: see stderr)";
  if (!v) return r->judged ? "n/a (see stderr)" : "not judged at this point (--verdict-every judges every point)";
  if (!strcmp(v, "within")) return "within PyTorch's own backend spread";
  if (!strcmp(v, "outside")) return "OUTSIDE PyTorch's own backend spread";
  if (!strcmp(v, "nonfinite")) return "FAIL: NaN/Inf in the sampled logits";
  if (!strcmp(v, "no_reference")) return "no reference arm";
  return "n/a (the verdict runs or examples/verdict.py failed: see stderr)";
}

static const char *pt_sweep_verdict_short(const struct pt_sweep_row *r) {
  const char *v = r->verdict;
  if (r->failed) return "failed";
  if (!v) return r->judged ? "error" : "-";
  if (!strcmp(v, "within")) return "within";
  if (!strcmp(v, "outside")) return "OUTSIDE";
  if (!strcmp(v, "nonfinite")) return "NaN/Inf";
  if (!strcmp(v, "no_reference")) return "no ref";
  return "error";
}

static void pt_cell(char *buf, size_t len, const char *fmt, double v) {
  if (isfinite(v)) snprintf(buf, len, fmt, v);
  else snprintf(buf, len, "n/a");
}

void pt_sweep_print_point(FILE *f, const struct pt_sweep_row *r) {
  static const struct {
    const char *label, *fmt;
    size_t off;
    double scale;
  } m[] = {
      {"TTFT (prefill, s)", "%.3f", offsetof(struct pt_sweep_side, ttft_s), 1},
      {"decode step p50 (ms)", "%.3f", offsetof(struct pt_sweep_side, step_ms), 1},
      {"tokens/s", "%.3f", offsetof(struct pt_sweep_side, tokens_per_s), 1},
      {"peak device used (NVML)", "%.0f MiB", offsetof(struct pt_sweep_side, nvml_bytes), MIB},
      {"peak reserved (torch)", "%.0f MiB", offsetof(struct pt_sweep_side, reserved_bytes), MIB},
  };
  fprintf(f, "  %-26s %14s %14s %8s\n", "", "A stock", "B ponytail", "B/A");
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    double a = *(const double *)((const char *)&r->a + m[i].off);
    double b = *(const double *)((const char *)&r->b + m[i].off);
    char ca[32], cb[32], cr[32];
    pt_cell(ca, sizeof ca, m[i].fmt, a / m[i].scale);
    pt_cell(cb, sizeof cb, m[i].fmt, b / m[i].scale);
    pt_cell(cr, sizeof cr, "%.3f", pt_ratio(b, a));
    if (!isfinite(pt_ratio(b, a))) cr[0] = '\0';
    fprintf(f, "  %-26s %14s %14s %8s\n", m[i].label, ca, cb, cr);
  }
  fprintf(f, "  %-26s %s\n", "verdict", pt_sweep_verdict_long(r));
}

void pt_sweep_print_summary(FILE *f, const struct pt_sweep_row *rows, size_t n) {
  fprintf(f, "  %5s %7s %9s %9s %6s %17s %17s  %s\n", "batch", "prompt", "step p50", "tokens/s", "TTFT",
          "NVML peak saved", "reserved saved", "verdict");
  fprintf(f, "  %5s %7s %9s %9s %6s %9s %7s %9s %7s\n", "", "", "speed-up", "speed-up", "B/A", "MiB", "%", "MiB",
          "%");
  for (size_t i = 0; i < n; i++) {
    const struct pt_sweep_row *r = &rows[i];
    char st[16], tk[16], tt[16], nm[16], np[16], rm[16], rp[16];
    pt_cell(st, sizeof st, "%.2fx", r->step_speedup);
    pt_cell(tk, sizeof tk, "%.2fx", r->tokens_speedup);
    pt_cell(tt, sizeof tt, "%.3f", r->ttft_ratio);
    pt_cell(nm, sizeof nm, "%.0f", r->nvml_saved_mib);
    pt_cell(np, sizeof np, "%.1f%%", r->nvml_saved_pct);
    pt_cell(rm, sizeof rm, "%.0f", r->reserved_saved_mib);
    pt_cell(rp, sizeof rp, "%.1f%%", r->reserved_saved_pct);
    fprintf(f, "  %5ld %7ld %9s %9s %6s %9s %7s %9s %7s  %s\n", r->batch, r->prompt, st, tk, tt, nm, np, rm, rp,
            pt_sweep_verdict_short(r));
  }
}

/* Appends "batch B, prompt P" of up to 3 rows that pass keep(), then "and N more". */
static void pt_sweep_where(const struct pt_sweep_row *rows, size_t n, int (*keep)(const struct pt_sweep_row *),
                           char *buf, size_t len) {
  size_t used = strlen(buf), shown = 0, more = 0;
  for (size_t i = 0; i < n; i++) {
    if (!keep(&rows[i])) continue;
    if (shown == 3) {
      more++;
      continue;
    }
    if (used < len)
      used += (size_t)snprintf(buf + used, len - used, "%sbatch %ld, prompt %ld", shown ? "; " : "",
                               rows[i].batch, rows[i].prompt);
    shown++;
  }
  if (more && used < len) snprintf(buf + used, len - used, "; and %zu more", more);
}

static int pt_is(const struct pt_sweep_row *r, const char *v) { return !r->failed && r->verdict && !strcmp(r->verdict, v); }
static int pt_row_nonfinite(const struct pt_sweep_row *r) { return pt_is(r, "nonfinite"); }
static int pt_row_outside(const struct pt_sweep_row *r) { return pt_is(r, "outside"); }
static int pt_row_judged_ok(const struct pt_sweep_row *r) {
  return pt_is(r, "within") || pt_is(r, "no_reference");
}
static int pt_row_failed(const struct pt_sweep_row *r) { return r->failed; }
static int pt_row_verdict_error(const struct pt_sweep_row *r) {
  return !r->failed && r->judged && (!r->verdict || !strcmp(r->verdict, "error"));
}
static int pt_row_error(const struct pt_sweep_row *r) { return pt_row_failed(r) || pt_row_verdict_error(r); }

void pt_sweep_verdict_line(const struct pt_sweep_row *rows, size_t n, char *buf, size_t len) {
  size_t due = 0, judged = 0, ok = 0, nan = 0, outside = 0, verrors = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    due += rows[i].judged;
    judged += rows[i].judged && !rows[i].failed;
    ok += pt_row_judged_ok(&rows[i]);
    nan += pt_row_nonfinite(&rows[i]);
    outside += pt_row_outside(&rows[i]);
    verrors += pt_row_verdict_error(&rows[i]);
    failed += pt_row_failed(&rows[i]);
  }
  size_t k;
  if (nan || outside) {
    snprintf(buf, len, nan ? "verdict: FAIL: NaN/Inf in the sampled logits at "
                           : "verdict: OUTSIDE PyTorch's own backend spread at ");
    pt_sweep_where(rows, n, nan ? pt_row_nonfinite : pt_row_outside, buf, len);
  } else if (verrors) {
    snprintf(buf, len, "verdict: n/a at ");
    pt_sweep_where(rows, n, pt_row_verdict_error, buf, len);
    k = strlen(buf);
    if (k < len)
      snprintf(buf + k, len - k, " (the verdict runs failed: see stderr); within PyTorch's own backend spread at %zu of %zu judged points",
               ok, judged);
  } else if (!judged) {
    snprintf(buf, len, due ? "verdict: n/a: no point to be judged finished"
                           : "verdict: not judged at any point (--verdict-steps 0)");
  } else {
    snprintf(buf, len, "verdict: within PyTorch's own backend spread at every %spoint (%zu of %zu judged: ",
             judged == n ? "" : "judged ", judged, n);
    pt_sweep_where(rows, n, pt_row_judged_ok, buf, len);
    k = strlen(buf);
    if (k < len) snprintf(buf + k, len - k, ")");
  }
  /* Runs that failed say so whatever the verdict. */
  k = strlen(buf);
  if (failed && k < len) {
    snprintf(buf + k, len - k, "; runs failed at ");
    pt_sweep_where(rows, n, pt_row_failed, buf, len);
    k = strlen(buf);
    if (k < len) snprintf(buf + k, len - k, " (see stderr)");
  }
}

int pt_sweep_exit_status(const struct pt_sweep_row *rows, size_t n) {
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    int x = pt_row_nonfinite(&rows[i]) ? 4 : pt_row_outside(&rows[i]) ? 3 : pt_row_error(&rows[i]) ? 1 : 0;
    /* 4 > 3 > 1 > 0: a wrong answer outranks a missing one. */
    if (x == 4 || (x == 3 && rc != 4) || (x == 1 && rc == 0)) rc = x;
  }
  return rc;
}
