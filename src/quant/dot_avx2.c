/* AVX2 dot kernels, bitwise equal to dot_scalar.c: the vector code only computes the exact
 * integer sums (products widened to 16/32 bits or paired u8*s8 where that cannot saturate),
 * and the float combination is the scalar code's, in the same order; block scales convert with
 * F16C, fixed up to equal dsv4_f16_to_f32 for every pattern. The multi-activation kernels
 * (quant_dot_*_x) share one weight row's loads and decoding between up to QUANT_DOT_X
 * activations, each with its own accumulator. The target has no "fma", so no fused
 * multiply-add can appear whatever the compiler's contraction setting. */
#include "quant/quant_internal.h"

DSV4_NO_FP_CONTRACT

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,f16c")))

int quant_avx2_compiled(void) { return 1; }

AVX2_FN static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#define QUANT_DOT_X 8 /* activations per kernel instance */
#define AVX2_INLINE AVX2_FN static inline __attribute__((always_inline))
/* full unrolling turns per-step shift counts and shuffle controls into constants */
#define DSV4_PRAGMA(x) _Pragma(#x)
#define UNROLL(n) DSV4_PRAGMA(GCC unroll n)

/* Exact f16 -> f32 of the 4 halves in the low 64 bits of h (same bits as dsv4_f16_to_f32 for
 * every input): F16C is exact except that it sets the quiet bit of a signalling NaN, which is
 * cleared again here. */
AVX2_INLINE __m128 f16x4_exact(__m128i h) {
    const __m128 f = _mm_cvtph_ps(h);
    const __m128i h32 = _mm_cvtepu16_epi32(h);
    const __m128i exp_snan =
        _mm_cmpeq_epi32(_mm_and_si128(h32, _mm_set1_epi32(0x7e00)), _mm_set1_epi32(0x7c00));
    const __m128i no_mant = _mm_cmpeq_epi32(_mm_and_si128(h32, _mm_set1_epi32(0x3ff)), _mm_setzero_si128());
    const __m128i snan = _mm_andnot_si128(no_mant, exp_snan);
    return _mm_castsi128_ps(
        _mm_andnot_si128(_mm_and_si128(snan, _mm_set1_epi32(0x00400000)), _mm_castps_si128(f)));
}

AVX2_INLINE float f16_exact(uint16_t h) { return _mm_cvtss_f32(f16x4_exact(_mm_cvtsi32_si128(h))); }

/* Non-inline copy of f16_exact for the exhaustive test. */
AVX2_FN float quant_f16_to_f32_avx2(uint16_t h) { return f16_exact(h); }

/* Weight rows stream from memory once per token; the hardware prefetcher alone left decode at
 * ~5 GB/s of the ~12 GB/s one core can read, so each step also requests the bytes it will
 * reach ~4 KB later (a hint: addresses past the tensor are harmless and never dereferenced). */
#ifndef DSV4_PREFETCH_BYTES
#define DSV4_PREFETCH_BYTES 4096
#endif
AVX2_INLINE void prefetch_ahead(const void *p, int bytes) {
    const uintptr_t a = (uintptr_t)p + DSV4_PREFETCH_BYTES;
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(a + (uintptr_t)o), _MM_HINT_T0);
}

/* The 4 totals of 4 vectors of 8 int32 (exact integer adds, any order). */
AVX2_INLINE __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

/* Σ w*x over 32 bytes: w already widened to 16 bits (lo/hi halves), x widened here, so that
 * -128*-128 is exact. */
AVX2_INLINE __m256i q8_block_dot(__m256i wlo, __m256i whi, const int8_t *xq) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    const __m256i x0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x));
    const __m256i x1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1));
    return _mm256_add_epi32(_mm256_madd_epi16(wlo, x0), _mm256_madd_epi16(whi, x1));
}

/* Σ w*x of one block via u8*s8 pairs: |w| * (x*sign(w)). Exact when no x byte is -128: then
 * x*sign(w) does not wrap and |pair| <= 2*128*127 < 2^15, so maddubs never saturates. */
AVX2_INLINE __m256i q8_block_dot_fast(__m256i wabs, __m256i wq, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(x, wq)), _mm256_set1_epi16(1));
}

/* One Q8_0 weight row against NX (1..QUANT_DOT_X, a constant after inlining) activations. Each activation
 * keeps its own accumulator and the scalar order acc += (d_w*d_x)*isum, block by block; blocks
 * are handled 4 at a time only so that one horizontal reduction serves 4 integer sums. Groups
 * whose activation bytes include -128 take the widening path (exact for every input). */
AVX2_INLINE void q8_0_rows(const dsv4_block_q8_0 *w, const dsv4_q8_0_act *const *x, const int NX, int64_t nb,
                           float *out) {
    const __m256i m128 = _mm256_set1_epi8(-128);
    float acc[QUANT_DOT_X] = {0.0f};
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        prefetch_ahead(w + b, 136);
        __m256i wq[4], wabs[4];
        for (int k = 0; k < 4; k++) {
            wq[k] = _mm256_loadu_si256((const __m256i *)w[b + k].qs);
            wabs[k] = _mm256_abs_epi8(wq[k]);
        }
        const __m128 dw = f16x4_exact(_mm_setr_epi16((short)w[b].d, (short)w[b + 1].d, (short)w[b + 2].d,
                                                     (short)w[b + 3].d, 0, 0, 0, 0));
        for (int i = 0; i < NX; i++) {
            const dsv4_q8_0_act *xb = x[i] + b;
            __m256i xq[4], p[4];
            for (int k = 0; k < 4; k++) xq[k] = _mm256_loadu_si256((const __m256i *)xb[k].qs);
            const __m256i mn = _mm256_min_epi8(_mm256_min_epi8(xq[0], xq[1]), _mm256_min_epi8(xq[2], xq[3]));
            if (__builtin_expect(_mm256_testz_si256(_mm256_cmpeq_epi8(mn, m128), m128), 1)) {
                for (int k = 0; k < 4; k++) p[k] = q8_block_dot_fast(wabs[k], wq[k], xq[k]);
            } else {
                for (int k = 0; k < 4; k++)
                    p[k] = q8_block_dot(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(wq[k])),
                                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256(wq[k], 1)), xb[k].qs);
            }
            const __m128i isum = hsum4_i32(p[0], p[1], p[2], p[3]);
            const __m128 dx = _mm_setr_ps(xb[0].d, xb[1].d, xb[2].d, xb[3].d);
            float pr[4];
            _mm_storeu_ps(pr, _mm_mul_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(isum)));
            acc[i] = (((acc[i] + pr[0]) + pr[1]) + pr[2]) + pr[3];
        }
    }
    for (; b < nb; b++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)w[b].qs);
        const __m256i wlo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
        const __m256i whi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
        const float dw = f16_exact(w[b].d);
        for (int i = 0; i < NX; i++) {
            const int32_t isum = hsum_i32(q8_block_dot(wlo, whi, x[i][b].qs));
            acc[i] += (dw * x[i][b].d) * (float)isum;
        }
    }
    for (int i = 0; i < NX; i++) out[i] = acc[i];
}

/* Q2_K: the 2-bit codes and the scale vectors are decoded once per superblock and shared by
 * the NX activations; each keeps the scalar per-superblock float expression. */
AVX2_INLINE void q2_k_rows(const dsv4_block_q2_k *w, const dsv4_q8_k *const *x, const int NX, int64_t nb,
                           float *out) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(15);
    float acc[QUANT_DOT_X] = {0.0f};
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(w + i, (int)sizeof(*w));
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        /* both lanes hold the 16 low-nibble scales; pair m takes scale 2m (low lane), 2m+1 (high) */
        const __m256i scb = _mm256_broadcastsi128_si256(_mm_and_si128(sc8, m4));
        __m256i vsum[QUANT_DOT_X], vmin[QUANT_DOT_X];
        for (int t = 0; t < NX; t++) {
            vsum[t] = _mm256_setzero_si256();
            vmin[t] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[t][i].bsums), mins16);
        }
        UNROLL(2) for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            UNROLL(4) for (int j = 0; j < 4; j++) {
                const int m = 4 * h + j;
                const __m256i ctl = _mm256_set_m128i(_mm_set1_epi16((short)(0x8000 | (2 * m + 1))),
                                                     _mm_set1_epi16((short)(0x8000 | (2 * m))));
                const __m256i scv = _mm256_shuffle_epi8(scb, ctl);
                /* bytes 0..15 are sub-block s=0 (low 128-bit lane), 16..31 are s=1 */
                const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
                for (int t = 0; t < NX; t++) {
                    const __m256i q8 = _mm256_loadu_si256((const __m256i *)(x[t][i].qs + 128 * h + 32 * j));
                    vsum[t] = _mm256_add_epi32(vsum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q2, q8), scv));
                }
            }
        }
        const float wd = f16_exact(w[i].d), wm = f16_exact(w[i].dmin);
        for (int t = 0; t < NX; t++) {
            const int32_t isum = hsum_i32(vsum[t]), summs = hsum_i32(vmin[t]);
            const float dall = x[t][i].d * wd;
            const float dmin = x[t][i].d * wm;
            acc[t] += dall * (float)isum - dmin * (float)summs;
        }
    }
    for (int t = 0; t < NX; t++) out[t] = acc[t];
}

AVX2_INLINE void q4_k_rows(const dsv4_block_q4_k *w, const dsv4_q8_k *const *x, const int NX, int64_t nb,
                           float *out) {
    const __m256i m4 = _mm256_set1_epi8(15);
    float acc[QUANT_DOT_X] = {0.0f};
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(w + i, (int)sizeof(*w));
        int32_t summs[QUANT_DOT_X] = {0};
        __m256i vsum[QUANT_DOT_X];
        for (int t = 0; t < NX; t++) vsum[t] = _mm256_setzero_si256();
        UNROLL(4) for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            quant_q4k_scale_min(2 * c, w[i].scales, &sc0, &m0);
            quant_q4k_scale_min(2 * c + 1, w[i].scales, &sc1, &m1);
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i s0 = _mm256_set1_epi16(sc0), s1 = _mm256_set1_epi16(sc1);
            for (int t = 0; t < NX; t++) {
                const int16_t *bs = x[t][i].bsums;
                const int8_t *q8 = x[t][i].qs + 64 * c;
                summs[t] += m0 * ((int32_t)bs[4 * c] + bs[4 * c + 1]);
                summs[t] += m1 * ((int32_t)bs[4 * c + 2] + bs[4 * c + 3]);
                const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
                const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
                vsum[t] = _mm256_add_epi32(vsum[t], _mm256_madd_epi16(plo, s0));
                vsum[t] = _mm256_add_epi32(vsum[t], _mm256_madd_epi16(phi, s1));
            }
        }
        const float wd = f16_exact(w[i].d), wm = f16_exact(w[i].dmin);
        for (int t = 0; t < NX; t++) {
            const int32_t isum = hsum_i32(vsum[t]);
            const float dall = x[t][i].d * wd;
            const float dmin = x[t][i].d * wm;
            acc[t] += dall * (float)isum - dmin * (float)summs[t];
        }
    }
    for (int t = 0; t < NX; t++) out[t] = acc[t];
}

/* IQ2_XXS: grid and signs decoded once per 32 values and shared by the NX activations. With
 * g = |grid| (8, 25 or 43) and N the bytes to negate, Σ ±g*q = Σ g*q - 2 Σ_N g*q, each as
 * pairwise u8*s8 products (|pair| <= 2*43*128, no int16 saturation); the sub-block scale
 * 2*(a1>>28)+1 <= 31 then multiplies in madd. All sums are the scalar kernel's exact ints. */
AVX2_INLINE void iq2_xxs_rows(const dsv4_block_iq2_xxs *w, const dsv4_q8_k *const *x, const int NX,
                              int64_t nb, float *out) {
    /* byte k of each 8-byte group tests sign bit k */
    const __m256i bitmask = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                            2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    float acc[QUANT_DOT_X] = {0.0f};
    for (int64_t i = 0; i < nb; i++) {
        prefetch_ahead(w + i, (int)sizeof(*w) + 63);
        __m256i vsum[QUANT_DOT_X];
        for (int t = 0; t < NX; t++) vsum[t] = _mm256_setzero_si256();
        UNROLL(8) for (int sb = 0; sb < 8; sb++) {
            const uint32_t a0 = quant_load_u32(w[i].qs + 4 * sb);
            const uint32_t a1 = quant_load_u32(w[i].qs + 4 * sb + 2);
            const __m256i grid = _mm256_setr_epi64x(
                (long long)dsv4_iq2xxs_grid[a0 & 0xff], (long long)dsv4_iq2xxs_grid[(a0 >> 8) & 0xff],
                (long long)dsv4_iq2xxs_grid[(a0 >> 16) & 0xff], (long long)dsv4_iq2xxs_grid[a0 >> 24]);
            const uint32_t s4 = (uint32_t)dsv4_ksigns_iq2xs[a1 & 127] |
                                (uint32_t)dsv4_ksigns_iq2xs[(a1 >> 7) & 127] << 8 |
                                (uint32_t)dsv4_ksigns_iq2xs[(a1 >> 14) & 127] << 16 |
                                (uint32_t)dsv4_ksigns_iq2xs[(a1 >> 21) & 127] << 24;
            /* both 128-bit lanes hold s4; the shuffle gives group l's sign byte to bytes 8l..8l+7 */
            const __m256i sv = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4), spread);
            const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(sv, bitmask), bitmask);
            const __m256i gneg = _mm256_and_si256(grid, neg);
            const __m256i scale = _mm256_set1_epi16((short)(2 * (a1 >> 28) + 1));
            for (int t = 0; t < NX; t++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(x[t][i].qs + 32 * sb));
                const __m256i pn = _mm256_maddubs_epi16(gneg, q);
                const __m256i p = _mm256_sub_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(grid, q), pn), pn);
                vsum[t] = _mm256_add_epi32(vsum[t], _mm256_madd_epi16(p, scale));
            }
        }
        const float wd = f16_exact(w[i].d);
        for (int t = 0; t < NX; t++) {
            const int32_t bsum = hsum_i32(vsum[t]);
            const float d = wd * x[t][i].d;
            acc[t] += d * (float)bsum;
        }
    }
    for (int t = 0; t < NX; t++) out[t] = 0.125f * acc[t];
}

/* Instantiate a row kernel for NX = 1..QUANT_DOT_X and a front end taking any count in groups. */
#define DEFINE_ROWS(name, block_t, act_t, qk, kernel)                                                        \
    AVX2_FN float quant_dot_##name##_avx2(const void *wrow, const act_t *x, int64_t n) {                     \
        float r;                                                                                             \
        kernel((const block_t *)wrow, &x, 1, n / (qk), &r);                                                  \
        return r;                                                                                            \
    }                                                                                                        \
    AVX2_FN void quant_dot_##name##_x_avx2(const void *wrow, const act_t *const *x, int nx, int64_t n,       \
                                           float *out) {                                                     \
        const block_t *w = wrow;                                                                             \
        for (; nx >= QUANT_DOT_X; nx -= QUANT_DOT_X, x += QUANT_DOT_X, out += QUANT_DOT_X)                   \
            kernel(w, x, QUANT_DOT_X, n / (qk), out);                                                        \
        switch (nx) {                                                                                        \
        case 7: kernel(w, x, 7, n / (qk), out); break;                                                       \
        case 6: kernel(w, x, 6, n / (qk), out); break;                                                       \
        case 5: kernel(w, x, 5, n / (qk), out); break;                                                       \
        case 4: kernel(w, x, 4, n / (qk), out); break;                                                       \
        case 3: kernel(w, x, 3, n / (qk), out); break;                                                       \
        case 2: kernel(w, x, 2, n / (qk), out); break;                                                       \
        case 1: kernel(w, x, 1, n / (qk), out); break;                                                       \
        default: break;                                                                                      \
        }                                                                                                    \
    }

DEFINE_ROWS(q8_0, dsv4_block_q8_0, dsv4_q8_0_act, DSV4_QK8_0, q8_0_rows)
DEFINE_ROWS(q2_k, dsv4_block_q2_k, dsv4_q8_k, DSV4_QK_K, q2_k_rows)
DEFINE_ROWS(q4_k, dsv4_block_q4_k, dsv4_q8_k, DSV4_QK_K, q4_k_rows)
DEFINE_ROWS(iq2_xxs, dsv4_block_iq2_xxs, dsv4_q8_k, DSV4_QK_K, iq2_xxs_rows)

AVX2_FN float quant_dot_f16_avx2(const uint16_t *wrow, const float *x, int64_t n) {
    __m256 vacc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wrow + i)));
        vacc = _mm256_add_ps(vacc, _mm256_mul_ps(wv, _mm256_loadu_ps(x + i)));
    }
    float lane[8];
    _mm256_storeu_ps(lane, vacc);
    for (; i < n; i++) {
        const float p = f16_exact(wrow[i]) * x[i];
        lane[i & 7] += p;
    }
    return quant_combine_lanes8(lane);
}

#else

int quant_avx2_compiled(void) { return 0; }
float quant_f16_to_f32_avx2(uint16_t h) { return dsv4_f16_to_f32(h); }
float quant_dot_q8_0_avx2(const void *w, const dsv4_q8_0_act *x, int64_t n) {
    return quant_dot_q8_0_scalar(w, x, n);
}
float quant_dot_q2_k_avx2(const void *w, const dsv4_q8_k *x, int64_t n) {
    return quant_dot_q2_k_scalar(w, x, n);
}
float quant_dot_iq2_xxs_avx2(const void *w, const dsv4_q8_k *x, int64_t n) {
    return quant_dot_iq2_xxs_scalar(w, x, n);
}
float quant_dot_q4_k_avx2(const void *w, const dsv4_q8_k *x, int64_t n) {
    return quant_dot_q4_k_scalar(w, x, n);
}
float quant_dot_f16_avx2(const uint16_t *w, const float *x, int64_t n) {
    return quant_dot_f16_scalar(w, x, n);
}
void quant_dot_q8_0_x_avx2(const void *w, const dsv4_q8_0_act *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q8_0_scalar(w, x[i], n);
}
void quant_dot_q2_k_x_avx2(const void *w, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q2_k_scalar(w, x[i], n);
}
void quant_dot_q4_k_x_avx2(const void *w, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q4_k_scalar(w, x[i], n);
}
void quant_dot_iq2_xxs_x_avx2(const void *w, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_iq2_xxs_scalar(w, x[i], n);
}

#endif
