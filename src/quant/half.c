/* IEEE binary16 and bfloat16 conversions (ds4.c f16_to_f32 / f32_to_f16 semantics). */
#include <string.h>

#include "quant/quant.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float dsv4_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* subnormal: normalise so the leading one becomes the implicit bit */
    int e = 113; /* f32 biased exponent of 2^-14 */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return bits_f32(sign | ((uint32_t)e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t dsv4_f32_to_f16(float f) {
    const uint32_t bits = f32_bits(f);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const uint32_t fexp = (bits >> 23) & 0xffu;
    uint32_t mant = bits & 0x7fffffu;
    const int32_t exp = (int32_t)fexp - 127 + 15;

    if (fexp == 0xff) return (uint16_t)(sign | (mant ? 0x7e00u : 0x7c00u));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign; /* below half the smallest subnormal */
        mant |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) h++; /* a carry into the exponent is correct */
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry up to inf: correct */
    return (uint16_t)h;
}

float dsv4_f16_round(float f) { return dsv4_f16_to_f32(dsv4_f32_to_f16(f)); }

float dsv4_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t dsv4_f32_to_bf16(float f) {
    const uint32_t bits = f32_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
    const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}
