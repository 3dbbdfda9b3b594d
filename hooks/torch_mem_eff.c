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
#include "common/options.h"

/* Both switches: the option is the opt-in for this family, and
 * PONYTAIL_ATTN=off turns every attention swap off. */
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
  if (why) return pt_hook_pass(why);
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
