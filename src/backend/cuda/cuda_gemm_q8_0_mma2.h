/* v2 of the Q8_0 tensor-core prefill GEMM (cuda_gemm_q8_0_mma.h has the contract): the same
 * results bit for bit, a larger CTA tile and a deeper pipeline (cuda_gemm_q8_0_mma2.cuh).
 * Selected by DSV4_CUDA_PREFILL_MMA=v2 only; not yet validated on a GPU. */
#ifndef DSV4_CUDA_GEMM_Q8_0_MMA2_H
#define DSV4_CUDA_GEMM_Q8_0_MMA2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

struct CUstream_st; /* = cudaStream_t */

/* The two tile shapes (cuda_gemm_q8_0_mma2.cuh): 256 x 128 CTA of 64 x 32 warp tiles ("v2"),
 * 128 x 128 of 32 x 32 ("v2n"). */
enum { DSV4_Q8_0_MMA2_WIDE = 0, DSV4_Q8_0_MMA2_NARROW = 1 };

/* Dynamic shared memory one CTA of that tile needs (wide 217088 B: sm_90's opt-in limit allows
 * it, sm_80's does not; narrow 147456 B). */
size_t dsv4_cuda_q8_0_mma2_smem_bytes(int tile);
/* Can a device of this compute capability and opt-in shared-memory limit run that tile? */
bool dsv4_cuda_q8_0_mma2_device_ok(int tile, int cc_major, size_t smem_per_block_optin);
/* DSV4_CUDA_PREFILL_MMA, read on every call: 1 for "v2" / "v2n" (v2 where its grid has a CTA per
 * SM), 2 for "v2-all" / "v2n-all" (every shape, for checks on small models), 0 otherwise (v1);
 * *tile gets the tile the value names. */
int dsv4_cuda_q8_0_mma2_mode(int *tile);

/* As dsv4_cuda_gemm_q8_0_mma, with the given tile. It also declines (DSV4_ERR_UNSUPPORTED,
 * nothing launched) when its grid would have fewer than min_ctas CTAs (pass the SM count: v1's
 * smaller tile fills the GPU better there; 0 never declines for that reason). */
dsv4_status dsv4_cuda_gemm_q8_0_mma2(int tile, const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                     const void *x, uint64_t x_stride, uint32_t n, float *y,
                                     uint64_t y_stride, uint32_t min_ctas, struct CUstream_st *stream,
                                     dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
