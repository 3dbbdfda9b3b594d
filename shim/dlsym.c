/* dlsym interposition.
 *
 * cuDNN, cuBLAS, Triton and libcudart itself reach the driver through
 * dlopen("libcuda.so.1") + dlsym, never through the global scope, so the shim
 * exports dlsym and hands out its wrappers for the exact names it implements.
 *
 * RTLD_NEXT: glibc resolves "next" relative to the object that called dlsym,
 * which it finds from dlsym's return address. Forwarding through a C wrapper
 * would make the shim the caller. So dlsym is a small assembly entry: for
 * RTLD_NEXT it tail-jumps into glibc's dlsym with the caller's return address
 * untouched (exact glibc semantics, including preloads after the shim and
 * dlopen'ed callers); for any other handle it jumps to pt_dlsym_c, which calls
 * the real dlsym and applies the routing. No substitution is needed on the
 * RTLD_NEXT path: if the shim is "next", glibc already finds its exports.
 *
 * The real dlsym comes from dlvsym (by glibc version), never from
 * __libc_dlsym. A thread-local guard makes nested calls (a dlsym from inside
 * our routing) plain pass-through. */
#include <dlfcn.h>
#include <string.h>

#include "shim/entry_drv.h"
#include "shim/shim.h"

void *pt_dlsym_resolve(void);                 /* shim/real.c */
void *pt_dlsym_c(void *handle, const char *name) __attribute__((used));

static __thread int pt_in_dlsym __attribute__((tls_model("initial-exec")));

/* true when a and b lie in the same loaded object. */
static int pt_same_object(const void *a, const void *b) {
  Dl_info ia, ib;
  if (!dladdr(a, &ia) || !dladdr(b, &ib)) return 0;
  return ia.dli_fbase == ib.dli_fbase;
}

/* The wrapper to return instead of p (the real lookup's result), or p. */
static void *pt_dlsym_route(int s, void *p) {
  if (!pt_active()) return p;
  if (p == pt_wrapper[s]) return p;
  switch (pt_sym_kind[s]) {
  case PT_SYM_KIND_DRV: {
    /* Only the function of the libcuda.so.1 our wrapper forwards to: a
     * same-named symbol of another library, or of a second libcuda copy
     * (dlmopen namespaces), is not ours to wrap. */
    void *mine = pt_real((enum pt_sym)s);
    if (!mine || (mine != p && !pt_same_object(mine, p))) return p;
    void *w = pt_drv_substitute((enum pt_sym)s, p);
    return w ? w : p;
  }
  case PT_SYM_KIND_RT:
    /* A lookup in a libcudart handle: substitute only when it is the very
     * function our wrapper forwards to (a second runtime copy is left alone). */
    return pt_real((enum pt_sym)s) == p ? pt_wrapper[s] : p;
  default:
    return p;
  }
}

/* Not instrumented: sanitizer runtimes call dlsym while they initialise. */
__attribute__((no_sanitize("address", "undefined"))) void *pt_dlsym_c(void *handle, const char *name) {
  void *(*real)(void *, const char *) = (void *(*)(void *, const char *))pt_dlsym_resolve();
  if (!real) return NULL;
  if (pt_in_dlsym) return real(handle, name);
  pt_in_dlsym = 1;
  void *p = real(handle, name);
  if (p) {
    int s = pt_sym_find(name);
    if (s >= 0) p = pt_dlsym_route(s, p);
  }
  pt_in_dlsym = 0;
  return p;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  endbr64\n"
        "  cmpq $-1, %rdi\n"           /* RTLD_NEXT == (void *)-1 */
        "  jne pt_dlsym_c\n"
        "  movq pt_dlsym_real(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  jmp *%rax\n"                /* caller's return address intact */
        "1:\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"            /* 16-byte alignment for the call */
        "  .cfi_adjust_cfa_offset 8\n"
        "  call pt_dlsym_resolve\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testq %rax, %rax\n"
        "  jz 2f\n"
        "  jmp *%rax\n"
        "2:\n"
        "  xorl %eax, %eax\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
/* Same logic; not exercised by the CPU tests (x86_64 only so far). */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  cmn x0, #1\n"
        "  b.eq 3f\n"
        "  b pt_dlsym_c\n"
        "3:\n"
        "  adrp x16, pt_dlsym_real\n"
        "  ldr x16, [x16, :lo12:pt_dlsym_real]\n"
        "  cbz x16, 1f\n"
        "  br x16\n"
        "1:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl pt_dlsym_resolve\n"
        "  mov x16, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  cbz x16, 2f\n"
        "  br x16\n"
        "2:\n"
        "  mov x0, #0\n"
        "  ret\n"
        ".size dlsym, .-dlsym\n");
#else
/* Portable fallback: RTLD_NEXT is resolved relative to the shim, which is
 * right for callers loaded before it (the main program) only. */
PT_EXPORT void *dlsym(void *handle, const char *name) {
  if (handle == RTLD_NEXT) {
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))pt_dlsym_resolve();
    return real ? real(handle, name) : NULL;
  }
  return pt_dlsym_c(handle, name);
}
#endif
