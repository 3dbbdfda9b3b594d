/* torch's mem-efficient SDPA forward launches (torch_mem_eff.h).
 *
 * One launch writes O; there is no combine to skip and no LSE in inference,
 * so a swap is: read the Params (mem_eff_params.c), check, launch
 * Ponytail's kernel through the shared steps (attn_swap.h). Verify mode runs
 * the original first and compares, as for FA2's forward kernel. */
#include "hooks/torch_mem_eff.h"

#include "hooks/attn_report.h"
#include "hooks/attn_swap.h"
#include "hooks/mem_eff_params.h"
#include "common/log.h"
#include "common/options.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* PONYTAIL_LOG=debug: the first refused launch's Params as read, field by
 * field and as raw 64-bit words, so a layout that differs from the mirror
 * (another torch release) can be diagnosed from one log. */
static void pt_mem_eff_debug_refusal(const struct pt_launch *l, const char *why) {
  static int once;
  if (!pt_log_enabled(PT_LOG_DEBUG) || __atomic_exchange_n(&once, 1, __ATOMIC_RELAXED)) return;
  const void *a = l->args ? l->args[0] : NULL;
  if (!a || l->param_bytes != PT_MEM_EFF_PARAMS_BYTES) {
    pt_debug("mem-efficient launch refused (%s): params %p, %zu bytes", why, a, l->param_bytes);
    return;
  }
  struct pt_mem_eff_params p;
  memcpy(&p, a, sizeof p);
  pt_debug("mem-efficient launch refused (%s): grid %u,%u,%u b=%d h=%d q=%d k=%d d=%d dv=%d mask=%u "
           "window=%d q=%p k=%p v=%p o=%p bias=%p lse=%p strides q %d/%d/%" PRId64 " k %d/%d/%" PRId64
           " bias %d/%" PRId64 "/%" PRId64,
           why, l->grid[0], l->grid[1], l->grid[2], p.num_batches, p.num_heads, p.num_queries, p.num_keys,
           p.head_dim, p.head_dim_value, p.custom_mask_type, p.window_size, p.query_ptr, p.key_ptr,
           p.value_ptr, p.output_ptr, p.attn_bias_ptr, (void *)p.logsumexp_ptr, p.q_strideM, p.q_strideH,
           p.q_strideB, p.k_strideM, p.k_strideH, p.k_strideB, p.bias_strideM, p.bias_strideH, p.bias_strideB);
  uint64_t w[PT_MEM_EFF_PARAMS_BYTES / 8];
  memcpy(w, a, sizeof w);
  for (int h = 0; h < 2; ++h) {
    char line[17 * 17 + 1];
    int n = 0;
    for (int i = h * 17; i < h * 17 + 17; ++i) n += snprintf(line + n, sizeof line - (size_t)n, "%016" PRIx64 " ", w[i]);
    pt_debug("mem-efficient Params words %d-%d: %s", h * 17, h * 17 + 16, line);
  }
}

/* Both switches: the option (on by default) can turn this family off alone,
 * and PONYTAIL_ATTN=off turns every attention swap off. */
static int pt_mem_eff_on(void) {
  return pt_opt_bool(PT_OPT_ATTN_MASKED) && pt_opt_enum(PT_OPT_ATTN) != PT_ATTN_OFF;
}

int pt_mem_eff_match(const char *name) {
  if (!pt_mem_eff_on()) return 0;
  return pt_attn_report_match(name) == PT_HOOK_MEM_EFF ? PT_HOOK_MEM_EFF_FWD : 0;
}

struct pt_hook_outcome pt_mem_eff_launch(const char *name, const struct pt_launch *l) {
  int mode = pt_opt_enum(PT_OPT_ATTN);
  if (mode == PT_ATTN_OFF) return pt_hook_pass(pt_flash_r_disabled);
  /* Matched while the option was on, read while it is off (only a test can
   * change it): the report-only verdict. */
  if (!pt_opt_bool(PT_OPT_ATTN_MASKED)) return pt_hook_pass(pt_attn_r_mem_eff);
  if (pt_attn_per_thread_stream(l)) return pt_hook_pass(pt_flash_r_per_thread);

  struct pt_attn_desc d;
  const char *why = pt_mem_eff_read(l->args ? l->args[0] : NULL, l->param_bytes, name, l->grid, &d);
  if (why) {
    pt_mem_eff_debug_refusal(l, why);
    return pt_hook_pass(why);
  }
  const struct pt_flash_ops *ops = pt_attn_ops();
  int capturing = 0;
  why = pt_attn_swap_check(ops, &d, l->stream, &capturing);
  if (why) return pt_hook_pass(why);

  if (mode == PT_ATTN_VERIFY) {
    if (capturing) return pt_hook_pass(NULL); /* no sync in a capture: just the original */
    return pt_attn_verify_launch(ops, &d, l);
  }
  return pt_attn_swap_launch(ops, &d, l->stream, capturing);
}
