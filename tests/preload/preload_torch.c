/* The shim's interposition of torch's SDPA choice (shim/entry_torch.c,
 * hooks/torch_sdpa.c), end to end under LD_PRELOAD against fake_torch.c,
 * which this program loads with RTLD_LOCAL as Python loads torch.
 *
 * Usage: preload_torch MODE FAKE_TORCH_SO; MODE is the expected
 * PONYTAIL_TORCH_SDPA behaviour: auto (the default, with a current CUDA
 * context: the fake driver's device is compute capability 9.0, so
 * PONYTAIL_ATTN_PREFILL, on by default, moves prefill to flash), keep, or off
 * (PONYTAIL_ENABLE=0); auto_unbuilt, auto_sm80, prefill_off and
 * prefill_attn_off: auto in a build without the prefill kernel, on a GPU of
 * compute capability 8.0 (FAKECUDA_CC), with PONYTAIL_ATTN_PREFILL=0, or with
 * PONYTAIL_ATTN=off, where prefill keeps cuDNN; nocontext: auto before any
 * context is current (prefill keeps cuDNN: no device to ask); or
 * missing: no torch loaded at all. In auto a decode call leaves cuDNN for
 * flash (no mask) or mem-efficient (mask), a prefill call takes flash, for
 * Ponytail's prefill kernel, at head_dim 128 but
 * not 256 (and keeps cuDNN where the kernel is off or absent); both through the direct call and the dispatch stub's pointer;
 * every argument reaches torch's function unchanged; cuDNN reads as off only
 * during the shim's second ask. In keep and off torch's answer (cuDNN) always
 * comes back and torch is asked once per call. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
#define CHECK(c)                                                     \
  do {                                                               \
    if (!(c)) {                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      failed = 1;                                                    \
    }                                                                \
  } while (0)

struct fake_torch_record {
  const void *q, *k, *v, *mask;
  double dropout, scale;
  bool causal, scale_has, gqa;
  int calls, cudnn_off_calls;
};

struct fake_tensor {
  _Alignas(16) unsigned char impl[256];
  const unsigned char *handle;
};

static void tensor(struct fake_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d) {
  memset(t->impl, 0, sizeof t->impl);
  int64_t nd = 4, sz[4] = {b, h, s, d};
  memcpy(t->impl + 0x40, &nd, 8);
  memcpy(t->impl + 0x48, sz, sizeof sz);
  t->handle = t->impl;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s auto|keep|off|missing FAKE_TORCH_SO\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  /* every auto variant but nocontext runs with a current context */
  const int prefill_env = !strcmp(mode, "auto") || !strcmp(mode, "auto_unbuilt") || !strcmp(mode, "auto_sm80") ||
                          !strcmp(mode, "prefill_off") || !strcmp(mode, "prefill_attn_off");
  const int prefill = !strcmp(mode, "auto"); /* prefill expected to move to flash */
  int act = prefill_env || !strcmp(mode, "nocontext");
  if (prefill_env) {
    /* A current context on the (fake) driver, the one the shim finds at run
     * time: what torch has made by the time it runs SDPA. */
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CHECK(cu);
    if (failed) return 1;
    typedef int (*init_fn)(unsigned);
    typedef int (*retain_fn)(void **, int);
    typedef int (*set_fn)(void *);
    init_fn cu_init = (init_fn)dlsym(cu, "cuInit");
    retain_fn retain = (retain_fn)dlsym(cu, "cuDevicePrimaryCtxRetain");
    set_fn set_cur = (set_fn)dlsym(cu, "cuCtxSetCurrent");
    CHECK(cu_init && retain && set_cur);
    if (failed) return 1;
    void *ctx = NULL;
    CHECK(cu_init(0) == 0);
    CHECK(retain(&ctx, 0) == 0 && ctx);
    CHECK(set_cur(ctx) == 0);
    if (failed) return 1;
  }
  if (!strcmp(mode, "nocontext")) {
    /* The fake driver starts each thread with device 0's primary context
     * current, as after the runtime's initialisation: take it away. */
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    int (*set_cur)(void *) = cu ? (int (*)(void *))dlsym(cu, "cuCtxSetCurrent") : NULL;
    CHECK(set_cur && set_cur(NULL) == 0);
    if (failed) return 1;
  }
  if (!strcmp(mode, "missing")) {
    /* The shim's choice called while no library defines torch's own (a
     * program that is not torch, or a renamed torch): it must answer math
     * (0, correct for any input) and treat cuDNN as enabled, never crash. */
    int64_t (*choice)(const void *, const void *, const void *, const void *, double, bool, double, bool,
                      bool) =
        (int64_t(*)(const void *, const void *, const void *, const void *, double, bool, double, bool, bool))dlsym(
            RTLD_DEFAULT, "_ZN2at6native22_fused_sdp_choice_cudaERKNS_6TensorES3_S3_RKSt8optionalIS1_EdbS4_IdEb");
    bool (*cudnn_on)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "_ZNK2at7Context19userEnabledCuDNNSDPEv");
    CHECK(choice && cudnn_on);
    if (failed) return 1;
    struct fake_tensor q;
    tensor(&q, 8, 32, 1, 128);
    bool no_mask = false;
    CHECK(choice(&q.handle, &q.handle, &q.handle, &no_mask, 0.0, false, 0.0, false, true) == 0);
    CHECK(cudnn_on(NULL));
    return failed;
  }
  void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", argv[2], dlerror());
    return 2;
  }
  int64_t (*sdpa)(int, const void *, const void *, double, bool, double, bool, bool) =
      (int64_t(*)(int, const void *, const void *, double, bool, double, bool, bool))dlsym(h, "fake_torch_sdpa");
  void (*set)(bool, bool) = (void (*)(bool, bool))dlsym(h, "fake_torch_set");
  struct fake_torch_record *rec = dlsym(h, "fake_torch_last");
  bool (*cudnn_on)(const void *) = (bool (*)(const void *))dlsym(h, "_ZNK2at7Context19userEnabledCuDNNSDPEv");
  void *(*gctx)(void) = (void *(*)(void))dlsym(h, "_ZN2at13globalContextEv");
  CHECK(sdpa && set && rec && cudnn_on && gctx);
  if (failed) return 1;

  struct fake_tensor dec, pre, wide;
  tensor(&dec, 8, 32, 1, 128);
  tensor(&pre, 1, 32, 4096, 128);
  tensor(&wide, 1, 32, 4096, 256);
  bool no_mask = false, mask = true;
  for (int via_stub = 0; via_stub < 2; via_stub++) {
    /* decode, no mask: flash; torch asked twice, the second time with cuDNN off */
    rec->calls = rec->cudnn_off_calls = 0;
    int64_t r = sdpa(via_stub, &dec.handle, &no_mask, 0.25, true, 0.125, true, true);
    CHECK(r == (act ? 1 : 3));
    CHECK(rec->calls == (act ? 2 : 1));
    CHECK(rec->cudnn_off_calls == (act ? 1 : 0));
    /* every argument arrived as given, on both asks */
    CHECK(rec->q == &dec.handle && rec->k == &dec.handle && rec->v == &dec.handle && rec->mask == &no_mask);
    CHECK(rec->dropout == 0.25 && rec->causal && rec->scale == 0.125 && rec->scale_has && rec->gqa);
    /* decode with a mask: mem-efficient */
    r = sdpa(via_stub, &dec.handle, &mask, 0.0, false, 0.0, false, false);
    CHECK(r == (act ? 2 : 3));
    CHECK(rec->dropout == 0.0 && !rec->causal && !rec->scale_has && !rec->gqa && rec->mask == &mask);
    /* prefill: flash for Ponytail's prefill kernel (asked twice); else cuDNN kept, one ask */
    rec->calls = 0;
    r = sdpa(via_stub, &pre.handle, &no_mask, 0.0, true, 0.0, false, true);
    CHECK(r == (prefill ? 1 : 3));
    CHECK(rec->calls == (prefill ? 2 : 1));
    /* a head_dim the prefill kernel does not take, dropout, a negative scale (the swap would
     * refuse them, and torch's flash is slower than cuDNN): cuDNN, one ask */
    rec->calls = 0;
    r = sdpa(via_stub, &wide.handle, &no_mask, 0.0, true, 0.0, false, true);
    CHECK(r == 3);
    CHECK(rec->calls == 1);
    rec->calls = 0;
    r = sdpa(via_stub, &pre.handle, &no_mask, 0.1, true, 0.0, false, true);
    CHECK(r == 3);
    CHECK(rec->calls == 1);
    rec->calls = 0;
    r = sdpa(via_stub, &pre.handle, &no_mask, 0.0, true, -0.125, true, true);
    CHECK(r == 3);
    CHECK(rec->calls == 1);
  }
  /* Outside the shim's second ask, torch's flag reads as torch set it. */
  CHECK(cudnn_on(gctx()));
  set(false, true);
  CHECK(!cudnn_on(gctx()));
  set(true, true);
  /* math off: no second ask (it could end in "no available kernel") */
  set(true, false);
  rec->calls = 0;
  CHECK(sdpa(0, &dec.handle, &no_mask, 0.0, false, 0.0, false, true) == 3);
  CHECK(rec->calls == 1);
  set(true, true);
  return failed;
}
