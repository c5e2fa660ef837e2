/* Weight quantizers: error bounds on gaussian rows, exactness on representable inputs, the
 * IQ2_XXS sign-parity rule, and the type dispatch of quant_quantize_row. */
#include "common/testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "quant/quant.h"

#define N 8192

static double gauss(uint64_t *s) {
    double u1 = test_rng_uniform(s), u2 = test_rng_uniform(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double rel_rmse(uint32_t type, const float *x, int64_t n) {
    static uint8_t q[N * 4];
    static float y[N];
    assert_true(quant_quantize_row(type, x, q, n));
    assert_true(quant_dequant_row(type, q, y, n));
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

/* Bounds (relative RMSE, σ = 1 gaussian rows), from the uniform-quantizer estimate step/sqrt(12):
 * Q8_0: step = amax/127 with amax of 32 gaussians ~2.1σ -> 0.0048; bound 1%.
 * Q4_K: 16 levels over the ~4.1σ range of 32 values -> 0.08 before fitting; bound 10%.
 * Q2_K: 4 levels over the ~3.5σ range of 16 values -> 0.34 before fitting; bound 40%.
 * IQ2_XXS: 3 magnitudes {8,25,43} on a restricted 256-entry 8-D grid; measured ~0.3, bound 45%.
 * F16: 2^-11 relative rounding; BF16: 2^-8. */
static void test_gaussian_error(void **state) {
    (void)state;
    static float x[N];
    uint64_t s = 99;
    for (int i = 0; i < N; i++) x[i] = (float)gauss(&s) * 0.05f;
    const struct {
        uint32_t type;
        double bound;
    } cases[] = {{DSV4_TYPE_Q8_0, 0.01},    {DSV4_TYPE_Q4_K, 0.10},  {DSV4_TYPE_Q2_K, 0.40},
                 {DSV4_TYPE_IQ2_XXS, 0.45}, {DSV4_TYPE_F16, 0.0005}, {DSV4_TYPE_BF16, 0.004}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const double e = rel_rmse(cases[i].type, x, cases[i].type == DSV4_TYPE_IQ2_XXS ? 2048 : N);
        printf("%s rel rmse %.4f\n", dsv4_type_name(cases[i].type), e);
        assert_true(e < cases[i].bound);
    }
    assert_true(rel_rmse(DSV4_TYPE_F32, x, N) == 0.0);
}

/* Values the format can hold come back exactly. */
static void test_exact_inputs(void **state) {
    (void)state;
    static float x[N], y[N];
    static uint8_t q[N * 4];
    uint64_t s = 3;
    /* Q8_0: x = d*q with d an f16 value and |q| = 127 present in each block */
    for (int b = 0; b < 64; b++) {
        const float d = dsv4_f16_round((float)(test_rng_uniform(&s) * 0.01 + 1e-4));
        for (int k = 0; k < 32; k++) x[32 * b + k] = d * (float)((int)(test_rng_next(&s) % 255) - 127);
        x[32 * b + 5] = (b & 1 ? -127.0f : 127.0f) * d;
    }
    assert_true(quant_quantize_row(DSV4_TYPE_Q8_0, x, q, 2048));
    assert_true(quant_dequant_row(DSV4_TYPE_Q8_0, q, y, 2048));
    assert_memory_equal(x, y, 2048 * sizeof(float));
    /* F16 / BF16: values already on their grids */
    for (int i = 0; i < 2048; i++) x[i] = dsv4_bf16_to_f32(dsv4_f32_to_bf16((float)gauss(&s)));
    assert_true(quant_quantize_row(DSV4_TYPE_F16, x, q, 2048)); /* bf16 values have 8 bits: f16-exact */
    assert_true(quant_dequant_row(DSV4_TYPE_F16, q, y, 2048));
    assert_memory_equal(x, y, 2048 * sizeof(float));
    assert_true(quant_quantize_row(DSV4_TYPE_BF16, x, q, 2048));
    assert_true(quant_dequant_row(DSV4_TYPE_BF16, q, y, 2048));
    assert_memory_equal(x, y, 2048 * sizeof(float));
    /* IQ2_XXS: a row that is itself an IQ2_XXS row with every sub-block at ls = 15 and a group
     * holding the top magnitude, so the scale search meets the exact superblock scale */
    dsv4_block_iq2_xxs blk[4];
    for (int b = 0; b < 4; b++) {
        blk[b].d = dsv4_f32_to_f16((float)(0.001 + test_rng_uniform(&s) * 0.01));
        for (int sb = 0; sb < 8; sb++) {
            uint32_t a0 = (uint32_t)test_rng_next(&s),
                     a1 = ((uint32_t)test_rng_next(&s) & 0x0fffffffu) | (15u << 28);
            if (sb == 0) a0 = (a0 & ~0xffu) | 255u; /* grid 255 contains 43 */
            memcpy(&blk[b].qs[4 * sb], &a0, 4);
            memcpy(&blk[b].qs[4 * sb + 2], &a1, 4);
        }
    }
    assert_true(quant_dequant_row(DSV4_TYPE_IQ2_XXS, blk, x, 1024));
    assert_true(quant_quantize_row(DSV4_TYPE_IQ2_XXS, x, q, 1024));
    assert_true(quant_dequant_row(DSV4_TYPE_IQ2_XXS, q, y, 1024));
    assert_memory_equal(x, y, 1024 * sizeof(float));
}

/* All-zero rows quantize to all-zero rows in every type. */
static void test_zero_rows(void **state) {
    (void)state;
    static float x[512], y[512];
    static uint8_t q[512 * 4];
    const uint32_t types[] = {DSV4_TYPE_F32,  DSV4_TYPE_F16,  DSV4_TYPE_BF16,   DSV4_TYPE_Q8_0,
                              DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K, DSV4_TYPE_IQ2_XXS};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        memset(y, 0x55, sizeof(y));
        assert_true(quant_quantize_row(types[t], x, q, 512));
        assert_true(quant_dequant_row(types[t], q, y, 512));
        for (int i = 0; i < 512; i++) assert_true(y[i] == 0.0f);
    }
    assert_false(quant_quantize_row(DSV4_TYPE_Q4_0, x, q, 512));
    assert_false(quant_quantize_row(DSV4_TYPE_Q2_K, x, q, 100));
}

/* The 8th sign is implied (even number of negatives): with an odd count the smallest-magnitude
 * element takes the other sign. */
static void test_iq2_sign_parity(void **state) {
    (void)state;
    float x[256], y[256];
    dsv4_block_iq2_xxs b;
    for (int i = 0; i < 256; i++) x[i] = (i % 3 ? 1.0f : 0.5f);
    /* group 0: one negative (element 0, the smallest) -> represented non-negative */
    x[0] = -0.1f;
    /* group 1 (8..15): negatives at 9, 10, 11; smallest magnitude is element 13 (0.05) -> it flips */
    x[9] = -1.0f;
    x[10] = -1.0f;
    x[11] = -0.5f;
    x[13] = 0.05f;
    quant_quantize_iq2_xxs(x, &b, 256);
    assert_true(quant_dequant_row(DSV4_TYPE_IQ2_XXS, &b, y, 256));
    for (int k = 0; k < 8; k++) assert_true(y[k] > 0.0f);
    for (int k = 8; k < 16; k++) {
        const bool neg = k == 9 || k == 10 || k == 11 || k == 13;
        assert_true(neg ? y[k] < 0.0f : y[k] > 0.0f);
    }
    /* the stored sign fields follow the data: group 1's field is bits 1,2,3,5 -> 0b0101110 */
    uint32_t a1;
    memcpy(&a1, &b.qs[2], 4);
    assert_int_equal((a1 >> 7) & 127, 0x2e);
    assert_int_equal(a1 & 127, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gaussian_error),
        cmocka_unit_test(test_exact_inputs),
        cmocka_unit_test(test_zero_rows),
        cmocka_unit_test(test_iq2_sign_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
