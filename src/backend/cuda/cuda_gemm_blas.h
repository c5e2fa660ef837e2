/* Prefill products on cuBLAS's f16 tensor-core GEMM (cuda_blas.h), for Q8_0 and F16 weights:
 *
 *   y[t * y_stride + g * rows + o] = sum_k W[g * rows + o][k] * X(t, g * in + k)
 *   for o < rows, t < n, g < groups, k < in
 *
 * with the operands of cuda_gemm_blas.cuh (Q8_0 weights as two f16 terms, cached or converted slice
 * by slice into a scratch buffer; activations as two f16 terms, the CPU's Q8_0 values for Q8_0
 * weights; rows with large values scaled by a power of two and unscaled after). NOT bitwise the
 * CPU: the operands to ~2^-22 relative and cuBLAS's f32 summation order (with one term per side,
 * the switches below, each operand rounded to f16: <= 2^-11 relative). groups > 1 is the grouped
 * attention output (one strided batched GEMM). Launches on `stream`; nothing synchronized. */
#ifndef DSV4_CUDA_GEMM_BLAS_H
#define DSV4_CUDA_GEMM_BLAS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st;

typedef struct dsv4_cuda_blas_op {
    uint32_t type; /* DSV4_TYPE_Q8_0 or DSV4_TYPE_F16 */
    const void *w; /* device: row 0 of group 0 */
    uint64_t row_bytes, in, rows;
    uint32_t groups;
    const float *x; /* device f32, token t at x + t * x_stride */
    uint64_t x_stride;
    uint32_t n;
    float *y;
    uint64_t y_stride;
    /* Q8_0: the f16 rows this op reads, converted once (dsv4_cuda_gemm_blas_w16_convert), or NULL: each
     * call converts them into w16 (the same halves either way); w16_lo_cached: their lo terms (three
     * terms) */
    const void *w16_cached;
    const void *w16_lo_cached;
    int32_t w_exp; /* Q8_0: the tensor's Sw (dsv4_cuda_gemm_blas_w_exp) */
} dsv4_cuda_blas_op;

/* F16 weights: the activation operand as two f16 terms, hi = f16(x) and lo = f16(x - hi), and two
 * products summed in f32 (W hi + W lo: the CPU's f32-activation product to about f32 rounding), unless
 * DSV4_CUDA_F16_TWO_TERM=0 (f16(x) only; read once). The tensor-core F16 kernel
 * (cuda_gemm_f16_mma.h) follows the same switch. */
bool dsv4_cuda_f16_two_term(void);
/* Q8_0 weights: both operands as two f16 terms and three products (cuda_gemm_blas.cuh), unless
 * DSV4_CUDA_Q8_TERMS=1 (hi x hi only; read once). */
bool dsv4_cuda_q8_three_terms(void);
/* Sw of a Q8_0 tensor whose largest |d| has these half bits (cuda_gemm_blas.cuh xb_w_exp). */
int dsv4_cuda_gemm_blas_w_exp(uint32_t max_abs_bits);

/* Bytes of the two scratch buffers: the f16 weight slice (0 for F16 weights; both terms with three
 * terms) and the f16 activations (both terms where the product takes two) with the row exponents. */
size_t dsv4_cuda_gemm_blas_w16_bytes(const dsv4_cuda_blas_op *op);
size_t dsv4_cuda_gemm_blas_x16_bytes(const dsv4_cuda_blas_op *op);
/* Does the path take this op (types, in % 32 == 0, int ranges)? */
bool dsv4_cuda_gemm_blas_ok(const dsv4_cuda_blas_op *op);
/* convert = false: x16 already holds this op's activations (the same x, n, stride, width and
 * weight type as the conversion that wrote it). */
dsv4_status dsv4_cuda_gemm_blas(void *blas, const dsv4_cuda_blas_op *op, void *w16, void *x16, bool convert,
                                struct CUstream_st *stream, dsv4_error *err);

/* The same product of the weightless rmsnorm of x's rows (F16 weights, one group, in = 4096, 8192 or
 * 16384, x 16-byte aligned): the f16 operand is formed from x directly, with the bytes that rmsnorm
 * into an f32 buffer and then dsv4_cuda_gemm_blas(convert = true) would give. x16 as above. */
bool dsv4_cuda_gemm_blas_rms_ok(const dsv4_cuda_blas_op *op);
dsv4_status dsv4_cuda_gemm_blas_rms(void *blas, const dsv4_cuda_blas_op *op, float eps, void *x16,
                                    struct CUstream_st *stream, dsv4_error *err);

/* rows Q8_0 rows of `in` values (row_bytes apart) into f16 rows at w16 (rows x in halves) and, when
 * w16_lo is not NULL, their lo terms there: the halves dsv4_cuda_gemm_blas converts a Q8_0 weight of
 * Sw = w_exp into. */
dsv4_status dsv4_cuda_gemm_blas_w16_convert(const void *w, uint64_t row_bytes, uint64_t in, uint64_t rows,
                                            int w_exp, void *w16, void *w16_lo, struct CUstream_st *stream,
                                            dsv4_error *err);

/* Largest |d| (half bits, sign dropped) over `blocks` Q8_0 blocks at w, into *out_bits (device),
 * which the caller zeroes first. */
dsv4_status dsv4_cuda_q8_0_max_d(const void *w, uint64_t blocks, uint32_t *out_bits,
                                 struct CUstream_st *stream, dsv4_error *err);
/* The same for any blocks of block_bytes with an f16 scale at byte d_offset (both even; the
 * cuda_moe_half.h scan: IQ2_XXS, 66 and 0). */
dsv4_status dsv4_cuda_block_max_d(const void *w, uint64_t blocks, uint32_t block_bytes, uint32_t d_offset,
                                  uint32_t *out_bits, struct CUstream_st *stream, dsv4_error *err);
/* May every element of a Q8_0 tensor whose largest |d| has these half bits become an f16? */
bool dsv4_cuda_gemm_blas_d_safe(uint32_t max_abs_bits);

#ifdef __cplusplus
}
#endif
#endif
