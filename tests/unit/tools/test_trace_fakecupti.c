/* A fake libcupti.so.13 for testing shim/cupti.c without a GPU: the activity
 * API over canned kernel records. FAKECUPTI_FAIL=register|enable|concurrent
 * makes that step fail (concurrent: only CONCURRENT_KERNEL is refused). */
#include <stdlib.h>
#include <string.h>

#include <cupti_activity.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

static CUpti_BuffersCallbackRequestFunc fake_req;
static CUpti_BuffersCallbackCompleteFunc fake_done;
static int fake_enabled;
static uint64_t fake_clock = 5000;

static int fake_fail(const char *what) {
  const char *f = getenv("FAKECUPTI_FAIL");
  return f && !strcmp(f, what);
}

FAKE_EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s) {
  *s = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "FAKE_MULTIPLE_SUBSCRIBERS" : "FAKE_ERROR";
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiGetTimestamp(uint64_t *t) {
  *t = fake_clock;
  fake_clock = 90000;
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                       CUpti_BuffersCallbackCompleteFunc done) {
  if (fake_fail("register")) return CUPTI_ERROR_NOT_INITIALIZED;
  fake_req = req;
  fake_done = done;
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (fake_fail("enable")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  if (fake_fail("concurrent") && kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) return CUPTI_ERROR_NOT_COMPATIBLE;
  fake_enabled = 1;
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  (void)kind;
  fake_enabled = 0;
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped) {
  (void)ctx;
  (void)stream;
  *dropped = 2;
  return CUPTI_SUCCESS;
}

/* Every fake record occupies one CUpti_ActivityKernel10 slot. */
FAKE_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec) {
  size_t pos = *rec ? (size_t)((uint8_t *)*rec - buf) + sizeof(CUpti_ActivityKernel10) : 0;
  if (pos + sizeof(CUpti_ActivityKernel10) > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *rec = (CUpti_Activity *)(void *)(buf + pos);
  return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  if (!fake_req || !fake_enabled) return CUPTI_SUCCESS;
  uint8_t *buf = NULL;
  size_t size = 0, max = 0;
  fake_req(&buf, &size, &max);
  if (!buf || size < 4 * sizeof(CUpti_ActivityKernel10)) return CUPTI_ERROR_OUT_OF_MEMORY;
  static const struct {
    CUpti_ActivityKind kind;
    uint64_t start, end;
    uint32_t stream;
    const char *name;
  } recs[] = {{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 100, 200, 7, "kernA"},
              {CUPTI_ACTIVITY_KIND_MEMCPY, 120, 130, 7, NULL}, /* not a kernel: skipped */
              {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 150, 400, 9, "_ZN3foo3barEv"},
              {CUPTI_ACTIVITY_KIND_KERNEL, 500, 600, 7, NULL}};
  for (size_t i = 0; i < 4; i++) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = recs[i].kind;
    k.start = recs[i].start;
    k.end = recs[i].end;
    k.streamId = recs[i].stream;
    k.name = recs[i].name;
    memcpy(buf + i * sizeof k, &k, sizeof k);
  }
  fake_done(NULL, 0, buf, size, 4 * sizeof(CUpti_ActivityKernel10));
  return CUPTI_SUCCESS;
}
