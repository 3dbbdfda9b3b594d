/* The wrappers of shim/gated.def: each counts its call and runs the real
 * driver function inside the gate (shim/gate.h), so that a sleeping process's
 * copies, sets and graph launches wait instead of touching memory that has
 * been moved to the host or released. Nothing else: these never route.
 *
 * cuda.h is included without __CUDA_API_VERSION_INTERNAL: the exact variants
 * defined here are then either undeclared (the _ptds/_ptsz ones) or declared
 * with the same prototype (cuMemcpyHtoD_v2, ...). The few names cuda.h maps to
 * a newer variant by a macro are undefined first, so each definition below
 * gets the exact symbol it names. */
#include <cuda.h>

#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuMemcpy
#undef cuMemcpyAsync
#undef cuMemcpyPeer
#undef cuMemcpyPeerAsync
#undef cuMemcpy3DPeer
#undef cuMemcpy3DPeerAsync
#undef cuMemsetD8Async
#undef cuMemsetD16Async
#undef cuMemsetD32Async
#undef cuMemsetD2D8Async
#undef cuMemsetD2D16Async
#undef cuMemsetD2D32Async
#undef cuGraphLaunch
#undef cuLaunchCooperativeKernel

#include "shim/entry_gated.h"
#include "shim/gate.h"
#include "shim/shim.h"

#define PT_GATED(SYM, ASKED, VER, MODE, SIG) PT_GATED_DEF(SYM, SIG)
#define PT_GATED_DEF(...) PT_GATED_DEF_(__VA_ARGS__)
#define PT_GATED_DEF_(SYM, PARAMS, ARGS)                             \
  PT_EXPORT CUresult SYM PARAMS {                                    \
    typedef CUresult (*fn_t) PARAMS;                                 \
    fn_t real = (fn_t)pt_real(PT_SYM_##SYM);                         \
    if (PT_UNLIKELY(!real)) return (CUresult)PT_DRV_NO_DRIVER;       \
    if (!pt_active()) return real ARGS;                              \
    pt_count_call(PT_SYM_##SYM);                                     \
    struct pt_tblock *g_ = pt_gate_enter();                          \
    CUresult r_ = real ARGS;                                         \
    pt_gate_leave(g_);                                               \
    return r_;                                                       \
  }
#include "shim/gated.def"
#undef PT_GATED_DEF_
#undef PT_GATED_DEF
#undef PT_GATED

#define PT_GATED(SYM, ASKED, VER, MODE, SIG) [PT_SYM_##SYM] = (void *)SYM,
void *const pt_gated_wrapper[PT_SYM_COUNT] = {
#include "shim/gated.def"
};
#undef PT_GATED
