/* CUDA IPC of pooled memory, the importer: opens Ponytail's handles (maps
 * the exporter's memory) and closes them. Every driver call goes through the
 * import ops of a VMM backend bound to the importing device (one per device,
 * created at the first open there, kept for the process's life). The scheme
 * and its limits: ipc_internal.h. */
#include "shim/ipc_internal.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "allocator/backend_vmm.h"
#include "common/log.h"
#include "shim/real.h"

struct ipc_open {
  uintptr_t ptr, base;
  uint64_t len;
  uint32_t pid, id;
  uint64_t nonce;
  int refs;
  struct pt_backend bk; /* the importing device's: unmaps at the last close */
};
static struct {
  pthread_mutex_t mu;
  struct ipc_open *o;
  uint32_t n, cap;
} O = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The importing devices' backends, by ordinal (ops NULL: not created yet). */
static struct {
  pthread_mutex_t mu;
  struct pt_backend *bk;
  int n;
} B = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The backend that maps imports for device, created at its first use: 0, or
 * CUDA_ERROR_NOT_SUPPORTED when the driver lacks what importing needs (the
 * importer's answer before the backend), else the creation's error. */
static int import_backend(int device, struct pt_backend *out) {
  int rc = 0;
  if (device < 0) return CUDA_ERROR_INVALID_DEVICE; /* the caller found none */
  pthread_mutex_lock(&B.mu);
  if (device >= B.n) {
    int n = device + 1;
    struct pt_backend *nb = realloc(B.bk, (size_t)n * sizeof *nb);
    if (!nb) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      memset(nb + B.n, 0, (size_t)(n - B.n) * sizeof *nb);
      B.bk = nb;
      B.n = n;
    }
  }
  if (!rc && !B.bk[device].ops) {
    /* Not exportable: this backend only imports. */
    rc = pt_backend_vmm_create(&B.bk[device], device, 0, pt_real_driver() ? &pt_drv : NULL);
    if (rc == CUDA_ERROR_NOT_INITIALIZED) rc = CUDA_ERROR_NOT_SUPPORTED;
    if (!rc && (!B.bk[device].ops->import_reserve || !B.bk[device].ops->import_map ||
                !B.bk[device].ops->import_access || !B.bk[device].ops->import_unmap)) {
      if (B.bk[device].ops->destroy) B.bk[device].ops->destroy(B.bk[device].ctx);
      rc = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (rc) B.bk[device] = (struct pt_backend){0};
  }
  if (!rc) *out = B.bk[device];
  pthread_mutex_unlock(&B.mu);
  return rc;
}

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
 * granules) through bk. *mapped: granules mapped so far (undone by the
 * caller). *owner: the device the memory lives on, in this process's
 * numbering (the exporter's ordinal may name another GPU here); -1 if the
 * driver cannot say. */
static int fetch_map(const struct pt_backend *bk, int s, const struct ipc_wire *w, uintptr_t base, uint64_t *mapped,
                     int *owner) {
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
      if (!rc) {
        rc = bk->ops->import_map(bk->ctx, fds[i], base + *mapped * w->gran, rep.lens[i] * w->gran, owner);
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
static void unmap_range(const struct pt_backend *bk, uintptr_t base, uint64_t mapped_bytes, uint64_t len) {
  (void)bk->ops->import_unmap(bk->ctx, base, mapped_bytes, len);
}

/* ctx: the caller's context for device; the backend pushes the device's
 * primary context instead (VMM mappings and access are per device). */
int pt_ipc_open(const void *handle, void *ctx, int device, void **ptr) {
  (void)ctx;
  struct ipc_wire w;
  memcpy(&w, handle, sizeof w);
  if (!ptr || !wire_sane(&w)) {
    PT_LOG_ONCE(PT_LOG_WARN, "cudaIpcOpenMemHandle: a Ponytail handle with impossible fields: refused");
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct pt_backend bk;
  int rc = import_backend(device, &bk);
  if (rc) return rc;
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
  uint64_t len = (uint64_t)w.ngran * w.gran, mapped = 0;
  uintptr_t base = 0;
  rc = bk.ops->import_reserve(bk.ctx, len, w.gran, &base);
  int owner = -1;
  if (!rc) rc = fetch_map(&bk, s, &w, base, &mapped, &owner);
  if (!rc) {
    /* The importing device, and the device the memory lives on: the runtime
     * reports that device for the pointer (cudaPointerGetAttributes), so
     * frameworks run their kernels on it there (torch does); legacy IPC
     * memory is reachable from it too. */
    int d[2] = {device, owner};
    int nd = owner >= 0 && owner != device ? 2 : 1;
    rc = bk.ops->import_access(bk.ctx, base, len, d, nd);
    if (rc && nd == 2) {
      /* The owner cannot be granted here (not visible, no peer path): the
       * importing device alone is what the application asked for. */
      PT_LOG_ONCE(PT_LOG_WARN,
                  "cudaIpcOpenMemHandle: memory of device %d mapped for device %d only (granting device %d "
                  "failed with CUDA error %d)",
                  owner, device, owner, rc);
      rc = bk.ops->import_access(bk.ctx, base, len, d, 1);
    }
    if (rc)
      PT_LOG_ONCE(PT_LOG_WARN,
                  "cudaIpcOpenMemHandle: device %d cannot access memory of device %d from process %u "
                  "(CUDA error %d)",
                  device, w.device, w.pid, rc);
  }
  close(s);
  if (rc) {
    if (base) unmap_range(&bk, base, mapped * w.gran, len);
    return rc;
  }

  pthread_mutex_lock(&O.mu);
  uintptr_t p = base + w.offset;
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
        unmap_range(&bk, base, mapped * w.gran, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      O.o = n;
      O.cap = cap;
    }
    if (i == O.n) O.n++;
    O.o[i] = (struct ipc_open){p, base, len, w.pid, w.id, w.nonce, 1, bk};
    base = 0;
  }
  pthread_mutex_unlock(&O.mu);
  if (base) unmap_range(&bk, base, mapped * w.gran, len);
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
  if (gone.base) unmap_range(&gone.bk, gone.base, gone.len, gone.len);
  *err = 0;
  return true;
}

void pt_ipc_import_atfork_child(void) {
  /* Another thread may have held a lock at fork. */
  pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
  O.mu = init;
  B.mu = init;
}
