/* Per-call SDPA backend policy: torch_sdpa.h says what and why.
 *
 * Reading the query length. torch gives no C entry point that returns a
 * size without a chance of throwing a C++ exception through this C code
 * (at::native::size throws for symbolic sizes while torch.compile traces).
 * So the length is read from c10::TensorImpl directly, and every read is
 * checked against torch's own at::native::sym_size, which never throws for
 * dims 0 and -1:
 *  - the sizes-strides policy (2 bits of the byte at 0xae, from bit 2): 2 or
 *    more means custom sizes (symbolic while tracing, nested tensors): those
 *    calls keep torch's choice and nothing else is read;
 *  - the rank (int64 at 0x40) must be 4 (cuDNN, the only choice acted on,
 *    takes 4-d tensors only), and the sizes (int64s from 0x48, inline up to
 *    5 dims) must agree with sym_size(q, 0) and sym_size(q, -1).
 * The offsets are those of torch 2.11 on x86-64 (from at::native::size, which
 * reads exactly these fields). If torch ever disagrees, the layout is marked
 * refuted for the process, logged once, and the policy falls back to the
 * global flash policy: any call leaves cuDNN for flash or mem-efficient when
 * torch finds one eligible. */
#include "hooks/torch_sdpa.h"

#include <stddef.h>
#include <string.h>

#include "common/log.h"
#include "common/options.h"

#define PT_TI_NDIM 0x40
#define PT_TI_SIZES 0x48
#define PT_TI_POLICY_BYTE 0xae
#define PT_TI_POLICY_SHIFT 2
#define PT_TI_POLICY_MASK 3u
#define PT_TI_POLICY_CUSTOM_SIZES 2u
/* A c10::SymInt word below -2^62 is a tagged pointer to a symbolic node. */
#define PT_SYMINT_MIN_INT (-(INT64_C(1) << 62))

static struct pt_sdpa_stats st;
static int seen;
static __thread int probing __attribute__((tls_model("initial-exec")));

int pt_sdpa_probing(void) { return probing; }
int pt_sdpa_seen(void) { return __atomic_load_n(&seen, __ATOMIC_RELAXED); }

#define BUMP(f) __atomic_add_fetch(&st.f, 1, __ATOMIC_RELAXED)

void pt_sdpa_get_stats(struct pt_sdpa_stats *out) {
  out->calls = __atomic_load_n(&st.calls, __ATOMIC_RELAXED);
  out->decode_flash = __atomic_load_n(&st.decode_flash, __ATOMIC_RELAXED);
  out->decode_mem_eff = __atomic_load_n(&st.decode_mem_eff, __ATOMIC_RELAXED);
  out->decode_kept = __atomic_load_n(&st.decode_kept, __ATOMIC_RELAXED);
  out->prefill_flash = __atomic_load_n(&st.prefill_flash, __ATOMIC_RELAXED);
  out->prefill_kept = __atomic_load_n(&st.prefill_kept, __ATOMIC_RELAXED);
  out->not_cudnn = __atomic_load_n(&st.not_cudnn, __ATOMIC_RELAXED);
  out->unknown_len = __atomic_load_n(&st.unknown_len, __ATOMIC_RELAXED);
  out->layout_ok = __atomic_load_n(&st.layout_ok, __ATOMIC_RELAXED);
}

void pt_sdpa_reset(void) {
  memset(&st, 0, sizeof st);
  seen = 0;
  probing = 0;
}

static void layout_refuted(const char *why) {
  int was = __atomic_exchange_n(&st.layout_ok, -1, __ATOMIC_ACQ_REL);
  if (was >= 0)
    pt_warn("SDPA policy: torch's tensor layout not recognised (%s); from now on every call with a "
            "flash or mem-efficient path leaves cuDNN (the flash policy)", why);
}

int64_t pt_sdpa_query_len(const struct pt_sdpa_torch *t, const void *query) {
  int64_t hd;
  return pt_sdpa_query_dims(t, query, &hd);
}

int64_t pt_sdpa_query_dims(const struct pt_sdpa_torch *t, const void *query, int64_t *head_dim) {
  *head_dim = -1;
  if (!t->sym_size || !query || __atomic_load_n(&st.layout_ok, __ATOMIC_ACQUIRE) < 0) return -1;
  const unsigned char *impl;
  memcpy(&impl, query, sizeof impl);
  if (!impl) return -1;
  unsigned policy = (impl[PT_TI_POLICY_BYTE] >> PT_TI_POLICY_SHIFT) & PT_TI_POLICY_MASK;
  if (policy >= PT_TI_POLICY_CUSTOM_SIZES) return -1; /* symbolic or nested: not ours to read */
  int64_t nd, sz[4];
  memcpy(&nd, impl + PT_TI_NDIM, sizeof nd);
  if (nd != 4) {
    layout_refuted("rank of a cuDNN query is not 4");
    return -1;
  }
  memcpy(sz, impl + PT_TI_SIZES, sizeof sz);
  int64_t s0 = 0, s3 = 0;
  t->sym_size(&s0, query, 0);
  t->sym_size(&s3, query, -1);
  /* A symbolic answer here means the policy bits were misread; its node keeps
   * one reference (it cannot be released from C), once per process. */
  if (s0 < PT_SYMINT_MIN_INT || s3 < PT_SYMINT_MIN_INT) {
    layout_refuted("sizes are symbolic where the layout says concrete");
    return -1;
  }
  if (s0 != sz[0] || s3 != sz[3]) {
    layout_refuted("sizes disagree with at::native::sym_size");
    return -1;
  }
  if (sz[2] < 0) return -1;
  int zero = 0;
  if (__atomic_compare_exchange_n(&st.layout_ok, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    pt_debug("SDPA policy: torch's tensor layout confirmed");
  *head_dim = sz[3]; /* confirmed by sym_size(q, -1) above */
  return sz[2];
}

/* Cleared on every exit from the second ask, also when torch throws through
 * it (this file is built with -fexceptions for that). */
static void probe_end(int *p) {
  (void)p;
  probing = 0;
}

/* torch's choice for the call with cuDNN reading as disabled (this thread only). */
static int64_t ask_again(const struct pt_sdpa_torch *t, void *call) {
  int guard __attribute__((cleanup(probe_end))) = 0;
  (void)guard;
  probing = 1;
  return t->choose(call);
}

int64_t pt_sdpa_choose(const struct pt_sdpa_torch *t, void *call, const void *query) {
  int64_t r = t->choose(call);
  if (probing || !pt_opt_bool(PT_OPT_ENABLE) || pt_opt_enum(PT_OPT_TORCH_SDPA) != PT_TORCH_SDPA_AUTO)
    return r;
  if (!__atomic_load_n(&seen, __ATOMIC_RELAXED)) __atomic_store_n(&seen, 1, __ATOMIC_RELAXED);
  BUMP(calls);
  if (r != PT_SDP_CUDNN) {
    BUMP(not_cudnn);
    return r;
  }
  int64_t hd;
  int64_t q = pt_sdpa_query_dims(t, query, &hd);
  if (q < 0 && __atomic_load_n(&st.layout_ok, __ATOMIC_ACQUIRE) >= 0) {
    BUMP(unknown_len);
    return r;
  }
  if (q > PT_SDPA_DECODE_MAX_Q) {
    /* Prefill leaves cuDNN only for Ponytail's prefill kernel, which replaces
     * torch's flash launch: torch's own flash prefill is slower than cuDNN. */
    if (!t->prefill_ok || !t->math_enabled || !t->prefill_ok(call, hd) || !t->math_enabled() ||
        ask_again(t, call) != PT_SDP_FLASH) {
      if (BUMP(prefill_kept) == 1) pt_info("SDPA policy: prefill (query length %lld) stays on cuDNN", (long long)q);
      return r;
    }
    if (BUMP(prefill_flash) == 1)
      pt_info("SDPA policy: prefill (query length %lld) moves from cuDNN to flash, for Ponytail's prefill kernel",
              (long long)q);
    return PT_SDP_FLASH;
  }
  if (!t->math_enabled || !t->math_enabled()) {
    BUMP(decode_kept);
    return r;
  }
  const int64_t r2 = ask_again(t, call);
  if (r2 == PT_SDP_FLASH) {
    if (BUMP(decode_flash) == 1)
      pt_info("SDPA policy: decode (query length %lld) moves from cuDNN to flash", (long long)q);
    return r2;
  }
  if (r2 == PT_SDP_EFFICIENT) {
    if (BUMP(decode_mem_eff) == 1)
      pt_info("SDPA policy: decode (query length %lld) moves from cuDNN to mem-efficient", (long long)q);
    return r2;
  }
  BUMP(decode_kept);
  return r;
}
