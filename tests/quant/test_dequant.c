/* Dequantization of hand-built blocks against hand-derived values, and the IQ2_XXS tables. */
#include "common/testutil.h"

#include <math.h>
#include <string.h>

#include "quant/quant.h"

static void test_plain_types(void **state) {
    (void)state;
    float out[4];
    const float f32[4] = {1.5f, -2.0f, 0.0f, 1e-30f};
    assert_true(quant_dequant_row(DSV4_TYPE_F32, f32, out, 4));
    assert_memory_equal(out, f32, sizeof(f32));
    const uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    assert_true(quant_dequant_row(DSV4_TYPE_F16, f16, out, 4));
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f && out[3] == 65504.0f);
    const uint16_t bf16[4] = {0x3f80, 0xc040, 0x0000, 0x4780};
    assert_true(quant_dequant_row(DSV4_TYPE_BF16, bf16, out, 4));
    assert_true(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.0f && out[3] == 65536.0f);
    const int32_t i32[4] = {-5, 7, 1 << 24, 0};
    assert_true(quant_dequant_row(DSV4_TYPE_I32, i32, out, 4));
    assert_true(out[0] == -5.0f && out[1] == 7.0f && out[2] == 16777216.0f && out[3] == 0.0f);
    /* unsupported types and ragged lengths are refused */
    assert_false(quant_dequant_row(DSV4_TYPE_Q4_0, f32, out, 32));
    assert_false(quant_dequant_row(DSV4_TYPE_Q8_0, f32, out, 31));
    assert_false(quant_dequant_row(999, f32, out, 4));
}

static void test_q8_0(void **state) {
    (void)state;
    dsv4_block_q8_0 b[2];
    b[0].d = 0x3800; /* 0.5 */
    for (int k = 0; k < 32; k++) b[0].qs[k] = (int8_t)(k - 16);
    b[1].d = 0xc000; /* -2 */
    memset(b[1].qs, 0, 32);
    b[1].qs[0] = -128;
    b[1].qs[31] = 127;
    float y[64];
    assert_true(quant_dequant_row(DSV4_TYPE_Q8_0, b, y, 64));
    for (int k = 0; k < 32; k++) assert_true(y[k] == 0.5f * (float)(k - 16));
    assert_true(y[32] == 256.0f);
    assert_true(y[63] == -254.0f);
    assert_true(y[40] == 0.0f);
}

/* Q2_K: d = 1, dmin = 0.5; scales[i] = i | (15-i) << 4 (sc = i, m = 15-i); qs[t] = t. */
static void test_q2_k(void **state) {
    (void)state;
    dsv4_block_q2_k b;
    for (int i = 0; i < 16; i++) b.scales[i] = (uint8_t)(i | ((15 - i) << 4));
    for (int t = 0; t < 64; t++) b.qs[t] = (uint8_t)t;
    b.d = 0x3c00;
    b.dmin = 0x3800;
    float y[256];
    assert_true(quant_dequant_row(DSV4_TYPE_Q2_K, &b, y, 256));
    /* element 128h+32j+16s+l: q = (qs[32h+16s+l] >> 2j) & 3, scale byte 8h+2j+s */
    assert_true(y[0] == -7.5f);   /* q=0, sc=0, m=15: -0.5*15 */
    assert_true(y[17] == -6.0f);  /* h0 j0 s1 l1: qs[17]=0b010001 -> 1; sc=1, m=14: 1 - 7 */
    assert_true(y[37] == -4.5f);  /* h0 j1 s0 l5: qs[5]=0b101 >> 2 -> 1; sc=2, m=13: 2 - 6.5 */
    assert_true(y[195] == 22.5f); /* h1 j2 s0 l3: qs[35]=0b100011 >> 4 -> 2; sc=12, m=3: 24 - 1.5 */
    assert_true(y[255] == 0.0f);  /* h1 j3 s1 l15: qs[63] >> 6 = 0; sc=15, m=0 */
    assert_true(y[127] == -4.0f); /* h0 j3 s1 l15: qs[31]=0b011111 >> 6 = 0; sc=7, m=8: -0.5*8 */
}

/* Q4_K: d = 1, dmin = 0.25, hand-chosen packed scales; qs[t] = (t&15) | (15-(t&15)) << 4. */
static void test_q4_k(void **state) {
    (void)state;
    dsv4_block_q4_k b;
    const uint8_t S[12] = {0x41, 0x02, 0x03, 0x04, 0x85, 0x06, 0x07, 0x08, 0x21, 0x43, 0x65, 0x87};
    memcpy(b.scales, S, 12);
    for (int t = 0; t < 128; t++) b.qs[t] = (uint8_t)((t & 15) | ((15 - (t & 15)) << 4));
    b.d = 0x3c00;
    b.dmin = 0x3400;
    /* sub-block (sc, m): j0 (1,5) j1 (2,6) j2 (3,7) j3 (4,8)
     * j4: sc = (S8&15) | (S0>>6)<<4 = 1|16 = 17, m = (S8>>4) | (S4>>6)<<4 = 2|32 = 34
     * j5: (3, 4)  j6: (5, 6)  j7: (7, 8) */
    float y[256];
    assert_true(quant_dequant_row(DSV4_TYPE_Q4_K, &b, y, 256));
    assert_true(y[0] == -1.25f);  /* q=0, j0: -0.25*5 */
    assert_true(y[5] == 3.75f);   /* q=5: 5 - 1.25 */
    assert_true(y[37] == 18.5f);  /* j1, qs[5]>>4 = 10: 2*10 - 1.5 */
    assert_true(y[131] == 42.5f); /* j4, qs[67]&15 = 3: 17*3 - 8.5 */
    assert_true(y[163] == 35.0f); /* j5, qs[67]>>4 = 12: 3*12 - 1 */
    assert_true(y[255] == -2.0f); /* j7, qs[127]>>4 = 0: -0.25*8 */
    assert_true(y[223] == 73.5f); /* j6 = (S10&15, S10>>4) = (5, 6); qs[127]&15 = 15: 75 - 1.5 */
}

static void test_iq2_xxs(void **state) {
    (void)state;
    dsv4_block_iq2_xxs b;
    memset(&b, 0, sizeof(b));
    b.d = 0x3c00;
    /* sub-block 0: grid indices 0, 1, 255, 2; sign fields 0, 1, 3, 127; ls = 3 */
    const uint32_t a0 = 0x02ff0100u;
    const uint32_t a1 = 0u | (1u << 7) | (3u << 14) | (127u << 21) | (3u << 28);
    memcpy(&b.qs[0], &a0, 4);
    memcpy(&b.qs[2], &a1, 4);
    float y[256];
    assert_true(quant_dequant_row(DSV4_TYPE_IQ2_XXS, &b, y, 256));
    const float db = 0.875f; /* 1 * (0.5 + 3) * 0.25 */
    const float expect[32] = {
        /* grid[0] = all 8, no signs */
        7,
        7,
        7,
        7,
        7,
        7,
        7,
        7,
        /* grid[1]: byte0 = 43; ksigns[1] = 129: elements 0 and 7 negative */
        -43 * db,
        7,
        7,
        7,
        7,
        7,
        7,
        -7,
        /* grid[255] = 0x2b2b2b1908081908: bytes 8,25,8,8,25,43,43,43; ksigns[3] = 3 */
        -7,
        -25 * db,
        7,
        7,
        25 * db,
        43 * db,
        43 * db,
        43 * db,
        /* grid[2] = 0x...1919: bytes 25,25,8...; ksigns[127] = 255: all negative */
        -25 * db,
        -25 * db,
        -7,
        -7,
        -7,
        -7,
        -7,
        -7,
    };
    for (int i = 0; i < 32; i++) assert_true(y[i] == expect[i]);
    /* other sub-blocks: grid 0, no signs, ls = 0 -> 1 * 0.5 * 0.25 * 8 = 1 */
    for (int i = 32; i < 256; i++) assert_true(y[i] == 1.0f);
}

static void test_iq2_tables(void **state) {
    (void)state;
    assert_true(dsv4_iq2xxs_grid[0] == 0x0808080808080808ull);
    assert_true(dsv4_iq2xxs_grid[255] == 0x2b2b2b1908081908ull);
    for (int g = 0; g < 256; g++) {
        for (int k = 0; k < 8; k++) {
            const unsigned v = (unsigned)(dsv4_iq2xxs_grid[g] >> (8 * k)) & 0xff;
            assert_true(v == 8 || v == 25 || v == 43);
        }
        if (g) assert_true(dsv4_iq2xxs_grid[g] != dsv4_iq2xxs_grid[g - 1]);
    }
    for (int s = 0; s < 128; s++) {
        assert_int_equal(dsv4_ksigns_iq2xs[s], s | ((__builtin_popcount((unsigned)s) & 1) << 7));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_types), cmocka_unit_test(test_q8_0),    cmocka_unit_test(test_q2_k),
        cmocka_unit_test(test_q4_k),        cmocka_unit_test(test_iq2_xxs), cmocka_unit_test(test_iq2_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
