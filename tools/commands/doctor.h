/* The parts of `ponytail doctor`, one file per thing it checks, and the check
 * list they all write to:
 *   tools/commands/cmd_doctor.c     flags, the order of the checks, the check list, the verdict
 *   tools/commands/doctor_gpu.c     driver, GPU and CUDA runtime, probed in this process
 *   tools/commands/doctor_shim.c    the shim file, that it loads, LD_PRELOAD, its kernels
 *   tools/commands/doctor_python.c  torch, the shim in a python process, the attention path and
 *                          the self-test, through tools/commands/doctor.py run as PY -c SCRIPT
 * Internal to those files; the command's entry point is pt_cmd_doctor (tools/cmd.h). */
#ifndef PT_TOOLS_DOCTOR_H
#define PT_TOOLS_DOCTOR_H
#include <limits.h>
#include <stddef.h>

/* A check's status: passed, failed (with what to do), or could not be checked (why). */
enum { ST_OK, ST_FAIL, ST_SKIP };

struct pt_doctor_check {
  char name[24];
  int st, needed;
  char finding[768];
  char todo[512];
};

/* Adds a check (printed at once unless --json); todo is kept only for ST_FAIL. */
__attribute__((format(printf, 5, 6)))
void pt_doctor_add(const char *name, int st, int needed, const char *todo, const char *fmt, ...);
/* The check of that name added so far, or NULL. */
const struct pt_doctor_check *pt_doctor_find(const char *name);
/* A file's whole contents, NUL-terminated (malloc'ed), or NULL; *len its size. */
char *pt_doctor_slurp(const char *path, size_t *len);

/* Driver and device 0, as libcuda.so.1 reports them (tools/commands/doctor_gpu.c). */
struct pt_doctor_gpu {
  int have_lib, init_ok, drv_ver, count, major, minor, ok;
  char lib[PATH_MAX], name[256], why[PATH_MAX + 256];
};
void pt_doctor_probe_gpu(struct pt_doctor_gpu *g);
/* toolkit, driver, gpu, runtime. */
void pt_doctor_check_driver_gpu(struct pt_doctor_gpu *g);

/* tools/commands/doctor_shim.c. dlopen(shim) in a child: 0, or -1 with dlerror in why. */
int pt_doctor_shim_loads(const char *shim, char *why, size_t len);
/* LD_PRELOAD: entries that name a missing file. */
void pt_doctor_check_preload_env(void);
/* kernels, kernel-arch; where the list cannot be read (no libelf) but a GPU can settle
 * it, both wait for pt_doctor_check_kernels_by_running (after the self-test). nogpu:
 * why there is no GPU ("" with one). */
void pt_doctor_check_kernels(const char *shim, const struct pt_doctor_gpu *g, const char *nogpu);
void pt_doctor_check_kernels_by_running(const struct pt_doctor_gpu *g);
/* prefill-kernel: whether the shim's sm_90a prefill kernel will run prefill here. */
void pt_doctor_check_prefill(const char *shim, const struct pt_doctor_gpu *g, const char *nogpu);

/* tools/commands/doctor_python.c. python, torch, torch-cuda, shim-python, and (GPU) launches,
 * libraries, attention, attention-padded, selftest. */
void pt_doctor_check_python(const char *py, const char *shim, const struct pt_doctor_gpu *g, const char *nogpu,
                            const char *cfg, int batch, int prompt, int timeout_s);

#endif
