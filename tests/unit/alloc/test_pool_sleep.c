/* Sleep and wake of a pool (allocator/pool_sleep.c) on the host backend:
 * contents kept or dropped, every address kept, physical memory released,
 * and every failure leaving the pool as it was. Every test runs four times:
 * the bytes kept in page-locked buffers (sleep_host 0), then in host handles
 * mapped in a range of their own (sleep_host 1), each with the host memory
 * got by the calling thread alone and by 4 threads (sleep_threads). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "allocator/backend_host.h"
#include "allocator/pool.h"
#include "tests/pattern.h"
#include "tests/unit/alloc/pool_assert.h"

#define MiB ((uint64_t)1 << 20)
#define G (2 * MiB)
#define NB 12

struct blk {
  uint8_t *p;
  uint64_t size;
};

static int mode;    /* sleep_host of every pool of the group running */
static int threads; /* its sleep_threads */
static int reuse;   /* sleep_reuse of the pools new_pool makes (set around new_pool by the reuse tests) */

/* The bytes sleep in host handles (else in buffers, pinned or registered). */
#define HANDLES (mode == PT_SLEEP_IN_HANDLES)

static int mode_buffers(void **state) { (void)state; mode = PT_SLEEP_IN_PINNED, threads = 1; return 0; }
static int mode_handles(void **state) { (void)state; mode = PT_SLEEP_IN_HANDLES, threads = 1; return 0; }
static int mode_registered(void **state) { (void)state; mode = PT_SLEEP_IN_REGISTERED, threads = 1; return 0; }
static int mode_buffers_mt(void **state) { (void)state; mode = PT_SLEEP_IN_PINNED, threads = 4; return 0; }
static int mode_handles_mt(void **state) { (void)state; mode = PT_SLEEP_IN_HANDLES, threads = 4; return 0; }
static int mode_registered_mt(void **state) { (void)state; mode = PT_SLEEP_IN_REGISTERED, threads = 4; return 0; }

static struct pt_pool *new_pool(struct pt_backend *bk) {
  struct pt_pool *p;
  assert_int_equal(pt_backend_host_create(bk, 0, 0), 0);
  struct pt_pool_config cfg = {.keep_bytes = 1ull << 30, .arena_bytes = 2ull << 30, .chunk_bytes = 8 * G,
                               .sleep_host = mode, .sleep_threads = threads, .sleep_reuse = reuse};
  assert_int_equal(pt_pool_create(*bk, 0, &cfg, &p), 0);
  return p;
}

/* Every 4 KiB of the block gets a word, so a lost granule anywhere shows. */
static void fill(const struct blk *b, uint64_t key) { pt_pat_fill(b->p, b->size, key, 4096); }

static void verify(const struct blk *b, uint64_t key) {
  uint64_t off = pt_pat_bad(b->p, b->size, key, 4096);
  if (off != UINT64_MAX) fail_msg("block %llu: byte %llu lost", (unsigned long long)key, (unsigned long long)off);
}

/* Blocks of 0.5 MiB .. 40 MiB (several handles each for the large ones);
 * every third freed again, so that some physical memory is wholly free. */
static void populate(struct pt_pool *p, struct blk *b) {
  for (int i = 0; i < NB; i++) {
    b[i].size = (uint64_t)(i % 4 == 0 ? 40 : i % 4 == 1 ? 3 : i % 4 == 2 ? 17 : 1) * MiB / (i % 4 == 3 ? 2 : 1);
    void *q = NULL;
    assert_int_equal(pt_pool_alloc_any(p, b[i].size, &q), 0);
    b[i].p = q;
    fill(&b[i], (uint64_t)i);
  }
  for (int i = 2; i < NB; i += 3) {
    assert_int_equal(pt_pool_free_sync(p, b[i].p), 0);
    b[i].p = NULL;
  }
}

static void verify_all(const struct blk *b) {
  for (int i = 0; i < NB; i++)
    if (b[i].p) verify(&b[i], (uint64_t)i);
}

static void stats(struct pt_pool *p, struct pt_pool_stats *st) { pt_pool_stats(p, st); }

/* The host memory holding a sleeping pool's bytes is exactly what the
 * sleep kept (si): one page-locked buffer per handle, of the pool's kind,
 * or host handles of si's bytes; kept_none: none at all, of either kind.
 * Both: every buffer freed so far was freed with its own size and kind. */
static void assert_kept(struct pt_backend *bk, const struct pt_pool_sleep_info *si) {
  struct pt_host_counters c;
  pt_backend_host_counters(bk, &c);
  assert_int_equal(c.host_allocs, HANDLES ? 0 : si->handles);
  assert_int_equal(c.host_registered, mode == PT_SLEEP_IN_REGISTERED ? si->handles : 0);
  assert_int_equal(c.tier_granules * G, HANDLES ? si->bytes : 0);
  assert_int_equal(c.host_free_mismatch, 0);
}
static bool kept_none(struct pt_backend *bk) {
  struct pt_host_counters c;
  pt_backend_host_counters(bk, &c);
  return c.host_allocs == 0 && c.tier_granules == 0 && c.host_free_mismatch == 0;
}

static void test_sleep_wake_copy(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_stats st0, st1;
  stats(p, &st0);
  struct pt_pool_sleep_info si, wi;
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_true(pt_pool_asleep(p));
  assert_pool_consistent(p);
  struct pt_host_counters c;
  pt_backend_host_counters(&bk, &c);
  /* Nothing physical left on the device; the bytes wait in one host buffer
   * or host handle per handle (the handles mapped in their own range). */
  assert_int_equal(c.live_granules, 0);
  assert_int_equal(c.mapped_granules, HANDLES ? c.tier_granules : 0);
  assert_kept(&bk, &si);
  stats(p, &st1);
  assert_int_equal(st1.physical_bytes, 0);
  assert_int_equal(si.bytes + si.trimmed_bytes, st0.physical_bytes);
  assert_int_equal(si.copied_bytes, si.bytes);
  assert_int_equal(st1.asleep_bytes, si.bytes);
  assert_int_equal(st1.host_bytes, si.bytes);
  assert_true(si.trimmed_bytes > 0); /* the freed blocks' whole handles were not copied */
  assert_int_equal(st1.live_bytes, st0.live_bytes);
  /* A second sleep is refused and changes nothing. */
  assert_int_equal(pt_pool_sleep(p, false, NULL), PT_HOST_ERR_INVALID);

  assert_int_equal(pt_pool_wake(p, &wi), 0);
  assert_false(pt_pool_asleep(p));
  assert_pool_consistent(p);
  assert_int_equal(wi.bytes, si.bytes);
  assert_int_equal(wi.copied_bytes, si.bytes);
  verify_all(b);
  pt_backend_host_counters(&bk, &c);
  assert_int_equal(c.host_allocs, 0);
  assert_int_equal(c.host_free_mismatch, 0);
  assert_int_equal(c.tier_granules, 0);
  assert_int_equal(c.live_handles, wi.handles);
  assert_int_equal(c.live_granules * G, si.bytes);
  stats(p, &st1);
  assert_int_equal(st1.physical_bytes, si.bytes);
  assert_int_equal(st1.asleep_bytes, 0);
  assert_int_equal(st1.sleeps, 1);
  assert_int_equal(st1.wakes, 1);
  assert_int_equal(pt_pool_wake(p, NULL), PT_HOST_ERR_INVALID);
  /* The woken pool works as before: frees, new blocks, the old ones intact. */
  for (int i = 0; i < NB; i += 4) {
    if (!b[i].p) continue;
    assert_int_equal(pt_pool_free_sync(p, b[i].p), 0);
    b[i].p = NULL;
  }
  void *q;
  assert_int_equal(pt_pool_alloc_any(p, 64 * MiB, &q), 0);
  struct blk nb = {q, 64 * MiB};
  fill(&nb, 99);
  verify(&nb, 99);
  verify_all(b);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

static void test_sleep_discard(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info si;
  assert_int_equal(pt_pool_sleep(p, true, &si), 0);
  struct pt_host_counters c;
  pt_backend_host_counters(&bk, &c);
  assert_int_equal(c.host_allocs, 0);
  assert_int_equal(c.host_free_mismatch, 0);
  assert_int_equal(c.tier_granules, 0);
  assert_int_equal(c.live_granules, 0);
  assert_int_equal(si.copied_bytes, 0);
  struct pt_pool_stats st;
  stats(p, &st);
  assert_int_equal(st.host_bytes, 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  /* Same addresses, usable again (the contents were dropped). */
  for (int i = 0; i < NB; i++)
    if (b[i].p) {
      fill(&b[i], 1000u + (uint64_t)i);
      verify(&b[i], 1000u + (uint64_t)i);
    }
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* A failed sleep leaves the pool awake, untouched. */
static void sleep_fails(enum pt_host_op op, unsigned nth) {
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_stats st0, st1;
  pt_pool_trim(p, 0); /* what a sleep trims first, so the figures compare */
  stats(p, &st0);
  struct pt_host_counters c0;
  pt_backend_host_counters(&bk, &c0);
  uint64_t r0 = c0.reserved_bytes;
  pt_backend_host_fail_at(&bk, op, nth, PT_HOST_ERR_OOM);
  assert_int_equal(pt_pool_sleep(p, false, NULL), PT_HOST_ERR_OOM);
  assert_false(pt_pool_asleep(p));
  assert_pool_consistent(p);
  verify_all(b);
  stats(p, &st1);
  assert_int_equal(st1.physical_bytes, st0.physical_bytes);
  struct pt_host_counters c;
  pt_backend_host_counters(&bk, &c);
  assert_int_equal(c.host_allocs, 0);
  assert_int_equal(c.host_free_mismatch, 0);
  assert_int_equal(c.tier_granules, 0);
  assert_int_equal(c.live_granules * G, st0.physical_bytes);
  assert_int_equal(c.mapped_granules * G, st0.physical_bytes);
  assert_int_equal(c.reserved_bytes, r0); /* the host handles' range given back */
  /* And it can sleep and wake afterwards. */
  assert_int_equal(pt_pool_sleep(p, false, NULL), 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify_all(b);
  pt_pool_destroy(p);
}

/* The third piece of host memory cannot be had (a buffer, or a host handle). */
static void test_sleep_host_alloc_fails(void **state) {
  (void)state;
  sleep_fails(HANDLES ? PT_HOST_OP_CREATE_HOST : PT_HOST_OP_HOST_ALLOC, 3);
}
/* Host handles only: their range, a mapping or its access refused. */
static void test_sleep_handles_map_fails(void **state) {
  (void)state;
  if (!HANDLES) skip();
  sleep_fails(PT_HOST_OP_RESERVE, 1);
  sleep_fails(PT_HOST_OP_MAP, 2);
  sleep_fails(PT_HOST_OP_SET_ACCESS, 3);
}
/* Registered memory got by helper threads: they only fault it in and the
 * copying thread page-locks each piece (host_lock); the second lock refused
 * leaves nothing held, the pieces locked or not freed as their kind. */
static void test_sleep_lock_fails(void **state) {
  (void)state;
  if (mode != PT_SLEEP_IN_REGISTERED || threads < 2) skip();
  sleep_fails(PT_HOST_OP_HOST_LOCK, 2);
  sleep_fails(PT_HOST_OP_HOST_LOCK, 1);
}
static void test_sleep_copy_fails(void **state) { (void)state; sleep_fails(PT_HOST_OP_COPY, 2); }
/* The third unmap fails after two handles were released: those two are
 * mapped again with their bytes copied back. */
static void test_sleep_unmap_fails(void **state) { (void)state; sleep_fails(PT_HOST_OP_UNMAP, 3); }

/* A wake that cannot get memory leaves the pool asleep with its copies. */
static void wake_fails(enum pt_host_op op, unsigned nth) {
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info si;
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  pt_backend_host_fail_at(&bk, op, nth, PT_HOST_ERR_OOM);
  assert_int_equal(pt_pool_wake(p, NULL), PT_HOST_ERR_OOM);
  assert_true(pt_pool_asleep(p));
  assert_pool_consistent(p);
  struct pt_host_counters c;
  pt_backend_host_counters(&bk, &c);
  assert_int_equal(c.live_granules, 0);
  assert_int_equal(c.mapped_granules, HANDLES ? c.tier_granules : 0);
  assert_kept(&bk, &si);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify_all(b);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

static void test_wake_create_fails(void **state) { (void)state; wake_fails(PT_HOST_OP_CREATE, 3); }
static void test_wake_access_fails(void **state) { (void)state; wake_fails(PT_HOST_OP_SET_ACCESS, 2); }
static void test_wake_copy_fails(void **state) { (void)state; wake_fails(PT_HOST_OP_COPY, 4); }

/* The wake in steps: after finish the pool is awake and usable while the
 * host memory still waits; pt_pool_release_kept frees it (counted in
 * host_ns). A new sleep or the pool's destruction frees what nobody
 * released. */
static void test_release_after_wake(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info si, wi = {0};
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_true(si.handles > 0);
  assert_int_equal(pt_pool_wake_map(p, &wi), 0);
  assert_int_equal(pt_pool_wake_copy(p, &wi), 0);
  pt_pool_wake_finish(p, &wi);
  assert_false(pt_pool_asleep(p));
  assert_kept(&bk, &si); /* not yet freed */
  verify_all(b);
  void *q;
  assert_int_equal(pt_pool_alloc_any(p, 6 * MiB, &q), 0); /* usable meanwhile */
  struct blk nb = {q, 6 * MiB};
  fill(&nb, 77);
  pt_pool_release_kept(p, &wi);
  assert_true(kept_none(&bk));
  pt_pool_release_kept(p, &wi); /* nothing left: a no-op */
  verify(&nb, 77);
  verify_all(b);

  /* Left unreleased: the next sleep frees it first, and keeps only its own. */
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_int_equal(pt_pool_wake_map(p, NULL), 0);
  assert_int_equal(pt_pool_wake_copy(p, NULL), 0);
  pt_pool_wake_finish(p, NULL);
  assert_false(kept_none(&bk));
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_kept(&bk, &si);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  assert_true(kept_none(&bk));
  verify(&nb, 77);
  verify_all(b);
  /* And destroyed with a wake's memory unreleased (the sanitizer build
   * would report a leak). */
  assert_int_equal(pt_pool_sleep(p, false, NULL), 0);
  assert_int_equal(pt_pool_wake_map(p, NULL), 0);
  assert_int_equal(pt_pool_wake_copy(p, NULL), 0);
  pt_pool_wake_finish(p, NULL);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* sleep_reuse: a wake keeps the host memory (shown as host_kept_bytes), the
 * next sleep of the same pool copies into it without getting any new, a
 * changed pool reuses what fits and gets the rest, and a pool destroyed
 * awake with memory kept frees it (the sanitizer build would see a leak). */
static void test_reuse(void **state) {
  (void)state;
  struct pt_backend bk;
  reuse = 1;
  struct pt_pool *p = new_pool(&bk);
  reuse = 0;
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info s1, s2, s3;
  assert_int_equal(pt_pool_sleep(p, false, &s1), 0);
  assert_int_equal(s1.reused_bytes, 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify_all(b);
  assert_kept(&bk, &s1); /* still held, awake */
  struct pt_pool_stats st;
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, s1.bytes);
  struct pt_host_counters c0, c1;
  pt_backend_host_counters(&bk, &c0);

  for (int i = 0; i < NB; i++)
    if (b[i].p) fill(&b[i], 500u + (uint64_t)i);
  assert_int_equal(pt_pool_sleep(p, false, &s2), 0);
  pt_backend_host_counters(&bk, &c1);
  assert_int_equal(s2.bytes, s1.bytes);
  assert_int_equal(s2.reused_bytes, s2.bytes); /* every byte into memory kept */
  assert_int_equal(c1.host_bytes, c0.host_bytes); /* no new buffer */
  assert_int_equal(c1.creates, c0.creates);       /* no new host handle */
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, 0); /* in use again, by the sleep */
  assert_int_equal(st.host_reused_bytes, s2.bytes);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  for (int i = 0; i < NB; i++)
    if (b[i].p) verify(&b[i], 500u + (uint64_t)i);

  /* A changed pool: one block gone, a larger one new; what still fits is reused. */
  for (int i = 0; i < NB; i++)
    if (b[i].p && b[i].size >= 40 * MiB) {
      assert_int_equal(pt_pool_free_sync(p, b[i].p), 0);
      b[i].p = NULL;
      break;
    }
  void *q;
  assert_int_equal(pt_pool_alloc_any(p, 72 * MiB, &q), 0);
  struct blk nb = {q, 72 * MiB};
  fill(&nb, 88);
  assert_int_equal(pt_pool_sleep(p, false, &s3), 0);
  assert_true(s3.reused_bytes > 0 && s3.reused_bytes < s3.bytes);
  assert_kept(&bk, &s3); /* what was not taken was freed: only this sleep's memory is held */
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify(&nb, 88);
  for (int i = 0; i < NB; i++)
    if (b[i].p) verify(&b[i], 500u + (uint64_t)i);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* pt_pool_sleep_prepare: host memory got while the pool is awake and in use
 * (one piece per handle that holds a live block: the wholly free ones, which
 * the sleep gives back, left out; held as host_kept_bytes); a second prepare
 * gets nothing new; the sleep after copies into it without getting any;
 * without sleep_reuse the wake frees it. */
static void test_prepare(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_stats st0, st;
  stats(p, &st0);
  struct pt_pool_sleep_info pi, p2, si;
  assert_int_equal(pt_pool_sleep_prepare(p, &pi), 0);
  assert_false(pt_pool_asleep(p));
  assert_true(pi.bytes > 0 && pi.bytes < st0.physical_bytes); /* the free handles left out */
  assert_int_equal(pi.reused_bytes, 0);
  assert_true(pi.handles > 0);
  assert_kept(&bk, &pi);
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, pi.bytes);
  assert_int_equal(st.prepares, 1);
  assert_int_equal(st.physical_bytes, st0.physical_bytes); /* the device side untouched */
  struct pt_host_counters c0, c1;
  pt_backend_host_counters(&bk, &c0);
  assert_int_equal(pt_pool_sleep_prepare(p, &p2), 0);
  pt_backend_host_counters(&bk, &c1);
  assert_int_equal(p2.bytes, 0);
  assert_int_equal(p2.handles, 0);
  assert_int_equal(p2.reused_bytes, pi.bytes);
  assert_int_equal(c1.host_bytes, c0.host_bytes);
  assert_int_equal(c1.tier_granules, c0.tier_granules);
  /* The pool works meanwhile, and the sleep takes exactly the prepared pieces. */
  for (int i = 0; i < NB; i++)
    if (b[i].p) fill(&b[i], 700u + (uint64_t)i);
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  pt_backend_host_counters(&bk, &c1);
  assert_true(si.trimmed_bytes > 0);
  assert_int_equal(si.bytes, pi.bytes);
  assert_int_equal(si.reused_bytes, si.bytes); /* every byte into prepared memory */
  assert_int_equal(c1.host_bytes, c0.host_bytes); /* no buffer got by the sleep */
  assert_int_equal(c1.creates, c0.creates);       /* nor a host handle */
  assert_kept(&bk, &si);
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  assert_true(kept_none(&bk)); /* no sleep_reuse: the wake frees them */
  for (int i = 0; i < NB; i++)
    if (b[i].p) verify(&b[i], 700u + (uint64_t)i);
  /* pt_pool_sleep_unprepare gives a prepare's memory back without a sleep. */
  assert_int_equal(pt_pool_sleep_prepare(p, &pi), 0);
  assert_true(pi.bytes > 0);
  assert_int_equal(pt_pool_sleep_unprepare(p), pi.bytes);
  assert_true(kept_none(&bk));
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, 0);
  assert_int_equal(pt_pool_sleep_unprepare(p), 0);
  assert_pool_consistent(p);
  pt_pool_destroy(p);
}

/* Under sleep_reuse a discarding sleep keeps no host memory, so the memory a
 * prepare kept before it stays kept, counted as it is, and the next copying
 * sleep uses it. */
static void test_prepare_discard_reuse(void **state) {
  (void)state;
  struct pt_backend bk;
  reuse = 1;
  struct pt_pool *p = new_pool(&bk);
  reuse = 0;
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info pi, si;
  assert_int_equal(pt_pool_sleep_prepare(p, &pi), 0);
  assert_int_equal(pt_pool_sleep(p, true, NULL), 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  struct pt_pool_stats st;
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, pi.bytes);
  assert_kept(&bk, &pi);
  for (int i = 0; i < NB; i++)
    if (b[i].p) fill(&b[i], 800u + (uint64_t)i);
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_int_equal(si.reused_bytes, si.bytes);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  for (int i = 0; i < NB; i++)
    if (b[i].p) verify(&b[i], 800u + (uint64_t)i);
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, si.bytes); /* reuse: kept again after the wake */
  pt_pool_destroy(p);
}

/* A pool that grew after its prepare: the sleep uses the pieces of the sizes
 * it still has and gets the rest; prepare is refused while asleep; a pool
 * destroyed with prepared memory frees it (the sanitizer build would see a
 * leak). */
static void test_prepare_then_grow(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  struct pt_pool_sleep_info pi, si;
  assert_int_equal(pt_pool_sleep_prepare(p, &pi), 0);
  void *q;
  assert_int_equal(pt_pool_alloc_any(p, 72 * MiB, &q), 0);
  struct blk nb = {q, 72 * MiB};
  fill(&nb, 77);
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_true(si.reused_bytes > 0 && si.reused_bytes < si.bytes);
  assert_kept(&bk, &si);
  assert_int_equal(pt_pool_sleep_prepare(p, NULL), PT_HOST_ERR_INVALID);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify(&nb, 77);
  verify_all(b);
  assert_int_equal(pt_pool_sleep_prepare(p, &pi), 0);
  assert_true(pi.bytes > 0);
  pt_pool_destroy(p);
}

/* Host memory running out in the middle of a prepare: nothing of it is kept,
 * the pool is untouched and sleeps as usual. */
static void test_prepare_fails(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  pt_backend_host_fail_at(&bk, HANDLES ? PT_HOST_OP_CREATE_HOST : PT_HOST_OP_HOST_ALLOC, 3, PT_HOST_ERR_OOM);
  assert_int_equal(pt_pool_sleep_prepare(p, NULL), PT_HOST_ERR_OOM);
  assert_true(kept_none(&bk));
  struct pt_pool_stats st;
  stats(p, &st);
  assert_int_equal(st.host_kept_bytes, 0);
  assert_int_equal(st.prepares, 0);
  if (mode == PT_SLEEP_IN_REGISTERED && threads > 1) { /* a refused page-lock, on the preparing thread */
    pt_backend_host_fail_at(&bk, PT_HOST_OP_HOST_LOCK, 2, PT_HOST_ERR_OOM);
    assert_int_equal(pt_pool_sleep_prepare(p, NULL), PT_HOST_ERR_OOM);
    assert_true(kept_none(&bk));
  }
  assert_pool_consistent(p);
  verify_all(b);
  assert_int_equal(pt_pool_sleep(p, false, NULL), 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  verify_all(b);
  pt_pool_destroy(p);
}

/* A pool destroyed while asleep frees its host copies (the sanitizer build
 * would report the leak). */
static void test_destroy_asleep(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct blk b[NB];
  populate(p, b);
  assert_int_equal(pt_pool_sleep(p, false, NULL), 0);
  pt_pool_destroy(p);
}

/* Sleeping an empty pool is allowed (nothing to release) and wakes. */
static void test_empty(void **state) {
  (void)state;
  struct pt_backend bk;
  struct pt_pool *p = new_pool(&bk);
  struct pt_pool_sleep_info si;
  assert_int_equal(pt_pool_sleep(p, false, &si), 0);
  assert_int_equal(si.handles, 0);
  assert_int_equal(pt_pool_wake(p, NULL), 0);
  void *q;
  assert_int_equal(pt_pool_alloc_any(p, 5 * MiB, &q), 0);
  pt_pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sleep_wake_copy),     cmocka_unit_test(test_sleep_discard),
    cmocka_unit_test(test_sleep_host_alloc_fails), cmocka_unit_test(test_sleep_copy_fails), cmocka_unit_test(test_sleep_lock_fails),
    cmocka_unit_test(test_sleep_unmap_fails),   cmocka_unit_test(test_wake_create_fails),
    cmocka_unit_test(test_wake_access_fails),   cmocka_unit_test(test_wake_copy_fails),
    cmocka_unit_test(test_destroy_asleep),      cmocka_unit_test(test_empty),
    cmocka_unit_test(test_release_after_wake),  cmocka_unit_test(test_sleep_handles_map_fails),
    cmocka_unit_test(test_reuse),               cmocka_unit_test(test_prepare),
    cmocka_unit_test(test_prepare_then_grow),   cmocka_unit_test(test_prepare_fails),
    cmocka_unit_test(test_prepare_discard_reuse),
  };
  int rc = cmocka_run_group_tests_name("page-locked buffers", tests, mode_buffers, NULL);
  rc |= cmocka_run_group_tests_name("host handles", tests, mode_handles, NULL);
  rc |= cmocka_run_group_tests_name("registered buffers", tests, mode_registered, NULL);
  rc |= cmocka_run_group_tests_name("page-locked buffers, 4 threads", tests, mode_buffers_mt, NULL);
  rc |= cmocka_run_group_tests_name("host handles, 4 threads", tests, mode_handles_mt, NULL);
  return rc | cmocka_run_group_tests_name("registered buffers, 4 threads", tests, mode_registered_mt, NULL);
}
