/* CUPTI kernel activity tracing for `ponytail trace` (see shim/cupti.h).
 *
 * libcupti is dlopen'ed at run time: the shim links no CUDA library, and the
 * CUPTI that matches the process's CUDA is usually the one next to its
 * libcudart (PyTorch wheels: site-packages/nvidia/cu13/lib). Records are
 * written as they arrive (CUPTI hands over full buffers from its own thread),
 * so memory stays bounded however long the run. Output format: see
 * tools/lib/trace_report.h. Every failure is logged, noted in the file as an
 * "E <reason>" line (the CLI reports it) and leaves the host process alone. */
#include "shim/cupti.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/options.h"

#if defined(__has_include)
#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define PT_HAVE_CUPTI_H 1
#endif
#endif

#ifdef PT_HAVE_CUPTI_H
/* The fields read below sit at the same offsets in every kernel record
 * version since CUpti_ActivityKernel4 (CUPTI appends new fields), so a record
 * from an older or newer libcupti than this header reads correctly. */
typedef CUpti_ActivityKernel10 pt_cupti_kernel_rec;
_Static_assert(offsetof(CUpti_ActivityKernel10, start) == 16, "CUPTI kernel record layout changed");
_Static_assert(offsetof(CUpti_ActivityKernel10, end) == 24, "CUPTI kernel record layout changed");
_Static_assert(offsetof(CUpti_ActivityKernel10, streamId) == 48, "CUPTI kernel record layout changed");
_Static_assert(offsetof(CUpti_ActivityKernel10, name) == 104, "CUPTI kernel record layout changed");
typedef CUpti_Activity pt_cupti_activity;
#define PT_KIND_KERNEL CUPTI_ACTIVITY_KIND_KERNEL
#define PT_KIND_CONCURRENT_KERNEL CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
#define PT_CUPTI_SUCCESS CUPTI_SUCCESS
#define PT_CUPTI_MAX_LIMIT_REACHED CUPTI_ERROR_MAX_LIMIT_REACHED
#define PT_CUPTI_FLUSH_FORCED CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
typedef CUptiResult pt_cupti_result;
typedef CUpti_ActivityKind pt_cupti_kind;
typedef CUcontext pt_cucontext;
#else
/* No CUPTI header at build time: the documented, stable prefix of the kernel
 * record and the few enum values used. */
typedef struct {
  uint32_t kind;
  uint8_t pad0[12];
  uint64_t start, end, completed;
  uint32_t deviceId, contextId, streamId;
  uint8_t pad1[44];
  const char *name;
} pt_cupti_kernel_rec;
typedef struct {
  uint32_t kind;
} pt_cupti_activity;
#define PT_KIND_KERNEL 3
#define PT_KIND_CONCURRENT_KERNEL 10
#define PT_CUPTI_SUCCESS 0
#define PT_CUPTI_MAX_LIMIT_REACHED 12
#define PT_CUPTI_FLUSH_FORCED 1
typedef int pt_cupti_result;
typedef int pt_cupti_kind;
typedef void *pt_cucontext;
_Static_assert(offsetof(pt_cupti_kernel_rec, streamId) == 48, "kernel record prefix");
_Static_assert(offsetof(pt_cupti_kernel_rec, name) == 104, "kernel record prefix");
#endif

typedef void (*pt_buf_req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*pt_buf_done_fn)(pt_cucontext, uint32_t, uint8_t *, size_t, size_t);

static struct {
  pt_cupti_result (*enable)(pt_cupti_kind);
  pt_cupti_result (*disable)(pt_cupti_kind);
  pt_cupti_result (*register_callbacks)(pt_buf_req_fn, pt_buf_done_fn);
  pt_cupti_result (*flush_all)(uint32_t);
  pt_cupti_result (*next_record)(uint8_t *, size_t, pt_cupti_activity **);
  pt_cupti_result (*result_string)(pt_cupti_result, const char **);
  pt_cupti_result (*timestamp)(uint64_t *);                                   /* optional */
  pt_cupti_result (*dropped)(pt_cucontext, uint32_t, size_t *);               /* optional */
} pt_cupti;

#define PT_CUPTI_BUF_SIZE (8u << 20)
#define PT_CUPTI_ALIGN 8

/* Output: raw write(2) through our own buffer, not stdio, so a child forked
 * without exec never flushes a copy of the parent's pending lines. */
static pthread_mutex_t pt_cupti_mu = PTHREAD_MUTEX_INITIALIZER;
static int pt_cupti_fd = -1;
static pid_t pt_cupti_pid;
static pt_cupti_kind pt_cupti_kind_on;
static uint64_t pt_cupti_records, pt_cupti_dropped;
static char pt_cupti_out[64 * 1024];
static size_t pt_cupti_used;

static void pt_cupti_flush_locked(void) {
  size_t off = 0;
  while (off < pt_cupti_used && pt_cupti_fd >= 0) {
    ssize_t n = write(pt_cupti_fd, pt_cupti_out + off, pt_cupti_used - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      PT_LOG_ONCE(PT_LOG_WARN, "cupti: writing the records file failed: %s", strerror(errno));
      break;
    }
    off += (size_t)n;
  }
  pt_cupti_used = 0;
}

/* Appends one formatted line (truncated to the buffer if absurdly long). */
static void pt_cupti_line_locked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pt_cupti_line_locked(const char *fmt, ...) {
  if (pt_cupti_fd < 0) return;
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) {
    n = (int)sizeof line - 1;
    line[n - 1] = '\n';
  }
  if (pt_cupti_used + (size_t)n > sizeof pt_cupti_out) pt_cupti_flush_locked();
  memcpy(pt_cupti_out + pt_cupti_used, line, (size_t)n);
  pt_cupti_used += (size_t)n;
}

static const char *pt_cupti_errstr(pt_cupti_result r) {
  const char *s = NULL;
  if (pt_cupti.result_string && pt_cupti.result_string(r, &s) == PT_CUPTI_SUCCESS && s) return s;
  return "unknown CUPTI error";
}

/* Records the failure in the file (for the CLI) and the log. */
static void pt_cupti_fail(const char *what, const char *detail) {
  pt_warn("cupti: %s%s%s; no kernel activity will be recorded", what, detail ? ": " : "", detail ? detail : "");
  pthread_mutex_lock(&pt_cupti_mu);
  pt_cupti_line_locked("E %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  pt_cupti_flush_locked();
  pthread_mutex_unlock(&pt_cupti_mu);
}

/* The final flush must run while the CUDA runtime still stands. The shim's
 * own exit handler is registered at load, before the runtime (and torch)
 * register theirs, so it runs after their teardown; flushing CUPTI then can
 * crash inside CUPTI (seen on the H200 with torch 2.11: a SIGSEGV at exit
 * after a padded Hugging Face run). CUPTI asks for its first buffer when the
 * first kernel is traced, i.e. after the runtime has initialised: a handler
 * registered then runs before the runtime's teardown. pt_cupti_stop() is
 * idempotent, so the shim's late call does nothing afterwards. */
static void pt_cupti_atexit(void) { pt_cupti_stop(); }

static void pt_cupti_buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  static int exit_hooked;
  if (!__atomic_exchange_n(&exit_hooked, 1, __ATOMIC_ACQ_REL) && atexit(pt_cupti_atexit) != 0)
    PT_LOG_ONCE(PT_LOG_WARN, "cupti: atexit failed: the records are flushed at the shim's own exit");
  void *p = NULL;
  if (posix_memalign(&p, PT_CUPTI_ALIGN, PT_CUPTI_BUF_SIZE) != 0) p = NULL;
  if (!p) PT_LOG_ONCE(PT_LOG_WARN, "cupti: out of memory for an activity buffer; records are dropped");
  *buffer = p;
  *size = p ? PT_CUPTI_BUF_SIZE : 0;
  *max_records = 0; /* as many as fit */
}

static void pt_cupti_buf_completed(pt_cucontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                   size_t valid) {
  (void)size;
  pthread_mutex_lock(&pt_cupti_mu);
  if (buffer && valid && pt_cupti_fd >= 0 && getpid() == pt_cupti_pid) {
    pt_cupti_activity *rec = NULL;
    for (;;) {
      pt_cupti_result r = pt_cupti.next_record(buffer, valid, &rec);
      if (r != PT_CUPTI_SUCCESS) {
        if (r != PT_CUPTI_MAX_LIMIT_REACHED)
          PT_LOG_ONCE(PT_LOG_WARN, "cupti: reading a record failed: %s", pt_cupti_errstr(r));
        break;
      }
      if (rec->kind != PT_KIND_KERNEL && rec->kind != PT_KIND_CONCURRENT_KERNEL) continue;
      const pt_cupti_kernel_rec *k = (const pt_cupti_kernel_rec *)(const void *)rec;
      pt_cupti_line_locked("K %" PRIu64 " %" PRIu64 " %" PRIu32 " %s\n", (uint64_t)k->start,
                           (uint64_t)k->end, (uint32_t)k->streamId, k->name ? k->name : "(unnamed)");
      pt_cupti_records++;
    }
    size_t dropped = 0;
    if (pt_cupti.dropped && pt_cupti.dropped(ctx, stream, &dropped) == PT_CUPTI_SUCCESS)
      pt_cupti_dropped += dropped;
  }
  pthread_mutex_unlock(&pt_cupti_mu);
  free(buffer);
}

/* The directory of the libcudart this process loaded, if any. */
static int pt_cupti_cudart_dir_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  (void)sz;
  const char *name = info->dlpi_name;
  const char *slash = name ? strrchr(name, '/') : NULL;
  if (!slash || strncmp(slash + 1, "libcudart.so", 12)) return 0;
  snprintf((char *)data, PATH_MAX, "%.*s", (int)(slash - name), name);
  return 1;
}

static void *pt_cupti_open(char *loaded, size_t len) {
  static const char *const names[] = {"libcupti.so.13", "libcupti.so"};
  for (size_t i = 0; i < 2; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(loaded, len, "%s", names[i]);
      return h;
    }
  }
  char dir[PATH_MAX] = "";
  const char *dirs[3] = {NULL, "/usr/local/cuda/lib64", "/usr/local/cuda/extras/CUPTI/lib64"};
  if (dl_iterate_phdr(pt_cupti_cudart_dir_cb, dir) && dir[0]) dirs[0] = dir;
  for (size_t d = 0; d < 3; d++) {
    if (!dirs[d]) continue;
    for (size_t i = 0; i < 2; i++) {
      char path[PATH_MAX + 32];
      snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) {
        snprintf(loaded, len, "%s", path);
        return h;
      }
    }
  }
  return NULL;
}

/* PONYTAIL_CUPTI with %p replaced by the pid. */
static int pt_cupti_path(char *out, size_t len) {
  if (pt_path_expand(pt_opt_str(PT_OPT_CUPTI), out, len) != 0) return -1;
  return out[0] ? 0 : -1;
}

void pt_cupti_start(void) {
  char path[PATH_MAX];
  if (pt_cupti_path(path, sizeof path) != 0) {
    pt_warn("cupti: PONYTAIL_CUPTI is empty or too long; not tracing");
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    pt_warn("cupti: cannot open %s: %s; not tracing", path, strerror(errno));
    return;
  }
  pthread_mutex_lock(&pt_cupti_mu);
  pt_cupti_fd = fd;
  pt_cupti_pid = getpid();
  pt_cupti_line_locked("# ponytail-cupti 1 pid=%ld\n", (long)pt_cupti_pid);
  pt_cupti_flush_locked();
  pthread_mutex_unlock(&pt_cupti_mu);

  char lib[PATH_MAX + 32] = "";
  void *h = pt_cupti_open(lib, sizeof lib);
  if (!h) {
    pt_cupti_fail("libcupti not found", "tried libcupti.so.13, libcupti.so, next to libcudart, /usr/local/cuda");
    return;
  }
#define PT_CUPTI_SYM(member, name) *(void **)&pt_cupti.member = dlsym(h, name)
  PT_CUPTI_SYM(enable, "cuptiActivityEnable");
  PT_CUPTI_SYM(disable, "cuptiActivityDisable");
  PT_CUPTI_SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
  PT_CUPTI_SYM(flush_all, "cuptiActivityFlushAll");
  PT_CUPTI_SYM(next_record, "cuptiActivityGetNextRecord");
  PT_CUPTI_SYM(result_string, "cuptiGetResultString");
  PT_CUPTI_SYM(timestamp, "cuptiGetTimestamp");
  PT_CUPTI_SYM(dropped, "cuptiActivityGetNumDroppedRecords");
#undef PT_CUPTI_SYM
  if (!pt_cupti.enable || !pt_cupti.register_callbacks || !pt_cupti.flush_all || !pt_cupti.next_record) {
    memset(&pt_cupti, 0, sizeof pt_cupti);
    pt_cupti_fail("libcupti lacks the activity API", lib);
    return;
  }
  uint64_t t0 = 0;
  if (pt_cupti.timestamp && pt_cupti.timestamp(&t0) != PT_CUPTI_SUCCESS) t0 = 0;
  pt_cupti_result r = pt_cupti.register_callbacks(pt_cupti_buf_requested, pt_cupti_buf_completed);
  if (r != PT_CUPTI_SUCCESS) {
    pt_cupti_fail("cuptiActivityRegisterCallbacks failed", pt_cupti_errstr(r));
    memset(&pt_cupti, 0, sizeof pt_cupti);
    return;
  }
  pt_cupti_kind kind = PT_KIND_CONCURRENT_KERNEL;
  r = pt_cupti.enable(kind);
  if (r != PT_CUPTI_SUCCESS) {
    pt_cupti_result r2 = pt_cupti.enable(PT_KIND_KERNEL);
    if (r2 != PT_CUPTI_SUCCESS) {
      pt_cupti_fail("cuptiActivityEnable(CONCURRENT_KERNEL and KERNEL) failed", pt_cupti_errstr(r));
      memset(&pt_cupti, 0, sizeof pt_cupti);
      return;
    }
    kind = PT_KIND_KERNEL; /* serialises kernels: times are still right, overlap is lost */
  }
  pthread_mutex_lock(&pt_cupti_mu);
  pt_cupti_kind_on = kind;
  pt_cupti_line_locked("# start start_ns=%" PRIu64 " kind=%s lib=%s\n", t0,
                       kind == PT_KIND_KERNEL ? "kernel" : "concurrent_kernel", lib);
  pt_cupti_flush_locked();
  pthread_mutex_unlock(&pt_cupti_mu);
  pt_info("cupti: tracing kernel activity to %s (%s)", path, lib);
}

void pt_cupti_stop(void) {
  /* Only the process that started tracing owns the file (not a forked child). */
  if (pt_cupti_fd < 0 || getpid() != pt_cupti_pid) return;
  if (pt_cupti.flush_all) {
    /* Forced: also hand over records of buffers that are not full yet. */
    pt_cupti_result r = pt_cupti.flush_all(PT_CUPTI_FLUSH_FORCED);
    if (r != PT_CUPTI_SUCCESS) pt_warn("cupti: flushing activity failed: %s", pt_cupti_errstr(r));
    if (pt_cupti.disable) pt_cupti.disable(pt_cupti_kind_on);
  }
  uint64_t t1 = 0;
  if (pt_cupti.timestamp && pt_cupti.timestamp(&t1) != PT_CUPTI_SUCCESS) t1 = 0;
  pthread_mutex_lock(&pt_cupti_mu);
  if (pt_cupti.flush_all)
    pt_cupti_line_locked("# end stop_ns=%" PRIu64 " records=%" PRIu64 " dropped=%" PRIu64 "\n", t1,
                         pt_cupti_records, pt_cupti_dropped);
  pt_cupti_flush_locked();
  close(pt_cupti_fd);
  pt_cupti_fd = -1; /* late buffers are freed without writing */
  pthread_mutex_unlock(&pt_cupti_mu);
  pt_info("cupti: %" PRIu64 " kernel records written", pt_cupti_records);
}
