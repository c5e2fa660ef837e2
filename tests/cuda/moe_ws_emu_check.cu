/* Host emulation of the producer / consumer routed products (src/backend/cuda/cuda_moe_ws.cu: the IQ2_XXS
 * gate/up and the Q2_K down) with the kernel's own units (cuda_moe_ws.cuh), runs anywhere:
 *   1. decode: every element the producers decode from raw IQ2_XXS words (quantized rows and random
 *      bytes, several tensor shifts p) has the bits of f16(dequantized element * 2^p), the f16 path's
 *      one rounding (cuda_moe_half.cuh); every Q2_K element the bits mh_kernel's decoder gives it;
 *   2. whole products: every CTA of four cases played on the CPU: the threads' stage images (the raw
 *      rows each warp loads, the A tile from mp_thread_row / mp_staged_out and the decoders, the B tile
 *      from mp_b_pair / mp_b_chunk), each 16-byte chunk written exactly once per stage; each
 *      warpgroup's reads of its 64 rows the way the tensor cores read them (the
 *      PTX ISA's K-major 128-byte-swizzle address of element (m, k) from the kernel's start addresses,
 *      written here independently) with the m64n64 accumulator map (the ISA's D layout, checked against
 *      mp_acc_row / mp_acc_col); every stored sum against a float64 dot of the f16 operands taken from
 *      the CPU's dequantized rows (IQ2_XXS) or mh_kernel's decoder (Q2_K). Ragged tiles, two tiles of one
 *      expert, partial row blocks, 1-2 row blocks per CTA, token rows shared by pairs (k = 2).
 * The mbarrier hand-over and the wgmma instructions themselves are the GPU's to show (cuda_ops_check with
 * DSV4_CUDA_MOE_WS set). Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_ws.cuh"

#define CHECK_RNG_SEED 919
#include "check_rng.h"
#include "iq2_rows.h"

static int fails;

static uint32_t grid_h[256 * MH_REP * 4], sign_h[128 * MH_REP * 4];

/* f16 bits of row r's element k as the f16 path rounds it: f16(element * 2^p) */
static uint16_t want_elem(const float *deq, int k, int p) { return dsv4_f32_to_f16(deq[k] * xb_pow2(p)); }

/* ---- 1. decode ---- */
/* The computed sign masks against the replicated table's words, every sign index; and the decoder that
 * uses them against the table decoder on random words */
static void check_sign_masks(void) {
    long long bad = 0;
    for (int i = 0; i < 128; i++) {
        uint32_t sw[4];
        mp_sign_masks(dsv4_ksigns_iq2xs[i], sw);
        for (int k = 0; k < 4; k++) bad += sw[k] != sign_h[(i * MH_REP + (i & (MH_REP - 1))) * 4 + k];
    }
    for (int n = 0; n < 100000; n++) {
        const uint32_t a0 = (uint32_t)nxt(), a1 = (uint32_t)nxt(),
                       dw2 = mh_dup(dsv4_f32_to_f16(uni() * 0.01f));
        const int c = n & 3, rep = (n >> 2) & (MH_REP - 1);
        uint32_t h[4], g[4];
        mp_decode_chunk(a0, a1, c, rep, grid_h, sign_h, dw2, h);
        mp_decode_chunk_ks(a0, a1, c, rep, grid_h, dsv4_ksigns_iq2xs, dw2, g);
        for (int k = 0; k < 4; k++) bad += h[k] != g[k];
    }
    printf(
        "%s sign masks: %lld words differ (128 table entries, 100000 random chunks through both decoders)\n",
        bad ? "FAIL" : "ok  ", bad);
    fails += bad != 0;
}

static void check_decode(int random_bytes, float dscale, int p) {
    const int in = 1024, rows = 24;
    uint64_t rb;
    uint8_t *w = make_rows(in, rows, random_bytes, dscale, &rb);
    float *deq = (float *)malloc(in * sizeof(float));
    long long bad = 0, total = 0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        quant_dequant_row(DSV4_TYPE_IQ2_XXS, row, deq, in);
        for (int q = 0; q < in / 64; q++) { /* 64-k steps */
            const int S = mp_stage_sb(q);
            uint32_t R[MP_RAW_IQ2]; /* the raw superblock as the producers stage it */
            for (int k = 0; k < MP_RAW_IQ2; k++) memcpy(&R[k], row + mp_raw_src(true, S, k), 4);
            const uint32_t d0 = mp_iq2_d(row, S);
            for (int jj = 0; jj < 2; jj++) {
                const int j = mp_stage_sub(q, jj);
                uint32_t d, a0, a1, b0, b1;
                mp_iq2_sub_words(R, S, j, &d, &a0, &a1);
                mp_iq2_words(row, S, j, &b0, &b1); /* the words read in place */
                if ((a0 != b0 || a1 != b1 || d != d0) && bad++ < 3)
                    printf("  raw words row %d S %d j %d differ from the row's\n", r, S, j);
                uint32_t h[4][4];
                mp_decode_half<GM_IQ2_XXS>(R, q, jj, xb_pow2(p - 3), (r + jj) & (MH_REP - 1), grid_h,
                                           dsv4_ksigns_iq2xs, h);
                for (int c = 0; c < 4; c++)
                    for (int e = 0; e < 8; e++) {
                        const int k = 256 * S + 32 * j + 8 * c + e;
                        const uint16_t got = (uint16_t)(h[c][e >> 1] >> (16 * (e & 1))),
                                       want = want_elem(deq, k, p);
                        total++;
                        if (got != want && bad++ < 3)
                            printf("  decode row %d k %d: %04x vs %04x\n", r, k, got, want);
                    }
            }
        }
    }
    printf("%s decode %-12s d ~%-8g p=%-3d %lld of %lld elements differ from f16(element * 2^p)\n",
           bad ? "FAIL" : "ok  ", random_bytes ? "random bytes" : "quantized", dscale, p, bad, total);
    fails += bad != 0;
    free(w), free(deq);
}

static uint8_t *make_q2k_rows(int in, int rows, uint64_t *rb) {
    dsv4_type_row_bytes(DSV4_TYPE_Q2_K, (uint64_t)in, rb);
    uint8_t *d = (uint8_t *)malloc(*rb * rows);
    float *wf = (float *)malloc(in * sizeof(float));
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < in; i++) wf[i] = uni() * 0.05f * (1.0f + (float)(r % 5));
        quant_quantize_row(DSV4_TYPE_Q2_K, wf, d + (size_t)r * *rb, in);
    }
    free(wf);
    return d;
}
/* f16 bits of Q2_K row element k as mh_kernel decodes it (mh_decode8<GM_Q2_K> on the raw superblock,
 * which is where its staged rows keep it; the scales as mh_row_scales folds them) */
static uint16_t q2k_elem(const uint8_t *row, int k, float wsc) {
    const uint8_t *blk = row + 84 * (k / 256);
    const int j = (k % 256) / 32, t = (k % 32) / 8, e = k % 8;
    uint32_t v;
    memcpy(&v, blk + 80, 4);
    mh_scales sc;
    sc.dw2[0] = mh_dup(mh_f2h(gm_f16((uint16_t)(v & 0xffff)) * wsc));
    sc.nm2[0] = mh_dup(mh_f2h(-(gm_f16((uint16_t)(v >> 16)) * wsc)));
    uint32_t h[4];
    mh_decode8<GM_Q2_K>(blk, 0, j, t, NULL, NULL, sc, 0, h);
    return (uint16_t)(h[e >> 1] >> (16 * (e & 1)));
}
static void check_decode_q2k(int p) {
    const int in = 1024, rows = 24;
    uint64_t rb;
    uint8_t *w = make_q2k_rows(in, rows, &rb);
    const float wsc = xb_pow2(p);
    long long bad = 0, total = 0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        for (int q = 0; q < in / 64; q++) { /* 64-k steps */
            uint32_t R[MP_RAW_Q2K];         /* the raw superblock as the kernel stages it */
            for (int k = 0; k < MP_RAW_Q2K; k++) memcpy(&R[k], row + mp_raw_src(false, mp_stage_sb(q), k), 4);
            for (int jj = 0; jj < 2; jj++) {
                uint32_t h[4][4];
                mp_decode_half<GM_Q2_K>(R, q, jj, wsc, 0, NULL, NULL, h);
                for (int c = 0; c < 4; c++)
                    for (int e = 0; e < 8; e++) {
                        const int k = 64 * q + 32 * jj + 8 * c + e;
                        const uint16_t got = (uint16_t)(h[c][e >> 1] >> (16 * (e & 1))),
                                       want = q2k_elem(row, k, wsc);
                        total++;
                        if (got != want && bad++ < 3)
                            printf("  q2k decode row %d k %d: %04x vs %04x\n", r, k, got, want);
                    }
            }
        }
    }
    printf("%s decode Q2_K p=%-3d %lld of %lld elements differ from mh_kernel's decoder\n",
           bad ? "FAIL" : "ok  ", p, bad, total);
    fails += bad != 0;
    free(w);
}

/* ---- 2. whole products ---- */
/* the ISA's K-major 128-byte-swizzle address of element (m, k) (16-bit) of an operand at `start` */
static uint32_t isa_sw128(uint32_t start, int m, int k) {
    const uint32_t a = start + (uint32_t)(m / 8) * 1024 + (uint32_t)(m % 8) * 128 + 2u * (uint32_t)k;
    return a ^ (((a >> 7) & 7u) << 4);
}
static int isa_row(int w, int lane, int e) { return 16 * w + lane / 4 + 8 * ((e % 4) / 2); }
static int isa_col(int lane, int e) { return 8 * (e / 4) + 2 * (lane % 4) + e % 2; }

typedef struct tile {
    int e, start, mt;
} tile;

/* The threads' stage image of stage qq of row block rb (cuda_moe_ws.cu, steps 1-3); counts each chunk */
static void produce(const mh_params &p, bool down, int e, const int *pid, int mt, int rb, int qq,
                    uint8_t *img, int *cover, int *layout) {
    /* the raw superblock of every staged row, each word loaded by one lane of its row's warp */
    const int RW = mp_raw_words(!down);
    static uint32_t raw[MP_ROWS * MP_RAW_Q2K];
    static int rcover[MP_ROWS * MP_RAW_Q2K];
    memset(raw, 0xee, sizeof raw), memset(rcover, 0, sizeof rcover);
    for (int W = 0; W < MP_THREADS / 32; W++)
        for (int lane = 0; lane < 32; lane++) {
            uint32_t v[mp_raw_loads(MP_RAW_Q2K)], probe[mp_raw_loads(MP_RAW_Q2K)];
            if (down)
                mp_raw_load<false>(p, e, rb, qq / 2, W, lane, v);
            else
                mp_raw_load<true>(p, e, rb, qq / 2, W, lane, v);
            for (int i = 0; i < mp_raw_loads(RW); i++) probe[i] = 1; /* where it lands */
            static uint32_t where[MP_ROWS * MP_RAW_Q2K];
            memset(where, 0, sizeof where);
            if (down)
                mp_raw_store<false>(where, W, lane, probe), mp_raw_store<false>(raw, W, lane, v);
            else
                mp_raw_store<true>(where, W, lane, probe), mp_raw_store<true>(raw, W, lane, v);
            for (int i = 0; i < MP_ROWS * RW; i++)
                if (where[i]) {
                    rcover[i]++;
                    *layout += i / RW < 16 * W || i / RW >= 16 * W + 16; /* only its own warp's rows */
                }
        }
    for (int i = 0; i < MP_ROWS * RW; i++) *layout += rcover[i] != 1;
    /* every staged row's raw words are its weight row's superblock (zeros past n_out) */
    for (int s = 0; s < MP_ROWS; s++) {
        int which;
        const int row = rb * mp_rb_rows(!down) + mp_staged_out(!down, s, &which);
        for (int k = 0; k < RW; k++) {
            uint32_t want = 0;
            if (row < p.n_out)
                memcpy(&want,
                       (which ? p.w1 : p.w0) + (size_t)e * p.expert_bytes + (size_t)row * p.row_bytes +
                           mp_raw_src(!down, qq / 2, k),
                       4);
            *layout += raw[s * RW + k] != want;
        }
    }
    for (int t = 0; t < MP_THREADS; t++) {
        const int bpair = mp_b_pair(t), bp = bpair < mt ? bpair : mt - 1, ch = mp_b_chunk(t);
        const uint16_t *xrow = p.xh + (size_t)(pid[bp] / p.kdiv) * p.in;
        for (int h = 0; h < 2; h++) {
            const int boff = MP_ATILE + h * MP_BHALF + mp_chunk_off(bpair, ch);
            memcpy(img + boff, (const uint8_t *)xrow + 256 * qq + 128 * h + 16 * ch, 16);
            cover[boff / 16]++;
        }
        const int s = mp_thread_row(t), hf = mp_thread_half(t), qd = mp_stage_step(qq, hf);
        int which;
        mp_staged_out(!down, s, &which);
        for (int jj = 0; jj < 2; jj++) {
            uint32_t h[4][4];
            if (down)
                mp_decode_half<GM_Q2_K>(raw + s * RW, qd, jj, p.wsc[0], 0, NULL, NULL, h);
            else
                mp_decode_half<GM_IQ2_XXS>(raw + s * RW, qd, jj, which ? p.wsc[1] : p.wsc[0],
                                           (t & 31) & (MH_REP - 1), grid_h, dsv4_ksigns_iq2xs, h);
            for (int c = 0; c < 4; c++) {
                const int off = hf * MP_AHALF + mp_chunk_off(s, 4 * jj + c);
                memcpy(img + off, h[c], 16);
                cover[off / 16]++;
            }
        }
    }
}

/* down: the Q2_K down product (n_out rows of one tensor), else the IQ2_XXS gate/up (n_out rows of each) */
static void check_products(bool down, int in, int n_out, int n_expert, int kdiv, int rb_per_cta,
                           const int *tile_sizes, int n_tiles) {
    const bool dual = !down;
    uint64_t rbytes;
    const int pg = 4, pu = 3; /* the tensors' shifts */
    uint8_t *w0 = down ? make_q2k_rows(in, n_out * n_expert, &rbytes)
                       : make_rows(in, n_out * n_expert, 0, 0.01f, &rbytes);
    uint8_t *w1 = down ? NULL : make_rows(in, n_out * n_expert, 0, 0.01f, &rbytes);
    /* pairs: tile t holds tile_sizes[t] pairs of expert t % n_expert; list positions in order */
    int P = 0;
    tile tl[16];
    for (int t = 0; t < n_tiles; t++)
        tl[t].e = t % n_expert, tl[t].start = P, tl[t].mt = tile_sizes[t], P += tile_sizes[t];
    int32_t *list = (int32_t *)malloc(P * sizeof(int32_t));
    for (int i = 0; i < P; i++) list[i] = (int32_t)((i * 7 + 3) % P); /* a permutation (P prime to 7) */
    const int tokens = (P + kdiv - 1) / kdiv;
    uint16_t *xh = (uint16_t *)malloc((size_t)tokens * in * 2);
    for (size_t i = 0; i < (size_t)tokens * in; i++) xh[i] = dsv4_f32_to_f16(uni() * 4.0f);
    /* the stored sums: [which][pair][row] (which 1: up) */
    double *out = (double *)malloc((size_t)2 * P * n_out * sizeof(double));
    for (size_t i = 0; i < (size_t)2 * P * n_out; i++) out[i] = NAN;

    mh_params p;
    memset(&p, 0, sizeof p);
    p.w0 = w0, p.w1 = w1, p.row_bytes = rbytes, p.expert_bytes = rbytes * n_out, p.n_out = n_out, p.in = in;
    p.kdiv = kdiv, p.xh = xh;
    p.wsc[0] = down ? xb_pow2(pg) : xb_pow2(pg - 3), p.wsc[1] = xb_pow2(pu - 3);
    p.n_rb = (n_out + mp_rb_rows(dual) - 1) / mp_rb_rows(dual), p.rb_per_cta = rb_per_cta;
    static uint8_t img[MP_ATILE + MP_BTILE]; /* a stage's A tile, then its B tile */
    static int cover[(MP_ATILE + MP_BTILE) / 16];
    static double acc[MP_THREADS][32]; /* the threads' accumulators */
    int layout = 0;
    const int nq = in / MP_BK, groups = (p.n_rb + rb_per_cta - 1) / rb_per_cta;
    for (int ty = 0; ty < n_tiles; ty++)
        for (int gx = 0; gx < groups; gx++) {
            const int e = tl[ty].e, start = tl[ty].start, mt = tl[ty].mt;
            const int rb0 = gx * rb_per_cta, nrb = rb_per_cta < p.n_rb - rb0 ? rb_per_cta : p.n_rb - rb0;
            int pid[MP_BN];
            for (int i = 0; i < mt; i++) pid[i] = list[start + i];
            for (int r = 0; r < nrb; r++) {
                const int rb = rb0 + r;
                memset(acc, 0, sizeof acc);
                for (int qq = 0; qq < nq; qq++) {
                    memset(img, 0xee, sizeof img), memset(cover, 0, sizeof cover);
                    produce(p, down, e, pid, mt, rb, qq, img, cover, &layout);
                    for (int i = 0; i < (MP_ATILE + MP_BTILE) / 16; i++) layout += cover[i] != 1;
                    for (int t = 0; t < MP_THREADS; t++) { /* warpgroup g's products on its 64 rows */
                        const int g = t / 128, w = (t / 32) % 4, lane = t % 32;
                        const uint32_t a = (uint32_t)(MP_WG_ROWS * g) * 128;
                        for (int i = 0; i < 32; i++) {
                            const int mrow = isa_row(w, lane, i), n = isa_col(lane, i);
                            layout += mp_acc_row(w, lane, i) != mrow || mp_acc_col(lane, i) != n;
                            for (int kk = 0; kk < 8; kk++) /* the kernel's descriptors' starts */
                                for (int k = 0; k < 16; k++) {
                                    const uint32_t ak = (kk >> 2) * MP_AHALF + 32 * (kk & 3),
                                                   bk = MP_ATILE + (kk >> 2) * MP_BHALF + 32 * (kk & 3);
                                    uint16_t ha, hb;
                                    memcpy(&ha, img + isa_sw128(a + ak, mrow, k), 2);
                                    memcpy(&hb, img + isa_sw128(bk, n, k), 2);
                                    acc[t][i] += (double)dsv4_f16_to_f32(ha) * dsv4_f16_to_f32(hb);
                                }
                        }
                    }
                }
                for (int t = 0; t < MP_THREADS; t++) { /* the kernel's stores */
                    const int g = t / 128, w = (t / 32) % 4, lane = t % 32;
                    for (int i = 0; i < 32; i++) {
                        const int pair = mp_acc_col(lane, i);
                        /* the element's staged row, mapped here, against the row the kernel stores it as */
                        int which;
                        const int out_row = mp_staged_out(dual, MP_WG_ROWS * g + isa_row(w, lane, i), &which);
                        const int epi = mp_epi_row(dual, g, w, lane, i);
                        layout += epi != out_row || which != (dual && (i & 2));
                        if (pair >= mt) continue;
                        const int row = rb * mp_rb_rows(dual) + epi;
                        if (row < n_out)
                            out[((size_t)(dual && (i & 2)) * P + pid[pair]) * n_out + row] = acc[t][i];
                    }
                }
            }
        }
    /* the reference: float64 dots of the f16 path's weight elements and the f16 activations */
    float *deq = (float *)malloc(in * sizeof(float));
    long long bad = 0, total = 0;
    double worst = 0.0;
    for (int t = 0; t < n_tiles; t++)
        for (int i = 0; i < tl[t].mt; i++) {
            const int pr = list[tl[t].start + i];
            const uint16_t *x = xh + (size_t)(pr / kdiv) * in;
            for (int which = 0; which < (dual ? 2 : 1); which++)
                for (int row = 0; row < n_out; row++) {
                    const uint8_t *wr =
                        (which ? w1 : w0) + (size_t)tl[t].e * p.expert_bytes + (size_t)row * rbytes;
                    if (dual) quant_dequant_row(DSV4_TYPE_IQ2_XXS, wr, deq, in);
                    double ref = 0.0, mag = 0.0;
                    for (int k = 0; k < in; k++) {
                        const uint16_t we =
                            down ? q2k_elem(wr, k, p.wsc[0]) : want_elem(deq, k, which ? pu : pg);
                        const double term = (double)dsv4_f16_to_f32(we) * dsv4_f16_to_f32(x[k]);
                        ref += term, mag += fabs(term);
                    }
                    const double got = out[((size_t)which * P + pr) * n_out + row];
                    const double rel = fabs(got - ref) / (mag > 0 ? mag : 1.0);
                    total++;
                    if (!(rel <= 1e-12)) {
                        if (bad++ < 3)
                            printf("  pair %d row %d (%d): %.17g vs %.17g\n", pr, row, which, got, ref);
                    } else if (rel > worst) {
                        worst = rel;
                    }
                }
        }
    printf(
        "%s products %-7s in=%d rows=%d experts=%d k=%d rb/cta=%d tiles=%d (P=%d): %d layout errors, %lld of "
        "%lld sums differ from float64 of the f16 operands (worst %.1e)\n",
        layout || bad ? "FAIL" : "ok  ", down ? "down" : "gate/up", in, n_out, n_expert, kdiv, rb_per_cta,
        n_tiles, P, layout, bad, total, worst);
    fails += layout != 0 || bad != 0;
    free(w0), free(w1), free(list), free(xh), free(out), free(deq);
}

int main(void) {
    mh_fill_tables(grid_h, sign_h, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs, 0, 1);
    check_decode(0, 1.0f, 4);
    check_decode(0, 0.001f, 12);
    check_decode(1, 0.05f, 6);
    check_decode(1, 2.0f, 0);
    check_sign_masks();
    check_decode_q2k(5);
    check_decode_q2k(-2);
    const int sizes1[] = {64, 17, 1, 40};
    check_products(false, 512, 200, 3, 2, 1, sizes1,
                   4); /* a partial second row block; tiles of expert 0 twice */
    const int sizes2[] = {33, 64};
    check_products(false, 1024, 256, 2, 1, 2, sizes2, 2); /* two row blocks per CTA */
    check_products(true, 512, 300, 3, 1, 1, sizes1, 4);   /* down: a partial second 256-row block */
    check_products(true, 256, 512, 2, 1, 2, sizes2, 2);   /* down: two row blocks per CTA */
    printf(fails ? "MOE WS EMULATION FAILED: %d\n" : "MOE WS EMULATION PASSED\n", fails);
    return fails ? 1 : 0;
}
