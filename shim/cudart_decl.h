/* Prototypes of libcudart's registration/launch entry points. The toolkit
 * declares them in crt/host_runtime.h and crt/device_functions.h, which are
 * C++ only; these copies must stay identical to them (checked against CUDA
 * 13.0). Include after cuda_runtime_api.h. */
#ifndef PT_CUDART_DECL_H
#define PT_CUDART_DECL_H
#include <cuda_runtime_api.h>

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *stub);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream);
#endif
