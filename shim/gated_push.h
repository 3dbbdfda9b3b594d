/* Included around every expansion of shim/gated.def: cuda.h maps some of its
 * symbols to other variants by macros (cuMemcpyBatchAsync -> ..._v2, and with
 * __CUDA_API_VERSION_INTERNAL cuMemcpy -> cuMemcpy_ptds, ...), which would
 * rename the entries as they pass through the X-macros. Saved and undefined
 * here, restored by shim/gated_pop.h. */
#pragma push_macro("cuMemcpyBatchAsync")
#undef cuMemcpyBatchAsync
#pragma push_macro("cuMemcpy3DBatchAsync")
#undef cuMemcpy3DBatchAsync
#pragma push_macro("cuMemcpy")
#undef cuMemcpy
#pragma push_macro("cuMemcpyAsync")
#undef cuMemcpyAsync
#pragma push_macro("cuMemcpyPeer")
#undef cuMemcpyPeer
#pragma push_macro("cuMemcpyPeerAsync")
#undef cuMemcpyPeerAsync
#pragma push_macro("cuMemcpy3DPeer")
#undef cuMemcpy3DPeer
#pragma push_macro("cuMemcpy3DPeerAsync")
#undef cuMemcpy3DPeerAsync
#pragma push_macro("cuMemsetD8Async")
#undef cuMemsetD8Async
#pragma push_macro("cuMemsetD16Async")
#undef cuMemsetD16Async
#pragma push_macro("cuMemsetD32Async")
#undef cuMemsetD32Async
#pragma push_macro("cuMemsetD2D8Async")
#undef cuMemsetD2D8Async
#pragma push_macro("cuMemsetD2D16Async")
#undef cuMemsetD2D16Async
#pragma push_macro("cuMemsetD2D32Async")
#undef cuMemsetD2D32Async
#pragma push_macro("cuGraphLaunch")
#undef cuGraphLaunch
#pragma push_macro("cuLaunchCooperativeKernel")
#undef cuLaunchCooperativeKernel
