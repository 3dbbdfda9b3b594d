/* The routing's settings (R, read once from the options), the allocation
 * trace, and what happens after fork. */
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

struct pt_route_settings R;

/* ---- setup --------------------------------------------------------------- */

static void trace_open(void) {
  const char *pattern = pt_opt_str(PT_OPT_TRACE);
  if (!pattern[0]) return;
  char path[4096];
  if (pt_path_expand(pattern, path, sizeof path) != 0 || !(R.trace = pt_trace_open(path))) {
    pt_warn("cannot open PONYTAIL_TRACE \"%s\": no allocation trace", pattern);
    return;
  }
  pt_trace_comment(R.trace, "ponytail allocation trace: A/R pooled, P/Q passed through");
}

void pt_route_setup(void) {
  R.pool_on = pt_opt_bool(PT_OPT_POOL);
  R.ipc = pt_opt_enum(PT_OPT_IPC) == 0; /* fd|off */
  R.kv_min = pt_opt_size(PT_OPT_KV_MIN);
  /* Unset: every stream-ordered size (what PyTorch's tensors become under
   * PONYTAIL_TORCH_ALLOC=async), unless only PONYTAIL_KV_MIN was given. */
  R.kv_min_async = pt_opt_is_set(PT_OPT_KV_MIN_ASYNC) || !pt_opt_is_set(PT_OPT_KV_MIN)
                       ? pt_opt_size(PT_OPT_KV_MIN_ASYNC)
                       : R.kv_min;
  R.keep = pt_opt_size(PT_OPT_POOL_KEEP);
  R.limit = pt_opt_size(PT_OPT_MEM_LIMIT);
  R.chunk = pt_pool_chunk_auto(pt_opt_size(PT_OPT_POOL_CHUNK), R.limit); /* 0 = auto, resolved here */
  R.order_up = pt_opt_enum(PT_OPT_POOL_ORDER) == PT_POOL_ORDER_UP;
  R.tier = pt_opt_size(PT_OPT_HOST_TIER);
  R.tier_info = R.tier && pt_opt_bool(PT_OPT_HOST_TIER_INFO);
  R.tier_reserve = R.tier ? pt_opt_size(PT_OPT_HOST_TIER_RESERVE) : 0;
  R.tier_retry = R.tier && pt_opt_bool(PT_OPT_HOST_TIER_RETRY);
  trace_open();
  pt_stats_alloc_json = rt_stats_json;
  pt_stats_alloc_text = rt_stats_text;
}

void pt_route_atfork_child(void) {
  pt_ipc_atfork_child();
  pt_tier_atfork_child();
  pt_vmm_atfork_child();
  if (!R.trace || !strstr(pt_opt_str(PT_OPT_TRACE), "%p")) return;
  pt_trace_close(R.trace);
  R.trace = NULL;
  trace_open();
}
