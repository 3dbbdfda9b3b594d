/* A crash reporter to preload before the shim:
 *   LD_PRELOAD=segv_bt.so:libponytail_shim.so prog
 * On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT it writes to stderr (and to
 * $SEGV_BT_FILE when set; %p there is the pid): the signal, si_code, the
 * faulting address (si_addr), the thread, the instruction pointer from the
 * ucontext with the object it lies in (file, load base, offset: feed the
 * offset to addr2line -e FILE) and the faulting thread's backtrace
 * (backtrace_symbols_fd), each frame with its object and offset;
 * then the default action runs (the signal is re-raised).
 * Build: gcc -O1 -g -shared -fPIC -rdynamic -o segv_bt.so segv_bt.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int out_fd[2] = {2, -1};
static const char *out_pattern; /* $SEGV_BT_FILE; expanded and opened only on a crash */
static char altstack[1 << 16];

static void say(const char *msg) {
  for (int i = 0; i < 2; i++)
    if (out_fd[i] >= 0) {
      const char *s = msg;
      size_t n = strlen(s);
      while (n) {
        ssize_t w = write(out_fd[i], s, n);
        if (w <= 0) break;
        s += w, n -= (size_t)w;
      }
    }
}

static const char *signame(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  case SIGABRT: return "SIGABRT";
  default: return "signal";
  }
}

static void where(const char *label, void *pc) {
  char line[1024];
  Dl_info di;
  if (pc && dladdr(pc, &di) && di.dli_fname) {
    snprintf(line, sizeof line, "segv_bt: %s %p in %s (base %p, offset 0x%lx) %s%s\n", label, pc, di.dli_fname,
             di.dli_fbase, (unsigned long)((char *)pc - (char *)di.dli_fbase), di.dli_sname ? di.dli_sname : "",
             di.dli_sname ? "" : "(no symbol)");
  } else {
    snprintf(line, sizeof line, "segv_bt: %s %p (not in a loaded object)\n", label, pc);
  }
  say(line);
}

static void handler(int sig, siginfo_t *si, void *uc_) {
  ucontext_t *uc = (ucontext_t *)uc_;
  char line[512];
  if (out_pattern) {
    char path[4096];
    size_t j = 0;
    for (size_t i = 0; out_pattern[i] && j + 16 < sizeof path; i++) {
      if (out_pattern[i] == '%' && out_pattern[i + 1] == 'p') {
        j += (size_t)snprintf(path + j, sizeof path - j, "%d", (int)getpid());
        i++;
      } else {
        path[j++] = out_pattern[i];
      }
    }
    path[j] = 0;
    out_fd[1] = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  snprintf(line, sizeof line, "\nsegv_bt: %s (signal %d, si_code %d) in pid %d thread %ld, fault address %p\n",
           signame(sig), sig, si ? si->si_code : 0, (int)getpid(), (long)syscall(SYS_gettid),
           si ? si->si_addr : NULL);
  say(line);
  void *pc = NULL;
#if defined(__x86_64__)
  if (uc) {
    pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
    snprintf(line, sizeof line, "segv_bt: RIP %p RSP %p RBP %p RDI %p RSI %p RDX %p RAX %p\n", pc,
             (void *)uc->uc_mcontext.gregs[REG_RSP], (void *)uc->uc_mcontext.gregs[REG_RBP],
             (void *)uc->uc_mcontext.gregs[REG_RDI], (void *)uc->uc_mcontext.gregs[REG_RSI],
             (void *)uc->uc_mcontext.gregs[REG_RDX], (void *)uc->uc_mcontext.gregs[REG_RAX]);
    say(line);
  }
#elif defined(__aarch64__)
  if (uc) pc = (void *)uc->uc_mcontext.pc;
#endif
  where("instruction", pc);
  void *frames[128];
  int n = backtrace(frames, 128);
  say("segv_bt: backtrace of the faulting thread:\n");
  for (int i = 0; i < 2; i++)
    if (out_fd[i] >= 0) backtrace_symbols_fd(frames, n, out_fd[i]);
  for (int i = 0; i < n; i++) {
    char label[32];
    snprintf(label, sizeof label, "frame %2d", i);
    where(label, frames[i]);
  }
  say("segv_bt: end of report\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void segv_bt_init(void) {
  const char *f = getenv("SEGV_BT_FILE");
  if (f && *f) out_pattern = strdup(f);
  void *warm[2];
  (void)backtrace(warm, 2); /* loads libgcc_s now, not inside the handler */
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}
