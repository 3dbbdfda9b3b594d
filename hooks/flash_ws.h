/* Device workspaces of Ponytail's decode kernel, cached per (context, stream).
 *
 * The kernel's workspace holds self-resetting counters, so one buffer must
 * never serve two launches that can run at the same time: one per stream.
 * Buffers are allocated and zeroed outside stream capture only (allocation
 * and memset are not capturable); for a stream seen first while it is being
 * captured (torch.cuda.graph captures on a fresh side stream) a per-context
 * spare, allocated and zeroed earlier, is bound to that stream. Buffers are
 * never freed: a captured graph may still reference a replaced one. */
#ifndef PT_FLASH_WS_H
#define PT_FLASH_WS_H
#include <stddef.h>

struct pt_flash_ops;

/* Smallest buffer allocated (also covers the kernel's counter block). */
#define PT_FLASH_WS_MIN_BYTES ((size_t)1 << 20)
/* (context, stream) pairs and contexts with a spare the cache can hold. */
#define PT_FLASH_WS_SLOTS 64
#define PT_FLASH_WS_CTX_SLOTS 16

/* A workspace of at least `need` bytes for stream (in the current context),
 * zeroed once. NULL on success (*ws, *bytes set), else a static reason:
 * "no workspace during capture", "workspace table full",
 * "workspace alloc failed". */
const char *pt_flash_ws_get(const struct pt_flash_ops *ops, void *stream, size_t need,
                            int capturing, void **ws, size_t *bytes);

/* Tests only: forget every buffer. */
void pt_flash_ws_reset(void);

#endif
