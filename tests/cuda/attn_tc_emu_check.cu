/* Host emulation of the tensor-core prefill attention (src/backend/cuda/cuda_attn_tc.cu,
 * DSV4_CUDA_ATTN=tc): the CTA of a token runs on the CPU phase by phase between the kernel's
 * barriers with the kernel's own units (cuda_attn_tc.cuh: row references, staging with the f16
 * rounding of the chunk's own rows, Q rounding, fragment reads, score store and mask, softmax with
 * f16 weights, output with the sink), the shuffles in the kernel's order. mma.m16n8k16 is modelled
 * from the PTX fragment layout (written here independently of the .cuh): products of f16 exact,
 * the 16 products and the accumulator summed in double and rounded to f32 (the tensor core adds
 * in f32 with its own truncation: a few f32 ulps, far below the f16 roundings measured here).
 * Each token's output is compared with a float64 evaluation over the rows computed here from the
 * op's contract (raw window of raw_cap positions ending at the token, compressed rows (p+1)/ratio,
 * or the token's selection with out-of-range ids skipped) on the unrounded inputs, per head vector
 * as max|tc - f64| / max|f64|; bound 2e-3. Cases: causal edges (first queries, window wrap at 128,
 * compressed visibility), ragged and fully masked tiles (selection), scores up to ~+-30, 128
 * heads (two CTAs per token); each token with and without the launcher's f16 copy of the chunk's
 * rows (bitwise equal). Also ft_f16 against cuda_fp16's __float2half_rn (round to nearest
 * even, subnormals, overflow). Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda-tests -> build-x/cuda/attn_tc_emu_check */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "backend/cuda/cuda_attn_tc.cuh"

#define CHECK_RNG_SEED 0x7c7c
#include "check_rng.h"

static int g_fail = 0, g_pass = 0;
constexpr double TOL = 2e-3;
static bool g_ckv_f32 = false; /* the chunk's own rows not f16 values (not what the graph passes) */

static float gauss(void) { return (uni() + uni() + uni() + uni()) * 0.8660254f; }

/* ---- mma.m16n8k16 from the PTX layout (lane g = lane/4, t = lane%4) ---- */
static double h2d(uint32_t reg, int hi) { return (double)ft_f32((uint16_t)(hi ? reg >> 16 : reg & 0xffffu)); }

static void emu_mma(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    double A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int hi = 0; hi < 2; hi++) {
            A[g][2 * t + hi] = h2d(a[l][0], hi);
            A[g + 8][2 * t + hi] = h2d(a[l][1], hi);
            A[g][2 * t + 8 + hi] = h2d(a[l][2], hi);
            A[g + 8][2 * t + 8 + hi] = h2d(a[l][3], hi);
            B[2 * t + hi][g] = h2d(b[l][0], hi);
            B[2 * t + 8 + hi][g] = h2d(b[l][1], hi);
        }
    }
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >= 2 ? 8 : 0), c = 2 * t + (i & 1);
            double s = d[l][i];
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
            d[l][i] = (float)s;
        }
    }
}

/* ---- the emulated CTA (token t, heads hg..hg+63) ---- */
static void emu_issue(ft_smem &s, const ft_args &x, const fa_tok &k, uint32_t i, uint32_t b) {
    for (uint32_t tid = 0; tid < FT_T; tid++)
        for (uint32_t e = tid; e < FT_TR * FT_CH; e += FT_T) {
            const uint32_t r = e / FT_CH, c = e % FT_CH;
            const fa_rowref p = fa_row(x.a, k, i * FT_TR + r);
            if (c == 0) s.rowp[b][r] = p;
            const uint16_t *src = ft_row_f16(x, p);
            if (src) /* cp.async */
                memcpy(s.kv[b] + r * FT_LDK + c * 8, src + c * 8, 16);
            else
                ft_stage_chunk(p, c, s.kv[b] + r * FT_LDK + c * 8);
        }
}

static void emu_cta(const ft_args &x, uint32_t t, uint32_t hgi) {
    const fa_args &a = x.a;
    static ft_smem s;
    static float o[8][32][32][4]; /* [warp][lane][n8 tile][4] */
    memset(&s, 0xff, sizeof s);   /* garbage: every read must follow a write */
    const uint32_t hg = hgi * FT_H;
    const fa_tok k = fa_token(a, t);
    const uint32_t n_tiles = (k.n_rows + FT_TR - 1) / FT_TR;
    if (n_tiles) emu_issue(s, x, k, 0, 0);
    const float *qg = a.q + ((uint64_t)t * a.n_head + hg) * FA_D;
    for (uint32_t h = 0; h < FT_H; h++)
        for (uint32_t d = 0; d < FA_D; d++) {
            const float x = qg[(size_t)h * FA_D + d];
            s.q[h * FT_LDK + d] = ft_f16(x);
#if FT_QSPLIT
            s.qlo[h * FT_LDK + d] = ft_q_lo(x, s.q[h * FT_LDK + d]);
#endif
        }
    for (uint32_t h = 0; h < FT_H; h++) {
        s.m[h] = -INFINITY;
        s.l[h] = 0.0f;
    }
    memset(o, 0, sizeof o);
    for (uint32_t i = 0; i < n_tiles; i++) {
        const uint32_t b = i & 1u;
        if (i + 1 < n_tiles) emu_issue(s, x, k, i + 1, b ^ 1u);
        const uint16_t *kv = s.kv[b];
        for (uint32_t w = 0; w < 8; w++) { /* scores */
            const uint32_t hb = 16 * (w % 4), half = w / 4;
            float d[2][32][4] = {};
#if FT_QSPLIT
            float dl[2][32][4] = {}; /* the kernel's separate Q lo sums */
#endif
            for (uint32_t ks = 0; ks < FA_D / 16; ks++) {
                uint32_t fa[32][4], fb[32][2];
                for (uint32_t l = 0; l < 32; l++) ft_frag_a(s.q, FT_LDK, hb, 16 * ks, l, fa[l]);
#if FT_QSPLIT
                uint32_t fl[32][4];
                for (uint32_t l = 0; l < 32; l++) ft_frag_a(s.qlo, FT_LDK, hb, 16 * ks, l, fl[l]);
#endif
                for (uint32_t nt = 0; nt < 2; nt++) {
                    for (uint32_t l = 0; l < 32; l++) ft_frag_k(kv, 16 * half + 8 * nt, 16 * ks, l, fb[l]);
                    emu_mma(d[nt], fa, fb);
#if FT_QSPLIT
                    emu_mma(dl[nt], fl, fb);
#endif
                }
            }
            for (uint32_t nt = 0; nt < 2; nt++)
                for (uint32_t l = 0; l < 32; l++) {
#if FT_QSPLIT
                    ft_add_lo(d[nt][l], dl[nt][l]);
#endif
                    ft_store_scores(s.sc, s.rowp[b], hb, 16 * half + 8 * nt, l, d[nt][l], a.kq_scale);
                }
        }
        /* barrier; softmax: groups of 4 threads (one head) */
        for (uint32_t h = 0; h < FT_H; h++) {
            float mx[4], ps[4];
            for (uint32_t j = 0; j < 4; j++) mx[j] = ft_sm_max(s.sc, 4 * h + j);
            const float m4 = fmaxf(fmaxf(mx[0], mx[1]), fmaxf(mx[2], mx[3]));
            const float m_old = s.m[h], m_new = fmaxf(m_old, m4);
            for (uint32_t j = 0; j < 4; j++) ps[j] = ft_sm_weights(s.sc, s.p, 4 * h + j, m_new);
            const float sum = (ps[0] + ps[1]) + (ps[2] + ps[3]);
            const float f = fa_rescale(m_old, m_new);
            s.f[h] = f;
            s.l[h] = fmaf(s.l[h], f, sum);
            s.m[h] = m_new;
        }
        /* barrier; values */
        for (uint32_t w = 0; w < 8; w++) {
            const uint32_t hb = 16 * (w % 4), half = w / 4;
            uint32_t fa[2][32][4];
            for (uint32_t ks = 0; ks < 2; ks++)
                for (uint32_t l = 0; l < 32; l++) ft_frag_a(s.p, FT_LDP, hb, 16 * ks, l, fa[ks][l]);
            for (uint32_t j = 0; j < 32; j++) {
                float d[32][4];
                for (uint32_t l = 0; l < 32; l++) {
                    const float f0 = s.f[hb + l / 4], f1 = s.f[hb + l / 4 + 8];
                    d[l][0] = o[w][l][j][0] * f0;
                    d[l][1] = o[w][l][j][1] * f0;
                    d[l][2] = o[w][l][j][2] * f1;
                    d[l][3] = o[w][l][j][3] * f1;
                }
                for (uint32_t ks = 0; ks < 2; ks++) {
                    uint32_t fb[32][2];
                    for (uint32_t l = 0; l < 32; l++) ft_frag_v(kv, 256 * half + 8 * j, 16 * ks, l, fb[l]);
                    emu_mma(d, fa[ks], fb);
                }
                for (uint32_t l = 0; l < 32; l++)
                    for (uint32_t x = 0; x < 4; x++) o[w][l][j][x] = d[l][x];
            }
        }
    }
    float *out = a.out + ((uint64_t)t * a.n_head + hg) * FA_D;
    for (uint32_t h = 0; h < FT_H; h++) ft_head_scales(s.f, s.m, s.l, a.sinks + hg, h);
    for (uint32_t w = 0; w < 8; w++)
        for (uint32_t j = 0; j < 32; j++)
            for (uint32_t l = 0; l < 32; l++)
                ft_store_out(out, FA_D, s.f, 16 * (w % 4), 256 * (w / 4) + 8 * j, l, o[w][l][j]);
}

/* ---- float64 reference over rows from the contract ---- */
static void ref_head(const float *q, const std::vector<const float *> &rows, float kq, float sink,
                     double *out) {
    std::vector<double> s(rows.size());
    double mx = sink;
    for (size_t r = 0; r < rows.size(); r++) {
        double d = 0;
        for (uint32_t i = 0; i < FA_D; i++) d += (double)q[i] * rows[r][i];
        s[r] = d * kq;
        mx = fmax(mx, s[r]);
    }
    double den = exp(sink - mx);
    for (uint32_t i = 0; i < FA_D; i++) out[i] = 0;
    for (size_t r = 0; r < rows.size(); r++) {
        const double w = exp(s[r] - mx);
        den += w;
        for (uint32_t i = 0; i < FA_D; i++) out[i] += w * rows[r][i];
    }
    for (uint32_t i = 0; i < FA_D; i++) out[i] /= den;
}

static double head_err(const float *x, const double *ref, double *max_score_seen) {
    (void)max_score_seen;
    double mx = 0, md = 0;
    for (uint32_t i = 0; i < FA_D; i++) {
        mx = fmax(mx, fabs(ref[i]));
        md = fmax(md, fabs((double)x[i] - ref[i]));
        if (!isfinite(x[i])) md = INFINITY;
    }
    return mx > 0 ? md / mx : md;
}

static uint16_t host_rn(float x) { return __half_as_ushort(__float2half_rn(x)); }
static float host_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* One chunk: n queries from pos0, n_head heads, raw ring of raw_cap F16 rows holding the positions
 * before pos0, compressed F16 rows, optional selection (n_sel per token, `bad` of them out of
 * range in runs). qscale widens the scores; peak > 0: q heads + peak x a visible row (that row's score ~ 22.6
 * peak). Tokens emulated: `toks` (each CTA is independent of the others). */
static void check_chunk(const char *name, uint32_t n_head, uint32_t n, uint32_t pos0, uint32_t raw_cap,
                        uint32_t ratio, uint32_t n_sel, float qscale, float peak,
                        std::vector<uint32_t> toks) {
    const uint32_t p_end = pos0 + n, n_comp_max = ratio ? p_end / ratio : 0;
    std::vector<float> ckv((size_t)n * FA_D);              /* the chunk's own rows, f32 */
    std::vector<uint16_t> ring((size_t)raw_cap * FA_D, 0); /* f16 */
    std::vector<float> ring_f((size_t)raw_cap * FA_D, 0);
    std::vector<uint16_t> comp((size_t)(n_comp_max + 1) * FA_D);
    std::vector<float> comp_f(comp.size());
    /* graph_attn_chunk rounds the chunk's rows to f16 values (store_f16 in place) before the op; a
     * case with raw f32 rows measures the kernel's own rounding of them too */
    for (auto &x : ckv) x = g_ckv_f32 ? gauss() : host_f32(host_rn(gauss()));
    for (uint32_t p = pos0 > raw_cap ? pos0 - raw_cap : 0; p < pos0; p++)
        for (uint32_t d = 0; d < FA_D; d++) {
            const uint16_t h = host_rn(gauss());
            ring[(size_t)(p % raw_cap) * FA_D + d] = h;
            ring_f[(size_t)(p % raw_cap) * FA_D + d] = host_f32(h);
        }
    for (size_t i = 0; i < comp.size(); i++) {
        comp[i] = host_rn(gauss());
        comp_f[i] = host_f32(comp[i]);
    }
    std::vector<int32_t> sel;
    if (n_sel) {
        sel.resize((size_t)n * n_sel);
        for (uint32_t t = 0; t < n; t++) {
            const uint32_t nc = ratio ? (pos0 + t + 1) / ratio : 0;
            for (uint32_t j = 0; j < n_sel; j++) {
                int32_t v = nc ? (int32_t)(nxt() % nc) : -1;
                if ((j / 40) % 3 == 1) v = (j & 1) ? -1 : (int32_t)(nc + j); /* runs of out-of-range ids */
                sel[(size_t)t * n_sel + j] = v;
            }
        }
    }
    std::vector<float> sinks(n_head);
    for (auto &x : sinks) x = 2.0f * uni();
    const float kq = 1.0f / sqrtf((float)FA_D);
    /* rows of a token from the contract */
    auto rows_of = [&](uint32_t t) {
        std::vector<const float *> rows;
        const uint32_t p = pos0 + t;
        const uint32_t first = p + 1 > raw_cap ? p + 1 - raw_cap : 0;
        for (uint32_t x = first; x <= p; x++)
            rows.push_back(x >= pos0 ? &ckv[(size_t)(x - pos0) * FA_D]
                                     : &ring_f[(size_t)(x % raw_cap) * FA_D]);
        const uint32_t nc = ratio ? (p + 1) / ratio : 0;
        if (n_sel && nc > n_sel) {
            for (uint32_t j = 0; j < n_sel; j++) {
                const int32_t v = sel[(size_t)t * n_sel + j];
                if (v >= 0 && (uint32_t)v < nc) rows.push_back(&comp_f[(size_t)v * FA_D]);
            }
        } else
            for (uint32_t c = 0; c < nc; c++) rows.push_back(&comp_f[(size_t)c * FA_D]);
        return rows;
    };
    std::vector<float> q((size_t)n * n_head * FA_D);
    for (uint32_t t = 0; t < n; t++) {
        const std::vector<const float *> rows = rows_of(t);
        for (uint32_t h = 0; h < n_head; h++) {
            const float *pr = peak > 0 ? rows[(h * 7 + t) % rows.size()] : nullptr;
            for (uint32_t d = 0; d < FA_D; d++)
                q[((size_t)t * n_head + h) * FA_D + d] = gauss() * qscale + (pr ? peak * pr[d] : 0.0f);
        }
    }
    std::vector<float> out((size_t)n * n_head * FA_D, NAN);
    fa_args a = {};
    a.q = q.data();
    a.raw = (const unsigned char *)ring.data();
    a.comp = (const unsigned char *)comp.data();
    a.sel = n_sel ? sel.data() : nullptr;
    a.sinks = sinks.data();
    a.out = out.data();
    a.kv = ckv.data();
    a.n_head = n_head;
    a.raw_cap = raw_cap;
    a.pos0 = pos0;
    a.ratio = ratio;
    a.n_sel = n_sel;
    a.kq_scale = kq;
    a.half = true;
    double worst = 0, smax = 0;
    uint32_t worst_t = 0, max_rows = 0;
    std::vector<double> ref(FA_D);
    /* the launcher's f16 copy of the chunk's rows (ft_kv16_kernel); both launches are emulated and
     * must agree bitwise */
    std::vector<uint16_t> kv16(ckv.size());
    for (size_t i = 0; i < ckv.size(); i++) kv16[i] = ft_f16(ckv[i]);
    std::vector<float> out2(out.size(), NAN);
    ft_args x = {a, kv16.data()}, x2 = {a, nullptr};
    x2.a.out = out2.data();
    bool same = true;
    for (uint32_t t : toks) {
        if (t >= n) continue;
        for (uint32_t hgi = 0; hgi < n_head / FT_H; hgi++) {
            emu_cta(x, t, hgi);
            emu_cta(x2, t, hgi);
        }
        const size_t o = (size_t)t * n_head * FA_D;
        same = same && memcmp(&out[o], &out2[o], (size_t)n_head * FA_D * 4) == 0;
        const std::vector<const float *> rows = rows_of(t);
        if (rows.size() > max_rows) max_rows = (uint32_t)rows.size();
        for (uint32_t h = 0; h < n_head; h++) {
            const float *qh = &q[((size_t)t * n_head + h) * FA_D];
            for (const float *r : rows) {
                double d = 0;
                for (uint32_t i = 0; i < FA_D; i++) d += (double)qh[i] * r[i];
                smax = fmax(smax, fabs(d * kq));
            }
            ref_head(qh, rows, kq, sinks[h], ref.data());
            const double e = head_err(&out[((size_t)t * n_head + h) * FA_D], ref.data(), nullptr);
            if (e > worst) {
                worst = e;
                worst_t = t;
            }
        }
    }
    const bool ok = worst <= TOL && same;
    printf("%-4s %-26s n=%u pos0=%u ratio=%u sel=%u heads=%u: %zu tokens (rows <= %u, |s| <= %.1f) "
           "tc-f64 %.2e (token %u)%s\n",
           ok ? "PASS" : "FAIL", name, n, pos0, ratio, n_sel, n_head, toks.size(), max_rows, smax, worst,
           worst_t, same ? "" : " kv16 != own rounding");
    ok ? g_pass++ : g_fail++;
}

static void check_f16(void) {
    uint32_t bad = 0, n = 0;
    const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x33000000u, 0x33000001u, 0x337fffffu, 0x33800000u,
                              0x38800000u, 0x387fffffu, 0x38000000u, 0x477fefffu, 0x477ff000u, 0x477fe000u,
                              0x7f800000u, 0xff800000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x00000001u};
    auto one = [&](uint32_t u) {
        float x;
        memcpy(&x, &u, 4);
        const uint16_t want = host_rn(x), got = ft_f16(x);
        const bool nan = (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu);
        if (nan ? !((got & 0x7c00u) == 0x7c00u && (got & 0x3ffu)) : got != want) {
            if (bad < 5) printf("  ft_f16(%#010x) = %#06x, __float2half_rn %#06x\n", u, got, want);
            bad++;
        }
        const float back = ft_f32(got), want_back = host_f32(got);
        if (!nan && memcmp(&back, &want_back, 4) != 0) bad++;
        n++;
    };
    for (uint32_t u : edges) one(u);
    for (uint32_t i = 0; i < 4000000; i++) one((uint32_t)nxt());
    for (uint32_t i = 0; i < 1000000; i++) one(0x33000000u + (uint32_t)(nxt() % (0x47800000u - 0x33000000u)));
    printf("%-4s ft_f16 / ft_f32 vs cuda_fp16 on %u values: %u differ\n", bad ? "FAIL" : "PASS", n, bad);
    bad ? g_fail++ : g_pass++;
}

/* ldmatrix.x4 (PTX): lane l gives the row address of row l%8 of matrix l/8; register j of lane l:
 * matrix j's (row l/4, columns 2(l%4), +1), or with .trans (rows 2(l%4), +1 of column l/4). The
 * kernel's ft_ldm_* addresses must give exactly the ft_frag_* fragments the emulation runs. */
static void emu_ldm(const uint16_t *const ptr[32], bool trans, uint32_t out[32][4]) {
    for (uint32_t l = 0; l < 32; l++)
        for (uint32_t j = 0; j < 4; j++) {
            const uint32_t g = l / 4, t = l % 4;
            out[l][j] = trans ? ft_pack(ptr[8 * j + 2 * t][g], ptr[8 * j + 2 * t + 1][g])
                              : ft_pack(ptr[8 * j + g][2 * t], ptr[8 * j + g][2 * t + 1]);
        }
}

static void check_ldmatrix(void) {
    static ft_smem s;
    uint16_t *w = (uint16_t *)&s;
    for (size_t i = 0; i < sizeof s / 2; i++) w[i] = (uint16_t)nxt();
    uint32_t bad = 0, n = 0;
    const uint16_t *ptr[32];
    uint32_t got[32][4], want[4];
    auto aligned = [&](const void *base) {
        for (uint32_t l = 0; l < 32; l++)
            if (((const unsigned char *)ptr[l] - (const unsigned char *)base) % 16) bad++;
    };
    for (uint32_t hb = 0; hb < FT_H; hb += 16)
        for (uint32_t ks = 0; ks < FA_D / 16; ks++) { /* Q (hi and lo) */
            for (int lo = 0; lo < 1 + FT_QSPLIT; lo++) {
#if FT_QSPLIT
                const uint16_t *qb = lo ? s.qlo : s.q;
#else
                const uint16_t *qb = s.q;
#endif
                for (uint32_t l = 0; l < 32; l++) ptr[l] = ft_ldm_a(qb, FT_LDK, hb, 16 * ks, l);
                aligned(&s);
                emu_ldm(ptr, false, got);
                for (uint32_t l = 0; l < 32; l++, n++) {
                    ft_frag_a(qb, FT_LDK, hb, 16 * ks, l, want);
                    if (memcmp(got[l], want, 16)) bad++;
                }
            }
        }
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t half = 0; half < 2; half++) {
            for (uint32_t ks = 0; ks < FA_D / 16; ks++) { /* K of two n8 tiles */
                for (uint32_t l = 0; l < 32; l++) ptr[l] = ft_ldm_k(s.kv[b], 16 * half, 16 * ks, l);
                aligned(&s);
                emu_ldm(ptr, false, got);
                for (uint32_t l = 0; l < 32; l++, n++)
                    for (uint32_t nt = 0; nt < 2; nt++) {
                        ft_frag_k(s.kv[b], 16 * half + 8 * nt, 16 * ks, l, want);
                        if (memcmp(got[l] + 2 * nt, want, 8)) bad++;
                    }
            }
            for (uint32_t j = 0; j < 32; j += 2) /* V of two n8 tiles, .trans */
                for (uint32_t ks = 0; ks < 2; ks++) {
                    for (uint32_t l = 0; l < 32; l++)
                        ptr[l] = ft_ldm_v(s.kv[b], 256 * half + 8 * j, 16 * ks, l);
                    aligned(&s);
                    emu_ldm(ptr, true, got);
                    for (uint32_t l = 0; l < 32; l++, n++)
                        for (uint32_t jj = 0; jj < 2; jj++) {
                            ft_frag_v(s.kv[b], 256 * half + 8 * (j + jj), 16 * ks, l, want);
                            if (memcmp(got[l] + 2 * jj, want, 8)) bad++;
                        }
                }
        }
    for (uint32_t hb = 0; hb < FT_H; hb += 16) /* P */
        for (uint32_t ks = 0; ks < 2; ks++) {
            for (uint32_t l = 0; l < 32; l++) ptr[l] = ft_ldm_a(s.p, FT_LDP, hb, 16 * ks, l);
            aligned(&s);
            emu_ldm(ptr, false, got);
            for (uint32_t l = 0; l < 32; l++, n++) {
                ft_frag_a(s.p, FT_LDP, hb, 16 * ks, l, want);
                if (memcmp(got[l], want, 16)) bad++;
            }
        }
    const bool ok = bad == 0 && offsetof(ft_smem, kv) % 16 == 0 && offsetof(ft_smem, p) % 16 == 0 &&
                    offsetof(ft_smem, q) % 16 == 0;
    printf("%-4s ldmatrix addresses == fragments (Q, K, V .trans, P; 16-byte rows): %u lane reads, %u bad\n",
           ok ? "PASS" : "FAIL", n, bad);
    ok ? g_pass++ : g_fail++;
}

int main(void) {
    check_f16();
    check_ldmatrix();
    /* ratio 4 chunk from 0: first queries, window wrap 126..130, compressed edges, last */
    check_chunk("ratio4 from 0", 64, 700, 0, 128, 4, 0, 1.0f, false,
                {0, 1, 2, 3, 4, 31, 32, 126, 127, 128, 129, 699});
    check_chunk("ratio4 wide scores", 64, 600, 0, 128, 4, 0, 6.0f, 0.0f, {5, 127, 300, 599});
    g_ckv_f32 = true;
    check_chunk("ratio4 f32 chunk rows", 64, 300, 0, 128, 4, 0, 1.0f, 0.0f, {0, 1, 130, 299});
    g_ckv_f32 = false;
    check_chunk("ratio4 peaked (saturated)", 64, 300, 0, 128, 4, 0, 1.0f, 1.3f, {0, 1, 130, 299});
    check_chunk("ratio4 peaked (s ~ 14)", 64, 300, 0, 128, 4, 0, 1.0f, 0.6f, {0, 1, 130, 299});
    /* a chunk after a filled ring: the window starts in the ring and wraps at 128 */
    check_chunk("ratio4 after 2048", 64, 64, 2048, 128, 4, 0, 1.0f, 0.0f, {0, 1, 2, 3, 63});
    check_chunk("ratio4 ring wrap 77", 64, 40, 77, 128, 4, 0, 1.0f, 0.0f, {0, 1, 50, 51, 52, 39});
    check_chunk("ratio128", 64, 400, 0, 128, 128, 0, 1.0f, 0.0f, {126, 127, 128, 255, 256, 399});
    check_chunk("ratio128 wide", 64, 64, 8192, 128, 128, 0, 6.0f, 0.0f, {0, 63});
    check_chunk("no compressor", 64, 200, 0, 128, 0, 0, 1.0f, 0.0f, {0, 1, 17, 199});
    /* selection: 512 per token (runs of out-of-range ids: whole tiles masked) */
    check_chunk("ratio4 selection", 64, 16, 8192, 128, 4, 512, 1.0f, 0.0f, {0, 7, 15});
    check_chunk("ratio4 selection wide", 64, 8, 4000, 128, 4, 512, 6.0f, 0.0f, {0, 7});
    check_chunk("128 heads (two CTAs)", 128, 50, 100, 128, 4, 0, 1.0f, 0.0f, {0, 27, 28, 49});
    check_chunk("small ring 16", 64, 40, 3, 16, 4, 0, 1.0f, 0.0f, {0, 12, 13, 14, 39});
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
