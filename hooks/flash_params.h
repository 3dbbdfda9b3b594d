/* FlashAttention-2's Flash_fwd_params: the layouts Ponytail understands, a
 * decoder from the raw parameter block of a launch into plain fields, the
 * eligibility rules for Ponytail's decode kernel, and the translation into
 * the neutral struct pt_attn_desc (kernels/attn.h).
 *
 * The FA2 kernels take one `const __grid_constant__ Flash_fwd_params` by
 * value, so args[0] of a launch points at a host copy of the whole struct and
 * the launch's parameter size is sizeof(Flash_fwd_params). The struct has no
 * version field: the size is the only layout tag, so a size we do not know is
 * always refused (a silent misread would corrupt attention output).
 *
 * Known layouts (x86-64 host ABI, which nvcc also uses for kernel params):
 *   464 bytes: `philox_args` is an at::PhiloxCudaState (24 bytes). Upstream
 *     flash-attention csrc/flash_attn/src/flash.h from "Implement
 *     cache_leftpad" (2024-07) until PR #2669 (2026); PyTorch builds these
 *     sources as namespace pytorch_flash since its flash-attention submodule
 *     (PR #146372, 2025): torch 2.7 ... 2.11.
 *   472 bytes: the same fields with `philox_args` as an opaque uint64_t[4]
 *     (upstream PR #2669; PyTorch's submodule bump PR #191348, after 2.11).
 * Every field before philox_args has the same offset in both; the fields after
 * it move by 8 bytes. Offsets: see flash_params.c (static-asserted). */
#ifndef PT_FLASH_PARAMS_H
#define PT_FLASH_PARAMS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/attn.h"

/* Every Flash_fwd_params field the decoder and the eligibility rules read,
 * independent of the layout. Pointers are device addresses (never
 * dereferenced on the host). Strides are in elements. */
struct pt_flash_fields {
  size_t layout_bytes;       /* 464 or 472: which layout this came from */
  const void *q, *k, *v, *o;
  int64_t q_batch_stride, k_batch_stride, v_batch_stride;
  int64_t q_row_stride, k_row_stride, v_row_stride;
  int64_t q_head_stride, k_head_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int h, h_k, h_h_k_ratio;
  const void *oaccum, *p, *lse, *lseaccum;
  int b, seqlen_q, seqlen_k, seqlen_knew, d, d_rounded, rotary_dim, total_q;
  float scale_softmax, scale_softmax_log2;
  const void *cu_seqlens_q, *cu_seqlens_k, *leftpad_k, *seqused_k, *blockmask;
  const void *knew, *vnew, *rotary_cos, *rotary_sin, *cache_batch_idx, *block_table;
  int page_block_size;
  float p_dropout;           /* probability of KEEPING an activation: 1 = no dropout */
  int window_size_left, window_size_right;
  float softcap;
  uint8_t is_bf16, is_causal, is_seqlens_k_cumulative, is_rotary_interleaved; /* raw bytes */
  int num_splits;
  const void *alibi_slopes;
  uint8_t unpadded_lse, seqlenq_ngroups_swapped;
};

/* Byte offsets of the fields above inside one layout. */
struct pt_flash_layout {
  size_t bytes;
  const char *name;
  size_t off_rng_state, off_is_bf16, off_is_causal, off_is_seqlens_k_cumulative,
      off_is_rotary_interleaved, off_num_splits, off_alibi_slopes_ptr,
      off_alibi_slopes_batch_stride, off_unpadded_lse, off_seqlenq_ngroups_swapped;
};

/* The layout for a parameter block of `bytes` bytes, or NULL. */
const struct pt_flash_layout *pt_flash_layout_for(size_t bytes);

/* Static reason for a parameter size that is no known layout:
 * "param size N not a known Flash_fwd_params layout" (interned per N, a few
 * distinct N; past that a generic text), or "param size unknown" for 0. */
const char *pt_flash_size_reason(size_t bytes);

/* Decodes the host copy of a Flash_fwd_params of `bytes` bytes. NULL on
 * success, else a static reason (unknown size, NULL buffer). */
const char *pt_flash_decode(const void *params, size_t bytes, struct pt_flash_fields *out);

/* Which FA2 kernel a launch belongs to (decides the launch-geometry check). */
enum pt_flash_kernel {
  PT_FLASH_K_SPLITKV = 1, /* flash_fwd_splitkv_kernel */
  PT_FLASH_K_COMBINE = 2, /* flash_fwd_splitkv_combine_kernel */
  PT_FLASH_K_FWD = 3,     /* flash_fwd_kernel */
};

/* Eligibility of a decoded split-KV / forward launch for Ponytail's decode
 * kernel, before the kernel's own pt_attn_decode_supported(): NULL or a static
 * reason. grid may be NULL (no launch-geometry check). */
const char *pt_flash_eligible(const struct pt_flash_fields *f, enum pt_flash_kernel kind,
                              const unsigned grid[3]);

/* The descriptor for Ponytail's kernel: same tensors, strides and LSE as FA2
 * writes them (for the "ngroups swapped" GQA decode layout too: torch then
 * passes h = h_k, seqlen_q = query heads per KV head, and transposed strides,
 * which the descriptor takes as they are). */
void pt_flash_to_desc(const struct pt_flash_fields *f, struct pt_attn_desc *d);

/* The reasons, exported so tests and stats compare pointers/strings. */
extern const char pt_flash_r_dtype[], pt_flash_r_head_dim[], pt_flash_r_dropout[],
    pt_flash_r_return_softmax[], pt_flash_r_alibi[], pt_flash_r_softcap[], pt_flash_r_local[],
    pt_flash_r_paged[], pt_flash_r_appended[], pt_flash_r_rotary[], pt_flash_r_varlen[],
    pt_flash_r_cache_batch_idx[], pt_flash_r_leftpad[], pt_flash_r_seqused_k[],
    pt_flash_r_unpadded_lse[], pt_flash_r_prefill[], pt_flash_r_rows[], pt_flash_r_causal[],
    pt_flash_r_shape[], pt_flash_r_variant[], pt_flash_r_size_unknown[];

#endif
