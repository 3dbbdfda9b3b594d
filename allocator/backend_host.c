/* Host backend: see backend_host.h. Not thread-safe by itself; the pool
 * serialises calls under its mutex, tests call the hooks between pool calls. */
#include "allocator/backend_host.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct host_marker {
  pt_bk_stream stream;
  uint64_t seq; /* record_seq of its last record */
  bool live, pending;
};

struct host_ctx {
  int fd;
  size_t gran;
  uint64_t max_granules, max_tier_granules;
  uint64_t other_granules; /* device memory used outside the pool (pt_backend_host_others) */
  /* Granule slots of the memfd: in_use[i] (part of a created handle); for a
   * handle's first slot, len[i] (its granules, else 0) and mapped_va[i]
   * (where it is mapped, 0 when not). */
  uint8_t *in_use;
  uintptr_t *mapped_va;
  uint32_t *len;
  uint8_t *tier; /* first slot of a handle: 1 when it is host-tier memory (create_host) */
  uint64_t nslots;
  struct host_marker *markers;
  uint64_t nmarkers;
  bool hold;
  unsigned fail_at[PT_HOST_OP_COUNT];
  int fail_err[PT_HOST_OP_COUNT];
  struct pt_host_counters c;
  /* Taken by the HOST_LOCKED ops (a sleep's or a wake's helper threads). */
  pthread_mutex_t mu;
};

/* true when this call of op is the injected failure. */
static bool host_fault(struct host_ctx *h, enum pt_host_op op) {
  if (!h->fail_at[op]) return false;
  if (--h->fail_at[op]) return false;
  return true;
}

/* NAME: NAME_unlocked under the context's lock. A sleep's or a wake's helper
 * threads call some ops concurrently with each other and with the sleeping
 * thread's (backend.h); these are the ops that touch the slots, the
 * mappings, the fault counters or the host counters. */
#define HOST_LOCKED(NAME, PARAMS, ARGS)  \
  static int NAME PARAMS {               \
    struct host_ctx *h_ = ctx;           \
    pthread_mutex_lock(&h_->mu);         \
    int rc_ = NAME##_unlocked ARGS;      \
    pthread_mutex_unlock(&h_->mu);       \
    return rc_;                          \
  }

static int host_granularity(void *ctx, size_t *out) {
  *out = ((struct host_ctx *)ctx)->gran;
  return 0;
}

static int host_reserve(void *ctx, size_t size, uintptr_t *va) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_RESERVE)) return h->fail_err[PT_HOST_OP_RESERVE];
  if (!size || size % h->gran) return PT_HOST_ERR_INVALID;
  /* Over-reserve by one granule and trim the ends, for granule alignment. */
  size_t span = size + h->gran;
  void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return PT_HOST_ERR_OOM;
  uintptr_t a = (uintptr_t)p, al = (a + h->gran - 1) & ~(uintptr_t)(h->gran - 1);
  if (al > a) munmap(p, al - a);
  if (al + size < a + span) munmap((void *)(al + size), a + span - (al + size));
  *va = al;
  h->c.reserved_bytes += size;
  return 0;
}

static int host_unreserve(void *ctx, uintptr_t va, size_t size) {
  struct host_ctx *h = ctx;
  if (munmap((void *)va, size)) return PT_HOST_ERR_INVALID;
  h->c.reserved_bytes -= size;
  return 0;
}

/* Room for at least n slots: the memfd and the slot arrays grow by doubling. */
static int host_grow_slots(struct host_ctx *h, uint64_t n) {
  if (n <= h->nslots) return 0;
  uint64_t cap = h->nslots ? h->nslots : 64;
  while (cap < n) cap *= 2;
  uint8_t *u = realloc(h->in_use, cap);
  if (!u) return PT_HOST_ERR_OOM;
  h->in_use = u;
  uintptr_t *m = realloc(h->mapped_va, cap * sizeof *m);
  if (!m) return PT_HOST_ERR_OOM;
  h->mapped_va = m;
  uint32_t *l = realloc(h->len, cap * sizeof *l);
  if (!l) return PT_HOST_ERR_OOM;
  h->len = l;
  uint8_t *t = realloc(h->tier, cap);
  if (!t) return PT_HOST_ERR_OOM;
  h->tier = t;
  memset(t + h->nslots, 0, cap - h->nslots);
  /* The memfd only grows in size; ftruncate commits no memory. */
  if (ftruncate(h->fd, (off_t)(cap * h->gran))) return PT_HOST_ERR_OOM;
  memset(u + h->nslots, 0, cap - h->nslots);
  memset(m + h->nslots, 0, (cap - h->nslots) * sizeof *m);
  memset(l + h->nslots, 0, (cap - h->nslots) * sizeof *l);
  h->nslots = cap;
  return 0;
}

/* A handle is a run of granule slots of the memfd, named by its first slot;
 * the lowest free run that fits is used. */
static int create_run(struct host_ctx *h, size_t size, bool tier, pt_bk_handle *out) {
  if (!size || size % h->gran || size / h->gran > UINT32_MAX) return PT_HOST_ERR_INVALID;
  uint64_t n = size / h->gran;
  if (tier ? h->max_tier_granules && h->c.tier_granules + n > h->max_tier_granules
           : h->max_granules && h->other_granules + h->c.live_granules + n > h->max_granules)
    return PT_HOST_ERR_OOM;
  uint64_t s = 0, run = 0;
  for (; s < h->nslots && run < n; s++) run = h->in_use[s] ? 0 : run + 1;
  uint64_t first = run == n ? s - n : s - run; /* else the run continues past the end */
  if (host_grow_slots(h, first + n)) return PT_HOST_ERR_OOM;
  memset(h->in_use + first, 1, n);
  h->len[first] = (uint32_t)n;
  h->tier[first] = tier;
  h->c.live_handles++;
  if (tier) h->c.tier_granules += n;
  else h->c.live_granules += n;
  h->c.creates++;
  *out = first;
  return 0;
}

static int host_create_unlocked(void *ctx, size_t size, pt_bk_handle *out) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_CREATE)) return h->fail_err[PT_HOST_OP_CREATE];
  return create_run(h, size, false, out);
}
HOST_LOCKED(host_create, (void *ctx, size_t size, pt_bk_handle *out), (ctx, size, out))

/* Host-tier memory: the same memfd (a test sees the same bytes either way),
 * counted apart and capped by pt_backend_host_tier_cap, not by the device's
 * max_granules. */
static int host_create_host_unlocked(void *ctx, size_t size, pt_bk_handle *out) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_CREATE_HOST)) return h->fail_err[PT_HOST_OP_CREATE_HOST];
  return create_run(h, size, true, out);
}
HOST_LOCKED(host_create_host, (void *ctx, size_t size, pt_bk_handle *out), (ctx, size, out))

static bool host_handle_ok(const struct host_ctx *h, pt_bk_handle hd) {
  return hd < h->nslots && h->in_use[hd] && h->len[hd];
}

static int host_release_unlocked(void *ctx, pt_bk_handle hd) {
  struct host_ctx *h = ctx;
  if (!host_handle_ok(h, hd) || h->mapped_va[hd]) return PT_HOST_ERR_INVALID;
  uint64_t n = h->len[hd];
  /* Give the pages back, as cuMemRelease gives the memory back. */
  (void)fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(hd * h->gran),
                  (off_t)(n * h->gran));
  memset(h->in_use + hd, 0, n);
  h->len[hd] = 0;
  h->c.live_handles--;
  if (h->tier[hd]) h->c.tier_granules -= n;
  else h->c.live_granules -= n;
  h->tier[hd] = 0;
  h->c.releases++;
  return 0;
}
HOST_LOCKED(host_release, (void *ctx, pt_bk_handle hd), (ctx, hd))

static int host_map_unlocked(void *ctx, uintptr_t va, size_t size, pt_bk_handle hd) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_MAP)) return h->fail_err[PT_HOST_OP_MAP];
  /* Like the driver: a handle is mapped whole, once at a time. */
  if (!host_handle_ok(h, hd) || h->mapped_va[hd] || !va || va % h->gran || size != h->len[hd] * h->gran)
    return PT_HOST_ERR_INVALID;
  /* Inaccessible until set_access, like a fresh cuMemMap. */
  void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, h->fd,
                 (off_t)(hd * h->gran));
  if (p == MAP_FAILED) return PT_HOST_ERR_SYSTEM;
  h->mapped_va[hd] = va;
  h->c.mapped_granules += h->len[hd];
  h->c.maps++;
  return 0;
}
HOST_LOCKED(host_map, (void *ctx, uintptr_t va, size_t size, pt_bk_handle hd), (ctx, va, size, hd))

/* Finding the handles mapped in the range is a scan over all slots: unmap is
 * a slow path (stitch, trim, destroy) and the host backend is for tests. Like
 * the driver, the range must cover whole mappings: one that sticks out of it
 * fails the call before anything is unmapped. */
static int host_unmap_unlocked(void *ctx, uintptr_t va, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_UNMAP)) return h->fail_err[PT_HOST_OP_UNMAP];
  if (va % h->gran || size % h->gran) return PT_HOST_ERR_INVALID;
  for (uint64_t i = 0; i < h->nslots; i++) {
    uintptr_t a = h->mapped_va[i], e = a + h->len[i] * h->gran;
    if (a && a < va + size && e > va && (a < va || e > va + size)) return PT_HOST_ERR_INVALID;
  }
  void *p = mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
  if (p == MAP_FAILED) return PT_HOST_ERR_SYSTEM;
  for (uint64_t i = 0; i < h->nslots; i++)
    if (h->mapped_va[i] >= va && h->mapped_va[i] < va + size) {
      h->mapped_va[i] = 0;
      h->c.mapped_granules -= h->len[i];
    }
  h->c.unmaps++;
  return 0;
}
HOST_LOCKED(host_unmap, (void *ctx, uintptr_t va, size_t size), (ctx, va, size))

static int host_set_access_unlocked(void *ctx, uintptr_t va, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_SET_ACCESS)) return h->fail_err[PT_HOST_OP_SET_ACCESS];
  if (mprotect((void *)va, size, PROT_READ | PROT_WRITE)) return PT_HOST_ERR_INVALID;
  return 0;
}
HOST_LOCKED(host_set_access, (void *ctx, uintptr_t va, size_t size), (ctx, va, size))

static int host_marker_create(void *ctx, pt_bk_marker *m) {
  struct host_ctx *h = ctx;
  for (uint64_t i = 0; i < h->nmarkers; i++)
    if (!h->markers[i].live) {
      h->markers[i] = (struct host_marker){.live = true};
      h->c.live_markers++;
      *m = i;
      return 0;
    }
  struct host_marker *n = realloc(h->markers, (h->nmarkers + 16) * sizeof *n);
  if (!n) return PT_HOST_ERR_OOM;
  memset(n + h->nmarkers, 0, 16 * sizeof *n);
  h->markers = n;
  h->nmarkers += 16;
  return host_marker_create(ctx, m);
}

static struct host_marker *host_mk(struct host_ctx *h, pt_bk_marker m) {
  return m < h->nmarkers && h->markers[m].live ? &h->markers[m] : NULL;
}

static int host_marker_destroy(void *ctx, pt_bk_marker m) {
  struct host_ctx *h = ctx;
  struct host_marker *k = host_mk(h, m);
  if (!k) return PT_HOST_ERR_INVALID;
  k->live = false;
  h->c.live_markers--;
  return 0;
}

static int host_marker_record(void *ctx, pt_bk_marker m, pt_bk_stream s) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_RECORD)) return h->fail_err[PT_HOST_OP_RECORD];
  struct host_marker *k = host_mk(h, m);
  if (!k) return PT_HOST_ERR_INVALID;
  k->stream = s;
  k->seq = ++h->c.record_seq;
  k->pending = h->hold;
  h->c.records++;
  return 0;
}

static int host_marker_query(void *ctx, pt_bk_marker m) {
  struct host_ctx *h = ctx;
  struct host_marker *k = host_mk(h, m);
  if (!k) return PT_HOST_ERR_INVALID;
  return k->pending ? PT_HOST_ERR_NOT_READY : 0;
}

static int host_marker_sync(void *ctx, pt_bk_marker m) {
  struct host_ctx *h = ctx;
  struct host_marker *k = host_mk(h, m);
  if (!k) return PT_HOST_ERR_INVALID;
  k->pending = false;
  h->c.marker_syncs++;
  return 0;
}

static int host_stream_wait(void *ctx, pt_bk_stream s, pt_bk_marker m) {
  struct host_ctx *h = ctx;
  struct host_marker *k = host_mk(h, m);
  if (!k) return PT_HOST_ERR_INVALID;
  h->c.waits++;
  h->c.last_wait_stream = s;
  h->c.last_wait_marker_stream = k->stream;
  h->c.last_wait_record_seq = k->seq;
  return 0;
}

static int host_device_sync(void *ctx) {
  struct host_ctx *h = ctx;
  pt_backend_host_complete_markers(&(struct pt_backend){.ctx = h});
  h->c.device_syncs++;
  return 0;
}

static void host_destroy(void *ctx) {
  struct host_ctx *h = ctx;
  if (h->fd >= 0) close(h->fd);
  free(h->in_use);
  free(h->mapped_va);
  free(h->len);
  free(h->tier);
  free(h->markers);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

/* No other process's memory here: every import op is refused, touching
 * nothing (IPC import is the VMM backend's). */
static int host_import_reserve(void *ctx, size_t size, size_t align, uintptr_t *va) {
  (void)ctx, (void)size, (void)align, (void)va;
  return PT_HOST_ERR_INVALID;
}
static int host_import_map(void *ctx, int fd, uintptr_t va, size_t size, int *owner) {
  (void)ctx, (void)fd, (void)va, (void)size, (void)owner;
  return PT_HOST_ERR_INVALID;
}
static int host_import_access(void *ctx, uintptr_t va, size_t size, const int *devices, int n) {
  (void)ctx, (void)va, (void)size, (void)devices, (void)n;
  return PT_HOST_ERR_INVALID;
}
static int host_import_unmap(void *ctx, uintptr_t va, size_t mapped, size_t size) {
  (void)ctx, (void)va, (void)mapped, (void)size;
  return PT_HOST_ERR_INVALID;
}

/* A sleeping pool's bytes: plain heap memory here (page-locked memory is the
 * VMM backend's business); copies are memcpy over the mapped range. A header
 * before each buffer keeps the size and kind it was allocated with, so that
 * tests see a host_free that names others (host_free_mismatch). */
struct host_buf_hdr {
  size_t size;
  int how;
} __attribute__((aligned(16)));

static int host_host_alloc_unlocked(void *ctx, size_t size, int how, void **p) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_HOST_ALLOC)) return h->fail_err[PT_HOST_OP_HOST_ALLOC];
  if (how != PT_HOST_BUF_PINNED && how != PT_HOST_BUF_REGISTERED && how != PT_HOST_BUF_FAULTED)
    return PT_HOST_ERR_INVALID;
  struct host_buf_hdr *b = malloc(sizeof *b + (size ? size : 1));
  if (!b) return PT_HOST_ERR_OOM;
  *b = (struct host_buf_hdr){.size = size, .how = how};
  *p = b + 1;
  h->c.host_bytes += size;
  h->c.host_allocs++;
  if (how == PT_HOST_BUF_REGISTERED) h->c.host_registered++;
  return 0;
}
HOST_LOCKED(host_host_alloc, (void *ctx, size_t size, int how, void **p), (ctx, size, how, p))
/* A FAULTED buffer becomes REGISTERED; anything else is a caller's error. */
static int host_host_lock_unlocked(void *ctx, void *p, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_HOST_LOCK)) return h->fail_err[PT_HOST_OP_HOST_LOCK];
  if (!p) return PT_HOST_ERR_INVALID;
  struct host_buf_hdr *b = (struct host_buf_hdr *)p - 1;
  if (b->how != PT_HOST_BUF_FAULTED || b->size != size) return PT_HOST_ERR_INVALID;
  b->how = PT_HOST_BUF_REGISTERED;
  h->c.host_registered++;
  return 0;
}
HOST_LOCKED(host_host_lock, (void *ctx, void *p, size_t size), (ctx, p, size))
static int host_host_free(void *ctx, void *p, size_t size, int how) {
  struct host_ctx *h = ctx;
  if (!p) return PT_HOST_ERR_INVALID;
  struct host_buf_hdr *b = (struct host_buf_hdr *)p - 1;
  bool same = b->size == size && b->how == how;
  int kind = b->how;
  free(b);
  pthread_mutex_lock(&h->mu);
  h->c.host_allocs--;
  if (kind == PT_HOST_BUF_REGISTERED) h->c.host_registered--;
  if (!same) h->c.host_free_mismatch++;
  pthread_mutex_unlock(&h->mu);
  return 0;
}
static int host_copy_to_host_unlocked(void *ctx, void *dst, uintptr_t src, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_COPY)) return h->fail_err[PT_HOST_OP_COPY];
  memcpy(dst, (const void *)src, size);
  return 0;
}
HOST_LOCKED(host_copy_to_host, (void *ctx, void *dst, uintptr_t src, size_t size), (ctx, dst, src, size))
static int host_copy_to_device_unlocked(void *ctx, uintptr_t dst, const void *src, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_COPY)) return h->fail_err[PT_HOST_OP_COPY];
  memcpy((void *)dst, src, size);
  return 0;
}
HOST_LOCKED(host_copy_to_device, (void *ctx, uintptr_t dst, const void *src, size_t size), (ctx, dst, src, size))

static int host_copy_d2d_unlocked(void *ctx, uintptr_t dst, uintptr_t src, size_t size) {
  struct host_ctx *h = ctx;
  if (host_fault(h, PT_HOST_OP_COPY)) return h->fail_err[PT_HOST_OP_COPY];
  memmove((void *)dst, (const void *)src, size);
  return 0;
}
HOST_LOCKED(host_copy_d2d, (void *ctx, uintptr_t dst, uintptr_t src, size_t size), (ctx, dst, src, size))

/* Known only for a device of max_granules. */
static int host_device_free_unlocked(void *ctx, uint64_t *bytes) {
  struct host_ctx *h = ctx;
  if (!h->max_granules) return PT_HOST_ERR_INVALID;
  uint64_t used = h->other_granules + h->c.live_granules;
  *bytes = used < h->max_granules ? (h->max_granules - used) * h->gran : 0;
  return 0;
}
HOST_LOCKED(host_device_free, (void *ctx, uint64_t *bytes), (ctx, bytes))

static const struct pt_backend_ops host_ops = {
  .name = "host",
  .err_oom = PT_HOST_ERR_OOM,
  .err_not_ready = PT_HOST_ERR_NOT_READY,
  .err_invalid = PT_HOST_ERR_INVALID,
  .granularity = host_granularity,
  .reserve = host_reserve,
  .unreserve = host_unreserve,
  .create = host_create,
  .release = host_release,
  .map = host_map,
  .unmap = host_unmap,
  .set_access = host_set_access,
  .marker_create = host_marker_create,
  .marker_destroy = host_marker_destroy,
  .marker_record = host_marker_record,
  .marker_query = host_marker_query,
  .marker_sync = host_marker_sync,
  .stream_wait = host_stream_wait,
  .device_sync = host_device_sync,
  .destroy = host_destroy,
  .import_reserve = host_import_reserve,
  .import_map = host_import_map,
  .import_access = host_import_access,
  .import_unmap = host_import_unmap,
  .host_alloc = host_host_alloc,
  .host_free = host_host_free,
  .copy_to_host = host_copy_to_host,
  .copy_to_device = host_copy_to_device,
  .host_lock = host_host_lock,
  .create_host = host_create_host,
  .copy_d2d = host_copy_d2d,
  .device_free = host_device_free,
};

int pt_backend_host_create(struct pt_backend *out, size_t granule, uint64_t max_granules) {
  long page = sysconf(_SC_PAGESIZE);
  if (!granule) granule = (size_t)2 << 20;
  if (page <= 0 || granule % (size_t)page) return PT_HOST_ERR_INVALID;
  struct host_ctx *h = calloc(1, sizeof *h);
  if (!h) return PT_HOST_ERR_OOM;
  h->fd = memfd_create("ponytail-host-backend", MFD_CLOEXEC);
  if (h->fd < 0) {
    free(h);
    return PT_HOST_ERR_SYSTEM;
  }
  h->gran = granule;
  h->max_granules = max_granules;
  pthread_mutex_init(&h->mu, NULL);
  out->ops = &host_ops;
  out->ctx = h;
  return 0;
}

void pt_backend_host_fail_at(struct pt_backend *bk, enum pt_host_op op, unsigned nth, int err) {
  struct host_ctx *h = bk->ctx;
  h->fail_at[op] = nth;
  h->fail_err[op] = err;
}

void pt_backend_host_hold_markers(struct pt_backend *bk, bool hold) {
  ((struct host_ctx *)bk->ctx)->hold = hold;
}

void pt_backend_host_complete_markers(struct pt_backend *bk) {
  struct host_ctx *h = bk->ctx;
  for (uint64_t i = 0; i < h->nmarkers; i++) h->markers[i].pending = false;
}

void pt_backend_host_counters(struct pt_backend *bk, struct pt_host_counters *out) {
  *out = ((struct host_ctx *)bk->ctx)->c;
}

void pt_backend_host_tier_cap(struct pt_backend *bk, uint64_t max_granules) {
  ((struct host_ctx *)bk->ctx)->max_tier_granules = max_granules;
}

void pt_backend_host_others(struct pt_backend *bk, uint64_t granules) {
  struct host_ctx *h = bk->ctx;
  pthread_mutex_lock(&h->mu);
  h->other_granules = granules;
  pthread_mutex_unlock(&h->mu);
}
