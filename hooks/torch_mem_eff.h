/* The torch mem-efficient SDPA forward hook (PONYTAIL_ATTN_MASKED, on by
 * default): the path SDPA takes with an attention mask (left-padded batches,
 * masked SDPA). A decode-shaped launch of fmha_cutlassF_{bf16,f16}_* is
 * replaced by Ponytail's decode kernel with the mask as its additive bias;
 * anything else falls back with a reason. Under PONYTAIL_ATTN_MASKED=0 these
 * kernels stay report-only (attn_report.c). */
#ifndef PT_TORCH_MEM_EFF_H
#define PT_TORCH_MEM_EFF_H
#include "hooks/hook.h"
#include "hooks/torch_flash.h"

/* Hook id of the swapped forward kernels (hook.h: below
 * PT_HOOK_REPORT_FIRST, so the shim hands the hook the launch's arguments
 * and parameter size), after the FA2 ids. */
enum { PT_HOOK_MEM_EFF_FWD = PT_HOOK_FLASH_FWD + 1 };

/* PT_HOOK_MEM_EFF_FWD for torch's mem-efficient forward kernels while the
 * swap is on (PONYTAIL_ATTN_MASKED on, the default, and PONYTAIL_ATTN not
 * off), else 0 (the name then goes to the report-only hooks). Called once per
 * kernel name. */
int pt_mem_eff_match(const char *mangled_name);

/* The verdict for one launch of a kernel that matched PT_HOOK_MEM_EFF_FWD;
 * the dtype comes from its mangled name. */
struct pt_hook_outcome pt_mem_eff_launch(const char *mangled_name, const struct pt_launch *l);

#endif
