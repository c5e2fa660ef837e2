/* Sampler (spec §6): RNG, greedy, temperature/top_k/min_p/top_p, logprobs. */
#include "common/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/sampler.h"

/* Independent xorshift64* from the spec text. */
static uint64_t ref_next(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void test_rng(void **state) {
    (void)state;
    uint64_t a = 123, b = 123;
    /* first outputs for seed 123, also computed offline with Python big integers */
    const uint64_t known[4] = {0x56ec19ce33f33c71ull, 0x24a228dcaf757d1aull, 0x6d25258fdcd68386ull,
                               0xa40a4afb1ea0b152ull};
    for (int i = 0; i < 4; i++) {
        uint64_t r = ref_next(&b);
        assert_int_equal(r, known[i]);
        assert_int_equal(dsv4_rng_next(&a), r);
    }
    for (int i = 0; i < 1000; i++) {
        uint64_t r = ref_next(&b);
        float u = dsv4_rng_uniform(&a);
        assert_true(u == (float)((r >> 40) & 0xffffff) / 16777216.0f);
        assert_true(u >= 0.0f && u < 1.0f);
    }
    /* zero state is replaced before use */
    uint64_t z = 0, z2 = 0x9e3779b97f4a7c15ull;
    assert_int_equal(dsv4_rng_next(&z), ref_next(&z2));
    uint64_t s123 = 123;
    assert_float_equal(dsv4_rng_uniform(&s123), 0.3395400643348694, 1e-9);
}

static void test_greedy(void **state) {
    (void)state;
    const float l[] = {1.0f, 3.0f, 3.0f, 2.0f};
    assert_int_equal(dsv4_sample_argmax(l, 4), 1);
    const float all_low[] = {-2e30f, -INFINITY, NAN};
    assert_int_equal(dsv4_sample_argmax(all_low, 3), 0); /* nothing beats -1e30 */
    dsv4_sampler s;
    dsv4_sampling p = DSV4_SAMPLING_DEFAULTS;
    p.temperature = 0.0f;
    dsv4_sampler_init(&s, p, 99);
    int32_t tok = -1;
    dsv4_error err;
    assert_int_equal(dsv4_sampler_sample(&s, l, 4, &tok, &err), DSV4_OK);
    assert_int_equal(tok, 1);
    assert_int_equal(s.rng, 99); /* greedy consumes no uniform */
    dsv4_sampler_free(&s);
}

static void make_logits(float *l, const double *p, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)log(p[i]);
}

/* seed 123 -> u = 0.33954, 0.14310, 0.42635, 0.64078; cumulative p = .1 .3 .6 1 -> ids 2 1 2 3 */
static void test_exact_draws(void **state) {
    (void)state;
    const double p[4] = {0.1, 0.2, 0.3, 0.4};
    float l[4];
    make_logits(l, p, 4);
    dsv4_sampler s;
    dsv4_sampling sp = {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0};
    dsv4_sampler_init(&s, sp, 123);
    const int32_t want[4] = {2, 1, 2, 3};
    dsv4_error err;
    for (int i = 0; i < 4; i++) {
        int32_t t;
        assert_int_equal(dsv4_sampler_sample(&s, l, 4, &t, &err), DSV4_OK);
        assert_int_equal(t, want[i]);
    }
    /* the same through the sorted (top_p < 1) path, whose order here is 3 2 1 0:
     * u*1.0 = .3395 -> id 3 (.4); .1431 -> 3; .4263 -> 2 (.4+.3 > .4263); .6408 -> 2 */
    sp.top_p = 0.999f;
    dsv4_sampler_free(&s);
    dsv4_sampler_init(&s, sp, 123);
    const int32_t want2[4] = {3, 3, 2, 2};
    for (int i = 0; i < 4; i++) {
        int32_t t;
        assert_int_equal(dsv4_sampler_sample(&s, l, 4, &t, &err), DSV4_OK);
        assert_int_equal(t, want2[i]);
    }
    dsv4_sampler_free(&s);
}

static void draw_counts(dsv4_sampling sp, const float *l, int n, int draws, uint64_t seed, int *counts) {
    dsv4_sampler s;
    dsv4_sampler_init(&s, sp, seed);
    memset(counts, 0, sizeof(int) * (size_t)n);
    dsv4_error err;
    for (int i = 0; i < draws; i++) {
        int32_t t = -1;
        assert_int_equal(dsv4_sampler_sample(&s, l, (uint32_t)n, &t, &err), DSV4_OK);
        assert_true(t >= 0 && t < n);
        counts[t]++;
    }
    dsv4_sampler_free(&s);
}

static void expect_distribution(const int *counts, const double *want, int n, int draws) {
    for (int i = 0; i < n; i++) {
        double mean = draws * want[i];
        double sigma = sqrt(draws * want[i] * (1.0 - want[i]));
        if (want[i] == 0.0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        if (fabs(counts[i] - mean) > 3.0 * sigma)
            fprintf(stderr, "token %d: %d draws, expected %.1f +- %.1f\n", i, counts[i], mean, 3 * sigma);
        assert_true(fabs(counts[i] - mean) <= 3.0 * sigma);
    }
}

static void test_distributions(void **state) {
    (void)state;
    const int N = 20000;
    const double p[4] = {0.1, 0.2, 0.3, 0.4};
    float l[4];
    make_logits(l, p, 4);
    int c[4];
    /* T = 1: the softmax itself, in both paths */
    dsv4_sampling sp = {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0};
    draw_counts(sp, l, 4, N, 123, c);
    expect_distribution(c, p, 4, N);
    sp.top_k = 4;
    draw_counts(sp, l, 4, N, 5, c);
    expect_distribution(c, p, 4, N);
    /* T = 2: p^(1/2), renormalised */
    sp = (dsv4_sampling){.temperature = 2.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0};
    double q[4], z = 0;
    for (int i = 0; i < 4; i++) z += q[i] = sqrt(p[i]);
    for (int i = 0; i < 4; i++) q[i] /= z;
    draw_counts(sp, l, 4, N, 77, c);
    expect_distribution(c, q, 4, N);
    /* min_p 0.2 relative to the top: q/q_max = .25 .5 .75 1 -> with 0.3: id 0 (.25) is cut */
    sp = (dsv4_sampling){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.3f, .top_k = 0};
    const double pm[4] = {0.0, 0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9};
    draw_counts(sp, l, 4, N, 8, c);
    expect_distribution(c, pm, 4, N);
    sp.top_p = 0.999f; /* sorted path applies the same cut */
    draw_counts(sp, l, 4, N, 9, c);
    expect_distribution(c, pm, 4, N);
    sp.top_k = 3;
    draw_counts(sp, l, 4, N, 10, c);
    expect_distribution(c, pm, 4, N);
    /* top_p 0.65: sorted .4 .3 -> cumulative .4 then .7 >= .65 (inclusive) -> ids 3 and 2 only */
    sp = (dsv4_sampling){.temperature = 1.0f, .top_p = 0.65f, .min_p = 0.0f, .top_k = 0};
    const double pp[4] = {0.0, 0.0, 0.3 / 0.7, 0.4 / 0.7};
    draw_counts(sp, l, 4, N, 11, c);
    expect_distribution(c, pp, 4, N);
    sp.top_k = 1024;
    draw_counts(sp, l, 4, N, 12, c);
    expect_distribution(c, pp, 4, N);
    /* top_k 2 alone */
    sp = (dsv4_sampling){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 2};
    draw_counts(sp, l, 4, N, 13, c);
    expect_distribution(c, pp, 4, N);
}

static void test_top_k_one_is_greedy(void **state) {
    (void)state;
    uint64_t seed = 42;
    float l[64];
    dsv4_sampling sp = {.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.05f, .top_k = 1};
    dsv4_sampler s;
    dsv4_sampler_init(&s, sp, 1);
    dsv4_error err;
    for (int it = 0; it < 200; it++) {
        for (int i = 0; i < 64; i++) l[i] = (float)(test_rng_uniform(&seed) * 10.0);
        if (it % 3 == 0) l[7] = l[40] = 11.0f; /* a tie: the lower id wins */
        int32_t t;
        assert_int_equal(dsv4_sampler_sample(&s, l, 64, &t, &err), DSV4_OK);
        assert_int_equal(t, dsv4_sample_argmax(l, 64));
    }
    dsv4_sampler_free(&s);
}

static void test_ties_and_non_finite(void **state) {
    (void)state;
    /* all equal, top_p .5: sorted by id on ties -> ids 0 and 1 reach exactly .5 */
    const float eq[4] = {0, 0, 0, 0};
    int c[4];
    dsv4_sampling sp = {.temperature = 1.0f, .top_p = 0.5f, .min_p = 0.0f, .top_k = 0};
    draw_counts(sp, eq, 4, 4000, 3, c);
    const double half[4] = {0.5, 0.5, 0, 0};
    expect_distribution(c, half, 4, 4000);
    /* top_k keeps the lower ids on ties too */
    sp = (dsv4_sampling){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 2};
    draw_counts(sp, eq, 4, 4000, 4, c);
    expect_distribution(c, half, 4, 4000);
    /* top_p is measured within the renormalised top-k: id 0 alone already reaches .5 */
    sp.top_p = 0.5f;
    draw_counts(sp, eq, 4, 4000, 4, c);
    assert_int_equal(c[0], 4000);
    /* -inf and NaN never drawn */
    const float nf[4] = {-INFINITY, 0.0f, NAN, 0.0f};
    for (int k = 0; k <= 3; k += 3) {
        sp = (dsv4_sampling){.temperature = 1.0f, .top_p = k ? 0.99f : 1.0f, .min_p = 0.0f, .top_k = k};
        draw_counts(sp, nf, 4, 2000, 5, c);
        assert_int_equal(c[0] + c[2], 0);
    }
    /* same seed -> same sequence */
    float l[100];
    uint64_t seed = 9;
    for (int i = 0; i < 100; i++) l[i] = (float)(test_rng_uniform(&seed) * 4.0);
    dsv4_sampler a, b;
    dsv4_sampling d = DSV4_SAMPLING_DEFAULTS;
    d.top_p = 0.9f;
    dsv4_sampler_init(&a, d, 2024);
    dsv4_sampler_init(&b, d, 2024);
    dsv4_error err;
    int differs_from_greedy = 0;
    for (int i = 0; i < 100; i++) {
        int32_t x, y;
        assert_int_equal(dsv4_sampler_sample(&a, l, 100, &x, &err), DSV4_OK);
        assert_int_equal(dsv4_sampler_sample(&b, l, 100, &y, &err), DSV4_OK);
        assert_int_equal(x, y);
        differs_from_greedy += x != dsv4_sample_argmax(l, 100);
    }
    assert_true(differs_from_greedy > 0);
    dsv4_sampler_free(&a);
    dsv4_sampler_free(&b);
}

static void test_logprobs(void **state) {
    (void)state;
    const float l[5] = {1.0f, 3.0f, -INFINITY, 2.0f, 3.0f};
    long double ref = logl(expl(1.0L) + expl(3.0L) + expl(2.0L) + expl(3.0L));
    assert_float_equal(dsv4_logsumexp(l, 5), (double)ref, 1e-12);
    dsv4_token_logprob top[5];
    assert_int_equal(dsv4_top_logprobs(l, 5, 3, top), 3);
    assert_int_equal(top[0].id, 1); /* tie 3.0 at ids 1 and 4: lower first */
    assert_int_equal(top[1].id, 4);
    assert_int_equal(top[2].id, 3);
    assert_float_equal(top[0].logprob, (double)(3.0L - ref), 1e-6);
    assert_float_equal(top[2].logprob, (double)(2.0L - ref), 1e-6);
    assert_int_equal(dsv4_top_logprobs(l, 5, 5, top), 4); /* only 4 finite */
    const float none[2] = {-INFINITY, NAN};
    assert_true(isinf(dsv4_logsumexp(none, 2)));
    assert_int_equal(dsv4_top_logprobs(none, 2, 2, top), 0);
}

/* Whole-vocabulary sampling with top_p = 1 as the spec states it: every finite token's
 * q = expf((l - max) / temp) in id order, kept when q >= min_p, summed, then one draw walking the
 * same tokens. The sampler skips tokens far below the min_p cut without calling expf; it must
 * pick the same token and consume the same RNG draws on any input. */
static int32_t ref_full_vocab(const float *l, uint32_t n, float temp, float min_p, uint64_t *rng) {
    float mx = -1e30f;
    int32_t best = 0;
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(l[i]) && l[i] > mx) mx = l[i], best = (int32_t)i;
    float sum = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(l[i])) continue;
        const float q = expf((l[i] - mx) / temp);
        if (q >= min_p) sum += q;
    }
    if (sum <= 0.0f || !isfinite(sum)) return best;
    float r = dsv4_rng_uniform(rng) * sum;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(l[i])) continue;
        const float q = expf((l[i] - mx) / temp);
        if (q < min_p) continue;
        r -= q;
        if (r <= 0.0f) return (int32_t)i;
    }
    return best;
}

/* The same with top_p < 1, as the spec states it: every finite token as a candidate, sorted by
 * logit descending (ties: lower id first), the min_p / top_p walk, one draw. */
typedef struct ref_cand {
    int32_t id;
    float logit, prob;
} ref_cand;
static int ref_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}
static int32_t ref_top_p(const float *l, uint32_t n, float temp, float top_p, float min_p, uint64_t *rng,
                         ref_cand *c) {
    float mx = -1e30f;
    int32_t best = 0;
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(l[i]) && l[i] > mx) mx = l[i], best = (int32_t)i;
    uint32_t m = 0;
    float sum = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(l[i])) continue;
        const float q = expf((l[i] - mx) / temp);
        c[m++] = (ref_cand){(int32_t)i, l[i], q};
        sum += q;
    }
    if (sum <= 0.0f || !isfinite(sum)) return best;
    qsort(c, m, sizeof *c, ref_cmp);
    const float min_prob = (c[0].prob / sum) * min_p;
    float fsum = 0.0f;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (i > 0 && c[i].prob / sum < min_prob) break;
        fsum += c[i].prob;
        kept++;
        if (fsum / sum >= top_p) break;
    }
    if (kept == 0) return best;
    float r = dsv4_rng_uniform(rng) * fsum;
    for (uint32_t i = 0; i < kept; i++) {
        r -= c[i].prob;
        if (r <= 0.0f) return c[i].id;
    }
    return c[kept - 1].id;
}

static void test_min_p_skip_matches_reference(void **state) {
    (void)state;
    enum { N = 3000 };
    static float l[N];
    static unsigned char scratch[N * 12]; /* dsv4_sample's candidates: 12 bytes each */
    static ref_cand rc[N];
    const float temps[] = {0.05f, 0.3f, 0.7f, 1.0f, 1.5f, 4.0f};
    const float min_ps[] = {0.0f, 1e-6f, 0.01f, 0.05f, 0.5f, 0.999f, 1.0f};
    uint64_t gen = 99;
    int trials = 0;
    for (int dist = 0; dist < 3; dist++)
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (size_t mi = 0; mi < sizeof min_ps / sizeof *min_ps; mi++)
                for (int rep = 0; rep < 4; rep++, trials++) {
                    for (uint32_t i = 0; i < N; i++) {
                        const float u = dsv4_rng_uniform(&gen);
                        /* flat, peaked, and a few ties at the top */
                        l[i] = dist == 0   ? 10.0f * u - 5.0f
                               : dist == 1 ? 30.0f * u * u * u
                                           : (float)(int)(4.0f * u);
                    }
                    if (rep == 3) l[17] = NAN, l[18] = -INFINITY;
                    const dsv4_sampling p = {
                        .temperature = temps[ti], .top_p = 1.0f, .min_p = min_ps[mi], .top_k = 0};
                    uint64_t a = 1000 + (uint64_t)trials, b = a;
                    const int32_t got = dsv4_sample(l, N, p, &a, NULL);
                    const int32_t want = ref_full_vocab(l, N, temps[ti], min_ps[mi], &b);
                    assert_int_equal(got, want);
                    assert_true(a == b); /* the same draws consumed */
                    /* and through the sorted path, top_p < 1 */
                    const float tps[2] = {0.3f, 0.95f};
                    for (int k = 0; k < 2; k++) {
                        const dsv4_sampling pp = {
                            .temperature = temps[ti], .top_p = tps[k], .min_p = min_ps[mi], .top_k = 0};
                        a = 5000 + (uint64_t)trials, b = a;
                        const int32_t g2 = dsv4_sample(l, N, pp, &a, scratch);
                        const int32_t w2 = ref_top_p(l, N, temps[ti], tps[k], min_ps[mi], &b, rc);
                        assert_int_equal(g2, w2);
                        assert_true(a == b);
                    }
                }
    assert_int_equal(trials, 3 * 6 * 7 * 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_exact_draws),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_ties_and_non_finite),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_min_p_skip_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
