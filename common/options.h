/* Options: one table (options.def) of every PONYTAIL_* variable. Values are
 * read lazily with secure_getenv on first use; a bad value warns once and the
 * default is kept. All getters are safe from any thread after pt_opts_init(). */
#ifndef PT_OPTIONS_H
#define PT_OPTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pt_opt_type { PT_OPT_BOOL, PT_OPT_SIZE, PT_OPT_INT, PT_OPT_STR, PT_OPT_ENUM };

enum pt_opt_id {
#define PT_OPT(name, type, choices, def, doc) PT_OPT_##name,
#include "common/options.def"
#undef PT_OPT
  PT_OPT_COUNT
};

struct pt_opt_info {
  const char *name;    /* "PONYTAIL_ENABLE" */
  enum pt_opt_type type;
  const char *choices; /* ENUM only: "a|b|c" */
  const char *def;
  const char *doc;
};

extern const struct pt_opt_info pt_opt_table[PT_OPT_COUNT];

/* Reads every option from the environment (idempotent, thread-safe). */
void pt_opts_init(void);
/* Re-reads the environment (tests only). */
void pt_opts_reload(void);

bool pt_opt_bool(enum pt_opt_id id);
uint64_t pt_opt_size(enum pt_opt_id id);   /* SIZE and INT */
const char *pt_opt_str(enum pt_opt_id id); /* STR: never NULL ("" when unset) */
int pt_opt_enum(enum pt_opt_id id);        /* ENUM: index into choices */
/* The value as text (for `ponytail config`): the parsed value, or the default. */
const char *pt_opt_value_text(enum pt_opt_id id, char *buf, size_t len);
/* true when the environment set this option to a value that parsed. */
bool pt_opt_is_set(enum pt_opt_id id);

/* Parsers, exposed for tests. Return 0 on success, -1 on a bad value. */
int pt_parse_bool(const char *s, bool *out);
int pt_parse_size(const char *s, uint64_t *out);
int pt_parse_enum(const char *s, const char *choices, int *out);

/* Enum indices, in the order of options.def's CHOICES. */
enum { PT_LOG_ERROR, PT_LOG_WARN, PT_LOG_INFO, PT_LOG_DEBUG };
enum { PT_STATS_OFF, PT_STATS_TEXT, PT_STATS_JSON };
enum { PT_TORCH_ALLOC_KEEP, PT_TORCH_ALLOC_EXPANDABLE, PT_TORCH_ALLOC_ASYNC };
enum { PT_ATTN_ON, PT_ATTN_OFF, PT_ATTN_VERIFY };
enum { PT_TORCH_SDPA_AUTO, PT_TORCH_SDPA_FLASH, PT_TORCH_SDPA_KEEP };
enum { PT_POOL_ORDER_DOWN, PT_POOL_ORDER_UP };
/* The same values as pt_pool_config.sleep_host (allocator/pool.h). */
enum { PT_SLEEP_HOST_PINNED, PT_SLEEP_HOST_HANDLES, PT_SLEEP_HOST_REGISTERED };
enum { PT_TORCH_VMM_AUTO, PT_TORCH_VMM_ON, PT_TORCH_VMM_OFF };

#endif
