/* EXACT numerics units (host and device): element i of a weight row dequantized exactly as
 * quant_dequant_row computes it (same float operations, same order), and the CPU backend's
 * EXACT dot (cpu_dot_exact): products and sums in double in four fixed lanes (element i of the
 * first n - n%4 goes to lane i%4, the tail to lane 0), combined as (l0+l1)+(l2+l3). A product
 * of two floats is exact in double, so the device result equals the CPU's bit for bit. Users
 * build with --fmad=false (dequantization is float arithmetic). tests/cuda/gemm_units_check.cu
 * runs these on the host against quant_dequant_row and cpu_dot_exact. */
#ifndef DSV4_CUDA_EXACT_UNITS_CUH
#define DSV4_CUDA_EXACT_UNITS_CUH

#include "backend/cuda/cuda_gemm_units.cuh"

/* Element i of row wr (of weight kind K). grid/signs: the IQ2_XXS tables. */
template <int K>
GM_HD float ex_elem(const uint8_t *wr, uint64_t i, const uint64_t *grid, const uint8_t *signs_tab) {
    if (K == GM_F32) {
        return ((const float *)wr)[i];
    } else if (K == GM_F16) {
        return gm_f16p(wr + 2 * i);
    } else if (K == GM_BF16) {
        return gm_bf16((uint16_t)(wr[2 * i] | (wr[2 * i + 1] << 8)));
    } else if (K == GM_Q8_0) {
        const uint8_t *b = wr + (i / 32) * 34;
        const float d = gm_f16p(b);
        return d * (float)(int8_t)b[2 + (i % 32)];
    } else if (K == GM_Q2_K) {
        const uint8_t *b = wr + (i / 256) * 84; /* scales[16], qs[64], d, dmin */
        const unsigned e = (unsigned)(i % 256), h = e / 128, j = (e % 128) / 32, s = (e % 32) / 16,
                       l = e % 16;
        const float d = gm_f16p(b + 80), dmin = gm_f16p(b + 82);
        const uint8_t sc = b[8 * h + 2 * j + s];
        const float dl = d * (float)(sc & 15);
        const float ml = dmin * (float)(sc >> 4);
        const uint8_t q = b[16 + 32 * h + 16 * s + l];
        return dl * (float)((q >> (2 * j)) & 3) - ml;
    } else if (K == GM_Q4_K) {
        const uint8_t *b = wr + (i / 256) * 144; /* d, dmin, scales[12], qs[128] */
        const unsigned e = (unsigned)(i % 256), c = e / 64, hi = (e % 64) / 32, l = e % 32, j = 2 * c + hi;
        const uint8_t *s = b + 4;
        int sc, m;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        const float d = gm_f16p(b), dmin = gm_f16p(b + 2);
        const float dd = d * (float)sc, mm = dmin * (float)m;
        const uint8_t q = b[16 + 32 * c + l];
        return dd * (float)(hi ? q >> 4 : q & 15) - mm;
    } else { /* IQ2_XXS: d, then 8 bytes per sub-block of 32 */
        const uint8_t *b = wr + (i / 256) * 66;
        const unsigned e = (unsigned)(i % 256), sb = e / 32, l = (e % 32) / 8, k = e % 8;
        const uint32_t a0 = gm_u32(b + 2 + 8 * sb), a1 = gm_u32(b + 2 + 8 * sb + 4);
        const float d = gm_f16p(b);
        const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
        const uint64_t g = grid[(a0 >> (8 * l)) & 0xff];
        const uint8_t sg = signs_tab[(a1 >> (7 * l)) & 127];
        const float v = db * (float)(int)((g >> (8 * k)) & 0xff);
        return (sg >> k) & 1 ? -v : v;
    }
}

/* Elements [32g, 32g + 32) of a quantized row into v: ex_elem's values, with the block header
 * decoded once per group (quantized kinds only; their rows are whole groups of 32). */
template <int K>
GM_HD void ex_group32(const uint8_t *wr, uint64_t g, const uint64_t *grid, const uint8_t *signs_tab,
                      float v[32]) {
    if (K == GM_Q8_0) {
        const uint8_t *b = wr + g * 34;
        const float d = gm_f16p(b);
        for (int k = 0; k < 32; k++) v[k] = d * (float)(int8_t)b[2 + k];
    } else if (K == GM_Q2_K) {
        const uint8_t *b = wr + (g / 8) * 84;
        const unsigned e0 = (unsigned)(g % 8) * 32, h = e0 / 128, j = (e0 % 128) / 32;
        const float d = gm_f16p(b + 80), dmin = gm_f16p(b + 82);
        for (unsigned s = 0; s < 2; s++) {
            const uint8_t sc = b[8 * h + 2 * j + s];
            const float dl = d * (float)(sc & 15);
            const float ml = dmin * (float)(sc >> 4);
            const uint8_t *q = b + 16 + 32 * h + 16 * s;
            for (int l = 0; l < 16; l++) v[16 * s + l] = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
        }
    } else if (K == GM_Q4_K) {
        const uint8_t *b = wr + (g / 8) * 144;
        const unsigned e0 = (unsigned)(g % 8) * 32, c = e0 / 64, hi = (e0 % 64) / 32, j = 2 * c + hi;
        const uint8_t *s = b + 4;
        int sc, m;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        const float d = gm_f16p(b), dmin = gm_f16p(b + 2);
        const float dd = d * (float)sc, mm = dmin * (float)m;
        const uint8_t *q = b + 16 + 32 * c;
        for (int l = 0; l < 32; l++) v[l] = dd * (float)(hi ? q[l] >> 4 : q[l] & 15) - mm;
    } else { /* IQ2_XXS: group g is sub-block g % 8 of block g / 8 */
        const uint8_t *b = wr + (g / 8) * 66;
        const unsigned sb = (unsigned)(g % 8);
        const uint32_t a0 = gm_u32(b + 2 + 8 * sb), a1 = gm_u32(b + 2 + 8 * sb + 4);
        const float d = gm_f16p(b);
        const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++) {
            const uint64_t gr = grid[(a0 >> (8 * l)) & 0xff];
            const uint8_t sg = signs_tab[(a1 >> (7 * l)) & 127];
            for (int k = 0; k < 8; k++) {
                const float e = db * (float)(int)((gr >> (8 * k)) & 0xff);
                v[8 * l + k] = (sg >> k) & 1 ? -e : e;
            }
        }
    }
}

/* cpu_dot_exact(dequant(wr), x, n). */
template <int K>
GM_HD float ex_dot(const uint8_t *wr, const float *x, uint64_t n, const uint64_t *grid,
                   const uint8_t *signs_tab) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    if (K == GM_Q8_0 || K == GM_Q2_K || K == GM_Q4_K || K == GM_IQ2_XXS) {
        /* whole groups of 32 (a multiple of 4: the lane of element 32g + k is k % 4) */
        float v[32];
        for (uint64_t g = 0; g < n / 32; g++) {
            ex_group32<K>(wr, g, grid, signs_tab, v);
            const float *xg = x + 32 * g;
            for (int k = 0; k < 32; k += 4) {
                a0 += (double)v[k] * (double)xg[k];
                a1 += (double)v[k + 1] * (double)xg[k + 1];
                a2 += (double)v[k + 2] * (double)xg[k + 2];
                a3 += (double)v[k + 3] * (double)xg[k + 3];
            }
        }
        return (float)((a0 + a1) + (a2 + a3));
    }
    const uint64_t n4 = n & ~(uint64_t)3;
    for (uint64_t i = 0; i < n4; i += 4) {
        a0 += (double)ex_elem<K>(wr, i, grid, signs_tab) * (double)x[i];
        a1 += (double)ex_elem<K>(wr, i + 1, grid, signs_tab) * (double)x[i + 1];
        a2 += (double)ex_elem<K>(wr, i + 2, grid, signs_tab) * (double)x[i + 2];
        a3 += (double)ex_elem<K>(wr, i + 3, grid, signs_tab) * (double)x[i + 3];
    }
    for (uint64_t i = n4; i < n; i++) a0 += (double)ex_elem<K>(wr, i, grid, signs_tab) * (double)x[i];
    return (float)((a0 + a1) + (a2 + a3));
}

#endif
