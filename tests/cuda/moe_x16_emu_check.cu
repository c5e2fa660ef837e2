/* Host emulation of the exact warpgroup routed-expert products (src/backend/cuda/cuda_ops_moe_x16.cu)
 * with the kernels' own units (cuda_moe_x16.cuh):
 *   1. the k order: x16_pos_elem is a permutation of a superblock, the B image offsets of the
 *      loader's chunks are the elements' offsets, and both are where the K-major descriptor the
 *      kernel builds points the tensor cores (x16_b_desc_off);
 *   2. the A fragments: every (row, k position) of a stage's 128 rows is written by exactly one
 *      lane and register (the mma.m16n8k16 A layout the warpgroup product uses), with the exact
 *      integer weight of the element the position holds (IQ2_XXS sign * g * ls, Q2_K q * sc, the
 *      Q2_K mins), for both superblock parities;
 *   3. whole dot products: the superblock sums formed from those fragments and the packed
 *      activations (both chains of a heavy superblock) stay below 2^24 in the sum of |terms| (the
 *      exactness argument's bound, checked term by term), and the float update then gives
 *      quant_dot_iq2_xxs / quant_dot_q2_k bit for bit: quantized and random-byte weights (largest
 *      grid values and scales), Gaussian activations (light), uniform ones (heavy), mixed rows.
 * Needs no GPU (exit 0 = pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_x16.cuh"

#define CHECK_RNG_SEED 9090
#include "check_rng.h"

static int fails;

static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 6; i++) s += uni();
    return s;
}

/* ---- 1. the k order ---- */
static void check_order(void) {
    int seen[256] = {0}, bad = 0;
    for (int p = 0; p < 256; p++) {
        const int e = x16_pos_elem(p);
        if (e < 0 || e > 255 || seen[e]++) bad++;
    }
    for (int n = 0; n < X16_BN; n++)
        for (int p = 0; p < 256; p++) {
            if (x16_b_off(p, n) != x16_b_desc_off(p, n) || x16_b_off(p, n) >= X16_B_BYTES) bad++;
            if (x16_b_off_sw(p, n) != x16_b_desc_off_sw(p, n) || x16_b_off_sw(p, n) >= X16_B_BYTES) bad++;
        }
    /* distinct offsets: the image holds each (position, pair) once */
    static unsigned char hit[X16_B_BYTES / 2];
    memset(hit, 0, sizeof hit);
    for (int n = 0; n < X16_BN; n++)
        for (int p = 0; p < 256; p++) bad += hit[x16_b_off(p, n) / 2]++ != 0;
    memset(hit, 0, sizeof hit);
    for (int n = 0; n < X16_BN; n++)
        for (int p = 0; p < 256; p++) bad += hit[x16_b_off_sw(p, n) / 2]++ != 0;
    /* the loader's 16-byte chunks of one warp instruction (8 pairs n & 7 = 0..7, one chunk each)
     * fall in 8 distinct bank groups in both layouts */
    for (int kb = 0; kb < 32; kb++)
        for (int nb = 0; nb < 8; nb++) {
            int seen_i = 0, seen_s = 0;
            for (int r = 0; r < 8; r++) {
                seen_i |= 1 << ((x16_b_chunk(8 * nb + r, kb) >> 4) & 7);
                seen_s |= 1 << ((x16_b_chunk_sw(8 * nb + r, kb) >> 4) & 7);
            }
            bad += seen_i != 255 || seen_s != 255;
        }
    printf("%s k order: a permutation of the superblock; B image offsets = the descriptors' (interleaved and "
           "128-byte swizzle; %d bad)\n",
           bad ? "FAIL" : "ok  ", bad);
    fails += bad != 0;
}

/* ---- weights ---- */
static uint8_t *make_rows(uint32_t type, int in, int rows, int random_bytes, uint64_t *rb) {
    dsv4_type_row_bytes(type, (uint64_t)in, rb);
    uint8_t *d = (uint8_t *)malloc(*rb * rows);
    float *wf = (float *)malloc(in * sizeof(float));
    const int nb = in / 256, bb = type == DSV4_TYPE_IQ2_XXS ? 66 : 84;
    for (int r = 0; r < rows; r++) {
        uint8_t *row = d + (size_t)r * *rb;
        if (random_bytes) {
            for (uint64_t i = 0; i < *rb; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < nb; b++) {
                uint8_t *blk = row + bb * b;
                const uint16_t dv = dsv4_f32_to_f16(0.01f * (1.0f + uni()));
                if (type == DSV4_TYPE_IQ2_XXS) {
                    memcpy(blk, &dv, 2);
                    if (r % 3 == 0) /* the largest scale and grid values: |w'| = 1333 */
                        for (int j = 0; j < 8; j++) {
                            blk[2 + 8 * j + 7] |= 0xf0;
                            for (int l = 0; l < 4; l++) blk[2 + 8 * j + l] = 0xff;
                        }
                } else {
                    const uint16_t dm = dsv4_f32_to_f16(0.005f * (1.0f + uni()));
                    memcpy(blk + 80, &dv, 2), memcpy(blk + 82, &dm, 2);
                    if (r % 3 == 0)
                        for (int i = 0; i < 16; i++) blk[i] = 0xff; /* sc = m = 15 */
                }
            }
        } else {
            for (int i = 0; i < in; i++) wf[i] = gauss() * 0.02f;
            quant_quantize_row(type, wf, row, in);
        }
    }
    free(wf);
    return d;
}

/* Q8_K rows: kind 0 Gaussian, 1 uniform (heavy superblocks), 2 mixed per block; row r varies. */
static dsv4_q8_k *make_act(int in, int n, int kind) {
    dsv4_q8_k *q = (dsv4_q8_k *)malloc(sizeof(dsv4_q8_k) * (in / 256) * n);
    float *x = (float *)malloc(in * sizeof(float));
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < in; i++) {
            const int k = kind == 2 ? (i / 256 + r) % 2 : kind;
            x[i] = k ? uni() * 3.0f : gauss();
        }
        quant_act_q8_k(x, q + (size_t)r * (in / 256), in);
    }
    free(x);
    return q;
}

/* ---- 2 + 3: a stage at a time, every fragment of every warp, then the dot products ---- */
template <int K> static void check_product(int random_bytes, int act_kind, bool force_heavy) {
    constexpr bool DUAL = K == GM_IQ2_XXS;
    const uint32_t type = DUAL ? DSV4_TYPE_IQ2_XXS : DSV4_TYPE_Q2_K;
    const int in = DUAL ? 1024 : 512, nb = in / 256, n_out = DUAL ? 64 : 128, npair = 24;
    uint64_t rb;
    uint8_t *w0 = make_rows(type, in, n_out, random_bytes, &rb);
    uint8_t *w1 = DUAL ? make_rows(type, in, n_out, random_bytes, &rb) : w0;
    dsv4_q8_k *x = make_act(in, npair, act_kind);
    static uint32_t grid_h[256 * MH_REP * 4], sign_h[128 * MH_REP * 4], lstab[32];
    mh_fill_tables(grid_h, sign_h, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs, 0, 1);
    if (DUAL)
        x16_fill_lstab_iq2(lstab, 0, 1);
    else
        x16_fill_lstab_q2k(lstab, 0, 1);
    static uint8_t st[X16_ROWS * 96];
    static double A[X16_ROWS][256], Am[X16_ROWS][16];
    static int cover[X16_ROWS][256], cover_m[X16_ROWS][16];
    static float acc[X16_ROWS][64];
    memset(acc, 0, sizeof acc);
    long long bad_cover = 0, bad_w = 0, bad_bound = 0, heavy_n = 0, light_n = 0, bad_dot = 0;
    double worst_frac = 0;
    float *ref = (float *)malloc(in * sizeof(float));
    for (int s = 0; s < nb; s++) {
        memset(st, 0xa5, sizeof st);
        for (int tid = 0; tid < X16_ROWS; tid++)
            mw_load_weights<K, DUAL, X16_ROWS>(w0, w1, rb, rb * n_out, n_out, 0, 0, s, st, tid);
        memset(cover, 0, sizeof cover), memset(cover_m, 0, sizeof cover_m);
        for (int warp = 0; warp < 8; warp++) {
            const int r0 = X16_WG_ROWS * (warp >> 2) + 16 * (warp & 3);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                for (int j = 0; j < 8; j++) {
                    uint32_t a[8];
                    x16_frag_a<K>(st, r0, s & 1, j, lane, grid_h, sign_h, lstab, a);
                    for (int reg = 0; reg < 8; reg++)
                        for (int h = 0; h < 2;
                             h++) { /* mma.m16n8k16 A: a0 row g, k 2t..; a1 row g+8; a2, a3 k+8 */
                            const int ai = reg & 3, stp = 2 * j + (reg >> 2);
                            const int row = r0 + g + 8 * (ai & 1), pos = 16 * stp + 2 * t + 8 * (ai >> 1) + h;
                            A[row][pos] = gm_f16((uint16_t)(a[reg] >> (16 * h)));
                            cover[row][pos]++;
                        }
                }
                if (!DUAL) {
                    uint32_t am[4];
                    x16_frag_min(st, r0, lane, am);
                    for (int ai = 0; ai < 4; ai++)
                        for (int h = 0; h < 2; h++) {
                            const int row = r0 + g + 8 * (ai & 1), k = 2 * t + 8 * (ai >> 1) + h;
                            Am[row][k] = gm_f16((uint16_t)(am[ai] >> (16 * h)));
                            cover_m[row][k]++;
                        }
                }
            }
        }
        /* coverage and the integer weights of the staged rows */
        for (int rr = 0; rr < X16_ROWS; rr++) {
            int which;
            const int row = mw_stage_row(DUAL, 0, rr, n_out, &which, X16_ROWS);
            const uint8_t *wr = (which ? w1 : w0) + (size_t)row * rb;
            for (int pos = 0; pos < 256; pos++) {
                bad_cover += cover[rr][pos] != 1;
                const int e = x16_pos_elem(pos);
                double want;
                if (DUAL) {
                    const uint8_t *blk = wr + 66 * s + 2;
                    const int sbk = e / 32, l = (e % 32) / 8, k = e % 8;
                    uint32_t a0, a1;
                    memcpy(&a0, blk + 8 * sbk, 4), memcpy(&a1, blk + 8 * sbk + 4, 4);
                    const int gv = (int)((dsv4_iq2xxs_grid[(a0 >> (8 * l)) & 0xff] >> (8 * k)) & 0xff);
                    const int neg = (dsv4_ksigns_iq2xs[(a1 >> (7 * l)) & 127] >> k) & 1;
                    want = (neg ? -1.0 : 1.0) * gv * (2 * (a1 >> 28) + 1);
                } else {
                    const uint8_t *blk = wr + 84 * s;
                    const int hf = e / 128, sh = 2 * ((e % 128) / 32);
                    want = ((blk[16 + 32 * hf + e % 32] >> sh) & 3) * (blk[e / 16] & 15);
                }
                bad_w += A[rr][pos] != want;
            }
            if (!DUAL)
                for (int k = 0; k < 16; k++) {
                    bad_cover += cover_m[rr][k] != 1;
                    bad_w += Am[rr][k] != (double)(wr[84 * s + k] >> 4);
                }
        }
        /* the tile's heavy rule: the expert's largest Σ w'^2 (gate and up; x16_iq2_w2 on the raw
         * blocks, checked against the decoded weights) times the tokens' largest Σ q^2 */
        uint32_t w2 = 0, g2[256];
        for (int i = 0; i < 256; i++) g2[i] = x16_grid_sq(dsv4_iq2xxs_grid[i]);
        for (int rr = 0; DUAL && rr < X16_ROWS; rr++) {
            int which;
            const int row = mw_stage_row(DUAL, 0, rr, n_out, &which, X16_ROWS);
            const uint32_t v = x16_iq2_w2((which ? w1 : w0) + (size_t)row * rb + 66 * s, g2);
            double sq = 0;
            for (int pos = 0; pos < 256; pos++) sq += A[rr][pos] * A[rr][pos];
            bad_w += sq != (double)v;
            w2 = v > w2 ? v : w2;
        }
        uint32_t qmax = 0;
        for (int n = 0; n < npair; n++) {
            uint32_t q2 = 0;
            for (int i = 0; i < 256; i++)
                q2 += (uint32_t)(x[(size_t)n * nb + s].qs[i] * x[(size_t)n * nb + s].qs[i]);
            qmax = q2 > qmax ? q2 : qmax;
        }
        const bool heavy = DUAL && (force_heavy || x16_heavy(w2, qmax));
        heavy_n += heavy, light_n += !heavy;
        /* the superblock's sums and the float update, per (staged row, pair) */
        for (int n = 0; n < npair; n++) {
            const dsv4_q8_k *xb = x + (size_t)n * nb + s;
            double B1[256], Bl[256], Bh[256];
            for (int lane = 0; lane < 32; lane++) {
                uint16_t h1[8], hl[8], hh[8];
                x16_pack_lane(xb->qs, lane, h1, hl, hh);
                for (int i = 0; i < 8; i++)
                    B1[8 * lane + i] = gm_f16(h1[i]), Bl[8 * lane + i] = gm_f16(hl[i]),
                                  Bh[8 * lane + i] = gm_f16(hh[i]);
            }
            const float dx = xb->d;
            for (int rr = 0; rr < X16_ROWS; rr++) {
                /* the kernel's chains: light c1 = A.B1; heavy c1 = A.lo, c2 = A.hi */
                double c1 = 0, c2 = 0, t1 = 0, t2 = 0;
                for (int pos = 0; pos < 256; pos++) {
                    const double b1 = heavy ? Bl[pos] : B1[pos];
                    c1 += A[rr][pos] * b1, t1 += fabs(A[rr][pos] * b1);
                    if (heavy) c2 += A[rr][pos] * Bh[pos], t2 += fabs(A[rr][pos] * Bh[pos]);
                }
                double cm = 0, tm = 0;
                if (!DUAL)
                    for (int k = 0; k < 16; k++)
                        cm += Am[rr][k] * xb->bsums[k], tm += fabs(Am[rr][k] * xb->bsums[k]);
                const double lim = 16777216.0;
                bad_bound += !(t1 < lim) || !(t2 < lim) || !(tm < lim);
                if (t1 / lim > worst_frac) worst_frac = t1 / lim;
                int which;
                const int row = mw_stage_row(DUAL, 0, rr, n_out, &which, X16_ROWS);
                const uint8_t *wr = (which ? w1 : w0) + (size_t)row * rb;
                const float f1[4] = {(float)c1, (float)c1, (float)c1, (float)c1};
                const float f2[4] = {(float)c2, (float)c2, (float)c2, (float)c2};
                const float fm[4] = {(float)cm, (float)cm, (float)cm, (float)cm};
                float a4[4] = {acc[rr][n], acc[rr][n], acc[rr][n], acc[rr][n]};
                const float dxs[2] = {dx, dx};
                if (DUAL) {
                    const float dw[2] = {gm_f16p(wr + 66 * s), gm_f16p(wr + 66 * s)};
                    x16_update_iq2(a4, f1, f2, heavy, dw, dxs);
                } else {
                    const float dw[2] = {gm_f16p(wr + 84 * s + 80), gm_f16p(wr + 84 * s + 80)};
                    const float dm[2] = {gm_f16p(wr + 84 * s + 82), gm_f16p(wr + 84 * s + 82)};
                    x16_update_q2k(a4, f1, fm, dw, dm, dxs);
                }
                acc[rr][n] = a4[0];
            }
        }
    }
    /* the finished dots against the CPU's */
    for (int rr = 0; rr < X16_ROWS; rr++) {
        int which;
        const int row = mw_stage_row(DUAL, 0, rr, n_out, &which, X16_ROWS);
        const uint8_t *wr = (which ? w1 : w0) + (size_t)row * rb;
        for (int n = 0; n < npair; n++) {
            const float got = DUAL ? qm_mul(0.125f, acc[rr][n]) : acc[rr][n];
            const dsv4_q8_k *xr = x + (size_t)n * nb;
            const float want =
                DUAL ? quant_dot_iq2_xxs_scalar(wr, xr, in) : quant_dot_q2_k_scalar(wr, xr, in);
            const float want2 = DUAL ? quant_dot_iq2_xxs(wr, xr, in) : quant_dot_q2_k(wr, xr, in);
            if (memcmp(&got, &want, 4) || memcmp(&got, &want2, 4)) {
                if (bad_dot < 3) printf("  row %d pair %d: %.9g vs %.9g / %.9g\n", rr, n, got, want, want2);
                bad_dot++;
            }
        }
    }
    const bool bad = bad_cover || bad_w || bad_bound || bad_dot || (force_heavy && light_n);
    printf("%s %-7s %-9s %-8s%s: coverage %lld bad, weights %lld bad, bound %lld over (largest sum %.2f of "
           "2^24), "
           "%lld heavy / %lld light superblocks, %lld of %d dots differ from quant_dot\n",
           bad ? "FAIL" : "ok  ", DUAL ? "IQ2_XXS" : "Q2_K", random_bytes ? "random" : "quantized",
           act_kind == 0   ? "gauss"
           : act_kind == 1 ? "uniform"
                           : "mixed",
           force_heavy ? " split" : "", bad_cover, bad_w, bad_bound, worst_frac, heavy_n, light_n, bad_dot,
           X16_ROWS * npair);
    fails += bad;
    free(ref), free(w0), free(x);
    if (DUAL) free(w1);
}

/* The layouts fit the largest shared memory of an H100 / H200 block (227 KB) at the kernels'
 * stage counts, and keep the B images 128-byte aligned. */
static void check_layout(void) {
    int bad = 0;
    const int kinds[2] = {GM_IQ2_XXS, GM_Q2_K}, stages[2] = {3, 4};
    for (int i = 0; i < 2; i++) {
        const x16_layout l = x16_layout_of(kinds[i], stages[i]);
        bad += l.total > 232448 || (l.stage0 + l.b) % 128 || l.stage_bytes % 128 || l.x % 128 ||
               (l.stage0 + l.bm) % 128 || l.grid % 16;
    }
    printf("%s layouts: IQ2_XXS 3 stages %d B, Q2_K 4 stages %d B\n", bad ? "FAIL" : "ok  ",
           x16_layout_of(GM_IQ2_XXS, 3).total, x16_layout_of(GM_Q2_K, 4).total);
    fails += bad != 0;
}

/* The heavy rule at its edge: light exactly when w2 * q2 < 2^48. */
static void check_rule(void) {
    const uint32_t a = 1u << 24, b = 1u << 24;
    const int bad = x16_heavy(a, b) != true || x16_heavy(a, b - 1) != false ||
                    x16_heavy(0xffffffffu, 65537u) != true || x16_heavy(65535u, 0xffffffffu) != false ||
                    x16_heavy(0, 0xffffffffu) != false;
    printf("%s heavy rule: w2 * q2 >= 2^48 in 64-bit integers\n", bad ? "FAIL" : "ok  ");
    fails += bad != 0;
}

int main(void) {
    check_rule();
    check_order();
    check_layout();
    for (int rbytes = 0; rbytes < 2; rbytes++)
        for (int ak = 0; ak < 3; ak++) {
            check_product<GM_IQ2_XXS>(rbytes, ak, false);
            check_product<GM_IQ2_XXS>(rbytes, ak, true);
            check_product<GM_Q2_K>(rbytes, ak, false);
        }
    printf(fails ? "MOE X16 EMULATION FAILED: %d check(s)\n" : "MOE X16 EMULATION PASSED\n", fails);
    return fails ? 1 : 0;
}
