/* Activation quantization (Q8_0 with f32 scale, Q8_K) against hand-derived codes and scales. */
#include "common/testutil.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

static void test_q8_0_act(void **state) {
    (void)state;
    float x[96] = {0};
    /* block 0: amax 127 -> d = 1, id = 1: codes are lrintf(x), ties to even */
    const float b0[] = {127.0f, -63.5f, 0.5f, 1.5f, 2.5f, -0.5f, -127.0f, 3.49f};
    const int8_t q0[] = {127, -64, 0, 2, 2, 0, -127, 3};
    memcpy(x, b0, sizeof(b0));
    /* block 1: amax 254 -> d = 2, id = 0.5: 3 -> 1.5 -> 2, 5 -> 2.5 -> 2, -1 -> -0.5 -> 0, 7 -> 3.5 -> 4 */
    const float b1[] = {254.0f, 3.0f, 5.0f, -1.0f, 7.0f, -254.0f};
    const int8_t q1[] = {127, 2, 2, 0, 4, -127};
    memcpy(x + 32, b1, sizeof(b1));
    /* block 2 stays all zeros: d = 0, id = 0, codes 0 */
    dsv4_q8_0_act out[3];
    memset(out, 0x55, sizeof(out));
    quant_act_q8_0(x, out, 96);
    assert_true(out[0].d == 1.0f);
    assert_true(out[1].d == 2.0f);
    assert_true(out[2].d == 0.0f);
    for (int i = 0; i < 32; i++) {
        assert_int_equal(out[0].qs[i], i < 8 ? q0[i] : 0);
        assert_int_equal(out[1].qs[i], i < 6 ? q1[i] : 0);
        assert_int_equal(out[2].qs[i], 0);
    }
    /* amax 1: d = 1/127 in f32, id = 1/d; x = ±1 -> ±127 */
    float y[40] = {0};
    y[0] = 1.0f;
    y[1] = -1.0f;
    y[2] = 0.5f;   /* 0.5 * id = 63.5000...: rounds to 63 or 64 depending on id's rounding */
    y[33] = -3.0f; /* short last block (8 elements): d = 3/127, the padding codes are 0 */
    memset(out, 0x55, sizeof(out));
    quant_act_q8_0(y, out, 40);
    assert_true(out[0].d == 1.0f / 127.0f);
    assert_int_equal(out[0].qs[0], 127);
    assert_int_equal(out[0].qs[1], -127);
    assert_int_equal(out[0].qs[2], (int)lrintf(0.5f * (1.0f / (1.0f / 127.0f))));
    assert_true(out[1].d == 3.0f / 127.0f);
    assert_int_equal(out[1].qs[1], -127);
    for (int i = 8; i < 32; i++) assert_int_equal(out[1].qs[i], 0);
}

/* A block whose largest |x| is below ~3.7e-37: d = amax / 127 is so small that id = 1 / d is +inf.
 * The codes saturate as the GPU's cvt.rni does: x > 0 -> 127, x < 0 -> -128, 0 -> 0 (lrintf of
 * +-inf and NaN was unspecified: x86 gave -128 everywhere). Q8_K alike: iscale = -127 / max = -inf. */
static void test_act_reciprocal_overflow(void **state) {
    (void)state;
    float x[256] = {0};
    x[0] = 1e-38f;
    x[1] = -1e-38f;
    x[2] = 0.0f;
    x[3] = 3e-39f;
    dsv4_q8_0_act a[8];
    quant_act_q8_0(x, a, 256);
    assert_true(a[0].d == 1e-38f / 127.0f);
    assert_true(isinf(1.0f / a[0].d));
    assert_int_equal(a[0].qs[0], 127);
    assert_int_equal(a[0].qs[1], -128);
    assert_int_equal(a[0].qs[2], 0);
    assert_int_equal(a[0].qs[3], 127);
    for (int i = 4; i < 32; i++) assert_int_equal(a[0].qs[i], 0);
    for (int b = 1; b < 8; b++) assert_true(a[b].d == 0.0f);
    /* Q8_K: the first largest |x| is x[0] = +1e-38: iscale = -127 / 1e-38 = -inf, d = 1 / iscale = -0 */
    dsv4_q8_k k;
    quant_act_q8_k(x, &k, 256);
    assert_true(k.d == 0.0f && signbit(k.d));
    assert_int_equal(k.qs[0], -128);
    assert_int_equal(k.qs[1], 127);
    assert_int_equal(k.qs[2], 0);
    assert_int_equal(k.qs[3], -128);
    assert_int_equal(k.bsums[0], -128 + 127 - 128);
}

static void test_q8_k_act(void **state) {
    (void)state;
    float x[768] = {0};
    /* block 0: |x| max 2 reached first by x[5] = -2 (x[9] = +2 ties): max = -2, iscale = 63.5 */
    x[0] = 1.0f;    /* 63.5 -> 64 (tie to even) */
    x[1] = 0.5f;    /* 31.75 -> 32 */
    x[2] = -1.0f;   /* -63.5 -> -64 */
    x[5] = -2.0f;   /* -127 */
    x[9] = 2.0f;    /* 127 */
    x[16] = 1.5f;   /* 95.25 -> 95 */
    x[17] = -0.25f; /* -15.875 -> -16 */
    x[255] = 0.75f; /* 47.625 -> 48 */
    /* block 1: first of the tied magnitudes is +2 -> max = 2, iscale = -63.5, d < 0 */
    x[256 + 3] = 2.0f;
    x[256 + 7] = -2.0f;
    x[256 + 8] = 1.0f; /* -63.5 -> -64 */
    /* block 2: all zeros */
    dsv4_q8_k out[3];
    memset(out, 0x55, sizeof(out));
    quant_act_q8_k(x, out, 768);

    assert_true(out[0].d == 1.0f / 63.5f);
    const int expect0[][2] = {{0, 64},  {1, 32},  {2, -64},  {5, -127},
                              {9, 127}, {16, 95}, {17, -16}, {255, 48}};
    int nz = 0;
    for (size_t i = 0; i < sizeof(expect0) / sizeof(expect0[0]); i++) {
        assert_int_equal(out[0].qs[expect0[i][0]], expect0[i][1]);
    }
    for (int i = 0; i < 256; i++) nz += out[0].qs[i] != 0;
    assert_int_equal(nz, 8);
    assert_int_equal(out[0].bsums[0], 64 + 32 - 64 - 127 + 127);
    assert_int_equal(out[0].bsums[1], 95 - 16);
    assert_int_equal(out[0].bsums[15], 48);
    for (int j = 2; j < 15; j++) assert_int_equal(out[0].bsums[j], 0);

    assert_true(out[1].d == 1.0f / -63.5f);
    assert_int_equal(out[1].qs[3], -127);
    assert_int_equal(out[1].qs[7], 127);
    assert_int_equal(out[1].qs[8], -64);
    assert_int_equal(out[1].bsums[0], -64);

    assert_true(out[2].d == 0.0f);
    for (int i = 0; i < 256; i++) assert_int_equal(out[2].qs[i], 0);
    for (int j = 0; j < 16; j++) assert_int_equal(out[2].bsums[j], 0);
}

/* Round trip: d*q reproduces x within half a code step. */
static void test_act_roundtrip(void **state) {
    (void)state;
    uint64_t s = 7;
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = (float)(test_rng_uniform(&s) * 2.0 - 1.0) * (i < 256 ? 1.0f : 1e-3f);
    dsv4_q8_k k[2];
    dsv4_q8_0_act a[16];
    quant_act_q8_k(x, k, 512);
    quant_act_q8_0(x, a, 512);
    for (int i = 0; i < 512; i++) {
        const float dk = k[i / 256].d, da = a[i / 32].d;
        assert_true(fabsf(dk * k[i / 256].qs[i % 256] - x[i]) <= 0.5001f * fabsf(dk));
        assert_true(fabsf(da * a[i / 32].qs[i % 32] - x[i]) <= 0.5001f * da);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_act),
        cmocka_unit_test(test_q8_k_act),
        cmocka_unit_test(test_act_reciprocal_overflow),
        cmocka_unit_test(test_act_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
