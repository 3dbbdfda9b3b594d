/* KV-cache arithmetic behind `ponytail capacity`, kept apart from argument
 * parsing so the tests can call it:
 *   bytes = 2 (K and V) × layers × KV heads × head_dim × seq × batch × bytes/elem
 * Every product is checked with __builtin_mul_overflow: absurd inputs give
 * an error, never a wrapped number. */
#ifndef PT_TOOLS_CAPACITY_H
#define PT_TOOLS_CAPACITY_H
#include <stddef.h>
#include <stdint.h>

struct pt_json;

/* What the user (flags) or a model config said; 0 = not given. */
struct pt_cap_in {
  uint64_t layers, hidden, heads, kv_heads, head_dim, batch, seq;
  unsigned elem_bytes;
  const char *dtype;   /* canonical dtype name when elem_bytes is set */
};

/* The resolved geometry. kv_dim = kv_heads × head_dim, the width of one K (or
 * V) row per layer; with only --hidden given it is the hidden size and
 * kv_heads/head_dim are 0 (unknown). */
struct pt_cap_shape {
  uint64_t layers, kv_heads, head_dim, kv_dim, batch, seq;
  unsigned elem_bytes;
  const char *dtype;
};

/* Bytes per element of a dtype name: fp32/float32/float (4), fp16/float16/half
 * and bf16/bfloat16 (2), fp8/float8* (1); "torch." prefix accepted. Sets
 * *canon to the short name. 0 if unknown. */
unsigned pt_cap_dtype_bytes(const char *name, const char **canon);

/* Parses a size: plain bytes, or a number (fraction allowed) with a suffix.
 * K/M/G/T, KiB/MiB/GiB/TiB (case-insensitive, optional "B" after K/M/G/T)
 * are binary (2^10...); KB/MB/GB/TB spelled with "B" and no "i" are
 * decimal (10^3...). Returns 0 and sets *out, or -1 (bad or overflows). */
int pt_cap_parse_size(const char *s, uint64_t *out);

/* Reads the geometry from a Hugging Face config object (num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, hidden_size,
 * torch_dtype or dtype). Uses "text_config" when the top level has no
 * num_hidden_layers (multimodal configs). Returns 0, or -1 with err. */
int pt_cap_from_hf_config(const struct pt_json *cfg, struct pt_cap_in *out, char *err, size_t errlen);

/* Merges flags over cfg (either may be NULL) into a shape: explicit flags win
 * field by field, and a head_dim derived from flag values wins over the
 * config's. Batch defaults to 1, dtype to fp16; seq is required. Returns 0,
 * or -1 with err. */
int pt_cap_resolve(const struct pt_cap_in *flags, const struct pt_cap_in *cfg, struct pt_cap_shape *out,
                   char *err, size_t errlen);

/* 2 × layers × kv_dim × elem_bytes: one token of one sequence, all layers.
 * 0 on success, -1 on overflow. */
int pt_cap_per_token(const struct pt_cap_shape *s, uint64_t *out);
/* per_token × seq × batch. 0 on success, -1 on overflow. */
int pt_cap_kv_bytes(const struct pt_cap_shape *s, uint64_t *out);

/* Memory left for the KV cache: floor(gpu_mem × (1 − headroom)) − weights,
 * or 0 when the weights alone do not fit. headroom in [0, 1). */
uint64_t pt_cap_budget(uint64_t gpu_mem, uint64_t weights, double headroom);
/* Largest batch at s->seq / longest sequence at s->batch whose KV cache fits
 * in budget (0 when not even one fits). Never overflows. */
uint64_t pt_cap_max_batch(const struct pt_cap_shape *s, uint64_t budget);
uint64_t pt_cap_max_seq(const struct pt_cap_shape *s, uint64_t budget);

#endif
