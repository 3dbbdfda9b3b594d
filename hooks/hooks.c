/* hook.h for the shim: dispatch to the recognised kernel families. Only the
 * FA2 family (torch_flash.c) exists so far; a new family adds its match here
 * with its own id range. */
#include "hooks/hook.h"

#include "hooks/torch_flash.h"

int pt_hooks_match(const char *mangled_name) { return pt_flash_match(mangled_name); }

struct pt_hook_outcome pt_hooks_launch(int hook_id, const char *mangled_name,
                                       const struct pt_launch *l) {
  (void)mangled_name;
  return pt_flash_launch(hook_id, l);
}

const char *pt_hooks_name(int id) {
  switch (id) {
  case PT_HOOK_FLASH_SPLITKV: return "torch_flash/splitkv";
  case PT_HOOK_FLASH_COMBINE: return "torch_flash/combine";
  case PT_HOOK_FLASH_FWD: return "torch_flash/fwd";
  default: return NULL;
  }
}

void pt_hooks_get_stats(struct pt_hooks_stats *out) { pt_flash_get_stats(out); }
