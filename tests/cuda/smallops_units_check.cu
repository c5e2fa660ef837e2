/* Host-only check of the pieces the small CUDA ops split across lanes
 * (src/backend/cuda/cuda_smallops_units.cuh), against the CPU backend, bit for bit:
 *  - the HC split: pre/post one element at a time, the combine rows and the Sinkhorn row and
 *    column passes run in reverse order (as independent lanes may) must give cpu_hc_split's
 *    bytes, with the CPU's expf as the exp function;
 *  - the router top-k: router_kernel's rank selection (candidates at or above the k-th largest warp
 *    maximum of the per-thread strided scan, each ranked among them, the candidates in a random
 *    order), over scores with many ties, signed zeros and infinities, must give cpu_topk_desc's ids
 *    in its slot order;
 *  - the register combine matrix of the one-launch decode pre step (hcr_*, one element per lane,
 *    n_hc <= 5): 32 lanes emulated step by step (a shuffle reads the lanes' values before the step)
 *    must give the hcu_* passes' bytes and cpu_hc_split's, for 0..20 iterations and eps from 0 to
 *    larger than the sums;
 *  - the n_hc = 4 register combine matrix (hcr_*_n<4>, the decode pre step's) once more over wider
 *    inputs: 0..40 iterations (0, 1 and 20 among them), logits from tiny to rows that underflow to
 *    one 1, base up to 100, eps 0 to 3.
 * Needs no GPU (exit 0 = pass). Build: make BUILD=build-x cuda -> build-x/cuda/smallops_units_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_smallops_units.cuh"
extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_hc_split, cpu_topk_desc */
}

#define CHECK_RNG_SEED 7
#include "check_rng.h"

struct host_exp {
    float operator()(float v) const { return expf(v); }
};

static int check_split(uint32_t n_hc, uint32_t iters, float mag) {
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    float mix[2 * 16 + 16 * 16], base[2 * 16 + 16 * 16], ref[2 * 16 + 16 * 16], got[2 * 16 + 16 * 16];
    const float scale[3] = {0.5f + uni(), 0.5f + uni(), 0.5f + uni()};
    for (uint32_t i = 0; i < n_mix; i++) mix[i] = mag * uni(), base[i] = uni();
    const float eps = 1e-6f;
    cpu_hc_split(mix, scale, base, n_hc, iters, eps, ref);
    const host_exp ex;
    for (uint32_t i = 2 * n_hc; i-- > 0;) got[i] = hcu_pre_post(mix, scale, base, n_hc, eps, i, ex);
    float *cm = got + 2 * n_hc;
    for (uint32_t r = n_hc; r-- > 0;)
        hcu_comb_softmax_row(mix + 2 * n_hc, scale[2], base + 2 * n_hc, n_hc, r, eps, cm, ex);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0)
            for (uint32_t r = n_hc; r-- > 0;) hcu_comb_row_pass(cm, n_hc, r, eps);
        for (uint32_t j = n_hc; j-- > 0;) hcu_comb_col_pass(cm, n_hc, j, eps);
    }
    if (memcmp(ref, got, n_mix * sizeof(float)) != 0) {
        for (uint32_t i = 0; i < n_mix; i++)
            if (memcmp(&ref[i], &got[i], sizeof(float)) != 0) {
                fprintf(stderr, "FAIL hc split n_hc=%u iters=%u mag=%g: element %u is %.9g, cpu %.9g\n", n_hc,
                        iters, mag, i, got[i], ref[i]);
                break;
            }
        return 1;
    }
    return 0;
}

/* The exp of the device kernels (cu_expf: through double). */
struct host_exp_d {
    float operator()(float v) const { return (float)exp((double)v); }
};

/* hcr_* lane reads in the host emulation: a snapshot of the 32 lanes before the step (a shuffle
 * wraps its source lane mod 32). */
struct snap_get {
    const float *a;
    float operator()(uint32_t src) const { return a[src & 31]; }
};

/* hc_split_warp's register combine matrix for 32 lanes, step by step as a warp runs it. */
template <class E>
static void hcr_emulated(const float *mix, const float *scale, const float *base, uint32_t n_hc,
                         uint32_t iters, float eps, E ex, float *cm) {
    float v[32], mx[32], e[32], c[32], snap[32];
    for (uint32_t l = 0; l < 32; l++) v[l] = hcr_logit(mix + 2 * n_hc, scale[2], base + 2 * n_hc, n_hc, l);
    for (uint32_t l = 0; l < 32; l++) mx[l] = hcr_row_max(snap_get{v}, n_hc, l);
    for (uint32_t l = 0; l < 32; l++) e[l] = ex(v[l] - mx[l]);
    for (uint32_t l = 0; l < 32; l++) c[l] = hcr_softmax_norm(snap_get{e}, e[l], n_hc, l, eps);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            memcpy(snap, c, sizeof c);
            for (uint32_t l = 0; l < 32; l++) c[l] = hcr_row_pass(snap_get{snap}, snap[l], n_hc, l, eps);
        }
        memcpy(snap, c, sizeof c);
        for (uint32_t l = 0; l < 32; l++) c[l] = hcr_col_pass(snap_get{snap}, snap[l], n_hc, l, eps);
    }
    memcpy(cm, c, n_hc * n_hc * sizeof(float));
}

/* The unrolled n_hc = 4 path of hc_split_warp (hcr_*_n<4>), step by step as a warp runs it. */
template <class E>
static void hcr4_emulated(const float *mix, const float *scale, const float *base, uint32_t iters, float eps,
                          E ex, float *cm) {
    float v[32], mx[32], e[32], c[32], snap[32];
    for (uint32_t l = 0; l < 32; l++) v[l] = hcr_logit(mix + 8, scale[2], base + 8, 4, l);
    for (uint32_t l = 0; l < 32; l++) mx[l] = hcr_row_max(snap_get{v}, 4, l);
    for (uint32_t l = 0; l < 32; l++) e[l] = ex(v[l] - mx[l]);
    for (uint32_t l = 0; l < 32; l++) c[l] = hcr_softmax_norm_n<4>(snap_get{e}, e[l], l, eps);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            memcpy(snap, c, sizeof c);
            for (uint32_t l = 0; l < 32; l++) c[l] = hcr_row_pass_n<4>(snap_get{snap}, snap[l], l, eps);
        }
        memcpy(snap, c, sizeof c);
        for (uint32_t l = 0; l < 32; l++) c[l] = hcr_col_pass_n<4>(snap_get{snap}, snap[l], l, eps);
    }
    memcpy(cm, c, 16 * sizeof(float));
}

/* The n_hc = 4 combine matrix of hc_split_warp / hc_tail_kernel (hc_comb4_warp, hcr_*_n<4>) against
 * cpu_hc_split (the CPU's expf) and against the hcu_* passes (the device's exp through double), bit
 * for bit, on inputs drawn over many magnitudes: mix up to 1e4 (softmax rows that underflow to one
 * 1), base up to 100, eps 0 (zero sums: inf and NaN) to larger than the sums, 0..40 iterations. */
static int check_comb4(uint32_t iters, float mag, float eps, float bmag) {
    float mix[24], base[24], ref[24], seq[16], reg[16];
    const float scale[3] = {0.5f + uni(), 0.5f + uni(), 0.5f + uni()};
    for (uint32_t i = 0; i < 24; i++) mix[i] = mag * uni(), base[i] = bmag * uni();
    cpu_hc_split(mix, scale, base, 4, iters, eps, ref);
    hcr4_emulated(mix, scale, base, iters, eps, host_exp(), reg);
    int bad = memcmp(ref + 8, reg, sizeof reg) != 0;
    const host_exp_d exd;
    for (uint32_t r = 0; r < 4; r++) hcu_comb_softmax_row(mix + 8, scale[2], base + 8, 4, r, eps, seq, exd);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0)
            for (uint32_t r = 0; r < 4; r++) hcu_comb_row_pass(seq, 4, r, eps);
        for (uint32_t j = 0; j < 4; j++) hcu_comb_col_pass(seq, 4, j, eps);
    }
    hcr4_emulated(mix, scale, base, iters, eps, exd, reg);
    bad |= memcmp(seq, reg, sizeof reg) != 0;
    if (bad) fprintf(stderr, "FAIL n_hc=4 combine iters=%u mag=%g eps=%g bmag=%g\n", iters, mag, eps, bmag);
    return bad;
}

/* The register combine matrix against the shared-memory hcu_* passes (same exp), and with the CPU's
 * expf against cpu_hc_split, bit for bit. */
static int check_reg_split(uint32_t n_hc, uint32_t iters, float mag, float eps, float bmag) {
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc, nn = n_hc * n_hc;
    float mix[2 * 16 + 16 * 16], base[2 * 16 + 16 * 16], ref[2 * 16 + 16 * 16], seq[16 * 16], reg[32];
    const float scale[3] = {0.5f + uni(), 0.5f + uni(), 0.5f + uni()};
    for (uint32_t i = 0; i < n_mix; i++) mix[i] = mag * uni(), base[i] = bmag * uni();
    cpu_hc_split(mix, scale, base, n_hc, iters, eps, ref);
    hcr_emulated(mix, scale, base, n_hc, iters, eps, host_exp(), reg);
    int bad = memcmp(ref + 2 * n_hc, reg, nn * sizeof(float)) != 0;
    if (n_hc == 4) { /* the unrolled path too */
        hcr4_emulated(mix, scale, base, iters, eps, host_exp(), reg);
        bad |= memcmp(ref + 2 * n_hc, reg, nn * sizeof(float)) != 0;
    }
    const host_exp_d exd;
    for (uint32_t r = 0; r < n_hc; r++)
        hcu_comb_softmax_row(mix + 2 * n_hc, scale[2], base + 2 * n_hc, n_hc, r, eps, seq, exd);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0)
            for (uint32_t r = 0; r < n_hc; r++) hcu_comb_row_pass(seq, n_hc, r, eps);
        for (uint32_t j = 0; j < n_hc; j++) hcu_comb_col_pass(seq, n_hc, j, eps);
    }
    hcr_emulated(mix, scale, base, n_hc, iters, eps, exd, reg);
    bad |= memcmp(seq, reg, nn * sizeof(float)) != 0;
    if (bad)
        fprintf(stderr, "FAIL register hc combine n_hc=%u iters=%u mag=%g eps=%g bmag=%g\n", n_hc, iters, mag,
                eps, bmag);
    return bad;
}

/* router_kernel's selection with `threads` threads: the warps' maxima of the strided scan, the
 * candidates at or above their k-th largest (in a shuffled order: the kernel appends them by atomics),
 * each candidate's rank among them as its slot. Slots no candidate takes stay -1. */
static int rank_cs_bad; /* candidates whose rtu_rank_cs differs from rtu_rank */
static void topk_rank_emulated(const float *s, uint32_t n, uint32_t k, uint32_t threads, int32_t *out) {
    float wmax[32];
    const uint32_t nw = threads / 32;
    for (uint32_t w = 0; w < nw; w++) {
        wmax[w] = -INFINITY;
        for (uint32_t t = 32 * w; t < 32 * w + 32; t++)
            for (uint32_t e = t; e < n; e += threads) wmax[w] = fmaxf(wmax[w], s[e]);
    }
    const float lo = rtu_kth_max(wmax, nw, k);
    int32_t *cand = (int32_t *)malloc(n * sizeof(int32_t));
    uint32_t nc = 0;
    for (uint32_t e = 0; e < n; e++)
        if (s[e] >= lo) cand[nc++] = (int32_t)e;
    for (uint32_t i = nc; i > 1; i--) { /* any order: ranks do not depend on it */
        const uint32_t j = (uint32_t)(nxt() % i);
        const int32_t x = cand[i - 1];
        cand[i - 1] = cand[j], cand[j] = x;
    }
    /* the kernel keeps the candidates' scores beside their ids (router_block's s_cs) and ranks by
     * them (rtu_rank_cs); both ranks must agree */
    float *cs = (float *)malloc((nc ? nc : 1) * sizeof(float));
    for (uint32_t i = 0; i < nc; i++) cs[i] = s[cand[i]];
    for (uint32_t i = 0; i < k; i++) out[i] = -1;
    for (uint32_t i = 0; i < nc; i++) {
        const uint32_t r = rtu_rank_cs(cs, cand, nc, cs[i], cand[i]);
        if (r != rtu_rank(s, cand, nc, cand[i])) rank_cs_bad++;
        if (r < k) out[r] = cand[i];
    }
    free(cs);
    free(cand);
}

static int check_topk(uint32_t n, uint32_t k, uint32_t threads, int levels) {
    float *s = (float *)calloc(n, sizeof(float));
    int32_t ref[512], got[512];
    for (uint32_t e = 0; e < n; e++) {
        const uint64_t r = nxt();
        if (levels > 0) {
            const int q = (int)(r % (uint64_t)levels);
            s[e] = q == 0                 ? -0.0f
                   : q == 1               ? 0.0f
                   : q == 2 && levels > 6 ? INFINITY
                   : q == 3 && levels > 8 ? -INFINITY
                                          : (float)q * 0.25f;
        } else {
            s[e] = uni() * 3.0f;
        }
    }
    cpu_topk_desc(s, n, k, ref);
    rank_cs_bad = 0;
    topk_rank_emulated(s, n, k, threads, got);
    free(s);
    if (rank_cs_bad) {
        fprintf(stderr, "FAIL top-k n=%u k=%u threads=%u levels=%d: %d ranks by the kept scores differ\n", n,
                k, threads, levels, rank_cs_bad);
        return 1;
    }
    if (memcmp(ref, got, k * sizeof(int32_t)) != 0) {
        for (uint32_t i = 0; i < k; i++)
            if (ref[i] != got[i]) {
                fprintf(stderr, "FAIL top-k n=%u k=%u threads=%u levels=%d: slot %u is %d, cpu %d\n", n, k,
                        threads, levels, i, got[i], ref[i]);
                break;
            }
        return 1;
    }
    return 0;
}

int main(void) {
    int fails = 0, checks = 0;
    const uint32_t hcs[] = {1, 2, 3, 4, 5, 8, 16};
    const uint32_t its[] = {0, 1, 2, 20};
    const float mags[] = {0.01f, 1.0f, 30.0f};
    for (uint32_t a = 0; a < sizeof hcs / sizeof *hcs; a++)
        for (uint32_t b = 0; b < sizeof its / sizeof *its; b++)
            for (uint32_t m = 0; m < sizeof mags / sizeof *mags; m++)
                for (int rep = 0; rep < 20; rep++, checks++) fails += check_split(hcs[a], its[b], mags[m]);
    const float regmag[] = {0.01f, 1.0f, 8.0f, 30.0f, 200.0f};
    const float regeps[] = {0.0f, 1e-6f, 1e-3f, 0.25f, 3.0f};
    const float regb[] = {0.0f, 1.0f, 50.0f};
    for (uint32_t nh = 1; nh <= HCR_MAX; nh++)
        for (uint32_t it = 0; it <= 20; it++)
            for (uint32_t m = 0; m < sizeof regmag / sizeof *regmag; m++)
                for (uint32_t e = 0; e < sizeof regeps / sizeof *regeps; e++)
                    for (uint32_t b = 0; b < sizeof regb / sizeof *regb; b++)
                        for (int rep = 0; rep < 3; rep++, checks++)
                            fails += check_reg_split(nh, it, regmag[m], regeps[e], regb[b]);
    const uint32_t q4its[] = {0, 1, 2, 3, 20, 21, 40};
    const float q4mag[] = {1e-4f, 0.01f, 1.0f, 8.0f, 30.0f, 200.0f, 1e4f};
    const float q4eps[] = {0.0f, 1e-6f, 1e-3f, 0.25f, 3.0f};
    const float q4b[] = {0.0f, 1.0f, 100.0f};
    for (uint32_t it = 0; it < sizeof q4its / sizeof *q4its; it++)
        for (uint32_t m = 0; m < sizeof q4mag / sizeof *q4mag; m++)
            for (uint32_t e = 0; e < sizeof q4eps / sizeof *q4eps; e++)
                for (uint32_t b = 0; b < sizeof q4b / sizeof *q4b; b++)
                    for (int rep = 0; rep < 12; rep++, checks++)
                        fails += check_comb4(q4its[it], q4mag[m], q4eps[e], q4b[b]);
    const uint32_t ns[] = {1, 7, 64, 256, 300, 512};
    const uint32_t ks[] = {1, 2, 6, 8};
    const int lv[] = {0, 2, 3, 5, 9};
    for (uint32_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (uint32_t b = 0; b < sizeof ks / sizeof *ks; b++)
            for (uint32_t l = 0; l < sizeof lv / sizeof *lv; l++)
                for (uint32_t th = 32; th <= 256; th *= 8)
                    for (int rep = 0; rep < 8; rep++) {
                        const uint32_t k = ks[b] < ns[a] ? ks[b] : ns[a];
                        checks++;
                        fails += check_topk(ns[a], k, th, lv[l]);
                    }
    for (int rep = 0; rep < 4; rep++, checks++)
        fails += check_topk(256, 256, 256, 5); /* k = n: a full sort */
    printf("%s: %d of %d checks failed\n", fails ? "SMALLOPS UNITS FAILED" : "SMALLOPS UNITS PASSED", fails,
           checks);
    return fails ? 1 : 0;
}
