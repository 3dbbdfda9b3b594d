/* Report-only attention hooks (hooks/attn_report.c): which names pt_hooks_match
 * recognises, their names for the tools, and the PASS-with-reason verdict.
 * PONYTAIL_ATTN_MASKED=0 throughout: on (the default) the mem-efficient
 * forward kernels go to their swapping hook (test_torch_mem_eff.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hooks/attn_report.h"
#include "hooks/hook.h"
#include "hooks/torch_flash.h"
#include "common/options.h"

#define CUDNN_SM80 "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0"
#define CUDNN_SM90 "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0"
#define CUDNN_BWD "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
#define MEFF_F "_Z40fmha_cutlassF_bf16_aligned_64x128_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutlass10bfloat16_tENS1_4arch4Sm80ELb1ELi64ELi128ELi128ELb1ELb1EE6ParamsE"
#define MEFF_F16 "_Z37fmha_cutlassF_f16_aligned_32x128_gmem_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutlass6half_tENS1_4arch4Sm80ELb1ELi32ELi128ELi65536ELb1ELb1EE6ParamsE"
#define MEFF_B "_Z41fmha_cutlassB_bf16_aligned_64x64_k64_sm80N22PyTorchMemEffAttention23AttentionBackwardKernelIN7cutlass4arch4Sm80ENS1_10bfloat16_tELb1ELb0ELb1ELi64ELi64ELi64ELb0EE6ParamsE"

static void set_env(const char *k, const char *v) {
  setenv(k, v, 1);
  pt_opts_reload();
}

static int setup(void **st) {
  (void)st;
  setenv("PONYTAIL_LOG", "error", 1);
  unsetenv("PONYTAIL_TORCH_SDPA");
  setenv("PONYTAIL_ATTN_MASKED", "0", 1);
  set_env("PONYTAIL_ATTN", "on");
  return 0;
}

static void test_match(void **st) {
  (void)st;
  assert_int_equal(pt_hooks_match(CUDNN_SM80), PT_HOOK_CUDNN_SDPA);
  assert_int_equal(pt_hooks_match(CUDNN_SM90), PT_HOOK_CUDNN_SDPA);
  assert_int_equal(pt_hooks_match(CUDNN_BWD), PT_HOOK_CUDNN_SDPA_BWD);
  assert_int_equal(pt_hooks_match(MEFF_F), PT_HOOK_MEM_EFF);
  assert_int_equal(pt_hooks_match(MEFF_F16), PT_HOOK_MEM_EFF);
  assert_int_equal(pt_hooks_match(MEFF_B), PT_HOOK_MEM_EFF_BWD);
  /* FA2 still goes to its own hook */
  assert_int_equal(pt_hooks_match("_ZN13pytorch_flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_"),
                   PT_HOOK_FLASH_SPLITKV);
  assert_int_equal(pt_hooks_match("_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traits"),
                   PT_HOOK_FLASH_FWD);
  /* not attention, or not these families */
  static const char *no[] = {
      "_ZN5cudnn6fusion21lean_reduction_kernelIfLi256ELi1EEEvNS0_20LeanReductionParamsE",
      "cudnn::fusion::lean_reduction_kernel",
      "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", /* neither fprop nor bprop */
      "cudnn_generated_fort_native_conv_sm90_fprop_kernel0_0",
      "xcudnn_generated_fort_native_sdpa_sm80_flash_fprop",
      "_Z40fmha_cutlassF_bf16_aligned_64x128_rf_sm80N7xformers15AttentionKernelI6ParamsE", /* xformers */
      "_Z41fmha_cutlassB_bf16_aligned_64x64_k64_sm80N22PyTorchMemEffAttention15AttentionKernelIE6ParamsE",
      "_Zfmha_cutlassF_bf16N22PyTorchMemEffAttention15AttentionKernelI",
      "fmha_cutlassF_bf16_aligned_64x128_rf_sm80",
      "_ZN13pytorch_flash30flash_bwd_dq_dk_dv_loop_kernelI23Flash_bwd_ke",
      "_ZN2at6native29vectorized_elementwise_kernelILi4E",
      "_Z8kernel_av", "c", "",
  };
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (pt_hooks_match(no[i]) != 0) fail_msg("matched: %s", no[i]);
  assert_int_equal(pt_attn_report_match(NULL), 0);
  /* report-only ids: the shim must not query parameter sizes for them */
  assert_false(pt_hook_reads_launch(PT_HOOK_CUDNN_SDPA));
  assert_false(pt_hook_reads_launch(PT_HOOK_MEM_EFF_BWD));
  assert_true(pt_hook_reads_launch(PT_HOOK_FLASH_FWD));
}

static void test_names(void **st) {
  (void)st;
  assert_string_equal(pt_hooks_name(PT_HOOK_CUDNN_SDPA), "cudnn_sdpa");
  assert_string_equal(pt_hooks_name(PT_HOOK_CUDNN_SDPA_BWD), "cudnn_sdpa/bwd");
  assert_string_equal(pt_hooks_name(PT_HOOK_MEM_EFF), "torch_mem_eff");
  assert_string_equal(pt_hooks_name(PT_HOOK_MEM_EFF_BWD), "torch_mem_eff/bwd");
  assert_null(pt_hooks_name(PT_HOOK_REPORT_END));
}

static int never_original(const struct pt_launch *l) {
  (void)l;
  fail_msg("a report-only hook launched the original itself");
  return 0;
}

/* args and param_bytes are poison: the hook must not read them. */
static struct pt_hook_outcome go(const char *name) {
  struct pt_launch l;
  memset(&l, 0, sizeof l);
  l.args = (void **)(uintptr_t)0x10;
  l.param_bytes = 3;
  l.launch_original = never_original;
  int id = pt_hooks_match(name);
  assert_true(id >= PT_HOOK_REPORT_FIRST);
  struct pt_hook_outcome o = pt_hooks_launch(id, name, &l);
  assert_int_equal(o.verdict, PT_HOOK_PASS);
  assert_int_equal(o.status, 0);
  assert_non_null(o.reason);
  return o;
}

static void test_reasons(void **st) {
  (void)st;
  /* Default (auto) before any SDPA choice reached the policy: say so. */
  assert_string_equal(go(CUDNN_SM80).reason,
                      "cuDNN SDPA: torch's SDPA choice never reached Ponytail (PONYTAIL_TORCH_SDPA=flash routes "
                      "SDPA to flash)");
  set_env("PONYTAIL_TORCH_SDPA", "flash");
  assert_string_equal(go(CUDNN_SM80).reason,
                      "cuDNN SDPA: not swappable (TORCH_CUDNN_SDPA_DEPRIORITIZED=1 routes SDPA to flash)");
  assert_string_equal(go(CUDNN_SM90).reason, pt_attn_r_cudnn);
  assert_string_equal(go(MEFF_F).reason,
                      "mem-efficient SDPA (attention mask or unsupported shape): masked decode off "
                      "(PONYTAIL_ATTN_MASKED=0)");
  assert_string_equal(go(CUDNN_BWD).reason, "training backward: not swapped");
  assert_string_equal(go(MEFF_B).reason, "training backward: not swapped");
  set_env("PONYTAIL_TORCH_SDPA", "keep");
  assert_string_equal(go(CUDNN_SM80).reason,
                      "cuDNN SDPA: not swappable (PONYTAIL_TORCH_SDPA=flash routes SDPA to flash)");
  assert_string_equal(go(MEFF_F).reason, pt_attn_r_mem_eff);
  set_env("PONYTAIL_ATTN", "verify");
  assert_string_equal(go(MEFF_F).reason, pt_attn_r_mem_eff);
  set_env("PONYTAIL_ATTN", "off"); /* as FA2: "disabled" */
  assert_string_equal(go(CUDNN_SM80).reason, "disabled");
  assert_string_equal(go(MEFF_F).reason, "disabled");
  assert_string_equal(go(MEFF_B).reason, "disabled");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_match, setup),
      cmocka_unit_test_setup(test_names, setup),
      cmocka_unit_test_setup(test_reasons, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
