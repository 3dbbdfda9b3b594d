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

#include <string.h>

#include "common/log.h"
#include "common/options.h"

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

/* ---- launch decisions ----------------------------------------------------- */

static struct pt_hook_outcome pt_flash_on_combine(const struct pt_flash_ops *ops,
                                                  const struct pt_launch *l) {
  struct pt_flash_pending *p = pt_pend_find(l->stream);
  if (!p) return pt_hook_pass(NULL);
  struct pt_flash_fields f;
  const void *params = l->args ? l->args[0] : NULL;
  if (pt_flash_decode(params, l->param_bytes, &f) != NULL) {
    /* Cannot prove it is ours: let it run (it then rewrites O from stale
     * partials, which is why this is worth a warning). */
    PT_LOG_ONCE(PT_LOG_WARN, "attention: combine after a replaced launch has an unknown layout");
    p->kind = PT_PEND_NONE;
    return pt_hook_pass(NULL);
  }
  if (!pt_pend_matches(p, &f)) return pt_hook_pass(NULL); /* other work: leave the pending one */
  int kind = p->kind;
  struct pt_attn_desc d = p->desc;
  p->kind = PT_PEND_NONE;
  if (kind == PT_PEND_SKIP) return pt_hook_done(PT_HOOK_SKIPPED, 0);
  /* Verify: the original split launch ran; finish it, then recompute. */
  int rc = l->launch_original(l);
  int capturing = 0;
  if (rc == 0 && ops->is_capturing && ops->is_capturing(l->stream, &capturing) == 0 && !capturing)
    pt_attn_verify_run(ops, &d, l->stream);
  return pt_hook_done(PT_HOOK_SWAPPED, rc);
}

struct pt_hook_outcome pt_flash_launch(int id, const struct pt_launch *l) {
  const struct pt_flash_ops *ops = pt_attn_ops();
  if (id == PT_HOOK_FLASH_COMBINE) return pt_flash_on_combine(ops, l);
  if (id != PT_HOOK_FLASH_SPLITKV && id != PT_HOOK_FLASH_FWD) return pt_hook_pass(pt_flash_r_variant);

  /* A new attention launch on this stream ends any wait for a combine. */
  pt_pend_clear(l->stream);

  int mode = pt_opt_enum(PT_OPT_ATTN);
  if (mode == PT_ATTN_OFF) return pt_hook_pass(pt_flash_r_disabled);
  if (pt_attn_per_thread_stream(l)) return pt_hook_pass(pt_flash_r_per_thread);

  struct pt_flash_fields f;
  const char *why = pt_flash_decode(l->args ? l->args[0] : NULL, l->param_bytes, &f);
  if (why) return pt_hook_pass(why);
  why = pt_flash_eligible(&f, (enum pt_flash_kernel)id, l->grid);
  /* pt_flash_eligible answers "prefill" only after every check that is not
   * about the query length passed, so such a launch goes to the prefill
   * kernel, whose own limits pt_attn_swap_check applies. */
  if (why == pt_flash_r_prefill && pt_opt_bool(PT_OPT_ATTN_PREFILL)) why = NULL;
  if (why) return pt_hook_pass(why);
  struct pt_attn_desc d;
  pt_flash_to_desc(&f, &d);
  int capturing = 0;
  why = pt_attn_swap_check(ops, &d, l->stream, &capturing);
  if (why) return pt_hook_pass(why);
  int split = id == PT_HOOK_FLASH_SPLITKV && f.num_splits > 1;

  if (mode == PT_ATTN_VERIFY) {
    if (capturing) return pt_hook_pass(NULL); /* no sync in a capture: just the original */
    if (split) {
      /* The reference O exists only after the combine: verify then. */
      pt_pend_set(l->stream, PT_PEND_VERIFY, &f, &d);
      return pt_hook_pass(NULL);
    }
    return pt_attn_verify_launch(ops, &d, l);
  }

  struct pt_hook_outcome o = pt_attn_swap_launch(ops, &d, l->stream, capturing);
  /* Replaced: the combine torch issues next must not rewrite O. */
  if (split && o.verdict == PT_HOOK_SWAPPED) pt_pend_set(l->stream, PT_PEND_SKIP, &f, &d);
  return o;
}

void pt_flash_reset_for_tests(void) {
  __atomic_add_fetch(&pt_pend_epoch_global, 1, __ATOMIC_RELAXED);
  pt_attn_swap_reset();
}
