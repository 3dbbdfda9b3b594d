/* `ponytail kernels FILE [--json] [--demangle]`: the CUDA kernels embedded in
 * an ELF file, a cubin or a fatbin, per architecture, with their parameter
 * layouts and the Ponytail hook that recognises each. Scanning is in
 * kernels.c, fatbin.c, cubin.c, ptx.c. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook.h"
#include "common/jsonw.h"
#include "tools/cmd.h"
#include "tools/lib/kernels.h"


static void usage(FILE *f) {
  fprintf(f,
"usage: ponytail kernels FILE [--json] [--demangle]\n"
"\n"
"Lists the CUDA kernels in FILE: a host ELF shared object or executable (its .nv_fatbin\n"
"and __nv_relfatbin sections), a fatbin, or a cubin. For every embedded cubin (one per\n"
"architecture) each kernel's mangled name, sm_XX, parameters (offset:size, from the\n"
".nv.info attributes), total parameter bytes, and the Ponytail hook that recognises it.\n"
"PTX entries are listed as compute_XX with offsets computed from their .param lists.\n"
"Compressed entries are decompressed (LZ4 built in; zstd through libzstd.so.1 found at\n"
"run time); an entry that cannot be is reported as 'compressed (ALGO), not listed'.\n"
"\n"
"  --json       {\"kernels\": [{\"name\", \"arch\", \"params\": [{\"offset\", \"size\"}],\n"
"               \"param_bytes\", \"hook\"}], \"notes\": [...]}\n"
"  --demangle   demangle C++ names with __cxa_demangle from libstdc++.so.6 (found at\n"
"               run time; mangled names are kept where it is unavailable)\n"
"  -h, --help   this help\n"
"\n"
"Exit status: 0 listed, 1 missing/unreadable/non-CUDA/corrupt file, 2 bad arguments.\n");
}

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static demangle_fn find_demangler(void) {
  void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
  return h ? (demangle_fn)dlsym(h, "__cxa_demangle") : NULL;
}

/* malloc'd demangled name, or NULL (not C++ / no demangler). */
static char *demangle(demangle_fn fn, const char *name) {
  if (!fn || strncmp(name, "_Z", 2)) return NULL;
  int status = -1;
  char *d = fn(name, NULL, NULL, &status);
  if (status) { free(d); return NULL; }
  return d;
}

static const char *hook_name(const char *mangled, char *buf, size_t len) {
  int id = pt_hooks_match(mangled);
  if (id <= 0) return NULL;
  const char *n = pt_hooks_name(id);
  if (n) return n;
  snprintf(buf, len, "hook %d", id);
  return buf;
}

int pt_cmd_kernels(int argc, char **argv) {
  enum { O_JSON = 256, O_DEMANGLE };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"json", no_argument, NULL, O_JSON},
      {"demangle", no_argument, NULL, O_DEMANGLE},
      {NULL, 0, NULL, 0},
  };
  const char *path = NULL, *w;
  int json = 0, dem = 0, files = 0, c;
  optind = 0;
  /* '-': FILE may come before or after the flags; after "--" it may start with '-'. */
  while ((c = pt_getopt(argc, argv, "-:h", opts, &w)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_JSON: json = 1; break;
    case O_DEMANGLE: dem = 1; break;
    case 1: path = optarg, files++; break;
    default:
      fprintf(stderr, "ponytail kernels: unknown flag '%s'\n\n", w);
      usage(stderr);
      return 2;
    }
  }
  for (; optind < argc; optind++) path = argv[optind], files++;
  if (files != 1) {
    fprintf(stderr, "ponytail kernels: exactly one FILE is expected\n\n");
    usage(stderr);
    return 2;
  }

  struct pt_kernel_list l = {0};
  char err[512];
  if (pt_kernels_scan_file(path, &l, err, sizeof err)) {
    fprintf(stderr, "ponytail kernels: %s\n", err);
    pt_kernel_list_free(&l);
    return 1;
  }
  demangle_fn dfn = dem ? find_demangler() : NULL;
  if (dem && !dfn) fprintf(stderr, "ponytail kernels: __cxa_demangle not found; names stay mangled\n");
  int errors = 0;
  for (size_t i = 0; i < l.nnotes; i++) errors += l.notes[i].is_error;

  if (json) {
    struct pt_jw w;
    pt_jw_init(&w, stdout, true);
    pt_jw_obj_begin(&w, NULL);
    pt_jw_str(&w, "file", path);
    pt_jw_arr_begin(&w, "kernels");
    for (size_t i = 0; i < l.n; i++) {
      const struct pt_fatbin_kernel *k = &l.k[i];
      char hb[32], *d = demangle(dfn, k->name);
      pt_jw_obj_begin(&w, NULL);
      pt_jw_str(&w, "name", k->name);
      if (dem) pt_jw_str(&w, "demangled", d ? d : k->name);
      pt_jw_str(&w, "arch", k->arch);
      pt_jw_bool(&w, "ptx", k->ptx);
      if (k->params_known) {
        pt_jw_arr_begin(&w, "params");
        for (size_t p = 0; p < k->nparams; p++) {
          pt_jw_obj_begin(&w, NULL);
          pt_jw_u64(&w, "offset", k->params[p].offset);
          pt_jw_u64(&w, "size", k->params[p].size);
          pt_jw_obj_end(&w);
        }
        pt_jw_arr_end(&w);
        pt_jw_u64(&w, "param_bytes", k->param_bytes);
      } else {
        pt_jw_str(&w, "params", NULL);
        pt_jw_str(&w, "param_bytes", NULL);
      }
      pt_jw_str(&w, "hook", hook_name(k->name, hb, sizeof hb));
      pt_jw_obj_end(&w);
      free(d);
    }
    pt_jw_arr_end(&w);
    pt_jw_arr_begin(&w, "notes");
    for (size_t i = 0; i < l.nnotes; i++) pt_jw_str(&w, NULL, l.notes[i].text);
    pt_jw_arr_end(&w);
    pt_jw_obj_end(&w);
    pt_jw_finish(&w);
  } else {
    printf("%s: %zu kernels in %u cubin/PTX entries\n\n", path, l.n, l.entries);
    printf("%-12s %11s  %-14s %s\n", "ARCH", "PARAM BYTES", "HOOK", "KERNEL  [offset:size ...]");
    for (size_t i = 0; i < l.n; i++) {
      const struct pt_fatbin_kernel *k = &l.k[i];
      char hb[32], bytes[24], *d = demangle(dfn, k->name);
      const char *h = hook_name(k->name, hb, sizeof hb);
      if (k->params_known) snprintf(bytes, sizeof bytes, "%" PRIu64, k->param_bytes);
      else snprintf(bytes, sizeof bytes, "?");
      printf("%-12s %11s  %-14s %s  [", k->arch, bytes, h ? h : "-", d ? d : k->name);
      for (size_t p = 0; p < k->nparams; p++) printf("%s%u:%u", p ? " " : "", k->params[p].offset, k->params[p].size);
      printf("]\n");
      free(d);
    }
    for (size_t i = 0; i < l.nnotes; i++) printf("%s: %s\n", l.notes[i].is_error ? "error" : "note", l.notes[i].text);
  }
  pt_kernel_list_free(&l);
  if (errors) fprintf(stderr, "ponytail kernels: %s: %d corrupt entr%s\n", path, errors, errors == 1 ? "y" : "ies");
  return errors ? 1 : 0;
}
