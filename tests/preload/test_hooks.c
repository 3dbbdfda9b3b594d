/* Test hooks linked into a shim variant (libponytail_shim_testhooks.so) to
 * exercise the launch path's verdict handling with the fakes:
 *   "swapme"  -> SWAPPED (the original never runs)
 *   "fallme"  -> PASS with a reason (fallback); the reason checks that the
 *                shim computed the parameter size (3 x 8 bytes)
 *   "skipme"  -> SKIPPED
 *   "origme"  -> runs launch_original itself, then reports SWAPPED
 *   "wsme"    -> allocates an 8 MiB workspace with pt_route_internal_alloc
 *                (as hooks/flash_ops.c does) and reports SWAPPED when it came
 *                from the pool, PASS with a reason otherwise */
#include <string.h>

#include "hooks/hook.h"
#include "shim/route_alloc.h"

int pt_hooks_match(const char *name) {
  if (strstr(name, "swapme")) return 1;
  if (strstr(name, "fallme")) return 2;
  if (strstr(name, "skipme")) return 3;
  if (strstr(name, "origme")) return 4;
  if (strstr(name, "wsme")) return 5;
  return 0;
}

struct pt_hook_outcome pt_hooks_launch(int id, const char *name, const struct pt_launch *l) {
  struct pt_hook_outcome o = {PT_HOOK_PASS, NULL, 0};
  (void)name;
  switch (id) {
  case 1: o.verdict = PT_HOOK_SWAPPED; break;
  case 2: o.reason = l->param_bytes == 24 ? "test reason" : "wrong param bytes"; break;
  case 3: o.verdict = PT_HOOK_SKIPPED; break;
  case 4:
    o.verdict = PT_HOOK_SWAPPED;
    o.status = l->launch_original(l);
    break;
  case 5: {
    void *ws = NULL;
    if (pt_route_internal_alloc(&ws, (size_t)8 << 20) != 0 || !ws) o.reason = "workspace alloc failed";
    else if (!pt_route_is_pooled(ws)) o.reason = "workspace not pooled";
    else o.verdict = PT_HOOK_SWAPPED;
    break;
  }
  }
  return o;
}

void pt_hooks_policy_apply(void) {}
/* The shim's composition root hands these to the hooks; the test hooks call
 * the routing layer directly ("wsme") and never the driver. */
void pt_hooks_set_driver(const struct pt_driver *drv) { (void)drv; }
void pt_hooks_set_alloc(int (*alloc)(void **dptr, size_t bytes)) { (void)alloc; }
void pt_hooks_get_stats(struct pt_hooks_stats *out) {
  out->verified = 3;
  out->verify_failures = 1;
}
