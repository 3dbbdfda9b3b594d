/* `ponytail doctor`: the shim itself: the file, that it loads (in a child, so
 * that a shim that crashes at load cannot take the doctor with it), the
 * LD_PRELOAD a user's run would inherit, and the kernels embedded in it (listed
 * with libelf; without libelf a GPU self-test that ran them settles it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/options.h"
#include "tools/commands/doctor.h"
#include "tools/lib/kernels.h"

/* dlopen(shim) in a child; 0 or -1 with dlerror in why. */
int pt_doctor_shim_loads(const char *shim, char *why, size_t len) {
  int fd[2];
  if (pipe(fd) != 0) {
    snprintf(why, len, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, len, "fork: %s", strerror(errno));
    close(fd[0]), close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    close(fd[0]);
    void *h = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      if (!e) e = "dlopen failed";
      ssize_t w = write(fd[1], e, strlen(e));
      (void)w;
      _exit(1);
    }
    _exit(0);
  }
  close(fd[1]);
  ssize_t n, got = 0;
  while ((n = read(fd[0], why + got, len - 1 - (size_t)got)) > 0 && (size_t)(got += n) < len - 1) {
  }
  why[got > 0 ? got : 0] = 0;
  close(fd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  if (!got) snprintf(why, len, "the loading process died (status %d)", st);
  return -1;
}

void pt_doctor_check_preload_env(void) {
  const char *pre = getenv("LD_PRELOAD");
  if (!pre || !*pre) {
    pt_doctor_add("LD_PRELOAD", ST_OK, 0, NULL, "not set (`ponytail run` preloads the shim itself)");
    return;
  }
  char *dup = strdup(pre), *save = NULL, missing[600] = "";
  for (char *t = dup ? strtok_r(dup, ": ", &save) : NULL; t; t = strtok_r(NULL, ": ", &save)) {
    /* a bare name is searched by ld.so like a library; only paths are checked */
    if (strchr(t, '/') && access(t, R_OK) != 0) {
      size_t l = strlen(missing);
      snprintf(missing + l, sizeof missing - l, "%s'%s'", l ? ", " : "", t);
    }
  }
  free(dup);
  if (missing[0])
    pt_doctor_add("LD_PRELOAD", ST_FAIL, 1,
        "fix or unset LD_PRELOAD (`ponytail run -- CMD` preloads the right shim itself)",
        "LD_PRELOAD names %s, which does not exist: every program started with it prints an ld.so error and "
        "runs without it", missing);
  else
    pt_doctor_add("LD_PRELOAD", ST_OK, 0, NULL, "%s (every entry exists)", pre);
}

static const char kernels_todo[] =
    "install the CUDA toolkit (nvcc) and rebuild the shim with its kernels: "
    "meson setup build -Dkernels=enabled && ninja -C build, or pip install . again with nvcc on PATH";

/* Why the kernel list could not be read (no libelf), when a GPU can settle it. */
static char kernels_unlisted[512];

/* kernels and kernel-arch without the list: proven when the self-test ran
 * Ponytail's kernels on this GPU (verified against torch's and fp32). */
void pt_doctor_check_kernels_by_running(const struct pt_doctor_gpu *g) {
  if (!kernels_unlisted[0]) return; /* listed, or settled without a GPU */
  const struct pt_doctor_check *st = pt_doctor_find("selftest");
  if (st && st->st == ST_OK) {
    pt_doctor_add("kernels", ST_OK, 1, NULL, "not listed (%s), but the self-test ran them", kernels_unlisted);
    pt_doctor_add("kernel-arch", ST_OK, 1, NULL, "Ponytail's decode kernels ran on this sm_%d%d GPU in the self-test",
        g->major, g->minor);
  } else {
    pt_doctor_add("kernels", ST_SKIP, 1, NULL, "cannot list the shim's kernels: %s", kernels_unlisted);
    pt_doctor_add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed, and the self-test did not run them)");
  }
}

/* Whether the file holds the bytes of `what` (a cubin's section name in an
 * uncompressed fatbin): a check that needs no libelf, which the GPU machine
 * may lack, so every build answers the prefill-kernel row the same way. The
 * mark is a section of the prefill kernel's cubin: its name is in no other
 * part of the shim (the launcher's C functions share the kernel names' prefix,
 * and an unstripped shim lists them). */
#define PT_PREFILL_CUBIN_MARK ".text.pt_attn_prefill_"
/* The same for the decode kernels, which every build with nvcc embeds. */
#define PT_DECODE_CUBIN_MARK ".text.pt_attn_decode_"
static int file_has(const char *path, const char *what) {
  size_t n = 0;
  char *b = pt_doctor_slurp(path, &n);
  const int found = b && memmem(b, n, what, strlen(what)) != NULL;
  free(b);
  return found;
}

/* Ponytail's prefill kernel: optional (without it prefill stays on torch's
 * cuDNN kernel), so never a failure; the row says whether it will run. The
 * options are read from this process's environment, which a run shares. */
void pt_doctor_check_prefill(const char *shim, const struct pt_doctor_gpu *g, const char *nogpu) {
  if (!file_has(shim, PT_PREFILL_CUBIN_MARK))
    pt_doctor_add("prefill-kernel", ST_SKIP, 0, NULL,
        "not in this build (its sm_90a fatbin needs nvcc with sm_90a): prefill stays on cuDNN");
  else if (!g->ok)
    pt_doctor_add("prefill-kernel", ST_SKIP, 0, NULL, "(no GPU: %s)", nogpu);
  else if (!pt_opt_bool(PT_OPT_ENABLE) || pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF ||
           !pt_opt_bool(PT_OPT_ATTN_PREFILL))
    pt_doctor_add("prefill-kernel", ST_SKIP, 0, NULL, "off (%s): prefill stays on cuDNN",
        !pt_opt_bool(PT_OPT_ENABLE) ? "PONYTAIL_ENABLE=0"
        : pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF ? "PONYTAIL_ATTN=off" : "PONYTAIL_ATTN_PREFILL=0");
  else if (g->major == 9 && g->minor == 0 && pt_opt_enum(PT_OPT_TORCH_SDPA) == PT_TORCH_SDPA_KEEP)
    pt_doctor_add("prefill-kernel", ST_OK, 0, NULL,
        "sm_90a cubin for this GPU; with PONYTAIL_TORCH_SDPA=keep SDPA keeps cuDNN for prefill unless the "
        "program asks for flash, whose prefill launches Ponytail's kernel then replaces");
  else if (g->major == 9 && g->minor == 0)
    pt_doctor_add("prefill-kernel", ST_OK, 0, NULL,
        "sm_90a cubin for this GPU: prefill without a mask (head_dim 64/128, fp16/bf16) runs on Ponytail's "
        "prefill kernel");
  else
    pt_doctor_add("prefill-kernel", ST_SKIP, 0, NULL,
        "built for sm_90a (H100/H200) only; on this sm_%d%d GPU prefill stays on cuDNN", g->major, g->minor);
}

/* cubin sm_XY runs on X.Z for Z >= Y; PTX compute_XY is JIT-compiled for any cc >= XY. */
void pt_doctor_check_kernels(const char *shim, const struct pt_doctor_gpu *g, const char *nogpu) {
  struct pt_kernel_list l = {0};
  char err[512];
  if (pt_kernels_scan_file(shim, &l, err, sizeof err) != 0) {
    if (strstr(err, "libelf") && !file_has(shim, PT_DECODE_CUBIN_MARK)) {
      /* Without libelf the list cannot be read, but the bytes tell a shim built without nvcc
       * (a pip install on a machine with no CUDA toolkit): it holds no decode cubin at all. */
      pt_doctor_add("kernels", ST_FAIL, 1, kernels_todo,
                    "kernels not built: %s holds no Ponytail kernel (no %s* section; the full list needs libelf)",
                    shim, PT_DECODE_CUBIN_MARK);
      pt_doctor_add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels)");
      pt_kernel_list_free(&l);
      return;
    }
    if (strstr(err, "libelf") && g->ok) {
      /* Decided after the GPU checks: a self-test that ran Ponytail's kernels
       * on this GPU proves both (the GPU machine has no libelf). */
      snprintf(kernels_unlisted, sizeof kernels_unlisted, "%s", err);
      pt_kernel_list_free(&l);
      return;
    }
    if (strstr(err, "libelf"))
      pt_doctor_add("kernels", ST_SKIP, 1, NULL, "cannot list the shim's kernels: %s", err);
    else
      pt_doctor_add("kernels", ST_FAIL, 1, kernels_todo, "kernels not built: %s", err);
    pt_doctor_add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed)");
    pt_kernel_list_free(&l);
    return;
  }
  char archs[256] = "";
  size_t npt = 0;
  int cubin_ok = 0, ptx_ok = 0, cc = g->major * 10 + g->minor;
  for (size_t i = 0; i < l.n; i++) {
    const struct pt_fatbin_kernel *k = &l.k[i];
    if (strncmp(k->name, "pt_attn_", 8) != 0) continue;
    npt++;
    if (!strstr(archs, k->arch)) {
      size_t n = strlen(archs);
      snprintf(archs + n, sizeof archs - n, "%s%s", n ? ", " : "", k->arch);
    }
    unsigned a = 0;
    if (sscanf(k->arch, k->ptx ? "compute_%u" : "sm_%u", &a) == 1 && g->ok) {
      if (!k->ptx && (int)a / 10 == g->major && (int)a % 10 <= g->minor) cubin_ok = 1;
      if (k->ptx && (int)a <= cc) ptx_ok = 1;
    }
  }
  pt_kernel_list_free(&l);
  if (!npt) {
    pt_doctor_add("kernels", ST_FAIL, 1, kernels_todo, "kernels not built: %s has no pt_attn_* kernels", shim);
    pt_doctor_add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed)");
    return;
  }
  pt_doctor_add("kernels", ST_OK, 1, NULL, "%zu Ponytail kernel entries (%s)", npt, archs);
  if (!g->ok)
    pt_doctor_add("kernel-arch", ST_SKIP, 1, NULL, "(no GPU: %s)", nogpu);
  else if (cubin_ok)
    pt_doctor_add("kernel-arch", ST_OK, 1, NULL, "cubin for this sm_%d%d GPU", g->major, g->minor);
  else if (ptx_ok)
    pt_doctor_add("kernel-arch", ST_OK, 1, NULL, "no sm_%d%d cubin; the PTX is JIT-compiled at first use (slower start)",
        g->major, g->minor);
  else {
    char todo[256];
    snprintf(todo, sizeof todo, "add -gencode=arch=compute_%d%d,code=sm_%d%d to kernels/meson.build and rebuild",
             g->major, g->minor, g->major, g->minor);
    pt_doctor_add("kernel-arch", ST_FAIL, 1, todo, "no code for sm_%d%d (the shim has %s): attention falls back to torch",
        g->major, g->minor, archs);
  }
}
