/* Per-call SDPA backend policy (PONYTAIL_TORCH_SDPA=auto, docs/hooks.md
 * "SDPA backend per call").
 *
 * torch 2.11 on Hopper puts cuDNN first for every SDPA call. cuDNN is the
 * fastest prefill kernel here, but in decode it builds a new plan for every
 * new key length (about 2 ms of CPU per call) and Ponytail cannot swap it.
 * Torch's FlashAttention-2 is the opposite: slower prefill, and the decode
 * launches Ponytail replaces. So, per call: a decode call (query length <= 16)
 * for which torch chose cuDNN asks torch again with cuDNN excluded and takes
 * flash or mem-efficient when torch finds one eligible. A prefill call does
 * the same, for flash only, when Ponytail's prefill kernel would take it
 * (PONYTAIL_ATTN_PREFILL, on by default; a GPU it runs on, head_dim 64 or 128): that kernel
 * replaces torch's flash launch and is faster than cuDNN. Everything else
 * keeps torch's own choice.
 *
 * The shim interposes torch's choice function and hands this policy the
 * torch functions it needs (struct pt_sdpa_torch); the policy itself knows
 * only their contracts, so it is tested against fakes. */
#ifndef PT_TORCH_SDPA_H
#define PT_TORCH_SDPA_H
#include <stdint.h>

/* torch's at::SDPBackend values (c10 ABI, stable since torch 2.1). */
enum pt_sdp_backend {
  PT_SDP_ERROR = -1,
  PT_SDP_MATH = 0,
  PT_SDP_FLASH = 1,
  PT_SDP_EFFICIENT = 2,
  PT_SDP_CUDNN = 3,
  PT_SDP_OVERRIDEABLE = 4,
};

/* The longest query of a call the policy treats as decode: the same bound as
 * the decode kernel's (torch_flash.c). */
#define PT_SDPA_DECODE_MAX_Q 16

struct pt_sdpa_torch {
  /* torch's own choice for the call's arguments (the real
   * at::native::_fused_sdp_choice_cuda); may be called twice. */
  int64_t (*choose)(void *call);
  /* at::native::sym_size(tensor, dim) into *out: the c10::SymInt's raw word
   * (a plain int, or a tagged pointer when the size is symbolic). NULL: sizes
   * cannot be checked on this platform. */
  void (*sym_size)(int64_t *out, const void *tensor, int64_t dim);
  /* at::globalContext().userEnabledMathSDP(): the second ask is safe only
   * while math, which is always eligible, stays enabled. */
  int (*math_enabled)(void);
  /* Nonzero when Ponytail's prefill kernel would take this prefill call (the
   * choose() argument) of this head_dim: the option on, the GPU able, nothing
   * in the call the swap refuses. NULL: prefill keeps cuDNN. */
  int (*prefill_ok)(void *call, int64_t head_dim);
};

/* The backend for one call: torch's choice, or the policy's. query is the
 * at::Tensor const& of the call (a pointer to its TensorImpl pointer). */
int64_t pt_sdpa_choose(const struct pt_sdpa_torch *t, void *call, const void *query);

/* Nonzero on this thread while the policy asks torch again with cuDNN
 * excluded: the shim's at::Context::userEnabledCuDNNSDP() answers false then. */
int pt_sdpa_probing(void);

/* The query length of an SDPA query (dim -2 of a 4-d tensor), or -1 when it
 * cannot be read safely: symbolic or nested sizes, another rank, or a layout
 * that torch's own sym_size does not confirm. Exposed for the tests. */
int64_t pt_sdpa_query_len(const struct pt_sdpa_torch *t, const void *query);

/* The same read, also giving the head_dim (dim -1) in *head_dim (-1 when the
 * length is -1). */
int64_t pt_sdpa_query_dims(const struct pt_sdpa_torch *t, const void *query, int64_t *head_dim);

struct pt_sdpa_stats {
  uint64_t calls;          /* choices seen while the policy is on */
  uint64_t decode_flash;   /* decode: cuDNN -> flash */
  uint64_t decode_mem_eff; /* decode: cuDNN -> mem-efficient */
  uint64_t decode_kept;    /* decode: cuDNN kept (nothing else eligible, or math off) */
  uint64_t prefill_flash;  /* prefill: cuDNN -> flash, for Ponytail's prefill kernel */
  uint64_t prefill_kept;   /* query longer than PT_SDPA_DECODE_MAX_Q: torch's cuDNN kept */
  uint64_t not_cudnn;      /* torch chose another backend itself: kept */
  uint64_t unknown_len;    /* cuDNN kept: the query length could not be read */
  int layout_ok;           /* 1: sizes read and confirmed; 0: never confirmed; -1: refuted */
};
void pt_sdpa_get_stats(struct pt_sdpa_stats *out);

/* Back to the state at load (stats, layout verdict): for the tests. */
void pt_sdpa_reset(void);

/* 1 once torch's choice has reached the policy (the interposition works in
 * this process), for the cuDNN fallback reason. */
int pt_sdpa_seen(void);

#endif
