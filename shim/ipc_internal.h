/* Private to shim/ipc_export.c and shim/ipc_import.c: the handle's wire
 * format, the socket protocol and the helpers both ends use.
 *
 * CUDA IPC of pooled memory. Why not the driver's handle: cudaIpcGetMemHandle names a cudaMalloc
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
 * only whole). It imports each (cuMemImportFromShareableHandle, through
 * the VMM backend's import ops), maps them in order in a reserved range,
 * drops the handles (the mappings keep the memory) and the descriptors, and
 * grants its device read/write. The block is at the
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
#ifndef PT_SHIM_IPC_INTERNAL_H
#define PT_SHIM_IPC_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "shim/ipc.h"

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

static inline socklen_t sock_name(uint32_t pid, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  /* sun_path[0] = 0: the abstract namespace, nothing on the filesystem. */
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ponytail-ipc-%u", pid);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static inline void set_timeouts(int s) {
  struct timeval tv = {.tv_sec = IPC_TIMEOUT_S};
  (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* In a forked child (from pt_ipc_atfork_child): the importer's state. */
void pt_ipc_import_atfork_child(void);

#endif
