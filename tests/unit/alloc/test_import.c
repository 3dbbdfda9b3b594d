/* The backends' IPC import ops (allocator/backend.h): the host backend
 * refuses each, touching nothing; the VMM backend, over the fake driver
 * (tests/fakecuda, its table filled through its cuGetProcAddress_v2 as the
 * shim fills pt_drv), maps memory another backend exported: the importer
 * sees the exporter's bytes and the exporter the importer's writes, the
 * owner device is reported, access is granted to the listed devices, and
 * unmap frees the range. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <unistd.h>

#include "allocator/backend_host.h"
#include "allocator/backend_vmm.h"
#include "common/driver.h"
#include "fakecuda.h"

static void test_host_refuses(void **state) {
  (void)state;
  struct pt_backend bk;
  assert_int_equal(pt_backend_host_create(&bk, 0, 0), 0);
  const struct pt_backend_ops *o = bk.ops;
  uintptr_t va = 7;
  int owner = -1, dev = 0;
  assert_non_null(o->import_reserve);
  assert_int_equal(o->import_reserve(bk.ctx, (size_t)2 << 20, (size_t)2 << 20, &va), o->err_invalid);
  assert_int_equal(o->import_map(bk.ctx, 0, 1u << 21, (size_t)2 << 20, &owner), o->err_invalid);
  assert_int_equal(o->import_access(bk.ctx, 1u << 21, (size_t)2 << 20, &dev, 1), o->err_invalid);
  assert_int_equal(o->import_unmap(bk.ctx, 1u << 21, 0, (size_t)2 << 20), o->err_invalid);
  assert_int_equal(va, 7);
  assert_int_equal(owner, -1);
  o->destroy(bk.ctx);
}

static struct pt_driver drv;

static void fill_driver(void) {
  PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
  assert_non_null(gpa);
  CUdriverProcAddressQueryResult st;
#define LOAD(name, ver) \
  if (gpa(#name, (void **)&drv.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS) drv.name = NULL;
  PT_DRIVER_FUNCS(LOAD)
#undef LOAD
}

static void test_vmm_import(void **state) {
  (void)state;
  fill_driver();
  /* The exporter on device 1, the importer on device 0. */
  struct pt_backend ex, im;
  assert_int_equal(pt_backend_vmm_create(&ex, 1, PT_VMM_EXPORTABLE, &drv), 0);
  assert_int_equal(pt_backend_vmm_create(&im, 0, 0, &drv), 0);
  size_t g = 0;
  assert_int_equal(ex.ops->granularity(ex.ctx, &g), 0);
  size_t len = 2 * g;
  uintptr_t eva = 0;
  pt_bk_handle h = 0;
  assert_int_equal(ex.ops->reserve(ex.ctx, len, &eva), 0);
  assert_int_equal(ex.ops->create(ex.ctx, len, &h), 0);
  assert_int_equal(ex.ops->map(ex.ctx, eva, len, h), 0);
  assert_int_equal(ex.ops->set_access(ex.ctx, eva, len), 0);
  for (size_t i = 0; i < len; i += 4096) ((unsigned char *)eva)[i] = (unsigned char)(i / 4096 * 7 + 3);
  int fd = -1;
  assert_int_equal(ex.ops->export_fd(ex.ctx, h, &fd), 0);
  assert_true(fd >= 0);

  const struct pt_backend_ops *o = im.ops;
  uintptr_t va = 0;
  assert_int_equal(o->import_reserve(im.ctx, len, g, &va), 0);
  assert_true(va && va % g == 0);
  int owner = 5; /* already known: left alone */
  int bad = o->import_map(im.ctx, -1, va, len, &owner);
  assert_int_not_equal(bad, 0);
  assert_int_equal(owner, 5);
  owner = -1;
  assert_int_equal(o->import_map(im.ctx, fd, va, len, &owner), 0);
  assert_int_equal(owner, 1);
  close(fd); /* the mapping keeps the memory */
  int devs[2] = {0, 1};
  assert_int_equal(o->import_access(im.ctx, va, len, devs, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(o->import_access(im.ctx, va, len, devs, 2), 0);
  assert_int_equal(fakecuda_access_mask((void *)va), 3u);
  for (size_t i = 0; i < len; i += 4096)
    assert_int_equal(((unsigned char *)va)[i], (unsigned char)(i / 4096 * 7 + 3));
  ((unsigned char *)va)[g + 1] = 0xA5;
  assert_int_equal(((unsigned char *)eva)[g + 1], 0xA5);
  assert_int_equal(o->import_unmap(im.ctx, va, len, len), 0);

  /* A range reserved, nothing mapped: only the VA goes. */
  assert_int_equal(o->import_reserve(im.ctx, len, g, &va), 0);
  assert_int_equal(o->import_unmap(im.ctx, va, 0, len), 0);

  assert_int_equal(ex.ops->unmap(ex.ctx, eva, len), 0);
  assert_int_equal(ex.ops->release(ex.ctx, h), 0);
  assert_int_equal(ex.ops->unreserve(ex.ctx, eva, len), 0);
  ex.ops->destroy(ex.ctx);
  im.ops->destroy(im.ctx);

  /* A driver without cuMemImportFromShareableHandle: import is not supported. */
  struct pt_driver no_import = drv;
  no_import.cuMemImportFromShareableHandle = NULL;
  assert_int_equal(pt_backend_vmm_create(&im, 0, 0, &no_import), 0);
  owner = -1;
  assert_int_equal(im.ops->import_map(im.ctx, 0, va, len, &owner), CUDA_ERROR_NOT_SUPPORTED);
  im.ops->destroy(im.ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_host_refuses), cmocka_unit_test(test_vmm_import)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
