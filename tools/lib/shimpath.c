/* Locating the shim and examples/generate.py next to the running `ponytail`.
 * Only the tool's own location counts (no environment variable): a shim from
 * another build would silently mismatch the CLI that reads its stats. */
#include "tools/lib/shimpath.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where `meson install` put the shim and the examples, relative to the prefix (or absolute):
 * meson.build's pt_shim_rel and pt_data_rel (libdir and datadir; for a wheel, lib/ponytail and
 * share, where pip places the wheel's data beside its bin/). */
#ifndef PT_SHIMDIR
#define PT_SHIMDIR "lib"
#endif
#ifndef PT_DATADIR
#define PT_DATADIR "share"
#endif

#define PT_SHIM_NAME "libponytail_shim.so"

int pt_tool_self_dir(char *out, size_t len) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (!slash) return -1;
  *slash = '\0';
  if ((size_t)snprintf(out, len, "%s", buf[0] ? buf : "/") >= len) return -1;
  return 0;
}

/* realpath() of `path` into out when it is a readable regular file. */
static int pt_tool_try(const char *path, char *out, size_t len) {
  char real[PATH_MAX];
  if (access(path, R_OK) != 0 || !realpath(path, real)) return -1;
  if ((size_t)snprintf(out, len, "%s", real) >= len) return -1;
  return 0;
}

int pt_tool_find_shim(const char *override, char *out, size_t len, char *why, size_t whylen) {
  if (override) {
    if (pt_tool_try(override, out, len) == 0) return 0;
    snprintf(why, whylen, "shim '%s' not found or not readable", override);
    return -1;
  }
  char dir[PATH_MAX], cand[PATH_MAX + 64], cand2[PATH_MAX + 64];
  if (pt_tool_self_dir(dir, sizeof dir) != 0) {
    snprintf(why, whylen, "cannot read /proc/self/exe to locate the shim; pass --shim PATH");
    return -1;
  }
  snprintf(cand, sizeof cand, "%s/../shim/" PT_SHIM_NAME, dir);
  if (pt_tool_try(cand, out, len) == 0) return 0;
  /* Installed: <prefix>/bin/ponytail and <prefix>/<shimdir>/, by meson install or by pip from
   * the wheel. An absolute dir (meson -Dlibdir=/...) is used as is. */
  if (PT_SHIMDIR[0] == '/') snprintf(cand2, sizeof cand2, PT_SHIMDIR "/" PT_SHIM_NAME);
  else snprintf(cand2, sizeof cand2, "%s/../" PT_SHIMDIR "/" PT_SHIM_NAME, dir);
  if (pt_tool_try(cand2, out, len) == 0) return 0;
  snprintf(why, whylen, "shim " PT_SHIM_NAME " not found (looked at %s and %s); pass --shim PATH",
           cand, cand2);
  return -1;
}

int pt_tool_find_script(const char *override, char *out, size_t len, char *why, size_t whylen) {
  if (override) {
    if (pt_tool_try(override, out, len) == 0) return 0;
    snprintf(why, whylen, "script '%s' not found or not readable", override);
    return -1;
  }
  char dir[PATH_MAX], cand[PATH_MAX + 64];
  if (pt_tool_self_dir(dir, sizeof dir) == 0) {
    if (PT_DATADIR[0] == '/') snprintf(cand, sizeof cand, PT_DATADIR "/ponytail/examples/generate.py");
    else snprintf(cand, sizeof cand, "%s/../" PT_DATADIR "/ponytail/examples/generate.py", dir);
    if (pt_tool_try(cand, out, len) == 0) return 0;
  }
#ifdef PT_SOURCE_ROOT
  if (pt_tool_try(PT_SOURCE_ROOT "/examples/generate.py", out, len) == 0) return 0;
#endif
  snprintf(why, whylen, "examples/generate.py not found next to this ponytail; pass --script PATH");
  return -1;
}
