/* FP8 E4M3 / FP4 E2M1 round trips and the Hadamard transform against hand-derived values and
 * independent formulas. */
#include "common/testutil.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

/* e4m3fn value of index i (0..126), straight from the spec's definition. */
static double e4m3_value(int i) {
    const int e = (i >> 3) & 15, m = i & 7;
    return e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
}

static void test_e4m3_grid_and_midpoints(void **state) {
    (void)state;
    for (int i = 0; i <= 126; i++) {
        const float v = (float)e4m3_value(i);
        assert_true(dsv4_e4m3_round(v) == v);
        assert_true(dsv4_e4m3_round(-v) == -v);
        if (i == 126) break;
        const float next = (float)e4m3_value(i + 1);
        const float mid = (float)((e4m3_value(i) + e4m3_value(i + 1)) / 2); /* exact in float */
        const float tie = (i & 1) ? next : v;                               /* even index wins */
        assert_true(dsv4_e4m3_round(mid) == tie);
        assert_true(dsv4_e4m3_round(-mid) == -tie);
        assert_true(dsv4_e4m3_round(nextafterf(mid, INFINITY)) == next);
        assert_true(dsv4_e4m3_round(nextafterf(mid, 0.0f)) == v);
    }
}

static void test_e4m3_hand_values(void **state) {
    (void)state;
    static const float cases[][2] = {
        {0.3f, 0.3125f},  /* binade [0.25,0.5), quantum 2^-5: 9.6 -> 10 */
        {17.0f, 16.0f},   /* midpoint of 16 (m=0) and 18 (m=1) -> 16 */
        {19.0f, 20.0f},   /* midpoint of 18 (m=1) and 20 (m=2) -> 20 */
        {500.0f, 448.0f}, /* saturates */
        {464.0f, 448.0f},     {1e30f, 448.0f},
        {-1000.0f, -448.0f},  {0x1.8p-8f, 0x1.8p-8f}, /* 3 * 2^-9: subnormal grid point */
        {0x1p-10f, 0.0f},                             /* half of 2^-9: tie -> index 0 */
        {0x1.8p-9f, 0x1p-8f},                         /* 1.5 * 2^-9: tie between m=1 and m=2 -> 2 */
        {0x1.ep-7f, 0x1p-6f}, /* 7.5 * 2^-9: tie between m=7 and 2^-6 (index 8) -> 2^-6 */
        {1e-6f, 0.0f},        {240.0f, 240.0f},
        {248.0f, 256.0f}, /* tie between 240 (m=7) and 256 (m=0 of the next binade) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_true(dsv4_e4m3_round(cases[i][0]) == cases[i][1]);
    }
}

static void test_e2m1(void **state) {
    (void)state;
    static const float cases[][2] = {
        {0.0f, 0.0f},  {0.25f, 0.0f}, {0.2501f, 0.5f}, {0.5f, 0.5f}, {0.75f, 1.0f},  {1.25f, 1.0f},
        {1.5f, 1.5f},  {1.75f, 2.0f}, {2.5f, 2.0f},    {3.0f, 3.0f}, {3.5f, 4.0f},   {5.0f, 4.0f},
        {5.01f, 6.0f}, {6.0f, 6.0f},  {7.0f, 6.0f},    {1e9f, 6.0f}, {-2.6f, -3.0f}, {-0.75f, -1.0f},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_true(dsv4_e2m1_round(cases[i][0]) == cases[i][1]);
    }
}

static void test_fp8_blocks(void **state) {
    (void)state;
    float x[128];
    /* block 0: amax 100 -> log2(100/448) = -2.16 -> scale 2^-2. 100/0.25 = 400 is the midpoint
     * of 384 (m=4) and 416 (m=5) -> 384 -> 96. 3 -> 12 -> 3. 0.3 -> 1.2: quantum 1/8 -> 1.25 -> 0.3125. */
    memset(x, 0, sizeof(x));
    x[0] = 100.0f;
    x[1] = -100.0f;
    x[2] = 3.0f;
    x[3] = 0.3f;
    /* block 1: amax/448 exactly 2^-3 (amax 56): scale 2^-3. 56 -> 448 -> 56; 1 -> 8 -> 1;
     * 0.3 -> 2.4: quantum 1/4 -> 2.5 -> 0.3125; -0.01 -> -0.08 -> quantum 2^-7: 10.24 -> 10 -> -0.078125/8 */
    x[64] = 56.0f;
    x[65] = 1.0f;
    x[66] = 0.3f;
    x[67] = -0.01f;
    dsv4_fp8_roundtrip_blocks64(x, 128);
    assert_true(x[0] == 96.0f);
    assert_true(x[1] == -96.0f);
    assert_true(x[2] == 3.0f);
    assert_true(x[3] == 0.3125f);
    assert_true(x[4] == 0.0f);
    assert_true(x[64] == 56.0f);
    assert_true(x[65] == 1.0f);
    assert_true(x[66] == 0.3125f);
    assert_true(x[67] == -0.009765625f);

    /* all zeros: amax floored to 1e-4, values stay 0. Tiny block: amax floor 1e-4 -> scale
     * 2^ceil(log2(1e-4/448)) = 2^-22; 1e-5 * 2^22 = 41.94: quantum 4 -> 40 -> 40 * 2^-22. */
    float z[64] = {0}, t[64] = {0};
    dsv4_fp8_roundtrip_blocks64(z, 64);
    for (int i = 0; i < 64; i++) assert_true(z[i] == 0.0f);
    t[7] = 1e-5f;
    t[8] = -2e-6f; /* 2e-6 * 2^22 = 8.39 -> quantum 1 -> 8 -> -2^-19 */
    dsv4_fp8_roundtrip_blocks64(t, 64);
    assert_true(t[7] == 40.0f * 0x1p-22f);
    assert_true(t[8] == -0x1p-19f);
}

static void test_fp4_blocks(void **state) {
    (void)state;
    float x[96] = {0};
    /* block 0: amax 6 -> scale 1. */
    x[0] = 6.0f;
    x[1] = 2.5f;
    x[2] = 5.0f;
    x[3] = -1.3f;
    /* block 1: amax 3 -> scale 2^-1: 1.3 -> 2.6 -> 3 -> 1.5; 0.5 -> 1 -> 0.5; 0.1 -> 0.2 -> 0 */
    x[32] = 3.0f;
    x[33] = 1.3f;
    x[34] = 0.5f;
    x[35] = 0.1f;
    /* block 2: amax 7 -> scale 2: 7 -> 3.5, tie between 3 (idx 5) and 4 (idx 6) -> 4 -> 8 */
    x[64] = 7.0f;
    x[65] = -7.0f;
    x[66] = 1.0f; /* 0.5 -> 0.5 -> 1 */
    dsv4_fp4_roundtrip_blocks32(x, 96);
    const float expect[][2] = {{0, 6.0f},  {1, 2.0f},  {2, 4.0f},  {3, -1.5f},  {32, 3.0f}, {33, 1.5f},
                               {34, 0.5f}, {35, 0.0f}, {64, 8.0f}, {65, -8.0f}, {66, 1.0f}, {67, 0.0f}};
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        assert_true(x[(int)expect[i][0]] == expect[i][1]);
    }
    /* amax floor 6*2^-126 -> scale 2^-126: 4e-38 * 2^126 = 3.40 -> 3 -> 3*2^-126; zeros stay zero;
     * 1e-39 (f32 subnormal) -> 0.085 -> 0 */
    float t[32] = {0};
    t[0] = 4e-38f;
    t[1] = 1e-39f;
    dsv4_fp4_roundtrip_blocks32(t, 32);
    assert_true(t[0] == 3.0f * 0x1p-126f);
    assert_true(t[1] == 0.0f);
    for (int i = 2; i < 32; i++) assert_true(t[i] == 0.0f);
}

/* Packed FP4 rows (backend.h DSV4_KV_FP4): the output of the Hadamard + FP4 round trip reads back
 * as its f16 rounding, bit for bit, at every magnitude (also blocks whose largest code is small,
 * scales far below f16's range, zeros of both signs); hand-checked bytes for one block. */
static void test_fp4_pack(void **state) {
    (void)state;
    enum { N = 128 };
    float x[N], y[N];
    uint8_t pk[N / 32 * 17];
    uint64_t s = 5;
    const float mags[] = {1.0f, 1e-3f, 3e4f, 1e-20f, 1e20f, 7e-38f, 0.0f};
    for (size_t mi = 0; mi < sizeof mags / sizeof mags[0]; mi++)
        for (int rep = 0; rep < 50; rep++) {
            for (int i = 0; i < N; i++) x[i] = (float)(test_rng_next(&s) % 2001 - 1000) / 1000.0f * mags[mi];
            if (rep % 5 == 1) /* a block whose largest code is small relative to its scale */
                for (int i = 0; i < 32; i++) x[i] *= 0.01f;
            if (rep % 5 == 2) x[40] = -0.0f;
            dsv4_hadamard_inplace(x, N);
            dsv4_fp4_roundtrip_blocks32(x, N);
            if (rep % 5 == 3) x[70] = -0.0f, x[71] = 0.0f;
            dsv4_fp4_pack_row(x, N, pk);
            dsv4_fp4_unpack_row(pk, N, y);
            for (int i = 0; i < N; i++) {
                const float want = dsv4_f16_round(x[i]);
                if (memcmp(&want, &y[i], 4) != 0)
                    fail_msg("magnitude %g rep %d element %d: %a reads back %a, want %a", mags[mi], rep, i,
                             x[i], y[i], want);
            }
        }
    /* one block: 6 * 2^-1 = 3 is the max, so e = -1; 1.5 = 3 * 2^-1 (code 5), -0.25 = -0.5 * 2^-1
     * (code 8|1), 0 (code 0) */
    float b[32] = {0};
    b[0] = 3.0f, b[1] = 1.5f, b[2] = -0.25f;
    dsv4_fp4_pack_row(b, 32, pk);
    assert_int_equal((int8_t)pk[0], -1);
    assert_int_equal(pk[1], 7 | 5 << 4); /* elements 0 and 1: codes 7 (6) and 5 (3) */
    assert_int_equal(pk[2], 9);          /* element 2: -(0.5), element 3: 0 */
    for (int i = 3; i < 17; i++) assert_int_equal(pk[i], i == 2 ? 9 : 0);
    dsv4_fp4_unpack_row(pk, 32, y);
    assert_true(y[0] == 3.0f && y[1] == 1.5f && y[2] == -0.25f && y[3] == 0.0f);
}

static void test_hadamard(void **state) {
    (void)state;
    float e0[128] = {0};
    e0[0] = 1.0f;
    dsv4_hadamard_inplace(e0, 128);
    for (int i = 0; i < 128; i++) assert_true(e0[i] == 0.08838834764831845f);

    uint64_t s = 42;
    for (int n = 2; n <= 256; n *= 2) {
        float x[256], y[256];
        for (int i = 0; i < n; i++) x[i] = (float)(2.0 * test_rng_uniform(&s) - 1.0);
        memcpy(y, x, sizeof(float) * (size_t)n);
        dsv4_hadamard_inplace(y, n);
        for (int k = 0; k < n; k++) { /* Sylvester: y_k = n^-1/2 Σ_j (-1)^popcount(k&j) x_j */
            double r = 0;
            for (int j = 0; j < n; j++) r += (__builtin_popcount((unsigned)(k & j)) & 1 ? -1.0 : 1.0) * x[j];
            assert_true(fabs(y[k] - r / sqrt((double)n)) <= 1e-6);
        }
        dsv4_hadamard_inplace(y, n); /* H is its own inverse */
        for (int i = 0; i < n; i++) assert_true(fabsf(y[i] - x[i]) <= 1e-6f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_grid_and_midpoints),
        cmocka_unit_test(test_e4m3_hand_values),
        cmocka_unit_test(test_e2m1),
        cmocka_unit_test(test_fp8_blocks),
        cmocka_unit_test(test_fp4_blocks),
        cmocka_unit_test(test_fp4_pack),
        cmocka_unit_test(test_hadamard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
