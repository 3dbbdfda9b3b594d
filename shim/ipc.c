/* CUDA IPC of pooled memory.
 *
 * Why not the driver's handle: cudaIpcGetMemHandle names a cudaMalloc
 * allocation; a pool block is VMM granules mapped by the shim, which the
 * legacy IPC cannot name. Instead every handle is created exportable (the
 * VMM backend asks for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR when
 * PONYTAIL_IPC=fd) and the 64-byte handle names a record in the exporter:
 *
 *   magic "PTIP", version, exporter pid, record id, 64-bit random nonce,
 *   block offset from its first physical handle, block size, granule size,
 *   granules of the handles under the block, exporter's device.
 *
 * The record (block start, size, nonce) lives while the block does; no
 * descriptor is held for it, so exported memory never outlives its block in
 * the exporter and no descriptor limit is reached by many exports. The
 * importer connects to the exporter's abstract Unix socket
 * "ponytail-ipc-<pid>", served by a thread the exporter starts at its first
 * export, sends (id, nonce), and receives the handles' descriptors, exported
 * on demand, with SCM_RIGHTS, IPC_CHUNK per message, each with its size in
 * granules (the pool's handles are 1 to 255 granules; the driver maps a handle
 * only whole). It imports each (cuMemImportFromShareableHandle), maps them in
 * order in a reserved range, drops the handles (the mappings keep the memory)
 * and the descriptors, and grants its device read/write. The block is at the
 * same offset from the range's start as from its first handle.
 *
 * Why a socket and not pidfd_getfd: pidfd_getfd needs ptrace rights over the
 * exporter, and Yama's default (ptrace_scope 1) grants them only to
 * ancestors, so a child could not take descriptors from the parent that
 * shares a tensor with it (torch.multiprocessing's usual direction). A
 * socket needs no privilege. Both ends check the peer (SO_PEERCRED: same
 * effective uid; the server must be the pid named in the handle, which also
 * defeats a squatter on the name) and the nonce (only holders of the handle
 * get descriptors).
 *
 * Limits: importer and exporter must share a network namespace (abstract
 * socket) and a pid namespace (credential check), and the importer must run
 * under the shim. The exporter must be alive when the handle is opened (the
 * mapping then lives on without it). Like CUDA's rule, the exporter must not
 * free the block while an importer has it open: the pool may reuse the
 * memory for a later block, which the importer would then see. The importer
 * maps whole handles, so neighbouring blocks in them are reachable too, as
 * the whole cudaMalloc allocation is with legacy IPC. */
#include "shim/ipc.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "allocator/pool_ipc.h"
#include "common/log.h"
#include "shim/real.h"

#define IPC_MAGIC 0x50544950u /* "PTIP" */
#define IPC_VERSION 2u /* 2: replies give each handle's granules */
#define IPC_CHUNK 250 /* descriptors per message: under the kernel's SCM_MAX_FD (253) */
#define IPC_MAX_GRAN (1u << 22)
#define IPC_TIMEOUT_S 10

struct ipc_wire {
  uint32_t magic;
  uint16_t version, reserved;
  uint32_t pid, id;
  uint64_t nonce, offset, size, gran;
  uint32_t ngran;
  int32_t device;
  uint64_t pad;
};
_Static_assert(sizeof(struct ipc_wire) == PT_IPC_HANDLE_SIZE, "the handle is 64 bytes");

struct ipc_req {
  uint32_t magic, id;
  uint64_t nonce;
};
struct ipc_rep {
  int32_t status; /* 0, or the CUDA error the exporter met */
  uint32_t total, first, count; /* granules in all; this message's first granule; descriptors */
  uint16_t lens[IPC_CHUNK];     /* granules of each descriptor's handle */
};

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

static socklen_t sock_name(uint32_t pid, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  /* sun_path[0] = 0: the abstract namespace, nothing on the filesystem. */
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ponytail-ipc-%u", pid);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void set_timeouts(int s) {
  struct timeval tv = {.tv_sec = IPC_TIMEOUT_S};
  (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

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
  /* The thread takes no signal meant for the application. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_attr_t at;
  pthread_t t;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(&t, &at, server_main, (void *)(intptr_t)s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&at);
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

/* ---- importer ------------------------------------------------------------ */

struct ipc_open {
  uintptr_t ptr, base;
  uint64_t len;
  uint32_t pid, id;
  uint64_t nonce;
  int refs;
  CUcontext ctx;
};
static struct {
  pthread_mutex_t mu;
  struct ipc_open *o;
  uint32_t n, cap;
} O = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Connected to the exporter named by w, peer checked; -1 and *err otherwise. */
static int dial(const struct ipc_wire *w, int *err) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *err = CUDA_ERROR_OPERATING_SYSTEM;
    return -1;
  }
  set_timeouts(s);
  struct sockaddr_un a;
  socklen_t al = sock_name(w->pid, &a);
  int r;
  do r = connect(s, (struct sockaddr *)&a, al);
  while (r && errno == EINTR);
  if (r) {
    PT_LOG_ONCE(PT_LOG_WARN,
                "cudaIpcOpenMemHandle: cannot reach the exporting process %u (%s): it has exited, runs in "
                "another network namespace, or is not under Ponytail",
                w->pid, strerror(errno));
    close(s);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return -1;
  }
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != geteuid() || (uint32_t)cr.pid != w->pid) {
    PT_LOG_ONCE(PT_LOG_WARN,
                "cudaIpcOpenMemHandle: the socket of process %u is served by pid %d uid %u, not by the exporter "
                "(same user and pid namespace needed): refused",
                w->pid, (int)cr.pid, (unsigned)cr.uid);
    close(s);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return -1;
  }
  return s;
}

/* Receives one reply; its descriptors go to fds (*nfds). -1 on a broken
 * exchange. */
static int recv_rep(int s, struct ipc_rep *rep, int *fds, uint32_t *nfds) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * IPC_CHUNK)];
    struct cmsghdr align;
  } u;
  struct iovec io = {rep, sizeof *rep};
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t n;
  do n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  *nfds = 0;
  for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; cm; cm = CMSG_NXTHDR(&m, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    uint32_t k = (uint32_t)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    if (*nfds + k > IPC_CHUNK) k = IPC_CHUNK - *nfds;
    memcpy(fds + *nfds, CMSG_DATA(cm), k * sizeof(int));
    *nfds += k;
  }
  if (n != (ssize_t)sizeof *rep || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) return -1;
  return 0;
}

/* Receives every handle of w and maps it at base (reserved, w->ngran
 * granules). *mapped: granules mapped so far (undone by the caller).
 * *owner: the device the memory lives on, in this process's numbering (the
 * exporter's ordinal may name another GPU here); -1 if the driver cannot say. */
static int fetch_map(int s, const struct ipc_wire *w, uintptr_t base, uint64_t *mapped, int *owner) {
  struct ipc_req q = {IPC_MAGIC, w->id, w->nonce};
  if (send(s, &q, sizeof q, MSG_NOSIGNAL) != (ssize_t)sizeof q) return CUDA_ERROR_INVALID_HANDLE;
  int fds[IPC_CHUNK];
  while (*mapped < w->ngran) {
    struct ipc_rep rep;
    uint32_t nf = 0;
    int rc = recv_rep(s, &rep, fds, &nf);
    if (!rc && rep.status) {
      PT_LOG_ONCE(PT_LOG_WARN,
                  "cudaIpcOpenMemHandle: process %u answered CUDA error %d (block freed there, or its export failed)",
                  w->pid, (int)rep.status);
      for (uint32_t i = 0; i < nf; i++) close(fds[i]);
      return rep.status;
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < nf && i < IPC_CHUNK; i++) sum += rep.lens[i] ? rep.lens[i] : (uint64_t)1 << 40;
    if (!rc && (rep.total != w->ngran || rep.first != *mapped || rep.count != nf || !nf ||
                sum > w->ngran - *mapped))
      rc = -1;
    for (uint32_t i = 0; i < nf; i++) {
      CUmemGenericAllocationHandle h = 0;
      if (!rc) rc = pt_drv.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[i],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (!rc && *owner < 0 && pt_drv.cuMemGetAllocationPropertiesFromHandle) {
        CUmemAllocationProp prop;
        if (pt_drv.cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS &&
            prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
          *owner = prop.location.id;
      }
      if (!rc) {
        rc = pt_drv.cuMemMap((CUdeviceptr)(base + *mapped * w->gran), rep.lens[i] * w->gran, 0, h, 0);
        /* The mapping keeps the memory: the handle is not needed after it. */
        (void)pt_drv.cuMemRelease(h);
        if (!rc) *mapped += rep.lens[i];
      }
      close(fds[i]);
    }
    if (rc) {
      if (rc == -1) {
        PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: broken reply from process %u", w->pid);
        return CUDA_ERROR_INVALID_HANDLE;
      }
      PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: importing the memory of process %u failed with CUDA error %d",
                  w->pid, rc);
      return rc;
    }
  }
  return 0;
}

static bool wire_sane(const struct ipc_wire *w) {
  return w->pid && w->id && w->gran && !(w->gran & (w->gran - 1)) && w->gran <= ((uint64_t)1 << 40) && w->ngran &&
         w->ngran <= IPC_MAX_GRAN && w->size && w->offset < (uint64_t)w->ngran * w->gran &&
         w->offset + w->size <= (uint64_t)w->ngran * w->gran;
}

static struct ipc_open *open_find_key(const struct ipc_wire *w) {
  for (uint32_t i = 0; i < O.n; i++)
    if (O.o[i].refs && O.o[i].pid == w->pid && O.o[i].id == w->id && O.o[i].nonce == w->nonce) return &O.o[i];
  return NULL;
}

/* Unmaps the first mapped_bytes of a range and frees all len bytes of VA. */
static void unmap_range(CUcontext ctx, uintptr_t base, uint64_t mapped_bytes, uint64_t len) {
  CUcontext old;
  bool pushed = ctx && pt_drv.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  if (mapped_bytes) (void)pt_drv.cuMemUnmap((CUdeviceptr)base, mapped_bytes);
  (void)pt_drv.cuMemAddressFree((CUdeviceptr)base, len);
  if (pushed) (void)pt_drv.cuCtxPopCurrent(&old);
}

int pt_ipc_open(const void *handle, void *ctx, int device, void **ptr) {
  struct ipc_wire w;
  memcpy(&w, handle, sizeof w);
  if (!ptr || !wire_sane(&w)) {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: a Ponytail handle with impossible fields: refused");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!pt_drv.cuMemImportFromShareableHandle || !pt_drv.cuMemAddressReserve || !pt_drv.cuMemMap ||
      !pt_drv.cuMemSetAccess || !pt_drv.cuCtxPushCurrent)
    return CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&O.mu);
  struct ipc_open *e = open_find_key(&w);
  if (e) {
    e->refs++;
    *ptr = (void *)e->ptr;
  }
  pthread_mutex_unlock(&O.mu);
  if (e) return 0;

  int err = 0;
  int s = dial(&w, &err);
  if (s < 0) return err;
  CUcontext c = ctx, old;
  uint64_t len = (uint64_t)w.ngran * w.gran, mapped = 0;
  CUdeviceptr base = 0;
  int rc = pt_drv.cuCtxPushCurrent(c);
  if (rc) {
    close(s);
    return rc;
  }
  rc = pt_drv.cuMemAddressReserve(&base, len, w.gran, 0, 0);
  int owner = -1;
  if (!rc) rc = fetch_map(s, &w, (uintptr_t)base, &mapped, &owner);
  if (!rc) {
    /* The importing device, and the device the memory lives on: the runtime
     * reports that device for the pointer (cudaPointerGetAttributes), so
     * frameworks run their kernels on it there (torch does); legacy IPC
     * memory is reachable from it too. */
    CUmemAccessDesc d[2] = {{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
                            {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = owner},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};
    size_t nd = owner >= 0 && owner != device ? 2 : 1;
    rc = pt_drv.cuMemSetAccess(base, len, d, nd);
    if (rc && nd == 2) {
      /* The owner cannot be granted here (not visible, no peer path): the
       * importing device alone is what the application asked for. */
      PT_LOG_ONCE(PT_LOG_WARN,
                  "cudaIpcOpenMemHandle: memory of device %d mapped for device %d only (granting device %d "
                  "failed with CUDA error %d)",
                  owner, device, owner, rc);
      rc = pt_drv.cuMemSetAccess(base, len, d, 1);
    }
    if (rc)
      PT_LOG_ONCE(PT_LOG_WARN,
                  "cudaIpcOpenMemHandle: device %d cannot access memory of device %d from process %u "
                  "(CUDA error %d)",
                  device, w.device, w.pid, rc);
  }
  (void)pt_drv.cuCtxPopCurrent(&old);
  close(s);
  if (rc) {
    if (base) unmap_range(c, (uintptr_t)base, mapped * w.gran, len);
    return rc;
  }

  pthread_mutex_lock(&O.mu);
  uintptr_t p = (uintptr_t)base + w.offset;
  if ((e = open_find_key(&w))) {
    /* Another thread opened the same handle meanwhile: share its mapping. */
    e->refs++;
    p = e->ptr;
  } else {
    uint32_t i = 0;
    while (i < O.n && O.o[i].refs) i++;
    if (i == O.n && O.n == O.cap) {
      uint32_t cap = O.cap ? O.cap * 2 : 16;
      struct ipc_open *n = realloc(O.o, cap * sizeof *n);
      if (!n) {
        pthread_mutex_unlock(&O.mu);
        unmap_range(c, (uintptr_t)base, mapped * w.gran, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      O.o = n;
      O.cap = cap;
    }
    if (i == O.n) O.n++;
    O.o[i] = (struct ipc_open){p, (uintptr_t)base, len, w.pid, w.id, w.nonce, 1, c};
    base = 0;
  }
  pthread_mutex_unlock(&O.mu);
  if (base) unmap_range(c, (uintptr_t)base, mapped * w.gran, len);
  *ptr = (void *)p;
  return 0;
}

bool pt_ipc_close(void *ptr, int *err) {
  if (!ptr || !__atomic_load_n(&O.n, __ATOMIC_ACQUIRE)) return false;
  struct ipc_open gone = {0};
  bool found = false;
  pthread_mutex_lock(&O.mu);
  for (uint32_t i = 0; i < O.n; i++) {
    if (!O.o[i].refs || O.o[i].ptr != (uintptr_t)ptr) continue;
    found = true;
    if (--O.o[i].refs == 0) gone = O.o[i];
    break;
  }
  pthread_mutex_unlock(&O.mu);
  if (!found) return false;
  if (gone.base) unmap_range(gone.ctx, gone.base, gone.len, gone.len);
  *err = 0;
  return true;
}

void pt_ipc_atfork_child(void) {
  /* Another thread may have held a lock at fork; the server thread did not
   * survive it and its socket belongs to the parent. */
  pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
  X.mu = init;
  O.mu = init;
  if (X.lfd >= 0) close(X.lfd);
  X.lfd = -1;
  X.server_pid = 0;
  for (uint32_t i = 0; i < X.n; i++) X.rec[i].start = 0;
  __atomic_store_n(&X.nlive, 0, __ATOMIC_RELAXED);
}
