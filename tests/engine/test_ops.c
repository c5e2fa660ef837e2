/* CPU backend ops against hand-derived values and independent double-precision formulas:
 * RoPE frequencies (spec model-attention-hc.md §4.3 table), Sinkhorn, sink attention,
 * compressor pooling (ratio 4 two-lane and ratio 16 one-lane), indexer top-k, router weights,
 * HC post, matmul batching/threading invariance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "common/testutil.h"
#include "graph/rope.h"
#include "model/config.h"
#include "quant/quant.h"

static dsv4_backend g_b, g_b2; /* 1 and 2 threads */

static int setup(void **state) {
    (void)state;
    dsv4_error err;
    if (dsv4_backend_cpu_create(1, &g_b, &err) != DSV4_OK) return -1;
    if (dsv4_backend_cpu_create(2, &g_b2, &err) != DSV4_OK) return -1;
    return 0;
}
static int teardown(void **state) {
    (void)state;
    dsv4_backend_destroy(&g_b);
    dsv4_backend_destroy(&g_b2);
    return 0;
}

/* An F32 tensor view over host floats: ne0 values per row, ne1 rows. */
static dsv4_tensor f32_tensor(const float *data, uint64_t ne0, uint64_t ne1) {
    dsv4_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "test";
    t.type = DSV4_TYPE_F32;
    t.n_dims = ne1 > 1 ? 2 : 1;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = 1, t.ne[3] = 1;
    t.row_bytes = ne0 * 4;
    t.nbytes = ne0 * ne1 * 4;
    t.data = data;
    return t;
}

static float urand(uint64_t *s) { return (float)(test_rng_uniform(s) * 2.0 - 1.0); }

/* ---- RoPE ---- */

static dsv4_config rope_cfg(uint32_t *ratios) {
    dsv4_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2;
    c.n_rot = 64;
    c.compress_ratio = ratios;
    c.rope_freq_base = 10000.0f;
    c.compress_rope_freq_base = 160000.0f;
    c.rope_scale_factor = 16.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    c.rope_orig_ctx = 65536;
    return c;
}

static void test_rope_yarn_frequency_table(void **state) {
    (void)state;
    uint32_t ratios[2] = {0, 4};
    dsv4_config c = rope_cfg(ratios);
    dsv4_rope r = dsv4_rope_for_layer(&c, 1);
    /* spec §4.3: lo = 15, hi = 25 (raw 15.4533, 24.7084), base 160000, scale 1/16 */
    assert_true(r.corr_lo == 15.0f && r.corr_hi == 25.0f);
    assert_true(r.freq_base == 160000.0f && r.freq_scale == 1.0f / 16.0f && r.ext_factor == 1.0f);
    float th[32], m = 0;
    cpu_rope_thetas(&r, 1, th, &m);
    assert_true(m == 1.0f); /* attn_factor * (1 + 0.1 ln 16) is exactly 1.0f */
    static const struct {
        int k;
        double freq;
    } table[] = {
        {0, 1},           {1, 0.687656},    {2, 0.472871},    {4, 0.223607},    {8, 0.05},
        {15, 3.63554e-3}, {16, 2.26563e-3}, {17, 1.39680e-3}, {18, 8.49690e-4}, {20, 2.96978e-4},
        {24, 1.95313e-5}, {25, 5.37231e-6}, {31, 5.68053e-7},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const double got = th[table[i].k];
        if (fabs(got - table[i].freq) > 1e-5 * table[i].freq)
            fail_msg("k=%d: theta/pos %.7g, table %.7g", table[i].k, got, table[i].freq);
    }
    /* independent formula at a large position: blend of base^(-2k/64) and its 1/16 by the ramp */
    cpu_rope_thetas(&r, 3000, th, NULL);
    for (int k = 0; k < 32; k++) {
        const double ext = pow(160000.0, -2.0 * k / 64.0),
                     ramp = 1.0 - fmin(1.0, fmax(0.0, (k - 15.0) / 10.0));
        const double want = 3000.0 * (ext / 16.0 * (1.0 - ramp) + ext * ramp);
        if (fabs(th[k] - want) > 2e-5 * want) fail_msg("pos 3000 k=%d: %.8g vs %.8g", k, th[k], want);
    }
}

static void test_rope_plain_base(void **state) {
    (void)state;
    uint32_t ratios[2] = {0, 4};
    dsv4_config c = rope_cfg(ratios);
    dsv4_rope r = dsv4_rope_for_layer(&c, 0);
    assert_true(r.freq_base == 10000.0f && r.freq_scale == 1.0f && r.ext_factor == 0.0f &&
                r.attn_factor == 1.0f);
    float th[32], m = 0;
    cpu_rope_thetas(&r, 1, th, &m);
    assert_true(m == 1.0f);
    for (int k = 0; k < 32; k++) {
        const double want = pow(10000.0, -2.0 * k / 64.0);
        if (fabs(th[k] - want) > 1e-5 * want) fail_msg("k=%d: %.8g vs %.8g", k, th[k], want);
    }
}

static void test_rope_rotates_tail_pairs(void **state) {
    (void)state;
    uint32_t ratios[2] = {0, 4};
    dsv4_config c = rope_cfg(ratios);
    dsv4_rope r = dsv4_rope_for_layer(&c, 1);
    dsv4_error err;
    enum { W = 128, H = 2 };
    float x[H * W], x0[H * W];
    uint64_t s = 1;
    for (int i = 0; i < H * W; i++) x0[i] = x[i] = urand(&s);
    const uint32_t pos = 77;
    assert_int_equal(g_b.ops->rope_tail(g_b.ctx, x, 1, H, W, pos, 0, &r, false, &err), DSV4_OK);
    float th[32];
    cpu_rope_thetas(&r, pos, th, NULL);
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < W - 64; i++) assert_true(x[h * W + i] == x0[h * W + i]); /* head dims untouched */
        for (int k = 0; k < 32; k++) { /* interleaved pairs (2k, 2k+1) of the tail */
            const double a = x0[h * W + 64 + 2 * k], b = x0[h * W + 65 + 2 * k];
            const double cs = cos((double)th[k]), sn = sin((double)th[k]);
            assert_float_equal(x[h * W + 64 + 2 * k], a * cs - b * sn, 1e-5);
            assert_float_equal(x[h * W + 65 + 2 * k], a * sn + b * cs, 1e-5);
        }
    }
    assert_int_equal(g_b.ops->rope_tail(g_b.ctx, x, 1, H, W, pos, 0, &r, true, &err), DSV4_OK);
    for (int i = 0; i < H * W; i++) assert_float_equal(x[i], x0[i], 1e-5);
}

/* ---- Sinkhorn ---- */

static void test_sinkhorn_2x2_hand(void **state) {
    (void)state;
    /* n_hc = 2, one pass: row softmax + eps, then column normalisation */
    const float eps = 1e-6f;
    const float mix[8] = {0.5f, -1.0f, 0.25f, 2.0f, 0.0f, logf(3.0f), 0.0f, 0.0f};
    const float scale[3] = {1.0f, 1.0f, 1.0f}, base[8] = {0};
    float out[8];
    cpu_hc_split(mix, scale, base, 2, 1, eps, out);
    assert_float_equal(out[0], 1.0 / (1.0 + exp(-0.5)) + eps, 1e-7);
    assert_float_equal(out[1], 1.0 / (1.0 + exp(1.0)) + eps, 1e-7);
    assert_float_equal(out[2], 2.0 / (1.0 + exp(-0.25)), 1e-7);
    assert_float_equal(out[3], 2.0 / (1.0 + exp(-2.0)), 1e-7);
    /* rows (source 0, source 1): [1/4, 3/4] and [1/2, 1/2], + eps */
    const double c00 = 0.25 + eps, c01 = 0.75 + eps, c10 = 0.5 + eps, c11 = 0.5 + eps;
    const double col0 = c00 + c10 + eps, col1 = c01 + c11 + eps;
    assert_float_equal(out[4], c00 / col0, 1e-6);
    assert_float_equal(out[5], c01 / col1, 1e-6);
    assert_float_equal(out[6], c10 / col0, 1e-6);
    assert_float_equal(out[7], c11 / col1, 1e-6);
    /* With 20 passes the scaling of A = [[1, 3], [1, 1]] is doubly stochastic: D1 A D2 keeps the
     * cross ratio c00 c11 / (c01 c10) = 1/3, so C = [[p, 1-p], [1-p, p]] with p/(1-p) = 1/sqrt(3). */
    cpu_hc_split(mix, scale, base, 2, 20, eps, out);
    const double pp = 1.0 / (1.0 + sqrt(3.0));
    assert_float_equal(out[4], pp, 1e-4);
    assert_float_equal(out[5], 1.0 - pp, 1e-4);
    assert_float_equal(out[6], 1.0 - pp, 1e-4);
    assert_float_equal(out[7], pp, 1e-4);
}

static void test_sinkhorn_column_sums(void **state) {
    (void)state;
    uint64_t s = 9;
    for (int trial = 0; trial < 20; trial++) {
        float mix[24], base[24], out[24];
        const float scale[3] = {0.5f, 0.7f, 1.0f};
        for (int i = 0; i < 24; i++) mix[i] = urand(&s), base[i] = urand(&s);
        cpu_hc_split(mix, scale, base, 4, 20, 1e-6f, out);
        for (int c = 0; c < 4; c++) { /* destination columns sum to 1 (last pass is a column pass) */
            double col = 0;
            for (int r = 0; r < 4; r++) col += out[8 + 4 * r + c];
            assert_float_equal(col, 1.0, 1e-5);
        }
        for (int r = 0; r < 4; r++) { /* rows converge to 1 */
            double row = 0;
            for (int c = 0; c < 4; c++) row += out[8 + 4 * r + c];
            assert_float_equal(row, 1.0, 1e-3);
        }
        for (int h = 0; h < 4; h++) {
            assert_true(out[h] > 0.0f && out[h] < 1.0f + 2e-6f);
            assert_true(out[4 + h] > 0.0f && out[4 + h] < 2.0f);
        }
    }
}

/* ---- HC post ---- */

static void test_hc_post_accumulation(void **state) {
    (void)state;
    enum { NH = 4, E = 5, T = 2, MIX = 2 * NH + NH * NH };
    float f[T * E], x[T * NH * E], split[T * MIX], out[T * NH * E];
    uint64_t s = 3;
    for (int i = 0; i < T * E; i++) f[i] = urand(&s);
    for (int i = 0; i < T * NH * E; i++) x[i] = urand(&s);
    for (int i = 0; i < T * MIX; i++) split[i] = urand(&s);
    dsv4_error err;
    assert_int_equal(g_b2.ops->hc_post(g_b2.ctx, f, x, split, T, NH, E, out, &err), DSV4_OK);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < NH; c++)
            for (int d = 0; d < E; d++) {
                double want = (double)f[t * E + d] * split[t * MIX + NH + c];
                for (int r = 0; r < NH; r++)
                    want += (double)split[t * MIX + 2 * NH + 4 * r + c] * x[(t * NH + r) * E + d];
                assert_float_equal(out[(t * NH + c) * E + d], want, 1e-6);
            }
}

/* ---- attention ---- */

static void test_attention_sink_hand(void **state) {
    (void)state;
    dsv4_error err;
    /* one head of 4 dims; rows k0 = e0, k1 = 2 e1; q = e0; scale 1/sqrt(4): scores 0.5, 0 */
    const float q[4] = {1, 0, 0, 0};
    float raw[3 * 4] = {0}; /* ring of 3: logical rows start at slot 2 and wrap */
    raw[2 * 4 + 0] = 1.0f;  /* row 0 in slot 2 */
    raw[0 * 4 + 1] = 2.0f;  /* row 1 in slot 0 */
    const float sinkv[1] = {0.5f};
    dsv4_tensor sinks = f32_tensor(sinkv, 1, 1);
    float out[4];
    assert_int_equal(g_b.ops->attention(g_b.ctx, q, 1, 4, DSV4_TYPE_F32, raw, 3, 2, 2, NULL, 0, NULL, 0,
                                        &sinks, 0.5f, out, &err),
                     DSV4_OK);
    const double w0 = exp(0.5), w1 = 1.0, ws = exp(0.5), den = w0 + w1 + ws;
    assert_float_equal(out[0], w0 / den, 1e-6);
    assert_float_equal(out[1], 2.0 * w1 / den, 1e-6);
    assert_float_equal(out[2], 0.0, 0);
    assert_float_equal(out[3], 0.0, 0);
    /* a compressed row selected by index joins the softmax; unselected rows do not */
    float comp[2 * 4] = {0};
    comp[0 * 4 + 2] = 5.0f; /* row 0 (not selected) */
    comp[1 * 4 + 0] = 3.0f; /* row 1: score 1.5 */
    const int32_t sel[1] = {1};
    assert_int_equal(g_b.ops->attention(g_b.ctx, q, 1, 4, DSV4_TYPE_F32, raw, 3, 2, 2, comp, 2, sel, 1,
                                        &sinks, 0.5f, out, &err),
                     DSV4_OK);
    const double wc = exp(1.5), den2 = w0 + w1 + ws + wc;
    assert_float_equal(out[0], (w0 + 3.0 * wc) / den2, 1e-6);
    assert_float_equal(out[1], 2.0 * w1 / den2, 1e-6);
    assert_float_equal(out[2], 0.0, 0);
}

/* ---- compressor ---- */

/* Feed `n` tokens through compressor_step and check every emitted row against the explicit
 * per-dimension softmax over the window's candidates, computed in double. */
static void check_compressor(uint32_t ratio, uint32_t n) {
    enum { DC = 3 };
    const uint32_t coff = ratio == 4 ? 2 : 1, W = coff * DC;
    float *a = malloc(sizeof(float) * n * W), *g = malloc(sizeof(float) * n * W);
    float *ape = malloc(sizeof(float) * ratio * W);
    float *skv = calloc((size_t)coff * ratio * W, sizeof(float)),
          *ssc = malloc(sizeof(float) * coff * ratio * W);
    for (uint32_t i = 0; i < coff * ratio * W; i++) ssc[i] = -1e30f;
    uint64_t s = 100 + ratio;
    for (uint32_t i = 0; i < n * W; i++) a[i] = urand(&s), g[i] = 2 * urand(&s);
    for (uint32_t i = 0; i < ratio * W; i++) ape[i] = urand(&s);
    dsv4_tensor apet = f32_tensor(ape, W, ratio); /* row phi = ape[:, phi] */
    dsv4_error err;
    uint32_t emitted = 0;
    for (uint32_t p = 0; p < n; p++) {
        float pooled[DC] = {-7, -7, -7};
        assert_int_equal(g_b.ops->compressor_step(g_b.ctx, a + p * W, g + p * W, &apet, p, ratio, DC, skv,
                                                  ssc, pooled, &err),
                         DSV4_OK);
        if ((p + 1) % ratio) {
            assert_true(pooled[0] == -7.0f); /* nothing emitted mid-window */
            continue;
        }
        const uint32_t i = (p + 1) / ratio - 1;
        emitted++;
        for (uint32_t j = 0; j < DC; j++) {
            double num = 0, den = 0, mx = -1e300;
            /* candidates: (value, score) */
            double cv[64], cs[64];
            int nc = 0;
            if (ratio == 4) {
                if (i > 0)
                    for (uint32_t t = 4 * i - 4; t < 4 * i; t++) /* previous window, lane 0 */
                        cv[nc] = a[t * W + j], cs[nc++] = (double)g[t * W + j] + ape[(t % 4) * W + j];
                for (uint32_t t = 4 * i; t < 4 * i + 4; t++) /* current window, lane 1 */
                    cv[nc] = a[t * W + DC + j],
                    cs[nc++] = (double)g[t * W + DC + j] + ape[(t % 4) * W + DC + j];
            } else {
                for (uint32_t t = i * ratio; t < (i + 1) * ratio; t++)
                    cv[nc] = a[t * W + j], cs[nc++] = (double)g[t * W + j] + ape[(t % ratio) * W + j];
            }
            for (int k = 0; k < nc; k++) mx = fmax(mx, cs[k]);
            for (int k = 0; k < nc; k++) num += exp(cs[k] - mx) * cv[k], den += exp(cs[k] - mx);
            if (fabs(pooled[j] - num / den) > 1e-5)
                fail_msg("ratio %u row %u dim %u: %.7g vs %.7g", ratio, i, j, pooled[j], num / den);
        }
    }
    assert_int_equal(emitted, n / ratio);
    free(a), free(g), free(ape), free(skv), free(ssc);
}

static void test_compressor_ratio4_two_lanes(void **state) {
    (void)state;
    check_compressor(4, 8);
    check_compressor(4, 20);
}

static void test_compressor_ratio16_one_lane(void **state) {
    (void)state;
    check_compressor(16, 48);
}

/* ---- indexer ---- */

static void test_indexer_topk_hand(void **state) {
    (void)state;
    /* 2 heads of 32 dims; rows r_i = c_i * e0 + d_i * e1; q0 = e0, q1 = -e1; w = {1, 2}, scale 0.5:
     * score_i = relu(c_i) * 0.5 + relu(-d_i) * 1.0 */
    enum { D = 32, NR = 6 };
    float q[2 * D] = {0}, rows[NR * D] = {0};
    q[0] = 1.0f;
    q[D + 1] = -1.0f;
    const float c[NR] = {1.0f, -3.0f, 2.0f, 0.0f, 4.0f, 2.0f};
    const float d[NR] = {0.0f, -2.0f, 0.0f, -1.0f, 1.0f, 0.0f};
    /* scores: 0.5, 2.0, 1.0, 1.0, 2.0, 1.0 */
    for (int i = 0; i < NR; i++) rows[i * D] = c[i], rows[i * D + 1] = d[i];
    const float w[2] = {1.0f, 2.0f};
    int32_t sel[4];
    dsv4_error err;
    assert_int_equal(
        g_b2.ops->indexer_topk(g_b2.ctx, q, w, 0.5f, 2, D, DSV4_TYPE_F32, rows, NR, 3, sel, &err), DSV4_OK);
    /* best: rows 1 and 4 (2.0), then the tie at 1.0 goes to the lowest index (2); ascending order */
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 2);
    assert_int_equal(sel[2], 4);
    assert_int_equal(g_b.ops->indexer_topk(g_b.ctx, q, w, 0.5f, 2, D, DSV4_TYPE_F32, rows, NR, 4, sel, &err),
                     DSV4_OK);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 2);
    assert_int_equal(sel[2], 3);
    assert_int_equal(sel[3], 4);
}

/* ---- router ---- */

static double softplus_d(double x) { return log1p(exp(x)); }

static void test_router_weights(void **state) {
    (void)state;
    enum { NE = 8, K = 2 };
    const float logits[2 * NE] = {0.1f, 2.0f, -1.0f, 1.5f, 0.0f, 3.0f, -2.0f, 1.0f, /* token 0 */
                                  -30,  -31,  -30,   -32,  -40,  -35,  -33,   -34}; /* token 1: tiny p */
    float bias[NE] = {0};
    bias[0] = 5.0f; /* expert 0 wins selection through the bias, its weight uses the unbiased p */
    dsv4_tensor bt = f32_tensor(bias, NE, 1);
    int32_t sel[2 * K];
    float w[2 * K];
    dsv4_error err;
    assert_int_equal(g_b.ops->router_select(g_b.ctx, logits, 2, NE, K, &bt, NULL, NULL, 1.5f, sel, w, &err),
                     DSV4_OK);
    assert_int_equal(sel[0], 0);
    assert_int_equal(sel[1], 5);
    const double p0 = sqrt(softplus_d(0.1)), p5 = sqrt(softplus_d(3.0));
    assert_float_equal(w[0], p0 / (p0 + p5) * 1.5, 1e-6);
    assert_float_equal(w[1], p5 / (p0 + p5) * 1.5, 1e-6);
    /* token 1: expert 0 by bias, then expert 0 or 2 tie at -30 -> lower index (2 is next);
     * p = sqrt(exp(x)) for x < -20 and the sum is floored at 2^-14 */
    assert_int_equal(sel[2], 0);
    assert_int_equal(sel[3], 2);
    const double q = sqrt(exp(-30.0));
    assert_float_equal(w[2], q / 6.103515625e-5 * 1.5, 1e-9);
    assert_float_equal(w[3], q / 6.103515625e-5 * 1.5, 1e-9);
    /* hash routing: experts from tid2eid[token], bias ignored */
    int32_t table[4 * K] = {7, 1, 3, 4, 2, 6, 5, 0};
    dsv4_tensor tt;
    memset(&tt, 0, sizeof tt);
    tt.name = "tid2eid";
    tt.type = DSV4_TYPE_I32;
    tt.ne[0] = K, tt.ne[1] = 4, tt.ne[2] = tt.ne[3] = 1;
    tt.row_bytes = K * 4;
    tt.data = table;
    const int32_t toks[2] = {2, 1};
    assert_int_equal(g_b.ops->router_select(g_b.ctx, logits, 2, NE, K, &bt, &tt, toks, 1.5f, sel, w, &err),
                     DSV4_OK);
    assert_int_equal(sel[0], 2);
    assert_int_equal(sel[1], 6);
    assert_int_equal(sel[2], 3);
    assert_int_equal(sel[3], 4);
    const double h2 = sqrt(softplus_d(-1.0)), h6 = sqrt(softplus_d(-2.0));
    assert_float_equal(w[0], h2 / (h2 + h6) * 1.5, 1e-6);
    assert_float_equal(w[1], h6 / (h2 + h6) * 1.5, 1e-6);
}

/* ---- matmul ---- */

static void test_matmul_batch_and_threads_invariant(void **state) {
    (void)state;
    enum { IN = 256, OUT = 37, T = 5 };
    /* Q8_0 weights from random floats */
    float *wf = malloc(sizeof(float) * IN * OUT);
    uint8_t *wq = malloc((size_t)OUT * (IN / 32) * 34);
    float x[T * (IN + 3)];
    uint64_t s = 77;
    for (int i = 0; i < IN * OUT; i++) wf[i] = urand(&s);
    for (int o = 0; o < OUT; o++) quant_quantize_q8_0(wf + o * IN, wq + (size_t)o * (IN / 32) * 34, IN);
    for (int i = 0; i < T * (IN + 3); i++) x[i] = urand(&s);
    dsv4_tensor w;
    memset(&w, 0, sizeof w);
    w.name = "wq";
    w.type = DSV4_TYPE_Q8_0;
    w.ne[0] = IN, w.ne[1] = OUT, w.ne[2] = w.ne[3] = 1;
    w.row_bytes = (IN / 32) * 34;
    w.data = wq;
    float yb[T * OUT], y1[OUT], y2[T * OUT];
    dsv4_error err;
    /* strided input (row stride IN + 3), batched */
    assert_int_equal(g_b.ops->matmul(g_b.ctx, &w, 0, OUT, x, IN + 3, T, yb, OUT, &err), DSV4_OK);
    assert_int_equal(g_b2.ops->matmul(g_b2.ctx, &w, 0, OUT, x, IN + 3, T, y2, OUT, &err), DSV4_OK);
    assert_memory_equal(yb, y2, sizeof yb);
    for (int t = 0; t < T; t++) {
        assert_int_equal(g_b.ops->matmul(g_b.ctx, &w, 0, OUT, x + t * (IN + 3), IN + 3, 1, y1, OUT, &err),
                         DSV4_OK);
        assert_memory_equal(y1, yb + t * OUT, sizeof y1);
        /* close to the f32 product of the dequantized weights (Q8_0 activation error) */
        float row[IN];
        for (int o = 0; o < OUT; o++) {
            assert_true(quant_dequant_row(DSV4_TYPE_Q8_0, wq + (size_t)o * (IN / 32) * 34, row, IN));
            double ref = 0;
            for (int i = 0; i < IN; i++) ref += (double)row[i] * x[t * (IN + 3) + i];
            assert_float_equal(y1[o], ref, 0.15); /* ~7 sigma of the activation rounding */
        }
    }
    /* a row window [row0, row0 + n_out) writes into a strided output */
    float yw[T * 10];
    assert_int_equal(g_b2.ops->matmul(g_b2.ctx, &w, 20, 5, x, IN + 3, T, yw, 10, &err), DSV4_OK);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < 5; o++) assert_true(yw[t * 10 + o] == yb[t * OUT + 20 + o]);
    /* unsupported type is an error naming the tensor */
    w.type = DSV4_TYPE_Q5_0;
    assert_int_equal(g_b.ops->matmul(g_b.ctx, &w, 0, OUT, x, IN, 1, y1, OUT, &err), DSV4_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "wq"));
    free(wf);
    free(wq);
}

static void test_rmsnorm_double_sum(void **state) {
    (void)state;
    enum { N = 300 };
    float x[N], w[N], y[N];
    uint64_t s = 5;
    for (int i = 0; i < N; i++) x[i] = 10 * urand(&s), w[i] = 1 + urand(&s) * 0.1f;
    dsv4_tensor wt = f32_tensor(w, N, 1);
    dsv4_error err;
    assert_int_equal(g_b.ops->rmsnorm(g_b.ctx, x, &wt, 1, N, 1e-6f, y, &err), DSV4_OK);
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (double)x[i] * x[i];
    const float sc = 1.0f / sqrtf((float)(ss / N) + 1e-6f);
    for (int i = 0; i < N; i++) assert_true(y[i] == x[i] * sc * w[i]); /* exact expression of the spec */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_yarn_frequency_table),
        cmocka_unit_test(test_rope_plain_base),
        cmocka_unit_test(test_rope_rotates_tail_pairs),
        cmocka_unit_test(test_sinkhorn_2x2_hand),
        cmocka_unit_test(test_sinkhorn_column_sums),
        cmocka_unit_test(test_hc_post_accumulation),
        cmocka_unit_test(test_attention_sink_hand),
        cmocka_unit_test(test_compressor_ratio4_two_lanes),
        cmocka_unit_test(test_compressor_ratio16_one_lane),
        cmocka_unit_test(test_indexer_topk_hand),
        cmocka_unit_test(test_router_weights),
        cmocka_unit_test(test_matmul_batch_and_threads_invariant),
        cmocka_unit_test(test_rmsnorm_double_sum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
