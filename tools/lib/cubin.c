/* Kernels of one cubin (through libelf) and their .nv.info parameter
 * attributes. See kernels.h for the attribute layout. */
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/kernels.h"
#include "tools/lib/util.h"

#ifndef EM_CUDA
#define EM_CUDA 190
#endif
#define PT_STO_CUDA_ENTRY 0x10

int pt_nvinfo_params(const uint8_t *info, size_t len, struct pt_fatbin_kernel *k) {
  size_t i = 0;
  uint64_t cbank_size = 0, total = 0;
  int have_total = 0, have_cbank = 0;
  while (i < len) {
    if (len - i < 4) return -1;
    unsigned fmt = info[i], id = info[i + 1];
    size_t vlen = 0;
    const uint8_t *val = info + i + 2;
    if (fmt == 4) {
      vlen = pt_rd16(info + i + 2);
      if (vlen > len - i - 4) return -1;
      val = info + i + 4;
    } else if (fmt < 1 || fmt > 3) {
      return -1;
    }
    if (id == PT_NVINFO_KPARAM_INFO && fmt == 4 && vlen >= 12) {
      struct pt_kparam *p = realloc(k->params, (k->nparams + 1) * sizeof *p);
      if (!p) return -1;
      k->params = p;
      p[k->nparams].ordinal = pt_rd16(val + 4);
      p[k->nparams].offset = pt_rd16(val + 6);
      p[k->nparams].size = pt_rd32(val + 8) >> 18;
      k->nparams++;
    } else if (id == PT_NVINFO_CBANK_PARAM_SIZE && fmt == 3) {
      total = pt_rd16(val);
      have_total = 1;
    } else if (id == PT_NVINFO_PARAM_CBANK && fmt == 4 && vlen >= 8) {
      cbank_size = pt_rd16(val + 6);
      have_cbank = 1;
    }
    i += fmt == 4 ? 4 + vlen : 4;
  }
  /* nvcc writes them last parameter first: order by ordinal. */
  for (size_t a = 1; a < k->nparams; a++) {
    struct pt_kparam t = k->params[a];
    size_t b = a;
    for (; b > 0 && k->params[b - 1].ordinal > t.ordinal; b--) k->params[b] = k->params[b - 1];
    k->params[b] = t;
  }
  if (have_total) k->param_bytes = total;
  else if (have_cbank) k->param_bytes = cbank_size;
  else {
    k->param_bytes = 0;
    for (size_t a = 0; a < k->nparams; a++)
      if (k->params[a].offset + (uint64_t)k->params[a].size > k->param_bytes)
        k->param_bytes = k->params[a].offset + (uint64_t)k->params[a].size;
  }
  k->params_known = 1; /* nvcc writes no parameter attributes for a kernel without parameters */
  return 0;
}

static unsigned cubin_arch(const GElf_Ehdr *eh) {
  /* The CUDA 13 ELF ABI (OSABI 0x41) moved the SM number to bits 8-15 of
   * e_flags; before it (OSABI 0x33) it was the low byte. */
  if (eh->e_ident[EI_OSABI] == 0x41) return (unsigned)(eh->e_flags >> 8) & 0xff;
  return (unsigned)eh->e_flags & 0xff;
}

int pt_cubin_list(const uint8_t *img, size_t len, unsigned arch, struct pt_kernel_list *l, char *err, size_t errlen) {
  int rc = -1;
  size_t *info_of = NULL; /* text section index -> its .nv.info.<name> section index */
  /* libelf wants a writable image it may keep pointers into: a private copy. */
  char *copy = malloc(len ? len : 1);
  if (!copy) { snprintf(err, errlen, "out of memory"); return -1; }
  memcpy(copy, img, len);
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory(copy, len);
  GElf_Ehdr eh;
  size_t shnum, shstrndx;
  if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
    snprintf(err, errlen, "not an ELF cubin");
    goto out;
  }
  if (eh.e_machine != EM_CUDA) { snprintf(err, errlen, "ELF machine %u is not CUDA", eh.e_machine); goto out; }
  if (elf_getshdrnum(elf, &shnum) || elf_getshdrstrndx(elf, &shstrndx)) {
    snprintf(err, errlen, "cubin: unreadable section table: %s", elf_errmsg(-1));
    goto out;
  }
  if (!arch) arch = cubin_arch(&eh);
  info_of = calloc(shnum ? shnum : 1, sizeof *info_of);
  if (!info_of) { snprintf(err, errlen, "out of memory"); goto out; }
  Elf_Scn *symscn = NULL;
  GElf_Shdr symsh = {0};
  for (Elf_Scn *s = NULL; (s = elf_nextscn(elf, s));) {
    GElf_Shdr sh;
    if (!gelf_getshdr(s, &sh)) continue;
    const char *nm = elf_strptr(elf, shstrndx, sh.sh_name);
    if (sh.sh_type == SHT_SYMTAB && !symscn) { symscn = s; symsh = sh; }
    if (nm && !strncmp(nm, ".nv.info.", 9) && sh.sh_info < shnum) info_of[sh.sh_info] = elf_ndxscn(s);
  }
  if (!symscn) { snprintf(err, errlen, "cubin has no symbol table"); goto out; }
  Elf_Data *syms = elf_getdata(symscn, NULL);
  if (!syms || !symsh.sh_entsize) { snprintf(err, errlen, "cubin: unreadable symbol table"); goto out; }
  size_t nsym = syms->d_size / symsh.sh_entsize;
  for (size_t i = 0; i < nsym; i++) {
    GElf_Sym sym;
    if (!gelf_getsym(syms, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
    size_t shndx = sym.st_shndx;
    size_t info = shndx > 0 && shndx < shnum ? info_of[shndx] : 0;
    const char *nm = elf_strptr(elf, symsh.sh_link, sym.st_name);
    if (!nm || !*nm) continue;
    if (!(sym.st_other & PT_STO_CUDA_ENTRY)) {
      /* Without the entry flag, a kernel is the function its .text.<name>
       * section is named after; other functions in that section (compiler
       * helpers such as $__internal_N_...) are device code, not kernels. */
      if (!info) continue;
      Elf_Scn *ts = elf_getscn(elf, shndx);
      GElf_Shdr tsh;
      const char *tn = ts && gelf_getshdr(ts, &tsh) ? elf_strptr(elf, shstrndx, tsh.sh_name) : NULL;
      if (!tn || strncmp(tn, ".text.", 6) || strcmp(tn + 6, nm)) continue;
    }
    struct pt_fatbin_kernel k = {0};
    snprintf(k.arch, sizeof k.arch, "sm_%u", arch);
    if (!(k.name = strdup(nm))) { snprintf(err, errlen, "out of memory"); goto out; }
    if (info) {
      Elf_Scn *is = elf_getscn(elf, info);
      Elf_Data *d = is ? elf_getdata(is, NULL) : NULL;
      if (d && d->d_buf && pt_nvinfo_params(d->d_buf, d->d_size, &k)) {
        pt_kernel_list_note(l, 1, "%s %s: malformed .nv.info attributes", k.arch, nm);
        free(k.params);
        k.params = NULL;
        k.nparams = 0;
        k.params_known = 0;
      }
    }
    if (pt_kernel_list_add(l, &k)) { snprintf(err, errlen, "out of memory"); goto out; }
  }
  rc = 0;
out:
  free(info_of);
  if (elf) elf_end(elf);
  free(copy);
  return rc;
}
