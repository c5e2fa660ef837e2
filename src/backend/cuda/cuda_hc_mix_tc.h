/* The prefill HC mix on TF32 tensor cores (cuda_hc_mix_tc.cu; design and numerics in
 * cuda_hc_mix_tc.cuh): mix[t][j] = (W x_t)_j / rms(x_t) for the n rows x (hd floats each, contiguous)
 * and the F16 rows of w (n_mix <= 24). Not bitwise the CPU; the exact path stays hc_mix's fallback. */
#ifndef DSV4_CUDA_HC_MIX_TC_H
#define DSV4_CUDA_HC_MIX_TC_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cuda/cuda_attn.h" /* dsv4_cuda_stream */

#ifdef __cplusplus
extern "C" {
#endif

/* Does the kernel take it (shape, alignment: x 16 bytes, w 8 bytes, its rows whole multiples of 8)? */
bool dsv4_cuda_hc_mix_tc_ok(const void *x, uint64_t hd, uint32_t n, const void *w, uint64_t w_row_bytes,
                            uint32_t n_mix);
/* Launches it on s; a cudaError_t (0: launched). */
int dsv4_cuda_hc_mix_tc(dsv4_cuda_stream s, const float *x, uint64_t hd, uint32_t n, const void *w,
                        uint64_t w_row_bytes, uint32_t n_mix, float eps, float *mix);

#ifdef __cplusplus
}
#endif

#endif
