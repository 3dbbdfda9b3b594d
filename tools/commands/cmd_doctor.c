/* `ponytail doctor`: checks this machine the way a user's run does and says
 * what is wrong and what to do. Driver, GPU, runtime, shim and its kernels
 * are checked in C (libcuda/libcudart are dlopen'ed, never linked);
 * torch, the shim inside a python process, the SDPA path and the attention
 * self-test through tools/commands/doctor.py, embedded at build time (doctor_py.h)
 * and run as `PY -c SCRIPT` with a timeout. This file holds the flags, the
 * order of the checks, the check list and the verdict; the checks are in
 * tools/commands/doctor_*.c (tools/commands/doctor.h lists them). Exit 0 only when every needed
 * check passed; 1 otherwise (a check that could not run counts as not
 * passed); 2 usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "tools/cmd.h"
#include "tools/commands/doctor.h"
#include "tools/lib/shimpath.h"

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

static const char *const st_tag[] = {"[ ok ]", "[FAIL]", "[skip]"};
static const char *const st_name[] = {"ok", "fail", "skip"};

static struct pt_doctor_check checks[40];
static int nchecks, json_out;

void pt_doctor_add(const char *name, int st, int needed, const char *todo, const char *fmt, ...) {
  if (nchecks >= (int)(sizeof checks / sizeof checks[0])) return;
  struct pt_doctor_check *c = &checks[nchecks++];
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

const struct pt_doctor_check *pt_doctor_find(const char *name) {
  for (int i = 0; i < nchecks; i++)
    if (!strcmp(checks[i].name, name)) return &checks[i];
  return NULL;
}

char *pt_doctor_slurp(const char *path, size_t *len) {
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
  struct pt_doctor_gpu g;
  pt_doctor_probe_gpu(&g);
  char nogpu[PATH_MAX + 256];
  snprintf(nogpu, sizeof nogpu, "%s", g.ok ? "" : !g.have_lib ? "no NVIDIA driver, libcuda.so.1 not found" : g.why);
  pt_doctor_check_driver_gpu(&g);

  char shim[PATH_MAX];
  int shim_ok = 0;
  if (pt_tool_find_shim(shim_arg, shim, sizeof shim, why, sizeof why) != 0) {
    pt_doctor_add("shim", ST_FAIL, 1, "build it (ninja -C build) or pass --shim PATH to an existing libponytail_shim.so", "%s", why);
    pt_doctor_add("shim-load", ST_SKIP, 1, NULL, "(no shim)");
  } else {
    pt_doctor_add("shim", ST_OK, 1, NULL, "%s", shim);
    if (pt_doctor_shim_loads(shim, why, sizeof why) == 0) {
      pt_doctor_add("shim-load", ST_OK, 1, NULL, "dlopen succeeds");
      shim_ok = 1;
    } else {
      pt_doctor_add("shim-load", ST_FAIL, 1, "rebuild the shim (ninja -C build) or pass --shim PATH to a working one",
          "%s does not load: %s", shim, why);
    }
  }
  pt_doctor_check_preload_env();
  if (shim_ok) {
    pt_doctor_check_kernels(shim, &g, nogpu);
    pt_doctor_check_prefill(shim, &g, nogpu);
    pt_doctor_check_python(py, shim, &g, nogpu, cfg, batch, prompt, timeout_s);
    pt_doctor_check_kernels_by_running(&g);
  } else {
    static const char *rest[] = {"kernels", "kernel-arch", "prefill-kernel", "python", "torch", "torch-cuda",
                                 "shim-python", "launches", "libraries", "attention", "attention-padded", "selftest"};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
      pt_doctor_add(rest[i], ST_SKIP,
          strcmp(rest[i], "libraries") && strcmp(rest[i], "attention-padded") && strcmp(rest[i], "prefill-kernel"),
          NULL, "(no working shim)");
  }

  /* verdict */
  char failed[600] = "", skipped[600] = "";
  int nfail = 0, nskip = 0;
  for (int i = 0; i < nchecks; i++) {
    const struct pt_doctor_check *k = &checks[i];
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
