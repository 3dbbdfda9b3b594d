/* cuBLAS on buffers from cudaMalloc / cudaMallocAsync, against a host
 * reference: cublasSgemm (512^3, 5 rounds, C re-allocated stream-ordered
 * every round), cublasHgemm and cublasGemmEx (fp16 in/out, fp32 compute),
 * 1024 x 1024 x 256. Inputs are small integers (-2..2), so every product and
 * partial sum is exact in fp32 and fp16 whatever the kernel or its summation
 * order: results must equal the reference bit for bit.
 * Build: nvcc -arch=sm_90 cublas_gemm.cu -lcublas */
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "prog_common.h"

#define CKB(call)                                                                                \
  do {                                                                                           \
    cublasStatus_t s_ = (call);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,                  \
              cublasGetStatusString(s_), (int)s_);                                               \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

static float small_int(uint32_t *seed) { return (float)((int)(lcg(seed) >> 16) % 5 - 2); }

/* Column-major C (m x n) = A (m x k) * B (k x n). */
static void ref_gemm(int m, int n, int k, const float *A, const float *B, float *C) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float acc = 0.0f;
      for (int l = 0; l < k; l++) acc += A[i + (size_t)l * m] * B[l + (size_t)j * k];
      C[i + (size_t)j * m] = acc;
    }
}

int main(void) {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t hb;
  CKB(cublasCreate(&hb));
  CKB(cublasSetStream(hb, s));
  uint64_t dig = FNV_INIT;
  uint32_t seed = 2024;

  /* ---- sgemm ---- */
  {
    const int M = 512, N = 512, K = 512;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *hA = (float *)xmalloc(na * 4), *hB = (float *)xmalloc(nb * 4), *hC = (float *)xmalloc(nc * 4),
          *ref = (float *)xmalloc(nc * 4);
    float *dA = NULL, *dB = NULL;
    CK(cudaMalloc((void **)&dA, na * 4));
    CK(cudaMalloc((void **)&dB, nb * 4));
    const float one = 1.0f, zero = 0.0f;
    for (int round = 0; round < 5; round++) {
      for (size_t i = 0; i < na; i++) hA[i] = small_int(&seed);
      for (size_t i = 0; i < nb; i++) hB[i] = small_int(&seed);
      ref_gemm(M, N, K, hA, hB, ref);
      float *dC = NULL;
      CK(cudaMallocAsync((void **)&dC, nc * 4, s));
      CK(cudaMemcpyAsync(dA, hA, na * 4, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(dB, hB, nb * 4, cudaMemcpyHostToDevice, s));
      CKB(cublasSgemm(hb, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M));
      CK(cudaGetLastError());
      CK(cudaMemcpyAsync(hC, dC, nc * 4, cudaMemcpyDeviceToHost, s));
      CK(cudaFreeAsync(dC, s));
      CK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < nc; i++)
        if (hC[i] != ref[i]) FAIL("sgemm round %d: C[%zu] = %g, expected %g", round, i, (double)hC[i], (double)ref[i]);
      dig = fnv1a(dig, hC, nc * 4);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    free(hA), free(hB), free(hC), free(ref);
  }

  /* ---- hgemm and GemmEx (fp16) ---- */
  {
    const int M = 1024, N = 1024, K = 256;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *fA = (float *)xmalloc(na * 4), *fB = (float *)xmalloc(nb * 4), *ref = (float *)xmalloc(nc * 4);
    __half *hA = (__half *)xmalloc(na * 2), *hB = (__half *)xmalloc(nb * 2), *hC = (__half *)xmalloc(nc * 2);
    for (size_t i = 0; i < na; i++) hA[i] = __float2half(fA[i] = small_int(&seed));
    for (size_t i = 0; i < nb; i++) hB[i] = __float2half(fB[i] = small_int(&seed));
    ref_gemm(M, N, K, fA, fB, ref);
    __half *dA = NULL, *dB = NULL, *dC = NULL;
    CK(cudaMalloc((void **)&dA, na * 2));
    CK(cudaMalloc((void **)&dB, nb * 2));
    CK(cudaMalloc((void **)&dC, nc * 2));
    CK(cudaMemcpy(dA, hA, na * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB, nb * 2, cudaMemcpyHostToDevice));
    for (int variant = 0; variant < 2; variant++) {
      CK(cudaMemsetAsync(dC, 0xff, nc * 2, s)); /* NaN: a result not written shows */
      if (variant == 0) {
        const __half one = __float2half(1.0f), zero = __float2half(0.0f);
        CKB(cublasHgemm(hb, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M));
      } else {
        const float one = 1.0f, zero = 0.0f;
        CKB(cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_16F, M, dB, CUDA_R_16F, K, &zero,
                         dC, CUDA_R_16F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
      CK(cudaGetLastError());
      CK(cudaMemcpyAsync(hC, dC, nc * 2, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < nc; i++)
        if (__half2float(hC[i]) != ref[i])
          FAIL("%s: C[%zu] = %g, expected %g", variant ? "GemmEx" : "Hgemm", i, (double)__half2float(hC[i]),
               (double)ref[i]);
      dig = fnv1a(dig, hC, nc * 2);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    free(fA), free(fB), free(ref), free(hA), free(hB), free(hC);
  }

  CKB(cublasDestroy(hb));
  CK(cudaStreamDestroy(s));
  CK(cudaDeviceSynchronize());
  printf("RESULT cublas_gemm %016llx sgemm=5 hgemm=1 gemmex=1\n", (unsigned long long)dig);
  return 0;
}
