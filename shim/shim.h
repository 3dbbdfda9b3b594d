/* Shim internals shared by the entry points: the once-init state, per-symbol
 * call counters, the table of real functions and the thread-local "inside a
 * runtime call" flag. Only for the shim's own files; the layers below
 * (allocator/, kernels/, hooks/) include no shim header at all: the shim
 * hands them what they need (shim/init.c, pt_compose). */
#ifndef PT_SHIM_H
#define PT_SHIM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PT_EXPORT __attribute__((visibility("default")))
#define PT_LIKELY(x) __builtin_expect(!!(x), 1)
#define PT_UNLIKELY(x) __builtin_expect(!!(x), 0)

enum pt_sym_kind { PT_SYM_KIND_RT, PT_SYM_KIND_DRV, PT_SYM_KIND_RTX };

enum pt_sym {
#define PT_SYM(name, kind) PT_SYM_##name,
#include "shim/syms.def"
#undef PT_SYM
  PT_SYM_COUNT
};

extern const char *const pt_sym_name[PT_SYM_COUNT];
extern const unsigned char pt_sym_kind[PT_SYM_COUNT];
/* Exact-name lookup; -1 when not a shim symbol. */
int pt_sym_find(const char *name);

/* ---- once-init ---------------------------------------------------------- */
/* PT_STATE_FORKED: on, in a forked child that has not yet made an
 * intercepted call; its first one starts the child's own background threads
 * (shim/init.c). */
enum { PT_STATE_UNINIT = 0, PT_STATE_ON = 1, PT_STATE_OFF = 2, PT_STATE_FORKED = 3 };
extern int pt_state;
int pt_init(void); /* returns PT_STATE_ON or PT_STATE_OFF */

/* true: the shim is active (count, route, hook); false: pure pass-through. */
static inline bool pt_active(void) {
  int s = __atomic_load_n(&pt_state, __ATOMIC_ACQUIRE);
  if (PT_UNLIKELY(s != PT_STATE_ON && s != PT_STATE_OFF)) s = pt_init();
  return s == PT_STATE_ON;
}

/* ---- call counters ------------------------------------------------------ */
/* Per thread, without locked instructions: shim/counters.h (included at the
 * end of this header, since it needs the definitions above). */
#define PT_COUNT(sym) pt_count_call(PT_SYM_##sym)

/* Internal failures (counted, logged once, passed through). */
extern uint64_t pt_internal_errors;
#define PT_INTERNAL_ERROR() __atomic_fetch_add(&pt_internal_errors, 1, __ATOMIC_RELAXED)

/* ---- real functions ----------------------------------------------------- */
extern void *pt_real_fn[PT_SYM_COUNT];
void *pt_real_resolve(enum pt_sym s);
static inline void *pt_real(enum pt_sym s) {
  void *p = __atomic_load_n(&pt_real_fn[s], __ATOMIC_ACQUIRE);
  return PT_LIKELY(p != NULL) ? p : pt_real_resolve(s);
}
/* Records the real pointer of a DRV variant handed out by the driver (first
 * one wins); returns the pointer the wrapper will call. */
void *pt_real_offer(enum pt_sym s, void *p);
/* The real dlsym (glibc's), resolved with dlvsym; NULL only if glibc lacks it. */
void *pt_real_dlsym(void *handle, const char *name);
/* libcuda.so.1: RTLD_NOLOAD first, then a plain dlopen; NULL when absent. */
void *pt_real_libcuda(void);

/* ---- thread-local flags ------------------------------------------------- */
/* Set while a runtime entry point runs its real function: libcudart forwards
 * to driver functions it got from cuGetProcAddress (our wrappers), which then
 * count the call but neither re-count the kernel launch nor route again. */
extern __thread int pt_tls_in_rt __attribute__((tls_model("initial-exec")));

/* The real function of an exported wrapper, as its own type. */
#define PT_REAL(sym, type) ((type)pt_real(PT_SYM_##sym))
/* Runtime real call with the in-runtime flag set around it. */
#define PT_RT_CALL(var, call) \
  do {                        \
    pt_tls_in_rt++;           \
    var = call;               \
    pt_tls_in_rt--;           \
  } while (0)

/* Error codes returned when the real function cannot be found: what the
 * runtime returns without a driver, and what the driver stub returns. */
#define PT_RT_NO_DRIVER 35  /* cudaErrorInsufficientDriver */
#define PT_DRV_NO_DRIVER 34 /* CUDA_ERROR_STUB_LIBRARY */

#include "shim/counters.h"

#endif
