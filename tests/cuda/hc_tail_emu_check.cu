/* Host check of the register-tail decode pre step's layout (src/backend/cuda/cuda_hc_tail_units.cuh,
 * used by hc_tail_kernel in cuda_ops_hc.cu), bit for bit against an independent emulation of what
 * hc_pre_one_kernel computes:
 *  - Σx² of the whole HC row from the thread slots (hct_group, hct_sq4) equals cu_row_sumsq's tree
 *    (thread t: groups t, t + 256, ... element by element; xor butterfly per warp; 8 warp sums in
 *    order), emulated here from its definition, for n_embd 1024 and 4096;
 *  - u formed from the slots (hct_slot) equals u[d] = Σ_h x[h][d] w[h]; Σu² from the slots equals
 *    the tree over u; y = u * s * w equals the reference for every dim; every dim is written exactly
 *    once, by the last block (one-block tail) or across the P blocks (hct_writes, grid tail);
 *  - a control: a thread owning contiguous groups (another order) gives other bits for some row,
 *    so the comparison can tell orders apart.
 * Needs no GPU (exit 0 = pass). Build: make BUILD=build-x cuda-tests -> build-x/cuda/hc_tail_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hc_tail_units.cuh"

#define CHECK_RNG_SEED 4242
#include "check_rng.h"

static int g_fail = 0;
#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            if (g_fail < 20) {                                                                               \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
                printf(__VA_ARGS__);                                                                         \
                printf("\n");                                                                                \
            }                                                                                                \
            g_fail++;                                                                                        \
        }                                                                                                    \
    } while (0)

#define NT 256
#define NW (NT / 32)

static bool same_d(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }
static bool same_f(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The per-thread sums reduced as on the device: ss += shfl_xor(ss, o) for o = 16..1 in every warp
 * (all lanes in step), lane 0's value per warp, then the warp values added in order from 0. */
static double tree_finish(const double *per_thread) {
    double tot = 0.0;
    for (int w = 0; w < NW; w++) {
        double v[32], nv[32];
        memcpy(v, per_thread + 32 * w, sizeof v);
        for (int o = 16; o > 0; o >>= 1) {
            for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ o];
            memcpy(v, nv, sizeof v);
        }
        tot += v[0];
    }
    return tot;
}

/* cu_row_sumsq (vec) from its definition. */
static double ref_row_sumsq(const float *x, uint32_t width) {
    double th[NT];
    const uint32_t groups = width / 4;
    for (uint32_t t = 0; t < NT; t++) {
        double ss = 0.0;
        for (uint32_t g = t; g < groups; g += NT)
            for (uint32_t i = 4 * g; i < 4 * g + 4; i++) ss = ss + (double)x[i] * (double)x[i];
        th[t] = ss;
    }
    return tree_finish(th);
}

/* The kernel's Σ over thread slots: slot k of thread t is group slot_group(t, k). */
static double slots_sumsq(const float *x, uint32_t nslots, bool contiguous) {
    double th[NT];
    for (uint32_t t = 0; t < NT; t++) {
        double ss = 0.0;
        for (uint32_t k = 0; k < nslots; k++) {
            const uint32_t g = contiguous ? t * nslots + k : hct_group(t, k);
            ss = hct_sq4(ss, x[4 * g], x[4 * g + 1], x[4 * g + 2], x[4 * g + 3]);
        }
        th[t] = ss;
    }
    return tree_finish(th);
}

static float rms_scale(double tot, uint32_t width, float eps) {
    return 1.0f / sqrtf((float)(tot / (double)width) + eps);
}

/* One row: x of n_hc = 4 streams of ne dims (values of magnitude mag), weights w, norm weight nw. */
static void check_row(uint32_t ke, float mag, bool *control_differs) {
    const uint32_t ne = 1024 * ke, hd = HCT_NH * ne, P = hd / 256, nx = HCT_NH * ke;
    float *x = (float *)malloc((size_t)hd * 4), *nw = (float *)malloc((size_t)ne * 4);
    float *uref = (float *)malloc((size_t)ne * 4), *yref = (float *)malloc((size_t)ne * 4);
    float *yg = (float *)malloc((size_t)ne * 4);
    uint8_t *seen = (uint8_t *)malloc(ne / 4);
    if (!x || !nw || !uref || !yref || !yg || !seen) abort();
    for (uint32_t i = 0; i < hd; i++) x[i] = mag * uni() * (1.0f + (float)(nxt() % 1000));
    for (uint32_t i = 0; i < ne; i++) nw[i] = 1.0f + 0.5f * uni();
    float w[HCT_NH];
    for (uint32_t h = 0; h < HCT_NH; h++) w[h] = 0.25f + 0.5f * uni();
    const float eps = 1e-6f;

    /* phase 1: Σx² of the row */
    const double tx = ref_row_sumsq(x, hd);
    EXPECT(same_d(tx, slots_sumsq(x, nx, false)), "ke=%u mag=%g: slots' Σx² differs from cu_row_sumsq", ke,
           mag);
    if (!same_d(tx, slots_sumsq(x, nx, true))) *control_differs = true;

    /* reference tail: u[d], the tree over u, y */
    for (uint32_t d = 0; d < ne; d++) {
        float acc = 0.0f;
        for (uint32_t h = 0; h < HCT_NH; h++) acc += x[(size_t)h * ne + d] * w[h];
        uref[d] = acc;
    }
    const float sref = rms_scale(ref_row_sumsq(uref, ne), ne, eps);
    for (uint32_t d = 0; d < ne; d++) yref[d] = uref[d] * sref * nw[d];

    /* the kernel's tail from the slots, for the three modes: one block (0), grid (1), cluster (2: CL = 4 ke
     * CTAs, each its slice of 64 groups, hct_cl_mine) */
    for (int mode = 0; mode < 3; mode++) {
        const int grid = mode; /* (the labels) */
        const uint32_t CL = 4 * ke;
        double th[NT];
        float uk[NT][4][4]; /* [t][e][c]: u group hct_group(t, e) */
        for (uint32_t t = 0; t < NT; t++) {
            double su = 0.0;
            for (uint32_t e = 0; e < ke; e++) {
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (uint32_t h = 0; h < HCT_NH; h++) {
                    const uint32_t g = hct_group(t, hct_slot(h, e, ke)); /* the row group of that slot */
                    for (int c = 0; c < 4; c++) acc[c] += x[4 * g + c] * w[h];
                }
                memcpy(uk[t][e], acc, sizeof acc);
                su = hct_sq4(su, acc[0], acc[1], acc[2], acc[3]);
            }
            th[t] = su;
        }
        const float sk = rms_scale(tree_finish(th), ne, eps);
        EXPECT(same_f(sk, sref), "ke=%u grid=%d: norm scale %.9g, reference %.9g", ke, grid, sk, sref);
        memset(seen, 0, ne / 4);
        memset(yg, 0, (size_t)ne * 4);
        const uint32_t b_lo = mode == 1   ? 0
                              : mode == 2 ? 0
                                          : P - 1,
                       b_hi = mode == 1   ? P
                              : mode == 2 ? CL
                                          : P; /* one-block tail: any block, say the last */
        for (uint32_t b = b_lo; b < b_hi; b++)
            for (uint32_t t = 0; t < NT; t++)
                for (uint32_t e = 0; e < ke; e++) {
                    const uint32_t g = hct_group(t, e);
                    if (mode == 2 ? !hct_cl_mine(g, b, ke, CL) : !hct_writes(g, P, b, mode == 1)) continue;
                    if (mode == 2) /* its Q8_K block is CTA b's, held by warps 2m, 2m + 1 of slot e */
                        EXPECT((g >> 6) == b && e == hct_cl_q8k_e(b) && (t >> 6) == hct_cl_q8k_m(b),
                               "ke=%u cluster: group %u (thread %u, slot %u) outside CTA %u's Q8_K block", ke,
                               g, t, e, b);
                    EXPECT(g < ne / 4, "ke=%u: group %u past the row", ke, g);
                    if (g >= ne / 4) continue;
                    seen[g]++;
                    for (int c = 0; c < 4; c++) {
                        EXPECT(same_f(uk[t][e][c], uref[4 * g + c]), "ke=%u: u[%u] differs", ke, 4 * g + c);
                        yg[4 * g + c] = uk[t][e][c] * sk * nw[4 * g + c];
                    }
                }
        uint32_t bad = 0;
        for (uint32_t g = 0; g < ne / 4; g++) bad += seen[g] != 1;
        EXPECT(bad == 0, "ke=%u grid=%d: %u groups not written exactly once", ke, grid, bad);
        EXPECT(memcmp(yg, yref, (size_t)ne * 4) == 0, "ke=%u grid=%d mag=%g: y differs", ke, grid, mag);
    }
    free(x), free(nw), free(uref), free(yref), free(yg), free(seen);
}

int main(void) {
    /* the slots of a thread cover the row: every group once over the 256 threads */
    for (uint32_t ke = 1; ke <= 4; ke *= 4) {
        const uint32_t nx = HCT_NH * ke, groups = NT * nx;
        uint8_t *cnt = (uint8_t *)calloc(groups, 1);
        if (!cnt) abort();
        for (uint32_t t = 0; t < NT; t++)
            for (uint32_t h = 0; h < HCT_NH; h++)
                for (uint32_t e = 0; e < ke; e++) {
                    const uint32_t k = hct_slot(h, e, ke), g = hct_group(t, k);
                    EXPECT(k < nx && g == h * (NT * ke) + hct_group(t, e),
                           "ke=%u: slot (%u, %u) of thread %u", ke, h, e, t);
                    if (g < groups) cnt[g]++;
                }
        for (uint32_t g = 0; g < groups; g++)
            EXPECT(cnt[g] == 1, "ke=%u: group %u held %u times", ke, g, cnt[g]);
        free(cnt);
    }
    /* the cluster tail's mix chunks: CTA b's chunks b CPC + j (the kernel's i0) cover the row's chunks once
     */
    for (uint32_t ke = 1; ke <= 4; ke *= 4) {
        const uint32_t P = HCT_NH * 1024 * ke / 256, CL = 4 * ke, CPC = P / CL;
        uint8_t cnt[64] = {0};
        for (uint32_t b = 0; b < CL; b++)
            for (uint32_t j = 0; j < CPC; j++) cnt[b * CPC + j]++;
        uint32_t bad = P % CL != 0;
        for (uint32_t p = 0; p < P; p++) bad += cnt[p] != 1;
        EXPECT(bad == 0, "ke=%u: the cluster's chunks (%u a CTA) do not cover the %u once", ke, CPC, P);
    }
    bool control_differs = false;
    const float mags[5] = {1e-3f, 0.05f, 1.0f, 2.0f, 40.0f};
    int rows = 0;
    for (uint32_t ke = 1; ke <= 4; ke *= 4)
        for (int mi = 0; mi < 5; mi++)
            for (int r = 0; r < 4; r++, rows++) check_row(ke, mags[mi], &control_differs);
    EXPECT(control_differs, "the contiguous-group control gave the tree's bits on every row");
    if (g_fail) {
        printf("hc_tail_emu_check: %d failures\n", g_fail);
        return 1;
    }
    printf("hc_tail_emu_check: ok (%d rows, n_embd 1024 and 4096, one-block, grid and cluster tails)\n",
           rows);
    return 0;
}
