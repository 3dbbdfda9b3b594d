/* Flash_fwd_params decoding, eligibility and name matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/flash_params.h"
#include "hooks/torch_flash.h"
#include "tests/unit/hooks/fa_buf.h"

static const struct fa_shape hf = {.b = 8, .h_k = 4, .G = 4, .seqlen_k = 4100, .s_alloc = 4608,
                                   .d = 128, .bf16 = 1, .num_splits = 4};

/* The strides hf's buffer carries (the V and O ones offset, so a swapped
 * field shows), as the raw params and the decoded descriptor both name them. */
#define ASSERT_HF_STRIDES(x)                                   \
  do {                                                         \
    assert_int_equal((x).q_batch_stride, 4 * 4 * 128);         \
    assert_int_equal((x).q_row_stride, 128);                   \
    assert_int_equal((x).q_head_stride, 4 * 128);              \
    assert_int_equal((x).k_batch_stride, 4 * 4608 * 128);      \
    assert_int_equal((x).k_row_stride, 128);                   \
    assert_int_equal((x).k_head_stride, 4608 * 128);           \
    assert_int_equal((x).v_batch_stride, 4 * 4608 * 128 + 8);  \
    assert_int_equal((x).v_row_stride, 128 + 16);              \
    assert_int_equal((x).v_head_stride, 4608 * 128 + 24);      \
    assert_int_equal((x).o_batch_stride, 4 * 4 * 128 + 32);    \
    assert_int_equal((x).o_row_stride, 128 + 40);              \
    assert_int_equal((x).o_head_stride, 4 * 128 + 48);         \
  } while (0)

static void check_decode(size_t bytes) {
  struct fa_buf p;
  fa_fill(&p, bytes, &hf);
  /* values only the decoder can see, at their exact offsets */
  FA_PUT(&p, FA_SEQLEN_KNEW, int, 0);
  FA_PUT(&p, FA_ROTARY_DIM, int, 0);
  FA_PUT(&p, FA_TOTAL_Q, int, 77);
  FA_PUT(&p, FA_PAGE_BLOCK_SIZE, int, 256);
  FA_PUT(&p, FA_IS_ROTARY_INTERLEAVED, uint8_t, 1);
  FA_PUT(&p, FA_ALIBI_BATCH_STRIDE, int64_t, 99);

  struct pt_flash_fields f;
  assert_null(pt_flash_decode(p.b, bytes, &f));
  assert_int_equal(f.layout_bytes, bytes);
  assert_ptr_equal(f.q, FA_PTR(0x7f0000100000ull));
  assert_ptr_equal(f.k, FA_PTR(0x7f0000200000ull));
  assert_ptr_equal(f.v, FA_PTR(0x7f0000300000ull));
  assert_ptr_equal(f.o, FA_PTR(0x7f0000400000ull));
  assert_ptr_equal(f.oaccum, FA_PTR(0x7f0000500000ull));
  assert_ptr_equal(f.lse, FA_PTR(0x7f0000600000ull));
  assert_ptr_equal(f.lseaccum, FA_PTR(0x7f0000700000ull));
  assert_null(f.p);
  ASSERT_HF_STRIDES(f);
  assert_int_equal(f.h, 4);
  assert_int_equal(f.h_k, 4);
  assert_int_equal(f.h_h_k_ratio, 1);
  assert_int_equal(f.b, 8);
  assert_int_equal(f.seqlen_q, 4);
  assert_int_equal(f.seqlen_k, 4100);
  assert_int_equal(f.seqlen_knew, 0);
  assert_int_equal(f.d, 128);
  assert_int_equal(f.d_rounded, 128);
  assert_int_equal(f.rotary_dim, 0);
  assert_int_equal(f.total_q, 77);
  assert_true(f.scale_softmax == 0.125f);
  assert_true(f.scale_softmax_log2 == 0.125f * 1.44269504f);
  assert_null(f.cu_seqlens_q);
  assert_null(f.cu_seqlens_k);
  assert_null(f.leftpad_k);
  assert_null(f.seqused_k);
  assert_null(f.blockmask);
  assert_null(f.knew);
  assert_null(f.vnew);
  assert_null(f.rotary_cos);
  assert_null(f.rotary_sin);
  assert_null(f.cache_batch_idx);
  assert_null(f.block_table);
  assert_int_equal(f.page_block_size, 256);
  assert_true(f.p_dropout == 1.0f);
  assert_int_equal(f.window_size_left, -1);
  assert_int_equal(f.window_size_right, -1);
  assert_true(f.softcap == 0.0f);
  assert_int_equal(f.is_bf16, 1);
  assert_int_equal(f.is_causal, 0);
  assert_int_equal(f.is_seqlens_k_cumulative, 1);
  assert_int_equal(f.is_rotary_interleaved, 1);
  assert_int_equal(f.num_splits, 4);
  assert_null(f.alibi_slopes);
  assert_int_equal(f.unpadded_lse, 0);
  assert_int_equal(f.seqlenq_ngroups_swapped, 0);

  /* tail fields at their layout-specific offsets */
  FA_PUT(&p, FA_IS_CAUSAL, uint8_t, 1);
  FA_PUT(&p, FA_NUM_SPLITS, int, 13);
  FA_PUT(&p, FA_ALIBI, void *, FA_PTR(0x1234));
  FA_PUT(&p, FA_UNPADDED_LSE, uint8_t, 1);
  FA_PUT(&p, FA_NGROUPS_SWAPPED, uint8_t, 1);
  FA_PUT(&p, FA_IS_BF16, uint8_t, 0);
  assert_null(pt_flash_decode(p.b, bytes, &f));
  assert_int_equal(f.is_causal, 1);
  assert_int_equal(f.num_splits, 13);
  assert_ptr_equal(f.alibi_slopes, FA_PTR(0x1234));
  assert_int_equal(f.unpadded_lse, 1);
  assert_int_equal(f.seqlenq_ngroups_swapped, 1);
  assert_int_equal(f.is_bf16, 0);
}

static void test_decode_464(void **st) { (void)st; check_decode(464); }
static void test_decode_472(void **st) { (void)st; check_decode(472); }

static void test_layout_table(void **st) {
  (void)st;
  const struct pt_flash_layout *a = pt_flash_layout_for(464), *b = pt_flash_layout_for(472);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(a->off_is_bf16, FA_IS_BF16);
  assert_int_equal(b->off_is_bf16, FA_IS_BF16 + 8);
  assert_int_equal(a->off_num_splits, FA_NUM_SPLITS);
  assert_int_equal(b->off_num_splits, FA_NUM_SPLITS + 8);
  assert_int_equal(a->off_rng_state, FA_RNG_STATE);
  assert_int_equal(b->off_seqlenq_ngroups_swapped, FA_NGROUPS_SWAPPED + 8);
  assert_int_equal(a->off_alibi_slopes_batch_stride, FA_ALIBI_BATCH_STRIDE);
  assert_null(pt_flash_layout_for(0));
  assert_null(pt_flash_layout_for(456));
  assert_null(pt_flash_layout_for(468));
  assert_null(pt_flash_layout_for(480));
}

/* A 464 buffer read as 472 (or the reverse) must not decode the tail from
 * the wrong place: this is why the size is checked. */
static void test_layouts_differ(void **st) {
  (void)st;
  struct fa_buf p;
  fa_fill(&p, 464, &hf);
  struct pt_flash_fields f;
  assert_null(pt_flash_decode(p.b, 472, &f));
  assert_int_not_equal(f.num_splits, 4);
}

static void test_wrong_sizes(void **st) {
  (void)st;
  struct fa_buf p;
  fa_fill(&p, 464, &hf);
  struct pt_flash_fields f;
  const char *r = pt_flash_decode(p.b, 460, &f);
  assert_string_equal(r, "param size 460 not a known Flash_fwd_params layout");
  assert_ptr_equal(r, pt_flash_decode(p.b, 460, &f)); /* interned: a stable stats key */
  assert_string_equal(pt_flash_decode(p.b, 440, &f),
                      "param size 440 not a known Flash_fwd_params layout");
  assert_string_equal(pt_flash_decode(p.b, 0, &f), "param size unknown");
  /* more distinct sizes than slots: still a reason */
  for (size_t n = 1; n < 20; n++) assert_non_null(pt_flash_decode(p.b, 1000 + n, &f));
}

/* The ngroups-swapped decode (h = h_k, seqlen_q = G) maps onto the
 * descriptor unchanged, strides included. */
static void test_desc_ngroups_swapped(void **st) {
  (void)st;
  struct fa_buf p;
  fa_fill(&p, 464, &hf);
  struct pt_flash_fields f;
  assert_null(pt_flash_decode(p.b, 464, &f));
  struct pt_attn_desc d;
  pt_flash_to_desc(&f, &d);
  assert_ptr_equal(d.q, FA_PTR(0x7f0000100000ull));
  assert_ptr_equal(d.k, FA_PTR(0x7f0000200000ull));
  assert_ptr_equal(d.v, FA_PTR(0x7f0000300000ull));
  assert_ptr_equal(d.o, FA_PTR(0x7f0000400000ull));
  assert_ptr_equal(d.lse, FA_PTR(0x7f0000600000ull));
  assert_int_equal(d.dtype, PT_DTYPE_BF16);
  assert_int_equal(d.b, 8);
  assert_int_equal(d.h, 4);
  assert_int_equal(d.h_k, 4);
  assert_int_equal(d.seqlen_q, 4);
  assert_int_equal(d.seqlen_k, 4100);
  assert_int_equal(d.head_dim, 128);
  /* FA2 has one head size: v and o as wide as q and k */
  assert_int_equal(d.v_head_dim, 0);
  assert_int_equal(pt_attn_v_dim(&d), 128);
  ASSERT_HF_STRIDES(d);
  assert_true(d.scale == 0.125f);
  assert_int_equal(d.causal, 0);

  /* plain GQA decode (no swap): h = 16 query heads over 4 KV heads, fp16 */
  FA_PUT(&p, FA_H, int, 16);
  FA_PUT(&p, FA_SEQLEN_Q, int, 1);
  FA_PUT(&p, FA_IS_BF16, uint8_t, 0);
  FA_PUT(&p, FA_IS_CAUSAL, uint8_t, 1);
  assert_null(pt_flash_decode(p.b, 464, &f));
  pt_flash_to_desc(&f, &d);
  assert_int_equal(d.h, 16);
  assert_int_equal(d.h_k, 4);
  assert_int_equal(d.seqlen_q, 1);
  assert_int_equal(d.dtype, PT_DTYPE_FP16);
  assert_int_equal(d.causal, 1);
}

/* ---- eligibility: one case per reason ----------------------------------- */

struct elig_case {
  const char *name;
  void (*mut)(struct fa_buf *p);
  const char *reason;
};

static void m_none(struct fa_buf *p) { (void)p; }
static void m_dtype(struct fa_buf *p) { FA_PUT(p, FA_IS_BF16, uint8_t, 7); }
static void m_head_dim(struct fa_buf *p) { FA_PUT(p, FA_D, int, 72); }
static void m_head_dim32(struct fa_buf *p) { FA_PUT(p, FA_D, int, 32); }
static void m_head_dim112(struct fa_buf *p) { FA_PUT(p, FA_D, int, 112); }
/* Phi and Phi-3: the decode kernel runs them padded on d = 128. */
static void m_head_dim80(struct fa_buf *p) { FA_PUT(p, FA_D, int, 80); }
static void m_head_dim96(struct fa_buf *p) { FA_PUT(p, FA_D, int, 96); }
/* 192 runs only as q/k with v 128 (MLA), which FA2's one head size cannot say. */
static void m_head_dim192(struct fa_buf *p) { FA_PUT(p, FA_D, int, 192); }
static void m_dropout(struct fa_buf *p) { FA_PUT(p, FA_P_DROPOUT, float, 0.9f); }
static void m_return_softmax(struct fa_buf *p) { FA_PUT(p, FA_P_PTR, void *, FA_PTR(0x10)); }
static void m_alibi(struct fa_buf *p) { FA_PUT(p, FA_ALIBI, void *, FA_PTR(0x10)); }
static void m_softcap(struct fa_buf *p) { FA_PUT(p, FA_SOFTCAP, float, 0.02f); }
static void m_local(struct fa_buf *p) { FA_PUT(p, FA_WINDOW_LEFT, int, 256); FA_PUT(p, FA_WINDOW_RIGHT, int, 0); }
static void m_paged(struct fa_buf *p) { FA_PUT(p, FA_BLOCK_TABLE, void *, FA_PTR(0x10)); }
static void m_appended(struct fa_buf *p) { FA_PUT(p, FA_KNEW_PTR, void *, FA_PTR(0x10)); }
static void m_rotary(struct fa_buf *p) { FA_PUT(p, FA_ROTARY_COS, void *, FA_PTR(0x10)); FA_PUT(p, FA_ROTARY_DIM, int, 64); }
static void m_varlen(struct fa_buf *p) { FA_PUT(p, FA_CU_SEQLENS_K, void *, FA_PTR(0x10)); }
static void m_varlen_q(struct fa_buf *p) { FA_PUT(p, FA_CU_SEQLENS_Q, void *, FA_PTR(0x10)); }
static void m_cache_idx(struct fa_buf *p) { FA_PUT(p, FA_CACHE_BATCH_IDX, void *, FA_PTR(0x10)); }
static void m_leftpad(struct fa_buf *p) { FA_PUT(p, FA_LEFTPAD_K, void *, FA_PTR(0x10)); }
static void m_seqused(struct fa_buf *p) { FA_PUT(p, FA_SEQUSED_K, void *, FA_PTR(0x10)); }
static void m_unpadded(struct fa_buf *p) { FA_PUT(p, FA_UNPADDED_LSE, uint8_t, 1); }
static void m_transposed(struct fa_buf *p) { FA_PUT(p, FA_NGROUPS_SWAPPED, uint8_t, 1); }
static void m_prefill(struct fa_buf *p) { FA_PUT(p, FA_SEQLEN_Q, int, 17); }
/* 16 query heads per KV head with 2 query rows: 32 rows per KV head */
static void m_rows(struct fa_buf *p) { FA_PUT(p, FA_H, int, 64); FA_PUT(p, FA_SEQLEN_Q, int, 2); }
static void m_causal(struct fa_buf *p) {
  FA_PUT(p, FA_IS_CAUSAL, uint8_t, 1);
  FA_PUT(p, FA_SEQLEN_K, int, 3); /* seqlen_q is 4 */
  FA_PUT(p, FA_WINDOW_LEFT, int, 3);
  FA_PUT(p, FA_WINDOW_RIGHT, int, 0);
}
static void m_causal_ok(struct fa_buf *p) {
  FA_PUT(p, FA_IS_CAUSAL, uint8_t, 1);
  FA_PUT(p, FA_WINDOW_LEFT, int, 4100);
  FA_PUT(p, FA_WINDOW_RIGHT, int, 0);
}
static void m_shape(struct fa_buf *p) { FA_PUT(p, FA_H_K, int, 3); }
static void m_shape_k0(struct fa_buf *p) { FA_PUT(p, FA_SEQLEN_K, int, 0); }
static void m_variant(struct fa_buf *p) { FA_PUT(p, FA_NUM_SPLITS, int, 3); } /* grid says 4 */

static const struct elig_case elig_cases[] = {
    {"eligible", m_none, NULL},
    {"causal seqlen_q <= seqlen_k", m_causal_ok, NULL},
    {"dtype", m_dtype, "dtype not fp16/bf16"},
    {"head_dim", m_head_dim, "head_dim not 64/80/96/128/256"},
    {"head_dim 32", m_head_dim32, "head_dim not 64/80/96/128/256"},
    {"head_dim 112", m_head_dim112, "head_dim not 64/80/96/128/256"},
    {"head_dim 80", m_head_dim80, NULL},
    {"head_dim 96", m_head_dim96, NULL},
    {"head_dim 192", m_head_dim192, "head_dim not 64/80/96/128/256"},
    {"dropout", m_dropout, "dropout"},
    {"return softmax", m_return_softmax, "return softmax"},
    {"alibi", m_alibi, "alibi"},
    {"softcap", m_softcap, "softcap"},
    {"local", m_local, "local window"},
    {"paged", m_paged, "paged kv"},
    {"appended", m_appended, "appended kv"},
    {"rotary", m_rotary, "rotary"},
    {"varlen k", m_varlen, "varlen"},
    {"varlen q", m_varlen_q, "varlen"},
    {"cache_batch_idx", m_cache_idx, "cache_batch_idx"},
    {"leftpad", m_leftpad, "leftpad_k"},
    {"seqused_k", m_seqused, "seqused_k"},
    {"unpadded lse", m_unpadded, "unpadded or transposed lse"},
    {"transposed lse", m_transposed, "unpadded or transposed lse"},
    {"prefill", m_prefill, "seqlen_q > 16 (prefill)"},
    {"rows", m_rows, "rows per kv head > 16"},
    {"causal", m_causal, "causal with seqlen_q > seqlen_k"},
    {"shape", m_shape, "invalid shape"},
    {"shape k0", m_shape_k0, "invalid shape"},
    {"variant", m_variant, "unsupported kernel variant"},
};

static void test_eligibility(void **st) {
  (void)st;
  for (size_t bytes = 464; bytes <= 472; bytes += 8) {
    for (size_t i = 0; i < sizeof elig_cases / sizeof elig_cases[0]; i++) {
      const struct elig_case *c = &elig_cases[i];
      struct fa_buf p;
      fa_fill(&p, bytes, &hf);
      c->mut(&p);
      struct pt_flash_fields f;
      assert_null(pt_flash_decode(p.b, bytes, &f));
      /* the grid FA2 would use for the mutated params; the original one for
       * the variant case (params that disagree with their launch) */
      unsigned g[3];
      fa_grid_splitkv(&hf, g);
      if (c->mut != m_variant) {
        g[0] = (unsigned)((f.seqlen_q + 63) / 64);
        g[1] = (unsigned)(f.num_splits > 1 ? f.num_splits : f.b);
        g[2] = (unsigned)(f.num_splits > 1 ? f.b * f.h : f.h);
      }
      const char *r = pt_flash_eligible(&f, PT_FLASH_K_SPLITKV, g);
      if (c->reason == NULL && r != NULL) fail_msg("%s/%zu: unexpected reason '%s'", c->name, bytes, r);
      if (c->reason && (!r || strcmp(r, c->reason) != 0))
        fail_msg("%s/%zu: want '%s' got '%s'", c->name, bytes, c->reason, r ? r : "(eligible)");
    }
  }
}

static void test_eligibility_grids(void **st) {
  (void)st;
  struct fa_buf p;
  struct fa_shape s = hf;
  s.num_splits = 1;
  fa_fill(&p, 464, &s);
  struct pt_flash_fields f;
  assert_null(pt_flash_decode(p.b, 464, &f));
  unsigned g[3];
  fa_grid_splitkv(&s, g); /* (1, b, h) without splits */
  assert_int_equal(g[1], 8);
  assert_null(pt_flash_eligible(&f, PT_FLASH_K_SPLITKV, g));
  unsigned fwd[3] = {1, 8, 4};
  assert_null(pt_flash_eligible(&f, PT_FLASH_K_FWD, fwd));
  unsigned bad[3] = {1, 4, 8};
  assert_string_equal(pt_flash_eligible(&f, PT_FLASH_K_FWD, bad), "unsupported kernel variant");
  assert_null(pt_flash_eligible(&f, PT_FLASH_K_FWD, NULL));
  assert_string_equal(pt_flash_eligible(&f, PT_FLASH_K_COMBINE, NULL), "unsupported kernel variant");
}

/* ---- names ---------------------------------------------------------------- */

static void test_names(void **st) {
  (void)st;
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_"
                                  "traitsILi128ELi64ELi128ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_"
                                  "kernel_traitsILi128ELi64ELi128ELi4ES2_EELb0ELb0ELb0ELb1ELb1ELb0ELb1"
                                  "ELb0EEEvNS_16Flash_fwd_paramsE"),
                   PT_HOOK_FLASH_SPLITKV);
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash32flash_fwd_splitkv_combine_kernelI23Flash_fwd_"
                                  "kernel_traitsILi128ELi64ELi128ELi4ELb0ELb0EN7cutlass10bfloat16_tE19"
                                  "Flash_kernel_traitsILi128ELi64ELi128ELi4ES2_EELi4ELi2ELb1EEEvNS_16"
                                  "Flash_fwd_paramsE"),
                   PT_HOOK_FLASH_COMBINE);
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128"
                                  "ELi128ELi64ELi4ELb0ELb0EN7cutlass6half_tE19Flash_kernel_traitsILi128"
                                  "ELi128ELi64ELi4ES2_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEvNS_16Flash_"
                                  "fwd_paramsE"),
                   PT_HOOK_FLASH_FWD);
  assert_int_equal(pt_flash_match("_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64E"),
                   PT_HOOK_FLASH_SPLITKV);
  assert_int_equal(pt_flash_match("_ZN5flash32flash_fwd_splitkv_combine_kernelI23Flash_fwd_kernel_tr"),
                   PT_HOOK_FLASH_COMBINE);
  assert_int_equal(pt_flash_match("_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi64E"),
                   PT_HOOK_FLASH_FWD);
  /* negatives: backward kernels, other namespaces, unmangled, truncated, cuDNN */
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash30flash_bwd_dq_dk_dv_loop_kernelI23Flash_bwd_ke"), 0);
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash26flash_bwd_dot_do_o_kernelILb1E23Flash_bwd_k"), 0);
  assert_int_equal(pt_flash_match("_ZN13pytorch_flash24flash_fwd_splitkv_kernel"), 0);
  assert_int_equal(pt_flash_match("_ZN14pytorch_flash216flash_fwd_kernelI"), 0);
  assert_int_equal(pt_flash_match("_ZN5flash16flash_fwd_kernel_sm90I"), 0);
  assert_int_equal(pt_flash_match("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"), 0);
  assert_int_equal(pt_flash_match("flash_fwd_splitkv_kernel"), 0);
  assert_int_equal(pt_flash_match("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35"), 0);
  assert_int_equal(pt_flash_match("_ZN2at6native29vectorized_elementwise_kernelILi4E"), 0);
  assert_int_equal(pt_flash_match(""), 0);
  assert_int_equal(pt_flash_match(NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_464),
      cmocka_unit_test(test_decode_472),
      cmocka_unit_test(test_layout_table),
      cmocka_unit_test(test_layouts_differ),
      cmocka_unit_test(test_wrong_sizes),
      cmocka_unit_test(test_desc_ngroups_swapped),
      cmocka_unit_test(test_eligibility),
      cmocka_unit_test(test_eligibility_grids),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
