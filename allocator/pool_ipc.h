/* Export of pooled blocks to other processes (CUDA IPC of pooled memory; the
 * shim's side is shim/ipc_export.c). Kept apart from pool.h: it only reads the
 * pool's block and granule maps, under the pool's mutex.
 *
 * A block lies in one segment, so the handles under it are consecutive
 * slots of one arena: the importer maps each whole (the driver maps no part
 * of a handle), in order, at consecutive addresses and finds the block at the
 * same offset from the first handle's start. */
#ifndef PT_ALLOC_POOL_IPC_H
#define PT_ALLOC_POOL_IPC_H
#include <stddef.h>
#include <stdint.h>
#include "allocator/pool.h"

struct pt_pool_block_info {
  uintptr_t start;  /* the block's first byte */
  uint64_t size;    /* its size (the request rounded to 256 B) */
  uint64_t offset;  /* start - the first handle's address */
  uint64_t gran;    /* granule size */
  uint64_t ngran;   /* granules of the handles under the block */
};

/* The live block that contains ptr (not only its start). 0, or the backend's
 * err_invalid when ptr is in no live block. */
int pt_pool_block_info(struct pt_pool *pool, const void *ptr, struct pt_pool_block_info *out);

/* Exports the handles under the live block that starts at start and has size
 * bytes, beginning with the one `first` granules into their range (where a
 * handle must begin), at most max of them: fds[i] receives a new descriptor
 * the caller owns and lens[i] the handle's granules; *n how many. All or
 * nothing: on error no descriptor stays open and *n is 0. err_invalid when no
 * such block is live (freed since, or re-allocated with another size) or
 * first is not a handle's start inside it; the backend's error when export
 * fails (err_invalid too when the backend has no export_fd). */
int pt_pool_export(struct pt_pool *pool, uintptr_t start, uint64_t size, uint64_t first, uint32_t max, int *fds,
                   uint32_t *lens, uint32_t *n);

#endif
