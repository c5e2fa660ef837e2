/* Block decoders of the generic product kernel (cuda_ops_gemm.cu), host and device: the float
 * term of one weight block against one activation block, written exactly as quant/dot_scalar.c
 * writes it (exact integer sums, then the same float operations in the same order). Adding the
 * terms of a row in block order from 0.0f (times 0.125f at the end for IQ2_XXS) gives the CPU's
 * dot product bit for bit, provided no multiply-add is fused (the users build with
 * --fmad=false). tests/cuda/gemm_units_check.cu runs them on the host against quant_dot_*. */
#ifndef DSV4_CUDA_GEMM_UNITS_CUH
#define DSV4_CUDA_GEMM_UNITS_CUH

#include <stdint.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}

enum gm_kind { GM_F32 = 0, GM_F16, GM_BF16, GM_Q8_0, GM_Q2_K, GM_Q4_K, GM_IQ2_XXS, GM_NONE };

#define GM_HD __host__ __device__ __forceinline__

GM_HD float gm_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
/* exact f16 -> f32, subnormals included */
GM_HD float gm_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    if (e == 31) return gm_bits(sign | 0x7f800000u | (m << 13));
    return gm_bits(sign | ((e + 112u) << 23) | (m << 13));
}
GM_HD float gm_bf16(uint16_t h) { return gm_bits((uint32_t)h << 16); }
GM_HD float gm_f16p(const uint8_t *p) { return gm_f16((uint16_t)(p[0] | (p[1] << 8))); }
GM_HD uint32_t gm_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Term of block b of weight row wr against activation row xa (Q8_0: dsv4_q8_0_act blocks; the
 * K-quants and IQ2_XXS: dsv4_q8_k blocks). grid/signs: the IQ2_XXS tables. */
template <int K>
GM_HD float gm_block_term(const uint8_t *wr, const uint8_t *xa, long long b, const uint64_t *grid,
                          const uint8_t *signs_tab) {
    if (K == GM_Q8_0) {
        const uint8_t *wb = wr + b * 34;
        const dsv4_q8_0_act *x = (const dsv4_q8_0_act *)xa + b;
        int32_t isum = 0;
        for (int k = 0; k < 32; k++) isum += (int32_t)(int8_t)wb[2 + k] * (int32_t)x->qs[k];
        return (gm_f16p(wb) * x->d) * (float)isum;
    } else if (K == GM_Q2_K) {
        const uint8_t *wb = wr + b * 84; /* scales[16], qs[64], d, dmin */
        const dsv4_q8_k *x = (const dsv4_q8_k *)xa + b;
        const uint8_t *sc = wb;
        int32_t summs = 0;
        for (int j = 0; j < 16; j++) summs += (int32_t)x->bsums[j] * (sc[j] >> 4);
        int32_t isum = 0;
        const int8_t *q8 = x->qs;
        for (int h = 0; h < 2; h++) {
            const uint8_t *q2 = wb + 16 + 32 * h;
            for (int j = 0; j < 4; j++) {
                for (int s = 0; s < 2; s++) {
                    int32_t sub = 0;
                    for (int l = 0; l < 16; l++) sub += ((q2[16 * s + l] >> (2 * j)) & 3) * (int32_t)q8[l];
                    isum += (sc[8 * h + 2 * j + s] & 15) * sub;
                    q8 += 16;
                }
            }
        }
        const float dall = x->d * gm_f16p(wb + 80);
        const float dmin = x->d * gm_f16p(wb + 82);
        return dall * (float)isum - dmin * (float)summs;
    } else if (K == GM_Q4_K) {
        const uint8_t *wb = wr + b * 144; /* d, dmin, scales[12], qs[128] */
        const dsv4_q8_k *x = (const dsv4_q8_k *)xa + b;
        const uint8_t *s = wb + 4;
        int32_t isum = 0, summs = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            if (j < 4) {
                sc = s[j] & 63;
                m = s[j + 4] & 63;
            } else {
                sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
                m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
            const uint8_t *q4 = wb + 16 + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            int32_t sub = 0;
            for (int l = 0; l < 32; l++) sub += ((q4[l] >> shift) & 15) * (int32_t)x->qs[32 * j + l];
            isum += sc * sub;
            summs += m * ((int32_t)x->bsums[2 * j] + x->bsums[2 * j + 1]);
        }
        const float dall = x->d * gm_f16p(wb);
        const float dmin = x->d * gm_f16p(wb + 2);
        return dall * (float)isum - dmin * (float)summs;
    } else { /* IQ2_XXS: d, then 8 bytes per sub-block of 32 */
        const uint8_t *wb = wr + b * 66;
        const dsv4_q8_k *x = (const dsv4_q8_k *)xa + b;
        const int8_t *q8 = x->qs;
        int32_t bsum = 0;
        for (int sb = 0; sb < 8; sb++) {
            const uint32_t a0 = gm_u32(wb + 2 + 8 * sb);
            const uint32_t a1 = gm_u32(wb + 2 + 8 * sb + 4);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t g = grid[(a0 >> (8 * l)) & 0xff];
                const uint8_t sg = signs_tab[(a1 >> (7 * l)) & 127];
                for (int k = 0; k < 8; k++) {
                    const int32_t v = (int32_t)((g >> (8 * k)) & 0xff) * (int32_t)q8[k];
                    sumi += (sg >> k) & 1 ? -v : v;
                }
            }
            bsum += sumi * (int32_t)(2 * (a1 >> 28) + 1);
        }
        const float d = gm_f16p(wb) * x->d;
        return d * (float)bsum;
    }
}

#endif
