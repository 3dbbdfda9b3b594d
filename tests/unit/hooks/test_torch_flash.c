/* The FA2 hook's launch decisions with fake CUDA ops: swap, fallback
 * reasons, the combine-skip state machine, capture, workspaces, verify, and
 * the planted fault of PONYTAIL_TEST_FAULT. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/flash_ws.h"
#include "hooks/hook.h"
#include "hooks/torch_flash.h"
#include "common/options.h"
#include "tests/unit/hooks/fake_swap_ops.h"
#include "tests/unit/hooks/fa_buf.h"

static void set_mode(const char *mode) {
  setenv("PONYTAIL_ATTN", mode, 1);
  pt_opts_reload();
}

static void set_fault(const char *n) {
  if (n) setenv("PONYTAIL_TEST_FAULT", n, 1);
  else unsetenv("PONYTAIL_TEST_FAULT");
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
  unsetenv("PONYTAIL_ATTN_PREFILL");
  set_mode("on");
  return 0;
}

static int teardown(void **st) {
  (void)st;
  pt_flash_set_ops(NULL);
  pt_flash_reset_for_tests();
  for (int i = 0; i < fk.nmem; i++) free(fk.mem[i]);
  fk.nmem = 0;
  return 0;
}

/* ---- launches ------------------------------------------------------------- */

#define STREAM_A ((void *)0x5A)
#define STREAM_B ((void *)0x5B)

static const struct fa_shape hf = {.b = 8, .h_k = 4, .G = 4, .seqlen_k = 4100, .s_alloc = 4608,
                                   .d = 128, .bf16 = 1, .num_splits = 4};

struct launch { struct fa_buf p; void *arg0; void *args[1]; struct pt_launch l; };

static void mk(struct launch *x, size_t bytes, const struct fa_shape *s, void *stream, int fwd) {
  fa_fill(&x->p, bytes, s);
  memset(&x->l, 0, sizeof x->l);
  x->args[0] = x->p.b;
  x->l.args = x->args;
  x->l.param_bytes = bytes;
  x->l.stream = stream;
  x->l.launch_original = fk_original;
  if (fwd) {
    x->l.grid[0] = 1;
    x->l.grid[1] = (unsigned)s->b;
    x->l.grid[2] = (unsigned)s->h_k;
  } else {
    fa_grid_splitkv(s, x->l.grid);
  }
  x->l.block[0] = 128;
  x->l.block[1] = x->l.block[2] = 1;
}

static struct pt_hook_outcome go(int id, struct launch *x) { return pt_hooks_launch(id, "k", &x->l); }

static void assert_pass(struct pt_hook_outcome o, const char *reason) {
  assert_int_equal(o.verdict, PT_HOOK_PASS);
  if (!reason) {
    if (o.reason) fail_msg("unexpected reason '%s'", o.reason);
  } else {
    if (!o.reason || strcmp(o.reason, reason) != 0)
      fail_msg("want '%s' got '%s'", reason, o.reason ? o.reason : "(none)");
  }
}

/* ---- tests ---------------------------------------------------------------- */

static void test_swap_split_then_skip_combine(void **st) {
  (void)st;
  for (size_t bytes = 464; bytes <= 472; bytes += 8) {
    struct launch s, c;
    mk(&s, bytes, &hf, STREAM_A, 0);
    mk(&c, bytes, &hf, STREAM_A, 0);
    int before = fk.launches;
    struct pt_hook_outcome o = go(PT_HOOK_FLASH_SPLITKV, &s);
    assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
    assert_int_equal(o.status, 0);
    assert_int_equal(fk.launches, before + 1);
    assert_ptr_equal(fk.last_stream, STREAM_A);
    assert_non_null(fk.last_ws);
    assert_true(fk.last_ws_bytes >= fk.ws_need);
    assert_ptr_equal(fk.last.o, FA_PTR(0x7f0000400000ull));
    assert_int_equal(fk.last.seqlen_q, 4);
    assert_int_equal(fk.last.h, 4);
    /* the combine that follows: dropped */
    o = go(PT_HOOK_FLASH_COMBINE, &c);
    assert_int_equal(o.verdict, PT_HOOK_SKIPPED);
    assert_int_equal(o.status, 0);
    /* a second combine: not ours any more */
    assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
    assert_int_equal(fk.originals, 0); /* the hook never ran originals itself */
  }
}

static void test_combine_other_stream_not_skipped(void **st) {
  (void)st;
  struct launch s, cb, ca;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&cb, 464, &hf, STREAM_B, 0);
  mk(&ca, 464, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &cb), NULL);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &ca).verdict, PT_HOOK_SKIPPED);
}

static void test_combine_other_output_not_skipped(void **st) {
  (void)st;
  struct launch s, other, mine;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&other, 464, &hf, STREAM_A, 0);
  mk(&mine, 464, &hf, STREAM_A, 0);
  FA_PUT(&other.p, FA_O_PTR, void *, FA_PTR(0x7f0000880000ull));
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &other), NULL);
  /* the pending one is still waiting for its own combine */
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &mine).verdict, PT_HOOK_SKIPPED);
  /* other partials / LSE buffers: not ours either */
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  FA_PUT(&other.p, FA_O_PTR, void *, FA_PTR(0x7f0000400000ull));
  FA_PUT(&other.p, FA_OACCUM_PTR, void *, FA_PTR(0x7f0000990000ull));
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &other), NULL);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &mine).verdict, PT_HOOK_SKIPPED);
}

static void test_no_pending_without_split(void **st) {
  (void)st;
  struct fa_shape one = hf;
  one.num_splits = 1; /* split kernel writing O itself: no combine follows */
  struct launch s, c;
  mk(&s, 464, &one, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  FA_PUT(&c.p, FA_OACCUM_PTR, void *, FA_PTR(0));
  FA_PUT(&c.p, FA_LSEACCUM_PTR, void *, FA_PTR(0));
  FA_PUT(&c.p, FA_NUM_SPLITS, int, 1);
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
}

static void test_fallback_clears_pending(void **st) {
  (void)st;
  struct launch s, bad, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&bad, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  FA_PUT(&bad.p, FA_P_DROPOUT, float, 0.5f);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  /* an unswapped split launch on the stream: its combine must run */
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &bad), "dropout");
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
}

static void *other_thread_combine(void *arg) {
  struct launch *c = arg;
  struct pt_hook_outcome *o = malloc(sizeof *o);
  *o = go(PT_HOOK_FLASH_COMBINE, c);
  return o;
}

static void test_combine_from_other_thread_not_skipped(void **st) {
  (void)st;
  struct launch s, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, other_thread_combine, &c), 0);
  void *res;
  pthread_join(t, &res);
  assert_int_equal(((struct pt_hook_outcome *)res)->verdict, PT_HOOK_PASS);
  free(res);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
}

static void test_wrong_param_sizes(void **st) {
  (void)st;
  struct launch s;
  mk(&s, 464, &hf, STREAM_A, 0);
  s.l.param_bytes = 456;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "param size 456 not a known Flash_fwd_params layout");
  s.l.param_bytes = 480;
  assert_pass(go(PT_HOOK_FLASH_FWD, &s), "param size 480 not a known Flash_fwd_params layout");
  s.l.param_bytes = 0;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "param size unknown");
  assert_int_equal(fk.launches, 0);
  /* a combine of unknown size with nothing pending is simply not ours */
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &s), NULL);
}

static void test_fwd_kernel_decode_swapped(void **st) {
  (void)st;
  struct fa_shape s1 = hf;
  s1.num_splits = 0;
  struct launch f, c;
  mk(&f, 472, &s1, STREAM_A, 1);
  mk(&c, 472, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.last.b, 8);
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
  /* prefill-shaped forward launch with the prefill kernel off: fallback */
  setenv("PONYTAIL_ATTN_PREFILL", "0", 1);
  pt_opts_reload();
  FA_PUT(&f.p, FA_SEQLEN_Q, int, 512);
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "seqlen_q > 16 (prefill)");
  assert_int_equal(fk.prefill_launches, 0);
}

static void test_mode_off_and_reasons(void **st) {
  (void)st;
  struct launch s;
  mk(&s, 464, &hf, STREAM_A, 0);
  set_mode("off");
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "disabled");
  set_mode("on");
  fk.supported_reason = "misaligned pointer";
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "misaligned pointer");
  fk.supported_reason = NULL;
  s.l.stream = (void *)0x2;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "per-thread default stream");
  s.l.stream = NULL;
  s.l.per_thread_stream = 1;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "per-thread default stream");
  s.l.per_thread_stream = 0;
  s.l.grid[1] = 5;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "unsupported kernel variant");
  assert_int_equal(fk.launches, 0);
  assert_int_equal(pt_hooks_match("_ZN13pytorch_flash16flash_fwd_kernelI"), PT_HOOK_FLASH_FWD);
  assert_string_equal(pt_hooks_name(PT_HOOK_FLASH_SPLITKV), "torch_flash/splitkv");
  assert_string_equal(pt_hooks_name(PT_HOOK_FLASH_COMBINE), "torch_flash/combine");
  assert_string_equal(pt_hooks_name(PT_HOOK_FLASH_FWD), "torch_flash/fwd");
  assert_null(pt_hooks_name(0));
}

static void test_launch_failure_falls_back(void **st) {
  (void)st;
  struct launch s, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  fk.launch_rc = 700;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "ponytail launch failed");
  fk.launch_rc = 0;
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL); /* the original's combine runs */
}

static void test_capture_workspaces(void **st) {
  (void)st;
  struct launch s, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  /* first launch ever inside a capture: nothing allocated yet */
  fk.capturing = 1;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "no workspace during capture");
  assert_int_equal(fk.allocs, 0);
  /* eager launch: the stream's buffer plus a spare, both zeroed */
  fk.capturing = 0;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  assert_int_equal(fk.allocs, 2);
  assert_int_equal(fk.prepares, 2);
  void *ws_a = fk.last_ws;
  /* captured on the same stream: same buffer, no allocation, no sync */
  int syncs = fk.syncs;
  fk.capturing = 1;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  assert_ptr_equal(fk.last_ws, ws_a);
  /* captured on a fresh stream (torch.cuda.graph's side stream): the spare */
  s.l.stream = c.l.stream = STREAM_B;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  assert_ptr_not_equal(fk.last_ws, ws_a);
  void *ws_b = fk.last_ws;
  /* a third stream in capture: the spare is gone */
  s.l.stream = (void *)0x5C;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "no workspace during capture");
  /* a shape needing more than the stream's buffer, in capture: fallback */
  s.l.stream = STREAM_B;
  fk.ws_need = 64 << 20;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "no workspace during capture");
  assert_int_equal(fk.allocs, 2);
  assert_int_equal(fk.syncs, syncs);
  /* eager again: grows (new buffer, old one kept for graphs that hold it) */
  fk.capturing = 0;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_ptr_not_equal(fk.last_ws, ws_b);
  assert_true(fk.last_ws_bytes >= ((size_t)64 << 20));
}

/* A launch that needs no workspace (ws_bytes 0: one split, or a cluster
 * merge) allocates none, eagerly or inside a capture on a stream never seen
 * before, and the kernel gets a NULL workspace. */
static void test_no_workspace_needed(void **st) {
  (void)st;
  fk.ws_need = 0;
  struct launch s, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  fk.capturing = 1;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  assert_null(fk.last_ws);
  assert_int_equal(fk.last_ws_bytes, 0);
  fk.capturing = 0;
  s.l.stream = c.l.stream = STREAM_B;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  assert_null(fk.last_ws);
  assert_int_equal(fk.allocs, 0);
  assert_int_equal(fk.prepares, 0);
  assert_int_equal(fk.launches, 2);
  /* a later shape that needs one gets it (eagerly) */
  fk.ws_need = 64 << 10;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_non_null(fk.last_ws);
  assert_int_equal(fk.allocs, 2); /* the stream's buffer and the context's spare */
}

static void test_workspace_alloc_failure(void **st) {
  (void)st;
  struct launch s;
  mk(&s, 464, &hf, STREAM_A, 0);
  fk.alloc_rc = 2;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "workspace alloc failed");
  fk.alloc_rc = 0;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
}

static void test_workspace_table_full(void **st) {
  (void)st;
  fk.ws_need = 16;
  struct launch s;
  mk(&s, 464, &hf, STREAM_A, 0);
  for (int i = 0; i < PT_FLASH_WS_SLOTS; i++) {
    s.l.stream = (void *)(uintptr_t)(0x1000 + i * 16);
    assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  }
  s.l.stream = (void *)0x9990;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "workspace table full");
  /* streams already in the table keep working */
  s.l.stream = (void *)0x1000;
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
}

static void test_verify_fwd(void **st) {
  (void)st;
  set_mode("verify");
  struct fa_shape s1 = hf;
  s1.num_splits = 0;
  struct launch f;
  mk(&f, 464, &s1, STREAM_A, 1);
  fk.compare_result[0] = 0.004f; /* |dO| */
  fk.compare_result[1] = 1.0f;   /* |O| */
  fk.compare_result[2] = 0.001f; /* |dLSE| */
  fk.compare_result[3] = 10.0f;  /* |LSE| */
  struct pt_hook_outcome o = go(PT_HOOK_FLASH_FWD, &f);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.originals, 1);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.compares, 1);
  assert_int_equal(fk.copies, 1);
  /* Ponytail wrote scratch: contiguous [b, seqlen_q, h, d], not the real O */
  assert_ptr_not_equal(fk.last.o, FA_PTR(0x7f0000400000ull));
  assert_int_equal(fk.last.o_head_stride, 128);
  assert_int_equal(fk.last.o_row_stride, 4 * 128);
  assert_int_equal(fk.last.o_batch_stride, 4 * 4 * 128);
  assert_ptr_not_equal(fk.last.lse, FA_PTR(0x7f0000600000ull));
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
  assert_int_equal(hs.verify_failures, 0);
  /* out of tolerance, then NaN */
  fk.compare_result[0] = 0.5f;
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  fk.compare_result[0] = 0.0f;
  fk.compare_result[2] = __builtin_nanf("");
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 3);
  assert_int_equal(hs.verify_failures, 2);
  /* the original's error reaches the caller, nothing is compared */
  fk.orig_rc = 719;
  o = go(PT_HOOK_FLASH_FWD, &f);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(o.status, 719);
  assert_int_equal(fk.compares, 3);
}

static void test_verify_split(void **st) {
  (void)st;
  set_mode("verify");
  fk.compare_result[1] = 1.0f;
  fk.compare_result[3] = 1.0f;
  struct launch s, c;
  mk(&s, 472, &hf, STREAM_A, 0);
  mk(&c, 472, &hf, STREAM_A, 0);
  /* the split launch runs as it is (the shim launches it) */
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), NULL);
  assert_int_equal(fk.launches, 0);
  /* its combine: original first, then Ponytail into scratch, compared */
  struct pt_hook_outcome o = go(PT_HOOK_FLASH_COMBINE, &c);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.originals, 1);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.compares, 1);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
  assert_int_equal(hs.verify_failures, 0);
  /* a second combine is not touched */
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
  /* during capture: originals only, nothing verified */
  fk.capturing = 1;
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), NULL);
  assert_pass(go(PT_HOOK_FLASH_COMBINE, &c), NULL);
  assert_int_equal(fk.launches, 1);
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
}

/* PONYTAIL_TEST_FAULT: off by default; on, every swapped launch is followed on
 * its stream by the fault kernel over the same O, and only swapped ones. */
static void test_fault_off_by_default(void **st) {
  (void)st;
  struct launch s, c;
  mk(&s, 464, &hf, STREAM_A, 0);
  mk(&c, 464, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  set_fault("0");
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  set_fault("x"); /* not a number: reported, the default (off) kept */
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  set_fault("-5");
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.launches, 4);
  assert_int_equal(fk.faults, 0);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.faults_planted, 0);
}

static void test_fault_after_swap(void **st) {
  (void)st;
  set_fault("200");
  struct launch s, c;
  mk(&s, 472, &hf, STREAM_A, 0);
  mk(&c, 472, &hf, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.faults, 1);
  assert_true(fk.fault_seq > fk.launch_seq); /* after Ponytail's kernel, on its stream */
  assert_ptr_equal(fk.fault_stream, STREAM_A);
  assert_ptr_equal(fk.fault_desc.o, FA_PTR(0x7f0000400000ull)); /* the real O */
  assert_ptr_equal(fk.fault_desc.o, fk.last.o);
  assert_int_equal(fk.fault_desc.o_batch_stride, fk.last.o_batch_stride);
  assert_int_equal(fk.fault_desc.o_row_stride, fk.last.o_row_stride);
  assert_int_equal(fk.fault_desc.o_head_stride, fk.last.o_head_stride);
  assert_int_equal(fk.fault_desc.b, 8);
  assert_int_equal(fk.fault_desc.seqlen_q, 4);
  assert_true(fk.fault_factor == -1.0f); /* 200: sign flipped */
  /* the combine-skip is unchanged */
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  /* a fallback is the original kernel: nothing planted */
  struct launch bad;
  mk(&bad, 472, &hf, STREAM_A, 0);
  FA_PUT(&bad.p, FA_P_DROPOUT, float, 0.5f);
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &bad), "dropout");
  fk.launch_rc = 700; /* a failed swap runs the original: nothing planted */
  assert_pass(go(PT_HOOK_FLASH_SPLITKV, &s), "ponytail launch failed");
  fk.launch_rc = 0;
  assert_int_equal(fk.faults, 1);
  /* under capture: stream-ordered, no allocation or sync (the fakes assert that) */
  fk.capturing = 1;
  set_fault("5");
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.faults, 2);
  assert_float_equal(fk.fault_factor, 0.95f, 1e-6);
  fk.capturing = 0;
  /* the fault kernel failing leaves the swap in place, uncounted */
  fk.fault_rc = 700;
  struct pt_hook_outcome o = go(PT_HOOK_FLASH_SPLITKV, &s);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(o.status, 0);
  assert_int_equal(fk.faults, 3);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.faults_planted, 2);
  /* no fault kernel in the table (no driver): the swap stands, nothing counted */
  struct pt_flash_ops nofault = fk_ops;
  nofault.fault = NULL;
  fk.fault_rc = 0;
  pt_flash_set_ops(&nofault);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &s).verdict, PT_HOOK_SWAPPED);
  pt_flash_set_ops(&fk_ops);
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.faults_planted, 2);
  set_fault(NULL);
}

/* Verify mode: the fault lands on Ponytail's scratch output before the
 * compare, so the check sees it; torch's own output stays untouched. */
static void test_fault_in_verify(void **st) {
  (void)st;
  set_mode("verify");
  set_fault("100");
  struct fa_shape s1 = hf;
  s1.num_splits = 0;
  struct launch f;
  mk(&f, 464, &s1, STREAM_A, 1);
  fk.compare_result[1] = 1.0f;
  fk.compare_result[3] = 1.0f;
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.faults, 1);
  assert_ptr_equal(fk.fault_desc.o, fk.last.o); /* the scratch ... */
  assert_ptr_not_equal(fk.fault_desc.o, FA_PTR(0x7f0000400000ull)); /* ... not torch's O */
  assert_int_equal(fk.fault_desc.o_head_stride, 128);
  assert_true(fk.launch_seq < fk.fault_seq && fk.fault_seq < fk.compare_seq);
  assert_true(fk.fault_factor == 0.0f);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.faults_planted, 1);
  set_fault(NULL);
}

static void test_fault_factor(void **st) {
  (void)st;
  assert_true(pt_flash_fault_factor(0) == 1.0f);
  assert_float_equal(pt_flash_fault_factor(5), 0.95f, 1e-6);
  assert_true(pt_flash_fault_factor(100) == 0.0f);
  assert_true(pt_flash_fault_factor(200) == -1.0f);
  assert_true(pt_flash_fault_factor(PT_FLASH_FAULT_MAX) == -9.0f);
  assert_true(pt_flash_fault_factor(UINT64_MAX) == -9.0f); /* capped */
}

static void test_verify_ok(void **st) {
  (void)st;
  float r1[4] = {0.01f, 1.0f, 0.0f, 0.0f};
  float rel_o, rel_l;
  assert_true(pt_flash_verify_ok(r1, &rel_o, &rel_l));
  float r2[4] = {0.011f, 1.0f, 0.0f, 1.0f};
  assert_false(pt_flash_verify_ok(r2, NULL, NULL));
  float r3[4] = {0.0f, 1.0f, 0.002f, 1.0f};
  assert_false(pt_flash_verify_ok(r3, NULL, NULL));
  float r4[4] = {__builtin_inff(), 1.0f, 0.0f, 1.0f};
  assert_false(pt_flash_verify_ok(r4, NULL, NULL));
  float r5[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* all-zero reference and result */
  assert_true(pt_flash_verify_ok(r5, NULL, NULL));
}

/* ---- prefill (PONYTAIL_ATTN_PREFILL) ---------------------------------------- */

static void set_prefill(const char *v) {
  if (v) setenv("PONYTAIL_ATTN_PREFILL", v, 1);
  else unsetenv("PONYTAIL_ATTN_PREFILL");
  pt_opts_reload();
}

/* A prefill forward launch: 512 query rows (fa_fill puts G in seqlen_q). */
static const struct fa_shape pf = {.b = 2, .h_k = 8, .G = 512, .seqlen_k = 512, .s_alloc = 512,
                                   .d = 128, .bf16 = 1, .num_splits = 0};

/* On by default: the prefill kernel runs instead of torch's, the decode
 * kernel is not called and no workspace is taken; its own refusals and the
 * generic ones are reported. PONYTAIL_ATTN_PREFILL=0: the reason says prefill. */
static void test_prefill_swap(void **st) {
  (void)st;
  struct launch f;
  mk(&f, 472, &pf, STREAM_A, 1);
  set_prefill("0");
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "seqlen_q > 16 (prefill)");
  assert_int_equal(fk.prefill_launches, 0);

  set_prefill(NULL);
  struct pt_hook_outcome o = go(PT_HOOK_FLASH_FWD, &f);
  assert_int_equal(o.verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.prefill_launches, 1);
  assert_int_equal(fk.launches, 0);
  assert_int_equal(fk.allocs, 0);
  assert_int_equal(fk.originals, 0);
  assert_int_equal(fk.prefill_last.seqlen_q, 512);
  assert_int_equal(fk.prefill_last.seqlen_k, 512);
  assert_int_equal(fk.prefill_last.b, 2);
  assert_int_equal(fk.prefill_last.head_dim, 128);
  assert_ptr_equal(fk.prefill_last.o, FA_PTR(0x7f0000400000ull));
  assert_ptr_equal(fk.prefill_last.lse, FA_PTR(0x7f0000600000ull));
  assert_ptr_equal(fk.last_stream, STREAM_A);

  /* the kernel's own limits */
  fk.prefill_reason = "prefill head_dim not 64/128";
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "prefill head_dim not 64/128");
  fk.prefill_reason = NULL;
  /* the decode kernel's are not asked */
  fk.supported_reason = "misaligned pointer";
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  fk.supported_reason = NULL;
  /* every check that is not about the query length still applies */
  FA_PUT(&f.p, FA_P_DROPOUT, float, 0.9f);
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "dropout");
  FA_PUT(&f.p, FA_P_DROPOUT, float, 1.0f);
  FA_PUT(&f.p, FA_IS_CAUSAL, uint8_t, 1);
  FA_PUT(&f.p, FA_SEQLEN_K, int, 100); /* causal with more queries than keys */
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "causal with seqlen_q > seqlen_k");
  FA_PUT(&f.p, FA_SEQLEN_K, int, 512);
  /* a failed launch runs the original; another GPU than sm_90 is named */
  fk.launch_rc = 700;
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "ponytail launch failed");
  fk.launch_rc = 801; /* CUDA_ERROR_NOT_SUPPORTED */
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "prefill kernel needs compute capability 9.0");
  fk.launch_rc = 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: first launch under capture */
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "prefill kernel not loaded before capture");
  fk.launch_rc = 0;
  /* PONYTAIL_ATTN=off wins */
  set_mode("off");
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "disabled");
  set_mode("on");
  /* decode launches still go to the decode kernel */
  struct fa_shape s1 = hf;
  s1.num_splits = 0;
  struct launch d;
  mk(&d, 472, &s1, STREAM_A, 1);
  const int pl = fk.prefill_launches;
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &d).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.launches, 1);
  assert_int_equal(fk.prefill_launches, pl);
  /* an ops table without the prefill kernel: refused, nothing launched */
  pt_flash_set_ops(&fk_ops_no_prefill);
  assert_pass(go(PT_HOOK_FLASH_FWD, &f), "driver unavailable");
  assert_int_equal(fk.prefill_launches, pl);
  set_prefill(NULL);
}

/* A split prefill launch (FA2 splits the keys when the grid is small): the
 * prefill kernel writes O and the LSE, so the combine that follows is
 * skipped, as for decode. */
static void test_prefill_split_skips_combine(void **st) {
  (void)st;
  set_prefill("1");
  struct fa_shape s = pf;
  s.G = 40;
  s.num_splits = 3;
  struct launch k, c;
  mk(&k, 464, &s, STREAM_A, 0);
  mk(&c, 464, &s, STREAM_A, 0);
  assert_int_equal(go(PT_HOOK_FLASH_SPLITKV, &k).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.prefill_launches, 1);
  assert_int_equal(fk.prefill_last.seqlen_q, 40);
  assert_int_equal(go(PT_HOOK_FLASH_COMBINE, &c).verdict, PT_HOOK_SKIPPED);
  set_prefill(NULL);
}

/* Verify mode: the original runs, then the prefill kernel into scratch and
 * the comparison; a launch whose scratch would exceed the cap is counted as
 * not verified and allocates nothing. */
static void test_prefill_verify(void **st) {
  (void)st;
  set_prefill("1");
  set_mode("verify");
  struct launch f;
  mk(&f, 464, &pf, STREAM_A, 1);
  fk.compare_result[1] = 1.0f;
  fk.compare_result[3] = 10.0f;
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.originals, 1);
  assert_int_equal(fk.prefill_launches, 1);
  assert_int_equal(fk.launches, 0);
  assert_int_equal(fk.compares, 1);
  assert_true(fk.original_seq < fk.prefill_seq && fk.prefill_seq < fk.compare_seq);
  /* scratch: contiguous [b, seqlen_q, h, d], not the real O */
  assert_ptr_not_equal(fk.prefill_last.o, FA_PTR(0x7f0000400000ull));
  assert_int_equal(fk.prefill_last.o_row_stride, 8 * 128);
  struct pt_hooks_stats hs;
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
  assert_int_equal(hs.verify_skipped, 0);
  const int allocs = fk.allocs;
  /* 2 x 8 heads x 65536 rows x 128 x 2 bytes = 256 MiB of O alone: over the cap */
  FA_PUT(&f.p, FA_SEQLEN_Q, int, 65536);
  FA_PUT(&f.p, FA_SEQLEN_K, int, 65536);
  f.l.grid[0] = 512;
  assert_int_equal(go(PT_HOOK_FLASH_FWD, &f).verdict, PT_HOOK_SWAPPED);
  assert_int_equal(fk.originals, 2);
  assert_int_equal(fk.prefill_launches, 1);
  assert_int_equal(fk.allocs, allocs);
  pt_hooks_get_stats(&hs);
  assert_int_equal(hs.verified, 1);
  assert_int_equal(hs.verify_skipped, 1);
  set_prefill(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_swap_split_then_skip_combine, setup, teardown),
      cmocka_unit_test_setup_teardown(test_combine_other_stream_not_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_combine_other_output_not_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_pending_without_split, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fallback_clears_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(test_combine_from_other_thread_not_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_param_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fwd_kernel_decode_swapped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mode_off_and_reasons, setup, teardown),
      cmocka_unit_test_setup_teardown(test_launch_failure_falls_back, setup, teardown),
      cmocka_unit_test_setup_teardown(test_capture_workspaces, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_workspace_needed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_workspace_alloc_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_workspace_table_full, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_fwd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_split, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_ok, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_off_by_default, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_after_swap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_in_verify, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_factor, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prefill_swap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prefill_split_skips_combine, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prefill_verify, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
