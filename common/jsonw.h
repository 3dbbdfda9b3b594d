/* A small streaming JSON writer into a FILE*. Keeps the comma/nesting state so
 * callers only say what to write. No allocation. Used by the exit stats and
 * by every `--json` output of the CLI. */
#ifndef PT_JSONW_H
#define PT_JSONW_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PT_JSONW_DEPTH 16

struct pt_jw {
  FILE *f;
  int depth;
  bool need_comma[PT_JSONW_DEPTH];
  bool pretty;
};

void pt_jw_init(struct pt_jw *w, FILE *f, bool pretty);
void pt_jw_obj_begin(struct pt_jw *w, const char *key); /* key NULL inside arrays / at top */
void pt_jw_obj_end(struct pt_jw *w);
void pt_jw_arr_begin(struct pt_jw *w, const char *key);
void pt_jw_arr_end(struct pt_jw *w);
void pt_jw_str(struct pt_jw *w, const char *key, const char *val); /* val NULL -> null */
void pt_jw_u64(struct pt_jw *w, const char *key, uint64_t val);
void pt_jw_i64(struct pt_jw *w, const char *key, int64_t val);
void pt_jw_dbl(struct pt_jw *w, const char *key, double val); /* non-finite -> null */
void pt_jw_bool(struct pt_jw *w, const char *key, bool val);
/* Ends the document with a newline. */
void pt_jw_finish(struct pt_jw *w);
/* Writes s as a JSON string literal (quotes included). */
void pt_jw_escape(FILE *f, const char *s);

#endif
