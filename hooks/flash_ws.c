/* Per-(context, stream) workspace cache; see flash_ws.h for the rules. */
#include "hooks/flash_ws.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "hooks/torch_flash.h"
#include "common/log.h"

struct pt_ws_slot { void *ctx, *stream, *ptr; size_t bytes; };
struct pt_ws_spare { void *ctx, *ptr; size_t bytes; };

static struct pt_ws_slot pt_ws_slots[PT_FLASH_WS_SLOTS];
static int pt_ws_nslots;
static struct pt_ws_spare pt_ws_spares[PT_FLASH_WS_CTX_SLOTS];
static int pt_ws_nspares;
/* One lock for all: taken once per swapped launch, uncontended in practice
 * (decode launches come from one thread per device). */
static pthread_mutex_t pt_ws_lock = PTHREAD_MUTEX_INITIALIZER;

const char pt_flash_r_no_ws_capture[] = "no workspace during capture";
const char pt_flash_r_ws_full[] = "workspace table full";
const char pt_flash_r_ws_alloc[] = "workspace alloc failed";

/* Power of two >= need, at least PT_FLASH_WS_MIN_BYTES: growth by doubling
 * bounds the number of buffers a growing KV length leaves behind. */
static size_t pt_ws_round(size_t need) {
  size_t n = PT_FLASH_WS_MIN_BYTES;
  while (n < need && n < ((size_t)1 << 40)) n <<= 1;
  return n;
}

/* Allocates and zeroes a buffer on stream; 0 on success. */
static int pt_ws_new(const struct pt_flash_ops *ops, void *stream, size_t bytes, void **out) {
  void *p = NULL;
  int rc = ops->mem_alloc(&p, bytes);
  if (rc != 0 || !p) return rc ? rc : -1;
  rc = ops->ws_prepare(p, bytes, stream);
  if (rc != 0) return rc; /* leaked on purpose: never free what a graph may hold */
  *out = p;
  return 0;
}

static struct pt_ws_spare *pt_ws_spare_for(void *ctx) {
  for (int i = 0; i < pt_ws_nspares; i++)
    if (pt_ws_spares[i].ctx == ctx) return &pt_ws_spares[i];
  return NULL;
}

const char *pt_flash_ws_get(const struct pt_flash_ops *ops, void *stream, size_t need,
                            int capturing, void **ws, size_t *bytes) {
  void *ctx = NULL;
  if (!ops->ctx_current || ops->ctx_current(&ctx) != 0) return pt_flash_r_no_driver;
  const char *reason = NULL;
  pthread_mutex_lock(&pt_ws_lock);
  struct pt_ws_slot *s = NULL;
  for (int i = 0; i < pt_ws_nslots; i++)
    if (pt_ws_slots[i].ctx == ctx && pt_ws_slots[i].stream == stream) { s = &pt_ws_slots[i]; break; }
  if (s && s->bytes >= need) goto done;
  if (!s && pt_ws_nslots == PT_FLASH_WS_SLOTS) { reason = pt_flash_r_ws_full; goto done; }

  if (capturing) {
    /* No allocation, no memset, no sync while capturing: adopt the spare. */
    struct pt_ws_spare *sp = pt_ws_spare_for(ctx);
    if (!sp || !sp->ptr || sp->bytes < need) { reason = pt_flash_r_no_ws_capture; goto done; }
    if (!s) { s = &pt_ws_slots[pt_ws_nslots++]; s->ctx = ctx; s->stream = stream; }
    s->ptr = sp->ptr;
    s->bytes = sp->bytes;
    sp->ptr = NULL;
    sp->bytes = 0;
    goto done;
  }

  size_t want = pt_ws_round(need);
  void *p = NULL;
  if (pt_ws_new(ops, stream, want, &p) != 0) { reason = pt_flash_r_ws_alloc; goto done; }
  if (!s) { s = &pt_ws_slots[pt_ws_nslots++]; s->ctx = ctx; s->stream = stream; }
  s->ptr = p;
  s->bytes = want;

  /* Keep a spare at least this large for a later capture on a new stream.
   * It is synchronised once here, because the graph that adopts it may run
   * on a stream with no order relative to this memset. */
  struct pt_ws_spare *sp = pt_ws_spare_for(ctx);
  if (!sp && pt_ws_nspares < PT_FLASH_WS_CTX_SLOTS) {
    sp = &pt_ws_spares[pt_ws_nspares++];
    sp->ctx = ctx;
  }
  if (sp && sp->bytes < want) {
    void *q = NULL;
    if (pt_ws_new(ops, stream, want, &q) == 0 && ops->stream_sync(stream) == 0) {
      sp->ptr = q;
      sp->bytes = want;
    } else {
      PT_LOG_ONCE(PT_LOG_WARN, "attention: no spare workspace (captures on new streams fall back)");
    }
  }
done:
  if (!reason) {
    *ws = s->ptr;
    *bytes = s->bytes;
  }
  pthread_mutex_unlock(&pt_ws_lock);
  return reason;
}

void pt_flash_ws_reset(void) {
  pthread_mutex_lock(&pt_ws_lock);
  memset(pt_ws_slots, 0, sizeof pt_ws_slots);
  memset(pt_ws_spares, 0, sizeof pt_ws_spares);
  pt_ws_nslots = pt_ws_nspares = 0;
  pthread_mutex_unlock(&pt_ws_lock);
}
