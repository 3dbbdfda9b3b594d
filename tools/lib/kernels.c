/* File-level scanning for `ponytail kernels`: host ELF -> .nv_fatbin /
 * __nv_relfatbin -> fatbin entries -> cubins (cubin.c) and PTX (ptx.c). */
#include "tools/lib/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"
#include "tools/lib/fatbin.h"

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

void pt_kernel_list_free(struct pt_kernel_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->k[i].name);
    free(l->k[i].params);
  }
  for (size_t i = 0; i < l->nnotes; i++) free(l->notes[i].text);
  free(l->k);
  free(l->notes);
  memset(l, 0, sizeof *l);
}

int pt_kernel_list_add(struct pt_kernel_list *l, struct pt_fatbin_kernel *k) {
  if (l->n == l->cap) {
    struct pt_fatbin_kernel *nk = pt_grow(l->k, &l->cap, sizeof *nk, 16);
    if (!nk) {
      free(k->name);
      free(k->params);
      return -1;
    }
    l->k = nk;
  }
  l->k[l->n++] = *k;
  return 0;
}

void pt_kernel_list_note(struct pt_kernel_list *l, int is_error, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (l->nnotes == l->notes_cap) {
    struct pt_kernel_note *nn = pt_grow(l->notes, &l->notes_cap, sizeof *nn, 8);
    if (!nn) return;
    l->notes = nn;
  }
  char *t = strdup(buf);
  if (!t) return;
  l->notes[l->nnotes++] = (struct pt_kernel_note){t, is_error};
}

static int on_entry(const struct pt_fatbin_entry *e, void *ctx) {
  struct pt_kernel_list *l = ctx;
  const char *kind = e->kind == PT_FATBIN_KIND_PTX ? "compute" : "sm";
  l->entries++;
  if (e->kind != PT_FATBIN_KIND_PTX && e->kind != PT_FATBIN_KIND_ELF) {
    pt_kernel_list_note(l, 0, "arch %u: entry of unknown kind %u, not listed", e->arch, e->kind);
    return 0;
  }
  uint8_t *pl;
  size_t n;
  const char *why = NULL, *algo = pt_fatbin_compression(e);
  if (pt_fatbin_payload(e, &pl, &n, &why)) {
    /* a missing libzstd is a limit of this machine; bad data is an error */
    int missing_lib = !strcmp(why, "libzstd.so.1 not available");
    pt_kernel_list_note(l, !missing_lib, "%s_%u %s: compressed (%s), not listed: %s", kind, e->arch,
                        e->kind == PT_FATBIN_KIND_PTX ? "ptx" : "cubin", algo ? algo : "?", why);
    return 0;
  }
  if (e->kind == PT_FATBIN_KIND_PTX) {
    if (pt_ptx_list((const char *)pl, strnlen((const char *)pl, n), e->arch, l))
      pt_kernel_list_note(l, 1, "compute_%u ptx: out of memory", e->arch);
  } else {
    char err[256];
    if (pt_cubin_list(pl, n, e->arch, l, err, sizeof err))
      pt_kernel_list_note(l, 1, "sm_%u cubin: %s", e->arch, err);
  }
  free(pl);
  return 0;
}

static int scan_fatbin(const uint8_t *buf, size_t len, struct pt_kernel_list *l, const char *where, char *err,
                       size_t errlen) {
  char e[256];
  if (pt_fatbin_walk(buf, len, on_entry, l, e, sizeof e)) {
    snprintf(err, errlen, "%s: corrupt fatbin: %s", where, e);
    return -1;
  }
  return 0;
}

/* buf must be writable by libelf (a private copy or a MAP_PRIVATE mapping):
 * copying a 1 GiB libtorch_cuda.so would be wasteful, so callers provide it. */
static int scan_host_elf(uint8_t *buf, size_t len, struct pt_kernel_list *l, char *err, size_t errlen) {
  int rc = -1, found = 0;
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory((char *)buf, len);
  GElf_Ehdr eh;
  size_t shstrndx;
  if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
    snprintf(err, errlen, "corrupt ELF header: %s", elf_errmsg(-1));
    goto out;
  }
  if (eh.e_machine == EM_CUDA) {
    rc = pt_cubin_list(buf, len, 0, l, err, errlen);
    if (!rc) l->entries++;
    goto out;
  }
  if (elf_getshdrstrndx(elf, &shstrndx)) {
    snprintf(err, errlen, "unreadable ELF section table: %s", elf_errmsg(-1));
    goto out;
  }
  for (Elf_Scn *s = NULL; (s = elf_nextscn(elf, s));) {
    GElf_Shdr sh;
    if (!gelf_getshdr(s, &sh)) continue;
    const char *nm = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!nm || (strcmp(nm, ".nv_fatbin") && strcmp(nm, "__nv_relfatbin"))) continue;
    found++;
    if (sh.sh_type == SHT_NOBITS) { snprintf(err, errlen, "section %s has no data", nm); goto out; }
    Elf_Data *d = elf_rawdata(s, NULL);
    if (!d || (!d->d_buf && d->d_size)) {
      snprintf(err, errlen, "section %s is unreadable: %s", nm, elf_errmsg(-1));
      goto out;
    }
    if (scan_fatbin(d->d_buf, d->d_size, l, nm, err, errlen)) goto out;
  }
  if (!found) {
    snprintf(err, errlen, "no .nv_fatbin or __nv_relfatbin section: no CUDA device code in this ELF file");
    goto out;
  }
  rc = 0;
out:
  if (elf) elf_end(elf);
  return rc;
}

static int scan_writable(uint8_t *buf, size_t len, struct pt_kernel_list *l, char *err, size_t errlen) {
  /* Before the input is read: a missing libelf.so.1 reads as one, not as corrupt input. */
  if (pt_libelf_load(err, errlen)) return -1;
  if (len >= 4 && buf[0] == 0x7f && !memcmp(buf + 1, "ELF", 3)) return scan_host_elf(buf, len, l, err, errlen);
  if (len >= 4 && buf[0] == 0x50 && buf[1] == 0xed && buf[2] == 0x55 && buf[3] == 0xba)
    return scan_fatbin(buf, len, l, "fatbin", err, errlen);
  snprintf(err, errlen, "not an ELF file, a cubin or a fatbin (%s)", len < 4 ? "too short" : "unknown magic");
  return -1;
}

int pt_kernels_scan_memory(const uint8_t *buf, size_t len, struct pt_kernel_list *l, char *err, size_t errlen) {
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) { snprintf(err, errlen, "out of memory"); return -1; }
  memcpy(copy, buf, len);
  int rc = scan_writable(copy, len, l, err, errlen);
  free(copy);
  return rc;
}

int pt_kernels_scan_file(const char *path, struct pt_kernel_list *l, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    close(fd);
    return -1;
  }
  if (st.st_size == 0) {
    snprintf(err, errlen, "%s: empty file", path);
    close(fd);
    return -1;
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0); /* copy-on-write */
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  char e[400];
  int rc = scan_writable(m, (size_t)st.st_size, l, e, sizeof e);
  munmap(m, (size_t)st.st_size);
  if (rc) snprintf(err, errlen, "%s: %s", path, e);
  return rc;
}
