/* `ponytail replay FILE`: runs an allocation trace through the pool on the
 * host backend and reports memory overhead and per-operation cost. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/replay.h"
#include "common/jsonw.h"
#include "tools/cmd.h"

static void replay_usage(FILE *f) {
  fprintf(f,
          "usage: ponytail replay FILE [--json] [--keep SIZE] [--limit SIZE] [--min SIZE]\n"
          "                        [--lag N] [--chunk SIZE]\n"
          "\n"
          "Replays an allocation trace (tests/data/traces format, gzip or plain text)\n"
          "through Ponytail's pool on the host backend: the trace's pointers are keys,\n"
          "addresses come from the pool, no memory is written. Prints peak live bytes,\n"
          "peak physical bytes, overhead (peak physical / peak live - 1), stitches,\n"
          "trims, the driver calls the pool would make (creates, maps, unmaps,\n"
          "releases of physical memory), and nanoseconds per alloc and per free\n"
          "(p50, p99).\n"
          "\n"
          "  --json        print one JSON object instead of text\n"
          "  --keep SIZE   free physical memory the pool keeps mapped (default 2G,\n"
          "                as PONYTAIL_POOL_KEEP); SIZE takes K/M/G/T suffixes\n"
          "  --limit SIZE  cap on pool plus pass-through bytes, like PONYTAIL_MEM_LIMIT\n"
          "                (default 0 = none)\n"
          "  --min SIZE    replay allocations smaller than SIZE as pass-through, as the\n"
          "                shim does below PONYTAIL_KV_MIN / PONYTAIL_KV_MIN_ASYNC (e.g.\n"
          "                --min 1M): they are not pooled and not counted in peak live\n"
          "                (default 0 = pool all, as the shim does with PyTorch's\n"
          "                stream-ordered allocations)\n"
          "  --lag N       simulate a device running behind the host: freed memory's\n"
          "                work completes only every N pooled events (default 0 = at\n"
          "                once), as in a GPU-bound prefill\n"
          "  --chunk SIZE  largest physical handle the pool creates, like\n"
          "                PONYTAIL_POOL_CHUNK (default: 2M with --limit, else 32M)\n"
          "  --help        this text\n"
          "\n"
          "Exit status: 0 ok, 1 allocations failed under --limit, 2 bad usage or bad\n"
          "input (reported as FILE:LINE: message).\n");
}

/* A byte count with an optional binary K/M/G/T suffix. */
static int replay_parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  int shift = 0;
  switch (*end) {
  case 0: break;
  case 'k': case 'K': shift = 10; break;
  case 'm': case 'M': shift = 20; break;
  case 'g': case 'G': shift = 30; break;
  case 't': case 'T': shift = 40; break;
  default: return -1;
  }
  if (*end && end[1] && strcmp(end + 1, "B") && strcmp(end + 1, "iB")) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* Options of pt_cmd_replay (the size flags in size_flag's order). */
enum { O_JSON = 256, O_KEEP, O_LIMIT, O_MIN, O_CHUNK, O_LAG };

/* A bad or missing value of option c: exit status 2. */
static int replay_bad_value(int c) {
  static const char *const size_flag[] = {"--keep", "--limit", "--min", "--chunk"};
  if (c == O_LAG) fprintf(stderr, "ponytail replay: --lag needs a count of events (e.g. 100)\n");
  else fprintf(stderr, "ponytail replay: %s needs a size (e.g. 512M)\n", size_flag[c - O_KEEP]);
  return 2;
}

static void replay_json(const char *file, const struct pt_replay_result *r) {
  struct pt_jw w;
  pt_jw_init(&w, stdout, true);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "trace", file);
  pt_jw_u64(&w, "allocs", r->allocs);
  pt_jw_u64(&w, "frees", r->frees);
  pt_jw_u64(&w, "passthrough_allocs", r->pass_allocs);
  pt_jw_u64(&w, "passthrough_frees", r->pass_frees);
  pt_jw_u64(&w, "failed_allocs", r->failed_allocs);
  pt_jw_u64(&w, "peak_live_bytes", r->peak_live_bytes);
  pt_jw_u64(&w, "peak_physical_bytes", r->peak_physical_bytes);
  pt_jw_dbl(&w, "overhead", r->overhead);
  pt_jw_u64(&w, "stitches", r->pool.stitches);
  pt_jw_u64(&w, "trims", r->pool.trims);
  pt_jw_u64(&w, "grows", r->pool.grows);
  pt_jw_u64(&w, "syncs", r->pool.syncs);
  pt_jw_obj_begin(&w, "driver_calls");
  pt_jw_u64(&w, "creates", r->creates);
  pt_jw_u64(&w, "maps", r->maps);
  pt_jw_u64(&w, "unmaps", r->unmaps);
  pt_jw_u64(&w, "releases", r->releases);
  pt_jw_obj_end(&w);
  pt_jw_dbl(&w, "ns_per_op_p50", r->op_p50);
  pt_jw_dbl(&w, "ns_per_op_p99", r->op_p99);
  pt_jw_dbl(&w, "ns_per_alloc_p50", r->alloc_p50);
  pt_jw_dbl(&w, "ns_per_alloc_p99", r->alloc_p99);
  pt_jw_dbl(&w, "ns_per_free_p50", r->free_p50);
  pt_jw_dbl(&w, "ns_per_free_p99", r->free_p99);
  pt_jw_obj_begin(&w, "pool");
  pt_pool_stats_json(&r->pool, &w);
  pt_jw_obj_end(&w);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
}

static void replay_text(const char *file, const struct pt_replay_result *r) {
  const double mib = 1024.0 * 1024.0;
  printf("trace          %s\n", file);
  printf("allocs         %llu (frees %llu, failed %llu, pass-through %llu)\n",
         (unsigned long long)r->allocs, (unsigned long long)r->frees,
         (unsigned long long)r->failed_allocs, (unsigned long long)r->pass_allocs);
  printf("peak live      %llu bytes (%.1f MiB)\n", (unsigned long long)r->peak_live_bytes,
         (double)r->peak_live_bytes / mib);
  printf("peak physical  %llu bytes (%.1f MiB)\n", (unsigned long long)r->peak_physical_bytes,
         (double)r->peak_physical_bytes / mib);
  printf("overhead       %.2f%%\n", r->overhead * 100.0);
  printf("stitches       %llu (%.1f MiB), grows %llu, trims %llu (%.1f MiB)\n",
         (unsigned long long)r->pool.stitches, (double)r->pool.stitched_bytes / mib,
         (unsigned long long)r->pool.grows, (unsigned long long)r->pool.trims,
         (double)r->pool.trimmed_bytes / mib);
  printf("syncs          %llu\n", (unsigned long long)r->pool.syncs);
  printf("driver calls   creates %llu, maps %llu, unmaps %llu, releases %llu\n", (unsigned long long)r->creates,
         (unsigned long long)r->maps, (unsigned long long)r->unmaps, (unsigned long long)r->releases);
  printf("ns per alloc   p50 %.0f  p99 %.0f\n", r->alloc_p50, r->alloc_p99);
  printf("ns per free    p50 %.0f  p99 %.0f\n", r->free_p50, r->free_p99);
  printf("ns per op      p50 %.0f  p99 %.0f\n", r->op_p50, r->op_p99);
}

int pt_cmd_replay(int argc, char **argv) {
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"json", no_argument, NULL, O_JSON},
      {"keep", required_argument, NULL, O_KEEP},
      {"limit", required_argument, NULL, O_LIMIT},
      {"min", required_argument, NULL, O_MIN},
      {"chunk", required_argument, NULL, O_CHUNK},
      {"lag", required_argument, NULL, O_LAG},
      {NULL, 0, NULL, 0},
  };
  const char *file = NULL, *w;
  bool json = false;
  int c, files = 0;
  struct pt_replay_opts o = {.keep_bytes = PT_POOL_KEEP_DEFAULT, .time_ops = true};
  uint64_t *const size_dst[] = {&o.keep_bytes, &o.limit_bytes, &o.min_bytes, &o.chunk_bytes};
  optind = 0;
  /* '-': FILE may come before or after the flags. */
  while ((c = pt_getopt(argc, argv, "-:h", opts, &w)) != -1) {
    char *end;
    switch (c) {
    case 'h': replay_usage(stdout); return 0;
    case O_JSON: json = true; break;
    case O_KEEP: case O_LIMIT: case O_MIN: case O_CHUNK:
      if (replay_parse_size(optarg, size_dst[c - O_KEEP])) return replay_bad_value(c);
      break;
    case O_LAG:
      errno = 0;
      if (optarg[0] < '0' || optarg[0] > '9' || (o.lag_ops = strtoull(optarg, &end, 10), errno || *end))
        return replay_bad_value(c);
      break;
    case 1: file = optarg, files++; break;
    case ':': return replay_bad_value(optopt); /* a size flag or --lag without its value */
    default:
      fprintf(stderr, "ponytail replay: unknown flag '%s'\n\n", w);
      replay_usage(stderr);
      return 2;
    }
  }
  for (; optind < argc; optind++) file = argv[optind], files++;
  if (files > 1) {
    fprintf(stderr, "ponytail replay: one trace file only\n");
    return 2;
  }
  if (!file) {
    replay_usage(stderr);
    return 2;
  }
  char err[512];
  struct pt_replay_trace *t;
  if (pt_replay_load(file, &t, err, sizeof err)) {
    fprintf(stderr, "ponytail replay: %s\n", err);
    return 2;
  }
  struct pt_replay_result r;
  int rc = pt_replay_run(t, &o, &r, err, sizeof err);
  pt_replay_free(t);
  if (rc) {
    fprintf(stderr, "ponytail replay: %s: %s\n", file, err);
    return 1;
  }
  if (json) replay_json(file, &r);
  else replay_text(file, &r);
  if (r.failed_allocs) {
    fprintf(stderr, "ponytail replay: %s: %llu allocations failed (out of memory under --limit)\n", file,
            (unsigned long long)r.failed_allocs);
    return 1;
  }
  return 0;
}
