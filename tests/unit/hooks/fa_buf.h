/* Synthetic Flash_fwd_params buffers for the hook tests.
 *
 * Written with literal byte offsets, independently of hooks/flash_params.c:
 * the numbers are offsetof() values measured by compiling flash-attention's
 * csrc/flash_attn/src/flash.h (the 464-byte form with at::PhiloxCudaState and
 * the 472-byte form with uint64_t philox_args[4]) with a C++ compiler for
 * x86-64. Fields after philox_args (offset 400) move by 8 in the 472 form. */
#ifndef PT_TEST_FA_BUF_H
#define PT_TEST_FA_BUF_H
#include <stdint.h>
#include <string.h>

enum {
  FA_Q_PTR = 0, FA_K_PTR = 8, FA_V_PTR = 16,
  FA_Q_BATCH_STRIDE = 24, FA_K_BATCH_STRIDE = 32, FA_V_BATCH_STRIDE = 40,
  FA_Q_ROW_STRIDE = 48, FA_K_ROW_STRIDE = 56, FA_V_ROW_STRIDE = 64,
  FA_Q_HEAD_STRIDE = 72, FA_K_HEAD_STRIDE = 80, FA_V_HEAD_STRIDE = 88,
  FA_H = 96, FA_H_K = 100, FA_H_H_K_RATIO = 104,
  FA_O_PTR = 112, FA_OACCUM_PTR = 120,
  FA_O_BATCH_STRIDE = 128, FA_O_ROW_STRIDE = 136, FA_O_HEAD_STRIDE = 144,
  FA_P_PTR = 152, FA_LSE_PTR = 160, FA_LSEACCUM_PTR = 168,
  FA_B = 176, FA_SEQLEN_Q = 180, FA_SEQLEN_K = 184, FA_SEQLEN_KNEW = 188, FA_D = 192,
  FA_SEQLEN_Q_ROUNDED = 196, FA_SEQLEN_K_ROUNDED = 200, FA_D_ROUNDED = 204,
  FA_ROTARY_DIM = 208, FA_TOTAL_Q = 212,
  FA_SCALE_SOFTMAX = 216, FA_SCALE_SOFTMAX_LOG2 = 220,
  FA_CU_SEQLENS_Q = 224, FA_CU_SEQLENS_K = 232, FA_LEFTPAD_K = 240, FA_SEQUSED_K = 248,
  FA_BLOCKMASK = 256, FA_KNEW_PTR = 264, FA_VNEW_PTR = 272,
  FA_ROTARY_COS = 328, FA_ROTARY_SIN = 336, FA_CACHE_BATCH_IDX = 344, FA_BLOCK_TABLE = 352,
  FA_BLOCK_TABLE_BATCH_STRIDE = 360, FA_PAGE_BLOCK_SIZE = 368,
  FA_P_DROPOUT = 372, FA_P_DROPOUT_U8 = 376, FA_RP_DROPOUT = 380, FA_SCALE_RP_DROPOUT = 384,
  FA_WINDOW_LEFT = 388, FA_WINDOW_RIGHT = 392, FA_SOFTCAP = 396, FA_PHILOX = 400,
  /* 464 layout; add fa_shift(bytes) for 472 */
  FA_RNG_STATE = 424, FA_IS_BF16 = 432, FA_IS_CAUSAL = 433, FA_IS_SEQLENS_K_CUMULATIVE = 434,
  FA_IS_ROTARY_INTERLEAVED = 435, FA_NUM_SPLITS = 436, FA_ALIBI = 440,
  FA_ALIBI_BATCH_STRIDE = 448, FA_UNPADDED_LSE = 456, FA_NGROUPS_SWAPPED = 457,
};

static inline size_t fa_shift(size_t bytes) { return bytes == 472 ? 8 : 0; }
static inline int fa_tail(int off) { return off >= FA_RNG_STATE; }

struct fa_buf { size_t bytes; _Alignas(16) unsigned char b[512]; };

#define FA_PUT(buf, off, type, val)                                                 \
  do {                                                                              \
    type v_ = (val);                                                                \
    size_t o_ = (size_t)(off) + (fa_tail(off) ? fa_shift((buf)->bytes) : 0);        \
    memcpy((buf)->b + o_, &v_, sizeof v_);                                          \
  } while (0)

#define FA_PTR(x) ((void *)(uintptr_t)(x))

/* The decode launch torch 2.11 makes for HF GQA decode with the "ngroups
 * swapped" trick: q (b, 1, h_k*G, d) viewed as (b, G, h_k, d), K/V from HF's
 * cache [b, h_k, S_alloc, d] seen as (b, S, h_k, d). */
struct fa_shape {
  int b, h_k, G, seqlen_k, s_alloc, d, bf16, num_splits;
};

static inline void fa_fill(struct fa_buf *p, size_t bytes, const struct fa_shape *s) {
  memset(p, 0, sizeof *p);
  p->bytes = bytes;
  int h = s->h_k, seqlen_q = s->G; /* swapped */
  FA_PUT(p, FA_Q_PTR, void *, FA_PTR(0x7f0000100000ull));
  FA_PUT(p, FA_K_PTR, void *, FA_PTR(0x7f0000200000ull));
  FA_PUT(p, FA_V_PTR, void *, FA_PTR(0x7f0000300000ull));
  FA_PUT(p, FA_Q_BATCH_STRIDE, int64_t, (int64_t)s->h_k * s->G * s->d);
  FA_PUT(p, FA_Q_ROW_STRIDE, int64_t, s->d);
  FA_PUT(p, FA_Q_HEAD_STRIDE, int64_t, (int64_t)s->G * s->d);
  FA_PUT(p, FA_K_BATCH_STRIDE, int64_t, (int64_t)s->h_k * s->s_alloc * s->d);
  FA_PUT(p, FA_K_ROW_STRIDE, int64_t, s->d);
  FA_PUT(p, FA_K_HEAD_STRIDE, int64_t, (int64_t)s->s_alloc * s->d);
  FA_PUT(p, FA_V_BATCH_STRIDE, int64_t, (int64_t)s->h_k * s->s_alloc * s->d + 8);
  FA_PUT(p, FA_V_ROW_STRIDE, int64_t, s->d + 16);
  FA_PUT(p, FA_V_HEAD_STRIDE, int64_t, (int64_t)s->s_alloc * s->d + 24);
  FA_PUT(p, FA_H, int, h);
  FA_PUT(p, FA_H_K, int, s->h_k);
  FA_PUT(p, FA_H_H_K_RATIO, int, 1);
  FA_PUT(p, FA_O_PTR, void *, FA_PTR(0x7f0000400000ull));
  FA_PUT(p, FA_OACCUM_PTR, void *, FA_PTR(s->num_splits > 1 ? 0x7f0000500000ull : 0));
  FA_PUT(p, FA_O_BATCH_STRIDE, int64_t, (int64_t)s->h_k * s->G * s->d + 32);
  FA_PUT(p, FA_O_ROW_STRIDE, int64_t, s->d + 40);
  FA_PUT(p, FA_O_HEAD_STRIDE, int64_t, (int64_t)s->G * s->d + 48);
  FA_PUT(p, FA_LSE_PTR, void *, FA_PTR(0x7f0000600000ull));
  FA_PUT(p, FA_LSEACCUM_PTR, void *, FA_PTR(s->num_splits > 1 ? 0x7f0000700000ull : 0));
  FA_PUT(p, FA_B, int, s->b);
  FA_PUT(p, FA_SEQLEN_Q, int, seqlen_q);
  FA_PUT(p, FA_SEQLEN_K, int, s->seqlen_k);
  FA_PUT(p, FA_D, int, s->d);
  FA_PUT(p, FA_SEQLEN_Q_ROUNDED, int, 128);
  FA_PUT(p, FA_SEQLEN_K_ROUNDED, int, (s->seqlen_k + 127) / 128 * 128);
  FA_PUT(p, FA_D_ROUNDED, int, s->d);
  FA_PUT(p, FA_SCALE_SOFTMAX, float, 0.125f);
  FA_PUT(p, FA_SCALE_SOFTMAX_LOG2, float, 0.125f * 1.44269504f);
  FA_PUT(p, FA_P_DROPOUT, float, 1.0f);
  FA_PUT(p, FA_P_DROPOUT_U8, uint8_t, 255);
  FA_PUT(p, FA_RP_DROPOUT, float, 1.0f);
  FA_PUT(p, FA_SCALE_RP_DROPOUT, float, 0.125f);
  FA_PUT(p, FA_WINDOW_LEFT, int, -1);
  FA_PUT(p, FA_WINDOW_RIGHT, int, -1);
  FA_PUT(p, FA_SOFTCAP, float, 0.0f);
  /* junk in the RNG state and in the 472 form's extra bytes: never read */
  memset(p->b + FA_PHILOX, 0xA5, 24 + fa_shift(bytes));
  FA_PUT(p, FA_RNG_STATE, void *, FA_PTR(0xdeadbeef0ull));
  FA_PUT(p, FA_IS_BF16, uint8_t, (uint8_t)s->bf16);
  FA_PUT(p, FA_IS_CAUSAL, uint8_t, 0);
  FA_PUT(p, FA_IS_SEQLENS_K_CUMULATIVE, uint8_t, 1);
  FA_PUT(p, FA_NUM_SPLITS, int, s->num_splits);
  FA_PUT(p, FA_UNPADDED_LSE, uint8_t, 0);
  FA_PUT(p, FA_NGROUPS_SWAPPED, uint8_t, 0);
}

/* The grid FA2 uses for this shape: splitkv (m blocks of 64, splits or b,
 * b*h or h); the forward kernel (m blocks, b, h). */
static inline void fa_grid_splitkv(const struct fa_shape *s, unsigned g[3]) {
  g[0] = (unsigned)((s->G + 63) / 64);
  g[1] = (unsigned)(s->num_splits > 1 ? s->num_splits : s->b);
  g[2] = (unsigned)(s->num_splits > 1 ? s->b * s->h_k : s->h_k);
}

#endif
