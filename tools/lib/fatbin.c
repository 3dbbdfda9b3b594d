/* Fatbin container walker and payload decompression. See fatbin.h. */
#include "tools/lib/fatbin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lib/util.h"

/* Uncompressed payloads beyond this are treated as corrupt rather than
 * allocated (the largest cubins of torch are tens of MiB). */
#define PT_FATBIN_MAX_PAYLOAD (1ull << 30)

int pt_fatbin_walk(const uint8_t *buf, size_t len, pt_fatbin_fn fn, void *ctx, char *err, size_t errlen) {
  size_t o = 0;
  int containers = 0;
  while (o < len) {
    if (len - o < 16) {
      /* tail padding */
      for (size_t i = o; i < len; i++)
        if (buf[i]) { pt_seterr(err, errlen, "offset %zu: truncated fatbin header", o); return -1; }
      break;
    }
    uint32_t magic = pt_rd32(buf + o);
    if (magic != PT_FATBIN_MAGIC) {
      if (!pt_rd64(buf + o)) { o += 8; continue; } /* zero padding between containers */
      pt_seterr(err, errlen, "offset %zu: no fatbin magic (0x%08x)", o, magic);
      return -1;
    }
    unsigned hs = pt_rd16(buf + o + 6);
    uint64_t fsz = pt_rd64(buf + o + 8);
    if (hs < 16 || hs > len - o || fsz > len - o - hs) {
      pt_seterr(err, errlen, "offset %zu: fatbin header (size %u, %llu bytes of entries) runs past the end (%zu bytes)",
             o, hs, (unsigned long long)fsz, len);
      return -1;
    }
    containers++;
    size_t e = o + hs, end = o + hs + (size_t)fsz;
    while (e < end) {
      if (end - e < 64) { pt_seterr(err, errlen, "offset %zu: truncated fatbin entry header", e); return -1; }
      const uint8_t *h = buf + e;
      uint32_t ehs = pt_rd32(h + 4);
      uint64_t psz = pt_rd64(h + 8);
      if (ehs < 64 || ehs > end - e || psz > end - e - ehs) {
        pt_seterr(err, errlen, "offset %zu: fatbin entry (header %u, payload %llu bytes) runs past its container",
               e, ehs, (unsigned long long)psz);
        return -1;
      }
      struct pt_fatbin_entry ent = {
          .kind = pt_rd16(h),
          .stored = (size_t)psz,
          .ptx_minor = pt_rd16(h + 24),
          .ptx_major = pt_rd16(h + 26),
          .arch = pt_rd32(h + 28),
          .flags = pt_rd64(h + 40),
          .uncompressed = pt_rd64(h + 56),
          .payload = h + ehs,
          .container_offset = o,
      };
      uint32_t stored = pt_rd32(h + 16);
      if (stored && stored <= psz) ent.stored = stored;
      if (fn) {
        int rc = fn(&ent, ctx);
        if (rc) return rc;
      }
      e += ehs + (size_t)psz;
    }
    o = end;
  }
  if (!containers) {
    pt_seterr(err, errlen, "no fatbin container found");
    return -1;
  }
  return 0;
}

const char *pt_fatbin_compression(const struct pt_fatbin_entry *e) {
  if (e->flags & PT_FATBIN_FLAG_ZSTD) return "zstd";
  if (e->flags & PT_FATBIN_FLAG_LZ4) return "lz4";
  return NULL;
}

/* Adds an LZ4 length's extra bytes (a 255 says another follows) from
 * src[*i] to *len. 0, or -1 when src ends first. */
static inline int lz4_len_more(const uint8_t *src, size_t srclen, size_t *i, size_t *len) {
  unsigned b;
  do {
    if (*i >= srclen) return -1;
    b = src[(*i)++];
    *len += b;
  } while (b == 255);
  return 0;
}

long pt_lz4_block_decompress(const uint8_t *src, size_t srclen, uint8_t *dst, size_t dstcap) {
  size_t i = 0, o = 0;
  while (i < srclen) {
    unsigned token = src[i++];
    size_t lit = token >> 4;
    if (lit == 15 && lz4_len_more(src, srclen, &i, &lit)) return -1;
    if (lit > srclen - i || lit > dstcap - o) return -1;
    memcpy(dst + o, src + i, lit);
    i += lit;
    o += lit;
    if (i == srclen) break; /* the last sequence has literals only */
    if (srclen - i < 2) return -1;
    size_t off = pt_rd16(src + i);
    i += 2;
    if (off == 0 || off > o) return -1;
    size_t mlen = (token & 15) + 4;
    if ((token & 15) == 15 && lz4_len_more(src, srclen, &i, &mlen)) return -1;
    if (mlen > dstcap - o) return -1;
    /* byte by byte: the match may overlap what it produces */
    for (size_t k = 0; k < mlen; k++, o++) dst[o] = dst[o - off];
  }
  return (long)o;
}

/* libzstd is found at run time: the tool works without it (zstd entries are
 * then reported, not listed), and no zstd headers are needed to build. */
typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_iserror_fn)(size_t);
static zstd_decompress_fn zstd_decompress;
static zstd_iserror_fn zstd_iserror;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static void zstd_load(void) {
  void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  zstd_decompress = (zstd_decompress_fn)dlsym(h, "ZSTD_decompress");
  zstd_iserror = (zstd_iserror_fn)dlsym(h, "ZSTD_isError");
  if (!zstd_decompress || !zstd_iserror) zstd_decompress = NULL;
}

int pt_fatbin_payload(const struct pt_fatbin_entry *e, uint8_t **out, size_t *outlen, const char **why) {
  const char *algo = pt_fatbin_compression(e);
  *out = NULL;
  *outlen = 0;
  if (!algo) {
    uint8_t *b = malloc(e->stored + 1);
    if (!b) { *why = "out of memory"; return -1; }
    memcpy(b, e->payload, e->stored);
    b[e->stored] = 0;
    *out = b;
    *outlen = e->stored;
    return 0;
  }
  if (!e->uncompressed || e->uncompressed > PT_FATBIN_MAX_PAYLOAD) {
    *why = "implausible uncompressed size";
    return -1;
  }
  size_t n = (size_t)e->uncompressed;
  uint8_t *b = malloc(n + 1);
  if (!b) { *why = "out of memory"; return -1; }
  if (!strcmp(algo, "lz4")) {
    long got = pt_lz4_block_decompress(e->payload, e->stored, b, n);
    if (got < 0 || (size_t)got != n) { free(b); *why = "corrupt LZ4 data"; return -1; }
  } else {
    pthread_once(&zstd_once, zstd_load);
    if (!zstd_decompress) { free(b); *why = "libzstd.so.1 not available"; return -1; }
    size_t got = zstd_decompress(b, n, e->payload, e->stored);
    if (zstd_iserror(got) || got != n) { free(b); *why = "corrupt zstd data"; return -1; }
  }
  b[n] = 0;
  *out = b;
  *outlen = n;
  return 0;
}
