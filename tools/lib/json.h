/* A small strict JSON reader (RFC 8259) for the CLI: HF model configs, bench
 * results, stats files. Parses into a tree; every getter accepts NULL and a
 * node of the wrong type, so callers can chain lookups without checks:
 *   pt_json_u64(pt_json_get(cfg, "num_hidden_layers"), &layers)
 *
 * Strict means: no comments, no trailing commas, no NaN/Infinity, no leading
 * zeros, no control characters or invalid UTF-8 in strings, no lone
 * surrogates, nothing after the value but whitespace. Nesting deeper than
 * PT_JSON_MAX_DEPTH is an error (the parser recurses). On duplicate object
 * keys pt_json_get returns the last one, as Python's json module does. */
#ifndef PT_TOOLS_JSON_H
#define PT_TOOLS_JSON_H
#include <stddef.h>
#include <stdint.h>

#define PT_JSON_MAX_DEPTH 256

enum pt_json_type { PT_JSON_NULL, PT_JSON_BOOL, PT_JSON_NUM, PT_JSON_STR, PT_JSON_ARR, PT_JSON_OBJ };
struct pt_json;

/* NULL on error; err (if errlen > 0) then says "line L col C: ...". text need
 * not be NUL-terminated. */
struct pt_json *pt_json_parse(const char *text, size_t len, char *err, size_t errlen);
/* As pt_json_parse on the whole file; err says "PATH: ..." on I/O errors. */
struct pt_json *pt_json_parse_file(const char *path, char *err, size_t errlen);
void pt_json_free(struct pt_json *v);

enum pt_json_type pt_json_type(const struct pt_json *v);      /* v may be NULL -> PT_JSON_NULL */
const struct pt_json *pt_json_get(const struct pt_json *obj, const char *key); /* NULL if absent/not obj */
size_t pt_json_len(const struct pt_json *v);                  /* array/object length, else 0 */
const struct pt_json *pt_json_at(const struct pt_json *arr, size_t i); /* array or object value i */
const char *pt_json_key_at(const struct pt_json *obj, size_t i); /* NULL if not obj / out of range */
double pt_json_num(const struct pt_json *v, double dflt);     /* dflt if not a number */
int pt_json_u64(const struct pt_json *v, uint64_t *out);      /* 0 if an exact non-negative integer */
int pt_json_i64(const struct pt_json *v, int64_t *out);       /* 0 if an exact integer in int64 range */
const char *pt_json_str(const struct pt_json *v);             /* NULL if not a string */
size_t pt_json_str_len(const struct pt_json *v);              /* bytes (a string may hold \u0000) */
int pt_json_bool(const struct pt_json *v, int dflt);          /* dflt if not a bool */

#endif
