/* AttentionKernel<...>::Params: layout, decoder, eligibility and descriptor
 * (see mem_eff_params.h).
 *
 * The offsets below are the ones read from torch 2.11's launches on the GPU
 * (the mirror in the header restates them field by field); the static
 * assertions pin the mirror to them, so a typo fails the build instead of
 * misreading launches. */
#include "hooks/mem_eff_params.h"

#include <string.h>

#include "hooks/flash_params.h"
#include "hooks/size_reason.h"

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(struct pt_mem_eff_params) == PT_MEM_EFF_PARAMS_BYTES, "Params mirror");
#define PT_ME_OFF(f, v) _Static_assert(offsetof(struct pt_mem_eff_params, f) == (v), "Params." #f)
PT_ME_OFF(query_ptr, 0);
PT_ME_OFF(key_ptr, 8);
PT_ME_OFF(value_ptr, 16);
PT_ME_OFF(attn_bias_ptr, 24);
PT_ME_OFF(seqstart_q_ptr, 32);
PT_ME_OFF(seqstart_k_ptr, 40);
PT_ME_OFF(seqlen_k_ptr, 48);
PT_ME_OFF(causal_diagonal_offset, 56);
PT_ME_OFF(output_ptr, 64);
PT_ME_OFF(output_accum_ptr, 72);
PT_ME_OFF(logsumexp_ptr, 80);
PT_ME_OFF(window_size, 88);
PT_ME_OFF(scale, 92);
PT_ME_OFF(head_dim, 96);
PT_ME_OFF(head_dim_value, 100);
PT_ME_OFF(num_queries, 104);
PT_ME_OFF(num_keys, 108);
PT_ME_OFF(num_keys_absolute, 112);
PT_ME_OFF(custom_mask_type, 116);
PT_ME_OFF(q_strideM, 120);
PT_ME_OFF(k_strideM, 124);
PT_ME_OFF(v_strideM, 128);
PT_ME_OFF(bias_strideM, 132);
PT_ME_OFF(o_strideM, 136);
PT_ME_OFF(q_strideH, 140);
PT_ME_OFF(k_strideH, 144);
PT_ME_OFF(v_strideH, 148);
PT_ME_OFF(bias_strideH, 152);
PT_ME_OFF(q_strideB, 160);
PT_ME_OFF(k_strideB, 168);
PT_ME_OFF(v_strideB, 176);
PT_ME_OFF(bias_strideB, 184);
PT_ME_OFF(num_batches, 192);
PT_ME_OFF(num_heads, 196);
PT_ME_OFF(dropout_state, 200);
#define PT_ME_HOST_OK 1
#else
/* Another host ABI: the mirror may not match what the kernels expect. */
#define PT_ME_HOST_OK 0
#endif

/* Query rows one CTA of the decode kernel holds (kernels/attn.h). */
#define PT_ME_MAX_ROWS 16

/* ---- reasons (short, static: they are stats keys) ---------------------- */
const char pt_me_r_diagonal[] = "causal diagonal offset";
const char pt_me_r_top_left[] = "causal from top-left";
const char pt_me_r_lse[] = "logsumexp requested (training)";
const char pt_me_r_window[] = "sliding window";

static struct pt_size_reasons pt_me_size_reasons =
    PT_SIZE_REASONS_INIT("Params layout not recognised (", " bytes)", "Params layout not recognised");

/* ---- decoder ------------------------------------------------------------ */

const char *pt_mem_eff_decode(const void *params, size_t bytes, struct pt_mem_eff_params *out) {
  if (bytes == 0) return pt_flash_r_size_unknown;
  if (bytes != PT_MEM_EFF_PARAMS_BYTES || !PT_ME_HOST_OK) return pt_size_reason(&pt_me_size_reasons, bytes);
  if (!params) return pt_flash_r_variant;
  /* One copy: the mirror is the layout (the host copy need not be aligned). */
  memcpy(out, params, sizeof *out);
  return NULL;
}

const char *pt_mem_eff_name_dtype(const char *name, int *dtype) {
  static const char pre[] = "fmha_cutlassF_";
  if (!name || name[0] != '_' || name[1] != 'Z') return pt_flash_r_dtype;
  const char *p = name + 2;
  while (*p >= '0' && *p <= '9') p++;
  if (strncmp(p, pre, sizeof pre - 1) != 0) return pt_flash_r_dtype;
  p += sizeof pre - 1;
  if (strncmp(p, "bf16_", 5) == 0) {
    *dtype = PT_DTYPE_BF16;
    return NULL;
  }
  if (strncmp(p, "f16_", 4) == 0) {
    *dtype = PT_DTYPE_FP16;
    return NULL;
  }
  return pt_flash_r_dtype; /* f32_: the decode kernel is 16-bit only */
}

/* ---- eligibility --------------------------------------------------------- */

const char *pt_mem_eff_eligible(const struct pt_mem_eff_params *p, const unsigned grid[3]) {
  /* torch launches (ceil(num_queries / queries per block), num_heads,
   * num_batches) (Params::getBlocksGrid); a launch that disagrees was not
   * made from these bytes the way we read them (another layout, such as the
   * older one with causal_diagonal_ptr). Checked first: such bytes say
   * nothing about the shape. */
  if (grid && (grid[0] < 1 || grid[1] != (unsigned)p->num_heads ||
               grid[2] != (unsigned)p->num_batches))
    return pt_flash_r_variant;
  /* Not a CustomMaskType: same conclusion. */
  if (p->custom_mask_type > PT_ME_MASK_BOTTOM_RIGHT) return pt_flash_r_variant;
  if (p->num_batches <= 0 || p->num_heads <= 0 || p->num_queries <= 0 || p->num_keys <= 0 ||
      !p->query_ptr || !p->key_ptr || !p->value_ptr || !p->output_ptr)
    return pt_flash_r_shape;
  /* Dropout on: the use_dropout flag. The bytes after it are set only with
   * dropout on and are stale otherwise (see PT_ME_DROPOUT_STATE_BYTES). */
  if (p->dropout_state[0] != 0) return pt_flash_r_dropout;
  /* Nested tensors and the varlen entry point: per-batch sequence starts or
   * key counts, which the descriptor cannot express. */
  if (p->seqstart_q_ptr || p->seqstart_k_ptr || p->seqlen_k_ptr) return pt_flash_r_varlen;
  /* A sliding window hides the oldest keys, which the decode kernel does not. */
  if (p->window_size != 0) return pt_me_r_window;
  /* A moved causal diagonal (a fixed offset under a causal mask) is not the
   * bottom-right diagonal the decode kernel applies. */
  if (p->causal_diagonal_offset && p->custom_mask_type != PT_ME_MASK_NONE) return pt_me_r_diagonal;
  /* Top-left: query row i sees keys 0..i. For one query and one key that is
   * no mask at all; anything else hides the newest keys, unlike decode. */
  if (p->custom_mask_type == PT_ME_MASK_TOP_LEFT && !(p->num_queries == 1 && p->num_keys == 1))
    return pt_me_r_top_left;
  /* Training: the backward pass reads this LSE, laid out [B, H, rows padded
   * to 32]; the decode kernel writes [B, H, seqlen_q] only. */
  if (p->logsumexp_ptr) return pt_me_r_lse;
  /* head_dim_value (v's and o's head size) may differ from head_dim (q's and k's): it goes
   * into the descriptor, and the decode kernel's check decides, as for head_dim itself (it
   * takes 192 with 128, MLA as Hugging Face's DeepSeek-V3 calls SDPA, and no other pair). */
  if (p->num_queries > PT_ME_MAX_ROWS) return pt_flash_r_prefill;
  return NULL;
}

void pt_mem_eff_to_desc(const struct pt_mem_eff_params *p, int dtype, struct pt_attn_desc *d) {
  memset(d, 0, sizeof *d);
  d->q = p->query_ptr;
  d->k = p->key_ptr;
  d->v = p->value_ptr;
  d->o = p->output_ptr;
  d->lse = NULL;
  d->dtype = dtype;
  d->b = p->num_batches;
  d->h = p->num_heads;
  d->h_k = p->num_heads;
  d->seqlen_q = p->num_queries;
  d->seqlen_k = p->num_keys;
  d->head_dim = p->head_dim;
  d->v_head_dim = p->head_dim_value;
  d->q_batch_stride = p->q_strideB;
  d->q_row_stride = p->q_strideM;
  d->q_head_stride = p->q_strideH;
  d->k_batch_stride = p->k_strideB;
  d->k_row_stride = p->k_strideM;
  d->k_head_stride = p->k_strideH;
  d->v_batch_stride = p->v_strideB;
  d->v_row_stride = p->v_strideM;
  d->v_head_stride = p->v_strideH;
  /* The kernel moves output_ptr by batch * num_queries * o_strideM and by
   * head * head_dim_value (kernel_forward.h, advance_to_block). */
  d->o_batch_stride = (int64_t)p->num_queries * p->o_strideM;
  d->o_row_stride = p->o_strideM;
  d->o_head_stride = p->head_dim_value;
  d->scale = p->scale;
  /* Top-left on 1 x 1 (the only top-left accepted) masks nothing. */
  d->causal = p->custom_mask_type == PT_ME_MASK_BOTTOM_RIGHT;
  /* One KV head expanded to every query head (head stride 0): as one KV
   * head, the kernel reads K/V once for all heads, when all their rows fit
   * one CTA; else each head reads the same K/V through stride 0. */
  if (p->k_strideH == 0 && p->v_strideH == 0 &&
      (int64_t)p->num_queries * p->num_heads <= PT_ME_MAX_ROWS)
    d->h_k = 1;
  d->bias = p->attn_bias_ptr;
  if (d->bias) {
    d->bias_batch_stride = p->bias_strideB;
    d->bias_head_stride = p->bias_strideH;
    d->bias_row_stride = p->bias_strideM;
  }
}

const char *pt_mem_eff_read(const void *params, size_t bytes, const char *name,
                            const unsigned grid[3], struct pt_attn_desc *d) {
  struct pt_mem_eff_params p;
  const char *why = pt_mem_eff_decode(params, bytes, &p);
  if (why) return why;
  int dtype = PT_DTYPE_FP16;
  why = pt_mem_eff_name_dtype(name, &dtype);
  if (why) return why;
  why = pt_mem_eff_eligible(&p, grid);
  if (why) return why;
  pt_mem_eff_to_desc(&p, dtype, d);
  return NULL;
}
