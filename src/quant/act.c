/* Activation quantization in ds4's CPU numerics (spec §2.8, attention §6.4, Q8_K §1.5).
 * lrintf rounds half to even under the default rounding mode, which ds4 relies on. */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

/* Round half to even and saturate to int8, NaN -> 0: what the GPU quantizers' cvt.rni does. A block
 * whose largest |x| is below ~3.7e-37 has a reciprocal scale of +-inf, so x * id is +-inf (or NaN for
 * 0 * inf) there; lrintf of those is unspecified (x86 gives LONG_MIN: -128 for every code), so the
 * out-of-range values are saturated before rounding instead: 127, -128 and 0, as on the GPU. */
static inline int8_t round_sat_i8(float p) {
    if (p != p) return 0;
    if (p >= 127.0f) return 127;
    if (p <= -128.0f) return -128;
    return (int8_t)lrintf(p);
}

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
        for (int i = 0; i < bn; i++) out[b].qs[i] = round_sat_i8(x[i0 + i] * id);
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
        for (int j = 0; j < DSV4_QK_K; j++) y->qs[j] = round_sat_i8(iscale * x[j]);
        for (int j = 0; j < DSV4_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[16 * j + i];
            y->bsums[j] = (int16_t)sum;
        }
        y->d = 1.0f / iscale;
    }
}
