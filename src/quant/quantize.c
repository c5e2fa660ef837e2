/* Weight quantization entry point and the Q8_0 quantizer (ggml style: f16 d = amax/127). */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

void quant_quantize_q8_0(const float *x, void *dst, int64_t n) {
    dsv4_block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / DSV4_QK8_0; b++, x += DSV4_QK8_0) {
        float amax = 0.0f;
        for (int k = 0; k < DSV4_QK8_0; k++) amax = fmaxf(amax, fabsf(x[k]));
        y[b].d = dsv4_f32_to_f16(amax / 127.0f);
        /* divide by the stored (rounded) scale so that d*q is as close to x as the codes allow */
        const float d = dsv4_f16_to_f32(y[b].d);
        for (int k = 0; k < DSV4_QK8_0; k++) {
            const float q = d > 0.0f ? roundf(x[k] / d) : 0.0f;
            y[b].qs[k] = (int8_t)fmaxf(-128.0f, fminf(127.0f, q));
        }
    }
}

bool quant_quantize_row(uint32_t type, const float *x, void *dst, int64_t n) {
    const dsv4_type_info *ti = dsv4_type_get(type);
    if (!ti || n < 0 || n % ti->block_elems != 0) return false;
    switch (type) {
    case DSV4_TYPE_F32: memmove(dst, x, (size_t)n * sizeof(float)); return true;
    case DSV4_TYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = dsv4_f32_to_f16(x[i]);
        return true;
    }
    case DSV4_TYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = dsv4_f32_to_bf16(x[i]);
        return true;
    }
    case DSV4_TYPE_Q8_0: quant_quantize_q8_0(x, dst, n); return true;
    case DSV4_TYPE_Q2_K: quant_quantize_q2_k(x, dst, n); return true;
    case DSV4_TYPE_Q4_K: quant_quantize_q4_k(x, dst, n); return true;
    case DSV4_TYPE_IQ2_XXS: quant_quantize_iq2_xxs(x, dst, n); return true;
    default: return false;
    }
}
