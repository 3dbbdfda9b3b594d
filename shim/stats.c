/* Exit statistics: per-symbol call counts, the kernel registry's most launched
 * kernels, fallback reasons, hook stats and the allocator's section. Runs once
 * at exit; may allocate. */
#include "shim/stats.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks/hook.h"
#include "common/grow.h"
#include "common/jsonw.h"
#include "common/log.h"
#include "shim/registry.h"
#include "shim/shim.h"

void (*pt_stats_alloc_json)(struct pt_jw *w);
void (*pt_stats_alloc_text)(FILE *f);

uint64_t pt_internal_errors;

/* Fallback reasons: static strings, so a slot is claimed by pointer with a
 * CAS and counted atomically (no lock on the launch path). */
#define PT_REASONS 64
static struct {
  const char *reason;
  uint64_t n;
} pt_reasons[PT_REASONS];
static uint64_t pt_reasons_dropped;

void pt_stats_fallback(const char *reason) {
  if (!reason) reason = "unspecified";
  for (int i = 0; i < PT_REASONS; i++) {
    const char *r = __atomic_load_n(&pt_reasons[i].reason, __ATOMIC_ACQUIRE);
    if (!r) {
      const char *expected = NULL;
      if (__atomic_compare_exchange_n(&pt_reasons[i].reason, &expected, reason, false, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE))
        r = reason;
      else
        r = expected;
    }
    if (r == reason || !strcmp(r, reason)) {
      __atomic_fetch_add(&pt_reasons[i].n, 1, __ATOMIC_RELAXED);
      return;
    }
  }
  __atomic_fetch_add(&pt_reasons_dropped, 1, __ATOMIC_RELAXED);
}

/* Kernels with their launch totals, summed once (a total walks every
 * thread's counters). */
struct pt_kcount {
  struct pt_kernel *k;
  uint64_t n;
};
struct pt_klist {
  struct pt_kcount *v;
  size_t n, cap;
  uint64_t launches;
};

static void pt_collect(struct pt_kernel *k, void *arg) {
  struct pt_klist *l = arg;
  uint64_t n = pt_launches_total(k);
  l->launches += n;
  if (!n) return;
  if (l->n == l->cap) {
    struct pt_kcount *v = pt_grow(l->v, &l->cap, sizeof *v, 256);
    if (!v) return;
    l->v = v;
  }
  l->v[l->n++] = (struct pt_kcount){k, n};
}

static int pt_by_launches(const void *a, const void *b) {
  const struct pt_kcount *x = a, *y = b;
  if (x->n != y->n) return x->n > y->n ? -1 : 1;
  return strcmp(x->k->name, y->k->name);
}

static void pt_top(struct pt_klist *l) {
  memset(l, 0, sizeof *l);
  pt_registry_foreach(pt_collect, l);
  if (l->n) qsort(l->v, l->n, sizeof *l->v, pt_by_launches);
}

static const char *pt_kname(const struct pt_kernel *k) { return k->name[0] ? k->name : "(unnamed)"; }

void pt_stats_write_json(FILE *f, const char *written) {
  struct pt_jw w;
  pt_jw_init(&w, f, false);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "version", PT_VERSION);
  pt_jw_i64(&w, "pid", (int64_t)getpid());
  pt_jw_str(&w, "written", written);
  pt_jw_obj_begin(&w, "calls");
  for (int i = 0; i < PT_SYM_COUNT; i++) {
    uint64_t n = pt_calls_total((enum pt_sym)i);
    if (n) pt_jw_u64(&w, pt_sym_name[i], n);
  }
  pt_jw_obj_end(&w);

  struct pt_klist l;
  pt_top(&l);
  pt_jw_obj_begin(&w, "kernels");
  pt_jw_u64(&w, "registered", pt_registry_count());
  pt_jw_u64(&w, "launches", l.launches);
  pt_jw_arr_begin(&w, "top");
  for (size_t i = 0; i < l.n && i < PT_STATS_TOP; i++) {
    struct pt_kernel *k = l.v[i].k;
    pt_jw_obj_begin(&w, NULL);
    pt_jw_str(&w, "name", pt_kname(k));
    pt_jw_u64(&w, "launches", l.v[i].n);
    pt_jw_str(&w, "action", pt_kernel_action_name(k));
    if (k->hook_id > 0) {
      pt_jw_u64(&w, "swapped", __atomic_load_n(&k->swapped, __ATOMIC_RELAXED));
      pt_jw_u64(&w, "skipped", __atomic_load_n(&k->skipped, __ATOMIC_RELAXED));
      pt_jw_u64(&w, "fallbacks", __atomic_load_n(&k->fallbacks, __ATOMIC_RELAXED));
    }
    pt_jw_obj_end(&w);
  }
  pt_jw_arr_end(&w);
  /* Every kernel a hook looked at, whatever its rank in "top": a prefill
   * kernel launched once per layer would otherwise drop out of the list
   * behind the decode step's many kernels, and with it its swap counts. */
  uint64_t sw = 0, sk = 0, fb = 0;
  pt_jw_arr_begin(&w, "hooked");
  for (size_t i = 0; i < l.n; i++) {
    struct pt_kernel *k = l.v[i].k;
    if (k->hook_id <= 0) continue;
    const uint64_t ks = __atomic_load_n(&k->swapped, __ATOMIC_RELAXED);
    const uint64_t kk = __atomic_load_n(&k->skipped, __ATOMIC_RELAXED);
    const uint64_t kf = __atomic_load_n(&k->fallbacks, __ATOMIC_RELAXED);
    sw += ks, sk += kk, fb += kf;
    pt_jw_obj_begin(&w, NULL);
    pt_jw_str(&w, "name", pt_kname(k));
    pt_jw_u64(&w, "launches", l.v[i].n);
    pt_jw_u64(&w, "swapped", ks);
    pt_jw_u64(&w, "skipped", kk);
    pt_jw_u64(&w, "fallbacks", kf);
    pt_jw_obj_end(&w);
  }
  pt_jw_arr_end(&w);
  pt_jw_u64(&w, "swapped", sw);
  pt_jw_u64(&w, "skipped", sk);
  pt_jw_u64(&w, "fallbacks", fb);
  pt_jw_obj_begin(&w, "fallback_reasons");
  for (int i = 0; i < PT_REASONS; i++) {
    const char *r = __atomic_load_n(&pt_reasons[i].reason, __ATOMIC_ACQUIRE);
    if (r) pt_jw_u64(&w, r, __atomic_load_n(&pt_reasons[i].n, __ATOMIC_RELAXED));
  }
  pt_jw_obj_end(&w);
  pt_jw_obj_end(&w);
  free(l.v);

  struct pt_hooks_stats hs;
  memset(&hs, 0, sizeof hs);
  pt_hooks_get_stats(&hs);
  pt_jw_obj_begin(&w, "hooks");
  pt_jw_u64(&w, "verified", hs.verified);
  pt_jw_u64(&w, "verify_failures", hs.verify_failures);
  pt_jw_u64(&w, "faults_planted", hs.faults_planted);
  pt_jw_u64(&w, "verify_skipped", hs.verify_skipped);
  pt_jw_obj_end(&w);
  pt_jw_obj_begin(&w, "sdpa_policy");
  pt_jw_u64(&w, "calls", hs.sdpa.calls);
  pt_jw_u64(&w, "decode_to_flash", hs.sdpa.decode_flash);
  pt_jw_u64(&w, "decode_to_mem_efficient", hs.sdpa.decode_mem_eff);
  pt_jw_u64(&w, "decode_kept_cudnn", hs.sdpa.decode_kept);
  pt_jw_u64(&w, "prefill_to_flash", hs.sdpa.prefill_flash);
  pt_jw_u64(&w, "prefill_kept_cudnn", hs.sdpa.prefill_kept);
  pt_jw_u64(&w, "torch_chose_other", hs.sdpa.not_cudnn);
  pt_jw_u64(&w, "length_unknown", hs.sdpa.unknown_len);
  pt_jw_str(&w, "layout", hs.sdpa.layout_ok > 0 ? "confirmed" : hs.sdpa.layout_ok < 0 ? "refuted" : "unchecked");
  pt_jw_obj_end(&w);
  pt_jw_u64(&w, "internal_errors", __atomic_load_n(&pt_internal_errors, __ATOMIC_RELAXED));
  if (pt_stats_alloc_json) {
    pt_jw_obj_begin(&w, "alloc");
    pt_stats_alloc_json(&w);
    pt_jw_obj_end(&w);
  }
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
}

void pt_stats_write_text(FILE *f, const char *written) {
  int pid = (int)getpid();
  fprintf(f, "ponytail[%d]: stats (%s)\n", pid, written);
  fprintf(f, "  %-36s %14s\n", "call", "count");
  for (int i = 0; i < PT_SYM_COUNT; i++) {
    uint64_t n = pt_calls_total((enum pt_sym)i);
    if (n) fprintf(f, "  %-36s %14" PRIu64 "\n", pt_sym_name[i], n);
  }
  struct pt_klist l;
  pt_top(&l);
  fprintf(f, "  kernels: %zu registered, %" PRIu64 " launches\n", pt_registry_count(), l.launches);
  if (l.n) fprintf(f, "  %14s  %-11s  %s\n", "launches", "action", "kernel");
  for (size_t i = 0; i < l.n && i < PT_STATS_TOP; i++)
    fprintf(f, "  %14" PRIu64 "  %-11s  %s\n", l.v[i].n, pt_kernel_action_name(l.v[i].k), pt_kname(l.v[i].k));
  /* Hooked kernels, whatever their rank above (see "hooked" in the JSON). */
  int hdr = 0;
  for (size_t i = 0; i < l.n; i++) {
    const struct pt_kernel *k = l.v[i].k;
    if (k->hook_id <= 0) continue;
    if (!hdr++) fprintf(f, "  %14s  %9s %9s %9s  %s\n", "hooked", "swapped", "skipped", "fallbacks", "kernel");
    fprintf(f, "  %14" PRIu64 "  %9" PRIu64 " %9" PRIu64 " %9" PRIu64 "  %s\n", l.v[i].n,
            __atomic_load_n(&k->swapped, __ATOMIC_RELAXED), __atomic_load_n(&k->skipped, __ATOMIC_RELAXED),
            __atomic_load_n(&k->fallbacks, __ATOMIC_RELAXED), pt_kname(k));
  }
  free(l.v);
  for (int i = 0; i < PT_REASONS; i++) {
    const char *r = __atomic_load_n(&pt_reasons[i].reason, __ATOMIC_ACQUIRE);
    if (r) fprintf(f, "  fallback %-40s %" PRIu64 "\n", r, __atomic_load_n(&pt_reasons[i].n, __ATOMIC_RELAXED));
  }
  struct pt_hooks_stats hs;
  memset(&hs, 0, sizeof hs);
  pt_hooks_get_stats(&hs);
  if (hs.verified) fprintf(f, "  verified %" PRIu64 " (failures %" PRIu64 ")\n", hs.verified, hs.verify_failures);
  if (hs.verify_skipped)
    fprintf(f, "  not verified (scratch over %d MiB) %" PRIu64 "\n", (int)(PT_VERIFY_MAX_SCRATCH >> 20),
            hs.verify_skipped);
  if (hs.faults_planted) fprintf(f, "  test faults planted %" PRIu64 "\n", hs.faults_planted);
  if (hs.sdpa.calls)
    fprintf(f, "  SDPA policy: %" PRIu64 " choices; decode to flash %" PRIu64 ", to mem-efficient %" PRIu64
               ", kept on cuDNN %" PRIu64 "; prefill to flash %" PRIu64 ", kept on cuDNN %" PRIu64
               "; torch chose another %" PRIu64 "; length unknown %" PRIu64 "\n",
            hs.sdpa.calls, hs.sdpa.decode_flash, hs.sdpa.decode_mem_eff, hs.sdpa.decode_kept, hs.sdpa.prefill_flash,
            hs.sdpa.prefill_kept, hs.sdpa.not_cudnn, hs.sdpa.unknown_len);
  uint64_t ie = __atomic_load_n(&pt_internal_errors, __ATOMIC_RELAXED);
  if (ie) fprintf(f, "  internal errors %" PRIu64 "\n", ie);
  if (pt_stats_alloc_text) pt_stats_alloc_text(f);
}
