/* See control_path.h. */
#include "common/control_path.h"

#include <stdio.h>

int pt_control_dir_of(const char *dir, const char *xdg, unsigned uid, char *out, size_t n) {
  int k;
  if (dir && dir[0]) k = snprintf(out, n, "%s", dir);
  else if (xdg && xdg[0] == '/') k = snprintf(out, n, "%s/ponytail", xdg);
  else k = snprintf(out, n, "/tmp/ponytail-%u", uid);
  return k > 0 && (size_t)k < n ? 0 : -1;
}

int pt_control_sock_of(const char *dir, int pid, char *out, size_t n) {
  int k = snprintf(out, n, "%s/%d.sock", dir, pid);
  return k > 0 && (size_t)k < n ? 0 : -1;
}
