/* A stand-in for PyTorch's libraries in the SDPA-choice test
 * (preload_torch.c): the C++ functions the shim interposes or calls, under
 * their mangled names, with torch 2.11's calling conventions expressed in C
 * (shim/entry_torch.c explains them). Loaded with RTLD_LOCAL, as Python loads
 * torch, so the shim must find these definitions itself.
 *
 * Its choice function stands for at::native::_fused_sdp_choice_cuda: cuDNN
 * first unless the context (read through userEnabledCuDNNSDP, a call through
 * this library's PLT, as in libtorch_cuda) says cuDNN is off; then flash
 * without a mask, mem-efficient with one. It records the arguments it got so
 * the test sees that the shim forwarded them exactly. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct opt_double {
  double v;
  bool has;
};
struct fake_context {
  bool cudnn, math;
};
static struct fake_context ctx = {true, true};

struct fake_torch_record {
  const void *q, *k, *v, *mask;
  double dropout, scale;
  bool causal, scale_has, gqa;
  int calls, cudnn_off_calls;
};
__attribute__((visibility("default"))) struct fake_torch_record fake_torch_last;

__attribute__((visibility("default"))) void *_ZN2at13globalContextEv(void) { return &ctx; }

__attribute__((visibility("default"))) bool _ZNK2at7Context19userEnabledCuDNNSDPEv(const void *c) {
  return ((const struct fake_context *)c)->cudnn;
}

__attribute__((visibility("default"))) bool _ZNK2at7Context18userEnabledMathSDPEv(const void *c) {
  return ((const struct fake_context *)c)->math;
}

/* c10::SymInt through the hidden result pointer; the fake TensorImpl keeps its
 * sizes where torch 2.11 does (rank at 0x40, sizes from 0x48). */
__attribute__((visibility("default"))) void _ZN2at6native8sym_sizeERKNS_6TensorEl(int64_t *out, const void *t,
                                                                                    int64_t dim) {
  const unsigned char *impl;
  memcpy(&impl, t, sizeof impl);
  int64_t nd;
  memcpy(&nd, impl + 0x40, sizeof nd);
  if (dim < 0) dim += nd;
  memcpy(out, impl + 0x48 + 8 * dim, sizeof *out);
}

/* The mask is a std::optional<at::Tensor> const&: here a pointer to a flag
 * "has a value". */
__attribute__((visibility("default"))) int64_t
_ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb(
    const void *q, const void *k, const void *v, const void *mask, double dropout, bool causal,
    struct opt_double scale, bool gqa) {
  struct fake_torch_record *r = &fake_torch_last;
  r->q = q, r->k = k, r->v = v, r->mask = mask;
  r->dropout = dropout, r->causal = causal, r->scale = scale.v, r->scale_has = scale.has, r->gqa = gqa;
  r->calls++;
  bool has_mask = mask && *(const bool *)mask;
  if (_ZNK2at7Context19userEnabledCuDNNSDPEv(_ZN2at13globalContextEv())) return 3; /* cuDNN */
  r->cudnn_off_calls++;
  return has_mask ? 2 : 1;
}

/* The two ways torch reaches its choice: a direct call (the dispatcher's
 * CUDA kernel, through the PLT) and the dispatch stub's function pointer,
 * taken at load (through the GOT). */
typedef int64_t (*choice_fn)(const void *, const void *, const void *, const void *, double, bool,
                             struct opt_double, bool);
static choice_fn stub = _ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb;

__attribute__((visibility("default"))) int64_t fake_torch_sdpa(int via_stub, const void *q, const void *mask,
                                                                double dropout, bool causal, double scale,
                                                                bool scale_has, bool gqa) {
  struct opt_double s = {scale, scale_has};
  if (via_stub) return stub(q, q, q, mask, dropout, causal, s, gqa);
  return _ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb(
      q, q, q, mask, dropout, causal, s, gqa);
}

__attribute__((visibility("default"))) void fake_torch_set(bool cudnn, bool math) {
  ctx.cudnn = cudnn;
  ctx.math = math;
}
