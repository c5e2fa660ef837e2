/* KV-path numerics (model-attention-hc.md §6.2-6.3): FP8 E4M3 and FP4 E2M1 round trips with
 * power-of-two block scales, and the scaled fast Walsh-Hadamard transform. */
#include <math.h>

#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

/* Nearest value of an unsigned minifloat with `mbits` mantissa bits and minimum normal exponent
 * `emin` (subnormals below), ties to even. Within one binade the grid is uniform with quantum
 * 2^(e-mbits), and the even grid index is the even multiple of the quantum, so rintf (ties to
 * even in the default rounding mode) gives ds4's "ties go to the even index". Scalings by powers
 * of two are exact. ax must already be clamped to the format's maximum, which is a grid value. */
static float minifloat_round(float ax, int mbits, int emin) {
    if (ax == 0.0f) return 0.0f;
    int ex;
    (void)frexpf(ax, &ex); /* ax = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1;
    if (e < emin) e = emin;
    const float q = rintf(ldexpf(ax, mbits - e));
    return ldexpf(q, e - mbits);
}

float dsv4_e4m3_round(float v) {
    const float r = minifloat_round(fminf(fabsf(v), 448.0f), 3, -6);
    return v < 0.0f ? -r : r;
}

float dsv4_e2m1_round(float v) {
    const float r = minifloat_round(fminf(fabsf(v), 6.0f), 1, 0);
    return v < 0.0f ? -r : r;
}

/* Shared block round trip: amax (floored) -> power-of-two scale -> grid -> rescale. */
static void roundtrip_blocks(float *x, int64_t n, int block, float amax_floor, float vmax,
                             float (*rnd)(float)) {
    for (int64_t off = 0; off + block <= n; off += block) {
        float amax = 0.0f;
        for (int i = 0; i < block; i++) {
            const float a = fabsf(x[off + i]);
            if (a > amax) amax = a;
        }
        if (amax < amax_floor) amax = amax_floor;
        const float scale = ldexpf(1.0f, (int)ceilf(log2f(amax / vmax)));
        for (int i = 0; i < block; i++) {
            float v = x[off + i] / scale;
            if (v > vmax) v = vmax;
            if (v < -vmax) v = -vmax;
            x[off + i] = rnd(v) * scale;
        }
    }
}

void dsv4_fp8_roundtrip_blocks64(float *x, int64_t n) {
    roundtrip_blocks(x, n, 64, 1.0e-4f, 448.0f, dsv4_e4m3_round);
}

void dsv4_fp4_roundtrip_blocks32(float *x, int64_t n) {
    roundtrip_blocks(x, n, 32, 7.052966104933725e-38f, 6.0f, dsv4_e2m1_round);
}

void dsv4_hadamard_inplace(float *x, int64_t n) {
    for (int64_t stride = 1; stride < n; stride <<= 1) {
        for (int64_t base = 0; base < n; base += 2 * stride) {
            for (int64_t i = base; i < base + stride; i++) {
                const float a = x[i], b = x[i + stride];
                x[i] = a + b;
                x[i + stride] = a - b;
            }
        }
    }
    /* for n = 128 this is 0.08838834764831845f, ds4's constant */
    const float s = (float)(1.0 / sqrt((double)n));
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static const float k_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

void dsv4_fp4_pack_row(const float *x, int64_t n, uint8_t *out) {
    for (int64_t off = 0; off + 32 <= n; off += 32, out += 17) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[off + i]));
        /* amax = f * 2^ex, f in [0.5, 1): 6 * 2^(ex-3) >= amax iff f <= 0.75, else ex-2 is the least */
        int ex = 0;
        const float f = amax > 0.0f ? frexpf(amax, &ex) : 0.0f;
        int e = f <= 0.75f ? ex - 3 : ex - 2;
        if (e < -128) e = -128;
        if (e > 127) e = 127;
        out[0] = (uint8_t)(int8_t)e;
        for (int i = 0; i < 32; i++) {
            const float v = x[off + i];
            const float m = dsv4_e2m1_round(fabsf(ldexpf(v, -e)));
            int k = 0;
            while (k < 7 && k_e2m1[k] != m) k++;
            const uint8_t code = (uint8_t)((signbit(v) ? 8 : 0) | k);
            if (i % 2 == 0)
                out[1 + i / 2] = code;
            else
                out[1 + i / 2] |= (uint8_t)(code << 4);
        }
    }
}

void dsv4_fp4_unpack_row(const uint8_t *in, int64_t n, float *out) {
    for (int64_t off = 0; off + 32 <= n; off += 32, in += 17) {
        const int e = (int8_t)in[0];
        for (int i = 0; i < 32; i++) {
            const uint8_t code = (uint8_t)(i % 2 ? in[1 + i / 2] >> 4 : in[1 + i / 2] & 15u);
            const float m = ldexpf(k_e2m1[code & 7u], e);
            out[off + i] = dsv4_f16_round(code & 8u ? -m : m);
        }
    }
}
