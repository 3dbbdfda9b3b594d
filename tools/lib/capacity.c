/* KV-cache arithmetic for `ponytail capacity`. See capacity.h. */
#include "tools/lib/capacity.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tools/lib/json.h"
#include "tools/lib/util.h"

unsigned pt_cap_dtype_bytes(const char *name, const char **canon) {
  static const struct { const char *name, *canon; unsigned bytes; } tab[] = {
      {"fp32", "fp32", 4},    {"float32", "fp32", 4}, {"float", "fp32", 4},
      {"fp16", "fp16", 2},    {"float16", "fp16", 2}, {"half", "fp16", 2},
      {"bf16", "bf16", 2},    {"bfloat16", "bf16", 2},
      {"fp8", "fp8", 1},
  };
  if (!name) return 0;
  if (!strncmp(name, "torch.", 6)) name += 6;
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (!strcasecmp(name, tab[i].name)) {
      if (canon) *canon = tab[i].canon;
      return tab[i].bytes;
    }
  /* float8_e4m3fn, float8_e5m2, ...: every 8-bit float format. */
  if (!strncasecmp(name, "float8", 6) || !strncasecmp(name, "fp8_", 4)) {
    if (canon) *canon = "fp8";
    return 1;
  }
  return 0;
}

int pt_cap_parse_size(const char *s, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return -1;
  uint64_t ip = 0, fp = 0, fscale = 1;
  const char *p = s;
  for (; isdigit((unsigned char)*p); p++)
    if (__builtin_mul_overflow(ip, 10, &ip) || __builtin_add_overflow(ip, (uint64_t)(*p - '0'), &ip))
      return -1;
  int has_frac = 0;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return -1;
    has_frac = 1;
    for (; isdigit((unsigned char)*p); p++)
      if (fscale < 1000000000ull) { fp = fp * 10 + (uint64_t)(*p - '0'); fscale *= 10; } /* finer digits cannot matter */
  }
  static const char units[] = "KMGT";
  uint64_t mult = 1;
  if (*p) {
    const char *u = strchr(units, toupper((unsigned char)*p));
    if (!u) return -1;
    int power = (int)(u - units) + 1;
    const char *rest = p + 1;
    int binary;
    if (!*rest) binary = 1;                                                  /* K */
    else if ((rest[0] == 'i' || rest[0] == 'I') && (rest[1] == 'B' || rest[1] == 'b') && !rest[2])
      binary = 1;                                                            /* KiB */
    else if ((rest[0] == 'B' || rest[0] == 'b') && !rest[1]) binary = 0;   /* KB */
    else return -1;
    for (int i = 0; i < power; i++) mult *= binary ? 1024 : 1000;
  } else if (has_frac) {
    return -1; /* a fraction of a byte */
  }
  uint64_t v;
  if (__builtin_mul_overflow(ip, mult, &v)) return -1;
  unsigned __int128 frac = (unsigned __int128)fp * mult / fscale;
  if (frac > UINT64_MAX - v) return -1;
  *out = v + (uint64_t)frac;
  return 0;
}

/* A positive integer field of the config; null or absent leave *out 0. */
static int cfg_u64(const struct pt_json *cfg, const char *key, uint64_t *out, char *err, size_t errlen) {
  const struct pt_json *v = pt_json_get(cfg, key);
  *out = 0;
  if (!v || pt_json_type(v) == PT_JSON_NULL) return 0;
  if (pt_json_u64(v, out) || *out == 0) {
    pt_seterr(err, errlen, "model config: \"%s\" is not a positive integer", key);
    *out = 0;
    return -1;
  }
  return 0;
}

/* The config's torch_dtype (or dtype) into out->elem_bytes / out->dtype;
 * absent leaves them alone. */
static int cfg_dtype(const struct pt_json *cfg, struct pt_cap_in *out, char *err, size_t errlen) {
  const char *d = pt_json_str(pt_json_get(cfg, "torch_dtype"));
  if (!d) d = pt_json_str(pt_json_get(cfg, "dtype"));
  if (d && !(out->elem_bytes = pt_cap_dtype_bytes(d, &out->dtype))) {
    pt_seterr(err, errlen, "model config: unknown dtype \"%s\"", d);
    return -1;
  }
  return 0;
}

int pt_cap_from_hf_config(const struct pt_json *cfg, struct pt_cap_in *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (pt_json_type(cfg) != PT_JSON_OBJ) {
    pt_seterr(err, errlen, "model config: not a JSON object");
    return -1;
  }
  if (!pt_json_get(cfg, "num_hidden_layers") && pt_json_type(pt_json_get(cfg, "text_config")) == PT_JSON_OBJ) {
    /* Multimodal configs keep the language model under text_config; the
     * dtype often stays at the top. */
    if (pt_cap_from_hf_config(pt_json_get(cfg, "text_config"), out, err, errlen)) return -1;
    return out->elem_bytes ? 0 : cfg_dtype(cfg, out, err, errlen);
  }
  if (cfg_u64(cfg, "num_hidden_layers", &out->layers, err, errlen) ||
      cfg_u64(cfg, "num_attention_heads", &out->heads, err, errlen) ||
      cfg_u64(cfg, "num_key_value_heads", &out->kv_heads, err, errlen) ||
      cfg_u64(cfg, "head_dim", &out->head_dim, err, errlen) ||
      cfg_u64(cfg, "hidden_size", &out->hidden, err, errlen))
    return -1;
  return cfg_dtype(cfg, out, err, errlen);
}

int pt_cap_resolve(const struct pt_cap_in *flags, const struct pt_cap_in *cfg, struct pt_cap_shape *out,
                   char *err, size_t errlen) {
  static const struct pt_cap_in none;
  const struct pt_cap_in *f = flags ? flags : &none, *c = cfg ? cfg : &none;
  memset(out, 0, sizeof *out);
#define PICK(x) (f->x ? f->x : c->x)
  out->layers = PICK(layers);
  out->batch = PICK(batch) ? PICK(batch) : 1;
  out->seq = PICK(seq);
  uint64_t heads = PICK(heads);
  if (f->elem_bytes) { out->elem_bytes = f->elem_bytes; out->dtype = f->dtype; }
  else if (c->elem_bytes) { out->elem_bytes = c->elem_bytes; out->dtype = c->dtype; }
  else { out->elem_bytes = 2; out->dtype = "fp16"; }
  if (!out->layers) { pt_seterr(err, errlen, "the number of layers is missing (--layers or --model-config)"); return -1; }
  if (!out->seq) { pt_seterr(err, errlen, "the sequence length is missing (--seq)"); return -1; }

  /* head_dim: an explicit flag, then one derived from flag values, then the
   * config's own, then one derived from the config. */
  uint64_t hd = f->head_dim, hidden_f = f->hidden, hidden = PICK(hidden);
  if (!hd && hidden_f && heads) {
    if (hidden_f % heads) { pt_seterr(err, errlen, "hidden %llu is not a multiple of %llu heads", (unsigned long long)hidden_f, (unsigned long long)heads); return -1; }
    hd = hidden_f / heads;
  }
  if (!hd) hd = c->head_dim;
  if (!hd && hidden && heads) {
    if (hidden % heads) { pt_seterr(err, errlen, "hidden %llu is not a multiple of %llu heads", (unsigned long long)hidden, (unsigned long long)heads); return -1; }
    hd = hidden / heads;
  }
  uint64_t kvh = PICK(kv_heads);
  if (!kvh) kvh = heads; /* no GQA: every query head has its own K and V */
#undef PICK
  if (kvh && hd) {
    out->kv_heads = kvh;
    out->head_dim = hd;
    if (__builtin_mul_overflow(kvh, hd, &out->kv_dim)) { pt_seterr(err, errlen, "KV heads × head_dim overflows"); return -1; }
    return 0;
  }
  if (hidden && !kvh && !hd) {
    out->kv_dim = hidden; /* --hidden alone: heads × head_dim, no GQA */
    return 0;
  }
  if (kvh && !hd)
    pt_seterr(err, errlen, "head_dim is missing (--head-dim, or --hidden with --heads)");
  else if (hd && !kvh)
    pt_seterr(err, errlen, "the number of KV heads is missing (--kv-heads or --heads)");
  else
    pt_seterr(err, errlen, "the head geometry is missing (--hidden, or --kv-heads with --head-dim)");
  return -1;
}

int pt_cap_per_token(const struct pt_cap_shape *s, uint64_t *out) {
  uint64_t v = 2;
  if (__builtin_mul_overflow(v, s->layers, &v) || __builtin_mul_overflow(v, s->kv_dim, &v) ||
      __builtin_mul_overflow(v, (uint64_t)s->elem_bytes, &v))
    return -1;
  *out = v;
  return 0;
}

int pt_cap_kv_bytes(const struct pt_cap_shape *s, uint64_t *out) {
  uint64_t v;
  if (pt_cap_per_token(s, &v) || __builtin_mul_overflow(v, s->seq, &v) || __builtin_mul_overflow(v, s->batch, &v))
    return -1;
  *out = v;
  return 0;
}

uint64_t pt_cap_budget(uint64_t gpu_mem, uint64_t weights, double headroom) {
  if (!(headroom >= 0.0 && headroom < 1.0)) return 0;
  /* long double keeps 64 mantissa bits: exact for any byte count here. */
  long double x = (long double)gpu_mem * (1.0L - (long double)headroom);
  /* 0.1 is not exact in binary: 141e9 × 0.9 comes out a hair under
   * 126.9e9. Round what is an integer up to that error, floor the rest. */
  long double r = roundl(x), usable = fabsl(x - r) <= 1e-9L * (x > 1.0L ? x : 1.0L) ? r : floorl(x);
  if (usable > (long double)UINT64_MAX) usable = (long double)UINT64_MAX;
  uint64_t u = (uint64_t)usable;
  return u > weights ? u - weights : 0;
}

uint64_t pt_cap_max_batch(const struct pt_cap_shape *s, uint64_t budget) {
  uint64_t per_tok, per_seq;
  if (pt_cap_per_token(s, &per_tok) || __builtin_mul_overflow(per_tok, s->seq, &per_seq) || per_seq == 0)
    return 0;
  return budget / per_seq;
}

uint64_t pt_cap_max_seq(const struct pt_cap_shape *s, uint64_t budget) {
  uint64_t per_tok, per_step;
  if (pt_cap_per_token(s, &per_tok) || __builtin_mul_overflow(per_tok, s->batch, &per_step) || per_step == 0)
    return 0;
  return budget / per_step;
}
