/* The CPU backend's EXACT numerics (validation mode) op by op, against independent double
 * references: matmul and routed experts on quantized weights equal the double product of the
 * dequantized rows with the f32 activations; the FP8 / Hadamard+FP4 / f16 round trips are the
 * identity; results do not depend on the batch size or thread count; DS4 stays the default. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/testutil.h"
#include "common/types.h"
#include "quant/quant.h"

static dsv4_backend g_b1, g_b2, g_ds4; /* EXACT with 1 and 2 threads; DS4 */

static int setup(void **state) {
    (void)state;
    dsv4_error err;
    if (dsv4_backend_cpu_create(1, &g_b1, &err) || dsv4_backend_cpu_create(2, &g_b2, &err) ||
        dsv4_backend_cpu_create(1, &g_ds4, &err))
        return -1;
    if (dsv4_backend_cpu_set_numerics(&g_b1, DSV4_NUMERICS_EXACT, &err) ||
        dsv4_backend_cpu_set_numerics(&g_b2, DSV4_NUMERICS_EXACT, &err))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dsv4_backend_destroy(&g_b1);
    dsv4_backend_destroy(&g_b2);
    dsv4_backend_destroy(&g_ds4);
    return 0;
}

static float urand(uint64_t *s) { return (float)(test_rng_uniform(s) * 2.0 - 1.0); }

/* A weight of `type` with ne = [in, rows, n_exp] and random blocks (quant's fast random rows,
 * std 1/sqrt(in)); the dequantized values go to deq (in*rows*n_exp floats). */
static dsv4_tensor make_weight(uint32_t type, uint64_t in, uint64_t rows, uint64_t n_exp, uint64_t seed,
                               float *deq) {
    dsv4_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.type = type;
    t.n_dims = n_exp > 1 ? 3 : 2;
    t.ne[0] = in, t.ne[1] = rows, t.ne[2] = n_exp, t.ne[3] = 1;
    assert_true(dsv4_type_row_bytes(type, in, &t.row_bytes));
    t.nbytes = t.row_bytes * rows * n_exp;
    uint8_t *data = malloc(t.nbytes);
    assert_non_null(data);
    for (uint64_t r = 0; r < rows * n_exp; r++) {
        assert_true(
            quant_fill_random_row(type, &seed, 1.0f / sqrtf((float)in), data + r * t.row_bytes, (int64_t)in));
        assert_true(quant_dequant_row(type, data + r * t.row_bytes, deq + r * in, (int64_t)in));
    }
    t.data = data;
    return t;
}

static double dot_ref(const float *w, const float *x, uint64_t n) {
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += (double)w[i] * x[i];
    return s;
}

static void test_matmul_is_dequantized_double_product(void **state) {
    (void)state;
    enum { IN = 512, OUT = 23, T = 4, XS = IN + 5 };
    const uint32_t types[] = {DSV4_TYPE_Q8_0,    DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K,
                              DSV4_TYPE_IQ2_XXS, DSV4_TYPE_F16,  DSV4_TYPE_F32};
    float *x = malloc(sizeof(float) * T * XS), *deq = malloc(sizeof(float) * IN * OUT);
    float y1[T * OUT], y2[T * OUT], ys[OUT], yd[T * OUT];
    assert_true(x && deq);
    uint64_t s = 5;
    for (int i = 0; i < T * XS; i++) x[i] = urand(&s) * 3.0f;
    dsv4_error err;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        dsv4_tensor w = make_weight(types[k], IN, OUT, 1, 100 + k, deq);
        assert_int_equal(g_b1.ops->matmul(g_b1.ctx, &w, 0, OUT, x, XS, T, y1, OUT, &err), DSV4_OK);
        assert_int_equal(g_b2.ops->matmul(g_b2.ctx, &w, 0, OUT, x, XS, T, y2, OUT, &err), DSV4_OK);
        assert_memory_equal(y1, y2, sizeof y1); /* thread count */
        for (int t = 0; t < T; t++) {
            assert_int_equal(g_b2.ops->matmul(g_b2.ctx, &w, 0, OUT, x + t * XS, XS, 1, ys, OUT, &err),
                             DSV4_OK);
            assert_memory_equal(ys, y1 + t * OUT, sizeof ys); /* batch size */
            for (int o = 0; o < OUT; o++) {
                const double ref = dot_ref(deq + (size_t)o * IN, x + t * XS, IN);
                if (fabs(y1[t * OUT + o] - ref) > 1e-6 * fmax(1.0, fabs(ref)))
                    fail_msg("%s row %d token %d: %.9g, double reference %.9g", dsv4_type_name(types[k]), o,
                             t, y1[t * OUT + o], ref);
            }
        }
        /* DS4 mode quantizes the activations of quantized weights: a visibly different result */
        assert_int_equal(g_ds4.ops->matmul(g_ds4.ctx, &w, 0, OUT, x, XS, T, yd, OUT, &err), DSV4_OK);
        if (types[k] != DSV4_TYPE_F16 && types[k] != DSV4_TYPE_F32)
            assert_memory_not_equal(yd, y1, sizeof yd);
        free((void *)w.data);
    }
    free(x), free(deq);
}

static void test_kv_roundings_are_identity(void **state) {
    (void)state;
    enum { W = 128, R = 3 };
    float x[R * W], y[R * W], z[R * W];
    uint64_t s = 9;
    for (int i = 0; i < R * W; i++) x[i] = urand(&s) * 5.0f;
    dsv4_error err;
    memcpy(y, x, sizeof x);
    assert_int_equal(g_b1.ops->fp8_kv(g_b1.ctx, y, R, W, 64, &err), DSV4_OK);
    assert_memory_equal(y, x, sizeof x);
    assert_int_equal(g_b1.ops->hadamard_fp4(g_b1.ctx, y, R, W, &err), DSV4_OK);
    assert_memory_equal(y, x, sizeof x);
    assert_int_equal(g_b1.ops->store_f16(g_b1.ctx, z, DSV4_TYPE_F32, y, R, W, &err), DSV4_OK);
    assert_memory_equal(z, x, sizeof x);
    /* argument checks still apply */
    assert_int_equal(g_b1.ops->fp8_kv(g_b1.ctx, y, R, W, 60, &err), DSV4_ERR_INVALID);
    /* the DS4 backend rounds */
    assert_int_equal(g_ds4.ops->store_f16(g_ds4.ctx, z, DSV4_TYPE_F32, x, R, W, &err), DSV4_OK);
    assert_memory_not_equal(z, x, sizeof x);
    memcpy(y, x, sizeof x);
    assert_int_equal(g_ds4.ops->fp8_kv(g_ds4.ctx, y, R, W, 64, &err), DSV4_OK);
    assert_memory_not_equal(y, x, sizeof x);
}

static double silu_ref(double v) { return v / (1.0 + exp(-v)); }

static void test_moe_is_dequantized_double_product(void **state) {
    (void)state;
    enum { IN = 256, FF = 256, EMBD = 256, NE = 4, K = 2, T = 3 };
    float *dg = malloc(sizeof(float) * IN * FF * NE), *du = malloc(sizeof(float) * IN * FF * NE);
    float *dd = malloc(sizeof(float) * FF * EMBD * NE);
    assert_true(dg && du && dd);
    dsv4_tensor gate = make_weight(DSV4_TYPE_IQ2_XXS, IN, FF, NE, 1, dg);
    dsv4_tensor up = make_weight(DSV4_TYPE_IQ2_XXS, IN, FF, NE, 2, du);
    dsv4_tensor down = make_weight(DSV4_TYPE_Q2_K, FF, EMBD, NE, 3, dd);
    float x[T * IN], out1[T * EMBD], out2[T * EMBD], one[EMBD];
    uint64_t s = 11;
    for (int i = 0; i < T * IN; i++) x[i] = urand(&s) * 4.0f;
    const int32_t sel[T * K] = {0, 3, 2, 0, 1, 2};
    const float wt[T * K] = {0.7f, 0.4f, 1.1f, 0.2f, 0.5f, 0.9f};
    const float clamp = 0.05f; /* small enough that the clamp is active for some rows */
    dsv4_error err;
    assert_int_equal(g_b1.ops->moe(g_b1.ctx, &gate, &up, &down, x, T, sel, wt, K, clamp, out1, &err),
                     DSV4_OK);
    assert_int_equal(g_b2.ops->moe(g_b2.ctx, &gate, &up, &down, x, T, sel, wt, K, clamp, out2, &err),
                     DSV4_OK);
    assert_memory_equal(out1, out2, sizeof out1);
    for (int t = 0; t < T; t++) {
        assert_int_equal(g_b2.ops->moe(g_b2.ctx, &gate, &up, &down, x + t * IN, 1, sel + t * K, wt + t * K, K,
                                       clamp, one, &err),
                         DSV4_OK);
        assert_memory_equal(one, out1 + t * EMBD, sizeof one);
        double mid[K][FF];
        for (int k = 0; k < K; k++) {
            const int e = sel[t * K + k];
            for (int r = 0; r < FF; r++) {
                double g = dot_ref(dg + ((size_t)e * FF + r) * IN, x + t * IN, IN);
                double u = dot_ref(du + ((size_t)e * FF + r) * IN, x + t * IN, IN);
                g = fmin(g, clamp), u = fmax(-clamp, fmin(u, clamp));
                mid[k][r] = silu_ref(g) * u * wt[t * K + k];
            }
        }
        for (int o = 0; o < EMBD; o++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++)
                for (int r = 0; r < FF; r++) {
                    const double p = (double)dd[((size_t)sel[t * K + k] * EMBD + o) * FF + r] * mid[k][r];
                    ref += p, mag += fabs(p);
                }
            /* mid is rounded to f32 once in the engine: ~6e-8 relative per term */
            if (fabs(out1[t * EMBD + o] - ref) > 1e-6 * mag + 1e-12)
                fail_msg("moe token %d row %d: %.9g, double reference %.9g", t, o, out1[t * EMBD + o], ref);
        }
    }
    free((void *)gate.data), free((void *)up.data), free((void *)down.data);
    free(dg), free(du), free(dd);
}

static void test_mode_validation(void **state) {
    (void)state;
    dsv4_error err;
    assert_int_equal(dsv4_backend_cpu_set_numerics(&g_ds4, (dsv4_numerics)7, &err), DSV4_ERR_INVALID);
    assert_non_null(strstr(err.msg, "numerics"));
    dsv4_backend none = {0};
    assert_int_equal(dsv4_backend_cpu_set_numerics(&none, DSV4_NUMERICS_EXACT, &err), DSV4_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_is_dequantized_double_product),
        cmocka_unit_test(test_kv_roundings_are_identity),
        cmocka_unit_test(test_moe_is_dequantized_double_product),
        cmocka_unit_test(test_mode_validation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
