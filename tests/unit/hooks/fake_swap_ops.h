/* Fake CUDA ops (struct pt_flash_ops) and a fake original launch for the
 * tests of the hooks that swap attention (test_torch_flash.c,
 * test_torch_mem_eff.c): every call is counted, the last arguments kept, and
 * launch / fault / compare / original calls numbered in order (fk.seq).
 * Include once per test; reset fk (memset) in the test's setup. */
#ifndef PT_TEST_FAKE_SWAP_OPS_H
#define PT_TEST_FAKE_SWAP_OPS_H
#include <stdlib.h>
#include <string.h>

#include "hooks/attn_swap.h"

static struct {
  int launches, compares, allocs, prepares, syncs, copies, originals;
  int launch_rc, orig_rc, alloc_rc;
  int capturing;
  const char *supported_reason;
  struct pt_attn_desc last, compared;
  void *last_ws;
  size_t last_ws_bytes;
  void *last_stream;
  size_t ws_need;
  float compare_result[4];
  void *mem[256];
  int nmem;
  /* call order, and the planted fault: calls, what they got */
  int seq, launch_seq, fault_seq, compare_seq, original_seq;
  int faults, fault_rc;
  float fault_factor;
  struct pt_attn_desc fault_desc;
  void *fault_stream;
  /* the prefill kernel's entry points */
  int prefill_launches, prefill_seq;
  const char *prefill_reason;
  struct pt_attn_desc prefill_last;
} fk;

static const char *fk_supported(const struct pt_attn_desc *d) { (void)d; return fk.supported_reason; }
static size_t fk_ws_bytes(const struct pt_attn_desc *d) { (void)d; return fk.ws_need; }
static int fk_prepare(void *ws, size_t bytes, void *stream) {
  (void)stream;
  memset(ws, 0, bytes);
  fk.prepares++;
  return 0;
}
static int fk_launch(const struct pt_attn_desc *d, void *ws, size_t ws_bytes, void *stream) {
  fk.launches++;
  fk.launch_seq = ++fk.seq;
  fk.last = *d;
  fk.last_ws = ws;
  fk.last_ws_bytes = ws_bytes;
  fk.last_stream = stream;
  return fk.launch_rc;
}
static int fk_compare(const struct pt_attn_desc *ref, const void *test_o, const float *test_lse,
                      float *result, void *stream) {
  (void)test_o; (void)test_lse; (void)stream;
  fk.compares++;
  fk.compare_seq = ++fk.seq;
  fk.compared = *ref;
  memcpy(result, fk.compare_result, sizeof fk.compare_result); /* "device" = host here */
  return 0;
}
static int fk_is_capturing(void *stream, int *c) { (void)stream; *c = fk.capturing; return 0; }
static int fk_ctx(void **ctx) { *ctx = (void *)0xC0; return 0; }
static int fk_alloc(void **p, size_t bytes) {
  if (fk.alloc_rc) return fk.alloc_rc;
  assert_false(fk.capturing); /* never allocate inside a capture */
  assert_true(fk.nmem < 256);
  *p = calloc(1, bytes);
  fk.mem[fk.nmem++] = *p;
  fk.allocs++;
  return 0;
}
static int fk_copy(void *dst, const void *src, size_t n, void *stream) {
  (void)stream;
  memcpy(dst, src, n);
  fk.copies++;
  return 0;
}
static int fk_sync(void *stream) {
  (void)stream;
  assert_false(fk.capturing);
  fk.syncs++;
  return 0;
}
static int fk_fault(const struct pt_attn_desc *d, float factor, void *stream) {
  fk.faults++;
  fk.fault_seq = ++fk.seq;
  fk.fault_desc = *d;
  fk.fault_factor = factor;
  fk.fault_stream = stream;
  return fk.fault_rc;
}

static const char *fk_prefill_supported(const struct pt_attn_desc *d) {
  (void)d;
  return fk.prefill_reason;
}
static int fk_prefill_launch(const struct pt_attn_desc *d, void *stream) {
  fk.prefill_launches++;
  fk.prefill_seq = ++fk.seq;
  fk.prefill_last = *d;
  fk.last_stream = stream;
  return fk.launch_rc;
}

static const struct pt_flash_ops fk_ops = {
    .supported = fk_supported, .ws_bytes = fk_ws_bytes, .ws_prepare = fk_prepare,
    .launch = fk_launch, .compare = fk_compare, .is_capturing = fk_is_capturing,
    .ctx_current = fk_ctx, .mem_alloc = fk_alloc, .copy_to_host = fk_copy, .stream_sync = fk_sync,
    .fault = fk_fault, .prefill_supported = fk_prefill_supported, .prefill_launch = fk_prefill_launch,
};

/* A table without the prefill kernel (a build or driver that lacks it). */
__attribute__((unused)) static const struct pt_flash_ops fk_ops_no_prefill = {
    .supported = fk_supported, .ws_bytes = fk_ws_bytes, .ws_prepare = fk_prepare,
    .launch = fk_launch, .compare = fk_compare, .is_capturing = fk_is_capturing,
    .ctx_current = fk_ctx, .mem_alloc = fk_alloc, .copy_to_host = fk_copy, .stream_sync = fk_sync,
    .fault = fk_fault,
};

/* The original kernel's launch, as the shim hands it to a hook. */
static int fk_original(const struct pt_launch *l) {
  (void)l;
  fk.originals++;
  fk.original_seq = ++fk.seq;
  return fk.orig_rc;
}

#endif
