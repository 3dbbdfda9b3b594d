/* Framework policy: which environment variables pt_hooks_policy_apply sets,
 * and that values the user set are left alone. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "hooks/hook.h"
#include "common/log.h"
#include "common/options.h"

#define DEPRIO "TORCH_CUDNN_SDPA_DEPRIORITIZED"
#define ALLOC "PYTORCH_CUDA_ALLOC_CONF"

static char log_path[64];

static int setup(void **st) {
  (void)st;
  static const char *const vars[] = {"PONYTAIL_ENABLE", "PONYTAIL_TORCH_SDPA", "PONYTAIL_TORCH_ALLOC",
                                     "PONYTAIL_POOL", "PONYTAIL_ATTN_PREFILL", "PONYTAIL_ATTN",
                                     DEPRIO, ALLOC};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  snprintf(log_path, sizeof log_path, "/tmp/pt_policy_test_%d.log", (int)getpid());
  unlink(log_path);
  setenv("PONYTAIL_LOG", "info", 1);
  setenv("PONYTAIL_LOG_FILE", log_path, 1);
  pt_opts_reload();
  pt_log_reopen();
  return 0;
}

static int teardown(void **st) {
  (void)st;
  pt_log_reopen();
  unlink(log_path);
  return 0;
}

static void apply(void) {
  pt_opts_reload();
  pt_log_reopen();
  pt_hooks_policy_apply();
}

/* The log written so far (empty when none). */
static const char *log_text(void) {
  static char buf[4096];
  buf[0] = 0;
  int fd = open(log_path, O_RDONLY);
  if (fd < 0) return buf;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  return buf;
}

/* The default sets nothing: PyTorch's caching allocator stays (every PyTorch
 * feature, graph trees, private pools, IPC, works only with it), and the SDPA
 * policy (auto) acts per call, so torch keeps its own global order. */
static void test_defaults_set_nothing(void **st) {
  (void)st;
  apply();
  assert_null(getenv(DEPRIO));
  assert_null(getenv(ALLOC));
  assert_null(strstr(log_text(), DEPRIO));
  assert_null(strstr(log_text(), ALLOC));
}

/* flash: the global policy of earlier releases, every SDPA call on flash. */
static void test_flash_sets_deprioritized(void **st) {
  (void)st;
  setenv("PONYTAIL_TORCH_SDPA", "flash", 1);
  apply();
  assert_string_equal(getenv(DEPRIO), "1");
  assert_non_null(strstr(log_text(), "set " DEPRIO "=1"));
}

static void test_async_sets_backend(void **st) {
  (void)st;
  setenv("PONYTAIL_TORCH_ALLOC", "async", 1);
  apply();
  assert_string_equal(getenv(ALLOC), "backend:cudaMallocAsync");
  assert_non_null(strstr(log_text(), "set " ALLOC "=backend:cudaMallocAsync"));
}

static void test_expandable_sets_segments(void **st) {
  (void)st;
  setenv("PONYTAIL_TORCH_ALLOC", "expandable", 1);
  apply();
  assert_string_equal(getenv(ALLOC), "expandable_segments:True");
  assert_non_null(strstr(log_text(), "set " ALLOC "=expandable_segments:True"));
}

static void test_user_values_respected(void **st) {
  (void)st;
  setenv("PONYTAIL_TORCH_SDPA", "flash", 1);
  setenv(DEPRIO, "0", 1);
  setenv(ALLOC, "expandable_segments:True", 1);
  setenv("PONYTAIL_TORCH_ALLOC", "async", 1);
  apply();
  assert_string_equal(getenv(DEPRIO), "0");
  assert_string_equal(getenv(ALLOC), "expandable_segments:True");
  assert_non_null(strstr(log_text(), "set by the user, left alone"));
  assert_null(strstr(log_text(), "set " DEPRIO));
}

static void test_user_same_value_no_note(void **st) {
  (void)st;
  setenv(ALLOC, "backend:cudaMallocAsync", 1);
  setenv("PONYTAIL_TORCH_ALLOC", "async", 1);
  apply();
  assert_string_equal(getenv(ALLOC), "backend:cudaMallocAsync");
  assert_null(strstr(log_text(), "left alone"));
}

static void test_keep_options(void **st) {
  (void)st;
  setenv("PONYTAIL_TORCH_SDPA", "keep", 1);
  setenv("PONYTAIL_TORCH_ALLOC", "keep", 1);
  apply();
  assert_null(getenv(DEPRIO));
  assert_null(getenv(ALLOC));
}

static void test_pool_off_leaves_alloc(void **st) {
  (void)st;
  setenv("PONYTAIL_POOL", "0", 1);
  setenv("PONYTAIL_TORCH_ALLOC", "async", 1);
  apply();
  assert_null(getenv(ALLOC));
}

static void test_disabled_does_nothing(void **st) {
  (void)st;
  setenv("PONYTAIL_ENABLE", "0", 1);
  setenv("PONYTAIL_TORCH_SDPA", "flash", 1);
  setenv("PONYTAIL_TORCH_ALLOC", "async", 1);
  apply();
  assert_null(getenv(DEPRIO));
  assert_null(getenv(ALLOC));
  assert_string_equal(log_text(), "");
}

/* The prefill kernel (on by default) says where it applies: only on torch's
 * flash path; with PONYTAIL_TORCH_SDPA=flash nothing to say; with
 * PONYTAIL_ATTN=off "no effect" only to a user who set it; nothing at all
 * when PONYTAIL_ATTN_PREFILL=0. */
static void test_prefill_note(void **st) {
  (void)st;
  apply(); /* the default policy: prefill moves to flash where the kernel takes it */
  assert_non_null(strstr(log_text(), "prefill kernel on (PONYTAIL_ATTN_PREFILL): the SDPA policy sends a prefill call"));
  unlink(log_path);
  setenv("PONYTAIL_TORCH_SDPA", "keep", 1);
  apply();
  assert_non_null(strstr(log_text(), "prefill kernel on (PONYTAIL_ATTN_PREFILL): it swaps torch's flash prefill launches only"));
  unlink(log_path);
  setenv("PONYTAIL_TORCH_SDPA", "flash", 1);
  apply();
  assert_null(strstr(log_text(), "PONYTAIL_ATTN_PREFILL"));
  unlink(log_path);
  setenv("PONYTAIL_ATTN", "off", 1);
  apply(); /* the default, not asked for: nothing to correct */
  assert_null(strstr(log_text(), "PONYTAIL_ATTN_PREFILL"));
  unlink(log_path);
  setenv("PONYTAIL_ATTN_PREFILL", "1", 1);
  apply();
  assert_non_null(strstr(log_text(), "PONYTAIL_ATTN_PREFILL=1 has no effect"));
  unlink(log_path);
  setenv("PONYTAIL_ATTN", "on", 1);
  setenv("PONYTAIL_TORCH_SDPA", "auto", 1);
  setenv("PONYTAIL_ATTN_PREFILL", "0", 1);
  apply();
  assert_null(strstr(log_text(), "PONYTAIL_ATTN_PREFILL"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_defaults_set_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flash_sets_deprioritized, setup, teardown),
      cmocka_unit_test_setup_teardown(test_async_sets_backend, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expandable_sets_segments, setup, teardown),
      cmocka_unit_test_setup_teardown(test_user_values_respected, setup, teardown),
      cmocka_unit_test_setup_teardown(test_user_same_value_no_note, setup, teardown),
      cmocka_unit_test_setup_teardown(test_keep_options, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_off_leaves_alloc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_disabled_does_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prefill_note, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
