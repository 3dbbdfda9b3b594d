/* torch's mem-efficient SDPA forward (CUTLASS, PyTorchMemEffAttention::
 * AttentionKernel<...>::Params): the layout Ponytail understands, a decoder
 * of a launch's parameter block, the eligibility rules for Ponytail's decode
 * kernel and the translation into struct pt_attn_desc (kernels/attn.h).
 *
 * The kernels (_Z<n>fmha_cutlassF_{bf16,f16,f32}_<variant>) take one Params
 * by value, so args[0] of a launch points at a host copy of the whole struct
 * and the launch's parameter size (cuFuncGetParamInfo) is sizeof(Params).
 * Like FA2's, the struct has no version field: the size is the only layout
 * tag, and a size other than the one below is always refused.
 *
 * Layout: torch 2.11 as its launches carry it, read on the H200 from a
 * padded Hugging Face decode (PONYTAIL_LOG=debug dumps the words of the first
 * refused launch; bench/records/2026-12-01-masked-decode.md): the
 * kernel_forward.h Params with a sliding-window field and no
 * causal_diagonal_ptr, x86-64 (LP64, natural alignment; nvcc lays kernel
 * parameters out as the host compiler does): 272 bytes. The same for every
 * template instance (dtype, arch, tile sizes): only pointee types depend on
 * the template arguments. The dtype is not in the struct: it comes from the
 * kernel's name. Offsets: the mirror below (static-asserted in
 * mem_eff_params.c). An older layout of the same size (causal_diagonal_ptr
 * at 48, output_ptr at 72) puts other fields where num_batches and num_heads
 * are read here, so the launch-grid check refuses it.
 *
 * Tensors, in elements: q [B, num_queries, H, head_dim] through q_strideB,
 * q_strideM, q_strideH (k the same over num_keys, v too but head_dim_value
 * wide); O [B, num_queries, H, head_dim_value] with row stride o_strideM, heads contiguous (head_dim_value
 * apart) and batches num_queries * o_strideM apart (how the kernel advances
 * output_ptr); attn_bias [B, H, num_queries, num_keys] of the q dtype through
 * bias_strideB / bias_strideH / bias_strideM, keys contiguous. */
#ifndef PT_MEM_EFF_PARAMS_H
#define PT_MEM_EFF_PARAMS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/attn.h"

#define PT_MEM_EFF_PARAMS_BYTES 272
/* Bytes from num_heads to the end: the use_dropout flag (the first byte),
 * then the dropout RNG offset and probability, the Philox state and its graph
 * pointers. torch writes the flag on every launch but the rest only when
 * dropout is on: otherwise those bytes are whatever the host stack held (seen
 * non-zero in transformers' continuous batching). So only the flag decides. */
#define PT_ME_DROPOUT_STATE_BYTES 72

/* C mirror of AttentionKernel<...>::Params, field for field up to num_heads.
 * Pointers are device addresses (never dereferenced on the host). */
struct pt_mem_eff_params {
  const void *query_ptr, *key_ptr, *value_ptr, *attn_bias_ptr;
  const int32_t *seqstart_q_ptr, *seqstart_k_ptr, *seqlen_k_ptr;
  uint32_t causal_diagonal_offset;
  void *output_ptr;
  float *output_accum_ptr, *logsumexp_ptr;
  int32_t window_size; /* sliding window; 0: none */
  float scale;
  int32_t head_dim, head_dim_value, num_queries, num_keys, num_keys_absolute;
  uint8_t custom_mask_type; /* enum pt_me_mask */
  int32_t q_strideM, k_strideM, v_strideM, bias_strideM, o_strideM;
  int32_t q_strideH, k_strideH, v_strideH;
  int64_t bias_strideH;
  int64_t q_strideB, k_strideB, v_strideB, bias_strideB;
  int32_t num_batches, num_heads;
  unsigned char dropout_state[PT_ME_DROPOUT_STATE_BYTES];
};

/* AttentionKernel::CustomMaskType. Bottom-right is the decode kernel's
 * causal (the last query row sees every key), as FA2's. */
enum pt_me_mask { PT_ME_MASK_NONE = 0, PT_ME_MASK_TOP_LEFT = 1, PT_ME_MASK_BOTTOM_RIGHT = 2 };

/* Decodes the host copy of a Params of `bytes` bytes. NULL on success, else
 * a static reason ("param size unknown" for 0, "Params layout not recognised
 * (N bytes)" for another size, "unsupported kernel variant" for no buffer). */
const char *pt_mem_eff_decode(const void *params, size_t bytes, struct pt_mem_eff_params *out);

/* The q/k/v/o/bias dtype from a forward kernel's mangled name
 * (_Z<n>fmha_cutlassF_bf16_... / f16_ / f32_): NULL and *dtype set (enum
 * pt_dtype), else "dtype not fp16/bf16" (fp32 or a name not understood). */
const char *pt_mem_eff_name_dtype(const char *mangled_name, int *dtype);

/* Eligibility of a decoded launch for Ponytail's decode kernel, before the
 * kernel's own pt_attn_decode_supported(): NULL or a static reason. grid may
 * be NULL (no launch-geometry check; torch launches (query blocks,
 * num_heads, num_batches)). */
const char *pt_mem_eff_eligible(const struct pt_mem_eff_params *p, const unsigned grid[3]);

/* The descriptor for Ponytail's kernel (after pt_mem_eff_eligible accepted
 * p): same tensors and strides, head_dim_value as v_head_dim (the kernel's
 * check takes or refuses the pair), the bias with its strides, no LSE (torch
 * asks for none in inference; a launch that does is refused). K/V with head
 * stride 0 (one KV head broadcast to every query head) become h_k = 1 when
 * all query rows fit one CTA (num_queries * num_heads <= 16), so K/V are read
 * once; otherwise every head reads the same K/V through stride 0. */
void pt_mem_eff_to_desc(const struct pt_mem_eff_params *p, int dtype, struct pt_attn_desc *d);

/* Decode, dtype, eligibility and descriptor in one: NULL and *d filled, or
 * the first reason. */
const char *pt_mem_eff_read(const void *params, size_t bytes, const char *mangled_name,
                            const unsigned grid[3], struct pt_attn_desc *d);

/* The reasons of this family (beyond the shared flash_params.h ones), exported
 * so tests and stats compare strings. */
extern const char pt_me_r_diagonal[], pt_me_r_top_left[], pt_me_r_lse[], pt_me_r_window[];

#endif
