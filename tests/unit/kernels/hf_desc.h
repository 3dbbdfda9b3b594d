/* The decode descriptor of HF's layout, shared by the kernels/ unit tests.
 * Include after <string.h>, <stdint.h> and kernels/attn.h. */
#ifndef PT_TEST_HF_DESC_H
#define PT_TEST_HF_DESC_H

/* 16-byte aligned fake device addresses: the tests never dereference them. */
#define FAKE(p) ((void *)(uintptr_t)(p))

/* HF decode: q [b, 1, h, d] contiguous, K/V cache [b, h_k, s, d] seen as
 * [b, s, h_k, d], o like q. */
static inline struct pt_attn_desc hf_desc(int b, int h, int h_k, int s, int d) {
  struct pt_attn_desc x;
  memset(&x, 0, sizeof x);
  x.q = FAKE(0x10000);
  x.k = FAKE(0x20000);
  x.v = FAKE(0x30000);
  x.o = FAKE(0x40000);
  x.lse = FAKE(0x50000);
  x.dtype = PT_DTYPE_BF16;
  x.b = b;
  x.h = h;
  x.h_k = h_k;
  x.seqlen_q = 1;
  x.seqlen_k = s;
  x.head_dim = d;
  x.q_batch_stride = (int64_t)h * d;
  x.q_row_stride = (int64_t)h * d;
  x.q_head_stride = d;
  x.k_batch_stride = x.v_batch_stride = (int64_t)h_k * s * d;
  x.k_row_stride = x.v_row_stride = d;
  x.k_head_stride = x.v_head_stride = (int64_t)s * d;
  x.o_batch_stride = x.q_batch_stride;
  x.o_row_stride = x.q_row_stride;
  x.o_head_stride = x.q_head_stride;
  x.scale = 0.088f;
  return x;
}

/* DeepSeek-V3 under HF's SDPA (MLA shapes): q/k head 192, v head 128. q [b, h, 1, 192] and
 * the caches K [b, h_k, s, 192], V [b, h_k, s, 128] contiguous; o (mem-efficient's) [b, 1, h,
 * 128]. */
static inline struct pt_attn_desc mla_desc(int b, int h, int h_k, int s) {
  struct pt_attn_desc x = hf_desc(b, h, h_k, s, 192);
  x.v_head_dim = 128;
  x.v_batch_stride = (int64_t)h_k * s * 128;
  x.v_row_stride = 128;
  x.v_head_stride = (int64_t)s * 128;
  x.o_batch_stride = x.o_row_stride = (int64_t)h * 128;
  x.o_head_stride = 128;
  return x;
}

#endif
