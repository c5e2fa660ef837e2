/* f16/bf16 conversions: exhaustive round trips and hand-derived RNE/subnormal/overflow cases. */
#include "common/testutil.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Every f16 pattern: the value equals the IEEE formula, and f16 -> f32 -> f16 is the identity. */
static void test_f16_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t e = (h >> 10) & 31, m = h & 1023;
        const double sign = (h & 0x8000) ? -1.0 : 1.0;
        const float f = dsv4_f16_to_f32((uint16_t)h);
        if (e == 31 && m != 0) {
            assert_true(isnan(f));
            assert_int_equal(dsv4_f32_to_f16(f), (h & 0x8000) | 0x7e00);
            continue;
        }
        double expect;
        if (e == 31)
            expect = sign * INFINITY;
        else if (e == 0)
            expect = sign * ldexp((double)m, -24);
        else
            expect = sign * ldexp((double)(1024 + m), (int)e - 25);
        assert_true((double)f == expect);
        assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
        assert_int_equal(dsv4_f32_to_f16(f), h);
        assert_true(dsv4_f16_round(f) == f || isnan(f));
    }
}

static void test_f16_rounding_cases(void **state) {
    (void)state;
    static const struct {
        float in;
        uint16_t out;
    } cases[] = {
        {1.0f, 0x3c00},
        {0x1.002p+0f, 0x3c00},    /* 1 + 2^-11: tie, 0x3c00 is even */
        {0x1.006p+0f, 0x3c02},    /* 1 + 3*2^-11: tie between 0x3c01 and 0x3c02 -> even */
        {0x1.002002p+0f, 0x3c01}, /* just above the tie */
        {0x1.001ffep+0f, 0x3c00}, /* just below the tie */
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},   /* largest finite */
        {65519.996f, 0x7bff}, /* below the 65520 tie */
        {65520.0f, 0x7c00},   /* tie 0x7bff (odd) vs 0x7c00 (even): overflows to inf */
        {1e6f, 0x7c00},
        {-1e6f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-24f, 0x0001},        /* smallest subnormal */
        {0x1p-25f, 0x0000},        /* tie between 0 and 2^-24 -> 0 (even) */
        {0x1.000002p-25f, 0x0001}, /* just above that tie */
        {0x1.8p-24f, 0x0002},      /* 1.5 * 2^-24: tie between 1 and 2 -> 2 */
        {0x1.4p-23f, 0x0002},      /* 2.5 * 2^-24: tie between 2 and 3 -> 2 */
        {0x1p-14f, 0x0400},        /* smallest normal */
        {0x1.ff8p-15f, 0x03ff},    /* largest subnormal 1023 * 2^-24 */
        {0x1.ffcp-15f, 0x0400},    /* 1023.5 * 2^-24: tie -> 1024 (even), carries into normal */
        {0x1.ffbffep-15f, 0x03ff}, /* just below that tie */
        {-0x1p-24f, 0x8001},
        {1e-10f, 0x0000},
        {-1e-10f, 0x8000},
        {1e-40f, 0x0000}, /* f32 subnormal */
        {-0.0f, 0x8000},
        {0.0f, 0x0000},
        {0.1f, 0x2e66}, /* 0.1 = 1.6 * 2^-4; 0.6*1024 = 614.4 -> 614 = 0x266 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(dsv4_f32_to_f16(cases[i].in), cases[i].out);
    }
    assert_int_equal(dsv4_f32_to_f16(NAN), 0x7e00);
    assert_int_equal(dsv4_f32_to_f16(from_bits(0x7f800001u)), 0x7e00); /* signalling, tiny payload */
    assert_int_equal(dsv4_f32_to_f16(from_bits(0xffc00000u)), 0xfe00);
    assert_true(dsv4_f16_round(0x1.006p+0f) == 0x1.008p+0f);
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = dsv4_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(f), h << 16);
        if (isnan(f)) {
            assert_true(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(f))));
        } else {
            assert_int_equal(dsv4_f32_to_bf16(f), h);
        }
    }
    assert_int_equal(dsv4_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dsv4_f32_to_bf16(0x1.01p+0f), 0x3f80);     /* 1 + 2^-8: tie -> even 0x3f80 */
    assert_int_equal(dsv4_f32_to_bf16(0x1.03p+0f), 0x3f82);     /* 1 + 3*2^-8: tie -> even 0x3f82 */
    assert_int_equal(dsv4_f32_to_bf16(0x1.010002p+0f), 0x3f81); /* 1 + 2^-8 + 2^-23: above the tie */
    assert_int_equal(dsv4_f32_to_bf16(-3.0f), 0xc040);
    assert_int_equal(dsv4_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_true(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(from_bits(0x7f800001u))))); /* NaN stays NaN */
    assert_true(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(from_bits(0xff800001u)))));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_all_patterns),
        cmocka_unit_test(test_f16_rounding_cases),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
