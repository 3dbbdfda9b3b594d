/* Child processes of `ponytail run|bench|trace`: an environment built from
 * ours with a few variables set or removed, LD_PRELOAD composition, and a
 * fork/exec/wait that reports the exit status and wall time. */
#ifndef PT_TOOLS_SPAWN_H
#define PT_TOOLS_SPAWN_H
#include <stddef.h>

#include "common/options.h"

/* "PONYTAIL_<name>" for a row of common/options.def; fails to compile when the
 * row does not exist, so a renamed option cannot silently stop working. */
#define PT_OPT_ENV(name) ((void)PT_OPT_##name, "PONYTAIL_" #name)

/* A NULL-terminated "KEY=VALUE" array, owned. */
struct pt_env {
  char **v;
  size_t n, cap;
};

/* Copies `environ`. 0 or -1 (out of memory). */
int pt_env_from_environ(struct pt_env *e);
/* Sets (replacing) or, with val NULL, removes KEY. 0 or -1. */
int pt_env_set(struct pt_env *e, const char *key, const char *val);
/* "KEY=VALUE" form of pt_env_set; -1 when there is no '='. */
int pt_env_put(struct pt_env *e, const char *kv);
const char *pt_env_get(const struct pt_env *e, const char *key);
void pt_env_free(struct pt_env *e);

/* LD_PRELOAD for a child: `shim` first, then every entry of `existing`
 * (':' or ' ' separated) except copies of `shim`, joined with ':'.
 * Returns a malloc'ed string, or NULL when out of memory. */
char *pt_preload_compose(const char *shim, const char *existing);
/* `existing` without any entry equal to `shim` (for the stock run of an
 * A/B); malloc'ed, "" when nothing is left. */
char *pt_preload_remove(const char *shim, const char *existing);

/* Runs argv[0] (PATH search) with env, waits. Returns the exit status
 * (128+signal when killed, 127 when it could not be executed) and sets
 * *wall_s when non-NULL. stdout_fd >= 0 becomes the child's stdout (e.g. 2,
 * so a workload's prints do not mix with a report on our stdout). */
int pt_spawn_wait(char *const argv[], char *const envp[], int stdout_fd, double *wall_s);

/* Monotonic seconds. */
double pt_now_s(void);

#endif
