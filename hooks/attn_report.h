/* Report-only hooks: attention kernels Ponytail recognises but does not swap
 * (cuDNN SDPA, torch's mem-efficient SDPA, their backward kernels; torch's
 * mem-efficient forward goes to torch_mem_eff.c while PONYTAIL_ATTN_MASKED is
 * on, the default, and keeps PT_HOOK_MEM_EFF and its reason here under
 * PONYTAIL_ATTN_MASKED=0). Every launch passes through unchanged with a
 * fallback reason, so the log and the exit stats say why that attention was
 * not accelerated. */
#ifndef PT_ATTN_REPORT_H
#define PT_ATTN_REPORT_H
#include "hooks/hook.h"

/* Hook ids (hook.h: report-only range, >= PT_HOOK_REPORT_FIRST). */
enum {
  PT_HOOK_CUDNN_SDPA = PT_HOOK_REPORT_FIRST, /* cudnn_generated_fort_native_sdpa_*fprop* */
  PT_HOOK_CUDNN_SDPA_BWD,                    /* cudnn_generated_fort_native_sdpa_*bprop* */
  PT_HOOK_MEM_EFF,                           /* fmha_cutlassF_*(PyTorchMemEffAttention::AttentionKernel<…>::Params) */
  PT_HOOK_MEM_EFF_BWD,                       /* fmha_cutlassB_*(PyTorchMemEffAttention::AttentionBackwardKernel<…>::Params) */
  PT_HOOK_REPORT_END,
};

/* The id for a name of one of these families, else 0. */
int pt_attn_report_match(const char *mangled_name);
/* Always PASS with a static reason; reads nothing of the launch. */
struct pt_hook_outcome pt_attn_report_launch(int hook_id);

extern const char pt_attn_r_cudnn[], pt_attn_r_cudnn_keep[], pt_attn_r_cudnn_auto[], pt_attn_r_cudnn_unseen[],
    pt_attn_r_mem_eff[], pt_attn_r_bwd[];

#endif
