/* Placeholder until hooks/ lands: recognises nothing. Removed by that work. */
#include <string.h>
#include "hooks/hook.h"
int pt_hooks_match(const char *mangled_name) { (void)mangled_name; return 0; }
struct pt_hook_outcome pt_hooks_launch(int hook_id, const char *mangled_name, const struct pt_launch *l) {
  (void)hook_id; (void)mangled_name; (void)l;
  struct pt_hook_outcome o = {PT_HOOK_PASS, NULL, 0};
  return o;
}
void pt_hooks_policy_apply(void) {}
void pt_hooks_get_stats(struct pt_hooks_stats *out) { memset(out, 0, sizeof *out); }
