// Kernels with known parameter layouts for the `ponytail kernels` tests.
// Offsets follow the C ABI: each parameter at its alignment, in order.
struct By { int a; double b; char c; };          // 24 bytes, align 8
struct Big { float *q; int v[30]; };             // 128 bytes, align 8

// 0:8  8:8  16:4                          -> 20 bytes
extern "C" __global__ void pt_fx_ptrs(float *a, const float *b, int n) {
  if (threadIdx.x < n) a[threadIdx.x] = b[threadIdx.x];
}
// 0:1  2:2  4:4  8:8  16:8  24:4  32:8     -> 40 bytes
extern "C" __global__ void pt_fx_scalars(char c, short s, int i, long long l, double d, float f, double *out) {
  out[0] = c + s + i + l + d + f;
}
// 0:4  8:24  32:8                          -> 40 bytes
__global__ void pt_fx_struct(int x, By s, double *out) { out[0] = x + s.a + s.b + s.c; }
// 0:128                                    -> 128 bytes
__global__ void pt_fx_grid(const __grid_constant__ Big p) { p.q[threadIdx.x] = p.v[threadIdx.x % 30]; }
// no parameters
extern "C" __global__ void pt_fx_none() {}

namespace ptfx {
template <typename T> __global__ void scale(T *x, T y) { x[threadIdx.x] *= y; }
template __global__ void scale<float>(float *, float);   // 0:8 8:4 -> 12 bytes
}
