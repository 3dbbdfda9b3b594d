/* The FA2 hook: torch's pytorch_flash:: kernels (and upstream flash::).
 *
 * Decode attention in FA2 is either one flash_fwd_kernel launch, or a
 * flash_fwd_splitkv_kernel launch (partials into oaccum/lseaccum) followed on
 * the same stream by flash_fwd_splitkv_combine_kernel (writes O and LSE).
 * Ponytail's kernel produces O and LSE in one launch, so when it replaces a
 * split launch the combine that follows must be dropped, and only that one:
 * a combine is skipped when it arrives on the same stream with the same
 * O / oaccum / LSE pointers as the launch that was replaced.
 *
 * The pending-combine table is thread-local: FA2 issues both launches back
 * to back from one host thread (run_flash_splitkv_fwd), so another thread's
 * launches can never be the combine we wait for, and no lock is needed. */
#include "hooks/torch_flash.h"

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

/* ---- names ---------------------------------------------------------------- */

static const struct { const char *prefix; int id; } pt_flash_names[] = {
    {"_ZN13pytorch_flash24flash_fwd_splitkv_kernelI", PT_HOOK_FLASH_SPLITKV},
    {"_ZN13pytorch_flash32flash_fwd_splitkv_combine_kernelI", PT_HOOK_FLASH_COMBINE},
    {"_ZN13pytorch_flash16flash_fwd_kernelI", PT_HOOK_FLASH_FWD},
    /* flash-attn (pip) builds the same sources in namespace flash. */
    {"_ZN5flash24flash_fwd_splitkv_kernelI", PT_HOOK_FLASH_SPLITKV},
    {"_ZN5flash32flash_fwd_splitkv_combine_kernelI", PT_HOOK_FLASH_COMBINE},
    {"_ZN5flash16flash_fwd_kernelI", PT_HOOK_FLASH_FWD},
};

int pt_flash_match(const char *name) {
  if (!name || name[0] != '_' || name[1] != 'Z') return 0;
  for (size_t i = 0; i < sizeof pt_flash_names / sizeof pt_flash_names[0]; i++)
    if (strncmp(name, pt_flash_names[i].prefix, strlen(pt_flash_names[i].prefix)) == 0)
      return pt_flash_names[i].id;
  return 0;
}

/* ---- ops ------------------------------------------------------------------ */

static const struct pt_flash_ops *pt_flash_ops_cur; /* NULL = default */

const struct pt_flash_ops *pt_flash_set_ops(const struct pt_flash_ops *ops) {
  const struct pt_flash_ops *old = __atomic_exchange_n(&pt_flash_ops_cur, ops, __ATOMIC_ACQ_REL);
  return old ? old : &pt_flash_default_ops;
}

static const struct pt_flash_ops *pt_flash_ops_get(void) {
  const struct pt_flash_ops *o = __atomic_load_n(&pt_flash_ops_cur, __ATOMIC_ACQUIRE);
  return o ? o : &pt_flash_default_ops;
}

/* ---- statistics ----------------------------------------------------------- */

static uint64_t pt_flash_verified, pt_flash_verify_failures, pt_flash_faults;

void pt_flash_get_stats(struct pt_hooks_stats *out) {
  memset(out, 0, sizeof *out);
  out->verified = __atomic_load_n(&pt_flash_verified, __ATOMIC_RELAXED);
  out->verify_failures = __atomic_load_n(&pt_flash_verify_failures, __ATOMIC_RELAXED);
  out->faults_planted = __atomic_load_n(&pt_flash_faults, __ATOMIC_RELAXED);
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
static void pt_flash_plant_fault(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
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
  __atomic_add_fetch(&pt_flash_faults, 1, __ATOMIC_RELAXED);
}

/* ---- pending combines (thread-local) -------------------------------------- */

enum { PT_PEND_NONE = 0, PT_PEND_SKIP = 1, PT_PEND_VERIFY = 2 };

struct pt_flash_pending {
  int kind;
  void *stream;
  const void *o, *oaccum, *lse;
  int b, h, seqlen_q, num_splits;
  struct pt_attn_desc desc; /* verify: what to recompute once the combine ran */
};

#define PT_PEND_SLOTS 4
static __thread struct pt_flash_pending pt_pend[PT_PEND_SLOTS];
static __thread unsigned pt_pend_next;
/* Bumped by pt_flash_reset_for_tests so other threads' tables read as empty. */
static unsigned pt_pend_epoch_global;
static __thread unsigned pt_pend_epoch;

static void pt_pend_sync_epoch(void) {
  unsigned e = __atomic_load_n(&pt_pend_epoch_global, __ATOMIC_RELAXED);
  if (e != pt_pend_epoch) {
    memset(pt_pend, 0, sizeof pt_pend);
    pt_pend_epoch = e;
  }
}

static struct pt_flash_pending *pt_pend_find(void *stream) {
  pt_pend_sync_epoch();
  for (int i = 0; i < PT_PEND_SLOTS; i++)
    if (pt_pend[i].kind != PT_PEND_NONE && pt_pend[i].stream == stream) return &pt_pend[i];
  return NULL;
}

static void pt_pend_clear(void *stream) {
  struct pt_flash_pending *p = pt_pend_find(stream);
  if (p) p->kind = PT_PEND_NONE;
}

static void pt_pend_set(void *stream, int kind, const struct pt_flash_fields *f,
                        const struct pt_attn_desc *d) {
  struct pt_flash_pending *p = pt_pend_find(stream);
  if (!p) {
    for (int i = 0; i < PT_PEND_SLOTS && !p; i++)
      if (pt_pend[i].kind == PT_PEND_NONE) p = &pt_pend[i];
    if (!p) p = &pt_pend[pt_pend_next++ % PT_PEND_SLOTS];
  }
  p->kind = kind;
  p->stream = stream;
  p->o = f->o;
  p->oaccum = f->oaccum;
  p->lse = f->lse;
  p->b = f->b;
  p->h = f->h;
  p->seqlen_q = f->seqlen_q;
  p->num_splits = f->num_splits;
  p->desc = *d;
}

/* The combine belongs to the replaced launch: same output, partials and LSE
 * buffers and the same problem. */
static int pt_pend_matches(const struct pt_flash_pending *p, const struct pt_flash_fields *f) {
  return p->o == f->o && p->oaccum == f->oaccum && p->lse == f->lse && p->b == f->b &&
         p->h == f->h && p->seqlen_q == f->seqlen_q && p->num_splits == f->num_splits;
}

/* ---- outcomes ------------------------------------------------------------- */

static struct pt_hook_outcome pt_pass(const char *reason) {
  struct pt_hook_outcome o = {PT_HOOK_PASS, reason, 0};
  return o;
}
static struct pt_hook_outcome pt_done(int verdict, int status) {
  struct pt_hook_outcome o = {verdict, NULL, status};
  return o;
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
static struct { int dtype, b, h, h_k, seqlen_q, d, causal, bad_logged; } pt_vshapes[PT_VERIFY_SHAPES];
static int pt_nvshapes;
static pthread_mutex_t pt_vshape_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 the first time this shape (good) / this shape out of tolerance (bad) is seen. */
static int pt_vshape_first(const struct pt_attn_desc *d, int bad) {
  int first = 0;
  pthread_mutex_lock(&pt_vshape_lock);
  int i;
  for (i = 0; i < pt_nvshapes; i++)
    if (pt_vshapes[i].dtype == d->dtype && pt_vshapes[i].b == d->b && pt_vshapes[i].h == d->h &&
        pt_vshapes[i].h_k == d->h_k && pt_vshapes[i].seqlen_q == d->seqlen_q &&
        pt_vshapes[i].d == d->head_dim && pt_vshapes[i].causal == d->causal)
      break;
  if (i == pt_nvshapes && i < PT_VERIFY_SHAPES) {
    pt_vshapes[i].dtype = d->dtype;
    pt_vshapes[i].b = d->b;
    pt_vshapes[i].h = d->h;
    pt_vshapes[i].h_k = d->h_k;
    pt_vshapes[i].seqlen_q = d->seqlen_q;
    pt_vshapes[i].d = d->head_dim;
    pt_vshapes[i].causal = d->causal;
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

/* Runs Ponytail's kernel into scratch (contiguous O and LSE after the
 * kernel's own workspace), compares with the reference that the original
 * kernel wrote into d->o / d->lse, and counts. Outside capture only. */
static void pt_flash_verify_run(const struct pt_flash_ops *ops, const struct pt_attn_desc *d,
                                void *stream) {
  size_t dec = ops->ws_bytes(d);
  /* The kernel's counter block stays untouched even when this shape needs no
   * workspace: a later split launch relies on it being zero. */
  size_t off_o = pt_align256(dec > PT_ATTN_WS_COUNTER_BYTES ? dec : PT_ATTN_WS_COUNTER_BYTES);
  size_t o_bytes = (size_t)d->b * d->seqlen_q * d->h * d->head_dim * 2;
  size_t off_lse = pt_align256(off_o + o_bytes);
  size_t lse_bytes = (size_t)d->b * d->h * d->seqlen_q * sizeof(float);
  size_t off_res = pt_align256(off_lse + lse_bytes);
  size_t need = off_res + 4 * sizeof(float);
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
  t.o_head_stride = d->head_dim;
  t.o_row_stride = (int64_t)d->h * d->head_dim;
  t.o_batch_stride = (int64_t)d->seqlen_q * d->h * d->head_dim;
  float host[4] = {0, 0, 0, 0};
  int rc = ops->launch(&t, dec ? ws : NULL, dec ? off_o : 0, stream);
  uint64_t fault = pt_opt_size(PT_OPT_TEST_FAULT);
  if (rc == 0 && fault) pt_flash_plant_fault(ops, &t, stream, fault);
  if (rc == 0) rc = ops->compare(d, t.o, t.lse, (float *)(base + off_res), stream);
  if (rc == 0) rc = ops->copy_to_host(host, base + off_res, sizeof host, stream);
  if (rc == 0) rc = ops->stream_sync(stream);
  if (rc != 0) {
    PT_LOG_ONCE(PT_LOG_WARN, "attention verify: CUDA error %d; not verified", rc);
    return;
  }
  float rel_o = 0, rel_lse = 0;
  int ok = pt_flash_verify_ok(host, &rel_o, &rel_lse);
  __atomic_add_fetch(&pt_flash_verified, 1, __ATOMIC_RELAXED);
  if (!ok) __atomic_add_fetch(&pt_flash_verify_failures, 1, __ATOMIC_RELAXED);
  if (pt_vshape_first(d, !ok))
    pt_log(ok ? PT_LOG_INFO : PT_LOG_WARN,
           "attention verify %s b=%d h=%d h_k=%d seqlen_q=%d seqlen_k=%d d=%d%s: "
           "O max abs %.3g rel %.3g, LSE max abs %.3g rel %.3g%s",
           d->dtype == PT_DTYPE_BF16 ? "bf16" : "fp16", d->b, d->h, d->h_k, d->seqlen_q,
           d->seqlen_k, d->head_dim, d->causal ? " causal" : "", (double)host[0], (double)rel_o,
           (double)host[2], (double)rel_lse, ok ? "" : " OUT OF TOLERANCE");
}

/* ---- launch decisions ----------------------------------------------------- */

static struct pt_hook_outcome pt_flash_on_combine(const struct pt_flash_ops *ops,
                                                  const struct pt_launch *l) {
  struct pt_flash_pending *p = pt_pend_find(l->stream);
  if (!p) return pt_pass(NULL);
  struct pt_flash_fields f;
  const void *params = l->args ? l->args[0] : NULL;
  if (pt_flash_decode(params, l->param_bytes, &f) != NULL) {
    /* Cannot prove it is ours: let it run (it then rewrites O from stale
     * partials, which is why this is worth a warning). */
    PT_LOG_ONCE(PT_LOG_WARN, "attention: combine after a replaced launch has an unknown layout");
    p->kind = PT_PEND_NONE;
    return pt_pass(NULL);
  }
  if (!pt_pend_matches(p, &f)) return pt_pass(NULL); /* other work: leave the pending one */
  int kind = p->kind;
  struct pt_attn_desc d = p->desc;
  p->kind = PT_PEND_NONE;
  if (kind == PT_PEND_SKIP) return pt_done(PT_HOOK_SKIPPED, 0);
  /* Verify: the original split launch ran; finish it, then recompute. */
  int rc = l->launch_original(l);
  int capturing = 0;
  if (rc == 0 && ops->is_capturing && ops->is_capturing(l->stream, &capturing) == 0 && !capturing)
    pt_flash_verify_run(ops, &d, l->stream);
  return pt_done(PT_HOOK_SWAPPED, rc);
}

struct pt_hook_outcome pt_flash_launch(int id, const struct pt_launch *l) {
  const struct pt_flash_ops *ops = pt_flash_ops_get();
  if (id == PT_HOOK_FLASH_COMBINE) return pt_flash_on_combine(ops, l);
  if (id != PT_HOOK_FLASH_SPLITKV && id != PT_HOOK_FLASH_FWD) return pt_pass(pt_flash_r_variant);

  /* A new attention launch on this stream ends any wait for a combine. */
  pt_pend_clear(l->stream);

  int mode = pt_opt_enum(PT_OPT_ATTN);
  if (mode == PT_ATTN_OFF) return pt_pass(pt_flash_r_disabled);
  /* CU_STREAM_PER_THREAD (0x2) or the NULL stream of a _ptsz launch: one
   * handle for many real streams, so no per-stream workspace can be kept. */
  if (l->stream == (void *)0x2 || (l->per_thread_stream && !l->stream))
    return pt_pass(pt_flash_r_per_thread);

  struct pt_flash_fields f;
  const char *why = pt_flash_decode(l->args ? l->args[0] : NULL, l->param_bytes, &f);
  if (why) return pt_pass(why);
  why = pt_flash_eligible(&f, (enum pt_flash_kernel)id, l->grid);
  if (why) return pt_pass(why);
  struct pt_attn_desc d;
  pt_flash_to_desc(&f, &d);
  if (!ops->supported || !ops->launch || !ops->ws_bytes || !ops->is_capturing)
    return pt_pass(pt_flash_r_no_driver);
  why = ops->supported(&d);
  if (why) return pt_pass(why);
  int capturing = 0;
  if (ops->is_capturing(l->stream, &capturing) != 0) return pt_pass(pt_flash_r_no_driver);
  int split = id == PT_HOOK_FLASH_SPLITKV && f.num_splits > 1;

  if (mode == PT_ATTN_VERIFY) {
    if (capturing) return pt_pass(NULL); /* no sync in a capture: just the original */
    if (split) {
      /* The reference O exists only after the combine: verify then. */
      pt_pend_set(l->stream, PT_PEND_VERIFY, &f, &d);
      return pt_pass(NULL);
    }
    int rc = l->launch_original(l);
    if (rc == 0) pt_flash_verify_run(ops, &d, l->stream);
    return pt_done(PT_HOOK_SWAPPED, rc);
  }

  /* Launches that need no workspace (one split, or splits merged in a
   * thread-block cluster) take none: nothing allocated, and nothing to find
   * for a stream first seen during a capture. */
  void *ws = NULL;
  size_t ws_bytes = 0;
  const size_t need = ops->ws_bytes(&d);
  if (need) {
    why = pt_flash_ws_get(ops, l->stream, need, capturing, &ws, &ws_bytes);
    if (why) return pt_pass(why);
  }
  int rc = ops->launch(&d, ws, ws_bytes, l->stream);
  if (rc != 0) {
    PT_LOG_ONCE(PT_LOG_WARN, "attention: Ponytail kernel launch failed (CUDA error %d); "
                             "running the original", rc);
    return pt_pass(pt_flash_r_launch_failed);
  }
  uint64_t fault = pt_opt_size(PT_OPT_TEST_FAULT);
  if (fault) pt_flash_plant_fault(ops, &d, l->stream, fault);
  if (split) pt_pend_set(l->stream, PT_PEND_SKIP, &f, &d);
  return pt_done(PT_HOOK_SWAPPED, 0);
}

void pt_flash_reset_for_tests(void) {
  __atomic_add_fetch(&pt_pend_epoch_global, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_flash_verified, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_flash_verify_failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&pt_flash_faults, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&pt_vshape_lock);
  pt_nvshapes = 0;
  pthread_mutex_unlock(&pt_vshape_lock);
  pt_flash_ws_reset();
}
