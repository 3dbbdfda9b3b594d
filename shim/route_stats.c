/* The routing's counters (the pool counts the rest) and the "alloc"
 * section of the stats (JSON and text), plugged in by pt_route_setup. */
#include "shim/route_internal.h"
#include "shim/route_vmm.h"

struct pt_route_counters rc_;

/* ---- stats --------------------------------------------------------------- */

/* fn(device, that device's pool stats, ctx) for every device with a pool. */
static void route_each_pool(void (*fn)(int, const struct pt_pool_stats *, void *), void *ctx) {
  int n = __atomic_load_n(&ndev, __ATOMIC_ACQUIRE);
  for (int d = 0; d < n; d++) {
    struct pt_pool *p = pool_at(d);
    if (!p) continue;
    struct pt_pool_stats st;
    pt_pool_stats(p, &st);
    fn(d, &st, ctx);
  }
}

static void add_pool(int d, const struct pt_pool_stats *st, void *sum) {
  (void)d;
  pt_pool_stats_add(sum, st);
}

/* Every pool's figures summed; limit_rejections also counts the pass-through
 * allocations refused under the limit (the pools count only refused growth). */
static void route_stats_sum(struct pt_pool_stats *sum) {
  memset(sum, 0, sizeof *sum);
  route_each_pool(add_pool, sum);
  sum->limit_rejections += __atomic_load_n(&rc_.passthrough_rejections, __ATOMIC_RELAXED);
}

static void device_json(int d, const struct pt_pool_stats *st, void *w) {
  pt_jw_obj_begin(w, NULL);
  pt_jw_i64(w, "device", d);
  pt_pool_stats_json(st, w);
  pt_jw_obj_end(w);
}

void rt_stats_json(struct pt_jw *w) {
  struct pt_pool_stats sum;
  route_stats_sum(&sum);
  pt_jw_bool(w, "routing", R.pool_on);
  pt_jw_u64(w, "kv_min", R.kv_min);
  pt_jw_u64(w, "kv_min_async", R.kv_min_async);
  pt_jw_u64(w, "limit_bytes", R.limit);
  pt_jw_u64(w, "chunk_bytes", R.chunk);
  /* Whether the hot path asks the driver about captures / the current pool. */
  pt_jw_bool(w, "capture_seen", __atomic_load_n(&capture_seen, __ATOMIC_ACQUIRE) != 0);
  pt_jw_bool(w, "mempool_set", __atomic_load_n(&mempool_set, __ATOMIC_ACQUIRE) != 0);
  pt_pool_stats_json(&sum, w);
#define PT_RC_JSON(n) pt_jw_u64(w, #n, __atomic_load_n(&rc_.n, __ATOMIC_RELAXED));
  PT_ROUTE_COUNTERS(PT_RC_JSON)
#undef PT_RC_JSON
  pt_jw_u64(w, "trace_write_errors", pt_trace_write_errors(R.trace));
  pt_jw_arr_begin(w, "devices");
  route_each_pool(device_json, w);
  pt_jw_arr_end(w);
  pt_vmm_stats_json(w);
}

#define MIB(x) ((double)(x) / 1048576.0)
static void device_text(int d, const struct pt_pool_stats *st, void *f) {
  fprintf(f, "  alloc device %d: pooled %" PRIu64 ", live %.1f MiB, physical %.1f MiB (peak %.1f / %.1f MiB)\n", d,
          st->pooled_allocs, MIB(st->live_bytes), MIB(st->physical_bytes), MIB(st->peak_live_bytes),
          MIB(st->peak_physical_bytes));
}

void rt_stats_text(FILE *f) {
  struct pt_pool_stats s;
  route_stats_sum(&s);
  fprintf(f, "  alloc: routing %s (from %" PRIu64 " B, stream-ordered from %" PRIu64 " B), pooled %" PRIu64
             " (frees %" PRIu64 "), passthrough %" PRIu64 " (frees %" PRIu64 ")\n",
          R.pool_on ? "on" : "off", R.kv_min, R.kv_min_async, s.pooled_allocs, s.pooled_frees, rc_.passthrough_allocs,
          rc_.passthrough_frees);
  fprintf(f, "  alloc: peak live %.1f MiB, peak physical %.1f MiB, stitches %" PRIu64 ", trims %" PRIu64
             ", limit rejections %" PRIu64 "\n",
          MIB(s.peak_live_bytes), MIB(s.peak_physical_bytes), s.stitches, s.trims, s.limit_rejections);
  if (s.map_ns || s.wait_ns)
    fprintf(f, "  alloc: host time in mapping calls %.1f ms, waiting for the device %.1f ms (syncs %" PRIu64 ")\n",
            s.map_ns / 1e6, s.wait_ns / 1e6, s.syncs);
  if (rc_.capture_passthrough || rc_.capture_deferred_frees || rc_.trim_retries || rc_.ipc_refusals ||
      rc_.ipc_exports || rc_.ipc_opens || rc_.ipc_errors)
    fprintf(f, "  alloc: capture pass-through %" PRIu64 ", capture-deferred frees %" PRIu64 ", trim retries %" PRIu64
               ", IPC refusals %" PRIu64 ", IPC exports %" PRIu64 " opens %" PRIu64 " closes %" PRIu64
               " errors %" PRIu64 "\n",
            rc_.capture_passthrough, rc_.capture_deferred_frees, rc_.trim_retries, rc_.ipc_refusals,
            rc_.ipc_exports, rc_.ipc_opens, rc_.ipc_closes, rc_.ipc_errors);
  if (rc_.ipc_exports || rc_.ipc_opens)
    fprintf(f, "  alloc: IPC host time: exports %.2f ms, opens %.2f ms, closes %.2f ms\n", rc_.ipc_export_ns / 1e6,
            rc_.ipc_open_ns / 1e6, rc_.ipc_close_ns / 1e6);
  if (s.tier_allocs || s.tier_refusals || s.tier_deferrals)
    fprintf(f, "  alloc: host tier: %.1f MiB on the host now (peak %.1f MiB), allocations %" PRIu64 ", frees %" PRIu64
               ", moved back %.1f MiB in %" PRIu64 " hold(s) of the process, refused %" PRIu64
               ", first asks answered out-of-memory %" PRIu64 "\n",
            MIB(s.tier_bytes), MIB(s.peak_tier_bytes), s.tier_allocs, s.tier_frees, MIB(s.tier_moved_bytes),
            rc_.tier_holds, s.tier_refusals, s.tier_deferrals);
  if (s.sleeps || s.prepares || s.host_kept_bytes)
    fprintf(f, "  alloc: sleep: %" PRIu64 " sleep(s), %" PRIu64 " wake(s), %.1f MiB asleep now; host memory kept "
               "for the next sleep %.1f MiB (%" PRIu64 " prepare(s)), %.1f MiB of sleeps copied into kept memory\n",
            s.sleeps, s.wakes, MIB(s.asleep_bytes), MIB(s.host_kept_bytes), s.prepares, MIB(s.host_reused_bytes));
  if (rc_.internal_allocs)
    fprintf(f, "  alloc: internal (shim's own buffers) %" PRIu64 ", %.1f MiB\n", rc_.internal_allocs,
            MIB(rc_.internal_bytes));
  pt_vmm_stats_text(f);
  route_each_pool(device_text, f);
}
