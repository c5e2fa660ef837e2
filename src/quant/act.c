/* Activation quantization in ds4's CPU numerics (spec §2.8, attention §6.4, Q8_K §1.5).
 * lrintf rounds half to even under the default rounding mode, which ds4 relies on. */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

static inline int8_t clamp_i8(long v) { return (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v); }

void quant_act_q8_0(const float *x, dsv4_q8_0_act *out, int64_t n) {
    const int64_t nb = (n + DSV4_QK8_0 - 1) / DSV4_QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t i0 = b * DSV4_QK8_0;
        const int bn = n - i0 < DSV4_QK8_0 ? (int)(n - i0) : DSV4_QK8_0; /* last block may be short */
        float amax = 0.0f;
        for (int i = 0; i < bn; i++) {
            const float ax = fabsf(x[i0 + i]);
            if (ax > amax) amax = ax;
        }
        const float d = amax / 127.0f; /* kept in f32, unlike ggml */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = d;
        for (int i = 0; i < bn; i++) out[b].qs[i] = clamp_i8(lrintf(x[i0 + i] * id));
        for (int i = bn; i < DSV4_QK8_0; i++) out[b].qs[i] = 0;
    }
}

void quant_act_q8_k(const float *x, dsv4_q8_k *out, int64_t n) {
    const int64_t nb = n / DSV4_QK_K;
    for (int64_t b = 0; b < nb; b++, x += DSV4_QK_K) {
        dsv4_q8_k *y = &out[b];
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < DSV4_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { /* strict: the first of tied magnitudes wins */
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(y, 0, sizeof(*y));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < DSV4_QK_K; j++) y->qs[j] = clamp_i8(lrintf(iscale * x[j]));
        for (int j = 0; j < DSV4_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[16 * j + i];
            y->bsums[j] = (int16_t)sum;
        }
        y->d = 1.0f / iscale;
    }
}
