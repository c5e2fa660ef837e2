/* Host check of the cuBLAS prefill products' operand units (src/backend/cuda/cuda_gemm_blas.cuh):
 *   1. the Q8_0 activation value xb_act_q8_0 is quant_act_q8_0's q times d, bit for bit (random
 *      rows, a zero block, a block with one huge value);
 *   2. the row exponent: 0 up to XB_XMAX, then the smallest e with amax * 2^-e <= XB_XMAX; the
 *      scaled row's largest Q8_0 value stays a finite f16;
 *   3. the weight bound: with |d| <= 511.75 (half bits 0x5FFF) every q * d is a finite f16, and
 *      the next half (512) overflows at q = -128, so the bound is the exact one;
 *   4. the numerics the path claims: a float64 sum of the f16 operands (what the tensor cores sum,
 *      up to f32 accumulation) against the CPU's quant_dot_q8_0 / f16 dot, for rows in the normal
 *      range and rows scaled by 2^e: max |d| / max |ref| <= 2e-3; and with the two-term operands
 *      (three products for Q8_0, two for F16) against float64 of the exact operands (the CPU's
 *      weight values and activation values): <= 1e-6 per token, where one term per side gives
 *      more than 1e-5, also for weights whose block scales sit far below 1;
 *   5. the weight exponent Sw (xb_w_exp) is the largest with 128 * dmax * 2^Sw <= 2^15, and for
 *      every finite block scale up to 511.75 and every q, hi + lo * 2^-11 is q * d * 2^Sw exactly.
 * Needs no GPU (exit 0 = pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_blas.cuh"
extern "C" {
#include "quant/quant.h"
}

#define CHECK_RNG_SEED 9090
#include "check_rng.h"

static int fails = 0;
static void expect(bool ok, const char *what) {
    if (!ok) {
        printf("FAIL %s\n", what);
        fails++;
    }
}

/* The operand the path gives x (row of in floats): f16 of the (scaled) Q8_0 value or of x. */
static void act_operands(const float *x, int in, bool q8, float *out, int *e_out) {
    float am = 0;
    for (int i = 0; i < in; i++) am = fmaxf(am, fabsf(x[i]));
    const int e = xb_row_exp(am);
    const float s = xb_pow2(-e);
    for (int b = 0; b < in / 32; b++) {
        float bm = 0;
        for (int i = 0; i < 32; i++) bm = fmaxf(bm, fabsf(x[32 * b + i]));
        const float d = act_q8_0_d(bm), id = act_q8_0_id(d);
        for (int i = 0; i < 32; i++) {
            const float v = x[32 * b + i];
            out[32 * b + i] = dsv4_f16_round(q8 ? xb_act_q8_0(v, d, id, s) : xb_mul(v, s));
        }
    }
    *e_out = e;
}

static void check_act_values(void) {
    enum { N = 4096 };
    static float x[N];
    static dsv4_q8_0_act q[N / 32];
    for (int i = 0; i < N; i++) x[i] = uni() * (i % 97 == 0 ? 50.0f : 1.0f);
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block */
    x[200] = 3.0e5f;                           /* one block dominated by a huge value */
    quant_act_q8_0(x, q, N);
    size_t differ = 0;
    for (int b = 0; b < N / 32; b++) {
        float bm = 0;
        for (int i = 0; i < 32; i++) bm = fmaxf(bm, fabsf(x[32 * b + i]));
        const float d = act_q8_0_d(bm), id = act_q8_0_id(d);
        expect(memcmp(&d, &q[b].d, 4) == 0, "act: block scale is quant_act_q8_0's d");
        for (int i = 0; i < 32; i++) {
            const float got = xb_act_q8_0(x[32 * b + i], d, id, 1.0f), want = (float)q[b].qs[i] * q[b].d;
            differ += memcmp(&got, &want, 4) != 0;
        }
    }
    printf("act values: %zu of %d differ from quant_act_q8_0's q * d\n", differ, N);
    expect(differ == 0, "act values bitwise");
}

static void check_row_exp(void) {
    expect(xb_row_exp(0.0f) == 0 && xb_row_exp(XB_XMAX) == 0, "row exp 0 up to XB_XMAX");
    const float probes[] = {61441.0f, 65504.0f, 1.0e5f, 3.3e6f, 1.0e20f, 3.0e38f};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        const int e = xb_row_exp(probes[i]);
        const double sc = (double)probes[i] * ldexp(1.0, -e);
        expect(e >= 1 && sc <= XB_XMAX && sc * 2 > XB_XMAX, "row exp is the smallest that fits");
        /* the largest Q8_0 value of such a row, scaled, is a finite f16 */
        const float d = act_q8_0_d(probes[i]), id = act_q8_0_id(d);
        const float v = xb_act_q8_0(probes[i], d, id, xb_pow2(-e));
        expect(isfinite(dsv4_f16_round(v)), "scaled row max stays a finite f16");
    }
    expect(xb_row_exp(INFINITY) == 0 && xb_row_exp(NAN) == 0, "non-finite rows are not scaled");
    printf("row exponents: checked\n");
}

static void check_weight_bound(void) {
    const float dmax = dsv4_f16_to_f32(XB_D_SAFE_BITS);
    expect(dmax == 511.75f, "0x5FFF is 511.75");
    expect(isfinite(dsv4_f16_round(-128.0f * dmax)) && isfinite(dsv4_f16_round(127.0f * dmax)),
           "q * 511.75 is a finite f16");
    const float next = dsv4_f16_to_f32(XB_D_SAFE_BITS + 1);
    expect(!isfinite(dsv4_f16_round(-128.0f * next)), "q * 512 overflows: the bound is tight");
    expect(xb_d_bits_safe(XB_D_SAFE_BITS) && !xb_d_bits_safe(XB_D_SAFE_BITS + 1) && !xb_d_bits_safe(0x7c00),
           "xb_d_bits_safe");
    printf("weight bound: checked\n");
}

/* float64 sum of the f16 operands vs the CPU dot, rows x tokens */
static void check_numerics(bool q8, float xscale, const char *tag) {
    enum { IN = 1024, ROWS = 24, TOK = 6 };
    static float wf[ROWS][IN], x[TOK][IN], xo[TOK][IN], wo[ROWS][IN];
    static uint8_t wq[ROWS][IN / 32 * 34];
    static uint16_t wh[ROWS][IN];
    static dsv4_q8_0_act xq[IN / 32];
    int e[TOK];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < IN; i++) wf[r][i] = uni() * 0.05f;
        if (q8) {
            quant_quantize_q8_0(wf[r], wq[r], IN);
            const dsv4_block_q8_0 *b = (const dsv4_block_q8_0 *)wq[r];
            for (int i = 0; i < IN; i++)
                wo[r][i] = dsv4_f16_round((float)b[i / 32].qs[i % 32] * dsv4_f16_to_f32(b[i / 32].d));
        } else {
            for (int i = 0; i < IN; i++)
                wh[r][i] = dsv4_f32_to_f16(wf[r][i]), wo[r][i] = dsv4_f16_to_f32(wh[r][i]);
        }
    }
    for (int t = 0; t < TOK; t++) {
        for (int i = 0; i < IN; i++) x[t][i] = uni() * xscale;
        act_operands(x[t], IN, q8, xo[t], &e[t]);
    }
    double dmax = 0, rmax = 0;
    for (int t = 0; t < TOK; t++) {
        if (q8) quant_act_q8_0(x[t], xq, IN);
        for (int r = 0; r < ROWS; r++) {
            double s = 0;
            for (int i = 0; i < IN; i++) s += (double)wo[r][i] * (double)xo[t][i];
            const double got = (double)(float)s * ldexp(1.0, e[t]);
            const double ref = q8 ? quant_dot_q8_0(wq[r], xq, IN) : quant_dot_f16(wh[r], x[t], IN);
            dmax = fmax(dmax, fabs(got - ref));
            rmax = fmax(rmax, fabs(ref));
        }
    }
    const double rel = rmax > 0 ? dmax / rmax : dmax;
    printf("numerics %-24s e = %d: rel to the cpu %.3e (<= 2e-3)\n", tag, e[0], rel);
    expect(rel <= 2e-3 && isfinite(rel), tag);
}

/* Every half d <= 511.75 and q: the two terms of a = q * d * 2^Sw sum to a exactly; Sw is tight. */
static void check_weight_terms(void) {
    size_t bad = 0, bad_exp = 0;
    for (uint32_t bits = 0; bits <= XB_D_SAFE_BITS; bits++) {
        const int sw = xb_w_exp(bits);
        const double dmax = dsv4_f16_to_f32((uint16_t)bits);
        if (bits && (128.0 * dmax * ldexp(1.0, sw) > 32768.0 || 128.0 * dmax * ldexp(1.0, sw + 1) <= 32768.0))
            bad_exp++;
        /* the tensor's own blocks have d <= dmax: test d = dmax and d = dmax / 2^20 */
        for (int shift = 0; shift <= 20; shift += 20) {
            const float d = (float)ldexp(dmax, -shift);
            if (d != dsv4_f16_round(d)) continue; /* not a half */
            for (int q = -128; q <= 127; q++) {
                const float a = (float)q * d * xb_pow2(sw);
                const float hi = dsv4_f16_round(a), lo = dsv4_f16_round(xb_lo_operand(a, hi));
                bad += (double)hi + (double)lo * ldexp(1.0, -XB_LO_SHIFT) != (double)a || !isfinite(hi);
            }
        }
    }
    printf("weight terms: %zu inexact sums, %zu loose exponents over %u block scales\n", bad, bad_exp,
           (unsigned)XB_D_SAFE_BITS + 1);
    expect(bad == 0, "hi + lo * 2^-11 == q * d * 2^Sw");
    expect(bad_exp == 0, "Sw is the largest with 128 dmax 2^Sw <= 2^15");
}

/* The two-term products against float64 of the exact operands, per token, and one term per side
 * against the same reference (which must miss it: otherwise the check could not tell them apart). */
static void check_terms(bool q8, float wscale, const char *tag) {
    enum { IN = 2048, ROWS = 16, TOK = 6 };
    static float wv[ROWS][IN], xv[TOK][IN], x[TOK][IN];
    static uint8_t wq[ROWS][IN / 32 * 34];
    static dsv4_q8_0_act xq[IN / 32];
    uint32_t dmax_bits = 0;
    for (int r = 0; r < ROWS; r++) {
        float wf[IN];
        for (int i = 0; i < IN; i++) wf[i] = uni() * wscale * (i % 64 < 32 ? 1.0f : 0.01f);
        if (q8) {
            quant_quantize_q8_0(wf, wq[r], IN);
            const dsv4_block_q8_0 *b = (const dsv4_block_q8_0 *)wq[r];
            for (int i = 0; i < IN; i++) {
                wv[r][i] = (float)b[i / 32].qs[i % 32] * dsv4_f16_to_f32(b[i / 32].d);
                dmax_bits = (b[i / 32].d & 0x7fffu) > dmax_bits ? (b[i / 32].d & 0x7fffu) : dmax_bits;
            }
        } else {
            for (int i = 0; i < IN; i++) wv[r][i] = dsv4_f16_round(wf[i]);
        }
    }
    const int sw = q8 ? xb_w_exp(dmax_bits) : 0;
    const float s2 = xb_pow2(sw);
    for (int t = 0; t < TOK; t++) {
        for (int i = 0; i < IN; i++) x[t][i] = uni() * (t == 2 ? 1e-3f : 1.0f); /* one row of small values */
        if (q8) {
            quant_act_q8_0(x[t], xq, IN);
            for (int i = 0; i < IN; i++) xv[t][i] = (float)xq[i / 32].qs[i % 32] * xq[i / 32].d;
        } else {
            memcpy(xv[t], x[t], sizeof xv[t]);
        }
    }
    double worst2 = 0, worst1 = 1e30;
    for (int t = 0; t < TOK; t++) {
        float am = 0;
        for (int i = 0; i < IN; i++) am = fmaxf(am, fabsf(xv[t][i]));
        const float sx = xb_pow2(-xb_row_exp(am)); /* 1 here: no row over XB_XMAX */
        double dif2 = 0, dif1 = 0, rmax = 0;
        for (int r = 0; r < ROWS; r++) {
            double ref = 0, two = 0, one = 0;
            for (int i = 0; i < IN; i++) {
                ref += (double)wv[r][i] * (double)xv[t][i];
                const float a = q8 ? wv[r][i] * s2 : wv[r][i], wh = dsv4_f16_round(a),
                            wl = q8 ? dsv4_f16_round(xb_lo_operand(a, wh)) : 0.0f;
                const float xr = xb_mul(xv[t][i], sx), xh = dsv4_f16_round(xr),
                            xl = dsv4_f16_round(xb_lo_operand(xr, xh));
                two += (double)wh * xh + ((double)wh * xl + (double)wl * xh) * ldexp(1.0, -XB_LO_SHIFT);
                one += (double)wh * xh;
            }
            const double k = ldexp(1.0, -sw) / sx;
            two = (double)(float)(two * k), one = (double)(float)(one * k);
            dif2 = fmax(dif2, fabs(two - ref)), dif1 = fmax(dif1, fabs(one - ref)),
            rmax = fmax(rmax, fabs(ref));
        }
        worst2 = fmax(worst2, dif2 / rmax), worst1 = fmin(worst1, dif1 / rmax);
    }
    printf("terms %-26s Sw = %d: two terms %.3e (<= 1e-6), one term %.3e (> 1e-5), worst token\n", tag, sw,
           worst2, worst1);
    expect(worst2 <= 1e-6, tag);
    expect(worst1 > 1e-5, "one term per side misses the bound");
}

int main(void) {
    check_act_values();
    check_row_exp();
    check_weight_bound();
    check_numerics(true, 1.0f, "q8_0");
    check_numerics(true, 2.0e5f, "q8_0 scaled rows");
    check_numerics(false, 1.0f, "f16");
    check_numerics(false, 1.0e6f, "f16 scaled rows");
    check_weight_terms();
    check_terms(true, 0.05f, "q8_0");
    check_terms(true, 2.0e-5f, "q8_0 small block scales");
    check_terms(false, 0.05f, "f16");
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
