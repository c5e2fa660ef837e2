/* Tensor-core prefill GEMM for F16 weights (sm_80+: mma.sync f16 m16n8k16, f32 accumulate).
 *
 *   y[t*y_stride + o] = sum_i W[o][i] * hi_t[i] + sum_i W[o][i] * lo_t[i]   for o < n_out, t < n
 *
 * with hi = f16(x) (|x| clamped to 65504) and lo = f16(x - hi) (session 18; DSV4_CUDA_F16_TWO_TERM=0:
 * hi only, the product ds4's own CUDA prefill computes with cuBLAS GemmEx, F16 in / F32 out). NOT
 * bitwise the CPU: the tensor cores sum in their own order. With both terms x = hi + lo to ~2^-22
 * relative, so against the CPU's f32-activation result the difference is about f32 rounding; with hi
 * alone the f16 rounding dominates, |d| <= 2^-11 sum_i |w_i x_i| (~3e-4 of max|ref| on random data),
 * which DS4's roundings then amplify: the DS4 oracle fixture tiny_f16_A failed on CUDA with hi alone
 * (median max|d| 0.143 against a bound of 0.0133) and passes with both. Against a float64 sum of the
 * same f16 operands (products are exact in f32) only the f32 accumulation remains: ~sqrt(in) 2^-24
 * ||w.x||_2, checked at 1e-5 of max|ref| (tests/cuda/f16_mma_emu_check.cu).
 *
 * W: n_out rows of `in` halves, `row_bytes` apart (the caller applies row0). x: f32 rows of `in`
 * values, `x_stride` floats apart. x16: a device buffer of at least dsv4_cuda_f16_mma_x16_bytes (both terms)
 * bytes; part: one of dsv4_cuda_f16_mma_part_bytes (the split-K partial sums; may be NULL when
 * that is 0). Both launched on `stream`, nothing synchronized. */
#ifndef DSV4_CUDA_GEMM_F16_MMA_H
#define DSV4_CUDA_GEMM_F16_MMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st; /* = cudaStream_t */

/* Is the kernel usable on this compute capability (sm_80+)? */
bool dsv4_cuda_f16_mma_device_ok(int cc_major);
/* false when DSV4_CUDA_PREFILL_F16=0 is set in the environment (read on every call). */
bool dsv4_cuda_f16_mma_enabled(void);
/* Does the kernel take this shape / these operands (in % 8 == 0, 16-byte aligned weights and rows,
 * 4-byte aligned x and y, grid limits)? */
bool dsv4_cuda_f16_mma_ok(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out, uint32_t n);
/* Split-K factor the launcher picks for this shape on sm_count multiprocessors (1 = none). */
uint32_t dsv4_cuda_f16_mma_splits(uint64_t in, uint64_t n_out, uint32_t n, int sm_count);
size_t dsv4_cuda_f16_mma_x16_bytes(uint64_t in, uint32_t n);
size_t dsv4_cuda_f16_mma_part_bytes(uint64_t in, uint64_t n_out, uint32_t n, int sm_count);

/* DSV4_ERR_UNSUPPORTED with nothing launched when dsv4_cuda_f16_mma_ok says no. */
dsv4_status dsv4_cuda_gemm_f16_mma(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                   const float *x, uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride,
                                   void *x16, float *part, int sm_count, struct CUstream_st *stream,
                                   dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
