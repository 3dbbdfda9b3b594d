/* `ponytail capacity`: KV-cache size of a model at a batch and length, and,
 * given a GPU's memory and the weights, the largest batch and the longest
 * sequence that fit. The arithmetic is in capacity.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "tools/lib/capacity.h"
#include "tools/cmd.h"
#include "tools/lib/json.h"

static void usage(FILE *f) {
  fprintf(f,
"usage: ponytail capacity [--model-config config.json] [--layers N]\n"
"                         (--hidden N [--heads N] | --kv-heads N --head-dim N | --heads N --head-dim N)\n"
"                         --seq N [--batch N] [--dtype fp32|fp16|bf16|fp8]\n"
"                         [--gpu-mem SIZE --weights SIZE [--headroom FRACTION]] [--json]\n"
"\n"
"KV-cache bytes = 2 (K and V) x layers x KV heads x head_dim x seq x batch x bytes/element.\n"
"\n"
"  --model-config FILE  a Hugging Face config.json: num_hidden_layers, num_attention_heads,\n"
"                       num_key_value_heads (default: num_attention_heads), head_dim (default:\n"
"                       hidden_size / num_attention_heads), torch_dtype or dtype. Explicit\n"
"                       flags override the file's values.\n"
"  --layers N           transformer layers\n"
"  --hidden N           hidden size = heads x head_dim; alone it means no GQA (KV width = hidden)\n"
"  --heads N            query heads: head_dim = hidden / heads, and KV heads = heads unless\n"
"                       --kv-heads says otherwise\n"
"  --kv-heads N         key/value heads (grouped-query attention)\n"
"  --head-dim N         dimension of one head\n"
"  --seq N              tokens per sequence (prompt + generated); required\n"
"  --batch N            sequences (default 1)\n"
"  --dtype D            element type of the cache: fp32 (4 bytes), fp16 or bf16 (2), fp8 (1);\n"
"                       also float32/float16/bfloat16/float8_*. Default: the config's, else fp16\n"
"  --gpu-mem SIZE       device memory; with --weights, prints the largest batch at --seq and\n"
"                       the longest sequence at --batch that fit in\n"
"                       gpu_mem x (1 - headroom) - weights\n"
"  --weights SIZE       bytes taken by the weights (and anything else resident); 0 allowed\n"
"  --headroom FRACTION  share of --gpu-mem kept free for activations and fragmentation,\n"
"                       0 <= FRACTION < 1 (default 0.1)\n"
"  --json               print one JSON object instead of the table\n"
"  -h, --help           this help\n"
"\n"
"SIZE: plain bytes, or a number (fractions allowed) with a suffix. K, M, G, T and KiB, MiB,\n"
"GiB, TiB are binary (1G = 1GiB = 2^30 bytes); KB, MB, GB, TB are decimal (1GB = 10^9).\n"
"\n"
"Exit status: 0 ok, 1 the config file cannot be read, 2 bad arguments or a result that\n"
"overflows 64 bits.\n");
}

static int bad(const char *fmt, const char *a) {
  fprintf(stderr, "ponytail capacity: ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, "\n\n");
  usage(stderr);
  return 2;
}

static int parse_count(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v == 0) return -1;
  *out = v;
  return 0;
}

/* 8589934592 -> "8,589,934,592" */
static const char *commas(uint64_t v, char *buf, size_t len) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
  size_t o = 0;
  for (int i = 0; i < n && o + 2 < len; i++) {
    if (i && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = 0;
  return buf;
}

/* Bytes in the largest binary unit that keeps the number >= 1. */
static const char *binary_units(uint64_t v, char *buf, size_t len) {
  static const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double d = (double)v;
  int i = 0;
  while (d >= 1024.0 && i < 6) { d /= 1024.0; i++; }
  if (i == 0) snprintf(buf, len, "%" PRIu64 " bytes", v);
  else snprintf(buf, len, "%.1f %s", d, u[i]);
  return buf;
}

static void row(const char *label, uint64_t bytes, const char *note) {
  char a[40], b[40];
  printf("  %-26s %26s bytes  %11s%s%s\n", label, commas(bytes, a, sizeof a), binary_units(bytes, b, sizeof b),
         note ? "  " : "", note ? note : "");
}

static double gib(uint64_t v) { return (double)v / (1024.0 * 1024.0 * 1024.0); }

int pt_cmd_capacity(int argc, char **argv) {
  enum { O_JSON = 256, O_LAYERS, O_HIDDEN, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_BATCH, O_SEQ,
         O_DTYPE, O_MODEL_CONFIG, O_GPU_MEM, O_WEIGHTS, O_HEADROOM };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"json", no_argument, NULL, O_JSON},
      {"layers", required_argument, NULL, O_LAYERS},
      {"hidden", required_argument, NULL, O_HIDDEN},
      {"heads", required_argument, NULL, O_HEADS},
      {"kv-heads", required_argument, NULL, O_KV_HEADS},
      {"head-dim", required_argument, NULL, O_HEAD_DIM},
      {"batch", required_argument, NULL, O_BATCH},
      {"seq", required_argument, NULL, O_SEQ},
      {"dtype", required_argument, NULL, O_DTYPE},
      {"model-config", required_argument, NULL, O_MODEL_CONFIG},
      {"gpu-mem", required_argument, NULL, O_GPU_MEM},
      {"weights", required_argument, NULL, O_WEIGHTS},
      {"headroom", required_argument, NULL, O_HEADROOM},
      {NULL, 0, NULL, 0},
  };
  struct pt_cap_in fl = {0};
  const char *cfg_path = NULL, *gpu_s = NULL, *weights_s = NULL, *headroom_s = NULL, *w;
  int json = 0, c;
  optind = 0;
  /* --flag=value or --flag value */
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    uint64_t *count = NULL;
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_JSON: json = 1; break;
    case O_LAYERS: count = &fl.layers; break;
    case O_HIDDEN: count = &fl.hidden; break;
    case O_HEADS: count = &fl.heads; break;
    case O_KV_HEADS: count = &fl.kv_heads; break;
    case O_HEAD_DIM: count = &fl.head_dim; break;
    case O_BATCH: count = &fl.batch; break;
    case O_SEQ: count = &fl.seq; break;
    case O_DTYPE:
      if (!(fl.elem_bytes = pt_cap_dtype_bytes(optarg, &fl.dtype))) return bad("unknown dtype '%s'", optarg);
      break;
    case O_MODEL_CONFIG: cfg_path = optarg; break;
    case O_GPU_MEM: gpu_s = optarg; break;
    case O_WEIGHTS: weights_s = optarg; break;
    case O_HEADROOM: headroom_s = optarg; break;
    case ':': return bad("%s needs a value", w);
    default: {
      if (strncmp(w, "--", 2)) return bad("unexpected argument '%s'", w);
      char name[64]; /* the flag without its =value */
      snprintf(name, sizeof name, "%.*s", (int)strcspn(w, "="), w);
      return bad("unknown flag '%s'", name);
    }
    }
    if (count && parse_count(optarg, count)) return bad("bad value '%s': a positive integer is expected", optarg);
  }
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);

  uint64_t gpu_mem = 0, weights = 0;
  double headroom = 0.1;
  if (gpu_s && pt_cap_parse_size(gpu_s, &gpu_mem)) return bad("bad --gpu-mem '%s'", gpu_s);
  if (weights_s && pt_cap_parse_size(weights_s, &weights)) return bad("bad --weights '%s'", weights_s);
  if (gpu_s && !weights_s) return bad("%s", "--gpu-mem needs --weights (--weights 0 if none)");
  if (weights_s && !gpu_s) return bad("%s", "--weights needs --gpu-mem");
  if (headroom_s) {
    char *end;
    errno = 0;
    headroom = strtod(headroom_s, &end);
    if (errno || *end || end == headroom_s || !(headroom >= 0.0 && headroom < 1.0))
      return bad("bad --headroom '%s': a fraction in [0, 1) is expected", headroom_s);
    if (!gpu_s) return bad("%s", "--headroom needs --gpu-mem and --weights");
  }

  struct pt_cap_in cfg = {0};
  char err[512];
  if (cfg_path) {
    struct pt_json *doc = pt_json_parse_file(cfg_path, err, sizeof err);
    if (!doc) {
      fprintf(stderr, "ponytail capacity: %s\n", err);
      return 1;
    }
    int rc = pt_cap_from_hf_config(doc, &cfg, err, sizeof err);
    pt_json_free(doc); /* cfg.dtype points at static names, not into doc */
    if (rc) {
      fprintf(stderr, "ponytail capacity: %s: %s\n", cfg_path, err);
      return 1;
    }
  }
  struct pt_cap_shape s;
  if (pt_cap_resolve(&fl, cfg_path ? &cfg : NULL, &s, err, sizeof err)) return bad("%s", err);
  uint64_t per_tok, per_seq, kv;
  if (pt_cap_per_token(&s, &per_tok) || pt_cap_kv_bytes(&s, &kv) ||
      __builtin_mul_overflow(per_tok, s.seq, &per_seq)) {
    fprintf(stderr, "ponytail capacity: the KV-cache size overflows 64 bits: check the inputs\n");
    return 2;
  }
  uint64_t budget = 0, max_batch = 0, max_seq = 0;
  if (gpu_s) {
    budget = pt_cap_budget(gpu_mem, weights, headroom);
    max_batch = pt_cap_max_batch(&s, budget);
    max_seq = pt_cap_max_seq(&s, budget);
  }

  if (json) {
    struct pt_jw w;
    pt_jw_init(&w, stdout, true);
    pt_jw_obj_begin(&w, NULL);
    pt_jw_u64(&w, "layers", s.layers);
    if (s.kv_heads) pt_jw_u64(&w, "kv_heads", s.kv_heads);
    if (s.head_dim) pt_jw_u64(&w, "head_dim", s.head_dim);
    pt_jw_u64(&w, "kv_dim", s.kv_dim);
    pt_jw_str(&w, "dtype", s.dtype);
    pt_jw_u64(&w, "bytes_per_elem", s.elem_bytes);
    pt_jw_u64(&w, "batch", s.batch);
    pt_jw_u64(&w, "seq", s.seq);
    pt_jw_u64(&w, "per_token_bytes", per_tok);
    pt_jw_u64(&w, "per_sequence_bytes", per_seq);
    pt_jw_u64(&w, "kv_bytes", kv);
    pt_jw_dbl(&w, "kv_gib", gib(kv));
    if (gpu_s) {
      pt_jw_u64(&w, "gpu_mem_bytes", gpu_mem);
      pt_jw_u64(&w, "weights_bytes", weights);
      pt_jw_dbl(&w, "headroom", headroom);
      pt_jw_u64(&w, "kv_budget_bytes", budget);
      pt_jw_u64(&w, "max_batch", max_batch);
      pt_jw_u64(&w, "max_seq", max_seq);
      pt_jw_bool(&w, "fits", kv <= budget);
    }
    pt_jw_obj_end(&w);
    pt_jw_finish(&w);
    return 0;
  }

  char a[64];
  printf("KV cache of %" PRIu64 " layers, ", s.layers);
  if (s.kv_heads) printf("%" PRIu64 " KV heads x head_dim %" PRIu64, s.kv_heads, s.head_dim);
  else printf("KV width %" PRIu64 " (= hidden, no GQA)", s.kv_dim);
  printf(", %s (%u bytes/element), batch %" PRIu64 " x seq %" PRIu64 "\n\n", s.dtype, s.elem_bytes, s.batch, s.seq);
  row("per token", per_tok, "(one sequence, all layers, K+V)");
  row("per sequence", per_seq, NULL);
  row("KV cache", kv, NULL);
  if (gpu_s) {
    snprintf(a, sizeof a, "headroom %g%%", headroom * 100.0);
    printf("\n");
    row("GPU memory", gpu_mem, NULL);
    row(a, gpu_mem - pt_cap_budget(gpu_mem, 0, headroom), "(kept free)");
    row("weights", weights, NULL);
    row("left for the KV cache", budget, kv <= budget ? "(this batch fits)" : "(this batch does NOT fit)");
    printf("\n  largest batch at seq %-10" PRIu64 " %17" PRIu64 "\n", s.seq, max_batch);
    printf("  longest seq at batch %-10" PRIu64 " %17" PRIu64 "\n", s.batch, max_seq);
    if (!budget) printf("\n  the weights alone leave no room for a KV cache\n");
  }
  return 0;
}
