/* AVX2 dot kernels, bitwise equal to dot_scalar.c: the vector code only computes the exact
 * integer sums (products widened to 16/32 bits, never saturating), and the float combination
 * is the scalar code's, in the same order. The target has no "fma", so no fused multiply-add
 * can appear in the F16 kernel whatever the compiler's contraction setting. */
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

/* Σ a*b over 32 signed bytes, widened to 16 bits so that -128*-128 is exact. */
AVX2_FN static inline __m256i dot_i8x32(__m256i a, __m256i b) {
    const __m256i a0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(a));
    const __m256i a1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(a, 1));
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(b));
    const __m256i b1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(b, 1));
    return _mm256_add_epi32(_mm256_madd_epi16(a0, b0), _mm256_madd_epi16(a1, b1));
}

AVX2_FN float quant_dot_q8_0_avx2(const void *wrow, const dsv4_q8_0_act *x, int64_t n) {
    const dsv4_block_q8_0 *w = wrow;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / DSV4_QK8_0; b++) {
        const __m256i qw = _mm256_loadu_si256((const __m256i *)w[b].qs);
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const int32_t isum = hsum_i32(dot_i8x32(qw, qx));
        acc += (dsv4_f16_to_f32(w[b].d) * x[b].d) * (float)isum;
    }
    return acc;
}

AVX2_FN float quant_dot_q2_k_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_q2_k *w = wrow;
    const __m256i m3 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        const int8_t *q8 = x[i].qs;
        int32_t summs = 0;
        for (int j = 0; j < 16; j++) summs += (int32_t)x[i].bsums[j] * (sc[j] >> 4);
        __m256i vsum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            for (int j = 0; j < 4; j++, q8 += 32) {
                /* bytes 0..15 are sub-block s=0 (low 128-bit lane), 16..31 are s=1 */
                const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
                const __m256i p16 = _mm256_maddubs_epi16(q2, _mm256_loadu_si256((const __m256i *)q8));
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * j + 1] & 15),
                                                     _mm_set1_epi16(sc[8 * h + 2 * j] & 15));
                vsum = _mm256_add_epi32(vsum, _mm256_madd_epi16(p16, scv));
            }
        }
        const int32_t isum = hsum_i32(vsum);
        const float dall = x[i].d * dsv4_f16_to_f32(w[i].d);
        const float dmin = x[i].d * dsv4_f16_to_f32(w[i].dmin);
        acc += dall * (float)isum - dmin * (float)summs;
    }
    return acc;
}

AVX2_FN float quant_dot_q4_k_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_q4_k *w = wrow;
    const __m256i m4 = _mm256_set1_epi8(15);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        int32_t summs = 0;
        __m256i vsum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            quant_q4k_scale_min(2 * c, w[i].scales, &sc0, &m0);
            quant_q4k_scale_min(2 * c + 1, w[i].scales, &sc1, &m1);
            summs += m0 * ((int32_t)x[i].bsums[4 * c] + x[i].bsums[4 * c + 1]);
            summs += m1 * ((int32_t)x[i].bsums[4 * c + 2] + x[i].bsums[4 * c + 3]);
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
            const __m256i phi =
                _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
            vsum = _mm256_add_epi32(vsum, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc0)));
            vsum = _mm256_add_epi32(vsum, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc1)));
        }
        const int32_t isum = hsum_i32(vsum);
        const float dall = x[i].d * dsv4_f16_to_f32(w[i].d);
        const float dmin = x[i].d * dsv4_f16_to_f32(w[i].dmin);
        acc += dall * (float)isum - dmin * (float)summs;
    }
    return acc;
}

AVX2_FN float quant_dot_iq2_xxs_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    const dsv4_block_iq2_xxs *w = wrow;
    /* byte k of each 8-byte group tests sign bit k */
    const __m256i bitmask = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                            2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / DSV4_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        __m256i vsum = _mm256_setzero_si256();
        for (int sb = 0; sb < 8; sb++, q8 += 32) {
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
            const __m256i sgrid = _mm256_sub_epi8(_mm256_xor_si256(grid, neg), neg);
            const __m256i q = _mm256_loadu_si256((const __m256i *)q8);
            const __m256i p = dot_i8x32(sgrid, q);
            vsum =
                _mm256_add_epi32(vsum, _mm256_mullo_epi32(p, _mm256_set1_epi32((int)(2 * (a1 >> 28) + 1))));
        }
        const int32_t bsum = hsum_i32(vsum);
        const float d = dsv4_f16_to_f32(w[i].d) * x[i].d;
        acc += d * (float)bsum;
    }
    return 0.125f * acc;
}

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
        const float p = dsv4_f16_to_f32(wrow[i]) * x[i];
        lane[i & 7] += p;
    }
    return quant_combine_lanes8(lane);
}

#else

int quant_avx2_compiled(void) { return 0; }
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

#endif
