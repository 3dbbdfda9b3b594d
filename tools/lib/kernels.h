/* The kernel lister behind `ponytail kernels`: finds CUDA device code in a
 * host ELF (.nv_fatbin, __nv_relfatbin), a raw fatbin or a raw cubin, and
 * lists every kernel per architecture with its parameter layout.
 *
 * Cubins: kernels are the STT_FUNC symbols marked as entries (st_other
 * 0x10) or owning a `.nv.info.<name>` section. That section is a list of
 * attributes {u8 format, u8 id, ...}: formats 1-3 (NVAL/BVAL/HVAL) are 4
 * bytes in all with a u16 value at +2; format 4 (SVAL) has a u16 length at
 * +2 and that many bytes after. EIATTR_KPARAM_INFO (0x17, one per
 * parameter): u32 index, u16 ordinal, u16 offset, u32 bits whose top 14
 * (>> 18) are the size in bytes. EIATTR_CBANK_PARAM_SIZE (0x19, HVAL): total
 * parameter bytes. EIATTR_PARAM_CBANK (0x0a): u32 symbol, u16 offset in
 * constant bank 0, u16 size (used when 0x19 is absent). */
#ifndef PT_TOOLS_KERNELS_H
#define PT_TOOLS_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#define PT_NVINFO_KPARAM_INFO 0x17
#define PT_NVINFO_CBANK_PARAM_SIZE 0x19
#define PT_NVINFO_PARAM_CBANK 0x0a

struct pt_kparam {
  uint32_t ordinal, offset, size;
};

struct pt_fatbin_kernel {
  char *name;              /* mangled */
  char arch[16];           /* "sm_90" (cubin) or "compute_90" (PTX) */
  int ptx;                 /* 1 when listed from PTX */
  struct pt_kparam *params; /* by ordinal */
  size_t nparams;
  uint64_t param_bytes;
  int params_known;        /* 0: no parameter information was found */
};

/* Something not listed, with why: "sm_90: compressed (zstd), not listed: ...". */
struct pt_kernel_note {
  char *text;
  int is_error;            /* corrupt data (exit non-zero), not a missing library */
};

struct pt_kernel_list {
  struct pt_fatbin_kernel *k;
  size_t n, cap;
  struct pt_kernel_note *notes;
  size_t nnotes, notes_cap;
  unsigned entries;        /* fatbin entries / cubins seen */
};

void pt_kernel_list_free(struct pt_kernel_list *l);

/* Scans a file (host ELF, fatbin or cubin) / the same in memory (buf is not
 * modified). Returns 0 when the structure was readable (per-entry problems
 * are in l->notes), -1 with err for missing, non-CUDA, truncated or corrupt
 * input. l must be zeroed before the first call; free it either way. */
int pt_kernels_scan_file(const char *path, struct pt_kernel_list *l, char *err, size_t errlen);
int pt_kernels_scan_memory(const uint8_t *buf, size_t len, struct pt_kernel_list *l, char *err, size_t errlen);

/* libelf is loaded on first use (tools/lib/libelf_dl.c): 0 when it is usable, else -1 with
 * why in err. The scans above call it first. */
int pt_libelf_load(char *err, size_t errlen);

/* Lists the kernels of one cubin image; arch 0 = read it from e_flags. */
int pt_cubin_list(const uint8_t *img, size_t len, unsigned arch, struct pt_kernel_list *l, char *err, size_t errlen);
/* Parses one .nv.info.<name> section into k->params / param_bytes. -1 if malformed. */
int pt_nvinfo_params(const uint8_t *info, size_t len, struct pt_fatbin_kernel *k);
/* Lists the .entry functions of PTX text with parameter offsets from their
 * .param declarations. */
int pt_ptx_list(const char *text, size_t len, unsigned arch, struct pt_kernel_list *l);

/* Internal to the lister: appends (taking ownership of k's allocations) / a note. */
int pt_kernel_list_add(struct pt_kernel_list *l, struct pt_fatbin_kernel *k);
void pt_kernel_list_note(struct pt_kernel_list *l, int is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
