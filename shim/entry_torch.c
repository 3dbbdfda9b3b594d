/* PyTorch's SDPA backend choice, interposed for the per-call policy
 * (hooks/torch_sdpa.h, docs/hooks.md "SDPA backend per call").
 *
 * Two C++ functions of torch are exported under their mangled names:
 *  - at::native::_fused_sdp_choice_cuda (libtorch_cuda): every CUDA SDPA call
 *    asks it for a backend, through its PLT or through the dispatch stub
 *    whose pointer libtorch_cuda takes through its GOT; both bind to the
 *    first definition in the global scope, the preloaded shim's;
 *  - at::Context::userEnabledCuDNNSDP() const (libtorch_cpu), which torch's
 *    cuDNN check reads on every choice: false on the thread while the policy
 *    asks again without cuDNN (hooks/torch_sdpa.c), else torch's answer.
 * Verified on torch 2.11.0+cu130 (both have JUMP_SLOT relocations in
 * libtorch_cuda.so). A torch that binds them internally never calls these,
 * and stays on its own choice; the cuDNN fallback reason then says so.
 *
 * The C prototypes match the x86-64 and AArch64 calling conventions of the
 * C++ ones: at::Tensor const& and std::optional<at::Tensor> const& are
 * pointers, std::optional<double> is a trivially copyable {double, bool}
 * passed by value like the C struct below.
 *
 * The real functions live in libraries torch loads with RTLD_LOCAL, out of
 * dlsym(RTLD_NEXT)'s reach: they are looked up in each loaded object but the
 * shim (dlopen RTLD_NOLOAD + dlsym), once. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "hooks/torch_sdpa.h"
#include "kernels/attn.h"
#include "shim/real.h"
#include "shim/shim.h"
#include "common/log.h"
#include "common/options.h"

#define PT_SYM_CHOICE "_ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb"
#define PT_SYM_CUDNN_ENABLED "_ZNK2at7Context19userEnabledCuDNNSDPEv"
#define PT_SYM_MATH_ENABLED "_ZNK2at7Context18userEnabledMathSDPEv"
#define PT_SYM_GLOBAL_CONTEXT "_ZN2at13globalContextEv"
#define PT_SYM_SYM_SIZE "_ZN2at6native8sym_sizeERKNS_6TensorEl"

struct pt_opt_double {
  double v;
  bool has;
};
typedef int64_t (*pt_choice_fn)(const void *, const void *, const void *, const void *, double, bool,
                                struct pt_opt_double, bool);
typedef bool (*pt_ctx_flag_fn)(const void *ctx);
typedef void *(*pt_ctx_fn)(void);
typedef void (*pt_sym_size_fn)(int64_t *out, const void *tensor, int64_t dim);

/* ---- finding torch's own definitions ----------------------------------- */

#define PT_MAX_OBJECTS 4096

struct pt_objects {
  void *self_base; /* the shim's load address: its own definitions are skipped */
  const char *name[PT_MAX_OBJECTS];
  size_t n;
};

/* Collects the names only: dlopen is not called with the loader's list lock
 * held. The strings belong to the loaded objects, which stay loaded. */
static int pt_collect(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct pt_objects *o = data;
  if (!info->dlpi_name || !info->dlpi_name[0] || (void *)info->dlpi_addr == o->self_base) return 0;
  if (o->n < PT_MAX_OBJECTS) o->name[o->n++] = info->dlpi_name;
  return 0;
}

static void *pt_lookup_in(const char *object, const char *name, void *self_base) {
  void *h = dlopen(object, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return NULL;
  void *p = dlsym(h, name);
  Dl_info di;
  if (p && (!dladdr(p, &di) || di.dli_fbase == self_base)) p = NULL;
  dlclose(h);
  return p;
}

/* The first definition of name in a loaded object other than the shim,
 * torch's own libraries first. */
static void *pt_torch_sym(const char *name) {
  Dl_info self;
  if (!dladdr((void *)pt_torch_sym, &self)) return NULL;
  static struct pt_objects o; /* large; resolution is rare and serialised below */
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  void *p = NULL;
  pthread_mutex_lock(&mu);
  o.self_base = self.dli_fbase;
  o.n = 0;
  dl_iterate_phdr(pt_collect, &o);
  for (int pass = 0; pass < 2 && !p; pass++)
    for (size_t i = 0; i < o.n && !p; i++) {
      const char *base = strrchr(o.name[i], '/');
      base = base ? base + 1 : o.name[i];
      if ((strncmp(base, "libtorch", 8) == 0) == (pass == 0)) p = pt_lookup_in(o.name[i], name, o.self_base);
    }
  pthread_mutex_unlock(&mu);
  return p;
}

/* Resolved once; a failed lookup is remembered too (torch does not load new
 * copies of itself). */
#define PT_MISSING ((void *)1)
static void *pt_torch_lazy(void **slot, const char *name) {
  void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (PT_LIKELY(p != NULL)) return p == PT_MISSING ? NULL : p;
  p = pt_torch_sym(name);
  __atomic_store_n(slot, p ? p : PT_MISSING, __ATOMIC_RELEASE);
  if (!p) pt_debug("torch: %s not found in any loaded library", name);
  return p;
}

static void *real_choice, *real_cudnn_enabled, *real_math_enabled, *real_global_context, *real_sym_size;

/* ---- the policy's view of torch ----------------------------------------- */

struct pt_choice_call {
  pt_choice_fn real;
  const void *q, *k, *v, *mask;
  double dropout;
  bool causal, gqa;
  struct pt_opt_double scale;
};

static int64_t pt_choice_again(void *c) {
  const struct pt_choice_call *a = c;
  return a->real(a->q, a->k, a->v, a->mask, a->dropout, a->causal, a->scale, a->gqa);
}

static int pt_math_enabled(void) {
  pt_ctx_fn ctx = (pt_ctx_fn)pt_torch_lazy(&real_global_context, PT_SYM_GLOBAL_CONTEXT);
  pt_ctx_flag_fn math = (pt_ctx_flag_fn)pt_torch_lazy(&real_math_enabled, PT_SYM_MATH_ENABLED);
  return ctx && math && math(ctx());
}

/* For the SDPA policy: Ponytail's prefill kernel would take this prefill call
 * of this head_dim: PONYTAIL_ATTN_PREFILL=1 with the attention swap on, no
 * dropout and a positive scale (the swap refuses the others, and torch's own
 * flash kernel would then run, slower than cuDNN), and the current context's
 * GPU one the kernel runs on, its module not known to have failed there. */
static int pt_prefill_ok(void *call, int64_t head_dim) {
  const struct pt_choice_call *a = call;
  if (!(head_dim == 64 || head_dim == 128) || !pt_opt_bool(PT_OPT_ATTN_PREFILL) ||
      pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF || a->dropout != 0.0 || (a->scale.has && !(a->scale.v > 0.0)))
    return 0;
  /* pt_real_driver: the driver table is filled on first use, which an SDPA
   * call may precede. */
  return pt_real_driver() && pt_attn_prefill_available();
}

PT_EXPORT int64_t _ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb(
    const void *q, const void *k, const void *v, const void *mask, double dropout, bool causal,
    struct pt_opt_double scale, bool gqa) {
  pt_choice_fn real = (pt_choice_fn)pt_torch_lazy(&real_choice, PT_SYM_CHOICE);
  if (PT_UNLIKELY(!real)) {
    /* Called, yet torch's definition is nowhere: math is correct for any
     * input the others accept. */
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      pt_error("torch: SDPA choice called but torch's own definition was not found; answering math");
    PT_INTERNAL_ERROR();
    return PT_SDP_MATH;
  }
  if (!pt_active()) return real(q, k, v, mask, dropout, causal, scale, gqa);
  struct pt_choice_call c = {real, q, k, v, mask, dropout, causal, gqa, scale};
  struct pt_sdpa_torch t = {
      .choose = pt_choice_again,
#if defined(__x86_64__)
      /* c10::SymInt comes back through the hidden result pointer, the first
       * integer argument on x86-64 (AArch64 uses x8: no size reads there). */
      .sym_size = (pt_sym_size_fn)pt_torch_lazy(&real_sym_size, PT_SYM_SYM_SIZE),
#endif
      .math_enabled = pt_math_enabled,
      .prefill_ok = pt_prefill_ok,
  };
  return pt_sdpa_choose(&t, &c, q);
}

PT_EXPORT bool _ZNK2at7Context19userEnabledCuDNNSDPEv(const void *ctx) {
  if (pt_sdpa_probing()) return false;
  pt_ctx_flag_fn real = (pt_ctx_flag_fn)pt_torch_lazy(&real_cudnn_enabled, PT_SYM_CUDNN_ENABLED);
  if (PT_UNLIKELY(!real)) {
    PT_INTERNAL_ERROR();
    return true; /* torch's default */
  }
  return real(ctx);
}
