/* The mem-efficient SDPA forward hook (hooks/torch_mem_eff.c) with fake CUDA
 * ops: swapped with the mask as the decode kernel's bias while
 * PONYTAIL_ATTN_MASKED is on (the default), report-only under
 * PONYTAIL_ATTN_MASKED=0, its fallback reasons, verify mode, capture and the
 * planted fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/attn_report.h"
#include "hooks/hook.h"
#include "hooks/torch_flash.h"
#include "hooks/torch_mem_eff.h"
#include "common/options.h"
#include "tests/unit/hooks/fake_swap_ops.h"
#include "tests/unit/hooks/me_buf.h"

static void set_env(const char *k, const char *v) {
  if (v) setenv(k, v, 1);
  else unsetenv(k);
  pt_opts_reload();
}

static int setup(void **st) {
  (void)st;
  memset(&fk, 0, sizeof fk);
  fk.ws_need = 64 << 10;
  pt_flash_reset_for_tests();
  pt_flash_set_ops(&fk_ops);
  setenv("PONYTAIL_LOG", "error", 1);
  unsetenv("PONYTAIL_TEST_FAULT");
  unsetenv("PONYTAIL_ATTN_MASKED"); /* the default, unless a test sets it */
  set_env("PONYTAIL_ATTN", "on");
  return 0;
}

static int teardown(void **st) {
  (void)st;
  pt_flash_set_ops(NULL);
  pt_flash_reset_for_tests();
  for (int i = 0; i < fk.nmem; i++) free(fk.mem[i]);
  fk.nmem = 0;
  unsetenv("PONYTAIL_ATTN_MASKED");
  unsetenv("PONYTAIL_TEST_FAULT");
  pt_opts_reload();
  return 0;
}

/* ---- launches ------------------------------------------------------------- */

#define STREAM_A ((void *)0x5A)


struct launch { struct me_buf p; void *args[1]; struct pt_launch l; };

static void mk(struct launch *x, const struct me_shape *s) {
  me_fill(&x->p, s);
  memset(&x->l, 0, sizeof x->l);
  x->args[0] = x->p.b;
  x->l.path = PT_PATH_RUNTIME;
  x->l.args = x->args;
  x->l.param_bytes = ME_BYTES;
  x->l.stream = STREAM_A;
  x->l.launch_original = fk_original;
  me_grid(s, x->l.grid);
  x->l.block[0] = 32;
  x->l.block[1] = 4;
  x->l.block[2] = 1;
}

/* As the shim does: match the name once, then ask the hook per launch. */
static struct pt_hook_outcome go_named(const char *name, struct launch *x) {
  return pt_hooks_launch(pt_hooks_match(name), name, &x->l);
}
static struct pt_hook_outcome go(struct launch *x) { return go_named(ME_BF16_NAME, x); }

static void assert_pass(struct pt_hook_outcome o, const char *reason) {
  assert_int_equal(o.verdict, PT_HOOK_PASS);
  if (!reason) {
    if (o.reason) fail_msg("unexpected reason '%s'", o.reason);
  } else if (!o.reason || strcmp(o.reason, reason) != 0) {
    fail_msg("want '%s' got '%s'", reason, o.reason ? o.reason : "(none)");
  }
}

/* ---- tests ---------------------------------------------------------------- */

/* Unset, the option is on: the forward kernels match the swapping id and a
 * decode-shaped launch is swapped. An empty value counts as unset. */
static void test_default_on(void **st) {
  (void)st;
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF_FWD);
  assert_int_equal(pt_hooks_match(ME_F16_NAME), PT_HOOK_MEM_EFF_FWD);
  assert_int_equal(pt_hooks_match(ME_BWD_NAME), PT_HOOK_MEM_EFF_BWD);
  struct launch x;
  mk(&x, &me_hf);
  struct pt_hook_outcome o = go(&x);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_null(o.reason);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.originals, 0);
  set_env("PONYTAIL_ATTN_MASKED", "");
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF_FWD);
}

/* PONYTAIL_ATTN_MASKED=0: the kernels match the report-only id, the verdict
 * and reason are the report's, and nothing of the launch is read. */
static void test_option_off_report_only(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "0");
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF);
  assert_int_equal(pt_hooks_match(ME_F16_NAME), PT_HOOK_MEM_EFF);
  assert_int_equal(pt_hooks_match(ME_F32_NAME), PT_HOOK_MEM_EFF);
  assert_int_equal(pt_hooks_match(ME_BWD_NAME), PT_HOOK_MEM_EFF_BWD);
  struct launch x;
  mk(&x, &me_hf);
  x.l.args = (void **)(uintptr_t)0x10; /* poison: must not be read */
  x.l.param_bytes = 3;
  struct pt_hook_outcome o = go(&x);
  assert_pass(o, "mem-efficient SDPA (attention mask or unsupported shape): masked decode off "
                 "(PONYTAIL_ATTN_MASKED=0)");
  assert_ptr_equal(o.reason, pt_attn_r_mem_eff);
  /* any false spelling of a boolean turns it off */
  set_env("PONYTAIL_ATTN_MASKED", "off");
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF);
  assert_int_equal(fk.launches + fk.originals + fk.allocs, 0);
  /* the swapped id's name, for `ponytail kernels` */
  assert_string_equal(pt_hooks_name(PT_HOOK_MEM_EFF_FWD), "torch_mem_eff/fwd");
  assert_string_equal(pt_hooks_name(PT_HOOK_MEM_EFF), "torch_mem_eff");
}

static void test_option_on_match(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF_FWD);
  assert_int_equal(pt_hooks_match(ME_F16_NAME), PT_HOOK_MEM_EFF_FWD);
  assert_int_equal(pt_hooks_match(ME_F32_NAME), PT_HOOK_MEM_EFF_FWD); /* refused per launch */
  assert_true(pt_hook_reads_launch(PT_HOOK_MEM_EFF_FWD));
  /* backward, cuDNN and FA2 are unchanged */
  assert_int_equal(pt_hooks_match(ME_BWD_NAME), PT_HOOK_MEM_EFF_BWD);
  assert_int_equal(pt_hooks_match("_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traits"),
                   PT_HOOK_FLASH_FWD);
  assert_int_equal(pt_hooks_match("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16"),
                   PT_HOOK_CUDNN_SDPA);
  assert_int_equal(pt_hooks_match("_Z8kernel_av"), 0);
  assert_int_equal(pt_hooks_match(
                       "_Z40fmha_cutlassF_bf16_aligned_64x128_rf_sm80N7xformers15AttentionKernelI6ParamsE"),
                   0);
  /* PONYTAIL_ATTN=off turns it off: the report-only id */
  set_env("PONYTAIL_ATTN", "off");
  assert_int_equal(pt_hooks_match(ME_BF16_NAME), PT_HOOK_MEM_EFF);
}

static void test_swapped_with_bias(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  struct launch x;
  mk(&x, &me_hf);
  struct pt_hook_outcome o = go(&x);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(o.status, 0);
  assert_null(o.reason);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.originals, 0);
  assert_ptr_equal(fk.last_stream, STREAM_A);
  assert_non_null(fk.last_ws);
  assert_true(fk.last_ws_bytes >= fk.ws_need);
  const struct pt_attn_desc *d = &fk.last;
  assert_ptr_equal(d->q, ME_Q);
  assert_ptr_equal(d->k, ME_K);
  assert_ptr_equal(d->v, ME_V);
  assert_ptr_equal(d->o, ME_O);
  assert_null(d->lse);
  assert_int_equal(d->dtype, PT_DTYPE_BF16);
  assert_int_equal(d->b, 8);
  assert_int_equal(d->h, 32);
  assert_int_equal(d->h_k, 32);
  assert_int_equal(d->seqlen_q, 1);
  assert_int_equal(d->seqlen_k, 4100);
  assert_int_equal(d->head_dim, 128);
  assert_int_equal(d->causal, 0);
  assert_true(d->scale == 0.125f);
  assert_int_equal(d->o_row_stride, 32 * 128);
  assert_int_equal(d->o_head_stride, 128);
  assert_int_equal(d->o_batch_stride, 32 * 128);
  assert_ptr_equal(d->bias, ME_BIAS);
  assert_int_equal(d->bias_batch_stride, 4112);
  assert_int_equal(d->bias_head_stride, 0);
  assert_int_equal(d->bias_row_stride, 4112);

  /* fp16, per-head bias, bottom-right causal over 4 query rows */
  struct me_shape s = me_hf;
  s.h = 8;
  s.nq = 4;
  s.bias = 2;
  s.mask = 2;
  mk(&x, &s);
  assert_int_equal(go_named(ME_F16_NAME, &x).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.launches, 2);
  assert_int_equal(fk.last.dtype, PT_DTYPE_FP16);
  assert_int_equal(fk.last.causal, 1);
  assert_int_equal(fk.last.seqlen_q, 4);
  assert_int_equal(fk.last.bias_head_stride, 4 * 4112);
  assert_int_equal(fk.last.bias_batch_stride, 8 * 4 * 4112);
  assert_int_equal(fk.last.o_batch_stride, 4 * 8 * 128);

  /* no mask: swapped without a bias */
  s = me_hf;
  s.bias = 0;
  mk(&x, &s);
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  assert_null(fk.last.bias);
  assert_int_equal(fk.originals, 0);
}

/* MLA (DeepSeek-V3 under Hugging Face's SDPA: q/k 192, v 128, 128 heads): swapped with v's
 * head size in the descriptor and O at its width; another unequal pair goes to the kernel's
 * check, whose reason the hook passes on. */
static void test_swapped_mla(void **st) {
  (void)st;
  struct me_shape s = me_mla;
  struct launch x;
  mk(&x, &s);
  assert_int_equal(go_named(ME_F16_NAME, &x).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.last.head_dim, 192);
  assert_int_equal(fk.last.v_head_dim, 128);
  assert_int_equal(fk.last.q_head_stride, 192);
  assert_int_equal(fk.last.k_row_stride, 192);
  assert_int_equal(fk.last.v_row_stride, 128 + 8);
  assert_int_equal(fk.last.o_head_stride, 128);
  assert_int_equal(fk.last.o_row_stride, 128 * 128);
  assert_int_equal(fk.last.o_batch_stride, 128 * 128);
  s = me_hf;
  s.dv = 64;
  mk(&x, &s);
  fk.supported_reason = "head_dim q/k 192 with v 128 only";
  assert_pass(go(&x), "head_dim q/k 192 with v 128 only");
  fk.supported_reason = NULL;
  assert_int_equal(fk.launches, 1);
}

static void test_fallback_reasons(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  struct launch x;
  mk(&x, &me_hf);
  x.l.param_bytes = 264;
  assert_pass(go(&x), "Params layout not recognised (264 bytes)");
  x.l.param_bytes = 0;
  assert_pass(go(&x), "param size unknown");
  mk(&x, &me_hf);
  assert_pass(go_named(ME_F32_NAME, &x), "dtype not fp16/bf16");
  x.p.b[ME_DROPOUT_STATE] = 1; /* use_dropout */
  assert_pass(go(&x), "dropout");
  mk(&x, &me_hf);
  ME_PUT(&x.p, ME_LOGSUMEXP_PTR, void *, ME_PTR(0x7f0000700000ull));
  assert_pass(go(&x), "logsumexp requested (training)");
  struct me_shape s = me_hf;
  s.nq = 64;
  mk(&x, &s);
  assert_pass(go(&x), "seqlen_q > 16 (prefill)");
  mk(&x, &me_hf);
  x.l.grid[2] = 3;
  assert_pass(go(&x), "unsupported kernel variant");
  mk(&x, &me_hf);
  fk.supported_reason = "bias not 16-byte aligned";
  assert_pass(go(&x), "bias not 16-byte aligned");
  fk.supported_reason = NULL;
  x.l.stream = (void *)0x2;
  assert_pass(go(&x), "per-thread default stream");
  x.l.stream = NULL;
  x.l.per_thread_stream = 1;
  assert_pass(go(&x), "per-thread default stream");
  x.l.per_thread_stream = 0;
  x.l.stream = STREAM_A;
  assert_int_equal(fk.launches, 0);
  /* the kernel fails to launch: the original runs */
  fk.launch_rc = 700;
  assert_pass(go(&x), "ponytail launch failed");
  fk.launch_rc = 0;
  /* no driver bound (the CLI): nothing attempted */
  struct pt_flash_ops none = {0};
  pt_flash_set_ops(&none);
  assert_pass(go(&x), "driver unavailable");
  pt_flash_set_ops(&fk_ops);
  /* PONYTAIL_ATTN=off after matching: disabled, as every attention hook */
  int id = pt_hooks_match(ME_BF16_NAME);
  set_env("PONYTAIL_ATTN", "off");
  assert_pass(pt_hooks_launch(id, ME_BF16_NAME, &x.l), "disabled");
  set_env("PONYTAIL_ATTN", "on");
  /* the option turned off after matching (tests only): today's report */
  set_env("PONYTAIL_ATTN_MASKED", "0");
  assert_ptr_equal(pt_hooks_launch(id, ME_BF16_NAME, &x.l).reason, pt_attn_r_mem_eff);
  assert_int_equal(fk.originals, 0); /* the shim runs the original of a PASS */
}

/* Stream capture: the stream's workspace from an eager launch, none for a
 * stream first seen during the capture beyond the spare. */
static void test_capture(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  struct launch x;
  mk(&x, &me_hf);
  fk.capturing = 1;
  assert_pass(go(&x), "no workspace during capture");
  assert_int_equal(fk.allocs, 0);
  fk.capturing = 0;
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  void *ws = fk.last_ws;
  int allocs = fk.allocs;
  fk.capturing = 1;
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  assert_ptr_equal(fk.last_ws, ws);
  assert_int_equal(fk.allocs, allocs);
  /* a shape that needs no workspace takes none, even on a new stream */
  fk.ws_need = 0;
  x.l.stream = (void *)0x5C;
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  assert_null(fk.last_ws);
  fk.capturing = 0;
}

static void test_verify(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  set_env("PONYTAIL_ATTN", "verify");
  int id = pt_hooks_match(ME_BF16_NAME);
  assert_int_equal(id, PT_HOOK_MEM_EFF_FWD);
  struct launch x;
  mk(&x, &me_hf);
  fk.compare_result[0] = 0.004f; /* |dO| */
  fk.compare_result[1] = 1.0f;   /* |O| */
  struct pt_hook_outcome o = pt_hooks_launch(id, ME_BF16_NAME, &x.l);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(o.status, 0);
  assert_int_equal(fk.originals, 1);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.compares, 1);
  assert_int_equal(fk.copies, 1);
  assert_true(fk.original_seq < fk.launch_seq && fk.launch_seq < fk.compare_seq);
  /* the reference is torch's O; Ponytail wrote contiguous scratch with the same bias */
  assert_ptr_equal(fk.compared.o, ME_O);
  assert_ptr_not_equal(fk.last.o, ME_O);
  assert_ptr_equal(fk.last.bias, ME_BIAS);
  assert_int_equal(fk.last.bias_row_stride, 4112);
  assert_int_equal(fk.last.o_head_stride, 128);
  assert_int_equal(fk.last.o_row_stride, 32 * 128);
  assert_int_equal(fk.last.o_batch_stride, 32 * 128);
  assert_null(fk.last.lse);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
  assert_int_equal(hs.verify_failures, 0);
  /* out of tolerance: counted */
  fk.compare_result[0] = 0.5f;
  assert_int_equal(pt_hooks_launch(id, ME_BF16_NAME, &x.l).verdict, PT_HOOK_SWAPPED);
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 2);
  assert_int_equal(hs.verify_failures, 1);
  /* the original's error reaches the caller, nothing compared */
  fk.orig_rc = 719;
  o = pt_hooks_launch(id, ME_BF16_NAME, &x.l);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(o.status, 719);
  assert_int_equal(fk.compares, 2);
  fk.orig_rc = 0;
  /* during capture: the original only (the shim launches it) */
  fk.capturing = 1;
  assert_pass(pt_hooks_launch(id, ME_BF16_NAME, &x.l), NULL);
  fk.capturing = 0;
  assert_int_equal(fk.launches, 2);
  /* a refused launch is not verified either */
  x.p.b[ME_DROPOUT_STATE] = 1; /* use_dropout */
  assert_pass(pt_hooks_launch(id, ME_BF16_NAME, &x.l), "dropout");
  assert_int_equal(fk.originals, 3);
  /* MLA: Ponytail's scratch O is v's width (128), the reference carries v's size too */
  struct me_shape s = me_hf;
  s.h = 16;
  s.d = 192;
  s.dv = 128;
  mk(&x, &s);
  fk.compare_result[0] = 0.004f;
  assert_int_equal(pt_hooks_launch(id, ME_BF16_NAME, &x.l).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.last.head_dim, 192);
  assert_int_equal(fk.last.v_head_dim, 128);
  assert_int_equal(fk.last.o_head_stride, 128);
  assert_int_equal(fk.last.o_row_stride, 16 * 128);
  assert_int_equal(fk.last.o_batch_stride, 16 * 128);
  assert_ptr_equal(fk.compared.o, ME_O);
  assert_int_equal(fk.compared.v_head_dim, 128);
  assert_int_equal(fk.compared.o_head_stride, 128);
}

/* PONYTAIL_TEST_FAULT: after the swap on torch's O; in verify mode on the
 * scratch before the compare. */
static void test_fault(void **st) {
  (void)st;
  set_env("PONYTAIL_ATTN_MASKED", "1");
  set_env("PONYTAIL_TEST_FAULT", "200");
  struct launch x;
  mk(&x, &me_hf);
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.faults, 1);
  assert_true(fk.fault_seq > fk.launch_seq);
  assert_ptr_equal(fk.fault_desc.o, ME_O);
  assert_true(fk.fault_factor == -1.0f);
  set_env("PONYTAIL_ATTN", "verify");
  fk.compare_result[1] = 1.0f;
  assert_int_equal(go(&x).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.faults, 2);
  assert_ptr_equal(fk.fault_desc.o, fk.last.o);
  assert_ptr_not_equal(fk.fault_desc.o, ME_O);
  assert_true(fk.launch_seq < fk.fault_seq && fk.fault_seq < fk.compare_seq);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.faults_planted, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_default_on, setup, teardown),
      cmocka_unit_test_setup_teardown(test_option_off_report_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_option_on_match, setup, teardown),
      cmocka_unit_test_setup_teardown(test_swapped_with_bias, setup, teardown),
      cmocka_unit_test_setup_teardown(test_swapped_mla, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fallback_reasons, setup, teardown),
      cmocka_unit_test_setup_teardown(test_capture, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
