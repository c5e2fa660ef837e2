/* KV rounding pieces shared by the KV ops (cuda_attn_kvnum.cu) and the fused KV op
 * (cuda_attn_fused.cu), written once so the fused kernel is bitwise the fp8_kv op by
 * construction. Parity with the CPU: see cuda_attn_kvnum.cu. */
#ifndef DSV4_CUDA_ATTN_KVNUM_CUH
#define DSV4_CUDA_ATTN_KVNUM_CUH

#include <math.h>

#include "backend/cuda/cuda_attn_common.cuh"

/* Nearest value of an unsigned minifloat (mbits mantissa bits, minimum normal exponent emin),
 * ties to even; ax already clamped to the format's maximum. */
static __device__ __forceinline__ float minifloat_round(float ax, int mbits, int emin) {
    if (ax == 0.0f) return 0.0f;
    int ex;
    (void)frexpf(ax, &ex);
    int e = ex - 1;
    if (e < emin) e = emin;
    const float q = rintf(ldexpf(ax, mbits - e));
    return ldexpf(q, e - mbits);
}

/* One block element of a power-of-two-scaled round trip; amax is the block's (floored) amax. */
static __device__ __forceinline__ float block_round(float v0, float amax, float vmax, int mbits, int emin) {
    const float scale = ldexpf(1.0f, attn_ceil_log2(__fdiv_rn(amax, vmax)));
    float v = __fdiv_rn(v0, scale);
    if (v > vmax) v = vmax;
    if (v < -vmax) v = -vmax;
    const float r = minifloat_round(fminf(fabsf(v), vmax), mbits, emin);
    return __fmul_rn(v < 0.0f ? -r : r, scale);
}

/* FP8 E4M3 round trip of one block of 64 values p[0..63], in place, by one whole warp: lane
 * takes p[lane] and p[lane + 32]. */
static __device__ __forceinline__ void fp8_block64(float *p, uint32_t lane) {
    const float v0 = p[lane], v1 = p[lane + 32];
    float amax = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
    if (amax < 1.0e-4f) amax = 1.0e-4f;
    p[lane] = block_round(v0, amax, 448.0f, 3, -6);
    p[lane + 32] = block_round(v1, amax, 448.0f, 3, -6);
}

#endif
