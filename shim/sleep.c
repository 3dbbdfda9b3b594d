/* Sleep and wake of the whole process (issue 50): the requests that
 * shim/control.c receives, one at a time.
 *
 * sleep: close the gate (shim/gate.h) so that no CUDA call of the
 * application touches memory meanwhile, drain every device, then put every
 * pool to sleep (shim/route_sleep.c): its bytes to page-locked host memory
 * (or dropped), its physical memory released, every address kept. The gate
 * stays closed: the application's next CUDA calls wait. wake: new physical
 * memory at the same addresses, the bytes copied back, the gate opened.
 * Any failure leaves the process as it was before the request (awake with the
 * gate open after a failed sleep, asleep after a failed wake) and answers with
 * the reason. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/now_ns.h"
#include "common/options.h"
#include "shim/gate.h"
#include "shim/route_alloc.h"
#include "shim/route_sleep.h"
#include "shim/route_vmm.h"
#include "shim/sleep.h"

static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static bool asleep, asleep_discard;
static uint64_t asleep_since_ns;
/* A wake answers as soon as the process runs again; the host memory that held
 * the bytes is freed after the answer went out (pt_sleep_after_reply), or
 * before the next request at the latest. */
static bool release_pending;
static double last_release_s = -1;
static bool exiting; /* pt_sleep_exit ran: no request touches the pools any more */

struct out {
  char *p;
  size_t n, len;
};

static void put(struct out *o, const char *fmt, ...) {
  if (o->len + 1 >= o->n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(o->p + o->len, o->n - o->len, fmt, ap);
  va_end(ap);
  if (k > 0) o->len += (size_t)k < o->n - o->len ? (size_t)k : o->n - o->len - 1;
}

static double secs(uint64_t ns) { return (double)ns / 1e9; }

static void figures(struct out *o, const char *when, const struct pt_route_sleep_figures *f) {
  put(o, "%s_pool_bytes=%" PRIu64 "\n%s_device_used_bytes=%" PRIu64 "\n%s_tier_bytes=%" PRIu64
      "\n%s_torch_bytes=%" PRIu64 "\n", when, f->physical_bytes, when, f->device_used_bytes, when,
      f->tier_bytes + f->torch_host_bytes, when, f->torch_bytes);
}

/* What a failed request names: device dev's pool, or (dev < 0) PyTorch's own
 * mapped memory. */
static void failed_part(int dev, char *buf, size_t n) {
  if (dev >= 0) snprintf(buf, n, "device %d", dev);
  else snprintf(buf, n, "PyTorch's own mapped memory");
}

/* PyTorch's own mapped memory's part of a sleep or wake (shim/route_vmm.h). */
static void torch_lines(struct out *o, const struct pt_pool_sleep_info *t, uint64_t kept) {
  put(o, "torch_handles=%" PRIu64 "\ntorch_bytes=%" PRIu64 "\ntorch_copied_bytes=%" PRIu64
      "\ntorch_kept_bytes=%" PRIu64 "\ntorch_reused_bytes=%" PRIu64 "\ntorch_copy_s=%.6f\ntorch_host_s=%.6f\n",
      t->handles, t->bytes, t->copied_bytes, kept, t->reused_bytes, secs(t->copy_ns), secs(t->host_ns));
}

static void info_lines(struct out *o, const struct pt_pool_sleep_info *i) {
  put(o,
      "handles=%" PRIu64 "\nbytes=%" PRIu64 "\ncopied_bytes=%" PRIu64 "\ntrimmed_bytes=%" PRIu64
      "\nreused_bytes=%" PRIu64 "\ncopy_s=%.6f\nmap_s=%.6f\nhost_s=%.6f\n",
      i->handles, i->bytes, i->copied_bytes, i->trimmed_bytes, i->reused_bytes, secs(i->copy_ns), secs(i->map_ns),
      secs(i->host_ns));
}

/* What keeps the process from sleeping with these figures, a sleep and a
 * prepare alike: writes the error line and says true, or false when nothing
 * does. what names the request in the first reason. */
static bool cannot_sleep(struct out *o, const struct pt_route_sleep_figures *f, const char *what) {
  if (!f->pools && !f->torch_handles) {
    put(o, "error: nothing to %s: no allocation of this process went to Ponytail's pool "
           "(PONYTAIL_POOL=0, or none of at least PONYTAIL_KV_MIN) and PyTorch maps none of its own that the shim "
           "keeps (expandable segments with PONYTAIL_TORCH_VMM)\n", what);
    return true;
  }
  if (f->tier_bytes || f->torch_host_bytes) {
    put(o, "error: %" PRIu64 " bytes of the process's memory live in host memory (PONYTAIL_HOST_TIER); a process "
           "whose host tier holds memory cannot sleep\n", f->tier_bytes + f->torch_host_bytes);
    return true;
  }
  if (f->ipc_exports_live || f->torch_exported) {
    put(o, "error: %" PRIu64 " block(s) are shared with another process by CUDA IPC; their memory "
           "cannot be released under the importer\n", f->ipc_exports_live + f->torch_exported);
    return true;
  }
  return false;
}

/* Whether a stream capture is open (then the error line is written): the
 * device cannot be drained meanwhile (shim/entry_capture.c). */
static bool capturing(struct out *o) {
  int64_t n = pt_captures_open();
  if (n > 0)
    put(o, "error: %" PRId64 " CUDA graph capture(s) in progress: the device cannot be drained while a stream "
           "captures; not asleep, the process runs on (try again when the capture has ended)\n", n);
  return n > 0;
}

static void do_sleep(bool discard, struct out *o) {
  if (asleep) {
    put(o, "error: already asleep (since %.1f s); wake it first\n", secs(pt_now_ns() - asleep_since_ns));
    return;
  }
  struct pt_route_sleep_figures before;
  pt_route_sleep_figures(&before);
  if (cannot_sleep(o, &before, "put to sleep")) return;
  uint64_t t0 = pt_now_ns(), busy = 0;
  uint64_t timeout_s = (uint64_t)pt_opt_size(PT_OPT_SLEEP_TIMEOUT);
  /* Checked before the gate closes (holding the process only to refuse would
   * stall its every CUDA call) and again after (a capture begun meanwhile). */
  if (capturing(o)) return;
  if (pt_gate_close(timeout_s * 1000u, &busy)) {
    put(o, "error: %" PRIu64 " CUDA call(s) of the process still running after %" PRIu64
           " s (PONYTAIL_SLEEP_TIMEOUT); not asleep, the process runs on\n", busy, timeout_s);
    return;
  }
  if (capturing(o)) {
    pt_gate_open();
    return;
  }
  uint64_t t1 = pt_now_ns();
  struct pt_pool_sleep_info sum, tsum;
  int dev = -1;
  uint64_t kept = 0;
  /* PyTorch's own mapped memory first, then the pools; either failing leaves
   * both as they were. */
  int rc = pt_vmm_sleep(discard, &tsum, &kept);
  if (rc) {
    pt_gate_open();
    put(o, "error: CUDA error %d while releasing PyTorch's own mapped memory%s; not asleep, the process runs on\n",
        rc, rc == 2 ? " (out of host memory for the copy: try --discard)" : "");
    pt_warn("sleep failed in PyTorch's mapped memory (CUDA error %d); the process runs on", rc);
    return;
  }
  rc = pt_route_sleep(discard, &sum, &dev);
  uint64_t t2 = pt_now_ns();
  if (rc) {
    struct pt_pool_sleep_info w;
    if (pt_vmm_wake(&w)) pt_warn("sleep: PyTorch's mapped memory could not be woken again after the pools failed");
    pt_vmm_wake_release();
    pt_gate_open();
    put(o, "error: device %d: CUDA error %d while putting its pool to sleep%s; not asleep, the process runs "
           "on\n", dev, rc, rc == 2 ? " (out of host memory for the copy: try --discard)" : "");
    pt_warn("sleep failed on device %d (CUDA error %d); the process runs on", dev, rc);
    return;
  }
  struct pt_route_sleep_figures after;
  pt_route_sleep_figures(&after);
  asleep = true;
  asleep_discard = discard;
  asleep_since_ns = t2;
  char host[16];
  put(o, "ok\nstate=asleep\nmode=%s\nhost=%s\nseconds=%.6f\nclose_s=%.6f\n", discard ? "discard" : "copy",
      pt_opt_value_text(PT_OPT_SLEEP_HOST, host, sizeof host), secs(t2 - t0), secs(t1 - t0));
  info_lines(o, &sum);
  torch_lines(o, &tsum, kept);
  figures(o, "before", &before);
  figures(o, "after", &after);
  put(o, "device_total_bytes=%" PRIu64 "\npassthrough_live=%" PRIu64 "\npools=%" PRIu64 "\n",
      before.device_total_bytes, before.passthrough_live, before.pools);
  pt_info("asleep: %" PRIu64 " bytes of pooled memory and %" PRIu64 " of PyTorch's own released (%s) in %.3f s",
          sum.bytes, tsum.bytes, discard ? "dropped" : "kept on the host", secs(t2 - t0));
}

static void do_wake(struct out *o) {
  if (!asleep) {
    put(o, "error: not asleep\n");
    return;
  }
  uint64_t t0 = pt_now_ns();
  struct pt_pool_sleep_info sum, tsum;
  int dev = -1;
  int rc = pt_vmm_wake(&tsum);
  if (!rc && (rc = pt_route_wake(&sum, &dev)) != 0) pt_vmm_resleep(); /* the pools stay asleep: so does PyTorch's */
  uint64_t t1 = pt_now_ns();
  if (rc) {
    char who[48];
    failed_part(dev, who, sizeof who);
    put(o, "error: %s: CUDA error %d while mapping memory back%s; still asleep (wake again when memory "
           "is free)\n", who, rc, rc == 2 ? " (the device is full: another process holds the memory)" : "");
    return;
  }
  asleep = false;
  pt_gate_open();
  /* The process runs again. The host memory is freed only after this answer
   * (a second for 12 GiB of page-locked memory): whoever asked need not wait
   * for it, and seconds is the time the process was held. */
  release_pending = true;
  struct pt_route_sleep_figures after;
  pt_route_sleep_figures(&after);
  put(o, "ok\nstate=awake\nmode=%s\nseconds=%.6f\nslept_s=%.3f\nrelease=%s\n", asleep_discard ? "discard" : "copy",
      secs(t1 - t0), secs(t0 - asleep_since_ns), pt_opt_bool(PT_OPT_SLEEP_REUSE) ? "kept" : "after_answer");
  info_lines(o, &sum);
  torch_lines(o, &tsum, 0);
  figures(o, "after", &after);
  pt_info("awake: %" PRIu64 " bytes mapped back in %.3f s", sum.bytes + tsum.bytes, secs(t1 - t0));
}

/* Under sleep_mu: the host memory of the last wake, freed (or kept for the
 * next sleep under PONYTAIL_SLEEP_REUSE), if that is still to do. */
static void release_now(void) {
  if (!release_pending || exiting) return;
  release_pending = false;
  uint64_t t0 = pt_now_ns();
  struct pt_pool_sleep_info sum = {0};
  pt_route_wake_release(&sum);
  pt_vmm_wake_release();
  last_release_s = secs(pt_now_ns() - t0);
  pt_info("the last wake's host memory released in %.3f s, the process running", last_release_s);
}

void pt_sleep_exit(void) {
  /* Waits for a request (or a wake's release of host memory) in progress:
   * none of them may run while the process tears down. */
  pthread_mutex_lock(&sleep_mu);
  exiting = true;
  pthread_mutex_unlock(&sleep_mu);
}

void pt_sleep_atfork_child(void) {
  /* The parent's requests and its host memory are the parent's. */
  pthread_mutex_init(&sleep_mu, NULL);
  release_pending = false;
}

void pt_sleep_after_reply(void) {
  pthread_mutex_lock(&sleep_mu);
  release_now();
  pthread_mutex_unlock(&sleep_mu);
}

/* prepare: the host memory of the next sleep, got while the process runs
 * (the gate stays open). */
static void do_prepare(struct out *o) {
  if (asleep) {
    put(o, "error: asleep (since %.1f s); prepare is for a process that runs\n", secs(pt_now_ns() - asleep_since_ns));
    return;
  }
  struct pt_route_sleep_figures f;
  pt_route_sleep_figures(&f);
  if (cannot_sleep(o, &f, "prepare")) return; /* (host memory for a sleep that would be refused) */
  uint64_t t0 = pt_now_ns();
  struct pt_pool_sleep_info sum, tsum;
  int dev = -1;
  int rc = pt_route_sleep_prepare(&sum, &dev);
  if (!rc && (rc = pt_vmm_prepare(&tsum)) != 0) dev = -1; /* PyTorch's own mapped memory's part */
  uint64_t t1 = pt_now_ns();
  if (rc) {
    char who[48];
    failed_part(dev, who, sizeof who);
    put(o, "error: %s: CUDA error %d while getting host memory%s; nothing more kept, the process runs "
           "on\n", who, rc, rc == 2 ? " (out of host memory: its next sleep would fail too; try --discard)" : "");
    return;
  }
  char host[16];
  put(o, "ok\nstate=awake\nmode=prepare\nhost=%s\nseconds=%.6f\n",
      pt_opt_value_text(PT_OPT_SLEEP_HOST, host, sizeof host), secs(t1 - t0));
  info_lines(o, &sum);
  torch_lines(o, &tsum, 0);
  figures(o, "now", &f);
  pt_info("prepared: %" PRIu64 " bytes of host memory for the next sleep in %.3f s (%" PRIu64 " kept already)",
          sum.bytes + tsum.bytes, secs(t1 - t0), sum.reused_bytes + tsum.reused_bytes);
}

/* prepare release: the host memory kept for the next sleep, freed. */
static void do_unprepare(struct out *o) {
  if (asleep) {
    put(o, "error: asleep (since %.1f s); its host memory holds the pool's bytes until the wake\n",
        secs(pt_now_ns() - asleep_since_ns));
    return;
  }
  uint64_t t0 = pt_now_ns();
  uint64_t bytes = pt_route_sleep_unprepare() + pt_vmm_unprepare();
  put(o, "ok\nstate=awake\nmode=unprepare\nseconds=%.6f\nfreed_bytes=%" PRIu64 "\n", secs(pt_now_ns() - t0), bytes);
  pt_info("host memory kept for the next sleep freed: %" PRIu64 " bytes", bytes);
}

static void do_status(struct out *o) {
  struct pt_route_sleep_figures f;
  pt_route_sleep_figures(&f);
  put(o, "ok\nstate=%s\n", asleep ? "asleep" : "awake");
  if (asleep) put(o, "mode=%s\nslept_s=%.3f\n", asleep_discard ? "discard" : "copy", secs(pt_now_ns() - asleep_since_ns));
  put(o, "held_threads=%" PRIu64 "\npools=%" PRIu64 "\n", pt_gate_held(), f.pools);
  if (last_release_s >= 0) put(o, "last_release_s=%.6f\n", last_release_s);
  figures(o, "now", &f);
  put(o, "device_total_bytes=%" PRIu64 "\npassthrough_live=%" PRIu64 "\n", f.device_total_bytes, f.passthrough_live);
}

void pt_sleep_request(const char *line, char *buf, size_t n) {
  struct out o = {buf, n, 0};
  buf[0] = 0;
  pthread_mutex_lock(&sleep_mu);
  release_now(); /* the last wake's, if its answer's sender did not run it */
  if (exiting) put(&o, "error: the process is exiting\n");
  else if (!strcmp(line, "sleep")) do_sleep(false, &o);
  else if (!strcmp(line, "sleep discard")) do_sleep(true, &o);
  else if (!strcmp(line, "wake")) do_wake(&o);
  else if (!strcmp(line, "status")) do_status(&o);
  else if (!strcmp(line, "prepare")) do_prepare(&o);
  else if (!strcmp(line, "prepare release")) do_unprepare(&o);
  else put(&o, "error: unknown request (sleep, sleep discard, prepare, prepare release, wake, status)\n");
  pthread_mutex_unlock(&sleep_mu);
  put(&o, "pid=%d\n", (int)getpid());
}

int pt_sleep_hold_and_run(uint64_t timeout_ms, int (*fn)(void *), void *arg, bool *ran) {
  *ran = false;
  pthread_mutex_lock(&sleep_mu);
  int rc = 0;
  if (!asleep && !exiting && pt_captures_open() == 0 && pt_gate_close(timeout_ms, NULL) == 0) {
    /* Not while a stream captures: fn drains the device (see do_sleep). */
    if (pt_captures_open() == 0) {
      rc = fn(arg);
      *ran = true;
    }
    pt_gate_open();
  }
  pthread_mutex_unlock(&sleep_mu);
  return rc;
}

bool pt_sleep_asleep(void) {
  pthread_mutex_lock(&sleep_mu);
  bool a = asleep;
  pthread_mutex_unlock(&sleep_mu);
  return a;
}
