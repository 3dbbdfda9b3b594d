/* Exit statistics (PONYTAIL_STATS=1|json, PONYTAIL_STATS_FILE). */
#ifndef PT_STATS_H
#define PT_STATS_H
#include <stdint.h>
#include <stdio.h>

struct pt_jw;

/* Settable hooks: the allocator plugs its sections in here (NULL = omitted).
 * json: write members of the "alloc" object (it is already open);
 * text: write lines of the readable table. Called once, at exit. */
extern void (*pt_stats_alloc_json)(struct pt_jw *w);
extern void (*pt_stats_alloc_text)(FILE *f);

/* Counts one fallback with this reason (a static string). */
void pt_stats_fallback(const char *reason);

/* Writes the stats per PONYTAIL_STATS to PONYTAIL_STATS_FILE (once, at exit;
 * shim/stats_file.c). */
void pt_stats_write(void);
/* PONYTAIL_STATS_EVERY: starts the thread that rewrites the stats file every
 * N seconds until the exit write (no-op when off). */
void pt_stats_start_snapshots(void);
void pt_stats_atfork_prepare(void);
void pt_stats_atfork_parent(void);
void pt_stats_atfork_child(void);
/* The two formats, to any stream (tests, `ponytail stats`). written: why
 * they are written ("exit", "snapshot", "request"), the first line or the
 * "written" member. */
void pt_stats_write_json(FILE *f, const char *written);
void pt_stats_write_text(FILE *f, const char *written);

#define PT_STATS_TOP 50 /* kernels listed in "top" */

#endif
