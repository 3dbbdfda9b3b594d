/* hook.h for the shim: dispatch to the recognised kernel families, each with
 * its own id range.
 *  - torch_flash.c: torch's (and upstream) FlashAttention-2 forward kernels,
 *    swapped for Ponytail's decode kernel when eligible (ids 1..3);
 *  - torch_mem_eff.c: torch's mem-efficient SDPA forward kernels (attention
 *    masks), swapped for the decode kernel with the mask as its bias while
 *    PONYTAIL_ATTN_MASKED is on, the default (id 4); under
 *    PONYTAIL_ATTN_MASKED=0 they stay report-only below;
 *  - attn_report.c: report-only (ids >= PT_HOOK_REPORT_FIRST): cuDNN SDPA and
 *    torch's mem-efficient SDPA, forward (unless swapped above) and
 *    backward. They are never swapped; each launch passes through with a
 *    fallback reason, so the log (`fallback <name>: <reason>`, once per
 *    name) and the exit stats say why that attention was not accelerated.
 *    Backward kernels are recognised on purpose, with the reason "training
 *    backward: not swapped" (FA2's backward stays unmatched). PONYTAIL_ATTN=off makes every reason "disabled", as
 *    for FA2. */
#include "hooks/hook.h"

#include "hooks/attn_report.h"
#include "hooks/torch_flash.h"
#include "hooks/torch_mem_eff.h"

_Static_assert(PT_HOOK_MEM_EFF_FWD < PT_HOOK_REPORT_FIRST, "a swapping hook reads its launch");

int pt_hooks_match(const char *mangled_name) {
  int id = pt_flash_match(mangled_name);
  if (!id) id = pt_mem_eff_match(mangled_name);
  return id ? id : pt_attn_report_match(mangled_name);
}

struct pt_hook_outcome pt_hooks_launch(int hook_id, const char *mangled_name,
                                       const struct pt_launch *l) {
  if (!pt_hook_reads_launch(hook_id)) return pt_attn_report_launch(hook_id);
  if (hook_id == PT_HOOK_MEM_EFF_FWD) return pt_mem_eff_launch(mangled_name, l);
  return pt_flash_launch(hook_id, l);
}

const char *pt_hooks_name(int id) {
  switch (id) {
  case PT_HOOK_FLASH_SPLITKV: return "torch_flash/splitkv";
  case PT_HOOK_FLASH_COMBINE: return "torch_flash/combine";
  case PT_HOOK_FLASH_FWD: return "torch_flash/fwd";
  case PT_HOOK_MEM_EFF_FWD: return "torch_mem_eff/fwd";
  case PT_HOOK_CUDNN_SDPA: return "cudnn_sdpa";
  case PT_HOOK_CUDNN_SDPA_BWD: return "cudnn_sdpa/bwd";
  case PT_HOOK_MEM_EFF: return "torch_mem_eff";
  case PT_HOOK_MEM_EFF_BWD: return "torch_mem_eff/bwd";
  default: return NULL;
  }
}

void pt_hooks_get_stats(struct pt_hooks_stats *out) {
  pt_flash_get_stats(out);
  pt_sdpa_get_stats(&out->sdpa);
}
