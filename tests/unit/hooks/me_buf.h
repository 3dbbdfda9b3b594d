/* Synthetic AttentionKernel<...>::Params buffers (torch's mem-efficient SDPA
 * forward) for the hook tests.
 *
 * Written with literal byte offsets, independently of the mirror struct in
 * hooks/mem_eff_params.h: the offsets torch 2.11's launches carry on the
 * H200 (x86-64), 272 bytes; from ME_DROPOUT_STATE on, zero unless dropout. */
#ifndef PT_TEST_ME_BUF_H
#define PT_TEST_ME_BUF_H
#include <stdint.h>
#include <string.h>

enum {
  ME_QUERY_PTR = 0, ME_KEY_PTR = 8, ME_VALUE_PTR = 16, ME_ATTN_BIAS_PTR = 24,
  ME_SEQSTART_Q_PTR = 32, ME_SEQSTART_K_PTR = 40, ME_SEQLEN_K_PTR = 48,
  ME_CAUSAL_DIAGONAL_OFFSET = 56, ME_OUTPUT_PTR = 64, ME_OUTPUT_ACCUM_PTR = 72,
  ME_LOGSUMEXP_PTR = 80, ME_WINDOW_SIZE = 88, ME_SCALE = 92, ME_HEAD_DIM = 96,
  ME_HEAD_DIM_VALUE = 100, ME_NUM_QUERIES = 104, ME_NUM_KEYS = 108, ME_NUM_KEYS_ABSOLUTE = 112,
  ME_CUSTOM_MASK_TYPE = 116, ME_Q_STRIDE_M = 120, ME_K_STRIDE_M = 124, ME_V_STRIDE_M = 128,
  ME_BIAS_STRIDE_M = 132, ME_O_STRIDE_M = 136, ME_Q_STRIDE_H = 140, ME_K_STRIDE_H = 144,
  ME_V_STRIDE_H = 148, ME_BIAS_STRIDE_H = 152, ME_Q_STRIDE_B = 160, ME_K_STRIDE_B = 168,
  ME_V_STRIDE_B = 176, ME_BIAS_STRIDE_B = 184, ME_NUM_BATCHES = 192, ME_NUM_HEADS = 196,
  ME_DROPOUT_STATE = 200,
  ME_BYTES = 272,
};

struct me_buf { _Alignas(16) unsigned char b[ME_BYTES + 16]; };

#define ME_PUT(buf, off, type, val)                        \
  do {                                                     \
    type v_ = (val);                                       \
    memcpy((buf)->b + (off), &v_, sizeof v_);              \
  } while (0)

#define ME_PTR(x) ((void *)(uintptr_t)(x))

#define ME_Q ME_PTR(0x7f0000100000ull)
#define ME_K ME_PTR(0x7f0000200000ull)
#define ME_V ME_PTR(0x7f0000300000ull)
#define ME_O ME_PTR(0x7f0000400000ull)
#define ME_BIAS ME_PTR(0x7f0000500000ull)
#define ME_ACCUM ME_PTR(0x7f0000600000ull)

/* A decode launch as torch 2.11 makes it for a left-padded HF batch: q
 * [b, nq, h, d] (SDPA's transposed [b, h, nq, d], so heads are d apart and
 * rows h*d apart), K/V in HF's cache [b, h, s_alloc, d] seen as
 * [b, nk, h, d] (rows d apart, heads s_alloc*d apart; repeat_kv copied them
 * to h heads), O contiguous [b, nq, h, d], and the padding mask as a bias
 * [b, 1, nq, kpad] broadcast over heads (head stride 0; torch pads the key
 * dim of the bias to a multiple of 16). With dv (MLA: DeepSeek-V3's q/k 192,
 * v 128) V and O are dv wide instead. */
struct me_shape {
  int b, h, nq, nk, s_alloc, d;
  int dv;          /* head_dim_value (v and O); 0: d */
  int bias;        /* 0: none, 1: broadcast over heads, 2: per head */
  int mask;        /* custom_mask_type */
};

/* HF decode, left-padded batch of 8, 32 heads (repeat_kv expanded), 4100 keys in a 4608-slot
 * cache, bf16, the padding mask broadcast over heads. */
static const struct me_shape me_hf = {.b = 8, .h = 32, .nq = 1, .nk = 4100, .s_alloc = 4608,
                                      .d = 128, .bias = 1, .mask = 0};
/* The same batch as DeepSeek-V3 hands it over under HF's SDPA (MLA): 128 heads of their own,
 * q and k 192 wide, v and O 128, 1000 keys in a 1024-slot cache. */
static const struct me_shape me_mla = {.b = 8, .h = 128, .nq = 1, .nk = 1000, .s_alloc = 1024,
                                       .d = 192, .dv = 128, .bias = 1, .mask = 0};

static inline int me_kpad(const struct me_shape *s) { return (s->nk + 15) / 16 * 16; }
static inline int me_dv(const struct me_shape *s) { return s->dv ? s->dv : s->d; }

static inline void me_fill(struct me_buf *p, const struct me_shape *s) {
  memset(p, 0, sizeof *p);
  ME_PUT(p, ME_QUERY_PTR, void *, ME_Q);
  ME_PUT(p, ME_KEY_PTR, void *, ME_K);
  ME_PUT(p, ME_VALUE_PTR, void *, ME_V);
  ME_PUT(p, ME_OUTPUT_PTR, void *, ME_O);
  /* torch's scratch for bf16 with head_dim > kKeysPerBlock: never read */
  ME_PUT(p, ME_OUTPUT_ACCUM_PTR, void *, ME_ACCUM);
  ME_PUT(p, ME_SCALE, float, 0.125f);
  ME_PUT(p, ME_HEAD_DIM, int32_t, s->d);
  ME_PUT(p, ME_HEAD_DIM_VALUE, int32_t, me_dv(s));
  ME_PUT(p, ME_NUM_QUERIES, int32_t, s->nq);
  ME_PUT(p, ME_NUM_KEYS, int32_t, s->nk);
  ME_PUT(p, ME_NUM_KEYS_ABSOLUTE, int32_t, s->nk);
  ME_PUT(p, ME_CUSTOM_MASK_TYPE, uint8_t, (uint8_t)s->mask);
  ME_PUT(p, ME_Q_STRIDE_M, int32_t, s->h * s->d);
  ME_PUT(p, ME_K_STRIDE_M, int32_t, s->d);
  ME_PUT(p, ME_V_STRIDE_M, int32_t, me_dv(s) + 8); /* V apart from K, so a swapped field shows */
  ME_PUT(p, ME_O_STRIDE_M, int32_t, s->h * me_dv(s));
  ME_PUT(p, ME_Q_STRIDE_H, int32_t, s->d);
  ME_PUT(p, ME_K_STRIDE_H, int32_t, s->s_alloc * s->d);
  ME_PUT(p, ME_V_STRIDE_H, int32_t, s->s_alloc * me_dv(s) + 16);
  ME_PUT(p, ME_Q_STRIDE_B, int64_t, (int64_t)s->nq * s->h * s->d);
  ME_PUT(p, ME_K_STRIDE_B, int64_t, (int64_t)s->h * s->s_alloc * s->d);
  ME_PUT(p, ME_V_STRIDE_B, int64_t, (int64_t)s->h * s->s_alloc * me_dv(s) + 24);
  if (s->bias) {
    const int kp = me_kpad(s);
    ME_PUT(p, ME_ATTN_BIAS_PTR, void *, ME_BIAS);
    ME_PUT(p, ME_BIAS_STRIDE_M, int32_t, kp);
    ME_PUT(p, ME_BIAS_STRIDE_H, int64_t, s->bias == 2 ? (int64_t)s->nq * kp : 0);
    ME_PUT(p, ME_BIAS_STRIDE_B, int64_t, (int64_t)(s->bias == 2 ? s->h : 1) * s->nq * kp);
  }
  ME_PUT(p, ME_NUM_BATCHES, int32_t, s->b);
  ME_PUT(p, ME_NUM_HEADS, int32_t, s->h);
  /* the dropout state stays zero (memset above), as torch leaves it without dropout */
}

/* torch's grid: (ceil(nq / 64) query blocks, heads, batches). */
static inline void me_grid(const struct me_shape *s, unsigned g[3]) {
  g[0] = (unsigned)((s->nq + 63) / 64);
  g[1] = (unsigned)s->h;
  g[2] = (unsigned)s->b;
}

#define ME_BF16_NAME                                                                               \
  "_Z40fmha_cutlassF_bf16_aligned_64x128_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutl" \
  "ass10bfloat16_tENS1_4arch4Sm80ELb1ELi64ELi128ELi128ELb1ELb1EE6ParamsE"
#define ME_F16_NAME                                                                                \
  "_Z37fmha_cutlassF_f16_aligned_32x128_gmem_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cut" \
  "lass6half_tENS1_4arch4Sm80ELb1ELi32ELi128ELi65536ELb1ELb1EE6ParamsE"
#define ME_F32_NAME                                                                                \
  "_Z39fmha_cutlassF_f32_aligned_64x64_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIfNS_4arch" \
  "4Sm80ELb1ELi64ELi64ELi64ELb1ELb1EE6ParamsE"
#define ME_BWD_NAME                                                                                \
  "_Z41fmha_cutlassB_bf16_aligned_64x64_k64_sm80N22PyTorchMemEffAttention23AttentionBackwardKernel" \
  "IN7cutlass4arch4Sm80ENS1_10bfloat16_tELb1ELb0ELb1ELi64ELi64ELi64ELb0EE6ParamsE"

#endif
