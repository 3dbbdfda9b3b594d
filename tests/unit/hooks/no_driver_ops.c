/* Stands in for hooks/flash_ops.c in the CPU tests: no driver, no kernels.
 * Tests that need CUDA behaviour install fakes with pt_flash_set_ops(). */
#include "hooks/torch_flash.h"

const struct pt_flash_ops pt_flash_default_ops = {0};
