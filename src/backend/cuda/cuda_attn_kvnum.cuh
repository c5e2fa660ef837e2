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

/* The hadamard_fp4 op on one row already in shared memory (sh[width], visible to the block): the
 * Walsh-Hadamard butterflies in place, then each 32-element block of sh * norm rounded to FP4 into
 * row. Every thread of the block calls it (barriers inside); width a power of two, a multiple of 32.
 * The op's kernel and the fused query pass (cuda_attn_fused.cu) both run this code. */
static __device__ __forceinline__ void hadamard_fp4_smem(float *sh, float *row, uint32_t width, float norm) {
    const uint32_t half = width / 2;
    for (uint32_t stride = 1; stride < width; stride <<= 1) {
        for (uint32_t p = threadIdx.x; p < half; p += blockDim.x) {
            const uint32_t i = (p / stride) * 2 * stride + p % stride;
            const float a = sh[i], b = sh[i + stride];
            sh[i] = __fadd_rn(a, b);
            sh[i + stride] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    const uint32_t lane = threadIdx.x % 32;
    for (uint32_t blk = threadIdx.x / 32; blk < width / 32; blk += blockDim.x / 32) {
        const float v = __fmul_rn(sh[blk * 32 + lane], norm);
        float amax = warp_max(fabsf(v));
        if (amax < 7.052966104933725e-38f) amax = 7.052966104933725e-38f;
        row[blk * 32 + lane] = block_round(v, amax, 6.0f, 1, 0);
    }
}

/* dsv4_e2m1_round of ax >= 0 (quant/kvnum.c minifloat_round with 1 mantissa bit, emin 0) */
static __device__ __forceinline__ float e2m1_nearest(float ax) {
    ax = fminf(ax, 6.0f);
    if (ax == 0.0f) return 0.0f;
    int ex;
    (void)frexpf(ax, &ex);
    int e = ex - 1;
    if (e < 0) e = 0;
    return ldexpf(rintf(ldexpf(ax, 1 - e)), e - 1);
}

/* One packed FP4 block (backend.h DSV4_KV_FP4: the exponent byte, then 16 bytes of codes) from 32
 * floats; one thread. The store op's kernel and the fused emitted row both run it. */
static __device__ __forceinline__ void fp4_pack_block32(const float *x, unsigned char *o) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    int ex = 0;
    const float f = amax > 0.0f ? frexpf(amax, &ex) : 0.0f;
    int e = f <= 0.75f ? ex - 3 : ex - 2;
    e = e < -128 ? -128 : e > 127 ? 127 : e;
    o[0] = (unsigned char)(signed char)e;
    for (int i = 0; i < 32; i += 2) {
        uint32_t codes = 0;
        for (int j = 0; j < 2; j++) {
            const float v = x[i + j], m = e2m1_nearest(fabsf(ldexpf(v, -e)));
            const uint32_t k = m < 2.0f    ? (uint32_t)(m * 2.0f)
                               : m == 2.0f ? 4u
                               : m == 3.0f ? 5u
                               : m == 4.0f ? 6u
                                           : 7u;
            codes |= ((signbit(v) ? 8u : 0u) | k) << (4 * j);
        }
        o[1 + i / 2] = (unsigned char)codes;
    }
}

/* fp4_pack_block32 by one warp, a value per lane (the same bytes): the amax is an fmaxf reduction
 * (order-free; from 0 as the loop's), each lane rounds its own value and the even lanes write the
 * pairs. One thread's 32 rounds in a row made the emitted indexer row the longest kernel of a
 * closing token's KV lane (ncu: 9.7 us). */
static __device__ __forceinline__ void fp4_pack_block32_warp(const float *x, unsigned char *o,
                                                             uint32_t lane) {
    const float v = x[lane];
    const float amax = fmaxf(0.0f, warp_max(fabsf(v)));
    int ex = 0;
    const float f = amax > 0.0f ? frexpf(amax, &ex) : 0.0f;
    int e = f <= 0.75f ? ex - 3 : ex - 2;
    e = e < -128 ? -128 : e > 127 ? 127 : e;
    if (lane == 0) o[0] = (unsigned char)(signed char)e;
    const float m = e2m1_nearest(fabsf(ldexpf(v, -e)));
    const uint32_t k = m < 2.0f    ? (uint32_t)(m * 2.0f)
                       : m == 2.0f ? 4u
                       : m == 3.0f ? 5u
                       : m == 4.0f ? 6u
                                   : 7u;
    const uint32_t code = (signbit(v) ? 8u : 0u) | k;
    const uint32_t hi = __shfl_down_sync(0xffffffffu, code, 1);
    if ((lane & 1) == 0) o[1 + lane / 2] = (unsigned char)(code | hi << 4);
}

#endif
