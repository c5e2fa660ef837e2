/* Row units of the one-token routed-expert kernels (cuda_ops_moe_decode.cu), host-callable so that
 * tests/cuda/moe_decode_emu_check.cu can run them on a machine without a GPU.
 *
 * A warp owns whole rows; each lane owns a fixed slice of the row (the same slice on every row it
 * visits), so its share of the Q8_K activation stays in registers for the whole kernel:
 *   IQ2_XXS, in = 4096: lane = (superblock b = lane/2, half h = lane%2), 4 sub-blocks of 32;
 *   Q4_K: lane = (b = lane/4, quarter c = lane%4) = sub-blocks 2c, 2c+1 (two passes for 16 blocks);
 *   Q2_K: lane = (b = lane/4, i = lane%4): qs[16i, 16i+16) x 4 bit planes (4 sub-blocks of 16).
 * A unit returns the lane's integer partial sums of its superblock (exact); the kernel adds the
 * partials of the lanes of one superblock with integer shuffles, so every superblock's float term
 * is formed exactly as the CPU forms it (quant/dot_scalar.c), and the terms are added in the
 * CPU's order (md_seq_sum): a row equals quant_dot_* bit for bit.
 *
 * IQ2_XXS decode: one 32-bit PRMT selector per grid entry (nibble k = 0/1/2 for the grid byte
 * 8/25/43 of element k) OR one 32-bit sign selector per 7-bit sign index (nibble k gets 4 when
 * element k is negative, the 8th sign being the parity bit) picks each element from the byte pool
 * {8, 25, 43, 0, -8, -25, -43, 0}: two PRMTs give the signed grid words, two dp4a the sum. */
#ifndef DSV4_CUDA_MOE_DECODE_UNITS_CUH
#define DSV4_CUDA_MOE_DECODE_UNITS_CUH

#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_mv_units.cuh" /* mv_dp4a, mv_fshr, h2f, ld32, md_prmt, md_ent, the selector tables */

/* Rounded f32 products/difference that no compiler flag contracts into an FMA. */
static __host__ __device__ __forceinline__ float md_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float r = a * b;
    return r;
#endif
}
static __host__ __device__ __forceinline__ float md_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    volatile float r = a - b;
    return r;
#endif
}

/* ---- activations in registers (from one Q8_K block of 292 bytes, 4-byte aligned) ----
 * CG: the block is in global memory written by another grid still in flight when the kernel
 * started (a programmatic dependent launch): read it from L2 (ld.global.cg), never from L1. */
template <bool CG> static __host__ __device__ __forceinline__ uint32_t md_ldx(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    if (CG) return __ldcg((const unsigned int *)p);
#endif
    return ld32(p);
}
struct md_act_iq2 {
    int q[4][8]; /* sub-blocks 4h..4h+3 */
    float d;
};
static __host__ __device__ __forceinline__ void md_load_act_iq2(const uint8_t *xb, int h, md_act_iq2 *a) {
    a->d = *(const float *)xb;
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        MV_UNROLL
        for (int w = 0; w < 8; w++) a->q[j][w] = (int)ld32(xb + 4 + 128 * h + 32 * j + 4 * w);
    }
}
struct md_act_q4k {
    int x0[8], x1[8]; /* sub-blocks 2c, 2c+1 */
    int bs0, bs1;     /* their bsums pairs */
    float d;
};
template <bool CG = false>
static __host__ __device__ __forceinline__ void md_load_act_q4k(const uint8_t *xb, int c, md_act_q4k *a) {
    const uint32_t dw = md_ldx<CG>(xb);
    memcpy(&a->d, &dw, 4);
    MV_UNROLL
    for (int w = 0; w < 8; w++) {
        a->x0[w] = (int)md_ldx<CG>(xb + 4 + 64 * c + 4 * w);
        a->x1[w] = (int)md_ldx<CG>(xb + 4 + 64 * c + 32 + 4 * w);
    }
    const uint32_t b0 = md_ldx<CG>(xb + 260 + 8 * c), b1 = md_ldx<CG>(xb + 264 + 8 * c); /* bsums 4c..4c+3 */
    a->bs0 = (int)(int16_t)(b0 & 0xffffu) + (int)(int16_t)(b0 >> 16);
    a->bs1 = (int)(int16_t)(b1 & 0xffffu) + (int)(int16_t)(b1 >> 16);
}
struct md_act_q2k {
    int q[4][4]; /* plane j: q8[128h + 32j + 16s .. +16) */
    int bs[4];   /* bsums[8h + 2j + s] */
    float d;
};
template <bool CG = false>
static __host__ __device__ __forceinline__ void md_load_act_q2k(const uint8_t *xb, int i, md_act_q2k *a) {
    const int h = i >> 1, s = i & 1;
    const uint32_t dw = md_ldx<CG>(xb);
    memcpy(&a->d, &dw, 4);
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        MV_UNROLL
        for (int w = 0; w < 4; w++) a->q[j][w] = (int)md_ldx<CG>(xb + 4 + 128 * h + 32 * j + 16 * s + 4 * w);
        const uint32_t bw = md_ldx<CG>(xb + 260 + 4 * (4 * h + j)); /* bsums 8h+2j, 8h+2j+1 */
        a->bs[j] = (int)(int16_t)(s ? bw >> 16 : bw & 0xffffu);
    }
}

/* The row value from its superblock terms t[0..NT) (16-byte aligned): the CPU's order, a
 * sequential sum from 0.0f (quant/dot_scalar.c), so a row equals quant_dot_* bit for bit. */
template <int NT> static __host__ __device__ __forceinline__ float md_seq_sum(const float *t) {
    float acc = 0.0f;
    MV_UNROLL
    for (int b = 0; b < NT; b += 4) {
        const float4 q = *(const float4 *)(t + b);
        acc += q.x;
        acc += q.y;
        acc += q.z;
        acc += q.w;
    }
    return acc;
}

/* ---- row units: sr = the row's bytes (16-byte aligned) ---- */

/* IQ2_XXS half h of superblock b: sum over its 4 sub-blocks of sumi * (2 * scale + 1) (exact; the
 * two halves add up to the CPU's bsum). Selector tables: entry e at byte (e << LG) | loff of TG
 * (grid, 256 entries) and TS (signs, 128); the device keeps 32 copies, LG = 7, loff = 4 * lane
 * (a conflict-free bank per lane), the host one copy, LG = 2, loff = 0. */
template <int LG>
static __host__ __device__ __forceinline__ int md_iq2_half(const uint8_t *sr, int b, int h,
                                                           const md_act_iq2 &a, const uint8_t *TG,
                                                           const uint8_t *TS, uint32_t loff) {
    /* the 32 qs bytes start at o (2-byte aligned); read 9 words from st = o - 2 or o - 4 (the word
     * below when o is aligned): then the 32 lanes' first words fall in 32 distinct banks and the
     * last word read is the row's last */
    const int o = 66 * b + 2 + 32 * h, st = (66 * b + 32 * h) & ~3;
    const uint8_t *wb = sr + st;
    uint32_t W[9];
    MV_UNROLL
    for (int k = 0; k < 9; k++) W[k] = ld32(wb + 4 * k);
    const unsigned sh = 8u * (unsigned)(o - st); /* 16 or 32 (funnel shift clamps: the high word) */
    int acc = 0;
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t a0 = mv_fshr(W[2 * j], W[2 * j + 1], sh), a1 = mv_fshr(W[2 * j + 1], W[2 * j + 2], sh);
        uint32_t sel[4];
        sel[0] = ld32(TG + (md_ent<0, LG, 255u>(a0) | loff)) | ld32(TS + (md_ent<0, LG, 127u>(a1) | loff));
        sel[1] = ld32(TG + (md_ent<8, LG, 255u>(a0) | loff)) | ld32(TS + (md_ent<7, LG, 127u>(a1) | loff));
        sel[2] = ld32(TG + (md_ent<16, LG, 255u>(a0) | loff)) | ld32(TS + (md_ent<14, LG, 127u>(a1) | loff));
        sel[3] = ld32(TG + (md_ent<24, LG, 255u>(a0) | loff)) | ld32(TS + (md_ent<21, LG, 127u>(a1) | loff));
        int sumi = 0;
        MV_UNROLL
        for (int l = 0; l < 4; l++) {
            sumi = mv_dp4a((int)md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel[l]), a.q[j][2 * l], sumi);
            sumi = mv_dp4a((int)md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel[l] >> 16), a.q[j][2 * l + 1], sumi);
        }
        acc += sumi * (int)(2 * (a1 >> 28) + 1);
    }
    return acc;
}
/* The superblock's float term from the combined bsum (CPU: (f16(d) * d_y) * (float)bsum; the row
 * total is multiplied by 0.125 at the end). */
static __host__ __device__ __forceinline__ float md_iq2_term(const uint8_t *sr, int b, float ad, int bsum) {
    return md_mul(md_mul(h2f(*(const uint16_t *)(sr + 66 * b)), ad), (float)bsum);
}

/* Q4_K quarter c of superblock b (144-byte blocks): isum and summs partials of sub-blocks 2c, 2c+1. */
static __host__ __device__ __forceinline__ void md_q4k_quarter(const uint8_t *sr, int b, int c,
                                                               const md_act_q4k &a, int *isum, int *summs) {
    const uint8_t *blk = sr + 144 * b;
    const int4 hd = ld128(blk);
    const int4 qa = ld128(blk + 16 + 32 * c), qb = ld128(blk + 32 + 32 * c);
    const unsigned sh = 16u * (unsigned)(c & 1); /* scales byte 2c (c < 2) or 2c - 4 (c >= 2) */
    uint32_t sc0, m0, sc1, m1;
    q4k_scales_pair(hd, sh, c < 2, &sc0, &m0, &sc1, &m1);
    const uint32_t q[8] = {(uint32_t)qa.x, (uint32_t)qa.y, (uint32_t)qa.z, (uint32_t)qa.w,
                           (uint32_t)qb.x, (uint32_t)qb.y, (uint32_t)qb.z, (uint32_t)qb.w};
    int s0 = 0, s1 = 0;
    MV_UNROLL
    for (int k = 0; k < 8; k++) {
        s0 = mv_dp4a((int)(q[k] & 0x0f0f0f0fu), a.x0[k], s0);
        s1 = mv_dp4a((int)((q[k] >> 4) & 0x0f0f0f0fu), a.x1[k], s1);
    }
    *isum = (int)sc0 * s0 + (int)sc1 * s1;
    *summs = (int)m0 * a.bs0 + (int)m1 * a.bs1;
}
/* K-quant superblock term (CPU: dall * (float)isum - dmin * (float)summs, dall = d_y * f16(d)). */
static __host__ __device__ __forceinline__ float md_k_term(uint32_t dm, float ad, int isum, int summs) {
    return md_sub(md_mul(md_mul(ad, h2f(dm & 0xffffu)), (float)isum),
                  md_mul(md_mul(ad, h2f(dm >> 16)), (float)summs));
}
static __host__ __device__ __forceinline__ uint32_t md_q4k_dm(const uint8_t *sr, int b) {
    return ld32(sr + 144 * b);
}

/* Q2_K piece i of superblock b (84-byte blocks, 4-byte aligned): qs[16i, 16i+16) x 4 planes. */
static __host__ __device__ __forceinline__ void md_q2k_piece(const uint8_t *sr, int b, int i,
                                                             const md_act_q2k &a, int *isum, int *summs) {
    const int h = i >> 1, s = i & 1;
    const uint8_t *blk = sr + 84 * b;
    const uint32_t q0 = ld32(blk + 16 + 16 * i), q1 = ld32(blk + 20 + 16 * i), q2 = ld32(blk + 24 + 16 * i),
                   q3 = ld32(blk + 28 + 16 * i);
    const uint32_t sw0 = ld32(blk + 8 * h), sw1 = ld32(blk + 8 * h + 4);
    int is = 0, sm = 0;
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t sc = ((j < 2 ? sw0 : sw1) >> (8 * (2 * (j & 1) + s))) & 0xffu;
        const uint32_t m = 0x03030303u << (2 * j); /* plane j in place: 4^j times the true sum */
        int sub = mv_dp4a_us(q0 & m, a.q[j][0], 0);
        sub = mv_dp4a_us(q1 & m, a.q[j][1], sub);
        sub = mv_dp4a_us(q2 & m, a.q[j][2], sub);
        sub = mv_dp4a_us(q3 & m, a.q[j][3], sub);
        is += (int)(sc & 15u) * (sub >> (2 * j));
        sm += (int)(sc >> 4) * a.bs[j];
    }
    *isum = is;
    *summs = sm;
}
static __host__ __device__ __forceinline__ uint32_t md_q2k_dm(const uint8_t *sr, int b) {
    return ld32(sr + 84 * b + 80);
}

#endif
