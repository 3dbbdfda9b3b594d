/* The per-call SDPA policy (hooks/torch_sdpa.c) against fake torch functions
 * and fake c10::TensorImpl objects laid out as torch 2.11's: which backend
 * each call gets, when torch is asked a second time (and that cuDNN reads as
 * disabled only during that ask), and that sizes are read only when torch's
 * own sym_size confirms the layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/torch_sdpa.h"
#include "common/options.h"

/* A fake TensorImpl: rank at 0x40, sizes from 0x48, policy bits 2..3 of 0xae. */
struct fake_tensor {
  _Alignas(16) unsigned char impl[256];
  const unsigned char *handle; /* what an at::Tensor holds: the impl pointer */
  int64_t truth[4];            /* what torch's sym_size answers */
  int symbolic;                /* sym_size answers a tagged pointer */
};

static void tensor_init(struct fake_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d) {
  memset(t, 0, sizeof *t);
  memset(t->impl, 0xa5, sizeof t->impl); /* poison: only the three fields may matter */
  int64_t nd = 4, sz[4] = {b, h, s, d};
  memcpy(t->impl + 0x40, &nd, 8);
  memcpy(t->impl + 0x48, sz, sizeof sz);
  t->impl[0xae] = (unsigned char)(t->impl[0xae] & ~0x0c); /* policy 0: default sizes */
  memcpy(t->truth, sz, sizeof sz);
  t->handle = t->impl;
}

static void set_policy(struct fake_tensor *t, unsigned p) {
  t->impl[0xae] = (unsigned char)((t->impl[0xae] & ~0x0c) | (p << 2));
}

struct call {
  struct fake_tensor *q;
  int64_t first, second; /* torch's answer, and its answer with cuDNN excluded */
  int asks, asks_probing, sizes_read;
};
static struct call *cur;
static int math_on = 1;

static int64_t fake_choose(void *c) {
  struct call *k = c;
  k->asks++;
  if (pt_sdpa_probing()) {
    k->asks_probing++;
    return k->second;
  }
  return k->first;
}

static void fake_sym_size(int64_t *out, const void *tensor, int64_t dim) {
  const struct fake_tensor *t = (const struct fake_tensor *)((const char *)tensor - offsetof(struct fake_tensor, handle));
  cur->sizes_read++;
  if (t->symbolic) {
    *out = INT64_MIN + 64; /* a tagged node pointer */
    return;
  }
  *out = t->truth[dim < 0 ? 4 + dim : dim];
}

static int fake_math(void) { return math_on; }

/* Ponytail's prefill kernel as the shim would answer: takes head_dim 64 and
 * 128 when prefill_on (the option, a GPU it runs on). */
static int prefill_on;
static int64_t prefill_asked_hd;
static int fake_prefill_ok(void *call, int64_t head_dim) {
  (void)call;
  prefill_asked_hd = head_dim;
  return prefill_on && (head_dim == 64 || head_dim == 128);
}

static const struct pt_sdpa_torch torch_fns = {fake_choose, fake_sym_size, fake_math, fake_prefill_ok};

static int64_t run(struct call *k) {
  cur = k;
  int64_t r = pt_sdpa_choose(&torch_fns, k, &k->q->handle);
  assert_int_equal(pt_sdpa_probing(), 0); /* never left set */
  return r;
}

static int setup(void **st) {
  (void)st;
  unsetenv("PONYTAIL_TORCH_SDPA");
  unsetenv("PONYTAIL_ENABLE");
  setenv("PONYTAIL_LOG", "error", 1);
  pt_opts_reload();
  pt_sdpa_reset();
  math_on = 1;
  prefill_on = 0;
  prefill_asked_hd = 0;
  return 0;
}

static void test_decode_leaves_cudnn(void **st) {
  (void)st;
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&k), PT_SDP_FLASH);
  assert_int_equal(k.asks, 2);
  assert_int_equal(k.asks_probing, 1);
  /* A padded batch (mask): flash is not eligible, mem-efficient is. */
  struct call m = {&q, PT_SDP_CUDNN, PT_SDP_EFFICIENT, 0, 0, 0};
  assert_int_equal(run(&m), PT_SDP_EFFICIENT);
  /* Up to 16 query rows is decode (speculative or chunked decode). */
  tensor_init(&q, 8, 32, 16, 128);
  struct call d16 = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&d16), PT_SDP_FLASH);
  /* Nothing but math without cuDNN: cuDNN stays. */
  tensor_init(&q, 8, 32, 1, 128);
  struct call n = {&q, PT_SDP_CUDNN, PT_SDP_MATH, 0, 0, 0};
  assert_int_equal(run(&n), PT_SDP_CUDNN);
  struct pt_sdpa_stats s;
  pt_sdpa_get_stats(&s);
  assert_int_equal(s.calls, 4);
  assert_int_equal(s.decode_flash, 2);
  assert_int_equal(s.decode_mem_eff, 1);
  assert_int_equal(s.decode_kept, 1);
  assert_int_equal(s.layout_ok, 1);
  assert_true(pt_sdpa_seen());
}

static void test_prefill_and_other_choices_kept(void **st) {
  (void)st;
  struct fake_tensor q;
  tensor_init(&q, 1, 32, 17, 128);
  struct call p = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&p), PT_SDP_CUDNN);
  assert_int_equal(p.asks, 1);
  tensor_init(&q, 1, 32, 65536, 128);
  struct call p2 = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&p2), PT_SDP_CUDNN);
  /* torch chose something else itself (the user's order, a mask on a shape
   * cuDNN refuses, ...): kept, and no size is read. */
  tensor_init(&q, 8, 32, 1, 128);
  int64_t others[] = {PT_SDP_FLASH, PT_SDP_EFFICIENT, PT_SDP_MATH, PT_SDP_OVERRIDEABLE, PT_SDP_ERROR};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    struct call o = {&q, others[i], PT_SDP_FLASH, 0, 0, 0};
    assert_int_equal(run(&o), others[i]);
    assert_int_equal(o.asks, 1);
    assert_int_equal(o.sizes_read, 0);
  }
  struct pt_sdpa_stats s;
  pt_sdpa_get_stats(&s);
  assert_int_equal(s.prefill_kept, 2);
  assert_int_equal(s.not_cudnn, 5);
}

/* With Ponytail's prefill kernel able to take it, a prefill call leaves cuDNN
 * for flash (which the kernel replaces); for nothing else (torch's own flash
 * or mem-efficient prefill is slower than cuDNN). */
static void test_prefill_to_flash_for_ponytail(void **st) {
  (void)st;
  prefill_on = 1;
  struct fake_tensor q;
  tensor_init(&q, 2, 32, 32768, 128);
  struct call p = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&p), PT_SDP_FLASH);
  assert_int_equal(p.asks, 2);
  assert_int_equal(p.asks_probing, 1);
  assert_int_equal(prefill_asked_hd, 128); /* dim -1 of the query, as read and confirmed */
  tensor_init(&q, 1, 16, 17, 64);
  struct call p64 = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&p64), PT_SDP_FLASH);
  assert_int_equal(prefill_asked_hd, 64);
  /* a mask: flash not eligible, mem-efficient is; cuDNN stays */
  tensor_init(&q, 1, 32, 4096, 128);
  struct call m = {&q, PT_SDP_CUDNN, PT_SDP_EFFICIENT, 0, 0, 0};
  assert_int_equal(run(&m), PT_SDP_CUDNN);
  assert_int_equal(m.asks, 2);
  /* a head_dim the kernel does not take: no second ask */
  tensor_init(&q, 1, 32, 4096, 256);
  struct call h = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&h), PT_SDP_CUDNN);
  assert_int_equal(h.asks, 1);
  /* math disabled: no second ask (it could end in torch's "no kernel" error) */
  math_on = 0;
  tensor_init(&q, 1, 32, 4096, 128);
  struct call nm = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&nm), PT_SDP_CUDNN);
  assert_int_equal(nm.asks, 1);
  math_on = 1;
  /* decode is unchanged by the option */
  tensor_init(&q, 8, 32, 1, 128);
  struct call d = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&d), PT_SDP_FLASH);
  struct pt_sdpa_stats s;
  pt_sdpa_get_stats(&s);
  assert_int_equal(s.prefill_flash, 2);
  assert_int_equal(s.prefill_kept, 3);
  assert_int_equal(s.decode_flash, 1);
  /* the kernel unable (the option off, another GPU): prefill keeps cuDNN, asked once */
  prefill_on = 0;
  tensor_init(&q, 2, 32, 32768, 128);
  struct call off = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&off), PT_SDP_CUDNN);
  assert_int_equal(off.asks, 1);
  /* no prefill_ok at all (a caller that does not wire it): the same */
  prefill_on = 1;
  const struct pt_sdpa_torch bare = {fake_choose, fake_sym_size, fake_math, NULL};
  struct call nb = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  cur = &nb;
  assert_int_equal(pt_sdpa_choose(&bare, &nb, &q.handle), PT_SDP_CUDNN);
  assert_int_equal(nb.asks, 1);
}

static void test_math_disabled_no_second_ask(void **st) {
  (void)st;
  /* With math off, torch's second ask could end in "no available kernel". */
  math_on = 0;
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&k), PT_SDP_CUDNN);
  assert_int_equal(k.asks, 1);
}

static void test_custom_sizes_not_read(void **st) {
  (void)st;
  /* Symbolic (tracing) and nested tensors: policy bits 2 (and 3). torch's
   * sym_size is not even called: its answer could be a node we cannot free. */
  for (unsigned pol = 2; pol <= 3; pol++) {
    struct fake_tensor q;
    tensor_init(&q, 8, 32, 1, 128);
    set_policy(&q, pol);
    q.symbolic = 1;
    struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
    assert_int_equal(run(&k), PT_SDP_CUDNN);
    assert_int_equal(k.sizes_read, 0);
    assert_int_equal(k.asks, 1);
  }
  /* Custom strides only (policy 1): sizes are plain, read as usual. */
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  set_policy(&q, 1);
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&k), PT_SDP_FLASH);
  struct pt_sdpa_stats s;
  pt_sdpa_get_stats(&s);
  assert_int_equal(s.unknown_len, 2);
  assert_int_equal(s.layout_ok, 1);
}

static void test_other_modes_untouched(void **st) {
  (void)st;
  static const char *const modes[][2] = {{"PONYTAIL_TORCH_SDPA", "flash"},
                                         {"PONYTAIL_TORCH_SDPA", "keep"},
                                         {"PONYTAIL_ENABLE", "0"}};
  for (size_t i = 0; i < 3; i++) {
    setup(NULL);
    setenv(modes[i][0], modes[i][1], 1);
    pt_opts_reload();
    struct fake_tensor q;
    tensor_init(&q, 8, 32, 1, 128);
    struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
    assert_int_equal(run(&k), PT_SDP_CUDNN);
    assert_int_equal(k.asks, 1);
    assert_int_equal(k.sizes_read, 0);
    struct pt_sdpa_stats s;
    pt_sdpa_get_stats(&s);
    assert_int_equal(s.calls, 0);
    assert_false(pt_sdpa_seen());
  }
}

/* When torch's sym_size disagrees with the layout read, the layout is refuted
 * for good and the policy acts as the global flash policy: every cuDNN call
 * with a flash or mem-efficient path leaves cuDNN, prefill too. */
static void check_refuted_then_global(void) {
  struct pt_sdpa_stats s;
  pt_sdpa_get_stats(&s);
  assert_int_equal(s.layout_ok, -1);
  struct fake_tensor q;
  tensor_init(&q, 1, 32, 4096, 128);
  struct call p = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&p), PT_SDP_FLASH);
  assert_int_equal(p.sizes_read, 0);
  struct call n = {&q, PT_SDP_CUDNN, PT_SDP_MATH, 0, 0, 0};
  assert_int_equal(run(&n), PT_SDP_CUDNN);
}

static void test_refuted_by_sizes(void **st) {
  (void)st;
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  q.truth[0] = 9; /* torch says batch 9: the layout read is wrong */
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  /* The refuting call itself already gets the global policy. */
  assert_int_equal(run(&k), PT_SDP_FLASH);
  check_refuted_then_global();
}

static void test_refuted_by_symbolic_answer(void **st) {
  (void)st;
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  q.symbolic = 1; /* the policy bits read "plain" but torch answers with a node */
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&k), PT_SDP_FLASH);
  assert_int_equal(k.sizes_read, 2);
  check_refuted_then_global();
}

static void test_refuted_by_rank(void **st) {
  (void)st;
  struct fake_tensor q;
  tensor_init(&q, 8, 32, 1, 128);
  int64_t nd = 3;
  memcpy(q.impl + 0x40, &nd, 8);
  struct call k = {&q, PT_SDP_CUDNN, PT_SDP_FLASH, 0, 0, 0};
  assert_int_equal(run(&k), PT_SDP_FLASH);
  assert_int_equal(k.sizes_read, 0);
  check_refuted_then_global();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_decode_leaves_cudnn, setup),
      cmocka_unit_test_setup(test_prefill_and_other_choices_kept, setup),
      cmocka_unit_test_setup(test_prefill_to_flash_for_ponytail, setup),
      cmocka_unit_test_setup(test_math_disabled_no_second_ask, setup),
      cmocka_unit_test_setup(test_custom_sizes_not_read, setup),
      cmocka_unit_test_setup(test_other_modes_untouched, setup),
      cmocka_unit_test_setup(test_refuted_by_sizes, setup),
      cmocka_unit_test_setup(test_refuted_by_symbolic_answer, setup),
      cmocka_unit_test_setup(test_refuted_by_rank, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
