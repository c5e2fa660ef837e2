/* Device units of the activation quantizers, bit for bit quant_act_q8_k (shared by cuda_act_quant.cu
 * and the fused MoE mid kernel, cuda_ops_moe.cu) and quant_act_q8_0 (shared by cuda_act_quant.cu
 * and the warp-direct matvec's fused staging, cuda_mvw_units.cuh), so each pair writes the same bytes.
 * The IEEE operations are spelled out (__fdiv_rn, __fmul_rn, __float2int_rn): no compiler flag can
 * turn them into approximations or FMAs. */
#ifndef DSV4_CUDA_ACT_QUANT_CUH
#define DSV4_CUDA_ACT_QUANT_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

static __host__ __device__ __forceinline__ int clamp_i8(int v) {
    return v > 127 ? 127 : (v < -128 ? -128 : v);
}

/* ---- Q8_0 (quant_act_q8_0): the arithmetic of one block, shared by the quantizer kernel and the
 * warp-direct matvec's fused staging (cuda_mvw_units.cuh), so both write the same bytes. The host
 * spellings exist for the emulation checks: the same IEEE operations (a lone product or quotient
 * is never contracted), and NaN -> 0, saturation, as cvt.rni.s32.f32 does on the device. ---- */
/* d = amax / 127, kept in f32 */
static __host__ __device__ __forceinline__ float act_q8_0_d(float amax) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(amax, 127.0f);
#else
    return amax / 127.0f;
#endif
}
/* id = 1 / d, or 0 for an all-zero block */
static __host__ __device__ __forceinline__ float act_q8_0_id(float d) {
#ifdef __CUDA_ARCH__
    return d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
#else
    return d != 0.0f ? 1.0f / d : 0.0f;
#endif
}
/* q = clamp(round-half-even(v * id)) */
static __host__ __device__ __forceinline__ int act_q8_0_q(float v, float id) {
#ifdef __CUDA_ARCH__
    return clamp_i8(__float2int_rn(__fmul_rn(v, id)));
#else
    const float p = v * id;
    if (p != p) return 0;
    const float r = rintf(p);
    return r >= 127.0f ? 127 : r <= -128.0f ? -128 : (int)r;
#endif
}

#ifdef __CUDACC__
/* Producer-side Q8_0 (cuda_ctx.preq_*): float4 group g (elements 4g..4g+3) of a row into its Q8_0
 * activation block g / 8 at yq (36 B each: f32 d, 32 int8), the bytes quant_act_q8_0 writes. The 8
 * groups of a block must sit in 8 consecutive lanes (g & 7 = lane & 7), every lane of the warp
 * calling; the amax is an fmaxf reduction (order-free). */
static __device__ __forceinline__ void act_q8_0_store_group(float4 v, uint32_t g, uint8_t *yq) {
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float d = act_q8_0_d(am), id = act_q8_0_id(d);
    uint8_t *ob = yq + (uint64_t)(g >> 3) * 36;
    const uint32_t q = (uint32_t)(uint8_t)(int8_t)act_q8_0_q(v.x, id) |
                       (uint32_t)(uint8_t)(int8_t)act_q8_0_q(v.y, id) << 8 |
                       (uint32_t)(uint8_t)(int8_t)act_q8_0_q(v.z, id) << 16 |
                       (uint32_t)(uint8_t)(int8_t)act_q8_0_q(v.w, id) << 24;
    *(uint32_t *)(ob + 4 + 4 * (g & 7)) = q;
    if ((g & 7) == 0) *(float *)ob = d;
}
/* Producer-side Q8_0, one value per lane: the warp's 32 values (lane = element) are block b of a row,
 * written at yq + 36 b with quant_act_q8_0's bytes. Every lane of the warp must call it. */
static __device__ __forceinline__ void act_q8_0_store_lane(float v, uint64_t b, uint8_t *yq) {
    float am = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float d = act_q8_0_d(am), id = act_q8_0_id(d);
    uint8_t *ob = yq + b * 36;
    const uint32_t lane = threadIdx.x & 31;
    ob[4 + lane] = (uint8_t)(int8_t)act_q8_0_q(v, id);
    if (lane == 0) *(float *)ob = d;
}
#endif

/* One warp quantizes one block of 256 (dsv4_q8_k, 292 B at ob): lane owns elements 8*lane ..
 * 8*lane+7 (v). The largest |x| wins, the lowest index among equal magnitudes (the CPU's strict '>'
 * scan keeps the first one). All 32 lanes must call it. */
static __device__ __forceinline__ void act_q8_k_block(const float v[8], int lane, uint8_t *ob) {
    float am = 0.0f, mv = 0.0f;
    int ai = 0x7fffffff;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float ax = fabsf(v[k]);
        if (ax > am) {
            am = ax;
            mv = v[k];
            ai = lane * 8 + k;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float am2 = __shfl_xor_sync(0xffffffffu, am, o);
        const float mv2 = __shfl_xor_sync(0xffffffffu, mv, o);
        const int ai2 = __shfl_xor_sync(0xffffffffu, ai, o);
        if (am2 > am || (am2 == am && ai2 < ai)) {
            am = am2;
            mv = mv2;
            ai = ai2;
        }
    }
    if (am == 0.0f) {                 /* the same in every lane */
        uint32_t *w = (uint32_t *)ob; /* 73 words: d, qs, bsums */
        for (int i = lane; i < 73; i += 32) w[i] = 0;
        return;
    }
    const float iscale = __fdiv_rn(-127.0f, mv);
    uint32_t pk[2] = {0, 0};
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int q = clamp_i8(__float2int_rn(__fmul_rn(iscale, v[k])));
        sum += q;
        pk[k >> 2] |= (uint32_t)(q & 0xff) << (8 * (k & 3));
    }
    uint32_t *qw = (uint32_t *)(ob + 4 + lane * 8);
    qw[0] = pk[0];
    qw[1] = pk[1];
    const int pair = sum + __shfl_down_sync(0xffffffffu, sum, 1); /* 16 elements = lanes 2j, 2j+1 */
    if ((lane & 1) == 0) *(int16_t *)(ob + 260 + lane) = (int16_t)pair;
    if (lane == 0) *(float *)ob = __fdiv_rn(1.0f, iscale);
}

#endif
