/* Q2_K and Q4_K weight quantizers: per sub-block affine fit x ≈ s*q + m (m <= 0) found by a small
 * search over step sizes with a least-squares refit, then the sub-block scales and mins are
 * themselves quantized (4 bits for Q2_K, 6 bits for Q4_K) against per-superblock f16 d/dmin.
 * Not ggml-optimal (no importance weights), but sane. */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

/* Best (s >= 0, m <= 0) for codes q in [0, nmax] over n values, by squared error. */
static void fit_affine(const float *x, int n, int nmax, float *out_s, float *out_m) {
    float mn = 0.0f, mx = x[0];
    for (int i = 0; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    if (!(mx > mn)) { /* constant block: only possible as all zeros or all the same negative value */
        *out_s = 0.0f;
        *out_m = mn;
        return;
    }
    float best_s = (mx - mn) / (float)nmax, best_m = mn;
    double best_err = INFINITY;
    for (int step = -1; step <= 16; step++) {
        float s, m;
        if (step < 0) { /* plain min/max fit */
            s = best_s;
            m = best_m;
        } else {
            const float iscale = ((float)nmax - 1.0f + 0.1f * (float)step) / (mx - mn);
            double sq = 0, sqq = 0, sx = 0, sqx = 0;
            for (int i = 0; i < n; i++) {
                const float q = fminf((float)nmax, fmaxf(0.0f, roundf(iscale * (x[i] - mn))));
                sq += q;
                sqq += (double)q * q;
                sx += x[i];
                sqx += (double)q * x[i];
            }
            const double det = n * sqq - sq * sq;
            if (det <= 0) continue;
            double ds = (n * sqx - sq * sx) / det, dm = (sqq * sx - sq * sqx) / det;
            if (dm > 0) {
                dm = 0;
                ds = sqx / sqq;
            }
            if (ds <= 0) continue;
            s = (float)ds;
            m = (float)dm;
        }
        double err = 0;
        for (int i = 0; i < n; i++) {
            const float q = fminf((float)nmax, fmaxf(0.0f, roundf((x[i] - m) / s)));
            const double e = (double)s * q + m - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_s = s;
            best_m = m;
        }
    }
    *out_s = best_s;
    *out_m = best_m;
}

/* Quantizes per-sub-block scales s[] and mins -m[] to [0, lmax] codes with f16 superblock factors. */
static void quantize_scales(const float *s, const float *m, int nsub, int lmax, uint16_t *d16,
                            uint16_t *dmin16, uint8_t *sc, uint8_t *mc) {
    float smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < nsub; j++) {
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, -m[j]);
    }
    *d16 = dsv4_f32_to_f16(smax / (float)lmax);
    *dmin16 = dsv4_f32_to_f16(mmax / (float)lmax);
    const float d = dsv4_f16_to_f32(*d16), dmin = dsv4_f16_to_f32(*dmin16);
    for (int j = 0; j < nsub; j++) {
        sc[j] = d > 0.0f ? (uint8_t)fminf((float)lmax, fmaxf(0.0f, roundf(s[j] / d))) : 0;
        mc[j] = dmin > 0.0f ? (uint8_t)fminf((float)lmax, fmaxf(0.0f, roundf(-m[j] / dmin))) : 0;
    }
}

/* Final codes for one sub-block given its quantized scale dl and offset ml (x ≈ dl*q - ml). */
static void requant(const float *x, int n, int nmax, float dl, float ml, uint8_t *q) {
    for (int i = 0; i < n; i++) {
        q[i] = dl > 0.0f ? (uint8_t)fminf((float)nmax, fmaxf(0.0f, roundf((x[i] + ml) / dl))) : 0;
    }
}

void quant_quantize_q2_k(const float *x, void *dst, int64_t n) {
    dsv4_block_q2_k *y = dst;
    for (int64_t b = 0; b < n / DSV4_QK_K; b++, x += DSV4_QK_K) {
        float s[16], m[16];
        uint8_t sc[16], mc[16], q[DSV4_QK_K];
        for (int j = 0; j < 16; j++) fit_affine(x + 16 * j, 16, 3, &s[j], &m[j]);
        quantize_scales(s, m, 16, 15, &y[b].d, &y[b].dmin, sc, mc);
        const float d = dsv4_f16_to_f32(y[b].d), dmin = dsv4_f16_to_f32(y[b].dmin);
        for (int j = 0; j < 16; j++) {
            y[b].scales[j] = (uint8_t)(sc[j] | (mc[j] << 4));
            requant(x + 16 * j, 16, 3, d * (float)sc[j], dmin * (float)mc[j], q + 16 * j);
        }
        /* element 128h+32j+16s+l lives in qs[32h+16s+l] at bits 2j (spec §1.5) */
        memset(y[b].qs, 0, sizeof(y[b].qs));
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 32; i++)
                    y[b].qs[32 * h + i] |= (uint8_t)(q[128 * h + 32 * j + i] << (2 * j));
    }
}

void quant_quantize_q4_k(const float *x, void *dst, int64_t n) {
    dsv4_block_q4_k *y = dst;
    for (int64_t b = 0; b < n / DSV4_QK_K; b++, x += DSV4_QK_K) {
        float s[8], m[8];
        uint8_t sc[8], mc[8], q[DSV4_QK_K];
        for (int j = 0; j < 8; j++) fit_affine(x + 32 * j, 32, 15, &s[j], &m[j]);
        quantize_scales(s, m, 8, 63, &y[b].d, &y[b].dmin, sc, mc);
        const float d = dsv4_f16_to_f32(y[b].d), dmin = dsv4_f16_to_f32(y[b].dmin);
        for (int j = 0; j < 8; j++)
            requant(x + 32 * j, 32, 15, d * (float)sc[j], dmin * (float)mc[j], q + 32 * j);
        /* inverse of get_scale_min_k4 */
        for (int j = 0; j < 4; j++) {
            y[b].scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
            y[b].scales[j + 4] = (uint8_t)(mc[j] | ((mc[j + 4] >> 4) << 6));
            y[b].scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mc[j + 4] & 15) << 4));
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[b].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}
