/* cuBLAS, loaded at run time (dlopen): the f16 tensor-core GEMM of the prefill products
 * (cuda_gemm_blas.cu). The library is optional: without it (or with DSV4_CUDA_BLAS=0) every product
 * keeps its own kernels, so a machine without cuBLAS runs the same model, only slower.
 *
 * Search order: $DSV4_CUBLAS_LIB (a path), then libcublas.so.13 / .12 / libcublas.so through the
 * dynamic loader (LD_LIBRARY_PATH, the ld.so cache), then /usr/local/cuda/lib64. */
#ifndef DSV4_CUDA_BLAS_H
#define DSV4_CUDA_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st; /* = cudaStream_t */

/* Was the library found (loaded once per process; thread-safe)? `why` (may be NULL) gets the
 * reason when not. */
bool dsv4_cuda_blas_loaded(const char **why);
/* A handle on the current device (cublasCreate). */
dsv4_status dsv4_cuda_blas_create(void **handle, dsv4_error *err);
void dsv4_cuda_blas_destroy(void *handle);

/* Column-major cuBLAS terms, row-major data: for b < batch,
 *   C_b[t * ldc + o] = sum_k A_b[o * lda + k] * B_b[t * ldb + k]   (o < m, t < n, k < K)
 * with A_b = A + b * stride_a (halves), B_b = B + b * stride_b (halves), C_b = C + b * stride_c
 * (floats): f16 operands, f32 sums (CUBLAS_COMPUTE_32F), f32 output, the sum times alpha (a power of two
 * where the callers undo an operand scale: exact); accumulate: C_b += that (beta 1). Enqueued on `stream`. */
dsv4_status dsv4_cuda_blas_gemm_f16(void *handle, struct CUstream_st *stream, int m, int n, int K,
                                    const void *A, long long lda, long long stride_a, const void *B,
                                    long long ldb, long long stride_b, float *C, long long ldc,
                                    long long stride_c, int batch, float alpha, int accumulate,
                                    dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
