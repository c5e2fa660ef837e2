/* Helpers shared by the attention-side kernels (cuda_attn_*.cu).
 *
 * Bitwise parity with the CPU reference (gcc, -std=c11, so no FMA contraction): every float
 * product and sum the CPU evaluates separately is written with __fmul_rn / __fadd_rn so that nvcc
 * cannot fuse it. expf/cosf/sinf are evaluated in double and rounded to float: that is the
 * correctly rounded value, which glibc's float functions return in all but rare cases (then
 * they differ by 1 ulp). log2f only feeds ceilf for the FP8/FP4 block scales; its double
 * version gives the same ceilf for every positive float (checked exhaustively against glibc). */
#ifndef DSV4_CUDA_ATTN_COMMON_CUH
#define DSV4_CUDA_ATTN_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_attn.h"

#define DSV4_ATTN_NEG_INF (-1e30f) /* CPU_NEG_INF: the empty-frontier score */

static __device__ __forceinline__ float attn_expf(float x) { return (float)exp((double)x); }
static __device__ __forceinline__ float attn_cosf(float x) { return (float)cos((double)x); }
static __device__ __forceinline__ float attn_sinf(float x) { return (float)sin((double)x); }
/* ceilf(log2f(y)) of the CPU for y > 0 */
static __device__ __forceinline__ int attn_ceil_log2(float y) { return (int)ceilf((float)log2((double)y)); }

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The launcher's result: the launch error, if any, as the header's int. */
static inline int attn_launch_status(void) { return (int)cudaGetLastError(); }

#endif
