/* Internal to kernels/: the pure host-side planning of a decode launch
 * (eligibility, split count, workspace layout). No CUDA calls, so it is unit
 * tested on the CPU. */
#ifndef PT_ATTN_PLAN_H
#define PT_ATTN_PLAN_H
#include <stdint.h>

#include "kernels/attn.h"
#include "kernels/attn_kparams.h"

/* Descriptor predicates of the decode check, shared with the prefill one
 * (kernels/attn_prefill_launch.c). */
static inline int pt_attn_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static inline int pt_attn_mult8(int64_t s) { return (s & 7) == 0; }
static inline int pt_attn_contiguous(int64_t s) { return s == 0 || s == 1; }

/* The shape/layout checks of pt_attn_decode_supported, without the "are the
 * kernels built" check: NULL or a static reason. */
const char *pt_attn_plan_check(const struct pt_attn_desc *d);

/* The head dims (q/k) the decode kernels take and the head size of v that
 * goes with each, in the order of pt_attn_plan.dkind (the launcher's kernel
 * table, kernels/attn_launch.c, follows it): 64/80/96/128/256 with v the
 * same, then 192 with v 128 (MLA). 80 and 96 run on the d = 128 kernel's
 * layout, 192/128 on d = 256's, padded (kernels/attn_decode.cu). */
#define PT_ATTN_NDKIND 6
extern const int pt_attn_plan_dims[PT_ATTN_NDKIND];
extern const int pt_attn_plan_vdims[PT_ATTN_NDKIND];

/* The most dynamic shared memory a decode launch for head_dim d (one of
 * pt_attn_plan_dims, q/k's) asks for (a bias of 16 distinct rows); the
 * kernels' attribute. */
unsigned pt_attn_plan_smem(int d);

/* Test-only tuning knob (tests/gpu timing): divides the split count the
 * heuristic picks (fewer, longer splits). Leave at 1 elsewhere. */
extern int pt_attn_plan_split_div;
/* Test-only knob: multiplies the workspace path's split count (more, shorter splits, up to
 * half the tiles and PT_ATTN_MAX_SPLITS). It acts only where that path plans: not on a
 * cluster plan (set pt_attn_plan_cluster_max to 1 with it) nor when the units alone fill the
 * CTA slots. Leave at 1 elsewhere. */
extern int pt_attn_plan_split_mul;
/* Test-only knob: the largest split count merged in a cluster (default
 * PT_ATTN_PLAN_CLUSTER, at most PT_ATTN_MAX_CLUSTER; 1 sends every split launch
 * through the workspace). */
extern int pt_attn_plan_cluster_max;
/* Test-only knob (tests/gpu timing, default 0): launch the decode kernel with programmatic
 * dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), so its CTAs may be
 * scheduled while the previous kernel in the stream drains; the kernel's griddepcontrol.wait
 * keeps every read after that kernel's end. An experiment on the per-launch cost of the
 * latency-bound shapes (bench/records/2026-12-01-masked-decode.md), not a default. */
extern int pt_attn_plan_pdl;

/* Test-only knob (tests/gpu timing, default 1): 0 turns off the masked short-split rule of
 * pt_attn_plan_make (masked launches with cluster splits of 5-8 tiles take the workspace plan),
 * so that the plan it replaces can be timed beside it. */
extern int pt_attn_plan_masked_short;

/* Set (once, never cleared) when a cluster launch was refused by the GPU
 * (kernels/attn_launch.c): from then on every plan takes the workspace path.
 * Read with relaxed atomics; a plan made just before the change may find its
 * workspace too small at launch, which the launch reports. */
extern int pt_attn_plan_clusters_off;

/* Fills *pl for a descriptor that passed pt_attn_plan_check. */
void pt_attn_plan_make(const struct pt_attn_desc *d, struct pt_attn_plan *pl);

#endif
