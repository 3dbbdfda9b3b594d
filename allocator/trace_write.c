/* Trace writer: see trace.h. Formats into a stack buffer (no stdio, no
 * allocation) and writes each line with one write(2) on an O_APPEND file. */
#include "allocator/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pt_trace_writer {
  int fd;
  uint64_t errors; /* atomic */
};

static char *put_dec(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while (v /= 10);
  while (n) *p++ = tmp[--n];
  return p;
}

/* As printf's %p: "(nil)" for 0, else 0x and lowercase hex. */
static char *put_ptr(char *p, uint64_t v) {
  if (!v) {
    memcpy(p, "(nil)", 5);
    return p + 5;
  }
  char tmp[16];
  int n = 0;
  while (v) {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  }
  *p++ = '0';
  *p++ = 'x';
  while (n) *p++ = tmp[--n];
  return p;
}

size_t pt_trace_format(char *buf, const struct pt_trace_event *ev) {
  char *p = buf;
  *p++ = ev->kind;
  *p++ = ' ';
  if (ev->kind == 'A' || ev->kind == 'P') {
    p = put_dec(p, ev->bytes);
    *p++ = ' ';
  }
  p = put_ptr(p, ev->ptr);
  *p++ = ' ';
  p = put_ptr(p, ev->stream);
  *p++ = '\n';
  return (size_t)(p - buf);
}

struct pt_trace_writer *pt_trace_open_fd(int fd) {
  if (fd < 0) return NULL;
  struct pt_trace_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->fd = fd;
  return w;
}

struct pt_trace_writer *pt_trace_open(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  struct pt_trace_writer *w = pt_trace_open_fd(fd);
  if (!w && fd >= 0) close(fd);
  return w;
}

static void trace_write(struct pt_trace_writer *w, const char *buf, size_t len) {
  /* O_APPEND makes each whole-line write atomic with respect to other
   * writers, so no lock is needed. */
  ssize_t n;
  do n = write(w->fd, buf, len);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)len) __atomic_add_fetch(&w->errors, 1, __ATOMIC_RELAXED);
}

void pt_trace_alloc(struct pt_trace_writer *w, bool pooled, uint64_t bytes, const void *ptr,
                    uint64_t stream) {
  if (!w) return;
  char buf[80];
  struct pt_trace_event ev = {pooled ? 'A' : 'P', bytes, (uint64_t)(uintptr_t)ptr, stream};
  trace_write(w, buf, pt_trace_format(buf, &ev));
}

void pt_trace_free(struct pt_trace_writer *w, bool pooled, const void *ptr, uint64_t stream) {
  if (!w) return;
  char buf[80];
  struct pt_trace_event ev = {pooled ? 'R' : 'Q', 0, (uint64_t)(uintptr_t)ptr, stream};
  trace_write(w, buf, pt_trace_format(buf, &ev));
}

void pt_trace_comment(struct pt_trace_writer *w, const char *text) {
  if (!w) return;
  char buf[256];
  size_t n = 0;
  buf[n++] = '#';
  buf[n++] = ' ';
  for (; *text && n < sizeof buf - 1; text++) buf[n++] = *text == '\n' || *text == '\r' ? ' ' : *text;
  buf[n++] = '\n';
  trace_write(w, buf, n);
}

uint64_t pt_trace_write_errors(const struct pt_trace_writer *w) {
  return w ? __atomic_load_n(&w->errors, __ATOMIC_RELAXED) : 0;
}

void pt_trace_close(struct pt_trace_writer *w) {
  if (!w) return;
  close(w->fd);
  free(w);
}
