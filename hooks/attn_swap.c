/* The steps every decode-attention swap shares (attn_swap.h): the ops table,
 * the checks before a swap, the replacement launch, verify mode and the
 * planted fault, with one set of counters for all hooks. */
#include "hooks/attn_swap.h"

#include <cuda.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "hooks/flash_ws.h"
#include "common/log.h"
#include "common/options.h"

const char pt_flash_r_disabled[] = "disabled";
const char pt_flash_r_launch_failed[] = "ponytail launch failed";
const char pt_flash_r_no_driver[] = "driver unavailable";
const char pt_flash_r_per_thread[] = "per-thread default stream";
const char pt_flash_r_prefill_gpu[] = "prefill kernel needs compute capability 9.0";
const char pt_flash_r_prefill_capture[] = "prefill kernel not loaded before capture";

/* ---- ops ------------------------------------------------------------------ */

static const struct pt_flash_ops *pt_attn_ops_cur; /* NULL = default */

const struct pt_flash_ops *pt_flash_set_ops(const struct pt_flash_ops *ops) {
  const struct pt_flash_ops *old = __atomic_exchange_n(&pt_attn_ops_cur, ops, __ATOMIC_ACQ_REL);
  return old ? old : &pt_flash_default_ops;
}

const struct pt_flash_ops *pt_attn_ops(void) {
  const struct pt_flash_ops *o = __atomic_load_n(&pt_attn_ops_cur, __ATOMIC_ACQUIRE);
  return o ? o : &pt_flash_default_ops;
}

/* ---- statistics ----------------------------------------------------------- */

static uint64_t pt_attn_verified, pt_attn_verify_failures, pt_attn_faults, pt_attn_verify_skipped;

void pt_flash_get_stats(struct pt_hooks_stats *out) {
  memset(out, 0, sizeof *out);
  out->verified = __atomic_load_n(&pt_attn_verified, __ATOMIC_RELAXED);
  out->verify_failures = __atomic_load_n(&pt_attn_verify_failures, __ATOMIC_RELAXED);
  out->faults_planted = __atomic_load_n(&pt_attn_faults, __ATOMIC_RELAXED);
  out->verify_skipped = __atomic_load_n(&pt_attn_verify_skipped, __ATOMIC_RELAXED);
}

/* ---- planted fault (PONYTAIL_TEST_FAULT) ---------------------------------- */

float pt_flash_fault_factor(uint64_t n) {
  if (n > PT_FLASH_FAULT_MAX) n = PT_FLASH_FAULT_MAX;
  return 1.0f - (float)n / 100.0f;
}

/* The negative test of the correctness checks needs a kernel known to be
 * wrong: this scales what Ponytail's kernel just wrote to d->o, on the same
 * stream (stream-ordered, no sync, no allocation: capture-safe like the
 * launch it follows). Wrong results on purpose must never be silent, so the
 * warning goes out at the default log level. A failed fault launch leaves the
 * correct output; the swap itself stands either way. */
static void pt_attn_plant_fault(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                                void *stream, uint64_t n) {
  const float factor = pt_flash_fault_factor(n);
  PT_LOG_ONCE(PT_LOG_WARN,
              "test fault active (PONYTAIL_TEST_FAULT=%llu): the output of Ponytail's decode "
              "attention is multiplied by %g on purpose; results are wrong",
              (unsigned long long)n, (double)factor);
  if (!ops->fault) {
    PT_LOG_ONCE(PT_LOG_WARN, "test fault: no fault kernel (driver unavailable); outputs left as computed");
    return;
  }
  int rc = ops->fault(d, factor, stream);
  if (rc != 0) {
    PT_LOG_ONCE(PT_LOG_WARN, "test fault: the perturbation did not run (CUDA error %d)", rc);
    return;
  }
  __atomic_add_fetch(&pt_attn_faults, 1, __ATOMIC_RELAXED);
}

/* ---- checks and the replacement launch ------------------------------------ */

/* Decode or prefill: the kernel a descriptor goes to, with the decode
 * kernel's workspace rules (the prefill kernel takes none). */
static size_t pt_sw_ws_bytes(const struct pt_flash_ops *ops, const struct pt_attn_desc *d) {
  return pt_attn_is_prefill(d) ? 0 : ops->ws_bytes(d);
}

static int pt_sw_launch(const struct pt_flash_ops *ops, const struct pt_attn_desc *d, void *ws,
                        size_t ws_bytes, void *stream) {
  return pt_attn_is_prefill(d) ? ops->prefill_launch(d, stream) : ops->launch(d, ws, ws_bytes, stream);
}

const char *pt_attn_swap_check(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                               void *stream, int *capturing) {
  if (!ops->supported || !ops->launch || !ops->ws_bytes || !ops->is_capturing)
    return pt_flash_r_no_driver;
  if (pt_attn_is_prefill(d) && (!ops->prefill_supported || !ops->prefill_launch))
    return pt_flash_r_no_driver;
  const char *why = pt_attn_is_prefill(d) ? ops->prefill_supported(d) : ops->supported(d);
  if (why) return why;
  *capturing = 0;
  if (ops->is_capturing(stream, capturing) != 0) return pt_flash_r_no_driver;
  return NULL;
}

struct pt_hook_outcome pt_attn_swap_launch(const struct pt_flash_ops *ops,
                                           const struct pt_attn_desc *d, void *stream,
                                           int capturing) {
  /* Launches that need no workspace (one split, or splits merged in a
   * thread-block cluster) take none: nothing allocated, and nothing to find
   * for a stream first seen during a capture. */
  void *ws = NULL;
  size_t ws_bytes = 0;
  const size_t need = pt_sw_ws_bytes(ops, d);
  if (need) {
    const char *why = pt_flash_ws_get(ops, stream, need, capturing, &ws, &ws_bytes);
    if (why) return pt_hook_pass(why);
  }
  int rc = pt_sw_launch(ops, d, ws, ws_bytes, stream);
  /* The prefill kernel is sm_90a code: on another GPU its launcher refuses
   * (remembered per context), which is a property of the machine, not a
   * failure worth a warning. */
  if (rc == CUDA_ERROR_NOT_SUPPORTED && pt_attn_is_prefill(d)) return pt_hook_pass(pt_flash_r_prefill_gpu);
  /* Its module is loaded outside captures only; torch's kernel is captured instead. */
  if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && pt_attn_is_prefill(d))
    return pt_hook_pass(pt_flash_r_prefill_capture);
  if (rc != 0) {
    PT_LOG_ONCE(PT_LOG_WARN, "attention: Ponytail kernel launch failed (CUDA error %d); "
                             "running the original", rc);
    return pt_hook_pass(pt_flash_r_launch_failed);
  }
  uint64_t fault = pt_opt_size(PT_OPT_TEST_FAULT);
  if (fault) pt_attn_plant_fault(ops, d, stream, fault);
  return pt_hook_done(PT_HOOK_SWAPPED, 0);
}

/* ---- verify mode ---------------------------------------------------------- */

int pt_flash_verify_ok(const float r[4], float *rel_o, float *rel_lse) {
  /* Relative to the largest reference magnitude; an all-zero reference makes
   * the absolute error the measure. NaN fails every comparison below. */
  float ro = r[1] > 0.0f ? r[0] / r[1] : r[0];
  float rl = r[3] > 0.0f ? r[2] / r[3] : r[2];
  if (rel_o) *rel_o = ro;
  if (rel_lse) *rel_lse = rl;
  return ro <= PT_FLASH_VERIFY_TOL_O && rl <= PT_FLASH_VERIFY_TOL_LSE && isfinite(ro) &&
         isfinite(rl);
}

/* Shapes already logged (KV length excluded: it grows every decode step). */
#define PT_VERIFY_SHAPES 64
static struct {
  int dtype, b, h, h_k, seqlen_q, d, dv, causal, bias, bad_logged;
} pt_vshapes[PT_VERIFY_SHAPES];
static int pt_nvshapes;
static pthread_mutex_t pt_vshape_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 the first time this shape (good) / this shape out of tolerance (bad) is seen. */
static int pt_vshape_first(const struct pt_attn_desc *d, int bad) {
  int first = 0;
  const int bias = d->bias != NULL;
  pthread_mutex_lock(&pt_vshape_lock);
  int i;
  for (i = 0; i < pt_nvshapes; i++)
    if (pt_vshapes[i].dtype == d->dtype && pt_vshapes[i].b == d->b && pt_vshapes[i].h == d->h &&
        pt_vshapes[i].h_k == d->h_k && pt_vshapes[i].seqlen_q == d->seqlen_q &&
        pt_vshapes[i].d == d->head_dim && pt_vshapes[i].dv == pt_attn_v_dim(d) &&
        pt_vshapes[i].causal == d->causal && pt_vshapes[i].bias == bias)
      break;
  if (i == pt_nvshapes && i < PT_VERIFY_SHAPES) {
    pt_vshapes[i].dtype = d->dtype;
    pt_vshapes[i].b = d->b;
    pt_vshapes[i].h = d->h;
    pt_vshapes[i].h_k = d->h_k;
    pt_vshapes[i].seqlen_q = d->seqlen_q;
    pt_vshapes[i].d = d->head_dim;
    pt_vshapes[i].dv = pt_attn_v_dim(d);
    pt_vshapes[i].causal = d->causal;
    pt_vshapes[i].bias = bias;
    pt_vshapes[i].bad_logged = bad;
    pt_nvshapes++;
    first = 1;
  } else if (i < pt_nvshapes && bad && !pt_vshapes[i].bad_logged) {
    pt_vshapes[i].bad_logged = 1;
    first = 1;
  }
  pthread_mutex_unlock(&pt_vshape_lock);
  return first;
}

static size_t pt_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Ponytail's kernel writes into scratch (contiguous O and LSE after the
 * kernel's own workspace); the reference is what the original kernel wrote
 * into d->o / d->lse. */
void pt_attn_verify_run(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                        void *stream) {
  size_t dec = pt_sw_ws_bytes(ops, d);
  /* The kernel's counter block stays untouched even when this shape needs no
   * workspace: a later split launch relies on it being zero. */
  size_t off_o = pt_align256(dec > PT_ATTN_WS_COUNTER_BYTES ? dec : PT_ATTN_WS_COUNTER_BYTES);
  const int dv = pt_attn_v_dim(d); /* O's head size */
  size_t o_bytes = (size_t)d->b * d->seqlen_q * d->h * dv * 2;
  size_t off_lse = pt_align256(off_o + o_bytes);
  size_t lse_bytes = (size_t)d->b * d->h * d->seqlen_q * sizeof(float);
  size_t off_res = pt_align256(off_lse + lse_bytes);
  size_t need = off_res + 4 * sizeof(float);
  /* The scratch stays allocated for the process (flash_ws.h): a long prefill
   * would pin hundreds of MiB for a diagnostic, so such launches are counted
   * as not verified instead. */
  if (need > PT_VERIFY_MAX_SCRATCH) {
    __atomic_add_fetch(&pt_attn_verify_skipped, 1, __ATOMIC_RELAXED);
    PT_LOG_ONCE(PT_LOG_INFO, "attention verify: launches needing over %d MiB of scratch are not verified "
                             "(first: b=%d h=%d seqlen_q=%d d=%d)",
                (int)(PT_VERIFY_MAX_SCRATCH >> 20), d->b, d->h, d->seqlen_q, d->head_dim);
    return;
  }
  void *ws = NULL;
  size_t ws_bytes = 0;
  const char *why = pt_flash_ws_get(ops, stream, need, 0, &ws, &ws_bytes);
  if (why) {
    PT_LOG_ONCE(PT_LOG_WARN, "attention verify: no scratch (%s); not verified", why);
    return;
  }
  char *base = ws;
  struct pt_attn_desc t = *d;
  t.o = base + off_o;
  t.lse = d->lse ? (float *)(base + off_lse) : NULL;
  t.o_head_stride = dv;
  t.o_row_stride = (int64_t)d->h * dv;
  t.o_batch_stride = (int64_t)d->seqlen_q * d->h * dv;
  float host[4] = {0, 0, 0, 0};
  int rc = pt_sw_launch(ops, &t, dec ? ws : NULL, dec ? off_o : 0, stream);
  uint64_t fault = pt_opt_size(PT_OPT_TEST_FAULT);
  if (rc == 0 && fault) pt_attn_plant_fault(ops, &t, stream, fault);
  if (rc == 0) rc = ops->compare(d, t.o, t.lse, (float *)(base + off_res), stream);
  if (rc == 0) rc = ops->copy_to_host(host, base + off_res, sizeof host, stream);
  if (rc == 0) rc = ops->stream_sync(stream);
  if (rc != 0) {
    PT_LOG_ONCE(PT_LOG_WARN, "attention verify: CUDA error %d; not verified", rc);
    return;
  }
  float rel_o = 0, rel_lse = 0;
  int ok = pt_flash_verify_ok(host, &rel_o, &rel_lse);
  __atomic_add_fetch(&pt_attn_verified, 1, __ATOMIC_RELAXED);
  if (!ok) __atomic_add_fetch(&pt_attn_verify_failures, 1, __ATOMIC_RELAXED);
  if (pt_vshape_first(d, !ok))
    pt_log(ok ? PT_LOG_INFO : PT_LOG_WARN,
           "attention verify %s b=%d h=%d h_k=%d seqlen_q=%d seqlen_k=%d d=%d dv=%d%s%s: "
           "O max abs %.3g rel %.3g, LSE max abs %.3g rel %.3g%s",
           d->dtype == PT_DTYPE_BF16 ? "bf16" : "fp16", d->b, d->h, d->h_k, d->seqlen_q,
           d->seqlen_k, d->head_dim, dv, d->causal ? " causal" : "", d->bias ? " bias" : "",
           (double)host[0], (double)rel_o, (double)host[2], (double)rel_lse,
           ok ? "" : " OUT OF TOLERANCE");
}

struct pt_hook_outcome pt_attn_verify_launch(const struct pt_flash_ops *ops,
                                             const struct pt_attn_desc *d,
                                             const struct pt_launch *l) {
  int rc = l->launch_original(l);
  if (rc == 0) pt_attn_verify_run(ops, d, l->stream);
  return pt_hook_done(PT_HOOK_SWAPPED, rc);
}

void pt_attn_swap_reset(void) {
  __atomic_store_n(&pt_attn_verified, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_attn_verify_failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_attn_faults, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_attn_verify_skipped, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&pt_vshape_lock);
  pt_nvshapes = 0;
  pthread_mutex_unlock(&pt_vshape_lock);
  pt_flash_ws_reset();
}
