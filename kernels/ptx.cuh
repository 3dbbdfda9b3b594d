// PTX primitives of the fused attention kernels (sm_90): shared-memory
// addressing, thread-block-cluster / DSMEM access, cp.async, ldmatrix,
// mma.sync m16n8k16 and packing for bf16/fp16, ex2, the GPU-scope counter
// atomics, warp-wide reductions and a 4-element output store. Thin wrappers
// only: each is one instruction (or a fixed short sequence) and is inlined.
//
// Contract (the caller guarantees):
//  - cluster_* / ld_cluster_*: a thread-block-cluster launch (sm_90);
//    cluster_sync is reached by every thread of every CTA of the cluster
//    (.aligned); addresses passed to cluster_map / ld_cluster_* are shared
//    addresses (smem_u32) of a variable at the same offset in every CTA, and
//    that CTA has not left (bracket the reads with cluster_sync).
//  - cp_async16 / cp_async16_policy: dst 16-byte aligned shared address, src 16-byte aligned and
//    valid even when src_bytes is 0 (then the 16 bytes are zero-filled).
//  - ldsm_x4 / ldsm_x4_t / dt<T>::mma: all 32 lanes of the warp, converged;
//    ldmatrix row addresses 16-byte aligned.
//  - warp_max / warp_sum: all 32 lanes of the warp (full mask).
//  - store4: dst 8-byte aligned.
//  - atom_add1_acq_rel_gpu / st0_relaxed_gpu: a global address.
#ifndef PT_KERNELS_PTX_CUH
#define PT_KERNELS_PTX_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace pt_attn {

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread-block-cluster helpers (sm_90): e.g. the CTAs of one (batch, KV head)
// of the decode kernel form a cluster when the split count is small, and
// merge their partials through distributed shared memory.
static __device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: release our shared-memory writes,
// acquire the others'.
static __device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The address of the same shared variable in CTA `rank` of the cluster.
static __device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Predicated DSMEM loads: zeros when !pred, no branch and no memory access then.
static __device__ __forceinline__ float4 ld_cluster_f4_if(uint32_t addr, bool pred) {
  float4 v;
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"
               "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
               "@p ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n}\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr), "r"((int)pred)
               : "memory");
  return v;
}
static __device__ __forceinline__ float2 ld_cluster_f2_if(uint32_t addr, bool pred) {
  float2 v;
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n"
               "mov.b32 %0, 0;\nmov.b32 %1, 0;\n"
               "@p ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n}\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(addr), "r"((int)pred)
               : "memory");
  return v;
}

static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
  // .cg: stream through L2 only; src_bytes 0 zero-fills (keys past the split).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
// An L2 policy that evicts the lines it tags first (data read once), and cp_async16 with it.
static __device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// The normal policy as a cache hint (timing experiments: PT_ATTN_EXP_KVNORMAL).
static __device__ __forceinline__ uint64_t l2_evict_normal() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
static __device__ __forceinline__ void cp_async16_policy(uint32_t dst, const void *src, int src_bytes,
                                                         uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(pol));
}
static __device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A hint: the 128-byte line at `p` into L2 (no register, no shared memory, nothing to wait on).
static __device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Transposes an 8x8 matrix of 16-bit elements held one register per lane (lane 4r + c: row r,
// columns 2c and 2c + 1) across the warp; all 32 lanes, converged.
static __device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

static __device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T> struct dt;
template <> struct dt<__nv_bfloat16> {
  static constexpr uint16_t NEG_INF_BITS = 0xff80;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u));
  }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct dt<__half> {
  static constexpr uint16_t NEG_INF_BITS = 0xfc00;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<__half2 *>(&u));
  }
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Writes 4 consecutive output elements (8 bytes; the caller guarantees the
// alignment, e.g. the decode launcher checked 16-byte alignment of o and of
// its strides).
template <typename T>
static __device__ __forceinline__ void store4(T *dst, float a, float b, float c, float d) {
  uint2 v;
  v.x = dt<T>::pack(a, b);
  v.y = dt<T>::pack(c, d);
  *reinterpret_cast<uint2 *>(dst) = v;
}

// Warp-wide butterfly reductions: every lane gets the result.
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// GPU-scope counter: add 1 with acquire-release semantics (returns the old
// value), and a relaxed store of 0. The constants stay PTX immediates.
static __device__ __forceinline__ unsigned int atom_add1_acq_rel_gpu(unsigned int *addr) {
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
               : "=r"(old)
               : "l"(addr)
               : "memory");
  return old;
}
static __device__ __forceinline__ void st0_relaxed_gpu(unsigned int *addr) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], 0;\n" ::"l"(addr) : "memory");
}

}  // namespace pt_attn

#endif  // PT_KERNELS_PTX_CUH
