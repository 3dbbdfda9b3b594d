/* Where a process's control socket is (`ponytail sleep` / `ponytail wake`,
 * shim/control.c): one rule for the shim, which binds it, and the CLI, which
 * computes it from the target process's environment. */
#ifndef PT_COMMON_CONTROL_PATH_H
#define PT_COMMON_CONTROL_PATH_H
#include <stddef.h>

/* The directory: dir when not empty (PONYTAIL_CONTROL_DIR), else
 * xdg/ponytail when xdg is an absolute path (XDG_RUNTIME_DIR), else
 * /tmp/ponytail-<uid>. 0, or -1 when it does not fit in n. */
int pt_control_dir_of(const char *dir, const char *xdg, unsigned uid, char *out, size_t n);
/* DIR/<pid>.sock: 0, or -1 when it does not fit in n. */
int pt_control_sock_of(const char *dir, int pid, char *out, size_t n);

#endif
