// The decode kernel's timeline (kernels/attn_decode.cu), for test builds only: compiled with
// -DPT_ATTN_TIMELINE (tests/gpu/checks/attn.sh ATTN_DEFS), else PT_TL and PT_TL_END expand to
// nothing and production kernels hold none of it. Kept apart so that the kernel's source reads
// as the kernel, with its phase marks as one-line macros.
// PT_TL(i) and PT_TL_END(i) expect the decode function's locals tl, tl_mid and ntiles.
#ifndef PT_KERNELS_ATTN_DECODE_TIMELINE_CUH
#define PT_KERNELS_ATTN_DECODE_TIMELINE_CUH
#ifdef PT_ATTN_TIMELINE
#include <stdio.h>
#endif

namespace pt_attn {

// ---- timeline (test builds only: -DPT_ATTN_TIMELINE) -------------------------------------
// Thread 0 of each CTA reads %globaltimer at the kernel's phase boundaries. The first CTA and
// the CTA that finishes last print their phases, and the last one also prints the launch's span
// from the earliest CTA start to the latest CTA end: where the fixed per-launch microseconds of
// small problems go (bench/records/2026-12-01-read-floor.md). Production builds compile none of it.
#ifdef PT_ATTN_TIMELINE
__device__ unsigned long long tl_min = ~0ull, tl_max = 0ull, tl_smax = 0ull;
__device__ unsigned tl_count = 0;
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define PT_TL_N 9
#define PT_TL(i) do { if (threadIdx.x == 0) tl[i] = gtimer(); } while (0)
// -DPT_ATTN_TIMELINE_ALL (with PT_ATTN_TIMELINE): every CTA also prints one "TLC" line with
// absolute %globaltimer values (ns), its tile count, and the time its tile ntiles / 2 arrived,
// so that the CTAs of one launch can be laid side by side (which ones stream while others idle).
__device__ __noinline__ void tl_finish(unsigned long long (&tl)[PT_TL_N], int reached, int ntiles,
                                       unsigned long long mid) {
  if (threadIdx.x != 0) return;
  const unsigned long long end = gtimer();
  for (int i = reached + 1; i < PT_TL_N; ++i) tl[i] = end;
  atomicMin(&tl_min, tl[0]);
  atomicMax(&tl_max, end);
  atomicMax(&tl_smax, tl[0]);
  __threadfence();
  const unsigned total = gridDim.x * gridDim.y * gridDim.z;
  const unsigned n = atomicAdd(&tl_count, 1u);
  const bool first = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0, last = n == total - 1;
#ifdef PT_ATTN_TIMELINE_ALL
  printf("TLC %u,%u,%u tiles %d start %llu tile0 %llu mid %llu loopend %llu end %llu\n", blockIdx.x, blockIdx.y,
         blockIdx.z, ntiles, tl[0], tl[3], mid, tl[4], end);
#endif
  if (first || last)
    printf("TL cta %u,%u,%u%s ns from entry: scan %llu q %llu tile0 %llu loop %llu warpmerge %llu out %llu "
           "counted %llu merged %llu end %llu\n",
           blockIdx.x, blockIdx.y, blockIdx.z, last ? " (last to finish)" : "", tl[1] - tl[0], tl[2] - tl[0],
           tl[3] - tl[0], tl[4] - tl[0], tl[5] - tl[0], tl[6] - tl[0], tl[7] - tl[0], tl[8] - tl[0],
           end - tl[0]);
  if (last) {
    __threadfence();
    const unsigned long long lo = atomicAdd(&tl_min, 0ull), hi = atomicAdd(&tl_max, 0ull),
                             shi = atomicAdd(&tl_smax, 0ull);
    printf("TL launch span %llu ns (first CTA start to last CTA end), CTA starts spread over %llu ns, %u CTAs\n",
           hi - lo, shi - lo, total);
    atomicExch(&tl_min, ~0ull);
    atomicExch(&tl_max, 0ull);
    atomicExch(&tl_smax, 0ull);
    atomicExch(&tl_count, 0u);
  }
}
#define PT_TL_END(i) tl_finish(tl, i, ntiles, tl_mid)
#else
#define PT_TL(i) do { } while (0)
#define PT_TL_END(i) do { } while (0)
#endif

}  // namespace pt_attn

#endif
