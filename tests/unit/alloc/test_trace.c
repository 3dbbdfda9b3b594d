/* Trace writer and reader: round trip, concurrent writers, bad input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "allocator/trace.h"
#include "tests/unit/alloc/scratch_dir.h"

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_format(void **state) {
  (void)state;
  char buf[80];
  struct pt_trace_event a = {'A', 131072000, 0x302000000, 0};
  buf[pt_trace_format(buf, &a)] = 0;
  assert_string_equal(buf, "A 131072000 0x302000000 (nil)\n");
  struct pt_trace_event r = {'Q', 0, 0xdeadbeef00, 0x55aa};
  buf[pt_trace_format(buf, &r)] = 0;
  assert_string_equal(buf, "Q 0xdeadbeef00 0x55aa\n");
}

static void test_roundtrip(void **state) {
  (void)state;
  char path[128];
  path_of(path, sizeof path, "rt.trace");
  struct pt_trace_writer *w = pt_trace_open(path);
  assert_non_null(w);
  pt_trace_comment(w, "hello\nworld");
  pt_trace_alloc(w, true, 4096, (void *)0x7f0000001000, 0);
  pt_trace_alloc(w, false, 16, (void *)0x7f0000002000, 0x1234);
  pt_trace_free(w, false, (void *)0x7f0000002000, 0x1234);
  pt_trace_free(w, true, (void *)0x7f0000001000, UINT64_MAX);
  assert_int_equal(pt_trace_write_errors(w), 0);
  pt_trace_close(w);
  struct pt_trace_reader *r;
  char err[128];
  assert_int_equal(pt_trace_reader_open(path, &r, err, sizeof err), 0);
  struct pt_trace_event ev;
  const struct pt_trace_event want[] = {{'A', 4096, 0x7f0000001000, 0},
                                        {'P', 16, 0x7f0000002000, 0x1234},
                                        {'Q', 0, 0x7f0000002000, 0x1234},
                                        {'R', 0, 0x7f0000001000, UINT64_MAX}};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(pt_trace_next(r, &ev, err, sizeof err), 1);
    assert_int_equal(ev.kind, want[i].kind);
    assert_int_equal(ev.bytes, want[i].bytes);
    assert_int_equal(ev.ptr, want[i].ptr);
    assert_int_equal(ev.stream, want[i].stream);
  }
  assert_int_equal(pt_trace_next(r, &ev, err, sizeof err), 0);
  assert_int_equal(pt_trace_reader_line(r), 5);
  pt_trace_reader_close(r);
}

struct thr {
  struct pt_trace_writer *w;
  uint64_t id;
};

static void *writer_thread(void *arg) {
  struct thr *t = arg;
  for (uint64_t i = 1; i <= 2000; i++) {
    void *p = (void *)(uintptr_t)((t->id << 32) | (i << 8));
    pt_trace_alloc(t->w, true, i, p, t->id);
    pt_trace_free(t->w, true, p, t->id);
  }
  return NULL;
}

/* Lines of concurrent writers never interleave. */
static void test_threads(void **state) {
  (void)state;
  char path[128];
  path_of(path, sizeof path, "thr.trace");
  struct pt_trace_writer *w = pt_trace_open(path);
  assert_non_null(w);
  pthread_t th[4];
  struct thr a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (struct thr){w, (uint64_t)i + 1};
    assert_int_equal(pthread_create(&th[i], NULL, writer_thread, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  pt_trace_close(w);
  struct pt_trace_reader *r;
  char err[128];
  assert_int_equal(pt_trace_reader_open(path, &r, err, sizeof err), 0);
  struct pt_trace_event ev;
  uint64_t n = 0, next[5] = {0, 1, 1, 1, 1};
  int rc;
  while ((rc = pt_trace_next(r, &ev, err, sizeof err)) == 1) {
    uint64_t id = ev.stream;
    assert_true(id >= 1 && id <= 4);
    assert_int_equal(ev.ptr >> 32, id);
    if (ev.kind == 'A') assert_int_equal(ev.bytes, next[id]);
    else next[id]++;
    n++;
  }
  assert_int_equal(rc, 0);
  assert_int_equal(n, 4 * 2 * 2000);
  pt_trace_reader_close(r);
}

static void expect_error(const char *text, uint64_t line, const char *msg) {
  char path[128], err[128];
  path_of(path, sizeof path, "bad.trace");
  write_file(path, text);
  struct pt_trace_reader *r;
  assert_int_equal(pt_trace_reader_open(path, &r, err, sizeof err), 0);
  struct pt_trace_event ev;
  int rc;
  while ((rc = pt_trace_next(r, &ev, err, sizeof err)) == 1) {
  }
  assert_int_equal(rc, -1);
  assert_int_equal(pt_trace_reader_line(r), line);
  if (!strstr(err, msg)) fail_msg("'%s' lacks '%s'", err, msg);
  pt_trace_reader_close(r);
}

static void test_bad_input(void **state) {
  (void)state;
  expect_error("A 1 0x10 (nil)\nX 1 2\n", 2, "unknown event");
  expect_error("# c\n\nA 1 0x10\n", 3, "needs 3 fields");
  expect_error("A -1 0x10 (nil)\n", 1, "bad size");
  expect_error("R 0x10 (nil)\nR zz (nil)\n", 2, "bad pointer");
  expect_error("R 0x10 0xq\n", 1, "bad stream");
  expect_error("AA 1 0x10 (nil)\n", 1, "unknown event");
  char path[128], err[128];
  path_of(path, sizeof path, "missing.trace");
  struct pt_trace_reader *r;
  assert_int_equal(pt_trace_reader_open(path, &r, err, sizeof err), -1);
  assert_non_null(strstr(err, "cannot open"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_format),
    cmocka_unit_test(test_roundtrip),
    cmocka_unit_test(test_threads),
    cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, scratch_setup, scratch_teardown);
}
