/* Report-only hooks (attn_report.h). Matching runs once per kernel name at
 * registration; a launch costs one option load and returns a static reason
 * without reading the launch (the shim skips the parameter-size query for
 * report-only ids, hook.h), so the original kernel runs exactly as before.
 *
 * Names:
 *  - cuDNN SDPA (driver API, runtime-compiled): extern "C" names starting
 *    cudnn_generated_fort_native_sdpa, with fprop (forward) or bprop
 *    (backward) in them, sm80 and sm90 variants alike. Other cuDNN kernels
 *    (cudnn::fusion::lean_reduction_kernel, …) are not attention: no match.
 *  - torch's mem-efficient SDPA (CUTLASS, the path SDPA takes with an
 *    attention mask): _Z<n>fmha_cutlassF_… / _Z<n>fmha_cutlassB_… whose
 *    parameter is PyTorchMemEffAttention::AttentionKernel<…>::Params /
 *    AttentionBackwardKernel<…>::Params (xformers' own builds lack the
 *    PyTorchMemEffAttention namespace: no match).
 * Backward kernels are recognised, with the reason "training backward", so a
 * training run says why its attention was not accelerated. (FA2's backward
 * stays unmatched: pt_flash_match recognises forward kernels only.) */
#include "hooks/attn_report.h"

#include <string.h>

#include "hooks/torch_flash.h"
#include "hooks/torch_sdpa.h"
#include "common/options.h"

const char pt_attn_r_cudnn[] = "cuDNN SDPA: not swappable (TORCH_CUDNN_SDPA_DEPRIORITIZED=1 routes SDPA to flash)";
const char pt_attn_r_cudnn_keep[] = "cuDNN SDPA: not swappable (PONYTAIL_TORCH_SDPA=flash routes SDPA to flash)";
const char pt_attn_r_cudnn_auto[] = "cuDNN SDPA: kept per call (prefill, or a decode call with no flash or mem-efficient path)";
const char pt_attn_r_cudnn_unseen[] = "cuDNN SDPA: torch's SDPA choice never reached Ponytail (PONYTAIL_TORCH_SDPA=flash routes SDPA to flash)";
/* Only with the option off: while it is on, pt_mem_eff_match gives these
 * kernels the swapping id (or PONYTAIL_ATTN=off reads "disabled" first). */
const char pt_attn_r_mem_eff[] = "mem-efficient SDPA (attention mask or unsupported shape): masked decode off (PONYTAIL_ATTN_MASKED=0)";
const char pt_attn_r_bwd[] = "training backward: not swapped";

#define PT_CUDNN_SDPA "cudnn_generated_fort_native_sdpa"
#define PT_MEM_EFF_NS "22PyTorchMemEffAttention"

static int pt_match_cudnn(const char *name) {
  if (strncmp(name, PT_CUDNN_SDPA, sizeof PT_CUDNN_SDPA - 1) != 0) return 0;
  const char *rest = name + sizeof PT_CUDNN_SDPA - 1;
  if (strstr(rest, "fprop")) return PT_HOOK_CUDNN_SDPA;
  if (strstr(rest, "bprop")) return PT_HOOK_CUDNN_SDPA_BWD;
  return 0;
}

static int pt_match_mem_eff(const char *name) {
  if (name[0] != '_' || name[1] != 'Z') return 0;
  const char *p = name + 2;
  while (*p >= '0' && *p <= '9') p++;
  if (p == name + 2 || strncmp(p, "fmha_cutlass", 12) != 0) return 0;
  const char *ns = strstr(p, PT_MEM_EFF_NS);
  if (!ns) return 0;
  ns += sizeof PT_MEM_EFF_NS - 1;
  if (p[12] == 'F' && strncmp(ns, "15AttentionKernelI", 18) == 0) return PT_HOOK_MEM_EFF;
  if (p[12] == 'B' && strncmp(ns, "23AttentionBackwardKernelI", 26) == 0) return PT_HOOK_MEM_EFF_BWD;
  return 0;
}

int pt_attn_report_match(const char *name) {
  if (!name || !name[0]) return 0;
  if (name[0] == 'c') return pt_match_cudnn(name);
  return pt_match_mem_eff(name);
}

struct pt_hook_outcome pt_attn_report_launch(int id) {
  struct pt_hook_outcome o = {PT_HOOK_PASS, NULL, 0};
  /* As for FA2: with PONYTAIL_ATTN=off every attention launch reads "disabled". */
  if (pt_opt_enum(PT_OPT_ATTN) == PT_ATTN_OFF) {
    o.reason = pt_flash_r_disabled;
    return o;
  }
  switch (id) {
  case PT_HOOK_CUDNN_SDPA:
    switch (pt_opt_enum(PT_OPT_TORCH_SDPA)) {
    case PT_TORCH_SDPA_AUTO:
      /* The per-call policy keeps cuDNN for prefill on purpose (unless
       * PONYTAIL_ATTN_PREFILL moves it to Ponytail's kernel); if it never saw
       * a choice, this torch does not let Ponytail interpose it. */
      o.reason = pt_sdpa_seen() ? pt_attn_r_cudnn_auto : pt_attn_r_cudnn_unseen;
      break;
    case PT_TORCH_SDPA_FLASH:
      /* cuDNN still ran: the user's own TORCH_CUDNN_SDPA_DEPRIORITIZED or an
       * explicit backend choice won. */
      o.reason = pt_attn_r_cudnn;
      break;
    default: o.reason = pt_attn_r_cudnn_keep; break;
    }
    break;
  case PT_HOOK_MEM_EFF: o.reason = pt_attn_r_mem_eff; break;
  case PT_HOOK_CUDNN_SDPA_BWD:
  case PT_HOOK_MEM_EFF_BWD: o.reason = pt_attn_r_bwd; break;
  default: break; /* not ours: plain pass-through */
  }
  return o;
}
