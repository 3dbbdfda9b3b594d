/* libelf, loaded when first needed. The kernel lister (kernels.c, cubin.c)
 * calls libelf by its own function names; the definitions below forward each
 * call to libelf.so.1, opened with dlopen on first use. So `ponytail` needs
 * libelf's headers to build but not the library to run: without libelf.so.1
 * every other command works and `ponytail kernels` says what is missing. And
 * the executable links nothing outside the set a manylinux wheel may rely on
 * (auditwheel show: libelf is not in it), which a linked libelf broke.
 *
 * No interposition: an executable exports none of these names (nothing it
 * loads at link time refers to them), and libelf calls its own functions
 * through internal aliases, so its calls never come back here. */
#include <dlfcn.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>

#include "tools/lib/kernels.h"

/* Every libelf function the lister uses: X(return type, name, parameters, arguments, the value
 * returned when libelf.so.1 could not be loaded (each the function's own failure value)). */
#define PT_LIBELF_FNS(X)                                                                        \
  X(unsigned int, elf_version, (unsigned int v), (v), EV_NONE)                                  \
  X(Elf *, elf_memory, (char *image, size_t size), (image, size), NULL)                         \
  X(Elf_Kind, elf_kind, (Elf *e), (e), ELF_K_NONE)                                              \
  X(int, elf_end, (Elf *e), (e), 0)                                                             \
  X(Elf_Data *, elf_getdata, (Elf_Scn *s, Elf_Data *d), (s, d), NULL)                           \
  X(Elf_Data *, elf_rawdata, (Elf_Scn *s, Elf_Data *d), (s, d), NULL)                           \
  X(Elf_Scn *, elf_getscn, (Elf *e, size_t i), (e, i), NULL)                                    \
  X(Elf_Scn *, elf_nextscn, (Elf *e, Elf_Scn *s), (e, s), NULL)                                 \
  X(size_t, elf_ndxscn, (Elf_Scn *s), (s), 0)                                                   \
  X(int, elf_getshdrnum, (Elf *e, size_t *n), (e, n), -1)                                       \
  X(int, elf_getshdrstrndx, (Elf *e, size_t *n), (e, n), -1)                                    \
  X(char *, elf_strptr, (Elf *e, size_t i, size_t off), (e, i, off), NULL)                      \
  X(GElf_Ehdr *, gelf_getehdr, (Elf *e, GElf_Ehdr *h), (e, h), NULL)                            \
  X(GElf_Shdr *, gelf_getshdr, (Elf_Scn *s, GElf_Shdr *h), (s, h), NULL)                        \
  X(GElf_Sym *, gelf_getsym, (Elf_Data *d, int i, GElf_Sym *sym), (d, i, sym), NULL)

#define PT_LIBELF_PTR(ret, name, params, args, fail) static ret(*real_##name) params;
PT_LIBELF_FNS(PT_LIBELF_PTR)
static const char *(*real_elf_errmsg)(int);

static pthread_once_t libelf_once = PTHREAD_ONCE_INIT;
static char libelf_why[300]; /* why libelf.so.1 is not usable; "" once loaded */

static void libelf_open(void) {
  void *h = dlopen("libelf.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(libelf_why, sizeof libelf_why, "libelf.so.1 cannot be loaded (%s)", e ? e : "dlopen failed");
    return;
  }
  int missing = 0;
#define PT_LIBELF_SYM(ret, name, params, args, fail)                  \
  if (!(*(void **)&real_##name = dlsym(h, #name))) missing = 1;
  PT_LIBELF_FNS(PT_LIBELF_SYM)
  if (!(*(void **)&real_elf_errmsg = dlsym(h, "elf_errmsg"))) missing = 1;
  if (missing) {
    snprintf(libelf_why, sizeof libelf_why, "libelf.so.1 lacks a function the kernel lister uses");
    return;
  }
  libelf_why[0] = '\0';
}

/* 1 when libelf is usable (loading it on the first call). */
static int libelf_ok(void) {
  pthread_once(&libelf_once, libelf_open);
  return real_elf_errmsg && !libelf_why[0];
}

int pt_libelf_load(char *err, size_t errlen) {
  if (libelf_ok()) return 0;
  snprintf(err, errlen, "%s: listing kernels needs elfutils' libelf (Debian/Ubuntu: apt-get install libelf1)",
           libelf_why);
  return -1;
}

#define PT_LIBELF_DEF(ret, name, params, args, fail) \
  ret name params { return libelf_ok() ? real_##name args : fail; }
PT_LIBELF_FNS(PT_LIBELF_DEF)

const char *elf_errmsg(int error) { return libelf_ok() ? real_elf_errmsg(error) : libelf_why; }
