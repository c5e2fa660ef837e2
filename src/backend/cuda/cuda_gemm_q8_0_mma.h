/* Tensor-core prefill GEMM for Q8_0 weights x Q8_0 activations (sm_80+: mma.sync s8 m16n8k32).
 *
 *   y[t*y_stride + o] = W[o] . x_t   for o < n_out, t < n
 *
 * W: n_out Q8_0 rows of `in` elements, `row_bytes` apart (the caller applies row0). x: n rows of
 * dsv4_q8_0_act blocks (f32 scale + 32 int8, as quant_act_q8_0 / dsv4_cuda_quant_act_rows write
 * them), `x_stride` bytes apart. Every value equals quant_dot_q8_0(W[o], x_t, in) bit for bit
 * (exact integer block sums from the MMA, then the CPU's float operations in the CPU's order;
 * see cuda_gemm_q8_0_mma.cuh). */
#ifndef DSV4_CUDA_GEMM_Q8_0_MMA_H
#define DSV4_CUDA_GEMM_Q8_0_MMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st; /* = cudaStream_t */

/* Dynamic shared memory one CTA needs (the device must allow a block to opt into this much). */
size_t dsv4_cuda_q8_0_mma_smem_bytes(void);
/* Can a device of this compute capability and opt-in shared-memory limit run the kernel? */
bool dsv4_cuda_q8_0_mma_device_ok(int cc_major, size_t smem_per_block_optin);
/* false when DSV4_CUDA_PREFILL_MMA=0 is set in the environment (read on every call). */
bool dsv4_cuda_q8_0_mma_enabled(void);

/* Launch on `stream` (nothing is synchronized). DSV4_ERR_UNSUPPORTED, with nothing launched, for a
 * shape or alignment the kernel declines (in not a multiple of 32, weight base not 2-aligned,
 * activations not 4-aligned, more than 65535*128 rows): the caller falls back. */
dsv4_status dsv4_cuda_gemm_q8_0_mma(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                    const void *x, uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride,
                                    struct CUstream_st *stream, dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
