/* Options: the X-macro table of common/options.def, parsed once from the
 * environment with secure_getenv (setuid-safe). A bad value keeps the default
 * and is reported once, after parsing, because the logger itself reads
 * options (warning from inside the parse would recurse into pthread_once). */
#include "common/options.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

const struct pt_opt_info pt_opt_table[PT_OPT_COUNT] = {
#define PT_OPT(name, type, choices, def, doc) {"PONYTAIL_" #name, PT_OPT_##type, choices, def, doc},
#include "common/options.def"
#undef PT_OPT
};

struct pt_opt_val {
  bool set;        /* environment value parsed */
  bool bad;        /* environment value present but rejected */
  bool b;
  uint64_t u;
  int e;
  const char *s;   /* STR: owned copy, or the table default */
  char raw[64];    /* the environment text of SIZE/INT values, for value_text */
};

static struct pt_opt_val pt_opt_vals[PT_OPT_COUNT];
static pthread_once_t pt_opts_once = PTHREAD_ONCE_INIT;
static int pt_opts_ready;        /* 1 once parsed: getters skip pthread_once */
static int pt_opts_warned;       /* bad values reported */

static bool pt_word_eq(const char *a, const char *b) { return strcasecmp(a, b) == 0; }

int pt_parse_bool(const char *s, bool *out) {
  static const char *const yes[] = {"1", "on", "true", "yes"};
  static const char *const no[] = {"0", "off", "false", "no"};
  if (!s) return -1;
  for (size_t i = 0; i < 4; i++) {
    if (pt_word_eq(s, yes[i])) { *out = true; return 0; }
    if (pt_word_eq(s, no[i])) { *out = false; return 0; }
  }
  return -1;
}

/* Bytes with an optional binary suffix: K, M, G, T (also KB/KiB forms). */
int pt_parse_size(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (!isdigit((unsigned char)*p)) return -1; /* no sign, no empty number */
  errno = 0;
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno == ERANGE) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift) {
    if (toupper((unsigned char)*end) == 'I' && toupper((unsigned char)end[1]) == 'B') end += 2;
    else if (toupper((unsigned char)*end) == 'B') end++;
  } else if (toupper((unsigned char)*end) == 'B') {
    end++;
  }
  while (isspace((unsigned char)*end)) end++;
  if (*end) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

int pt_parse_enum(const char *s, const char *choices, int *out) {
  if (!s || !choices) return -1;
  size_t n = strlen(s);
  int idx = 0;
  for (const char *c = choices; *c; idx++) {
    const char *bar = strchr(c, '|');
    size_t len = bar ? (size_t)(bar - c) : strlen(c);
    if (len == n && strncasecmp(c, s, n) == 0) { *out = idx; return 0; }
    if (!bar) break;
    c = bar + 1;
  }
  return -1;
}

/* Parses text into v per the row's type. Returns 0 or -1. */
static int pt_opt_parse(const struct pt_opt_info *o, const char *text, struct pt_opt_val *v) {
  switch (o->type) {
  case PT_OPT_BOOL: return pt_parse_bool(text, &v->b);
  case PT_OPT_SIZE: return pt_parse_size(text, &v->u);
  case PT_OPT_INT: {
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)text[0])) return -1;
    unsigned long long x = strtoull(text, &end, 10);
    if (errno || *end) return -1;
    v->u = x;
    return 0;
  }
  case PT_OPT_ENUM: return pt_parse_enum(text, o->choices, &v->e);
  case PT_OPT_STR: v->s = text; return 0;
  }
  return -1;
}

static void pt_opts_load(void) {
  for (int i = 0; i < PT_OPT_COUNT; i++) {
    const struct pt_opt_info *o = &pt_opt_table[i];
    struct pt_opt_val *v = &pt_opt_vals[i];
    memset(v, 0, sizeof *v);
    /* The table's defaults always parse (checked by the unit tests). */
    (void)pt_opt_parse(o, o->def, v);
    const char *env = secure_getenv(o->name);
    if (!env || !*env) continue; /* empty = unset */
    struct pt_opt_val nv = *v;
    if (pt_opt_parse(o, env, &nv) == 0) {
      if (o->type == PT_OPT_STR) {
        /* Copy: the application may later setenv() and free the text. */
        char *copy = strdup(env);
        if (!copy) continue;
        nv.s = copy;
      }
      *v = nv;
      v->set = true;
      snprintf(v->raw, sizeof v->raw, "%s", env);
    } else {
      v->bad = true;
    }
  }
  __atomic_store_n(&pt_opts_ready, 1, __ATOMIC_RELEASE);
}

static void pt_opts_report_bad(void) {
  if (__atomic_exchange_n(&pt_opts_warned, 1, __ATOMIC_ACQ_REL)) return;
  for (int i = 0; i < PT_OPT_COUNT; i++) {
    if (!pt_opt_vals[i].bad) continue;
    const struct pt_opt_info *o = &pt_opt_table[i];
    const char *env = secure_getenv(o->name);
    pt_warn("%s=\"%.64s\" is not a valid value (%s%s); using the default \"%s\"", o->name,
            env ? env : "", o->type == PT_OPT_ENUM ? "one of " : "",
            o->type == PT_OPT_ENUM ? o->choices
            : o->type == PT_OPT_BOOL ? "1/on/true/yes or 0/off/false/no"
            : o->type == PT_OPT_SIZE ? "bytes with an optional K/M/G/T suffix"
            : "a number",
            o->def);
  }
}

void pt_opts_init(void) {
  if (__builtin_expect(__atomic_load_n(&pt_opts_ready, __ATOMIC_ACQUIRE), 1)) {
    if (__builtin_expect(!__atomic_load_n(&pt_opts_warned, __ATOMIC_RELAXED), 0)) pt_opts_report_bad();
    return;
  }
  pthread_once(&pt_opts_once, pt_opts_load);
  pt_opts_report_bad();
}

void pt_opts_reload(void) {
  for (int i = 0; i < PT_OPT_COUNT; i++)
    if (pt_opt_table[i].type == PT_OPT_STR && pt_opt_vals[i].set) free((char *)pt_opt_vals[i].s);
  __atomic_store_n(&pt_opts_warned, 0, __ATOMIC_RELAXED);
  pt_opts_load();
  pt_opts_report_bad();
  pt_log_reopen();
}

static inline const struct pt_opt_val *pt_opt_get(enum pt_opt_id id) {
  if (__builtin_expect(!__atomic_load_n(&pt_opts_ready, __ATOMIC_ACQUIRE), 0))
    pthread_once(&pt_opts_once, pt_opts_load);
  return &pt_opt_vals[id];
}

bool pt_opt_bool(enum pt_opt_id id) { return pt_opt_get(id)->b; }
uint64_t pt_opt_size(enum pt_opt_id id) { return pt_opt_get(id)->u; }
const char *pt_opt_str(enum pt_opt_id id) {
  const char *s = pt_opt_get(id)->s;
  return s ? s : "";
}
int pt_opt_enum(enum pt_opt_id id) { return pt_opt_get(id)->e; }
bool pt_opt_is_set(enum pt_opt_id id) { return pt_opt_get(id)->set; }

const char *pt_opt_value_text(enum pt_opt_id id, char *buf, size_t len) {
  const struct pt_opt_val *v = pt_opt_get(id);
  const struct pt_opt_info *o = &pt_opt_table[id];
  if (!buf || !len) return "";
  switch (o->type) {
  case PT_OPT_BOOL: snprintf(buf, len, "%s", v->b ? "1" : "0"); break;
  case PT_OPT_SIZE:
  case PT_OPT_INT: snprintf(buf, len, "%s", v->set ? v->raw : o->def); break;
  case PT_OPT_STR: snprintf(buf, len, "%s", v->s ? v->s : ""); break;
  case PT_OPT_ENUM: {
    /* The e-th '|'-separated choice. */
    const char *c = o->choices;
    for (int i = 0; i < v->e && c; i++) {
      c = strchr(c, '|');
      if (c) c++;
    }
    if (!c) c = "";
    const char *bar = strchr(c, '|');
    int n = bar ? (int)(bar - c) : (int)strlen(c);
    snprintf(buf, len, "%.*s", n, c);
    break;
  }
  }
  return buf;
}
