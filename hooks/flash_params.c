/* Flash_fwd_params layouts, decoder and eligibility (see flash_params.h).
 *
 * The C mirror structs below restate the field order of FA2's flash.h (the
 * C++ base class Qkv_params is laid out first, as a C++ compiler does for a
 * standard-layout single-inheritance struct); the offsets are computed here
 * by the C compiler and pinned by static assertions to the values measured
 * from the real headers, so a typo in the mirror fails the build. */
#include "hooks/flash_params.h"

#include <stdbool.h>
#include <string.h>

#include "hooks/size_reason.h"

/* Fields up to and including softcap: identical in both layouts. */
#define PT_FA_HEAD                                                                   \
  void *q_ptr, *k_ptr, *v_ptr;                                                       \
  int64_t q_batch_stride, k_batch_stride, v_batch_stride;                            \
  int64_t q_row_stride, k_row_stride, v_row_stride;                                  \
  int64_t q_head_stride, k_head_stride, v_head_stride;                               \
  int h, h_k, h_h_k_ratio;                                                           \
  /* Flash_fwd_params proper */                                                      \
  void *o_ptr, *oaccum_ptr;                                                          \
  int64_t o_batch_stride, o_row_stride, o_head_stride;                               \
  void *p_ptr, *softmax_lse_ptr, *softmax_lseaccum_ptr;                              \
  int b, seqlen_q, seqlen_k, seqlen_knew, d, seqlen_q_rounded, seqlen_k_rounded,     \
      d_rounded, rotary_dim, total_q;                                                \
  float scale_softmax, scale_softmax_log2;                                           \
  int *cu_seqlens_q, *cu_seqlens_k, *leftpad_k, *seqused_k, *blockmask;              \
  void *knew_ptr, *vnew_ptr;                                                         \
  int64_t knew_batch_stride, vnew_batch_stride, knew_row_stride, vnew_row_stride,    \
      knew_head_stride, vnew_head_stride;                                            \
  void *rotary_cos_ptr, *rotary_sin_ptr;                                             \
  int *cache_batch_idx, *block_table;                                                \
  int64_t block_table_batch_stride;                                                  \
  int page_block_size;                                                               \
  float p_dropout;                                                                   \
  uint8_t p_dropout_in_uint8_t;                                                      \
  float rp_dropout, scale_softmax_rp_dropout;                                        \
  int window_size_left, window_size_right;                                           \
  float softcap;

/* Fields after philox_args: identical in both layouts, shifted by 8. */
#define PT_FA_TAIL                                                                   \
  uint64_t *rng_state;                                                               \
  uint8_t is_bf16, is_causal, is_seqlens_k_cumulative, is_rotary_interleaved;        \
  int num_splits;                                                                    \
  void *alibi_slopes_ptr;                                                            \
  int64_t alibi_slopes_batch_stride;                                                 \
  uint8_t unpadded_lse, seqlenq_ngroups_swapped;

/* at::PhiloxCudaState: uint64 seed, union{uint64, int64*} offset, uint32
 * offset_intragraph, bool captured -> 24 bytes, 8-aligned. */
struct pt_fa_philox24 { uint64_t seed, offset; uint32_t intragraph; uint8_t captured; };

struct pt_fa_params464 { PT_FA_HEAD struct pt_fa_philox24 philox_args; PT_FA_TAIL };
struct pt_fa_params472 { PT_FA_HEAD uint64_t philox_args[4]; PT_FA_TAIL };

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(struct pt_fa_philox24) == 24, "PhiloxCudaState mirror");
_Static_assert(sizeof(struct pt_fa_params464) == 464, "Flash_fwd_params 464 mirror");
_Static_assert(sizeof(struct pt_fa_params472) == 472, "Flash_fwd_params 472 mirror");
/* Offsets measured with offsetof on the real headers (C++). */
#define PT_FA_OFF(s, f, v) _Static_assert(offsetof(struct s, f) == (v), #s "." #f)
PT_FA_OFF(pt_fa_params464, h, 96);
PT_FA_OFF(pt_fa_params464, o_ptr, 112);
PT_FA_OFF(pt_fa_params464, softmax_lse_ptr, 160);
PT_FA_OFF(pt_fa_params464, b, 176);
PT_FA_OFF(pt_fa_params464, scale_softmax, 216);
PT_FA_OFF(pt_fa_params464, cu_seqlens_q, 224);
PT_FA_OFF(pt_fa_params464, knew_ptr, 264);
PT_FA_OFF(pt_fa_params464, block_table, 352);
PT_FA_OFF(pt_fa_params464, p_dropout, 372);
PT_FA_OFF(pt_fa_params464, softcap, 396);
PT_FA_OFF(pt_fa_params464, philox_args, 400);
PT_FA_OFF(pt_fa_params464, is_bf16, 432);
PT_FA_OFF(pt_fa_params464, num_splits, 436);
PT_FA_OFF(pt_fa_params464, alibi_slopes_ptr, 440);
PT_FA_OFF(pt_fa_params464, unpadded_lse, 456);
PT_FA_OFF(pt_fa_params464, seqlenq_ngroups_swapped, 457);
PT_FA_OFF(pt_fa_params472, philox_args, 400);
PT_FA_OFF(pt_fa_params472, is_bf16, 440);
PT_FA_OFF(pt_fa_params472, num_splits, 444);
PT_FA_OFF(pt_fa_params472, alibi_slopes_ptr, 448);
PT_FA_OFF(pt_fa_params472, seqlenq_ngroups_swapped, 465);
#define PT_FA_HOST_OK 1
#else
/* Another host ABI: the mirrors may not match what the kernels expect. */
#define PT_FA_HOST_OK 0
#endif

#define PT_FA_LAYOUT(s, n)                                                                    \
  {sizeof(struct s), n, offsetof(struct s, rng_state), offsetof(struct s, is_bf16),           \
   offsetof(struct s, is_causal), offsetof(struct s, is_seqlens_k_cumulative),                \
   offsetof(struct s, is_rotary_interleaved), offsetof(struct s, num_splits),                 \
   offsetof(struct s, alibi_slopes_ptr), offsetof(struct s, alibi_slopes_batch_stride),       \
   offsetof(struct s, unpadded_lse), offsetof(struct s, seqlenq_ngroups_swapped)}

static const struct pt_flash_layout pt_fa_layouts[] = {
    PT_FA_LAYOUT(pt_fa_params464, "Flash_fwd_params/464 (PhiloxCudaState; torch <= 2.11)"),
    PT_FA_LAYOUT(pt_fa_params472, "Flash_fwd_params/472 (philox_args uint64_t[4])"),
};

const struct pt_flash_layout *pt_flash_layout_for(size_t bytes) {
  if (!PT_FA_HOST_OK) return NULL;
  for (size_t i = 0; i < sizeof pt_fa_layouts / sizeof pt_fa_layouts[0]; i++)
    if (pt_fa_layouts[i].bytes == bytes) return &pt_fa_layouts[i];
  return NULL;
}

/* ---- reasons (short, static: they are stats keys) ---------------------- */
const char pt_flash_r_dtype[] = "dtype not fp16/bf16";
const char pt_flash_r_head_dim[] = "head_dim not 64/80/96/128/256";
const char pt_flash_r_dropout[] = "dropout";
const char pt_flash_r_return_softmax[] = "return softmax";
const char pt_flash_r_alibi[] = "alibi";
const char pt_flash_r_softcap[] = "softcap";
const char pt_flash_r_local[] = "local window";
const char pt_flash_r_paged[] = "paged kv";
const char pt_flash_r_appended[] = "appended kv";
const char pt_flash_r_rotary[] = "rotary";
const char pt_flash_r_varlen[] = "varlen";
const char pt_flash_r_cache_batch_idx[] = "cache_batch_idx";
const char pt_flash_r_leftpad[] = "leftpad_k";
const char pt_flash_r_seqused_k[] = "seqused_k";
const char pt_flash_r_unpadded_lse[] = "unpadded or transposed lse";
const char pt_flash_r_prefill[] = "seqlen_q > 16 (prefill)";
const char pt_flash_r_rows[] = "rows per kv head > 16";
const char pt_flash_r_causal[] = "causal with seqlen_q > seqlen_k";
const char pt_flash_r_shape[] = "invalid shape";
const char pt_flash_r_variant[] = "unsupported kernel variant";
const char pt_flash_r_size_unknown[] = "param size unknown";

static struct pt_size_reasons pt_fa_size_reasons =
    PT_SIZE_REASONS_INIT("param size ", " not a known Flash_fwd_params layout",
                         "param size not a known Flash_fwd_params layout");

const char *pt_flash_size_reason(size_t bytes) {
  if (bytes == 0) return pt_flash_r_size_unknown;
  return pt_size_reason(&pt_fa_size_reasons, bytes);
}

/* ---- decoder ------------------------------------------------------------ */

/* memcpy reads: the host copy need not be aligned for us, and this keeps the
 * decoder free of type punning. */
#define PT_RD(dst, base, off) memcpy(&(dst), (const char *)(base) + (off), sizeof(dst))

const char *pt_flash_decode(const void *params, size_t bytes, struct pt_flash_fields *out) {
  const struct pt_flash_layout *L = pt_flash_layout_for(bytes);
  if (!L) return pt_flash_size_reason(bytes);
  if (!params) return pt_flash_r_variant;
  memset(out, 0, sizeof *out);
  out->layout_bytes = bytes;
  /* The head is common to both layouts: offsets from the 464 mirror. */
#define H(f) offsetof(struct pt_fa_params464, f)
  PT_RD(out->q, params, H(q_ptr));
  PT_RD(out->k, params, H(k_ptr));
  PT_RD(out->v, params, H(v_ptr));
  PT_RD(out->q_batch_stride, params, H(q_batch_stride));
  PT_RD(out->k_batch_stride, params, H(k_batch_stride));
  PT_RD(out->v_batch_stride, params, H(v_batch_stride));
  PT_RD(out->q_row_stride, params, H(q_row_stride));
  PT_RD(out->k_row_stride, params, H(k_row_stride));
  PT_RD(out->v_row_stride, params, H(v_row_stride));
  PT_RD(out->q_head_stride, params, H(q_head_stride));
  PT_RD(out->k_head_stride, params, H(k_head_stride));
  PT_RD(out->v_head_stride, params, H(v_head_stride));
  PT_RD(out->h, params, H(h));
  PT_RD(out->h_k, params, H(h_k));
  PT_RD(out->h_h_k_ratio, params, H(h_h_k_ratio));
  PT_RD(out->o, params, H(o_ptr));
  PT_RD(out->oaccum, params, H(oaccum_ptr));
  PT_RD(out->o_batch_stride, params, H(o_batch_stride));
  PT_RD(out->o_row_stride, params, H(o_row_stride));
  PT_RD(out->o_head_stride, params, H(o_head_stride));
  PT_RD(out->p, params, H(p_ptr));
  PT_RD(out->lse, params, H(softmax_lse_ptr));
  PT_RD(out->lseaccum, params, H(softmax_lseaccum_ptr));
  PT_RD(out->b, params, H(b));
  PT_RD(out->seqlen_q, params, H(seqlen_q));
  PT_RD(out->seqlen_k, params, H(seqlen_k));
  PT_RD(out->seqlen_knew, params, H(seqlen_knew));
  PT_RD(out->d, params, H(d));
  PT_RD(out->d_rounded, params, H(d_rounded));
  PT_RD(out->rotary_dim, params, H(rotary_dim));
  PT_RD(out->total_q, params, H(total_q));
  PT_RD(out->scale_softmax, params, H(scale_softmax));
  PT_RD(out->scale_softmax_log2, params, H(scale_softmax_log2));
  PT_RD(out->cu_seqlens_q, params, H(cu_seqlens_q));
  PT_RD(out->cu_seqlens_k, params, H(cu_seqlens_k));
  PT_RD(out->leftpad_k, params, H(leftpad_k));
  PT_RD(out->seqused_k, params, H(seqused_k));
  PT_RD(out->blockmask, params, H(blockmask));
  PT_RD(out->knew, params, H(knew_ptr));
  PT_RD(out->vnew, params, H(vnew_ptr));
  PT_RD(out->rotary_cos, params, H(rotary_cos_ptr));
  PT_RD(out->rotary_sin, params, H(rotary_sin_ptr));
  PT_RD(out->cache_batch_idx, params, H(cache_batch_idx));
  PT_RD(out->block_table, params, H(block_table));
  PT_RD(out->page_block_size, params, H(page_block_size));
  PT_RD(out->p_dropout, params, H(p_dropout));
  PT_RD(out->window_size_left, params, H(window_size_left));
  PT_RD(out->window_size_right, params, H(window_size_right));
  PT_RD(out->softcap, params, H(softcap));
#undef H
  /* The tail moves with the size of philox_args. */
  PT_RD(out->is_bf16, params, L->off_is_bf16);
  PT_RD(out->is_causal, params, L->off_is_causal);
  PT_RD(out->is_seqlens_k_cumulative, params, L->off_is_seqlens_k_cumulative);
  PT_RD(out->is_rotary_interleaved, params, L->off_is_rotary_interleaved);
  PT_RD(out->num_splits, params, L->off_num_splits);
  PT_RD(out->alibi_slopes, params, L->off_alibi_slopes_ptr);
  PT_RD(out->unpadded_lse, params, L->off_unpadded_lse);
  PT_RD(out->seqlenq_ngroups_swapped, params, L->off_seqlenq_ngroups_swapped);
  return NULL;
}

/* ---- eligibility --------------------------------------------------------- */

/* Decode query rows per KV head that one CTA of Ponytail's kernel holds. */
#define PT_FA_MAX_ROWS 16

static int pt_fa_ceil_div(int a, int b) { return (a + b - 1) / b; }

/* FA2 launches split-KV with grid (ceil(seqlen_q / 64), splits > 1 ? splits :
 * b, splits > 1 ? b * h : h) and the forward kernel with (m blocks, b, h). A
 * launch whose geometry disagrees was not produced from these params the way
 * we assume (another variant, or a layout that only shares the size). */
static bool pt_fa_grid_matches(const struct pt_flash_fields *f, enum pt_flash_kernel kind,
                               const unsigned grid[3]) {
  if (!grid) return true;
  if (kind == PT_FLASH_K_SPLITKV) {
    bool split = f->num_splits > 1;
    unsigned gy = (unsigned)(split ? f->num_splits : f->b);
    unsigned long long gz = split ? (unsigned long long)f->b * (unsigned)f->h : (unsigned)f->h;
    return grid[0] == (unsigned)pt_fa_ceil_div(f->seqlen_q, 64) && grid[1] == gy && grid[2] == gz;
  }
  if (kind == PT_FLASH_K_FWD)
    return grid[0] >= 1 && grid[1] == (unsigned)f->b && grid[2] == (unsigned)f->h;
  return true;
}

const char *pt_flash_eligible(const struct pt_flash_fields *f, enum pt_flash_kernel kind,
                              const unsigned grid[3]) {
  if (kind != PT_FLASH_K_SPLITKV && kind != PT_FLASH_K_FWD) return pt_flash_r_variant;
  if (f->b <= 0 || f->h <= 0 || f->h_k <= 0 || f->h % f->h_k != 0 || f->seqlen_q <= 0 ||
      f->seqlen_k <= 0 || !f->q || !f->k || !f->v || !f->o)
    return pt_flash_r_shape;
  if (!pt_fa_grid_matches(f, kind, grid)) return pt_flash_r_variant;
  /* is_bf16 is FA2's only dtype tag (fp16 otherwise); a byte that is not a
   * C++ bool means these bytes are not what we think they are. */
  if (f->is_bf16 > 1 || f->is_causal > 1) return pt_flash_r_dtype;
  /* The decode kernels' head dims (kernels/attn_plan.h, pt_attn_plan_dims). */
  if (f->d != 64 && f->d != 80 && f->d != 96 && f->d != 128 && f->d != 256) return pt_flash_r_head_dim;
  if (f->p_dropout < 1.0f) return pt_flash_r_dropout;
  if (f->p) return pt_flash_r_return_softmax;
  if (f->alibi_slopes) return pt_flash_r_alibi;
  if (f->softcap != 0.0f) return pt_flash_r_softcap;
  if (!f->is_causal && (f->window_size_left >= 0 || f->window_size_right >= 0))
    return pt_flash_r_local;
  if (f->block_table) return pt_flash_r_paged;
  if (f->knew || f->vnew || f->seqlen_knew > 0) return pt_flash_r_appended;
  if (f->rotary_cos || f->rotary_sin || f->rotary_dim > 0) return pt_flash_r_rotary;
  if (f->cu_seqlens_q || f->cu_seqlens_k) return pt_flash_r_varlen;
  if (f->cache_batch_idx) return pt_flash_r_cache_batch_idx;
  if (f->leftpad_k) return pt_flash_r_leftpad;
  if (f->seqused_k) return pt_flash_r_seqused_k;
  /* Both flags change where FA2 writes the LSE ([h, total_q] or [h, seqlen_q,
   * b]); Ponytail writes [b, h, seqlen_q] only. */
  if (f->unpadded_lse || f->seqlenq_ngroups_swapped) return pt_flash_r_unpadded_lse;
  if (f->is_causal && f->seqlen_q > f->seqlen_k) return pt_flash_r_causal;
  /* Last of the checks that are not about the query length: torch_flash.c
   * sends a launch refused here as prefill to the prefill kernel
   * (PONYTAIL_ATTN_PREFILL). Keep every check that applies to both kernels
   * above this line. */
  if (f->seqlen_q > PT_FA_MAX_ROWS) return pt_flash_r_prefill;
  if ((long long)f->seqlen_q * (f->h / f->h_k) > PT_FA_MAX_ROWS) return pt_flash_r_rows;
  return NULL;
}

void pt_flash_to_desc(const struct pt_flash_fields *f, struct pt_attn_desc *d) {
  memset(d, 0, sizeof *d);
  d->q = f->q;
  d->k = f->k;
  d->v = f->v;
  d->o = (void *)f->o;
  d->lse = (float *)f->lse;
  d->dtype = f->is_bf16 ? PT_DTYPE_BF16 : PT_DTYPE_FP16;
  d->b = f->b;
  d->h = f->h;
  d->h_k = f->h_k;
  d->seqlen_q = f->seqlen_q;
  d->seqlen_k = f->seqlen_k;
  d->head_dim = f->d;
  d->q_batch_stride = f->q_batch_stride;
  d->q_row_stride = f->q_row_stride;
  d->q_head_stride = f->q_head_stride;
  d->k_batch_stride = f->k_batch_stride;
  d->k_row_stride = f->k_row_stride;
  d->k_head_stride = f->k_head_stride;
  d->v_batch_stride = f->v_batch_stride;
  d->v_row_stride = f->v_row_stride;
  d->v_head_stride = f->v_head_stride;
  d->o_batch_stride = f->o_batch_stride;
  d->o_row_stride = f->o_row_stride;
  d->o_head_stride = f->o_head_stride;
  /* Without softcap (refused above) FA2 sets scale_softmax = softmax_scale. */
  d->scale = f->scale_softmax;
  d->causal = f->is_causal ? 1 : 0;
}
