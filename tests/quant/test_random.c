/* quant_fill_random_row: dequantized moments near the target, valid scales, determinism. */
#include "common/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

#define N (256 * 256)

static const uint32_t types[] = {DSV4_TYPE_F32,  DSV4_TYPE_F16,  DSV4_TYPE_BF16,   DSV4_TYPE_Q8_0,
                                 DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K, DSV4_TYPE_IQ2_XXS};

static bool f16_ok(uint16_t h) { /* finite and non-zero */
    return (h & 0x7fff) != 0 && (h & 0x7c00) != 0x7c00;
}

static void check_scales(uint32_t type, const void *q, int64_t n) {
    if (type == DSV4_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / 32; b++) assert_true(f16_ok(((const dsv4_block_q8_0 *)q)[b].d));
    } else if (type == DSV4_TYPE_Q2_K) {
        for (int64_t b = 0; b < n / 256; b++) {
            const dsv4_block_q2_k *k = (const dsv4_block_q2_k *)q + b;
            assert_true(f16_ok(k->d) && f16_ok(k->dmin));
            for (int j = 0; j < 16; j++) assert_true((k->scales[j] & 15) != 0);
        }
    } else if (type == DSV4_TYPE_Q4_K) {
        for (int64_t b = 0; b < n / 256; b++) {
            const dsv4_block_q4_k *k = (const dsv4_block_q4_k *)q + b;
            assert_true(f16_ok(k->d) && f16_ok(k->dmin));
        }
    } else if (type == DSV4_TYPE_IQ2_XXS) {
        for (int64_t b = 0; b < n / 256; b++) assert_true(f16_ok(((const dsv4_block_iq2_xxs *)q)[b].d));
    }
}

static void test_moments(void **state) {
    (void)state;
    static uint8_t q[N * 4];
    static float y[N];
    const float stds[] = {0.02f, 1.0f};
    for (size_t si = 0; si < 2; si++) {
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            uint64_t rng = 12345 + t;
            assert_true(quant_fill_random_row(types[t], &rng, stds[si], q, N));
            check_scales(types[t], q, N);
            assert_true(quant_dequant_row(types[t], q, y, N));
            double sum = 0, sq = 0;
            int nz = 0;
            for (int i = 0; i < N; i++) {
                assert_true(isfinite(y[i]));
                sum += y[i];
                nz += y[i] != 0.0f;
            }
            const double mean = sum / N;
            for (int i = 0; i < N; i++) sq += (y[i] - mean) * (y[i] - mean);
            const double sd = sqrt(sq / N);
            assert_true(nz > N / 2);
            assert_true(fabs(mean) < 0.1 * stds[si]);
            assert_true(fabs(sd / stds[si] - 1.0) < 0.1);
        }
    }
}

static void test_deterministic(void **state) {
    (void)state;
    static uint8_t a[2048 * 4], b[2048 * 4];
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        uint64_t ra = 7, rb = 7, rc = 8;
        uint64_t bytes;
        assert_true(dsv4_type_row_bytes(types[t], 2048, &bytes));
        assert_true(quant_fill_random_row(types[t], &ra, 0.1f, a, 2048));
        assert_true(quant_fill_random_row(types[t], &rb, 0.1f, b, 2048));
        assert_memory_equal(a, b, bytes);
        assert_true(ra == rb && ra != 7); /* state advanced */
        assert_true(quant_fill_random_row(types[t], &rc, 0.1f, b, 2048));
        assert_memory_not_equal(a, b, bytes);
        /* the next row differs from the first */
        assert_true(quant_fill_random_row(types[t], &ra, 0.1f, b, 2048));
        assert_memory_not_equal(a, b, bytes);
    }
}

static void test_bad_args_and_tiny_std(void **state) {
    (void)state;
    static uint8_t q[1024 * 4];
    uint64_t r = 1;
    assert_false(quant_fill_random_row(DSV4_TYPE_Q8_0, &r, 0.0f, q, 1024));
    assert_false(quant_fill_random_row(DSV4_TYPE_Q8_0, &r, -1.0f, q, 1024));
    assert_false(quant_fill_random_row(DSV4_TYPE_Q8_0, &r, NAN, q, 1024));
    assert_false(quant_fill_random_row(DSV4_TYPE_Q4_0, &r, 1.0f, q, 1024));
    assert_false(quant_fill_random_row(DSV4_TYPE_Q2_K, &r, 1.0f, q, 100));
    /* scales stay finite and non-zero at the ends of the f16 range */
    const float extremes[] = {1e-12f, 1e12f};
    for (int e = 0; e < 2; e++) {
        for (size_t t = 3; t < sizeof(types) / sizeof(types[0]); t++) {
            assert_true(quant_fill_random_row(types[t], &r, extremes[e], q, 1024));
            check_scales(types[t], q, 1024);
        }
    }
}

/* The fill's IQ2_XXS std uses the mean square of the grid, 1094513/2048; check it here. */
static void test_grid_mean_square(void **state) {
    (void)state;
    uint64_t s = 0;
    for (int g = 0; g < 256; g++)
        for (int k = 0; k < 8; k++) {
            const uint64_t v = (dsv4_iq2xxs_grid[g] >> (8 * k)) & 0xff;
            s += v * v;
        }
    assert_int_equal(s, 1094513);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moments),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_bad_args_and_tiny_std),
        cmocka_unit_test(test_grid_mean_square),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
