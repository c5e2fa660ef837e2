/* cuBLAS through dlopen (cuda_blas.h): only the four entry points the prefill GEMM needs. The types
 * and enumerations come from the toolkit's header; nothing is linked against libcublas, so the
 * programs start (and run on their own kernels) where the library is missing. */
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_blas.h"

typedef cublasStatus_t (*fn_create)(cublasHandle_t *);
typedef cublasStatus_t (*fn_destroy)(cublasHandle_t);
typedef cublasStatus_t (*fn_set_stream)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*fn_gemm_sb)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, long long int,
                                     const void *, cudaDataType, int, long long int, const void *, void *,
                                     cudaDataType, int, long long int, int, cublasComputeType_t,
                                     cublasGemmAlgo_t);

static struct {
    pthread_once_t once;
    void *lib;
    fn_create create;
    fn_destroy destroy;
    fn_set_stream set_stream;
    fn_gemm_sb gemm_sb;
    char why[256];
} B = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, NULL, NULL, ""};

static void blas_load(void) {
    const char *env = getenv("DSV4_CUBLAS_LIB");
    const char *names[] = {env,
                           "libcublas.so.13",
                           "libcublas.so.12",
                           "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so.13",
                           "/usr/local/cuda/lib64/libcublas.so"};
    const char *last = "not found";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !B.lib; i++) {
        if (!names[i] || !names[i][0]) continue;
        B.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!B.lib) last = dlerror();
        if (env && i == 0 && !B.lib) break; /* an explicit path that fails is not replaced silently */
    }
    if (!B.lib) {
        snprintf(B.why, sizeof B.why, "cuBLAS not loaded (%s)", last ? last : "?");
        return;
    }
    B.create = (fn_create)dlsym(B.lib, "cublasCreate_v2");
    B.destroy = (fn_destroy)dlsym(B.lib, "cublasDestroy_v2");
    B.set_stream = (fn_set_stream)dlsym(B.lib, "cublasSetStream_v2");
    B.gemm_sb = (fn_gemm_sb)dlsym(B.lib, "cublasGemmStridedBatchedEx");
    if (!B.create || !B.destroy || !B.set_stream || !B.gemm_sb) {
        snprintf(B.why, sizeof B.why,
                 "cuBLAS loaded but lacks an entry point (cublasCreate_v2, "
                 "cublasDestroy_v2, cublasSetStream_v2, cublasGemmStridedBatchedEx)");
        dlclose(B.lib);
        B.lib = NULL;
    }
}

extern "C" bool dsv4_cuda_blas_loaded(const char **why) {
    pthread_once(&B.once, blas_load);
    if (!B.lib && why) *why = B.why;
    return B.lib != NULL;
}

extern "C" dsv4_status dsv4_cuda_blas_create(void **handle, dsv4_error *err) {
    const char *why = NULL;
    *handle = NULL;
    if (!dsv4_cuda_blas_loaded(&why)) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s", why);
    cublasHandle_t h = NULL;
    const cublasStatus_t s = B.create(&h);
    if (s != CUBLAS_STATUS_SUCCESS)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cublasCreate failed (%d)", (int)s);
    *handle = h;
    return DSV4_OK;
}

extern "C" void dsv4_cuda_blas_destroy(void *handle) {
    if (handle && B.lib) B.destroy((cublasHandle_t)handle);
}

extern "C" dsv4_status dsv4_cuda_blas_gemm_f16(void *handle, cudaStream_t stream, int m, int n, int K,
                                               const void *A, long long lda, long long stride_a,
                                               const void *Bm, long long ldb, long long stride_b, float *C,
                                               long long ldc, long long stride_c, int batch, float alpha,
                                               int accumulate, dsv4_error *err) {
    if (!handle || !B.lib) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuBLAS is not loaded");
    if (lda > 0x7fffffff || ldb > 0x7fffffff || ldc > 0x7fffffff)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuBLAS gemm: leading dimension over 2^31");
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = B.set_stream((cublasHandle_t)handle, stream);
    /* column-major: C (m x n, ldc) = op(A)^T... A is stored as K x m (lda), so op = T; B as K x n */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = B.gemm_sb((cublasHandle_t)handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, K, &alpha, A, CUDA_R_16F,
                      (int)lda, stride_a, Bm, CUDA_R_16F, (int)ldb, stride_b, accumulate ? &one : &zero, C,
                      CUDA_R_32F, (int)ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuBLAS gemm (%d x %d x %d, batch %d) failed (%d)", m, n,
                         K, batch, (int)s);
    return DSV4_OK;
}
