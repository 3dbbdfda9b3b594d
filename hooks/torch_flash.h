/* The torch (and upstream) FlashAttention-2 hook: name matching, the launch
 * decision and the combine-skip state machine. The steps every swap shares
 * (the ops table, the workspace, verify mode, the planted fault) are in
 * attn_swap.h, included here so the hook's users see one header. */
#ifndef PT_TORCH_FLASH_H
#define PT_TORCH_FLASH_H
#include <stddef.h>
#include <stdint.h>
#include "hooks/attn_swap.h"
#include "hooks/flash_params.h"
#include "hooks/hook.h"
#include "kernels/attn.h"

/* Hook ids (hook.h: > 0) of the three kernel families. Equal to enum
 * pt_flash_kernel on purpose. */
enum {
  PT_HOOK_FLASH_SPLITKV = PT_FLASH_K_SPLITKV,
  PT_HOOK_FLASH_COMBINE = PT_FLASH_K_COMBINE,
  PT_HOOK_FLASH_FWD = PT_FLASH_K_FWD,
};

/* Recognises torch's pytorch_flash:: and upstream flash:: FA2 forward kernels
 * by mangled-name prefix; 0 for anything else (backward kernels included). */
int pt_flash_match(const char *mangled_name);

/* The verdict for one launch of a kernel that matched with hook_id. */
struct pt_hook_outcome pt_flash_launch(int hook_id, const struct pt_launch *l);

/* Tests only: forget every workspace, pending combine and statistic (of
 * every hook: attn_swap.h). */
void pt_flash_reset_for_tests(void);

#endif
