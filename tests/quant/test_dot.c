/* Dot kernels: SIMD == scalar bitwise on random rows of many lengths, and every kernel against
 * a double-precision dot of the dequantized weight and activation within a rounding bound. */
#include "common/testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quant/quant.h"
#include "quant/quant_internal.h"

#define MAX_N 4096

static uint16_t rand_f16_scale(uint64_t *s) {
    /* finite, normal-range scale of random sign: 2^[-12, 0) * (1 + u) */
    const double v = ldexp(1.0 + test_rng_uniform(s), -(int)(test_rng_next(s) % 12) - 1);
    return dsv4_f32_to_f16((float)(test_rng_next(s) & 1 ? -v : v));
}

static void rand_bytes(uint64_t *s, void *p, size_t n) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)test_rng_next(s);
}

/* Random weight row of `type`: random codes (full byte range), valid f16 scales. */
static void rand_weights(uint64_t *s, uint32_t type, void *dst, int64_t n) {
    uint64_t bytes;
    assert_true(dsv4_type_row_bytes(type, (uint64_t)n, &bytes));
    rand_bytes(s, dst, bytes);
    if (type == DSV4_TYPE_Q8_0) {
        for (dsv4_block_q8_0 *b = dst; b < (dsv4_block_q8_0 *)dst + n / 32; b++) b->d = rand_f16_scale(s);
    } else if (type == DSV4_TYPE_Q2_K) {
        for (dsv4_block_q2_k *b = dst; b < (dsv4_block_q2_k *)dst + n / 256; b++) {
            b->d = rand_f16_scale(s) & 0x7fff;
            b->dmin = rand_f16_scale(s) & 0x7fff;
        }
    } else if (type == DSV4_TYPE_Q4_K) {
        for (dsv4_block_q4_k *b = dst; b < (dsv4_block_q4_k *)dst + n / 256; b++) {
            b->d = rand_f16_scale(s) & 0x7fff;
            b->dmin = rand_f16_scale(s) & 0x7fff;
        }
    } else if (type == DSV4_TYPE_IQ2_XXS) {
        for (dsv4_block_iq2_xxs *b = dst; b < (dsv4_block_iq2_xxs *)dst + n / 256; b++)
            b->d = rand_f16_scale(s);
    } else if (type == DSV4_TYPE_F16) {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = dsv4_f32_to_f16((float)(test_rng_uniform(s) * 4.0 - 2.0));
    }
}

/* Random Q8_K activation with codes over the full int8 range (including -128) and consistent bsums. */
static void rand_q8_k(uint64_t *s, dsv4_q8_k *x, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++) {
        rand_bytes(s, x[b].qs, 256);
        x[b].d = (float)((test_rng_uniform(s) - 0.5) * 0.1);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += x[b].qs[16 * j + i];
            x[b].bsums[j] = (int16_t)sum;
        }
    }
}

static void rand_q8_0_act(uint64_t *s, dsv4_q8_0_act *x, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        rand_bytes(s, x[b].qs, 32);
        x[b].d = (float)(test_rng_uniform(s) * 0.1);
    }
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static bool have_avx2(void) {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

/* Magnitude of element i's terms: |w_i| for plain and Q8_0/IQ2 codes; for K-quants the scale
 * part and the min part separately (|d*sc*q| + |dmin*m|), since the kernel rounds each. */
static double term_mag(uint32_t type, const void *w, const float *wd, int64_t i) {
    if (type == DSV4_TYPE_Q2_K) {
        const dsv4_block_q2_k *b = (const dsv4_block_q2_k *)w + i / 256;
        const double mterm = fabs(dsv4_f16_to_f32(b->dmin) * (double)(b->scales[(i % 256) / 16] >> 4));
        return fabs(wd[i] + mterm) + mterm;
    }
    if (type == DSV4_TYPE_Q4_K) {
        const dsv4_block_q4_k *b = (const dsv4_block_q4_k *)w + i / 256;
        uint8_t sc, m;
        quant_q4k_scale_min((int)((i % 256) / 32), b->scales, &sc, &m);
        const double mterm = fabs(dsv4_f16_to_f32(b->dmin) * (double)m);
        return fabs(wd[i] + mterm) + mterm;
    }
    return fabs(wd[i]);
}

/* Reference: dequantized weights (float) times dequantized activation d*q, summed in double.
 * Bound: every float operation of a kernel rounds with relative error <= u = 2^-24. A block's
 * term takes <= 5 roundings (scale products, int->float of sums >= 2^24, the final product,
 * the K-quant subtraction), the sequential sum over `steps` terms adds <= steps*u of the
 * magnitude, and the reference's float dequantization <= 2u. So
 *   |kernel - ref| <= (steps + 8) * u * M,  M = Σ_i |x_i| * term_mag_i,
 * checked with 2u per step for slack (first-order in u; u² terms are far below). */
static void check_vs_reference(uint32_t type, const void *w, const float *xd, int64_t n, float got,
                               int steps) {
    static float wd[MAX_N];
    assert_true(quant_dequant_row(type, w, wd, n));
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        ref += (double)wd[i] * xd[i];
        mag += fabs((double)xd[i]) * term_mag(type, w, wd, i);
    }
    const double bound = (steps + 8) * ldexp(1.0, -23) * mag + 1e-30;
    if (!(fabs((double)got - ref) <= bound)) {
        fail_msg("type %u n %lld: got %.9g ref %.9g bound %.3g", type, (long long)n, got, ref, bound);
    }
}

static void test_q8_0_dot(void **state) {
    (void)state;
    uint64_t s = 1;
    static dsv4_block_q8_0 w[MAX_N / 32];
    static dsv4_q8_0_act x[MAX_N / 32];
    static float xd[MAX_N];
    for (int64_t n = 32; n <= MAX_N; n += (n < 64 * 32 ? 32 : 32 * 37)) {
        rand_weights(&s, DSV4_TYPE_Q8_0, w, n);
        rand_q8_0_act(&s, x, n);
        const float ref = quant_dot_q8_0_scalar(w, x, n);
        assert_int_equal(fbits(quant_dot_q8_0(w, x, n)), fbits(ref));
        if (have_avx2()) assert_int_equal(fbits(quant_dot_q8_0_avx2(w, x, n)), fbits(ref));
        for (int64_t i = 0; i < n; i++) xd[i] = x[i / 32].d * (float)x[i / 32].qs[i % 32];
        check_vs_reference(DSV4_TYPE_Q8_0, w, xd, n, ref, (int)(n / 32));
    }
}

typedef float (*kq_fn)(const void *, const dsv4_q8_k *, int64_t);

static void kquant_case(uint32_t type, kq_fn scalar, kq_fn dispatch, kq_fn avx2) {
    uint64_t s = 1000 + type;
    static uint8_t w[MAX_N / 256 * 144];
    static dsv4_q8_k x[MAX_N / 256];
    static float xd[MAX_N];
    for (int rep = 0; rep < 3; rep++) {
        for (int64_t n = 256; n <= MAX_N; n += 256) {
            rand_weights(&s, type, w, n);
            rand_q8_k(&s, x, n);
            const float ref = scalar(w, x, n);
            assert_int_equal(fbits(dispatch(w, x, n)), fbits(ref));
            if (have_avx2()) assert_int_equal(fbits(avx2(w, x, n)), fbits(ref));
            for (int64_t i = 0; i < n; i++) xd[i] = x[i / 256].d * (float)x[i / 256].qs[i % 256];
            check_vs_reference(type, w, xd, n, ref, (int)(n / 256));
        }
    }
}

static void test_q2_k_dot(void **state) {
    (void)state;
    kquant_case(DSV4_TYPE_Q2_K, quant_dot_q2_k_scalar, quant_dot_q2_k, quant_dot_q2_k_avx2);
}
static void test_q4_k_dot(void **state) {
    (void)state;
    kquant_case(DSV4_TYPE_Q4_K, quant_dot_q4_k_scalar, quant_dot_q4_k, quant_dot_q4_k_avx2);
}
static void test_iq2_xxs_dot(void **state) {
    (void)state;
    kquant_case(DSV4_TYPE_IQ2_XXS, quant_dot_iq2_xxs_scalar, quant_dot_iq2_xxs, quant_dot_iq2_xxs_avx2);
}

static void test_f16_bf16_f32_dot(void **state) {
    (void)state;
    uint64_t s = 5;
    static uint16_t w[MAX_N], wb[MAX_N];
    static float x[MAX_N], wf[MAX_N];
    for (int64_t n = 1; n <= MAX_N; n += (n < 300 ? 1 : 397)) {
        rand_weights(&s, DSV4_TYPE_F16, w, n);
        for (int64_t i = 0; i < n; i++) {
            x[i] = (float)(test_rng_uniform(&s) * 2.0 - 1.0);
            wf[i] = (float)(test_rng_uniform(&s) * 2.0 - 1.0);
            wb[i] = dsv4_f32_to_bf16(wf[i]);
        }
        const float ref = quant_dot_f16_scalar(w, x, n);
        assert_int_equal(fbits(quant_dot_f16(w, x, n)), fbits(ref));
        if (have_avx2()) assert_int_equal(fbits(quant_dot_f16_avx2(w, x, n)), fbits(ref));
        const int steps = (int)(n / 8) + 4;
        check_vs_reference(DSV4_TYPE_F16, w, x, n, ref, steps);
        check_vs_reference(DSV4_TYPE_BF16, wb, x, n, quant_dot_bf16(wb, x, n), steps);
        /* F32: double accumulation, so the only error is the final rounding to float (plus the
         * double sum's own error, ~n * 2^-53 of the magnitude) */
        long double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            exact += (long double)wf[i] * x[i];
            mag += fabsl((long double)wf[i] * x[i]);
        }
        const float got = quant_dot_f32(wf, x, n);
        assert_true(fabsl((long double)got - exact) <= fabsl(exact) * 0x1p-24L + mag * n * 0x1p-52L + 1e-30L);
    }
    /* the documented lane order, by hand: n = 9 of ones and x = 2^k: lane 0 gets 2^0 + 2^8 */
    uint16_t ones[9];
    float p2[9];
    for (int i = 0; i < 9; i++) {
        ones[i] = 0x3c00;
        p2[i] = ldexpf(1.0f, i);
    }
    assert_true(quant_dot_f16_scalar(ones, p2, 9) == 511.0f);
    assert_true(quant_dot_f16(ones, p2, 9) == 511.0f);
    /* order matters: big + 1 - big. Lane 0 = 2^30 + 1 (rounds to 2^30), lane 4 = -2^30: total 0,
     * whereas an exact sum would give 1. */
    float big[8] = {0x1p30f, 0, 0, 0, -0x1p30f, 0, 0, 0};
    uint16_t wh[9] = {0x3c00, 0, 0, 0, 0x3c00, 0, 0, 0, 0x3c00};
    float xv[9];
    memcpy(xv, big, sizeof(big));
    xv[8] = 1.0f;
    assert_true(quant_dot_f16_scalar(wh, xv, 9) == 0.0f);
    assert_true(quant_dot_f16(wh, xv, 9) == 0.0f);
}

/* Q8_0 by hand: one block, w = d 0.5 codes all 2, x codes all 3 with d_x = 0.25:
 * isum = 32*6 = 192, (0.5*0.25)*192 = 24. */
static void test_q8_0_dot_hand(void **state) {
    (void)state;
    dsv4_block_q8_0 w;
    dsv4_q8_0_act x;
    w.d = 0x3800;
    memset(w.qs, 2, 32);
    x.d = 0.25f;
    memset(x.qs, 3, 32);
    assert_true(quant_dot_q8_0(&w, &x, 32) == 24.0f);
    assert_true(quant_dot_q8_0_scalar(&w, &x, 32) == 24.0f);
}

/* The F16C scale conversion of the AVX2 kernels equals dsv4_f16_to_f32 for all 65536 patterns
 * (subnormals, infinities, quiet and signalling NaN payloads included). */
static void test_f16_scale_exhaustive(void **state) {
    (void)state;
    if (!have_avx2()) skip();
    for (uint32_t h = 0; h < 65536; h++)
        assert_int_equal(fbits(quant_f16_to_f32_avx2((uint16_t)h)), fbits(dsv4_f16_to_f32((uint16_t)h)));
    /* hand values: smallest subnormal 2^-24, a signalling NaN keeps its quiet bit clear */
    assert_int_equal(fbits(quant_f16_to_f32_avx2(0x0001)), 0x33800000u);
    assert_int_equal(fbits(quant_f16_to_f32_avx2(0x7c01)), 0x7f802000u);
    assert_int_equal(fbits(quant_f16_to_f32_avx2(0xfe00)), 0xffc00000u);
}

/* Any non-NaN f16 pattern: zeros, subnormals, infinities, both signs. */
static uint16_t rand_nonnan_f16(uint64_t *s) {
    for (;;) {
        const uint16_t h = (uint16_t)test_rng_next(s);
        if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) return h;
    }
}

typedef void (*multi_fn)(const void *, const void *const *, int, int64_t, float *);
typedef float (*single_fn)(const void *, const void *, int64_t);

static void mq8_0(const void *w, const void *const *x, int nx, int64_t n, float *o) {
    quant_dot_q8_0_x(w, (const dsv4_q8_0_act *const *)x, nx, n, o);
}
static void mq8_0_avx2(const void *w, const void *const *x, int nx, int64_t n, float *o) {
    quant_dot_q8_0_x_avx2(w, (const dsv4_q8_0_act *const *)x, nx, n, o);
}
static float sq8_0(const void *w, const void *x, int64_t n) { return quant_dot_q8_0_scalar(w, x, n); }
#define KQ_WRAP(name)                                                                                        \
    static void m##name(const void *w, const void *const *x, int nx, int64_t n, float *o) {                  \
        quant_dot_##name##_x(w, (const dsv4_q8_k *const *)x, nx, n, o);                                      \
    }                                                                                                        \
    static void m##name##_avx2(const void *w, const void *const *x, int nx, int64_t n, float *o) {           \
        quant_dot_##name##_x_avx2(w, (const dsv4_q8_k *const *)x, nx, n, o);                                 \
    }                                                                                                        \
    static float s##name(const void *w, const void *x, int64_t n) {                                          \
        return quant_dot_##name##_scalar(w, x, n);                                                           \
    }
KQ_WRAP(q2_k)
KQ_WRAP(q4_k)
KQ_WRAP(iq2_xxs)

#define MX 9

/* Multi-activation kernels: every out[i] equals the single-row scalar reference bitwise, for
 * nx = 1..9 (a full group of 8, every smaller count, and 8 + 1), many lengths (Q8_0 lengths cover every
 * number of blocks left after groups of 4), random codes over the full int8 range and weight scales drawn
 * from all non-NaN f16 patterns on one pass and normal scales on the other. */
static void multi_case(uint32_t type, multi_fn disp, multi_fn avx2, single_fn scalar) {
    uint64_t s = 77 + type;
    static uint8_t w[MAX_N / 32 * sizeof(dsv4_block_q8_0)]; /* the largest bytes per element */
    static dsv4_q8_0_act x8[MX][MAX_N / 32];
    static dsv4_q8_k xk[MX][MAX_N / 256];
    const int64_t qk = type == DSV4_TYPE_Q8_0 ? 32 : 256;
    int checked = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t n = qk; n <= MAX_N; n += (type == DSV4_TYPE_Q8_0 && n < 32 * 24 ? 32 : 7 * qk)) {
            rand_weights(&s, type, w, n);
            if (pass == 1) { /* overwrite the scales with arbitrary non-NaN patterns */
                uint64_t bytes;
                assert_true(dsv4_type_row_bytes(type, (uint64_t)n, &bytes));
                const size_t bsz = (size_t)(bytes / (uint64_t)(n / qk));
                for (int64_t b = 0; b < n / qk; b++) {
                    uint8_t *blk = w + b * bsz;
                    const uint16_t d = rand_nonnan_f16(&s), m = rand_nonnan_f16(&s);
                    const size_t off = type == DSV4_TYPE_Q2_K ? 80 : 0; /* Q2_K keeps d, dmin last */
                    memcpy(blk + off, &d, 2);
                    if (type == DSV4_TYPE_Q2_K || type == DSV4_TYPE_Q4_K) memcpy(blk + off + 2, &m, 2);
                }
            }
            const void *xp[MX];
            for (int i = 0; i < MX; i++) {
                if (type == DSV4_TYPE_Q8_0) {
                    rand_q8_0_act(&s, x8[i], n);
                    xp[i] = x8[i];
                } else {
                    rand_q8_k(&s, xk[i], n);
                    xp[i] = xk[i];
                }
            }
            for (int nx = 1; nx <= MX; nx++) {
                float o1[MX], o2[MX];
                disp(w, xp, nx, n, o1);
                if (have_avx2()) avx2(w, xp, nx, n, o2);
                for (int i = 0; i < nx; i++) {
                    const uint32_t ref = fbits(scalar(w, xp[i], n));
                    assert_int_equal(fbits(o1[i]), ref);
                    if (have_avx2()) assert_int_equal(fbits(o2[i]), ref);
                    checked++;
                }
            }
        }
    }
    assert_true(checked > 100);
}

static void test_multi_q8_0(void **state) {
    (void)state;
    multi_case(DSV4_TYPE_Q8_0, mq8_0, mq8_0_avx2, sq8_0);
}
static void test_multi_q2_k(void **state) {
    (void)state;
    multi_case(DSV4_TYPE_Q2_K, mq2_k, mq2_k_avx2, sq2_k);
}
static void test_multi_q4_k(void **state) {
    (void)state;
    multi_case(DSV4_TYPE_Q4_K, mq4_k, mq4_k_avx2, sq4_k);
}
static void test_multi_iq2_xxs(void **state) {
    (void)state;
    multi_case(DSV4_TYPE_IQ2_XXS, miq2_xxs, miq2_xxs_avx2, siq2_xxs);
}

/* A signalling-NaN weight scale gives the same NaN bits as the scalar kernel (the F16C
 * conversion must not quiet it differently from the scalar multiply). */
static void test_snan_scale(void **state) {
    (void)state;
    uint64_t s = 9;
    static dsv4_block_q8_0 w[8];
    static dsv4_q8_0_act x[8];
    rand_weights(&s, DSV4_TYPE_Q8_0, w, 256);
    rand_q8_0_act(&s, x, 256);
    w[5].d = 0xfc15; /* negative signalling NaN with payload */
    const float ref = quant_dot_q8_0_scalar(w, x, 256);
    assert_true(isnan(ref));
    assert_int_equal(fbits(quant_dot_q8_0(w, x, 256)), fbits(ref));
    const dsv4_q8_0_act *xp[1] = {x};
    float o;
    quant_dot_q8_0_x(w, xp, 1, 256, &o);
    assert_int_equal(fbits(o), fbits(ref));
}

static void *simd_thread(void *arg) {
    *(bool *)arg = quant_simd_active();
    return NULL;
}

/* Runs first, before anything decides the dispatch in this process: a forked child with
 * DSV4_NO_SIMD=1 must choose scalar; concurrent first calls must agree. */
static void test_dispatch(void **state) {
    (void)state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("DSV4_NO_SIMD", "1", 1);
        _exit(quant_simd_active() ? 1 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    pthread_t th[4];
    bool r[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, simd_thread, &r[i]), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    const char *env = getenv("DSV4_NO_SIMD");
    const bool forced = env && env[0] && strcmp(env, "0") != 0;
    for (int i = 0; i < 4; i++) assert_int_equal(r[i], have_avx2() && !forced);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),         cmocka_unit_test(test_q8_0_dot_hand),
        cmocka_unit_test(test_q8_0_dot),         cmocka_unit_test(test_q2_k_dot),
        cmocka_unit_test(test_q4_k_dot),         cmocka_unit_test(test_iq2_xxs_dot),
        cmocka_unit_test(test_f16_bf16_f32_dot), cmocka_unit_test(test_f16_scale_exhaustive),
        cmocka_unit_test(test_multi_q8_0),       cmocka_unit_test(test_multi_q2_k),
        cmocka_unit_test(test_multi_q4_k),       cmocka_unit_test(test_multi_iq2_xxs),
        cmocka_unit_test(test_snan_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
