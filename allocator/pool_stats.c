/* The pool's counters as JSON members (the shim nests them under "alloc"). */
#include "allocator/pool.h"
#include "common/jsonw.h"

void pt_pool_stats_json(const struct pt_pool_stats *st, struct pt_jw *w) {
#define PT_POOL_STAT_JSON(name) pt_jw_u64(w, #name, st->name);
  PT_POOL_STATS(PT_POOL_STAT_JSON)
#undef PT_POOL_STAT_JSON
}
