/* Fast random rows for synthesized models: codes come straight from a splitmix64 stream and the
 * scales are fixed per row from closed-form moments, so a row costs a few PRNG calls per block.
 * Dequantized values have mean 0 by symmetry and standard deviation `std` (in expectation). */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

/* Mean of grid_k² over all 256 entries x 8 bytes of dsv4_iq2xxs_grid (= 1094513/2048, exact);
 * tests/quant check it against the table. */
#define IQ2_GRID_MEAN_SQ 534.43017578125

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* f16 of a positive scale, kept finite and non-zero. */
static uint16_t f16_scale(double v) {
    const uint16_t h = dsv4_f32_to_f16((float)v);
    if ((h & 0x7fff) == 0) return 0x0001;
    if ((h & 0x7fff) >= 0x7c00) return 0x7bff;
    return h;
}

/* q = odd value in [-127, 127], uniform: mean 0, E[q²] = (4*64²-1)/3 = 5461. */
static void fill_q8_0(uint64_t *s, double std, dsv4_block_q8_0 *y, int64_t nb) {
    const uint16_t d = f16_scale(std / sqrt(5461.0));
    for (int64_t b = 0; b < nb; b++) {
        y[b].d = d;
        for (int k = 0; k < 32; k += 8) {
            const uint64_t r = splitmix64(s) | 0x0101010101010101ull;
            memcpy(y[b].qs + k, &r, 8);
        }
    }
}

/* q uniform in 0..3, sc = m uniform in 8..15, dmin = 1.5 d: x = d*sc*(q-1.5).
 * E[x²] = d² * E[sc²] * Var(q) = d² * 137.5 * 1.25. */
static void fill_q2_k(uint64_t *s, double std, dsv4_block_q2_k *y, int64_t nb) {
    const uint16_t d = f16_scale(std / sqrt(137.5 * 1.25));
    const uint16_t dmin = f16_scale(1.5 * dsv4_f16_to_f32(d));
    for (int64_t b = 0; b < nb; b++) {
        y[b].d = d;
        y[b].dmin = dmin;
        uint64_t r = splitmix64(s);
        for (int j = 0; j < 16; j++, r >>= 3) {
            const uint8_t sc = (uint8_t)(8 + (r & 7));
            y[b].scales[j] = (uint8_t)(sc | (sc << 4));
        }
        for (int k = 0; k < 64; k += 8) {
            const uint64_t q = splitmix64(s);
            memcpy(y[b].qs + k, &q, 8);
        }
    }
}

/* q uniform in 0..15, sc = m uniform in 32..63, dmin = 7.5 d: x = d*sc*(q-7.5).
 * E[x²] = d² * E[sc²] * Var(q) = d² * 2341.5 * 21.25. */
static void fill_q4_k(uint64_t *s, double std, dsv4_block_q4_k *y, int64_t nb) {
    const uint16_t d = f16_scale(std / sqrt(2341.5 * 21.25));
    const uint16_t dmin = f16_scale(7.5 * dsv4_f16_to_f32(d));
    for (int64_t b = 0; b < nb; b++) {
        y[b].d = d;
        y[b].dmin = dmin;
        uint64_t r = splitmix64(s);
        uint8_t sc[8];
        for (int j = 0; j < 8; j++, r >>= 5) sc[j] = (uint8_t)(32 + (r & 31));
        for (int j = 0; j < 4; j++) { /* min code = scale code; packing as get_scale_min_k4 */
            y[b].scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
            y[b].scales[j + 4] = y[b].scales[j];
            y[b].scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((sc[j + 4] & 15) << 4));
        }
        for (int k = 0; k < 128; k += 8) {
            const uint64_t q = splitmix64(s);
            memcpy(y[b].qs + k, &q, 8);
        }
    }
}

/* Random grid indices and sign fields (each sign is then a fair coin, ksigns bit 7 included),
 * ls uniform in 8..15: E[x²] = d² * 0.25² * E[(ls+0.5)²] * E[grid²] = d² * 0.0625 * 149.25 * 534.43. */
static void fill_iq2_xxs(uint64_t *s, double std, dsv4_block_iq2_xxs *y, int64_t nb) {
    const uint16_t d = f16_scale(std / sqrt(0.0625 * 149.25 * IQ2_GRID_MEAN_SQ));
    for (int64_t b = 0; b < nb; b++) {
        y[b].d = d;
        for (int sb = 0; sb < 8; sb++) {
            uint64_t r = splitmix64(s);
            const uint32_t ls = 8 + (uint32_t)((r >> 60) & 7);
            r = (r & 0x0fffffffffffffffull) | ((uint64_t)ls << 60); /* a1 = 28 sign bits | ls << 28 */
            memcpy(y[b].qs + 4 * sb, &r, 8);
        }
    }
}

/* uniform in [-sqrt(3) std, sqrt(3) std] */
static inline float uniform_value(uint64_t *s, float a) {
    return a * (float)((int64_t)(splitmix64(s) >> 11) - (int64_t)(1ll << 52)) *
           (float)(1.0 / 4503599627370496.0);
}

bool quant_fill_random_row(uint32_t type, uint64_t *rng_state, float std, void *dst, int64_t n) {
    const dsv4_type_info *ti = dsv4_type_get(type);
    if (!ti || !rng_state || !(std > 0.0f) || !isfinite(std) || n < 0 || n % ti->block_elems != 0)
        return false;
    const int64_t nb = n / ti->block_elems;
    const float a = std * sqrtf(3.0f);
    uint64_t s = *rng_state;
    switch (type) {
    case DSV4_TYPE_F32: {
        float *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = uniform_value(&s, a);
        break;
    }
    case DSV4_TYPE_F16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = dsv4_f32_to_f16(uniform_value(&s, a));
        break;
    }
    case DSV4_TYPE_BF16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = dsv4_f32_to_bf16(uniform_value(&s, a));
        break;
    }
    case DSV4_TYPE_Q8_0: fill_q8_0(&s, std, dst, nb); break;
    case DSV4_TYPE_Q2_K: fill_q2_k(&s, std, dst, nb); break;
    case DSV4_TYPE_Q4_K: fill_q4_k(&s, std, dst, nb); break;
    case DSV4_TYPE_IQ2_XXS: fill_iq2_xxs(&s, std, dst, nb); break;
    default: return false;
    }
    *rng_state = s;
    return true;
}
