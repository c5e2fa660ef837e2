/* Scalar reference dot products. The SIMD kernels reproduce these bit for bit: every inner sum
 * is an exact int32, and the float operations below are the only roundings, in this order. */
#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

/* Q8_0 x Q8_0act (ds4 dot_q8_0_row): acc = acc + (f16(d_w) * d_x) * (float)isum, blocks in order. */
float quant_dot_q8_0_scalar(const void *wrow, const dsv4_q8_0_act *x, int64_t n) {
    const dsv4_block_q8_0 *w = wrow;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / DSV4_QK8_0; b++) {
        int32_t isum = 0;
        for (int k = 0; k < DSV4_QK8_0; k++) isum += (int32_t)w[b].qs[k] * (int32_t)x[b].qs[k];
        acc += (dsv4_f16_to_f32(w[b].d) * x[b].d) * (float)isum;
    }
    return acc;
}

/* Q2_K x Q8_K (ds4 ds4_vec_dot_q2_K_q8_K, scalar branch), per superblock in order:
 *   isum  = Σ_sub (sc&15) * Σ q2*q8          summs = Σ_j bsums[j] * (sc_j>>4)   (exact ints)
 *   dall  = d_y * f16(d)                      dmin  = d_y * f16(dmin)
 *   acc   = acc + (dall*(float)isum - dmin*(float)summs) */
float quant_dot_q2_k_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_q2_k *w = wrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        const int8_t *q8 = x[i].qs;
        int32_t summs = 0;
        for (int j = 0; j < 16; j++) summs += (int32_t)x[i].bsums[j] * (sc[j] >> 4);
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *q2 = w[i].qs + 32 * h;
            for (int j = 0; j < 4; j++) {
                for (int s = 0; s < 2; s++) {
                    int32_t sub = 0;
                    for (int l = 0; l < 16; l++) sub += ((q2[16 * s + l] >> (2 * j)) & 3) * (int32_t)q8[l];
                    isum += (sc[8 * h + 2 * j + s] & 15) * sub;
                    q8 += 16;
                }
            }
        }
        const float dall = x[i].d * dsv4_f16_to_f32(w[i].d);
        const float dmin = x[i].d * dsv4_f16_to_f32(w[i].dmin);
        acc += dall * (float)isum - dmin * (float)summs;
    }
    return acc;
}

/* IQ2_XXS x Q8_K (ds4 ds4_vec_dot_iq2_xxs_q8_K, scalar branch), per superblock in order:
 *   bsum = Σ_sub (2*(a1>>28)+1) * Σ signed_grid*q8   (exact int)
 *   acc  = acc + (f16(d) * d_y) * (float)bsum;   result = 0.125f * acc */
float quant_dot_iq2_xxs_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_iq2_xxs *w = wrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int sb = 0; sb < 8; sb++) {
            const uint32_t a0 = quant_load_u32(w[i].qs + 4 * sb);
            const uint32_t a1 = quant_load_u32(w[i].qs + 4 * sb + 2);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint32_t g = (a0 >> (8 * l)) & 0xff;
                const uint8_t signs = dsv4_ksigns_iq2xs[(a1 >> (7 * l)) & 127];
                for (int k = 0; k < 8; k++) {
                    const int32_t v = quant_iq2_grid_elem(g, k) * (int32_t)q8[k];
                    sumi += (signs >> k) & 1 ? -v : v;
                }
            }
            bsum += sumi * (int32_t)(2 * (a1 >> 28) + 1);
        }
        const float d = dsv4_f16_to_f32(w[i].d) * x[i].d;
        acc += d * (float)bsum;
    }
    return 0.125f * acc;
}

/* Q4_K x Q8_K (ggml formula), per superblock in order:
 *   isum  = Σ_j sc_j * Σ q4*q8               summs = Σ_j m_j * (bsums[2j] + bsums[2j+1])  (exact ints)
 *   dall  = d_y * f16(d)                      dmin  = d_y * f16(dmin)
 *   acc   = acc + (dall*(float)isum - dmin*(float)summs) */
float quant_dot_q4_k_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_q4_k *w = wrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        int32_t isum = 0, summs = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4k_scale_min(j, w[i].scales, &sc, &m);
            const uint8_t *q4 = w[i].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            int32_t sub = 0;
            for (int l = 0; l < 32; l++) sub += ((q4[l] >> shift) & 15) * (int32_t)q8[32 * j + l];
            isum += sc * sub;
            summs += m * ((int32_t)x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        const float dall = x[i].d * dsv4_f16_to_f32(w[i].d);
        const float dmin = x[i].d * dsv4_f16_to_f32(w[i].dmin);
        acc += dall * (float)isum - dmin * (float)summs;
    }
    return acc;
}

/* F16/BF16 x f32: lane order and combination tree as quant_combine_lanes8 (quant_internal.h). */
float quant_dot_f16_scalar(const uint16_t *wrow, const float *x, int64_t n) {
    float lane[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float p = dsv4_f16_to_f32(wrow[i]) * x[i];
        lane[i & 7] += p;
    }
    return quant_combine_lanes8(lane);
}

float quant_dot_bf16(const uint16_t *wrow, const float *x, int64_t n) {
    float lane[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float p = dsv4_bf16_to_f32(wrow[i]) * x[i];
        lane[i & 7] += p;
    }
    return quant_combine_lanes8(lane);
}

/* F32 x f32: products and sum in double, sequential (ds4 F32 weights accumulate in double). */
float quant_dot_f32(const float *wrow, const float *x, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)wrow[i] * (double)x[i];
    return (float)acc;
}
