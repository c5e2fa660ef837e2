/* Layout and arithmetic of the register-tiled indexer scoring (iscore_tiled_kernel in
 * cuda_attn_indexer.cu, DSV4_CUDA_ISCORE=tiled), host-callable so tests/cuda/iscore_tiled_emu_check.cu
 * can replay every thread of a block against the plain sequential dots.
 *
 * Shared memory (floats, every array 16-byte aligned): the head weights [IST_HEADS], the row tile
 * [IST_TILE][st], the dots [IST_TILE][IST_HEADS + 1], q [IST_HEADS][st], st = head_dim + 4. Warp w
 * owns rows 2w and 2w + 1, lane l heads l and l + 32: its four dots read both rows and both heads
 * 4 values of d at a time, and each dot is the chain dot = dot + k[d] * q[d] over d in order (the
 * plain kernel's, so the same bits). */
#ifndef DSV4_CUDA_ISCORE_TILED_UNITS_CUH
#define DSV4_CUDA_ISCORE_TILED_UNITS_CUH

#include <stddef.h>
#include <stdint.h>

#define IST_WARPS 8u
#define IST_TILE (2u * IST_WARPS)
#define IST_HEADS 64u
#ifdef __CUDA_ARCH__
#define IST_UNROLL _Pragma("unroll")
#else
#define IST_UNROLL
#endif

/* Offsets (floats) of the four arrays, then the total. */
struct ist_layout {
    uint32_t ws, ks, dots, qs, total, st;
};
__host__ __device__ inline ist_layout ist_layout_of(uint32_t head_dim) {
    ist_layout L;
    L.st = head_dim + 4;
    L.ws = 0;
    L.ks = IST_HEADS;
    L.dots = L.ks + IST_TILE * L.st;
    L.qs = L.dots + IST_TILE * (IST_HEADS + 1);
    L.total = L.qs + IST_HEADS * L.st;
    return L;
}

/* x * y then + (two roundings, never contracted): the device's _rn intrinsics, the host's plain
 * float operations (no FMA contraction on the host build's baseline x86-64). */
__host__ __device__ inline float ist_mul_add(float acc, float x, float y) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(acc, __fmul_rn(x, y));
#else
    volatile float p = x * y;
    return acc + p;
#endif
}

/* Thread (warp, lane): its four dots d[row 0/1][head 0/1] from the staged tile (sh = the block's
 * shared memory laid out as ist_layout_of). */
__host__ __device__ inline void ist_thread_dots(const float *sh, const ist_layout &L, uint32_t head_dim,
                                                uint32_t warp, uint32_t lane, float d[2][2]) {
    const float *k0 = sh + L.ks + (2 * warp) * L.st, *k1 = k0 + L.st;
    const float *q0 = sh + L.qs + lane * L.st, *q1 = sh + L.qs + (lane + 32) * L.st;
    float d00 = 0.0f, d01 = 0.0f, d10 = 0.0f, d11 = 0.0f;
    for (uint32_t e = 0; e < head_dim; e += 4) {
#ifdef __CUDA_ARCH__
        const float4 a0 = *(const float4 *)(k0 + e), a1 = *(const float4 *)(k1 + e);
        const float4 b0 = *(const float4 *)(q0 + e), b1 = *(const float4 *)(q1 + e);
        const float av0[4] = {a0.x, a0.y, a0.z, a0.w}, av1[4] = {a1.x, a1.y, a1.z, a1.w};
        const float bv0[4] = {b0.x, b0.y, b0.z, b0.w}, bv1[4] = {b1.x, b1.y, b1.z, b1.w};
#else
        const float av0[4] = {k0[e], k0[e + 1], k0[e + 2], k0[e + 3]};
        const float av1[4] = {k1[e], k1[e + 1], k1[e + 2], k1[e + 3]};
        const float bv0[4] = {q0[e], q0[e + 1], q0[e + 2], q0[e + 3]};
        const float bv1[4] = {q1[e], q1[e + 1], q1[e + 2], q1[e + 3]};
#endif
        IST_UNROLL
        for (int j = 0; j < 4; j++) {
            d00 = ist_mul_add(d00, av0[j], bv0[j]);
            d01 = ist_mul_add(d01, av0[j], bv1[j]);
            d10 = ist_mul_add(d10, av1[j], bv0[j]);
            d11 = ist_mul_add(d11, av1[j], bv1[j]);
        }
    }
    d[0][0] = d00, d[0][1] = d01, d[1][0] = d10, d[1][1] = d11;
}

/* Where thread (warp, lane) stores dot [row i][head j]. */
__host__ __device__ inline uint32_t ist_dot_at(const ist_layout &L, uint32_t warp, uint32_t lane, uint32_t i,
                                               uint32_t j) {
    return L.dots + (2 * warp + i) * (IST_HEADS + 1) + lane + 32 * j;
}

/* Row r's score: relu(dot) * weight summed over the heads in order. */
__host__ __device__ inline float ist_row_score(const float *sh, const ist_layout &L, uint32_t r) {
    float sv = 0.0f;
    for (uint32_t h = 0; h < IST_HEADS; h++) {
        float dot = sh[L.dots + r * (IST_HEADS + 1) + h];
        if (dot < 0.0f) dot = 0.0f;
        sv = ist_mul_add(sv, dot, sh[L.ws + h]);
    }
    return sv;
}

#endif
