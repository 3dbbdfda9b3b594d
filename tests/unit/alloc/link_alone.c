/* The pool and its VMM backend link alone: this program is linked with the
 * allocator library and the common layer only (no shim object, no CUDA
 * library), so any reference of allocator/ to the shim (pt_drv,
 * pt_real_driver, ...) fails the link. It allocates and frees on a host-backed
 * pool, writes the pool's JSON stats (the common layer's writer) and calls
 * the VMM backend's create with no driver table and with an empty one: the
 * backend must answer "not initialized" without calling anything.
 * Plain C (no cmocka): exit 0 on success. */
#include <cuda.h>
#include <stdio.h>

#include "allocator/backend_host.h"
#include "allocator/backend_vmm.h"
#include "allocator/pool.h"
#include "common/driver.h"
#include "common/jsonw.h"

#define CHECK(c)                                                           \
  do {                                                                     \
    if (!(c)) {                                                            \
      fprintf(stderr, "link_alone: %s:%d: %s\n", __FILE__, __LINE__, #c);  \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(void) {
  struct pt_backend bk;
  struct pt_pool *pool = NULL;
  CHECK(pt_backend_host_create(&bk, 0, 0) == 0);
  CHECK(pt_pool_create(bk, 0, NULL, &pool) == 0);
  void *p = NULL;
  CHECK(pt_pool_alloc_any(pool, (size_t)3 << 20, &p) == 0 && p);
  CHECK(pt_pool_free_sync(pool, p) == 0);
  const char *why = NULL;
  CHECK(pt_pool_check(pool, &why) == 0);

  struct pt_pool_stats st;
  pt_pool_stats(pool, &st);
  CHECK(st.pooled_allocs == 1 && st.pooled_frees == 1);
  FILE *f = fopen("/dev/null", "w");
  CHECK(f);
  struct pt_jw w;
  pt_jw_init(&w, f, false);
  pt_jw_obj_begin(&w, NULL);
  pt_pool_stats_json(&st, &w);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
  fclose(f);
  pt_pool_destroy(pool);

  struct pt_backend vbk;
  static const struct pt_driver empty;
  CHECK(pt_backend_vmm_create(&vbk, 0, 0, NULL) == CUDA_ERROR_NOT_INITIALIZED);
  CHECK(pt_backend_vmm_create(&vbk, 0, PT_VMM_EXPORTABLE, &empty) == CUDA_ERROR_NOT_INITIALIZED);
  puts("link_alone: ok");
  return 0;
}
