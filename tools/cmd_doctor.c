/* `ponytail doctor`: checks this machine the way a user's run does and says
 * what is wrong and what to do. Driver, GPU, runtime, shim and its kernels
 * are checked here in C (libcuda/libcudart are dlopen'ed, never linked);
 * torch, the shim inside a python process, the SDPA path and the attention
 * self-test through tools/doctor.py, embedded at build time (doctor_py.h)
 * and run as `PY -c SCRIPT` with a timeout. Exit 0 only when every needed
 * check passed; 1 otherwise (a check that could not run counts as not
 * passed); 2 usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "tools/cmd.h"
#include "tools/json.h"
#include "tools/kernels.h"
#include "tools/shimpath.h"
#include "tools/spawn.h"

#include "doctor_py.h" /* static const char pt_doctor_py[]: tools/doctor.py */

extern char **environ;

static void usage(FILE *f) {
  fprintf(f,
"usage: ponytail doctor [--json] [--shim PATH] [--python PY] [--model-config FILE]\n"
"                       [--batch N] [--prompt N] [--timeout S]\n"
"\n"
"Checks what a run under Ponytail needs, one line per check ([ ok ], [FAIL] with what\n"
"to do, [skip] with why it could not be checked), then a verdict:\n"
"  driver, gpu      libcuda.so.1 (path, CUDA version it supports), device 0's name and\n"
"                   compute capability\n"
"  toolkit, runtime the CUDA headers this ponytail was built with; libcudart.so.13 on\n"
"                   the library path and its version\n"
"  shim, shim-load  the shim file and that it loads (dlopen in a child); LD_PRELOAD\n"
"                   entries that do not exist\n"
"  kernels, kernel-arch  Ponytail's embedded kernels, and code (cubin or PTX) for the GPU\n"
"  prefill-kernel   whether Ponytail's prefill kernel (sm_90a) will run prefill here:\n"
"                   built, a GPU of compute capability 9.0, PONYTAIL_ATTN_PREFILL on\n"
"                   (optional: without it prefill stays on cuDNN)\n"
"  python, torch, torch-cuda  PY imports torch, torch's CUDA, torch.cuda.is_available()\n"
"  shim-python      the shim is mapped in a python process started with it preloaded\n"
"  launches, libraries  (GPU) a tiny torch op under the shim: the shim counts its launches;\n"
"                   the libcudart/libcuda the process binds\n"
"  attention, attention-padded  (GPU) the SDPA backend of the decode shape from\n"
"                   --model-config/--batch/--prompt, unmasked and padded, and whether\n"
"                   Ponytail swaps it\n"
"  selftest         (GPU) decode SDPA, bf16/fp16 x head_dim 64/128 (and masked decode unless\n"
"                   PONYTAIL_ATTN_MASKED=0), under PONYTAIL_ATTN=verify: error against an\n"
"                   fp32 reference <= 1e-2, the shim's verified > 0, failures 0\n"
"\n"
"  --json               one JSON object: {\"checks\": [{\"name\", \"status\", \"needed\",\n"
"                       \"finding\", \"what_to_do\"}], \"ready\", \"verdict\"}\n"
"  --shim PATH          the shim to check (default: the one that belongs to this ponytail)\n"
"  --python PY          the python that runs the workload (default python3)\n"
"  --model-config FILE  Hugging Face config.json (default examples/llama-1b-config.json)\n"
"  --batch N            batch of the attention-path check (default 8)\n"
"  --prompt N           prompt length, the KV length of the decode step (default 512)\n"
"  --timeout S          limit for each python run, seconds (default 300)\n"
"  -h, --help           this help\n"
"\n"
"Exit status: 0 everything Ponytail needs is in place, 1 something needed is missing,\n"
"broken or could not be checked (e.g. no GPU), 2 bad arguments.\n");
}

/* Appends sep (when buf is not empty) and s to buf[size], truncating. */
static void append(char *buf, size_t size, const char *sep, const char *s) {
  size_t n = strlen(buf);
  if (n && n + 1 < size) {
    size_t m = strlen(sep) < size - n - 1 ? strlen(sep) : size - n - 1;
    memcpy(buf + n, sep, m), n += m, buf[n] = 0;
  }
  size_t m = strlen(s) < size - n - 1 ? strlen(s) : size - n - 1;
  memcpy(buf + n, s, m), buf[n + m] = 0;
}

/* ---- the check list ---- */

enum { ST_OK, ST_FAIL, ST_SKIP };
static const char *const st_tag[] = {"[ ok ]", "[FAIL]", "[skip]"};
static const char *const st_name[] = {"ok", "fail", "skip"};

struct check {
  char name[24];
  int st, needed;
  char finding[768];
  char todo[512];
};

static struct check checks[40];
static int nchecks, json_out;

__attribute__((format(printf, 5, 6)))
static void add(const char *name, int st, int needed, const char *todo, const char *fmt, ...) {
  if (nchecks >= (int)(sizeof checks / sizeof checks[0])) return;
  struct check *c = &checks[nchecks++];
  snprintf(c->name, sizeof c->name, "%s", name);
  c->st = st, c->needed = needed;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->finding, sizeof c->finding, fmt, ap);
  va_end(ap);
  snprintf(c->todo, sizeof c->todo, "%s", st == ST_FAIL && todo ? todo : "");
  if (json_out) return;
  printf("%s %-16s %s\n", st_tag[st], c->name, c->finding);
  if (c->todo[0]) printf("       %-16s what to do: %s\n", "", c->todo);
  fflush(stdout);
}

/* ---- driver and runtime, in this process ---- */

struct gpu {
  int have_lib, init_ok, drv_ver, count, major, minor, ok;
  char lib[PATH_MAX], name[256], why[PATH_MAX + 256];
};

static void lib_path(void *h, const char *dflt, char *out, size_t len) {
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) {
    char real[PATH_MAX];
    snprintf(out, len, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
  } else {
    snprintf(out, len, "%s", dflt);
  }
}

static void probe_gpu(struct gpu *g) {
  memset(g, 0, sizeof *g);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g->why, sizeof g->why, "libcuda.so.1 cannot be loaded (%s)", e ? e : "?");
    return;
  }
  g->have_lib = 1;
  lib_path(h, "libcuda.so.1", g->lib, sizeof g->lib);
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
  CUresult (*ver)(int *) = (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
  CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(h, "cuDeviceGetCount");
  CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
      (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(h, "cuDeviceGetAttribute");
  CUresult (*name)(char *, int, CUdevice) = (CUresult(*)(char *, int, CUdevice))dlsym(h, "cuDeviceGetName");
  if (!init || !count || !get || !attr) {
    snprintf(g->why, sizeof g->why, "%s lacks cuInit/cuDeviceGetCount/cuDeviceGet/cuDeviceGetAttribute", g->lib);
    return;
  }
  if (ver) ver(&g->drv_ver);
  CUresult rc = init(0);
  if (rc != CUDA_SUCCESS) {
    snprintf(g->why, sizeof g->why, "cuInit failed with CUDA error %d (driver present, no usable device)", (int)rc);
    return;
  }
  g->init_ok = 1;
  if (count(&g->count) != CUDA_SUCCESS || g->count < 1) {
    snprintf(g->why, sizeof g->why, "the driver reports no CUDA device");
    g->count = 0;
    return;
  }
  CUdevice d = 0;
  if (get(&d, 0) != CUDA_SUCCESS ||
      attr(&g->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) != CUDA_SUCCESS ||
      attr(&g->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) != CUDA_SUCCESS) {
    snprintf(g->why, sizeof g->why, "device 0's compute capability cannot be read");
    return;
  }
  if (!name || name(g->name, sizeof g->name, d) != CUDA_SUCCESS) snprintf(g->name, sizeof g->name, "(name unknown)");
  g->ok = 1;
}

static void check_driver_gpu(struct gpu *g) {
  int built_major = CUDA_VERSION / 1000, built_minor = CUDA_VERSION % 1000 / 10;
  add("toolkit", ST_OK, 0, NULL, "built against the CUDA %d.%d headers (CUDA_VERSION %d)", built_major, built_minor,
      CUDA_VERSION);
  if (!g->have_lib) {
    add("driver", ST_FAIL, 1,
        "install the NVIDIA driver (it brings libcuda.so.1), or add its directory to LD_LIBRARY_PATH",
        "%s: no NVIDIA driver", g->why);
  } else if (g->drv_ver && g->drv_ver / 1000 < built_major) {
    char todo[256];
    snprintf(todo, sizeof todo, "update the NVIDIA driver to one that supports CUDA %d", built_major);
    add("driver", ST_FAIL, 1, todo, "%s supports CUDA %d.%d, older than the CUDA %d.%d Ponytail was built for", g->lib,
        g->drv_ver / 1000, g->drv_ver % 1000 / 10, built_major, built_minor);
  } else if (!g->init_ok) {
    add("driver", ST_FAIL, 1, "check `nvidia-smi`: the driver is installed but no device is usable",
        "%s (CUDA %d.%d): %s", g->lib, g->drv_ver / 1000, g->drv_ver % 1000 / 10, g->why);
  } else {
    add("driver", ST_OK, 1, NULL, "%s, supports CUDA up to %d.%d", g->lib, g->drv_ver / 1000, g->drv_ver % 1000 / 10);
  }
  if (g->ok)
    add("gpu", ST_OK, 1, NULL, "%d device%s; device 0: %s, compute capability %d.%d (sm_%d%d)", g->count,
        g->count == 1 ? "" : "s", g->name, g->major, g->minor, g->major, g->minor);
  else
    add("gpu", ST_FAIL, 1, "run on a machine with an NVIDIA GPU (Ponytail's allocator and kernels need one)",
        "no GPU: %s", g->why);

  void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!rt) {
    add("runtime", ST_SKIP, 0, NULL,
        "libcudart.so.13 is not on the library path: the shim binds the runtime the program loads "
        "(torch brings its own, see 'libraries')");
    return;
  }
  char path[PATH_MAX];
  lib_path(rt, "libcudart.so.13", path, sizeof path);
  int (*rver)(int *) = (int (*)(int *))dlsym(rt, "cudaRuntimeGetVersion");
  int v = 0;
  if (rver && rver(&v) == 0)
    add("runtime", ST_OK, 0, NULL, "libcudart.so.13 %d.%d at %s", v / 1000, v % 1000 / 10, path);
  else
    add("runtime", ST_OK, 0, NULL, "libcudart.so.13 at %s (version not readable)", path);
}

/* ---- the shim ---- */

/* dlopen(shim) in a child; 0 or -1 with dlerror in why. */
static int shim_loads(const char *shim, char *why, size_t len) {
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

static void check_preload_env(void) {
  const char *pre = getenv("LD_PRELOAD");
  if (!pre || !*pre) {
    add("LD_PRELOAD", ST_OK, 0, NULL, "not set (`ponytail run` preloads the shim itself)");
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
    add("LD_PRELOAD", ST_FAIL, 1,
        "fix or unset LD_PRELOAD (`ponytail run -- CMD` preloads the right shim itself)",
        "LD_PRELOAD names %s, which does not exist: every program started with it prints an ld.so error and "
        "runs without it", missing);
  else
    add("LD_PRELOAD", ST_OK, 0, NULL, "%s (every entry exists)", pre);
}

static const char kernels_todo[] =
    "install the CUDA toolkit (nvcc) and rebuild the shim with its kernels: "
    "meson setup build -Dkernels=enabled && ninja -C build";

/* Why the kernel list could not be read (no libelf), when a GPU can settle it. */
static char kernels_unlisted[512];
static char *slurp(const char *path, size_t *len);

static const struct check *find_check(const char *name) {
  for (int i = 0; i < nchecks; i++)
    if (!strcmp(checks[i].name, name)) return &checks[i];
  return NULL;
}

/* kernels and kernel-arch without the list: proven when the self-test ran
 * Ponytail's kernels on this GPU (verified against torch's and fp32). */
static void check_kernels_by_running(const struct gpu *g) {
  const struct check *st = find_check("selftest");
  if (st && st->st == ST_OK) {
    add("kernels", ST_OK, 1, NULL, "not listed (%s), but the self-test ran them", kernels_unlisted);
    add("kernel-arch", ST_OK, 1, NULL, "Ponytail's decode kernels ran on this sm_%d%d GPU in the self-test",
        g->major, g->minor);
  } else {
    add("kernels", ST_SKIP, 1, NULL, "cannot list the shim's kernels: %s", kernels_unlisted);
    add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed, and the self-test did not run them)");
  }
}

/* Whether the file holds the bytes of `what` (a cubin's section name in an
 * uncompressed fatbin): a check that needs no libelf, which the GPU machine
 * may lack, so every build answers the prefill-kernel row the same way. The
 * mark is a section of the prefill kernel's cubin: its name is in no other
 * part of the shim (the launcher's C functions share the kernel names' prefix,
 * and an unstripped shim lists them). */
#define PT_PREFILL_CUBIN_MARK ".text.pt_attn_prefill_"
static int file_has(const char *path, const char *what) {
  size_t n = 0;
  char *b = slurp(path, &n);
  const int found = b && memmem(b, n, what, strlen(what)) != NULL;
  free(b);
  return found;
}

/* Ponytail's prefill kernel: optional (without it prefill stays on torch's
 * cuDNN kernel), so never a failure; the row says whether it will run. The
 * options are read from this process's environment, which a run shares. */
static void check_prefill(int built, const struct gpu *g, const char *nogpu) {
  if (!built)
    add("prefill-kernel", ST_SKIP, 0, NULL,
        "not in this build (its sm_90a fatbin needs nvcc with sm_90a): prefill stays on cuDNN");
  else if (!g->ok)
    add("prefill-kernel", ST_SKIP, 0, NULL, "(no GPU: %s)", nogpu);
  else if (!pt_opt_bool(PT_OPT_ENABLE) || pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF ||
           !pt_opt_bool(PT_OPT_ATTN_PREFILL))
    add("prefill-kernel", ST_SKIP, 0, NULL, "off (%s): prefill stays on cuDNN",
        !pt_opt_bool(PT_OPT_ENABLE) ? "PONYTAIL_ENABLE=0"
        : pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF ? "PONYTAIL_ATTN=off" : "PONYTAIL_ATTN_PREFILL=0");
  else if (g->major == 9 && g->minor == 0 && pt_opt_enum(PT_OPT_TORCH_SDPA) == PT_TORCH_SDPA_KEEP)
    add("prefill-kernel", ST_OK, 0, NULL,
        "sm_90a cubin for this GPU; with PONYTAIL_TORCH_SDPA=keep SDPA keeps cuDNN for prefill unless the "
        "program asks for flash, whose prefill launches Ponytail's kernel then replaces");
  else if (g->major == 9 && g->minor == 0)
    add("prefill-kernel", ST_OK, 0, NULL,
        "sm_90a cubin for this GPU: prefill without a mask (head_dim 64/128, fp16/bf16) runs on Ponytail's "
        "prefill kernel");
  else
    add("prefill-kernel", ST_SKIP, 0, NULL,
        "built for sm_90a (H100/H200) only; on this sm_%d%d GPU prefill stays on cuDNN", g->major, g->minor);
}

/* cubin sm_XY runs on X.Z for Z >= Y; PTX compute_XY is JIT-compiled for any cc >= XY. */
static void check_kernels(const char *shim, const struct gpu *g, const char *nogpu) {
  struct pt_kernel_list l = {0};
  char err[512];
  if (pt_kernels_scan_file(shim, &l, err, sizeof err) != 0) {
    if (strstr(err, "libelf") && g->ok) {
      /* Decided after the GPU checks: a self-test that ran Ponytail's kernels
       * on this GPU proves both (the GPU machine has no libelf). */
      snprintf(kernels_unlisted, sizeof kernels_unlisted, "%s", err);
      pt_kernel_list_free(&l);
      return;
    }
    if (strstr(err, "libelf"))
      add("kernels", ST_SKIP, 1, NULL, "cannot list the shim's kernels: %s", err);
    else
      add("kernels", ST_FAIL, 1, kernels_todo, "kernels not built: %s", err);
    add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed)");
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
    add("kernels", ST_FAIL, 1, kernels_todo, "kernels not built: %s has no pt_attn_* kernels", shim);
    add("kernel-arch", ST_SKIP, 1, NULL, "(no kernels listed)");
    return;
  }
  add("kernels", ST_OK, 1, NULL, "%zu Ponytail kernel entries (%s)", npt, archs);
  if (!g->ok)
    add("kernel-arch", ST_SKIP, 1, NULL, "(no GPU: %s)", nogpu);
  else if (cubin_ok)
    add("kernel-arch", ST_OK, 1, NULL, "cubin for this sm_%d%d GPU", g->major, g->minor);
  else if (ptx_ok)
    add("kernel-arch", ST_OK, 1, NULL, "no sm_%d%d cubin; the PTX is JIT-compiled at first use (slower start)",
        g->major, g->minor);
  else {
    char todo[256];
    snprintf(todo, sizeof todo, "add -gencode=arch=compute_%d%d,code=sm_%d%d to kernels/meson.build and rebuild",
             g->major, g->minor, g->major, g->minor);
    add("kernel-arch", ST_FAIL, 1, todo, "no code for sm_%d%d (the shim has %s): attention falls back to torch",
        g->major, g->minor, archs);
  }
}

/* ---- python children ---- */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0, r;
  char *b = malloc(cap + 1);
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      char *nb = realloc(b, (cap *= 2) + 1);
      if (!nb) { free(b); b = NULL; break; }
      b = nb;
    }
  }
  fclose(f);
  if (b) b[n] = 0;
  if (len) *len = n;
  return b;
}

/* Runs argv with envp, stdout/stderr to files, killed after timeout_s. The
 * exit status (128+signal; 127 not executable; 124 timed out). */
static int run_timeout(char *const argv[], char *const envp[], const char *out, const char *err, int timeout_s) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    setpgid(0, 0);
    FILE *o = freopen(out, "w", stdout), *e = freopen(err, "w", stderr);
    if (!o || !e) _exit(127);
    execvpe(argv[0], argv, envp);
    fprintf(stderr, "cannot execute '%s': %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  double t0 = pt_now_s();
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return 127;
    if (pt_now_s() - t0 > timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return 124;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 127;
}

struct pyrun {
  int rc;
  struct pt_json *j; /* the PONYTAIL_DOCTOR_JSON object, or NULL */
  char tail[400];    /* last line of stderr (or stdout) */
};

static void last_line(const char *text, char *out, size_t len) {
  out[0] = 0;
  if (!text) return;
  const char *end = text + strlen(text);
  while (end > text && (end[-1] == '\n' || end[-1] == ' ')) end--;
  const char *s = end;
  while (s > text && s[-1] != '\n') s--;
  snprintf(out, len, "%.*s", (int)(end - s), s);
}

static void run_python(const char *py, char **extra, char *const envp[], const char *dir, int timeout_s,
                       struct pyrun *r) {
  char out[PATH_MAX], err[PATH_MAX];
  snprintf(out, sizeof out, "%s/py.out", dir);
  snprintf(err, sizeof err, "%s/py.err", dir);
  char *argv[16] = {(char *)py, "-c", (char *)pt_doctor_py};
  int n = 3;
  for (int i = 0; extra && extra[i] && n < 15; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  memset(r, 0, sizeof *r);
  r->rc = run_timeout(argv, envp, out, err, timeout_s);
  char *o = slurp(out, NULL), *e = slurp(err, NULL);
  const char *m = o ? strstr(o, "PONYTAIL_DOCTOR_JSON ") : NULL;
  if (m) {
    m += strlen("PONYTAIL_DOCTOR_JSON ");
    const char *nl = strchr(m, '\n');
    r->j = pt_json_parse(m, nl ? (size_t)(nl - m) : strlen(m), NULL, 0);
  }
  last_line(e && *e ? e : o, r->tail, sizeof r->tail);
  free(o), free(e);
  unlink(out), unlink(err);
}

/* The stats file with the most launches in dir (the shim writes stats.<pid>.json). */
static struct pt_json *best_stats(const char *dir) {
  DIR *d = opendir(dir);
  struct pt_json *best = NULL;
  uint64_t bl = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (strncmp(e->d_name, "stats.", 6) != 0) continue;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct pt_json *j = pt_json_parse_file(p, NULL, 0);
    uint64_t l = 0;
    pt_json_u64(pt_json_get(pt_json_get(j, "kernels"), "launches"), &l);
    if (j && (!best || l > bl)) {
      pt_json_free(best);
      best = j, bl = l;
    } else {
      pt_json_free(j);
    }
  }
  if (d) closedir(d);
  return best;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* When this ponytail runs under ASan/UBSan (the sanitizer build), so does its
 * shim: the sanitizer runtimes must be preloaded before it. */
static void sanitizer_preload(char *out, size_t len) {
  out[0] = 0;
  const char *syms[] = {"__asan_init", "__ubsan_handle_add_overflow"};
  for (int i = 0; i < 2; i++) {
    Dl_info di;
    void *s = dlsym(RTLD_DEFAULT, syms[i]);
    if (s && dladdr(s, &di) && di.dli_fname && strstr(di.dli_fname, ".so")) {
      size_t n = strlen(out);
      snprintf(out + n, len - n, "%s%s", n ? ":" : "", di.dli_fname);
    }
  }
}

static const char *attn_desc(const char *path) {
  if (!path) return "an unknown path";
  if (!strcmp(path, "ponytail")) return "Ponytail's decode kernel (swapped)";
  if (!strcmp(path, "flash-decode")) return "flash (split-KV decode)";
  if (!strcmp(path, "flash")) return "flash (forward, not split-KV)";
  if (!strcmp(path, "cudnn")) return "cuDNN";
  if (!strcmp(path, "mem-efficient")) return "mem-efficient";
  return path;
}

static void check_attention(const struct pt_json *a, const char *key, int needed) {
  const struct pt_json *c = pt_json_get(a, key);
  const char *obs = pt_json_str(pt_json_get(c, "observed"));
  const char *pred = pt_json_str(pt_json_get(c, "predicted"));
  const char *path = obs ? obs : pred;
  const char *shape = pt_json_str(pt_json_get(a, "shape"));
  char name[24];
  snprintf(name, sizeof name, "%s", needed ? "attention" : "attention-padded");
  const char *how = obs ? "kernels seen" : "torch's can_use_* answer";
  if (!c) {
    add(name, ST_SKIP, needed, NULL, "(the attention check did not run)");
  } else if (path && (!strcmp(path, "ponytail") || !strcmp(path, "flash-decode"))) {
    add(name, ST_OK, needed, NULL, "%s SDPA %s takes %s (%s): Ponytail swaps it", key, shape ? shape : "",
        attn_desc(path), how);
  } else {
    const char *why = !path ? "torch's choice could not be determined"
                      : !strcmp(path, "cudnn") ? "cuDNN SDPA is not swappable; the shim's SDPA policy "
                                                  "(PONYTAIL_TORCH_SDPA=auto) moves decode off it unless the "
                                                  "policy is keep or the program asks for cuDNN"
                      /* The python child inherits our environment, so our
                       * reading of the option is the shim's. */
                      : !strcmp(path, "mem-efficient")
                          ? pt_opt_bool(PT_OPT_ATTN_MASKED)
                                ? "mem-efficient SDPA (attention mask) is swapped only when decode-shaped and "
                                  "supported; `ponytail run --log info` logs why a launch fell back"
                                : "PONYTAIL_ATTN_MASKED=0 turns masked decode (mem-efficient SDPA with an attention "
                                  "mask) off; it is on by default"
                      : "only flash split-KV decode (fp16/bf16, head_dim 64/128) is swapped";
    add(name, needed ? ST_FAIL : ST_OK, needed,
        "leave TORCH_CUDNN_SDPA_DEPRIORITIZED and PONYTAIL_TORCH_SDPA unset, use fp16/bf16 with head_dim 64 or 128",
        "%s SDPA %s takes %s (%s): not swapped: %s", key, shape ? shape : "", attn_desc(path), how, why);
  }
}

static void check_python(const char *py, const char *shim, const struct gpu *g, const char *nogpu,
                         const char *cfg, int batch, int prompt, int timeout_s) {
  char tmpl[] = "/tmp/ponytail-doctor.XXXXXX";
  char *dir = mkdtemp(tmpl);
  static const char *gpu_checks[] = {"launches", "libraries", "attention", "attention-padded", "selftest"};
  if (!dir) {
    add("python", ST_FAIL, 1, "make /tmp writable", "cannot create a temporary directory: %s", strerror(errno));
    return;
  }
  struct pt_env env = {0};
  pt_env_from_environ(&env);
  char san[PATH_MAX * 2];
  sanitizer_preload(san, sizeof san);
  if (san[0]) pt_env_set(&env, "ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0");

  /* 1: torch as the user's python sees it, without the shim */
  struct pyrun r1;
  char *stock_pre = pt_preload_remove(shim, getenv("LD_PRELOAD"));
  pt_env_set(&env, "LD_PRELOAD", stock_pre && *stock_pre ? stock_pre : NULL);
  free(stock_pre);
  run_python(py, NULL, env.v, dir, timeout_s, &r1);
  const char *skip_why = NULL;
  char why[PATH_MAX + 300];
  if (!r1.j) {
    char todo[300];
    snprintf(todo, sizeof todo, "pass --python the interpreter that runs your workload");
    if (r1.rc == 127)
      add("python", ST_FAIL, 1, todo, "cannot run '%s' (%s)", py, r1.tail);
    else if (r1.rc == 124)
      add("python", ST_FAIL, 1, todo, "'%s' did not finish within %d s", py, timeout_s);
    else
      add("python", ST_FAIL, 1, todo, "'%s' gave no result (exit %d): %s", py, r1.rc, r1.tail);
    skip_why = "(no python)";
  } else {
    add("python", ST_OK, 1, NULL, "%s %s", pt_json_str(pt_json_get(r1.j, "executable")),
        pt_json_str(pt_json_get(r1.j, "python")));
    const char *terr = pt_json_str(pt_json_get(r1.j, "torch_error"));
    const char *tv = pt_json_str(pt_json_get(r1.j, "torch"));
    const char *tc = pt_json_str(pt_json_get(r1.j, "torch_cuda"));
    if (!tv) {
      char todo[300];
      snprintf(todo, sizeof todo, "pip install torch (a CUDA build) for %s, or pass --python the interpreter that has it",
               py);
      add("torch", ST_FAIL, 1, todo, "torch is not importable in %s: %s", py,
          terr ? terr : pt_json_str(pt_json_get(r1.j, "error")) ? pt_json_str(pt_json_get(r1.j, "error")) : "?");
      skip_why = "(torch not importable)";
    } else if (!tc) {
      add("torch", ST_FAIL, 1, "install a CUDA build of torch (pip install torch from the cu13x index)",
          "torch %s is a CPU-only build (torch.version.cuda is None)", tv);
      skip_why = "(torch has no CUDA)";
    } else {
      add("torch", ST_OK, 1, NULL, "torch %s, built for CUDA %s", tv, tc);
    }
    if (!skip_why) {
      if (pt_json_bool(pt_json_get(r1.j, "cuda_available"), 0)) {
        add("torch-cuda", ST_OK, 1, NULL, "torch.cuda.is_available(): True, %s", pt_json_str(pt_json_get(r1.j, "device")));
      } else if (!g->ok) {
        snprintf(why, sizeof why, "(no GPU: %s)", nogpu);
        add("torch-cuda", ST_SKIP, 1, NULL, "%s", why);
        skip_why = why;
      } else {
        char todo[300];
        snprintf(todo, sizeof todo, "install a torch build for a CUDA the driver supports (up to %d.%d)",
                 g->drv_ver / 1000, g->drv_ver % 1000 / 10);
        add("torch-cuda", ST_FAIL, 1, todo, "torch.cuda.is_available() is False although the driver reports %d device%s%s%s",
            g->count, g->count == 1 ? "" : "s", pt_json_get(r1.j, "cuda_error") ? ": " : "",
            pt_json_get(r1.j, "cuda_error") ? pt_json_str(pt_json_get(r1.j, "cuda_error")) : "");
        skip_why = "(torch cannot use the GPU)";
      }
    }
  }

  /* 2: the same python under the shim (GPU work only when torch can use the GPU) */
  if (r1.j) {
    char pre[PATH_MAX * 4], stats[PATH_MAX], logf[PATH_MAX], b[16], p[16];
    char *composed = pt_preload_compose(shim, getenv("LD_PRELOAD"));
    snprintf(pre, sizeof pre, "%s%s%s", san, san[0] ? ":" : "", composed ? composed : shim);
    free(composed);
    snprintf(stats, sizeof stats, "%s/stats.%%p.json", dir);
    snprintf(logf, sizeof logf, "%s/log.%%p", dir);
    snprintf(b, sizeof b, "%d", batch);
    snprintf(p, sizeof p, "%d", prompt);
    pt_env_set(&env, "LD_PRELOAD", pre);
    pt_env_set(&env, PT_OPT_ENV(STATS), "json");
    pt_env_set(&env, PT_OPT_ENV(STATS_FILE), stats);
    pt_env_set(&env, PT_OPT_ENV(LOG), "info");
    pt_env_set(&env, PT_OPT_ENV(LOG_FILE), logf);
    pt_env_set(&env, PT_OPT_ENV(ATTN), "verify");
    char *extra[] = {skip_why ? NULL : "--gpu", "--config", (char *)cfg, "--batch", b, "--prompt", p, NULL};
    struct pyrun r2;
    run_python(py, skip_why ? NULL : extra, env.v, dir, timeout_s, &r2);
    const char *mapped = pt_json_str(pt_json_get(r2.j, "shim_mapped"));
    if (!r2.j)
      add("shim-python", ST_FAIL, 1, "run `ponytail run --log debug -- PY -c 'import torch'` and report its output",
          "%s under LD_PRELOAD=%s gave no result (exit %d%s): %s", py, shim, r2.rc, r2.rc == 124 ? ", timed out" : "",
          r2.tail);
    else if (!mapped)
      add("shim-python", ST_FAIL, 1, "check that LD_PRELOAD reaches the process (no wrapper that clears it)",
          "the shim is not mapped in %s started with LD_PRELOAD=%s", py, shim);
    else
      add("shim-python", ST_OK, 1, NULL, "loaded into %s (%s)", py, mapped);

    if (skip_why || !r2.j) {
      char nog[PATH_MAX + 300];
      snprintf(nog, sizeof nog, "(no GPU: %s)", nogpu);
      if (!g->ok) skip_why = nog; /* the first reason these could not run */
      for (size_t i = 0; i < sizeof gpu_checks / sizeof gpu_checks[0]; i++)
        add(gpu_checks[i], ST_SKIP, strcmp(gpu_checks[i], "attention-padded") && strcmp(gpu_checks[i], "libraries"), NULL, "%s",
            skip_why ? skip_why : "(python failed under the shim)");
    } else {
      struct pt_json *st = best_stats(dir);
      uint64_t launches = 0, verified = 0, vfail = 0;
      pt_json_u64(pt_json_get(pt_json_get(st, "kernels"), "launches"), &launches);
      pt_json_u64(pt_json_get(pt_json_get(st, "hooks"), "verified"), &verified);
      pt_json_u64(pt_json_get(pt_json_get(st, "hooks"), "verify_failures"), &vfail);
      if (launches > 0)
        add("launches", ST_OK, 1, NULL, "the shim counted %llu kernel launches of the python process",
            (unsigned long long)launches);
      else
        add("launches", ST_FAIL, 1, "see docs/compatibility.md (a runtime linked statically into the program is not seen)",
            "the shim saw no kernel launches of a torch op%s", st ? "" : " (it wrote no stats)");
      const char *lrt = pt_json_str(pt_json_get(r2.j, "libcudart")), *ldrv = pt_json_str(pt_json_get(r2.j, "libcuda"));
      add("libraries", ST_OK, 0, NULL, "the process binds libcudart %s, libcuda %s", lrt ? lrt : "(static or none)",
          ldrv ? ldrv : "?");
      const struct pt_json *a = pt_json_get(r2.j, "attention");
      if (!a) {
        const char *ae = pt_json_str(pt_json_get(r2.j, "attention_error"));
        add("attention", ST_FAIL, 1, "pass --model-config a Hugging Face config.json", "the attention check failed: %s",
            ae ? ae : "?");
        add("attention-padded", ST_SKIP, 0, NULL, "(the attention check failed)");
      } else {
        check_attention(a, "unmasked", 1);
        check_attention(a, "padded", 0);
      }
      const struct pt_json *fams = pt_json_get(r2.j, "selftest");
      char detail[600] = "";
      int bad = !pt_json_len(fams);
      if (bad) {
        const char *se = pt_json_str(pt_json_get(r2.j, "selftest_error"));
        snprintf(detail, sizeof detail, "the self-test did not run: %s", se ? se : "?");
      }
      for (size_t i = 0; i < pt_json_len(fams); i++) {
        const struct pt_json *f = pt_json_at(fams, i);
        size_t n = strlen(detail);
        if (!pt_json_bool(pt_json_get(f, "ok"), 0)) bad = 1;
        if (pt_json_get(f, "error"))
          snprintf(detail + n, sizeof detail - n, "%s%s: %s", n ? "; " : "", pt_json_str(pt_json_get(f, "family")),
                   pt_json_str(pt_json_get(f, "error")));
        else
          snprintf(detail + n, sizeof detail - n, "%s%s %.1e", n ? ", " : "", pt_json_str(pt_json_get(f, "family")),
                   pt_json_num(pt_json_get(f, "rel_err"), -1));
      }
      if (bad || !verified || vfail)
        add("selftest", ST_FAIL, 1, "run tests/gpu/check_all.sh and report its table",
            "%s; shim verify: verified %llu, failures %llu%s", detail, (unsigned long long)verified,
            (unsigned long long)vfail, !verified ? " (no launch was swapped and compared)" : "");
      else
        add("selftest", ST_OK, 1, NULL, "rel. error vs fp32: %s; shim verify against torch's kernel: %llu verified, 0 failures",
            detail, (unsigned long long)verified);
      pt_json_free(st);
    }
    pt_json_free(r2.j);
  } else {
    add("shim-python", ST_SKIP, 1, NULL, "(no python)");
    for (size_t i = 0; i < sizeof gpu_checks / sizeof gpu_checks[0]; i++)
      add(gpu_checks[i], ST_SKIP, strcmp(gpu_checks[i], "attention-padded") && strcmp(gpu_checks[i], "libraries"), NULL,
          "(no python)");
  }
  pt_json_free(r1.j);
  pt_env_free(&env);
  rm_dir(dir);
}

static int parse_pos(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > 1000000) return -1;
  *out = (int)v;
  return 0;
}

int pt_cmd_doctor(int argc, char **argv) {
  enum { O_JSON = 256, O_SHIM, O_PY, O_CFG, O_BATCH, O_PROMPT, O_TIMEOUT };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},           {"json", no_argument, NULL, O_JSON},
      {"shim", required_argument, NULL, O_SHIM},  {"python", required_argument, NULL, O_PY},
      {"model-config", required_argument, NULL, O_CFG}, {"batch", required_argument, NULL, O_BATCH},
      {"prompt", required_argument, NULL, O_PROMPT}, {"timeout", required_argument, NULL, O_TIMEOUT},
      {NULL, 0, NULL, 0},
  };
  const char *shim_arg = NULL, *py = "python3", *cfg_arg = NULL, *w;
  int batch = 8, prompt = 512, timeout_s = 300, c;
  nchecks = 0, json_out = 0;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_JSON: json_out = 1; break;
    case O_SHIM: shim_arg = optarg; break;
    case O_PY: py = optarg; break;
    case O_CFG: cfg_arg = optarg; break;
    case O_BATCH: if (parse_pos(optarg, &batch)) return pt_cmd_usage_error("doctor", usage, "bad --batch", optarg); break;
    case O_PROMPT: if (parse_pos(optarg, &prompt)) return pt_cmd_usage_error("doctor", usage, "bad --prompt", optarg); break;
    case O_TIMEOUT:
      if (parse_pos(optarg, &timeout_s)) return pt_cmd_usage_error("doctor", usage, "bad --timeout", optarg);
      break;
    case ':': return pt_cmd_usage_error("doctor", usage, "missing value for", w);
    default: return pt_cmd_usage_error("doctor", usage, "unknown flag", w);
    }
  }
  if (optind < argc) return pt_cmd_usage_error("doctor", usage, "unexpected argument", argv[optind]);

  /* the model config: as given, else examples/ of this ponytail's source or install */
  char cfg[PATH_MAX + 64], why[PATH_MAX + 256];
  if (cfg_arg) {
    if (access(cfg_arg, R_OK) != 0) return pt_cmd_usage_error("doctor", usage, "cannot read --model-config", cfg_arg);
    snprintf(cfg, sizeof cfg, "%s", cfg_arg);
  } else {
    char gen[PATH_MAX];
    if (pt_tool_find_script(NULL, gen, sizeof gen, why, sizeof why) == 0) {
      char *slash = strrchr(gen, '/');
      if (slash) *slash = 0;
      snprintf(cfg, sizeof cfg, "%s/llama-1b-config.json", gen);
    } else {
      snprintf(cfg, sizeof cfg, "%s/examples/llama-1b-config.json", PT_SOURCE_ROOT);
    }
  }

  if (!json_out) {
    printf("ponytail doctor %s\n", PT_VERSION);
    fflush(stdout);
  }
  struct gpu g;
  probe_gpu(&g);
  char nogpu[PATH_MAX + 256];
  snprintf(nogpu, sizeof nogpu, "%s", g.ok ? "" : !g.have_lib ? "no NVIDIA driver, libcuda.so.1 not found" : g.why);
  check_driver_gpu(&g);

  char shim[PATH_MAX];
  int shim_ok = 0;
  if (pt_tool_find_shim(shim_arg, shim, sizeof shim, why, sizeof why) != 0) {
    add("shim", ST_FAIL, 1, "build it (ninja -C build) or pass --shim PATH to an existing libponytail_shim.so", "%s", why);
    add("shim-load", ST_SKIP, 1, NULL, "(no shim)");
  } else {
    add("shim", ST_OK, 1, NULL, "%s", shim);
    if (shim_loads(shim, why, sizeof why) == 0) {
      add("shim-load", ST_OK, 1, NULL, "dlopen succeeds");
      shim_ok = 1;
    } else {
      add("shim-load", ST_FAIL, 1, "rebuild the shim (ninja -C build) or pass --shim PATH to a working one",
          "%s does not load: %s", shim, why);
    }
  }
  check_preload_env();
  if (shim_ok) {
    check_kernels(shim, &g, nogpu);
    check_prefill(file_has(shim, PT_PREFILL_CUBIN_MARK), &g, nogpu);
    check_python(py, shim, &g, nogpu, cfg, batch, prompt, timeout_s);
    if (kernels_unlisted[0]) check_kernels_by_running(&g);
  } else {
    static const char *rest[] = {"kernels", "kernel-arch", "prefill-kernel", "python", "torch", "torch-cuda",
                                 "shim-python", "launches", "libraries", "attention", "attention-padded", "selftest"};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
      add(rest[i], ST_SKIP,
          strcmp(rest[i], "libraries") && strcmp(rest[i], "attention-padded") && strcmp(rest[i], "prefill-kernel"),
          NULL, "(no working shim)");
  }

  /* verdict */
  char failed[600] = "", skipped[600] = "";
  int nfail = 0, nskip = 0;
  for (int i = 0; i < nchecks; i++) {
    const struct check *k = &checks[i];
    if (!k->needed || k->st == ST_OK) continue;
    append(k->st == ST_FAIL ? failed : skipped, sizeof failed, ", ", k->name);
    if (k->st == ST_FAIL) nfail++;
    else nskip++;
  }
  char verdict[1400];
  if (!nfail && !nskip)
    snprintf(verdict, sizeof verdict, "ready: everything Ponytail needs is in place");
  else
    snprintf(verdict, sizeof verdict, "NOT READY: %d needed check%s failed%s%s%s; %d could not be checked%s%s%s",
             nfail, nfail == 1 ? "" : "s", nfail ? " (" : "", failed, nfail ? ")" : "", nskip, nskip ? " (" : "",
             skipped, nskip ? ")" : "");
  int rc = nfail || nskip ? 1 : 0;
  if (json_out) {
    struct pt_jw jw;
    pt_jw_init(&jw, stdout, true);
    pt_jw_obj_begin(&jw, NULL);
    pt_jw_arr_begin(&jw, "checks");
    for (int i = 0; i < nchecks; i++) {
      pt_jw_obj_begin(&jw, NULL);
      pt_jw_str(&jw, "name", checks[i].name);
      pt_jw_str(&jw, "status", st_name[checks[i].st]);
      pt_jw_bool(&jw, "needed", checks[i].needed);
      pt_jw_str(&jw, "finding", checks[i].finding);
      pt_jw_str(&jw, "what_to_do", checks[i].todo[0] ? checks[i].todo : NULL);
      pt_jw_obj_end(&jw);
    }
    pt_jw_arr_end(&jw);
    pt_jw_bool(&jw, "ready", rc == 0);
    pt_jw_str(&jw, "verdict", verdict);
    pt_jw_obj_end(&jw);
    pt_jw_finish(&jw);
  } else {
    printf("\nverdict: %s\n", verdict);
  }
  return rc;
}
