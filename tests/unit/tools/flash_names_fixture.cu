// Kernels named like torch's FlashAttention-2 copy, so the lister's HOOK column
// can be checked against Ponytail's hooks without a torch build.
namespace pytorch_flash {
struct Flash_fwd_params { char bytes[464]; };
template <int D> __global__ void flash_fwd_splitkv_kernel(const __grid_constant__ Flash_fwd_params p) {}
template <int D> __global__ void flash_fwd_splitkv_combine_kernel(const __grid_constant__ Flash_fwd_params p) {}
template <int D> __global__ void flash_fwd_kernel(const __grid_constant__ Flash_fwd_params p) {}
template __global__ void flash_fwd_splitkv_kernel<128>(const __grid_constant__ Flash_fwd_params);
template __global__ void flash_fwd_splitkv_combine_kernel<128>(const __grid_constant__ Flash_fwd_params);
template __global__ void flash_fwd_kernel<128>(const __grid_constant__ Flash_fwd_params);
}  // namespace pytorch_flash
__global__ void not_attention(float *x) { x[0] = 1.f; }
