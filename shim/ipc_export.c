/* CUDA IPC of pooled memory, the exporter: Ponytail's handles of pooled
 * blocks, their records, and the thread that serves the handles'
 * descriptors. The scheme and its limits: ipc_internal.h. */
#include "shim/ipc_internal.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "allocator/pool_ipc.h"
#include "common/log.h"
#include "common/thread.h"

/* ---- exporter: records and the server thread ----------------------------- */

struct ipc_rec {
  uintptr_t start; /* 0: free slot */
  uint64_t size, nonce, ngran;
  struct pt_pool *pool;
};

static struct {
  pthread_mutex_t mu;
  struct ipc_rec *rec;
  uint32_t n, cap;
  int nlive;        /* atomic: records in use, read without the lock on frees */
  int lfd;          /* listening socket, -1 none */
  pid_t server_pid; /* the process whose thread serves lfd */
  uint64_t seq;
} X = {.mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1};

static int send_rep(int c, int32_t status, uint32_t total, uint32_t first, uint32_t count, const int *fds,
                    const uint32_t *lens) {
  struct ipc_rep r = {status, total, first, count, {0}};
  for (uint32_t i = 0; i < count; i++) r.lens[i] = (uint16_t)lens[i];
  struct iovec io = {&r, sizeof r};
  union {
    char buf[CMSG_SPACE(sizeof(int) * IPC_CHUNK)];
    struct cmsghdr align;
  } u;
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
  if (count) {
    memset(&u, 0, sizeof u);
    m.msg_control = u.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * count);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * count);
  }
  ssize_t n;
  do n = sendmsg(c, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof r ? 0 : -1;
}

static bool rec_get(uint32_t id, uint64_t nonce, struct ipc_rec *out) {
  bool ok = false;
  pthread_mutex_lock(&X.mu);
  if (id >= 1 && id <= X.n && X.rec[id - 1].start && X.rec[id - 1].nonce == nonce) {
    *out = X.rec[id - 1];
    ok = true;
  }
  pthread_mutex_unlock(&X.mu);
  return ok;
}

/* One request: (id, nonce) in, the record's granule descriptors out. */
static void serve(int c) {
  set_timeouts(c);
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != geteuid()) {
    PT_LOG_ONCE(PT_LOG_WARN, "IPC: refused a request from another user (uid %u)", (unsigned)cr.uid);
    (void)send_rep(c, CUDA_ERROR_INVALID_HANDLE, 0, 0, 0, NULL, NULL);
    return;
  }
  struct ipc_req q;
  ssize_t n;
  do n = recv(c, &q, sizeof q, 0);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof q || q.magic != IPC_MAGIC) return;
  struct ipc_rec r;
  if (!rec_get(q.id, q.nonce, &r)) {
    PT_LOG_ONCE(PT_LOG_WARN,
                "IPC: process %d asked for export %u, which is not live here (freed before it was opened?)",
                (int)cr.pid, q.id);
    (void)send_rep(c, CUDA_ERROR_INVALID_HANDLE, 0, 0, 0, NULL, NULL);
    return;
  }
  int fds[IPC_CHUNK];
  uint32_t lens[IPC_CHUNK];
  for (uint64_t first = 0; first < r.ngran;) {
    uint32_t cnt = 0;
    int rc = pt_pool_export(r.pool, r.start, r.size, first, IPC_CHUNK, fds, lens, &cnt);
    if (rc || !cnt) {
      PT_LOG_ONCE(PT_LOG_WARN, "IPC: exporting the memory of block %#lx failed with CUDA error %d",
                  (unsigned long)r.start, rc);
      (void)send_rep(c, rc ? rc : CUDA_ERROR_INVALID_HANDLE, 0, 0, 0, NULL, NULL);
      return;
    }
    int sr = send_rep(c, 0, (uint32_t)r.ngran, (uint32_t)first, cnt, fds, lens);
    for (uint32_t i = 0; i < cnt; i++) {
      close(fds[i]);
      first += lens[i];
    }
    if (sr) return;
  }
}

static void *server_main(void *arg) {
  int ls = (int)(intptr_t)arg;
  for (;;) {
    int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
      serve(c);
      close(c);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
      PT_LOG_ONCE(PT_LOG_WARN, "IPC server: accept failed (%s); retrying", strerror(errno));
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    PT_LOG_ONCE(PT_LOG_WARN, "IPC server: accept failed (%s); exported handles can no longer be opened",
                strerror(errno));
    return NULL;
  }
}

/* Under X.mu. 0 when this process serves its socket. */
static int ensure_server(void) {
  pid_t me = getpid();
  if (X.server_pid == me && X.lfd >= 0) return 0;
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_un a;
  socklen_t al = sock_name((uint32_t)me, &a);
  if (bind(s, (struct sockaddr *)&a, al) || listen(s, 64)) {
    pt_warn("IPC: cannot listen on the abstract socket \"ponytail-ipc-%d\" (%s): pooled memory cannot be exported",
            (int)me, strerror(errno));
    close(s);
    return -1;
  }
  int e = pt_thread_start(server_main, (void *)(intptr_t)s);
  if (e) {
    pt_warn("IPC: cannot start the export thread (%s): pooled memory cannot be exported", strerror(e));
    close(s);
    return -1;
  }
  X.lfd = s;
  X.server_pid = me;
  return 0;
}

static uint64_t new_nonce(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
    /* No entropy yet (early boot): unique, if guessable. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40) ^ ++X.seq;
  }
  return v ? v : 1;
}

/* Under X.mu: the id of a record for the block, new or existing. 0: no memory. */
static uint32_t rec_put(struct pt_pool *pool, const struct pt_pool_block_info *bi, uint64_t *nonce) {
  uint32_t freei = UINT32_MAX;
  for (uint32_t i = 0; i < X.n; i++) {
    if (X.rec[i].start == bi->start && X.rec[i].pool == pool && X.rec[i].size == bi->size) {
      *nonce = X.rec[i].nonce;
      return i + 1;
    }
    if (!X.rec[i].start && freei == UINT32_MAX) freei = i;
  }
  if (freei == UINT32_MAX) {
    if (X.n == X.cap) {
      uint32_t cap = X.cap ? X.cap * 2 : 16;
      struct ipc_rec *r = realloc(X.rec, cap * sizeof *r);
      if (!r) return 0;
      X.rec = r;
      X.cap = cap;
    }
    freei = X.n++;
  }
  X.rec[freei] = (struct ipc_rec){bi->start, bi->size, new_nonce(), bi->ngran, pool};
  __atomic_add_fetch(&X.nlive, 1, __ATOMIC_RELEASE);
  *nonce = X.rec[freei].nonce;
  return freei + 1;
}

bool pt_ipc_handle_ours(const void *handle) {
  struct ipc_wire w;
  memcpy(&w, handle, sizeof w);
  return w.magic == IPC_MAGIC && w.version == IPC_VERSION;
}

int pt_ipc_export(struct pt_pool *pool, int device, const void *ptr, void *handle) {
  struct pt_pool_block_info bi;
  if (pt_pool_block_info(pool, ptr, &bi)) {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcGetMemHandle(%p): inside the pool but in no live block", ptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bi.ngran > IPC_MAX_GRAN) return CUDA_ERROR_INVALID_VALUE;
  /* Fail here, where the caller can see why, not later in the importer. */
  int fd = -1;
  uint32_t len = 0, cnt = 0;
  int rc = pt_pool_export(pool, bi.start, bi.size, 0, 1, &fd, &len, &cnt);
  if (rc) {
    PT_LOG_ONCE(PT_LOG_WARN,
                "cudaIpcGetMemHandle(%p): the pool's memory cannot be exported (CUDA error %d); "
                "PONYTAIL_IPC=fd needs POSIX file descriptor handles. Run with PONYTAIL_POOL=0, or "
                "PONYTAIL_KV_MIN above the size of the shared buffers",
                ptr, rc);
    return rc;
  }
  close(fd);
  uint64_t nonce = 0;
  uint32_t id = 0;
  pthread_mutex_lock(&X.mu);
  if (ensure_server() == 0) id = rec_put(pool, &bi, &nonce);
  pthread_mutex_unlock(&X.mu);
  if (!id) {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcGetMemHandle(%p): no export server or record (see above)", ptr);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  struct ipc_wire w = {.magic = IPC_MAGIC,
                       .version = IPC_VERSION,
                       .pid = (uint32_t)getpid(),
                       .id = id,
                       .nonce = nonce,
                       .offset = bi.offset,
                       .size = bi.size,
                       .gran = bi.gran,
                       .ngran = (uint32_t)bi.ngran,
                       .device = device};
  memcpy(handle, &w, sizeof w);
  return 0;
}

uint64_t pt_ipc_live_exports(void) { return (uint64_t)__atomic_load_n(&X.nlive, __ATOMIC_ACQUIRE); }

void pt_ipc_block_freed(const void *start) {
  if (!start || !__atomic_load_n(&X.nlive, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&X.mu);
  for (uint32_t i = 0; i < X.n; i++)
    if (X.rec[i].start == (uintptr_t)start) {
      X.rec[i].start = 0;
      __atomic_sub_fetch(&X.nlive, 1, __ATOMIC_RELEASE);
    }
  pthread_mutex_unlock(&X.mu);
}

void pt_ipc_atfork_child(void) {
  /* Another thread may have held a lock at fork; the server thread did not
   * survive it and its socket belongs to the parent. */
  pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
  X.mu = init;
  pt_ipc_import_atfork_child();
  if (X.lfd >= 0) close(X.lfd);
  X.lfd = -1;
  X.server_pid = 0;
  for (uint32_t i = 0; i < X.n; i++) X.rec[i].start = 0;
  __atomic_store_n(&X.nlive, 0, __ATOMIC_RELAXED);
}
