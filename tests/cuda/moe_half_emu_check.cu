/* Host emulation of the f16 tensor-core routed gate/up product (src/backend/cuda/cuda_ops_moe_half.cu)
 * with the kernel's own units (cuda_moe_half.cuh):
 *   1. decode: every element a lane decodes from a staged IQ2_XXS row (both superblock parities,
 *      several tensor shifts p, quantized rows and random bytes) has the bits of
 *      f16(dequantized element * 2^p), the one rounding the header claims;
 *   2. the shift: mh_shift_of keeps |g * ls| * d_max * 2^(p-3) <= 2^15 and is the largest such p;
 *   3. whole products: every CTA run on the CPU (the stage copies into a shared-memory image with
 *      stale bytes, the tables, the fragments, mma.m16n8k16 f16 -> f32 emulated from the PTX
 *      fragment layout with exact products, the epilogue) against two references: the float64
 *      dot of the rounded operands (what the kernel must compute: <= 1e-5 of the row's sum of
 *      |w x|), and the CPU's mid from quant_dot_iq2_xxs (the error of f16 operands: <= 4e-3 of the
 *      row's sum of |w x|). Ragged tiles, experts over several tiles, partial row blocks, rows
 *      scaled past XB_XMAX (2^-e), tiny block scales, clamp, 2-3 stages, 1-3 row blocks per CTA.
 * Needs no GPU (exit 0 = pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_half.cuh"
extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_silu */
}

#define CHECK_RNG_SEED 777
#include "check_rng.h"
#include "iq2_rows.h"

static int fails;

/* D = A B + C, m16n8k16 f16 x f16 -> f32 (PTX fragment layout); the products are exact, the sum
 * is taken in double and rounded once (the tensor cores' f32 sum differs from it by far less than
 * the tolerances below). */
static void emu_mma(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    double A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 2; i++) {
            A[g][2 * t + i] = gm_f16((uint16_t)(a[lane][0] >> (16 * i)));
            A[g + 8][2 * t + i] = gm_f16((uint16_t)(a[lane][1] >> (16 * i)));
            A[g][2 * t + 8 + i] = gm_f16((uint16_t)(a[lane][2] >> (16 * i)));
            A[g + 8][2 * t + 8 + i] = gm_f16((uint16_t)(a[lane][3] >> (16 * i)));
            B[2 * t + i][g] = gm_f16((uint16_t)(b[lane][0] >> (16 * i)));
            B[2 * t + 8 + i][g] = gm_f16((uint16_t)(b[lane][1] >> (16 * i)));
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >> 1) * 8, col = 2 * t + (i & 1);
            double s = d[lane][i];
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][col];
            d[lane][i] = (float)s;
        }
    }
}

/* ---- 1. decode ---- */
static void check_decode(int random_bytes, float dscale, int p) {
    const int in = 1024, rows = 16;
    uint64_t rb;
    uint8_t *w = make_rows(in, rows, random_bytes, dscale, &rb);
    static uint32_t grid_h[256 * MH_REP * 4], sign_h[128 * MH_REP * 4];
    mh_fill_tables(grid_h, sign_h, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs, 0, 1);
    static uint8_t st[MW_ROWS * 72];
    float *ref = (float *)malloc(in * sizeof(float));
    const float wsc = xb_pow2(p - 3), two_p = xb_pow2(p);
    long long bad = 0, total = 0;
    for (int s = 0; s < in / 256; s++) {
        memset(st, 0xa5, sizeof st);
        /* all 256 staged rows of row block 0 (gate rows 0..127, up rows the same): rows past
         * `rows` read row rows - 1 (n_out = rows) */
        for (int tid = 0; tid < MW_THREADS; tid++)
            mw_load_weights<GM_IQ2_XXS, true>(w, w, rb, rb * rows, rows, 0, 0, s, st, tid);
        for (int r0 = 0; r0 < 16; r0 += 16) {
            for (int lane = 0; lane < 32; lane++) {
                mh_scales sc;
                mh_row_scales<GM_IQ2_XXS>(st, r0, s, lane, wsc, &sc);
                for (int j = 0; j < 8; j++) {
                    uint32_t a[8];
                    mh_frag_a<GM_IQ2_XXS>(st, r0, s, j, lane, grid_h, sign_h, sc, a);
                    const int g = lane >> 2, t = lane & 3;
                    for (int h = 0; h < 2; h++) {
                        const int row = r0 + g + 8 * h;
                        quant_dequant_row(DSV4_TYPE_IQ2_XXS, w + (size_t)row * rb, ref, in);
                        /* a[0] row g elems 8t, 8t+1; a[2] 8t+2, +3; a[4] 8t+4, +5; a[6] 8t+6, +7 */
                        for (int e = 0; e < 8; e++) {
                            const uint32_t word = a[2 * (e >> 1) + h];
                            const uint16_t got = (uint16_t)(word >> (16 * (e & 1)));
                            const float exact = ref[256 * s + 32 * j + 8 * t + e] * two_p;
                            const uint16_t want = dsv4_f32_to_f16(exact);
                            total++;
                            if (got != want) {
                                if (bad < 3)
                                    printf("  decode row %d sb %d j %d lane %d e %d: %04x vs %04x (%g)\n",
                                           row, s, j, lane, e, got, want, exact);
                                bad++;
                            }
                        }
                    }
                }
            }
        }
    }
    printf("%s decode %-12s d ~%-8g p=%-3d %lld of %lld elements differ from f16(element * 2^p)\n",
           bad ? "FAIL" : "ok  ", random_bytes ? "random bytes" : "quantized", dscale, p, bad, total);
    fails += bad != 0;
    free(w), free(ref);
}

/* ---- 2. the shift ---- */
static void check_shift(void) {
    long long bad = 0;
    const uint32_t tests[] = {0x0001, 0x0400, 0x1400, 0x2000, 0x3c00, 0x4000, 0x5fff, 0x7bff, 0x0123, 0x3555};
    const int nt = (int)(sizeof tests / sizeof tests[0]);
    for (int i = 0; i < nt; i++) {
        for (int kind = 0; kind < 2; kind++) { /* IQ2_XXS, then Q2_K with dmin = tests[nt - 1 - i] */
            bool ok;
            const uint32_t mb = tests[nt - 1 - i];
            const int p = mh_shift_of(kind ? GM_Q2_K : GM_IQ2_XXS, tests[i], mb, &ok);
            const double d = gm_f16((uint16_t)tests[i]), dm = gm_f16((uint16_t)mb);
            const double top = kind ? fmax(45 * d, 15 * dm) : d * MH_ELEM_MAX / 8.0;
            if (!ok || top * ldexp(1.0, p) > 32768.0 || top * ldexp(1.0, p + 1) <= 32768.0) {
                printf("  shift of %04x/%04x (%s): p %d gives %g\n", tests[i], mb, kind ? "Q2_K" : "IQ2_XXS",
                       p, top * ldexp(1.0, p));
                bad++;
            }
        }
    }
    bool ok0, okinf, oknan, okm;
    const int p0 = mh_shift_of(GM_IQ2_XXS, 0, 0, &ok0);
    mh_shift_of(GM_IQ2_XXS, 0x7c00, 0, &okinf);
    mh_shift_of(GM_IQ2_XXS, 0x7e00, 0, &oknan);
    mh_shift_of(GM_Q2_K, 0x3c00, 0x7c00, &okm);
    bad += !ok0 || p0 != 0 || okinf || oknan || okm;
    printf(
        "%s shift: the largest p with every element below 2^15 for %d scales (IQ2_XXS and Q2_K); zero -> 0; "
        "inf / NaN d or dmin refused\n",
        bad ? "FAIL" : "ok  ", nt);
    fails += bad != 0;
}

/* Element l of a Q2_K superblock (84 bytes) as d sc q and dmin m, read from the bytes by the
 * format's layout (halves of 128, four 2-bit planes of 32, a scale byte per 16) */
static void q2k_terms(const uint8_t *blk, int l, double *aq, double *bm) {
    const int hf = l / 128, sh = 2 * ((l % 128) / 32), grp = 8 * hf + (l % 128) / 16;
    const int q = (blk[16 + 32 * hf + l % 32] >> sh) & 3;
    *aq = gm_f16p(blk + 80) * (blk[grp] & 15) * q;
    *bm = gm_f16p(blk + 82) * (blk[grp] >> 4);
}

/* Q2_K decode: every element within three f16 roundings of (d sc q - dmin m) 2^p: the two scaled
 * block constants and the fused multiply-add, each <= 2^-11 relative (+ the f16 subnormal step) */
static void check_decode_q2k(int random_bytes, float dscale, int p) {
    const int in = 768, rows = 16;
    uint64_t rb;
    dsv4_type_row_bytes(DSV4_TYPE_Q2_K, (uint64_t)in, &rb);
    uint8_t *w = (uint8_t *)malloc(rb * rows);
    float *wf = (float *)malloc(in * sizeof(float)), *ref = (float *)malloc(in * sizeof(float));
    for (int r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (random_bytes) {
            for (uint64_t i = 0; i < rb; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < in / 256; b++) {
                const uint16_t dv = dsv4_f32_to_f16(uni() * dscale), dm = dsv4_f32_to_f16(uni() * dscale);
                memcpy(row + 84 * b + 80, &dv, 2), memcpy(row + 84 * b + 82, &dm, 2);
            }
        } else {
            for (int i = 0; i < in; i++) wf[i] = uni() * 5.0f * dscale;
            quant_quantize_row(DSV4_TYPE_Q2_K, wf, row, in);
        }
    }
    static uint8_t st[512 * 96];
    const float two_p = xb_pow2(p);
    long long bad = 0, total = 0;
    double worst = 0;
    for (int s = 0; s < in / 256; s++) {
        memset(st, 0xa5, sizeof st);
        for (int tid = 0; tid < MW_THREADS; tid++)
            mw_load_weights<GM_Q2_K, false>(w, NULL, rb, rb * rows, rows, 0, 0, s, st, tid);
        for (int lane = 0; lane < 32; lane++) {
            mh_scales sc;
            mh_row_scales<GM_Q2_K>(st, 0, 0, lane, two_p, &sc);
            for (int j = 0; j < 8; j++) {
                uint32_t a[8];
                mh_frag_a<GM_Q2_K>(st, 0, 0, j, lane, NULL, NULL, sc, a);
                const int g = lane >> 2, t = lane & 3;
                for (int h = 0; h < 2; h++) {
                    const int row = g + 8 * h;
                    const uint8_t *blk = w + (size_t)row * rb + 84 * s;
                    quant_dequant_row(DSV4_TYPE_Q2_K, w + (size_t)row * rb, ref, in);
                    for (int e = 0; e < 8; e++) {
                        const int l = 32 * j + 8 * t + e; /* element of the superblock */
                        double aq, bm;
                        q2k_terms(blk, l, &aq, &bm);
                        const double want = (aq - bm) * two_p;
                        const double got = gm_f16((uint16_t)(a[2 * (e >> 1) + h] >> (16 * (e & 1))));
                        const double bound =
                            3.0 * ldexp(1.0, -11) * (fabs(aq) + fabs(bm)) * two_p + ldexp(1.0, -23);
                        const double err = fabs(got - want) / bound;
                        /* and the dequantized element is the same number */
                        const bool same =
                            fabs((double)ref[256 * s + l] * two_p - want) <= 1e-6 * fabs(want) + 1e-30;
                        total++;
                        if (err > worst) worst = err;
                        if (!(err <= 1.0) || !same) {
                            if (bad < 3)
                                printf("  q2k row %d sb %d elem %d: %g vs %g (deq %g)\n", row, s, l, got,
                                       want, ref[256 * s + l] * two_p);
                            bad++;
                        }
                    }
                }
            }
        }
    }
    printf("%s decode Q2_K %-12s d ~%-6g p=%-3d %lld of %lld elements out of 3 f16 roundings (worst %.3f of "
           "the bound)\n",
           bad ? "FAIL" : "ok  ", random_bytes ? "random bytes" : "quantized", dscale, p, bad, total, worst);
    fails += bad != 0;
    free(w), free(wf), free(ref);
}

/* ---- 3. whole products ---- */
template <int K, int W, bool DUAL> static void emu_cta(const mh_params &p, int ti, int bx, uint8_t *sm) {
    const int4 tl = p.tiles[ti];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int S = p.lay.stages, nblk = p.in / 256, nact = (mt + 7) >> 3;
    const int rb0 = bx * p.rb_per_cta;
    const int nrb = p.rb_per_cta < p.n_rb - rb0 ? p.rb_per_cta : p.n_rb - rb0, nsteps = nrb * nblk;
    memset(sm, 0xa5, (size_t)p.lay.total);
    int *pid = (int *)(sm + p.lay.pid);
    float *xsc = (float *)(sm + p.lay.xs);
    uint32_t *gh = (uint32_t *)(sm + p.lay.grid), *sh = (uint32_t *)(sm + p.lay.sign);
    for (int t = 0; t < mt; t++) pid[t] = p.list[start + t], xsc[t] = p.xs[pid[t] / p.kdiv];
    if (K == GM_IQ2_XXS) mh_fill_tables(gh, sh, p.grid, p.signs, 0, 1);
    static float acc[W][MH_MT][MH_NT][32][4];
    memset(acc, 0, sizeof acc);
    for (int q = 0; q < nsteps; q++) {
        const int rb = rb0 + q / nblk, s = q % nblk, par = K == GM_IQ2_XXS ? s & 1 : 0;
        uint8_t *st = sm + p.lay.stage0 + (q % S) * p.lay.stage_bytes;
        for (int tid = 0; tid < 32 * W; tid++) mh_load_stage<K, W, DUAL>(p, e, pid, mt, rb, s, st, tid);
        const uint8_t *WS = st + p.lay.w, *X = st + p.lay.x;
        for (int warp = 0; warp < W; warp++) {
            static mh_scales sc[MH_MT][32];
            for (int m = 0; m < MH_MT; m++)
                for (int lane = 0; lane < 32; lane++)
                    mh_row_scales<K>(WS, mh_tile_row(W, DUAL, warp, m), par, lane, DUAL ? p.wsc[m] : p.wsc[0],
                                     &sc[m][lane]);
            for (int j = 0; j < 8; j++) {
                static uint32_t a[MH_MT][32][8], a0[32][4], a1[32][4], b0[32][2], b1[32][2];
                for (int m = 0; m < MH_MT; m++)
                    for (int lane = 0; lane < 32; lane++)
                        mh_frag_a<K>(WS, mh_tile_row(W, DUAL, warp, m), par, j, lane, gh, sh, sc[m][lane],
                                     a[m][lane]);
                for (int nt = 0; nt < MH_NT && nt < nact; nt++) {
                    for (int lane = 0; lane < 32; lane++) {
                        uint32_t b[4];
                        mh_frag_b(X, nt, j, lane, b);
                        b0[lane][0] = b[0], b0[lane][1] = b[1], b1[lane][0] = b[2], b1[lane][1] = b[3];
                    }
                    for (int m = 0; m < MH_MT; m++) {
                        for (int lane = 0; lane < 32; lane++)
                            for (int i = 0; i < 4; i++)
                                a0[lane][i] = a[m][lane][i], a1[lane][i] = a[m][lane][4 + i];
                        emu_mma(acc[warp][m][nt], a0, b0);
                        emu_mma(acc[warp][m][nt], a1, b1);
                    }
                }
            }
            if (s != nblk - 1) continue;
            const int orow = rb * mh_rb_rows(W, DUAL);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                for (int nt = 0; nt < MH_NT && nt < nact; nt++)
                    for (int i = 0; i < 4; i++) {
                        const int tok = 8 * nt + 2 * t + (i & 1);
                        if (tok >= mt) continue;
                        const int pr = pid[tok];
                        if (!DUAL) {
                            for (int m = 0; m < MH_MT; m++) {
                                const int row = orow + mh_out_row(false, warp, m) + g + 8 * (i >> 1);
                                if (row < p.n_out)
                                    p.out[(uint64_t)pr * p.out_stride + row] =
                                        acc[warp][m][nt][lane][i] * p.winv[0] * xsc[tok];
                            }
                            continue;
                        }
                        const int row = orow + mh_out_row(true, warp, 0) + g + 8 * (i >> 1);
                        if (row >= p.n_out) continue;
                        float gv = acc[warp][0][nt][lane][i] * p.winv[0] * xsc[tok],
                              uv = acc[warp][1][nt][lane][i] * p.winv[1] * xsc[tok];
                        if (p.clamp_on) {
                            if (gv > p.clamp) gv = p.clamp;
                            if (uv > p.clamp) uv = p.clamp;
                            if (uv < -p.clamp) uv = -p.clamp;
                        }
                        p.out[(uint64_t)pr * p.out_stride + row] = cpu_silu(gv) * uv * p.weights[pr];
                    }
            }
            for (int m = 0; m < MH_MT; m++)
                for (int nt = 0; nt < MH_NT; nt++) memset(acc[warp][m][nt], 0, sizeof acc[warp][m][nt]);
        }
    }
}

/* Every CTA of one product (gate/up for IQ2_XXS, down for Q2_K) of W warps and `stages` stages. */
static void emu_product(int kind, int W, int stages, int rb_per_cta, int n_tiles, mh_params *p) {
    const bool dual = kind == GM_IQ2_XXS;
    p->n_rb = (p->n_out + mh_rb_rows(W, dual) - 1) / mh_rb_rows(W, dual), p->rb_per_cta = rb_per_cta;
    p->lay = mh_layout_of(kind, stages, W);
    uint8_t *sm = (uint8_t *)malloc((size_t)p->lay.total);
    const int gx = (p->n_rb + p->rb_per_cta - 1) / p->rb_per_cta;
    for (int ti = 0; ti < n_tiles; ti++)
        for (int bx = 0; bx < gx; bx++) {
            if (dual && W == 8) emu_cta<GM_IQ2_XXS, 8, true>(*p, ti, bx, sm);
            if (dual && W == 16) emu_cta<GM_IQ2_XXS, 16, true>(*p, ti, bx, sm);
            if (!dual && W == 8) emu_cta<GM_Q2_K, 8, false>(*p, ti, bx, sm);
            if (!dual && W == 16) emu_cta<GM_Q2_K, 16, false>(*p, ti, bx, sm);
        }
    free(sm);
}

/* n tokens with k distinct experts each of E (a third of the slots on experts 0-2, so some hold
 * several tiles), route weights, and the per-expert lists and tiles of <= MH_BN pairs as the device
 * index kernel cuts them */
static void make_routes(int n, int k, int E, int32_t **sel_out, float **wt_out, int32_t **list_out,
                        int4 **tiles_out, int *n_tiles, int *listed) {
    const int P = n * k;
    int32_t *sel = (int32_t *)malloc(P * sizeof(int32_t)), *list = (int32_t *)malloc(P * sizeof(int32_t));
    float *wt = (float *)malloc(P * sizeof(float));
    int4 *tiles = (int4 *)malloc((P + E) * sizeof(int4));
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int ex;
            for (;;) {
                ex = nxt() % 3 == 0 ? (int)(nxt() % 3) : (int)(nxt() % E);
                int dup = 0;
                for (int q = 0; q < s; q++) dup |= sel[t * k + q] == ex;
                if (!dup) break;
            }
            sel[t * k + s] = ex;
            wt[t * k + s] = 0.1f + 0.5f * (uni() + 1.0f);
        }
    int nt = 0, at = 0;
    for (int ex = 0; ex < E; ex++) {
        const int first = at;
        for (int i = 0; i < P; i++)
            if (sel[i] == ex) list[at++] = i;
        for (int o = first; o < at; o += MH_BN)
            tiles[nt++] = make_int4(ex, o, at - o < MH_BN ? at - o : MH_BN, 0);
    }
    *sel_out = sel, *wt_out = wt, *list_out = list, *tiles_out = tiles, *n_tiles = nt, *listed = at;
}

/* the f16 token rows from Q8_K rows, as mh_pack_kernel computes them */
static void emu_pack(const uint8_t *xq, size_t xq_stride, int n, int in, uint16_t *xh, float *xs) {
    const int nblk = in / 256;
    for (int tok = 0; tok < n; tok++) {
        const uint8_t *row = xq + (size_t)tok * xq_stride;
        float m = 0.0f;
        for (int b = 0; b < nblk; b++) {
            const float v = mh_block_bound(row + 292 * b);
            m = v > m ? v : m;
        }
        const int e = xb_row_exp(m);
        for (int b = 0; b < nblk; b++)
            for (int v = 0; v < 256; v++)
                xh[(size_t)tok * in + 256 * b + v] = mh_f2h(mh_act_value(row + 292 * b, v, xb_pow2(-e)));
        xs[tok] = xb_pow2(e);
    }
}

static int run_case(const char *name, int W, int in, int ff, int E, int n, int k, int random_bytes,
                    float dscale, float clamp, int rb_per_cta, int stages) {
    const int P = n * k;
    uint64_t rbw;
    uint8_t *gate = make_rows(in, ff * E, random_bytes, dscale, &rbw);
    uint8_t *up = make_rows(in, ff * E, random_bytes, dscale * 3.0f, &rbw);
    int32_t *sel, *list;
    float *wt;
    int4 *tiles;
    int n_tiles, at;
    make_routes(n, k, E, &sel, &wt, &list, &tiles, &n_tiles, &at);
    int nt_info[2] = {n_tiles, at};
    const size_t xs_b = (size_t)(in / 256) * sizeof(dsv4_q8_k);
    uint8_t *xq = (uint8_t *)malloc(xs_b * n);
    float *xf = (float *)malloc((size_t)in * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float sc = t % 5 == 0 ? 40.0f : t % 7 == 3 ? 1e-3f : t % 11 == 6 ? 3.0e6f : 1.0f;
        for (int i = 0; i < in; i++) xf[i] = uni() * sc;
        if (t % 4 == 1)
            for (int i = 0; i < 256; i++) xf[i] = 0.0f;
        quant_act_q8_k(xf, (dsv4_q8_k *)(xq + xs_b * t), in);
    }
    uint16_t *xh = (uint16_t *)malloc((size_t)n * in * 2);
    float *xsv = (float *)malloc(n * sizeof(float));
    emu_pack(xq, xs_b, n, in, xh, xsv);
    /* the tensor shifts from the largest |d| (as the device scan) */
    int pw[2];
    for (int w = 0; w < 2; w++) {
        const uint8_t *t = w ? up : gate;
        uint32_t mx = 0;
        for (uint64_t b = 0; b < (uint64_t)ff * E * (in / 256); b++) {
            const uint8_t *blk = t + (b / (in / 256)) * rbw + 66 * (b % (in / 256));
            const uint32_t v = (uint32_t)(blk[0] | (blk[1] << 8)) & 0x7fffu;
            mx = v > mx ? v : mx;
        }
        bool ok;
        pw[w] = mh_shift_of(GM_IQ2_XXS, mx, 0, &ok);
    }
    float *mid = (float *)malloc((size_t)P * ff * sizeof(float));
    for (size_t i = 0; i < (size_t)P * ff; i++) mid[i] = nanf("");
    mh_params p;
    memset(&p, 0, sizeof p);
    p.w0 = gate, p.w1 = up, p.row_bytes = rbw, p.expert_bytes = rbw * ff;
    p.n_out = ff, p.in = in, p.kdiv = k;
    p.xh = xh, p.xs = xsv;
    for (int w = 0; w < 2; w++) p.wsc[w] = xb_pow2(pw[w] - 3), p.winv[w] = xb_pow2(-pw[w]);
    p.tiles = tiles, p.n_tiles = nt_info, p.list = list;
    p.weights = wt, p.clamp = clamp, p.clamp_on = clamp > 1.0e-6f;
    p.out = mid, p.out_stride = ff;
    p.grid = dsv4_iq2xxs_grid, p.signs = dsv4_ksigns_iq2xs;
    emu_product(GM_IQ2_XXS, W, stages, rb_per_cta, n_tiles, &p);

    /* references per (pair, row): the float64 sum of the rounded operands, and the CPU */
    float *wg = (float *)malloc(in * sizeof(float)), *wu = (float *)malloc(in * sizeof(float));
    double worst_op = 0, worst_cpu = 0;
    long long bad = 0;
    for (int pr = 0; pr < P; pr++) {
        const int tok = pr / k;
        const uint64_t eo = (uint64_t)sel[pr] * ff * rbw;
        const dsv4_q8_k *xa = (const dsv4_q8_k *)(xq + xs_b * tok);
        for (int r = 0; r < ff; r++) {
            double op[2], absum[2];
            float cpu[2];
            for (int w = 0; w < 2; w++) {
                const uint8_t *wr = (w ? up : gate) + eo + (uint64_t)r * rbw;
                float *wf = w ? wu : wg;
                quant_dequant_row(DSV4_TYPE_IQ2_XXS, wr, wf, in);
                double s = 0, a = 0;
                for (int i = 0; i < in; i++) {
                    const double wv = gm_f16(dsv4_f32_to_f16(wf[i] * xb_pow2(pw[w]))) * ldexp(1.0, -pw[w]);
                    const double xv = gm_f16(xh[(size_t)tok * in + i]) * xsv[tok];
                    s += wv * xv;
                    a += fabs((double)wf[i] * gm_f16(xh[(size_t)tok * in + i]) * xsv[tok]);
                }
                op[w] = s, absum[w] = a;
                cpu[w] = quant_dot_iq2_xxs(wr, xa, in);
            }
            /* the mids from each reference's gate and up, with bounds from the sums' errors */
            const double dmid_op[2] = {1e-5 * absum[0], 1e-5 * absum[1]};
            const double dmid_cpu[2] = {4e-3 * absum[0], 4e-3 * absum[1]};
            float g0 = (float)op[0], u0 = (float)op[1], g1 = cpu[0], u1 = cpu[1];
            if (clamp > 1.0e-6f) {
                g0 = g0 > clamp ? clamp : g0, u0 = u0 > clamp ? clamp : u0 < -clamp ? -clamp : u0;
                g1 = g1 > clamp ? clamp : g1, u1 = u1 > clamp ? clamp : u1 < -clamp ? -clamp : u1;
            }
            const double got = mid[(size_t)pr * ff + r];
            const double m_op = (double)cpu_silu(g0) * u0 * wt[pr],
                         m_cpu = (double)cpu_silu(g1) * u1 * wt[pr];
            /* |d mid| <= |d silu(g)| |u| w + |silu(g)| |d u| w, |silu'| <= 1.1 */
            const double tol_op = (1.1 * dmid_op[0] * fabs(u0) + (fabs(g0) + 1.0) * dmid_op[1]) * wt[pr] +
                                  1e-6 * fabs(m_op) + 1e-30;
            const double tol_cpu =
                (1.1 * dmid_cpu[0] * (fabs(u1) + dmid_cpu[1]) + (fabs(g1) + 1.0) * dmid_cpu[1]) * wt[pr] +
                1e-6 * fabs(m_cpu) + 1e-30;
            const double e_op = fabs(got - m_op) / tol_op, e_cpu = fabs(got - m_cpu) / tol_cpu;
            if (!(e_op <= worst_op)) worst_op = e_op;
            if (!(e_cpu <= worst_cpu)) worst_cpu = e_cpu;
            if (!(e_op <= 1.0) || !(e_cpu <= 1.0)) {
                if (bad < 3)
                    printf("  pair %d row %d: %.9g vs operands %.9g (tol %.3g), cpu %.9g (tol %.3g)\n", pr, r,
                           got, m_op, tol_op, m_cpu, tol_cpu);
                bad++;
            }
        }
    }
    const bool ok = bad == 0;
    printf("%s %-20s W=%d in=%d ff=%d E=%d n=%d k=%d p=%d/%d rb/cta=%d stages=%d: %d tiles, %lld of %lld "
           "mids out "
           "of bounds (worst error/bound: operands %.3f, cpu %.3f)\n",
           ok ? "ok  " : "FAIL", name, W, in, ff, E, n, k, pw[0], pw[1], rb_per_cta, stages, n_tiles, bad,
           (long long)P * ff, worst_op, worst_cpu);
    free(gate), free(up), free(sel), free(wt), free(list), free(tiles), free(xq), free(xf), free(xh),
        free(xsv);
    free(mid), free(wg), free(wu);
    return ok ? 0 : 1;
}

/* Q2_K row against activation values x: sum over elements of (|d sc q| + |dmin m|) |x|, the scale
 * of the f16 decode's error (check_decode_q2k) */
static double q2k_abs_terms(const uint8_t *row, int in, const double *x) {
    double s = 0;
    for (int b = 0; b < in / 256; b++) {
        for (int l = 0; l < 256; l++) {
            double aq, bm;
            q2k_terms(row + 84 * b, l, &aq, &bm);
            s += (fabs(aq) + fabs(bm)) * fabs(x[256 * b + l]);
        }
    }
    return s;
}

/* The down product: P mid rows (ff) against Q2_K experts (ff -> embd); y per pair. */
static int run_down_case(const char *name, int W, int ff, int embd, int E, int n, int k, int random_bytes,
                         int rb_per_cta, int stages) {
    const int P = n * k, nb = ff / 256;
    uint64_t rbw;
    dsv4_type_row_bytes(DSV4_TYPE_Q2_K, (uint64_t)ff, &rbw);
    uint8_t *down = (uint8_t *)malloc(rbw * embd * E);
    float *wf = (float *)malloc(ff * sizeof(float));
    for (int r = 0; r < embd * E; r++) {
        uint8_t *row = down + (size_t)r * rbw;
        if (random_bytes) {
            for (uint64_t i = 0; i < rbw; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < nb; b++) {
                const uint16_t dv = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
                memcpy(row + 84 * b + 80, &dv, 2), memcpy(row + 84 * b + 82, &dm, 2);
            }
        } else {
            for (int i = 0; i < ff; i++) wf[i] = uni() * 0.05f;
            quant_quantize_row(DSV4_TYPE_Q2_K, wf, row, ff);
        }
    }
    int32_t *sel, *list;
    float *wt;
    int4 *tiles;
    int n_tiles, at;
    make_routes(n, k, E, &sel, &wt, &list, &tiles, &n_tiles, &at);
    int nt_info[2] = {n_tiles, at};
    /* mid rows, some scaled past XB_XMAX, quantized to Q8_K; then f16 as mh_pack_mid_kernel */
    float *mid = (float *)malloc((size_t)P * ff * sizeof(float));
    const size_t qs = (size_t)nb * sizeof(dsv4_q8_k);
    uint8_t *mq = (uint8_t *)malloc(qs * P);
    uint16_t *xh = (uint16_t *)malloc((size_t)P * ff * 2);
    float *xsv = (float *)malloc(P * sizeof(float));
    for (int pr = 0; pr < P; pr++) {
        const float sc = pr % 9 == 4 ? 2.0e5f : pr % 5 == 0 ? 30.0f : 1.0f;
        float m = 0;
        for (int i = 0; i < ff; i++) {
            mid[(size_t)pr * ff + i] = uni() * sc;
            m = fmaxf(m, fabsf(mid[(size_t)pr * ff + i]));
        }
        quant_act_q8_k(mid + (size_t)pr * ff, (dsv4_q8_k *)(mq + qs * pr), ff);
        const int e = xb_row_exp(m);
        for (int b = 0; b < nb; b++)
            for (int v = 0; v < 256; v++)
                xh[(size_t)pr * ff + 256 * b + v] =
                    mh_f2h(mh_act_value(mq + qs * pr + 292 * b, v, xb_pow2(-e)));
        xsv[pr] = xb_pow2(e);
    }
    uint32_t md = 0, mm = 0;
    for (int r = 0; r < embd * E; r++)
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = down + (size_t)r * rbw + 84 * b;
            md = md > ((blk[80] | (blk[81] << 8)) & 0x7fffu) ? md : ((blk[80] | (blk[81] << 8)) & 0x7fffu);
            mm = mm > ((blk[82] | (blk[83] << 8)) & 0x7fffu) ? mm : ((blk[82] | (blk[83] << 8)) & 0x7fffu);
        }
    bool ok_s;
    const int pd = mh_shift_of(GM_Q2_K, md, mm, &ok_s);
    float *y = (float *)malloc((size_t)P * embd * sizeof(float));
    for (size_t i = 0; i < (size_t)P * embd; i++) y[i] = nanf("");
    mh_params p;
    memset(&p, 0, sizeof p);
    p.w0 = down, p.row_bytes = rbw, p.expert_bytes = rbw * embd;
    p.n_out = embd, p.in = ff, p.kdiv = 1;
    p.xh = xh, p.xs = xsv;
    p.wsc[0] = xb_pow2(pd), p.winv[0] = xb_pow2(-pd);
    p.tiles = tiles, p.n_tiles = nt_info, p.list = list;
    p.out = y, p.out_stride = embd;
    emu_product(GM_Q2_K, W, stages, rb_per_cta, n_tiles, &p);
    /* y against the CPU's quant_dot_q2_k of the same Q8_K rows: within 2^-9 of the row's
     * sum of (|d sc q| + |dmin m|) |x| (three weight roundings and one activation rounding, each
     * <= 2^-11 of those terms), plus the f32 sums */
    double *xv = (double *)malloc(ff * sizeof(double));
    double worst = 0;
    long long bad = 0;
    for (int pr = 0; pr < P; pr++) {
        const dsv4_q8_k *xa = (const dsv4_q8_k *)(mq + qs * pr);
        for (int b = 0; b < nb; b++)
            for (int v = 0; v < 256; v++) xv[256 * b + v] = (double)xa[b].qs[v] * xa[b].d;
        const uint64_t eo = (uint64_t)sel[pr] * embd * rbw;
        for (int r = 0; r < embd; r++) {
            const uint8_t *wr = down + eo + (uint64_t)r * rbw;
            const double ref = quant_dot_q2_k(wr, xa, ff), got = y[(size_t)pr * embd + r];
            const double sab = q2k_abs_terms(wr, ff, xv);
            const double tol = ldexp(1.0, -9) * 1.01 * sab + 1e-6 * sab + 1e-30;
            const double err = fabs(got - ref) / tol;
            if (!(err <= worst)) worst = err;
            if (!(err <= 1.0)) {
                if (bad < 3)
                    printf("  y pair %d row %d: %.9g vs CPU %.9g (tol %.3g)\n", pr, r, got, ref, tol);
                bad++;
            }
        }
    }
    const bool ok = bad == 0 && ok_s;
    printf(
        "%s down %-15s W=%d ff=%d embd=%d E=%d n=%d k=%d p=%d rb/cta=%d stages=%d: %d tiles, %lld of %lld y "
        "out of bounds (worst error/bound %.3f)\n",
        ok ? "ok  " : "FAIL", name, W, ff, embd, E, n, k, pd, rb_per_cta, stages, n_tiles, bad,
        (long long)P * embd, worst);
    free(down), free(wf), free(sel), free(wt), free(list), free(tiles), free(mid), free(mq), free(xh),
        free(xsv), free(y);
    free(xv);
    return ok ? 0 : 1;
}

int main(void) {
    check_decode(0, 0.01f, 17);
    check_decode(1, 0.01f, 17);
    check_decode(1, 2.0f, 10);
    check_decode(1, 1e-6f, 30);
    check_shift();
    check_decode_q2k(0, 0.01f, 12);
    check_decode_q2k(1, 0.01f, 16);
    check_decode_q2k(1, 1e-6f, 29);
    /* name, warps, in, ff, E, n, k, random bytes, d scale, clamp, rb/cta, stages */
    fails += run_case("ragged tiles", 8, 512, 320, 6, 37, 3, 0, 0.01f, 0.0f, 2, 3);
    fails += run_case("random bytes", 16, 1024, 256, 5, 29, 2, 1, 0.01f, 0.0f, 1, 2);
    fails += run_case(">64 pairs, clamp", 16, 512, 640, 3, 120, 2, 0, 0.01f, 0.3f, 2, 2);
    fails += run_case(">64 pairs, clamp", 8, 512, 384, 3, 120, 2, 0, 0.01f, 0.02f, 3, 3);
    fails += run_case("tiny scales", 16, 512, 128, 4, 23, 2, 1, 1e-5f, 0.0f, 1, 2);
    /* name, warps, ff, embd, E, n, k, random bytes, rb/cta, stages */
    fails += run_down_case("ragged tiles", 16, 512, 640, 5, 37, 3, 0, 2, 2);
    fails += run_down_case("random bytes", 8, 768, 320, 4, 29, 2, 1, 1, 3);
    fails += run_down_case(">64 pairs", 16, 256, 512, 3, 120, 2, 0, 1, 2);
    printf("%s: %d check(s) failed\n", fails ? "MOE F16 EMULATION FAILED" : "MOE F16 EMULATION PASSED",
           fails);
    return fails ? 1 : 0;
}
