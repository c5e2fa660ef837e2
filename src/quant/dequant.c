/* Row dequantization (spec model-moe-gguf-tokenizer.md §1.5). Element values are computed as
 * d*sc*q - dmin*m with separate roundings (no FMA), matching the reference formulas. */
#include <string.h>

#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

static void dequant_q8_0(const dsv4_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += DSV4_QK8_0) {
        const float d = dsv4_f16_to_f32(b[i].d);
        for (int k = 0; k < DSV4_QK8_0; k++) y[k] = d * (float)b[i].qs[k];
    }
}

static void dequant_q2_k(const dsv4_block_q2_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += DSV4_QK_K) {
        const float d = dsv4_f16_to_f32(b[i].d);
        const float dmin = dsv4_f16_to_f32(b[i].dmin);
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                for (int s = 0; s < 2; s++) {
                    const uint8_t sc = b[i].scales[8 * h + 2 * j + s];
                    const float dl = d * (float)(sc & 15);
                    const float ml = dmin * (float)(sc >> 4);
                    const uint8_t *q = b[i].qs + 32 * h + 16 * s;
                    float *out = y + 128 * h + 32 * j + 16 * s;
                    for (int l = 0; l < 16; l++) out[l] = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
                }
            }
        }
    }
}

static void dequant_q4_k(const dsv4_block_q4_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += DSV4_QK_K) {
        const float d = dsv4_f16_to_f32(b[i].d);
        const float dmin = dsv4_f16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            quant_q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            quant_q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            const uint8_t *q = b[i].qs + 32 * c;
            for (int l = 0; l < 32; l++) {
                y[64 * c + l] = d0 * (float)(q[l] & 15) - mm0;
                y[64 * c + 32 + l] = d1 * (float)(q[l] >> 4) - mm1;
            }
        }
    }
}

static void dequant_iq2_xxs(const dsv4_block_iq2_xxs *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = dsv4_f16_to_f32(b[i].d);
        for (int sb = 0; sb < 8; sb++, y += 32) {
            const uint32_t a0 = quant_load_u32(b[i].qs + 4 * sb);
            const uint32_t a1 = quant_load_u32(b[i].qs + 4 * sb + 2);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint32_t g = (a0 >> (8 * l)) & 0xff;
                const uint8_t signs = dsv4_ksigns_iq2xs[(a1 >> (7 * l)) & 127];
                for (int k = 0; k < 8; k++) {
                    const float v = db * (float)quant_iq2_grid_elem(g, k);
                    y[8 * l + k] = (signs >> k) & 1 ? -v : v;
                }
            }
        }
    }
}

bool quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const dsv4_type_info *ti = dsv4_type_get(type);
    if (!ti || !ti->decodable || n < 0 || n % ti->block_elems != 0) return false;
    const int64_t nb = n / ti->block_elems;
    switch (type) {
    case DSV4_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); return true;
    case DSV4_TYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = dsv4_f16_to_f32(h[i]);
        return true;
    }
    case DSV4_TYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = dsv4_bf16_to_f32(h[i]);
        return true;
    }
    case DSV4_TYPE_I32: {
        const int32_t *v = src;
        for (int64_t i = 0; i < n; i++) dst[i] = (float)v[i];
        return true;
    }
    case DSV4_TYPE_Q8_0: dequant_q8_0(src, dst, nb); return true;
    case DSV4_TYPE_Q2_K: dequant_q2_k(src, dst, nb); return true;
    case DSV4_TYPE_Q4_K: dequant_q4_k(src, dst, nb); return true;
    case DSV4_TYPE_IQ2_XXS: dequant_iq2_xxs(src, dst, nb); return true;
    default: return false;
    }
}
