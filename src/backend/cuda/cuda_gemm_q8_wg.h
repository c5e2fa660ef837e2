/* Q8_0 prefill products on warpgroup tensor cores, bitwise the CPU (cuda_gemm_q8_wg.cu; units in
 * cuda_gemm_q8_wg.cuh): for o < rows, t < n, g < groups
 *
 *   y[t * y_stride + g * rows + o] = quant_dot_q8_0(weight row g * rows + o, Q8_0 of x row t, slice g)
 *
 * with the CPU's float arithmetic: per Q8_0 block in order, acc += (d_w * d_x) * (float)isum. The
 * operands are prepared copies: the weights' int8 codes as exact f16 integers [rows][in] with their
 * block scales as floats [rows][in / 32] (dsv4_cuda_q8_wg_wconvert, once at load), the activations the
 * same from the f32 rows (dsv4_cuda_q8_wg_xconvert: quant_act_q8_0's codes and scales). Every block's
 * integer isum (|isum| <= 32 * 127 * 128 < 2^24) is exact in the tensor cores' f32 sum, whatever its
 * order. Built for sm_90a only: dsv4_cuda_q8_wg_device_ok says whether this device runs it. */
#ifndef DSV4_CUDA_GEMM_Q8_WG_H
#define DSV4_CUDA_GEMM_Q8_WG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st;

typedef struct dsv4_cuda_q8_wg_op {
    const uint16_t *wq; /* f16 codes of weight row 0 of group 0 ([rows * groups][in]) */
    const float *wd;    /* their block scales ([rows * groups][in / 32]) */
    uint64_t in, rows;
    uint32_t groups;
    const uint16_t *xq; /* f16 codes of the activations ([n][in * groups]) */
    const float *xd;    /* their block scales ([n][in * groups / 32]) */
    uint32_t n;
    float *y;
    uint64_t y_stride;
    uint32_t sm_count; /* the device's SMs (cuda_caps): the persistent grid's CTAs at most */
} dsv4_cuda_q8_wg_op;

/* Compute capability 9.0, the kernel's image present and its shared memory granted on the current
 * device (ask once per device: cuda_ops_blas.cu keeps the answer per context). */
bool dsv4_cuda_q8_wg_device_ok(int cc_major, size_t smem_per_block_optin);
/* DSV4_CUDA_Q8_WG=0 turns the path off; =fma keeps it with (d_w * d_x) * isum + acc fused (f32-accurate,
 * not bitwise); read once. */
bool dsv4_cuda_q8_wg_enabled(void);
bool dsv4_cuda_q8_wg_exact(void);
/* Shapes it takes: in % 64 == 0, 16-byte aligned operands, int ranges. */
bool dsv4_cuda_q8_wg_ok(const dsv4_cuda_q8_wg_op *op);
dsv4_status dsv4_cuda_q8_wg_gemm(const dsv4_cuda_q8_wg_op *op, struct CUstream_st *stream, dsv4_error *err);

/* Bytes of a prepared copy of `rows` rows of `in` values (codes, then scales, 256-aligned), and of the
 * activations of n rows of L values. */
size_t dsv4_cuda_q8_wg_copy_bytes(uint64_t rows, uint64_t in);
/* Where a copy's scales start (bytes from its codes). */
size_t dsv4_cuda_q8_wg_scales_offset(uint64_t rows, uint64_t in);
/* rows Q8_0 rows (row_bytes = in / 32 * 34 apart) into the prepared copy at dst. */
dsv4_status dsv4_cuda_q8_wg_wconvert(const void *w, uint64_t row_bytes, uint64_t in, uint64_t rows, void *dst,
                                     struct CUstream_st *stream, dsv4_error *err);
/* n f32 rows of L values (x_stride floats apart) into the prepared copy at dst (quant_act_q8_0 of
 * each row). */
dsv4_status dsv4_cuda_q8_wg_xconvert(const float *x, uint64_t x_stride, uint64_t L, uint32_t n, void *dst,
                                     struct CUstream_st *stream, dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
