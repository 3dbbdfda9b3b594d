/* The CUDA fatbin container, as nvcc 13 writes it (worked out from the
 * toolkit's fatbinary_section.h and from files built here):
 *
 *   header   u32 magic 0xBA55ED50, u16 version (1), u16 header size (16),
 *            u64 size of the entries that follow the header
 *   entry    u16 kind (1 PTX, 2 ELF cubin), u16 version (0x0101),
 *            u32 entry header size (64; 80 for PTX), u64 payload size
 *            (padded), u32 stored payload bytes (compressed size when
 *            compressed), u32 options offset, u16 minor, u16 major
 *            (PTX ISA version for PTX), u32 sm arch (80 = sm_80),
 *            u32 name offset, u32 name length, u64 flags, u64 reserved,
 *            u64 uncompressed size; the payload follows the entry header.
 *   flags    0x1 64-bit, 0x10 Linux, 0x2000 LZ4 block compressed,
 *            0x8000 zstd frame compressed (nvcc 13's default for PTX, and
 *            for everything with -Xfatbin -compress-all; --compress-mode
 *            speed picks LZ4).
 *
 * A `.nv_fatbin` section holds several containers back to back (one per
 * linked object), 8-byte aligned. */
#ifndef PT_TOOLS_FATBIN_H
#define PT_TOOLS_FATBIN_H
#include <stddef.h>
#include <stdint.h>

#define PT_FATBIN_MAGIC 0xBA55ED50u
#define PT_FATBIN_KIND_PTX 1
#define PT_FATBIN_KIND_ELF 2
#define PT_FATBIN_FLAG_LZ4 0x2000ull
#define PT_FATBIN_FLAG_ZSTD 0x8000ull

struct pt_fatbin_entry {
  unsigned kind;            /* PT_FATBIN_KIND_* (others are listed as unknown) */
  unsigned arch;            /* 80 for sm_80 / compute_80 */
  unsigned ptx_major, ptx_minor;
  uint64_t flags;
  const uint8_t *payload;   /* stored bytes, inside the walked buffer */
  size_t stored;            /* bytes of payload that hold data */
  uint64_t uncompressed;    /* size after decompression (0 if not compressed) */
  size_t container_offset;  /* of the container's header in the walked buffer */
};

/* Calls fn for every entry of every container in buf[0, len). Stops at the
 * first structural error: returns 0 if all was well-formed, -1 with err
 * ("offset N: ...") otherwise (entries before it were still reported).
 * Returns -1 also if no container was found at all. fn returning non-zero
 * stops the walk (returned as is). */
typedef int (*pt_fatbin_fn)(const struct pt_fatbin_entry *e, void *ctx);
int pt_fatbin_walk(const uint8_t *buf, size_t len, pt_fatbin_fn fn, void *ctx, char *err, size_t errlen);

/* "lz4", "zstd", or NULL if the entry is not compressed. */
const char *pt_fatbin_compression(const struct pt_fatbin_entry *e);

/* The entry's payload, decompressed when needed, in a malloc'd buffer the
 * caller frees (*outlen bytes, plus a NUL not counted). Returns 0, or -1
 * with *why set to a static reason ("zstd: libzstd.so.1 not available", ...). */
int pt_fatbin_payload(const struct pt_fatbin_entry *e, uint8_t **out, size_t *outlen, const char **why);

/* LZ4 block format (no frame): decompresses src into dst[0, dstcap).
 * Returns the bytes written, or -1 on malformed input or if dst is too small. */
long pt_lz4_block_decompress(const uint8_t *src, size_t srclen, uint8_t *dst, size_t dstcap);

#endif
