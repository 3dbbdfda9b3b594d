/* `ponytail doctor`: the checks a python process answers. tools/commands/doctor.py is
 * embedded at build time (doctor_py.h) and run as `PY -c SCRIPT` with a timeout,
 * once without the shim (torch, its CUDA, is_available) and once under it (the
 * shim mapped, the launches it counts, the SDPA path of a decode shape, the
 * kernels' self-test under PONYTAIL_ATTN=verify); its answer is one
 * PONYTAIL_DOCTOR_JSON line, read back here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/options.h"
#include "tools/commands/doctor.h"
#include "tools/lib/json.h"
#include "tools/lib/spawn.h"

#include "doctor_py.h" /* static const char pt_doctor_py[]: tools/commands/doctor.py */

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
  char *o = pt_doctor_slurp(out, NULL), *e = pt_doctor_slurp(err, NULL);
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
    pt_doctor_add(name, ST_SKIP, needed, NULL, "(the attention check did not run)");
  } else if (path && (!strcmp(path, "ponytail") || !strcmp(path, "flash-decode"))) {
    pt_doctor_add(name, ST_OK, needed, NULL, "%s SDPA %s takes %s (%s): Ponytail swaps it", key, shape ? shape : "",
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
                      : "only flash split-KV decode (fp16/bf16, head_dim 64/80/96/128/256) is swapped";
    pt_doctor_add(name, needed ? ST_FAIL : ST_OK, needed,
        "leave TORCH_CUDNN_SDPA_DEPRIORITIZED and PONYTAIL_TORCH_SDPA unset, use fp16/bf16 with head_dim 64, 80, "
        "96, 128 or 256",
        "%s SDPA %s takes %s (%s): not swapped: %s", key, shape ? shape : "", attn_desc(path), how, why);
  }
}

void pt_doctor_check_python(const char *py, const char *shim, const struct pt_doctor_gpu *g, const char *nogpu,
                         const char *cfg, int batch, int prompt, int timeout_s) {
  char tmpl[] = "/tmp/ponytail-doctor.XXXXXX";
  char *dir = mkdtemp(tmpl);
  static const char *gpu_checks[] = {"launches", "libraries", "attention", "attention-padded", "selftest"};
  if (!dir) {
    pt_doctor_add("python", ST_FAIL, 1, "make /tmp writable", "cannot create a temporary directory: %s", strerror(errno));
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
      pt_doctor_add("python", ST_FAIL, 1, todo, "cannot run '%s' (%s)", py, r1.tail);
    else if (r1.rc == 124)
      pt_doctor_add("python", ST_FAIL, 1, todo, "'%s' did not finish within %d s", py, timeout_s);
    else
      pt_doctor_add("python", ST_FAIL, 1, todo, "'%s' gave no result (exit %d): %s", py, r1.rc, r1.tail);
    skip_why = "(no python)";
  } else {
    pt_doctor_add("python", ST_OK, 1, NULL, "%s %s", pt_json_str(pt_json_get(r1.j, "executable")),
        pt_json_str(pt_json_get(r1.j, "python")));
    const char *terr = pt_json_str(pt_json_get(r1.j, "torch_error"));
    const char *tv = pt_json_str(pt_json_get(r1.j, "torch"));
    const char *tc = pt_json_str(pt_json_get(r1.j, "torch_cuda"));
    if (!tv) {
      char todo[300];
      snprintf(todo, sizeof todo, "pip install torch (a CUDA build) for %s, or pass --python the interpreter that has it",
               py);
      pt_doctor_add("torch", ST_FAIL, 1, todo, "torch is not importable in %s: %s", py,
          terr ? terr : pt_json_str(pt_json_get(r1.j, "error")) ? pt_json_str(pt_json_get(r1.j, "error")) : "?");
      skip_why = "(torch not importable)";
    } else if (!tc) {
      pt_doctor_add("torch", ST_FAIL, 1, "install a CUDA build of torch (pip install torch from the cu13x index)",
          "torch %s is a CPU-only build (torch.version.cuda is None)", tv);
      skip_why = "(torch has no CUDA)";
    } else {
      pt_doctor_add("torch", ST_OK, 1, NULL, "torch %s, built for CUDA %s", tv, tc);
    }
    if (!skip_why) {
      if (pt_json_bool(pt_json_get(r1.j, "cuda_available"), 0)) {
        pt_doctor_add("torch-cuda", ST_OK, 1, NULL, "torch.cuda.is_available(): True, %s", pt_json_str(pt_json_get(r1.j, "device")));
      } else if (!g->ok) {
        snprintf(why, sizeof why, "(no GPU: %s)", nogpu);
        pt_doctor_add("torch-cuda", ST_SKIP, 1, NULL, "%s", why);
        skip_why = why;
      } else {
        char todo[300];
        snprintf(todo, sizeof todo, "install a torch build for a CUDA the driver supports (up to %d.%d)",
                 g->drv_ver / 1000, g->drv_ver % 1000 / 10);
        pt_doctor_add("torch-cuda", ST_FAIL, 1, todo, "torch.cuda.is_available() is False although the driver reports %d device%s%s%s",
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
      pt_doctor_add("shim-python", ST_FAIL, 1, "run `ponytail run --log debug -- PY -c 'import torch'` and report its output",
          "%s under LD_PRELOAD=%s gave no result (exit %d%s): %s", py, shim, r2.rc, r2.rc == 124 ? ", timed out" : "",
          r2.tail);
    else if (!mapped)
      pt_doctor_add("shim-python", ST_FAIL, 1, "check that LD_PRELOAD reaches the process (no wrapper that clears it)",
          "the shim is not mapped in %s started with LD_PRELOAD=%s", py, shim);
    else
      pt_doctor_add("shim-python", ST_OK, 1, NULL, "loaded into %s (%s)", py, mapped);

    if (skip_why || !r2.j) {
      char nog[PATH_MAX + 300];
      snprintf(nog, sizeof nog, "(no GPU: %s)", nogpu);
      if (!g->ok) skip_why = nog; /* the first reason these could not run */
      for (size_t i = 0; i < sizeof gpu_checks / sizeof gpu_checks[0]; i++)
        pt_doctor_add(gpu_checks[i], ST_SKIP, strcmp(gpu_checks[i], "attention-padded") && strcmp(gpu_checks[i], "libraries"), NULL, "%s",
            skip_why ? skip_why : "(python failed under the shim)");
    } else {
      struct pt_json *st = best_stats(dir);
      uint64_t launches = 0, verified = 0, vfail = 0;
      pt_json_u64(pt_json_get(pt_json_get(st, "kernels"), "launches"), &launches);
      pt_json_u64(pt_json_get(pt_json_get(st, "hooks"), "verified"), &verified);
      pt_json_u64(pt_json_get(pt_json_get(st, "hooks"), "verify_failures"), &vfail);
      if (launches > 0)
        pt_doctor_add("launches", ST_OK, 1, NULL, "the shim counted %llu kernel launches of the python process",
            (unsigned long long)launches);
      else
        pt_doctor_add("launches", ST_FAIL, 1, "see docs/compatibility.md (a runtime linked statically into the program is not seen)",
            "the shim saw no kernel launches of a torch op%s", st ? "" : " (it wrote no stats)");
      const char *lrt = pt_json_str(pt_json_get(r2.j, "libcudart")), *ldrv = pt_json_str(pt_json_get(r2.j, "libcuda"));
      pt_doctor_add("libraries", ST_OK, 0, NULL, "the process binds libcudart %s, libcuda %s", lrt ? lrt : "(static or none)",
          ldrv ? ldrv : "?");
      const struct pt_json *a = pt_json_get(r2.j, "attention");
      if (!a) {
        const char *ae = pt_json_str(pt_json_get(r2.j, "attention_error"));
        pt_doctor_add("attention", ST_FAIL, 1, "pass --model-config a Hugging Face config.json", "the attention check failed: %s",
            ae ? ae : "?");
        pt_doctor_add("attention-padded", ST_SKIP, 0, NULL, "(the attention check failed)");
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
        pt_doctor_add("selftest", ST_FAIL, 1, "run tests/gpu/check_all.sh and report its table",
            "%s; shim verify: verified %llu, failures %llu%s", detail, (unsigned long long)verified,
            (unsigned long long)vfail, !verified ? " (no launch was swapped and compared)" : "");
      else
        pt_doctor_add("selftest", ST_OK, 1, NULL, "rel. error vs fp32: %s; shim verify against torch's kernel: %llu verified, 0 failures",
            detail, (unsigned long long)verified);
      pt_json_free(st);
    }
    pt_json_free(r2.j);
  } else {
    pt_doctor_add("shim-python", ST_SKIP, 1, NULL, "(no python)");
    for (size_t i = 0; i < sizeof gpu_checks / sizeof gpu_checks[0]; i++)
      pt_doctor_add(gpu_checks[i], ST_SKIP, strcmp(gpu_checks[i], "attention-padded") && strcmp(gpu_checks[i], "libraries"), NULL,
          "(no python)");
  }
  pt_json_free(r1.j);
  pt_env_free(&env);
  rm_dir(dir);
}
