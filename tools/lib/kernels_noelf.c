/* `ponytail kernels` when the tool was built without libelf (e.g. a GPU host
 * with no libelf headers): every scan fails with a clear message. */
#include <stdio.h>
#include <stdlib.h>

#include "tools/lib/kernels.h"

void pt_kernel_list_free(struct pt_kernel_list *l) { (void)l; }

int pt_kernels_scan_memory(const uint8_t *buf, size_t len, struct pt_kernel_list *l, char *err,
                           size_t errlen) {
  (void)buf; (void)len; (void)l;
  snprintf(err, errlen, "this ponytail was built without libelf; rebuild with libelf-dev installed");
  return -1;
}

int pt_kernels_scan_file(const char *path, struct pt_kernel_list *l, char *err, size_t errlen) {
  (void)path;
  return pt_kernels_scan_memory(NULL, 0, l, err, errlen);
}
