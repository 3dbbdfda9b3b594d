/* torch's mem-efficient Params (hooks/mem_eff_params.c): decoding 272-byte
 * blobs written at literal offsets (me_buf.h), the descriptor field by field
 * (bias broadcast over heads, per head, none; causal; K/V broadcast), the
 * dtype from the kernel name, and one case per refusal reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/flash_params.h"
#include "hooks/mem_eff_params.h"
#include "tests/unit/hooks/me_buf.h"


static const char *rd(const struct me_buf *p, const struct me_shape *s, const char *name,
                      struct pt_attn_desc *d) {
  unsigned g[3];
  me_grid(s, g);
  return pt_mem_eff_read(p->b, ME_BYTES, name, g, d);
}

/* The strides me_fill writes, as the descriptor must carry them. */
static void assert_qkvo_strides(const struct pt_attn_desc *d, const struct me_shape *s) {
  assert_int_equal(d->q_batch_stride, (int64_t)s->nq * s->h * s->d);
  assert_int_equal(d->q_row_stride, s->h * s->d);
  assert_int_equal(d->q_head_stride, s->d);
  assert_int_equal(d->k_batch_stride, (int64_t)s->h * s->s_alloc * s->d);
  assert_int_equal(d->k_row_stride, s->d);
  assert_int_equal(d->k_head_stride, s->s_alloc * s->d);
  const int dv = me_dv(s);
  assert_int_equal(d->v_batch_stride, (int64_t)s->h * s->s_alloc * dv + 24);
  assert_int_equal(d->v_row_stride, dv + 8);
  assert_int_equal(d->v_head_stride, s->s_alloc * dv + 16);
  /* O: rows o_strideM apart, heads head_dim_value, batches nq * o_strideM */
  assert_int_equal(d->o_row_stride, s->h * dv);
  assert_int_equal(d->o_head_stride, dv);
  assert_int_equal(d->o_batch_stride, (int64_t)s->nq * s->h * dv);
  assert_int_equal(d->head_dim, s->d);
  assert_int_equal(d->v_head_dim, dv);
  assert_int_equal(pt_attn_v_dim(d), dv);
  assert_int_equal(d->q_dim_stride, 0);
  assert_int_equal(d->k_dim_stride, 0);
  assert_int_equal(d->v_dim_stride, 0);
  assert_int_equal(d->o_dim_stride, 0);
}

static void test_decode_fields(void **st) {
  (void)st;
  struct me_buf p;
  me_fill(&p, &me_hf);
  ME_PUT(&p, ME_CAUSAL_DIAGONAL_OFFSET, uint32_t, 7);
  ME_PUT(&p, ME_NUM_KEYS_ABSOLUTE, int32_t, 4242);
  ME_PUT(&p, ME_WINDOW_SIZE, int32_t, 99);
  p.b[ME_DROPOUT_STATE + 9] = 0x77;
  p.b[ME_BYTES - 1] = 0x88;
  struct pt_mem_eff_params m;
  assert_null(pt_mem_eff_decode(p.b, ME_BYTES, &m));
  assert_ptr_equal(m.query_ptr, ME_Q);
  assert_ptr_equal(m.key_ptr, ME_K);
  assert_ptr_equal(m.value_ptr, ME_V);
  assert_ptr_equal(m.attn_bias_ptr, ME_BIAS);
  assert_null(m.seqstart_q_ptr);
  assert_null(m.seqstart_k_ptr);
  assert_null(m.seqlen_k_ptr);
  assert_int_equal(m.causal_diagonal_offset, 7);
  assert_ptr_equal(m.output_ptr, ME_O);
  assert_ptr_equal(m.output_accum_ptr, ME_ACCUM);
  assert_null(m.logsumexp_ptr);
  assert_int_equal(m.window_size, 99);
  assert_true(m.scale == 0.125f);
  assert_int_equal(m.head_dim, 128);
  assert_int_equal(m.head_dim_value, 128);
  assert_int_equal(m.num_queries, 1);
  assert_int_equal(m.num_keys, 4100);
  assert_int_equal(m.num_keys_absolute, 4242);
  assert_int_equal(m.custom_mask_type, 0);
  assert_int_equal(m.q_strideM, 32 * 128);
  assert_int_equal(m.k_strideM, 128);
  assert_int_equal(m.v_strideM, 136);
  assert_int_equal(m.bias_strideM, 4112);
  assert_int_equal(m.o_strideM, 32 * 128);
  assert_int_equal(m.q_strideH, 128);
  assert_int_equal(m.k_strideH, 4608 * 128);
  assert_int_equal(m.v_strideH, 4608 * 128 + 16);
  assert_int_equal(m.bias_strideH, 0);
  assert_int_equal(m.q_strideB, 32 * 128);
  assert_int_equal(m.k_strideB, 32LL * 4608 * 128);
  assert_int_equal(m.v_strideB, 32LL * 4608 * 128 + 24);
  assert_int_equal(m.bias_strideB, 4112);
  assert_int_equal(m.num_batches, 8);
  assert_int_equal(m.num_heads, 32);
  assert_int_equal(m.dropout_state[9], 0x77);
  assert_int_equal(m.dropout_state[PT_ME_DROPOUT_STATE_BYTES - 1], 0x88);
  /* an unaligned host copy decodes the same */
  unsigned char odd[ME_BYTES + 1];
  memcpy(odd + 1, p.b, ME_BYTES);
  struct pt_mem_eff_params m2;
  assert_null(pt_mem_eff_decode(odd + 1, ME_BYTES, &m2));
  assert_int_equal(m2.num_keys, 4100);
  assert_int_equal(m2.bias_strideB, 4112);
  assert_int_equal(m2.dropout_state[PT_ME_DROPOUT_STATE_BYTES - 1], 0x88);
}

/* bf16 decode with the padding mask shared by every head. */
static void test_desc_bf16_padding_bias(void **st) {
  (void)st;
  struct me_buf p;
  me_fill(&p, &me_hf);
  struct pt_attn_desc d;
  memset(&d, 0x5A, sizeof d); /* every field must be written */
  assert_null(rd(&p, &me_hf, ME_BF16_NAME, &d));
  assert_ptr_equal(d.q, ME_Q);
  assert_ptr_equal(d.k, ME_K);
  assert_ptr_equal(d.v, ME_V);
  assert_ptr_equal(d.o, ME_O);
  assert_null(d.lse);
  assert_int_equal(d.dtype, PT_DTYPE_BF16);
  assert_int_equal(d.b, 8);
  assert_int_equal(d.h, 32);
  assert_int_equal(d.h_k, 32);
  assert_int_equal(d.seqlen_q, 1);
  assert_int_equal(d.seqlen_k, 4100);
  assert_int_equal(d.head_dim, 128);
  assert_qkvo_strides(&d, &me_hf);
  assert_true(d.scale == 0.125f);
  assert_int_equal(d.causal, 0);
  assert_ptr_equal(d.bias, ME_BIAS);
  assert_int_equal(d.bias_batch_stride, 4112);
  assert_int_equal(d.bias_head_stride, 0);
  assert_int_equal(d.bias_row_stride, 4112);
}

/* fp16, 4 query rows (speculative decode), a bias of its own per head. */
static void test_desc_f16_per_head_bias(void **st) {
  (void)st;
  struct me_shape s = me_hf;
  s.h = 8;
  s.nq = 4;
  s.nk = 1000;
  s.bias = 2;
  struct me_buf p;
  me_fill(&p, &s);
  struct pt_attn_desc d;
  assert_null(rd(&p, &s, ME_F16_NAME, &d));
  assert_int_equal(d.dtype, PT_DTYPE_FP16);
  assert_int_equal(d.h, 8);
  assert_int_equal(d.h_k, 8);
  assert_int_equal(d.seqlen_q, 4);
  assert_int_equal(d.seqlen_k, 1000);
  assert_qkvo_strides(&d, &s);
  assert_ptr_equal(d.bias, ME_BIAS);
  assert_int_equal(d.bias_row_stride, 1008);
  assert_int_equal(d.bias_head_stride, 4 * 1008);
  assert_int_equal(d.bias_batch_stride, 8 * 4 * 1008);
}

/* No mask at all (mem-efficient chosen for another reason): no bias, and
 * stray bias strides are not carried over. */
static void test_desc_no_bias(void **st) {
  (void)st;
  struct me_shape s = me_hf;
  s.bias = 0;
  struct me_buf p;
  me_fill(&p, &s);
  ME_PUT(&p, ME_BIAS_STRIDE_M, int32_t, 77);
  ME_PUT(&p, ME_BIAS_STRIDE_H, int64_t, 78);
  ME_PUT(&p, ME_BIAS_STRIDE_B, int64_t, 79);
  struct pt_attn_desc d;
  memset(&d, 0x5A, sizeof d);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_null(d.bias);
  assert_int_equal(d.bias_batch_stride, 0);
  assert_int_equal(d.bias_head_stride, 0);
  assert_int_equal(d.bias_row_stride, 0);
  assert_qkvo_strides(&d, &s);
}

static void test_desc_causal(void **st) {
  (void)st;
  struct me_shape s = me_hf;
  s.nq = 4;
  s.mask = 2; /* bottom-right: the decode kernel's causal */
  struct me_buf p;
  me_fill(&p, &s);
  struct pt_attn_desc d;
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.causal, 1);
  assert_int_equal(d.seqlen_q, 4);
  /* top-left on one query and one key masks nothing: accepted, not causal */
  s.nq = 1;
  s.nk = 1;
  s.mask = 1;
  me_fill(&p, &s);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.causal, 0);
  /* none */
  s.mask = 0;
  me_fill(&p, &s);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.causal, 0);
}

/* One KV head expanded to every query head (head strides 0). */
static void test_desc_kv_broadcast(void **st) {
  (void)st;
  struct me_shape s = me_hf;
  s.h = 8;
  s.nq = 2;
  struct me_buf p;
  me_fill(&p, &s);
  ME_PUT(&p, ME_K_STRIDE_H, int32_t, 0);
  ME_PUT(&p, ME_V_STRIDE_H, int32_t, 0);
  struct pt_attn_desc d;
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.h, 8);
  assert_int_equal(d.h_k, 1); /* 16 rows: one CTA reads K/V once */
  assert_int_equal(d.k_head_stride, 0);
  assert_int_equal(d.v_head_stride, 0);
  /* more rows than one CTA holds: every head reads the same K/V */
  s.h = 32;
  me_fill(&p, &s);
  ME_PUT(&p, ME_K_STRIDE_H, int32_t, 0);
  ME_PUT(&p, ME_V_STRIDE_H, int32_t, 0);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.h, 32);
  assert_int_equal(d.h_k, 32);
  assert_int_equal(d.k_head_stride, 0);
  /* only K broadcast: heads stay separate */
  s.h = 8;
  me_fill(&p, &s);
  ME_PUT(&p, ME_K_STRIDE_H, int32_t, 0);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.h_k, 8);
  assert_int_equal(d.k_head_stride, 0);
  assert_int_equal(d.v_head_stride, 4608 * 128 + 16);
}

/* MLA (DeepSeek-V3 under Hugging Face's SDPA): q and k 192 wide, v and O 128. head_dim_value
 * travels as the descriptor's v_head_dim, V's and O's strides at its width; whether the pair
 * runs is the decode kernel's check (test_attn_plan.c), so other unequal pairs pass here too. */
static void test_desc_mla(void **st) {
  (void)st;
  struct me_shape s = me_mla;
  struct me_buf p;
  me_fill(&p, &s);
  struct pt_mem_eff_params m;
  assert_null(pt_mem_eff_decode(p.b, ME_BYTES, &m));
  assert_int_equal(m.head_dim, 192);
  assert_int_equal(m.head_dim_value, 128);
  struct pt_attn_desc d;
  memset(&d, 0x5A, sizeof d); /* every field must be written */
  assert_null(rd(&p, &s, ME_F16_NAME, &d));
  assert_int_equal(d.head_dim, 192);
  assert_int_equal(d.v_head_dim, 128);
  assert_int_equal(d.h, 128);
  assert_int_equal(d.h_k, 128);
  assert_qkvo_strides(&d, &s);
  assert_ptr_equal(d.bias, ME_BIAS);
  /* speculative rows, causal, a bias per head */
  s.nq = 4;
  s.mask = 2;
  s.bias = 2;
  me_fill(&p, &s);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.causal, 1);
  assert_int_equal(d.v_head_dim, 128);
  assert_qkvo_strides(&d, &s);
  /* another pair is read as it is; the kernel's check refuses it */
  s = me_hf;
  s.dv = 64;
  me_fill(&p, &s);
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));
  assert_int_equal(d.head_dim, 128);
  assert_int_equal(d.v_head_dim, 64);
  assert_qkvo_strides(&d, &s);
  /* equal sizes: v_head_dim says the same */
  me_fill(&p, &me_hf);
  assert_null(rd(&p, &me_hf, ME_BF16_NAME, &d));
  assert_int_equal(d.v_head_dim, 128);
  assert_int_equal(pt_attn_v_dim(&d), d.head_dim);
}

static void test_name_dtype(void **st) {
  (void)st;
  int dt = -1;
  assert_null(pt_mem_eff_name_dtype(ME_BF16_NAME, &dt));
  assert_int_equal(dt, PT_DTYPE_BF16);
  assert_null(pt_mem_eff_name_dtype(ME_F16_NAME, &dt));
  assert_int_equal(dt, PT_DTYPE_FP16);
  assert_string_equal(pt_mem_eff_name_dtype(ME_F32_NAME, &dt), "dtype not fp16/bf16");
  assert_string_equal(pt_mem_eff_name_dtype(ME_BWD_NAME, &dt), "dtype not fp16/bf16");
  assert_string_equal(pt_mem_eff_name_dtype("_Z9fmha_cutlassF_bf16x", &dt), "dtype not fp16/bf16");
  assert_string_equal(pt_mem_eff_name_dtype("fmha_cutlassF_bf16_", &dt), "dtype not fp16/bf16");
  assert_string_equal(pt_mem_eff_name_dtype(NULL, &dt), "dtype not fp16/bf16");
}

static void test_sizes(void **st) {
  (void)st;
  struct me_buf p;
  me_fill(&p, &me_hf);
  struct pt_attn_desc d;
  const char *r = pt_mem_eff_read(p.b, 264, ME_BF16_NAME, NULL, &d);
  assert_string_equal(r, "Params layout not recognised (264 bytes)");
  assert_ptr_equal(r, pt_mem_eff_read(p.b, 264, ME_BF16_NAME, NULL, &d)); /* a stable stats key */
  assert_string_equal(pt_mem_eff_read(p.b, 280, ME_BF16_NAME, NULL, &d),
                      "Params layout not recognised (280 bytes)");
  assert_string_equal(pt_mem_eff_read(p.b, 0, ME_BF16_NAME, NULL, &d), "param size unknown");
  assert_string_equal(pt_mem_eff_read(NULL, ME_BYTES, ME_BF16_NAME, NULL, &d),
                      "unsupported kernel variant");
  /* more distinct sizes than slots: still a reason */
  for (size_t n = 1; n < 20; n++)
    assert_non_null(pt_mem_eff_read(p.b, 1000 + n, ME_BF16_NAME, NULL, &d));
  /* the size is checked before the name */
  assert_string_equal(pt_mem_eff_read(p.b, 264, ME_F32_NAME, NULL, &d),
                      "Params layout not recognised (264 bytes)");
  /* no grid: no geometry check */
  assert_null(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, NULL, &d));
}

/* ---- one case per refusal reason ----------------------------------------- */

#define REFUSED(buf, shape, name, reason)                                   \
  do {                                                                      \
    struct pt_attn_desc d_;                                                 \
    const char *r_ = rd((buf), (shape), (name), &d_);                       \
    if (!r_ || strcmp(r_, (reason)) != 0)                                   \
      fail_msg("want '%s' got '%s'", (reason), r_ ? r_ : "(accepted)");     \
  } while (0)

static void test_refusals(void **st) {
  (void)st;
  struct me_shape s = me_hf;
  struct me_buf p;

  me_fill(&p, &s);
  REFUSED(&p, &s, ME_F32_NAME, "dtype not fp16/bf16");

  /* dropout: the use_dropout flag, whatever the bytes after it hold */
  me_fill(&p, &s);
  p.b[ME_DROPOUT_STATE] = 1;
  REFUSED(&p, &s, ME_BF16_NAME, "dropout");
  /* dropout off with stale bytes after the flag (the RNG offset, probability,
   * Philox state and graph pointers torch leaves unset): accepted, as seen in
   * transformers' continuous batching */
  me_fill(&p, &s);
  for (int i = 1; i < PT_ME_DROPOUT_STATE_BYTES; ++i) p.b[ME_DROPOUT_STATE + i] = (unsigned char)(0xA5 ^ i);
  {
    struct pt_attn_desc d_;
    const char *r_ = rd(&p, &s, ME_BF16_NAME, &d_);
    if (r_) fail_msg("stale dropout bytes with use_dropout 0: refused '%s'", r_);
  }

  me_fill(&p, &s);
  ME_PUT(&p, ME_WINDOW_SIZE, int32_t, 256);
  REFUSED(&p, &s, ME_BF16_NAME, "sliding window");

  me_fill(&p, &s);
  ME_PUT(&p, ME_SEQSTART_Q_PTR, void *, ME_PTR(0x7000));
  ME_PUT(&p, ME_SEQSTART_K_PTR, void *, ME_PTR(0x7100));
  REFUSED(&p, &s, ME_BF16_NAME, "varlen");
  me_fill(&p, &s);
  ME_PUT(&p, ME_SEQSTART_K_PTR, void *, ME_PTR(0x7100));
  REFUSED(&p, &s, ME_BF16_NAME, "varlen");
  me_fill(&p, &s);
  ME_PUT(&p, ME_SEQLEN_K_PTR, void *, ME_PTR(0x7200));
  REFUSED(&p, &s, ME_BF16_NAME, "varlen");

  struct me_shape c = s;
  c.mask = 2;
  me_fill(&p, &c);
  ME_PUT(&p, ME_CAUSAL_DIAGONAL_OFFSET, uint32_t, 3);
  REFUSED(&p, &c, ME_BF16_NAME, "causal diagonal offset");
  /* an offset without a causal mask is never applied: accepted */
  me_fill(&p, &s);
  ME_PUT(&p, ME_CAUSAL_DIAGONAL_OFFSET, uint32_t, 3);
  struct pt_attn_desc d;
  assert_null(rd(&p, &s, ME_BF16_NAME, &d));

  c = s;
  c.mask = 1; /* top-left with more than one key hides the newest ones */
  me_fill(&p, &c);
  REFUSED(&p, &c, ME_BF16_NAME, "causal from top-left");
  c.nk = 1;
  c.nq = 2;
  me_fill(&p, &c);
  REFUSED(&p, &c, ME_BF16_NAME, "causal from top-left");

  me_fill(&p, &s);
  ME_PUT(&p, ME_LOGSUMEXP_PTR, void *, ME_PTR(0x7f0000700000ull));
  REFUSED(&p, &s, ME_BF16_NAME, "logsumexp requested (training)");

  c = s;
  c.nq = 17;
  me_fill(&p, &c);
  REFUSED(&p, &c, ME_BF16_NAME, "seqlen_q > 16 (prefill)");
  c.nq = 16; /* the largest decode */
  me_fill(&p, &c);
  assert_null(rd(&p, &c, ME_BF16_NAME, &d));

  /* shapes and pointers that cannot be a launch */
  me_fill(&p, &s);
  ME_PUT(&p, ME_NUM_KEYS, int32_t, 0);
  REFUSED(&p, &s, ME_BF16_NAME, "invalid shape");
  me_fill(&p, &s);
  ME_PUT(&p, ME_OUTPUT_PTR, void *, ME_PTR(0));
  REFUSED(&p, &s, ME_BF16_NAME, "invalid shape");
  /* without a grid to check them against, heads and batches must be > 0 */
  me_fill(&p, &s);
  ME_PUT(&p, ME_NUM_HEADS, int32_t, -1);
  assert_string_equal(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, NULL, &d), "invalid shape");
  me_fill(&p, &s);
  ME_PUT(&p, ME_NUM_BATCHES, int32_t, 0);
  assert_string_equal(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, NULL, &d), "invalid shape");

  /* bytes that are not what we read them as */
  me_fill(&p, &s);
  ME_PUT(&p, ME_CUSTOM_MASK_TYPE, uint8_t, 3);
  REFUSED(&p, &s, ME_BF16_NAME, "unsupported kernel variant");
  /* with a grid, heads or batches that disagree with it: the bytes are not
   * a Params of this layout (checked before anything else is read) */
  me_fill(&p, &s);
  ME_PUT(&p, ME_NUM_HEADS, int32_t, -1);
  ME_PUT(&p, ME_NUM_KEYS, int32_t, 0);
  REFUSED(&p, &s, ME_BF16_NAME, "unsupported kernel variant");
  /* the older layout of the same size (causal_diagonal_ptr at 48, every
   * field after it 8 bytes later): num_batches/num_heads read the bias's
   * batch stride, so the grid refuses it */
  me_fill(&p, &s);
  memmove(p.b + 56, p.b + 48, 192 - 48);
  memset(p.b + 48, 0, 8);
  REFUSED(&p, &s, ME_BF16_NAME, "unsupported kernel variant");
  /* a grid that these Params did not produce */
  me_fill(&p, &s);
  unsigned g[3];
  me_grid(&s, g);
  g[1] = 16;
  assert_string_equal(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, g, &d), "unsupported kernel variant");
  me_grid(&s, g);
  g[2] = 9;
  assert_string_equal(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, g, &d), "unsupported kernel variant");
  me_grid(&s, g);
  g[0] = 0;
  assert_string_equal(pt_mem_eff_read(p.b, ME_BYTES, ME_BF16_NAME, g, &d), "unsupported kernel variant");
}

/* The reasons shared with the FA2 hook are the same strings (one stats key
 * per meaning). */
static void test_shared_reasons(void **st) {
  (void)st;
  assert_string_equal(pt_flash_r_dropout, "dropout");
  assert_string_equal(pt_flash_r_varlen, "varlen");
  assert_string_equal(pt_flash_r_prefill, "seqlen_q > 16 (prefill)");
  assert_string_equal(pt_flash_r_dtype, "dtype not fp16/bf16");
  assert_string_equal(pt_me_r_diagonal, "causal diagonal offset");
  assert_string_equal(pt_me_r_top_left, "causal from top-left");
  assert_string_equal(pt_me_r_lse, "logsumexp requested (training)");
  assert_string_equal(pt_me_r_window, "sliding window");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_fields),
      cmocka_unit_test(test_desc_bf16_padding_bias),
      cmocka_unit_test(test_desc_f16_per_head_bias),
      cmocka_unit_test(test_desc_no_bias),
      cmocka_unit_test(test_desc_causal),
      cmocka_unit_test(test_desc_kv_broadcast),
      cmocka_unit_test(test_desc_mla),
      cmocka_unit_test(test_name_dtype),
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_shared_reasons),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
