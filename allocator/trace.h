/* Allocation traces: the format of tests/data/traces (one event per line):
 *
 *   A <bytes> <ptr> <stream>   a pooled (or traced) allocation returned ptr
 *   R <ptr> <stream>           its free
 *   P <bytes> <ptr> <stream>   a pass-through allocation (extension)
 *   Q <ptr> <stream>           a pass-through free (extension)
 *   # text                     a comment (extension); blank lines are skipped
 *
 * ptr and stream are written as %p writes them ("0x7f..." or "(nil)").
 * The writer (trace_write.c, in pt_alloc: used by the shim) is plain text.
 * The reader (trace_read.c, in pt_trace_read: tools and tests only, never
 * the shim, since it links zlib) reads plain text or gzip. */
#ifndef PT_ALLOC_TRACE_H
#define PT_ALLOC_TRACE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pt_trace_event {
  char kind; /* 'A', 'R', 'P', 'Q' */
  uint64_t bytes; /* A and P only */
  uint64_t ptr, stream;
};

/* ---- writer: thread-safe; each event is one write(2) of one whole line, so
 * concurrent writers never interleave and a crash loses nothing written. No
 * allocation after open. */
struct pt_trace_writer;
/* Opens (creates, appends to) path. NULL on failure (errno set). */
struct pt_trace_writer *pt_trace_open(const char *path);
/* Takes ownership of an open file descriptor. */
struct pt_trace_writer *pt_trace_open_fd(int fd);
void pt_trace_alloc(struct pt_trace_writer *w, bool pooled, uint64_t bytes, const void *ptr,
                    uint64_t stream);
void pt_trace_free(struct pt_trace_writer *w, bool pooled, const void *ptr, uint64_t stream);
/* A comment line; newlines in text are replaced by spaces. */
void pt_trace_comment(struct pt_trace_writer *w, const char *text);
/* Events that failed to be written (disk full...), for the stats. */
uint64_t pt_trace_write_errors(const struct pt_trace_writer *w);
void pt_trace_close(struct pt_trace_writer *w);
/* Formats one event line (with '\n') into buf (at least 80 bytes); returns
 * its length. Exposed for tests. */
size_t pt_trace_format(char *buf, const struct pt_trace_event *ev);

/* ---- reader */
struct pt_trace_reader;
/* 0 on success; -1 with a message in err. */
int pt_trace_reader_open(const char *path, struct pt_trace_reader **out, char *err, size_t errlen);
/* 1: an event; 0: end of file; -1: bad input (message in err, without the
 * file name; pt_trace_reader_line gives the line number). */
int pt_trace_next(struct pt_trace_reader *r, struct pt_trace_event *ev, char *err, size_t errlen);
uint64_t pt_trace_reader_line(const struct pt_trace_reader *r);
void pt_trace_reader_close(struct pt_trace_reader *r);

#endif
