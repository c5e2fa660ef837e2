/* Host-only check of the one-token routed-expert row units (src/backend/cuda/cuda_moe_decode_units.cuh,
 * used by cuda_ops_moe_decode.cu): the very unit code runs lane by lane on the CPU with the lane
 * slices the kernels use (IQ2_XXS and Q4_K gate/up rows of 4096, Q2_K and Q4_K down rows of 2048),
 * rows staged in a 16-byte aligned buffer whose padding holds garbage, and the IQ2_XXS selector
 * tables built by the same host functions as the device context. Checked against quant/:
 *   - every superblock's float term (integer partials of its lanes added, then md_*_term) equals
 *     quant_dot_* of that one superblock bit for bit (0.125 * term for IQ2_XXS): the integer
 *     decode is exact and the term is formed as the CPU forms it;
 *   - the row value (the terms added by md_seq_sum, as the kernels do) equals quant_dot_* of the
 *     row bit for bit (and is within the bench bound 1e-5 S + (n_blocks + 8) 2^-24 S).
 * Weights: quantized random rows and random bytes with finite scales; activations: quant_act_q8_k
 * of random floats and random Q8_K bytes (any int8, random bsums). Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_moe_decode_units.cuh"

#define CHECK_RNG_SEED 7177
#include "check_rng.h"

enum { K_IQ2, K_Q4K_GU, K_Q2K, K_Q4K_DN };
static const char *kind_name[] = {"IQ2_XXS gate/up 4096", "Q4_K gate/up 4096", "Q2_K down 2048",
                                  "Q4_K down 2048"};

static uint32_t TG[256], TS[128];
static uint32_t TR[(256 + 128) * 32]; /* the device layout: entry e, copy c at word 32 e + c */
static int g_fail = 0, g_checks = 0, g_bad_rep = 0;

static void fill_row(uint32_t type, int in, uint8_t *row, int random_bytes) {
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, (uint64_t)in, &rb);
    if (!random_bytes) {
        float *wf = (float *)malloc(in * sizeof(float));
        for (int i = 0; i < in; i++) wf[i] = uni() * 0.05f;
        quant_quantize_row(type, wf, row, in);
        free(wf);
        return;
    }
    for (uint64_t i = 0; i < rb; i++) row[i] = (uint8_t)nxt();
    const int bb = type == DSV4_TYPE_IQ2_XXS ? 66 : type == DSV4_TYPE_Q2_K ? 84 : 144;
    for (int b = 0; b < in / 256; b++) {
        const uint16_t dv = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
        uint8_t *p = row + b * bb;
        if (type == DSV4_TYPE_IQ2_XXS) memcpy(p, &dv, 2);
        if (type == DSV4_TYPE_Q4_K) memcpy(p, &dv, 2), memcpy(p + 2, &dm, 2);
        if (type == DSV4_TYPE_Q2_K) memcpy(p + 80, &dv, 2), memcpy(p + 82, &dm, 2);
    }
}
static void fill_act(dsv4_q8_k *xq, int in, int random_bytes) {
    if (!random_bytes) {
        float *x = (float *)malloc(in * sizeof(float));
        for (int i = 0; i < in; i++) x[i] = uni() * (i % 97 == 0 ? 8.0f : 1.0f);
        quant_act_q8_k(x, xq, in);
        free(x);
        return;
    }
    for (int b = 0; b < in / 256; b++) {
        xq[b].d = uni() * 0.02f;
        for (int i = 0; i < 256; i++) xq[b].qs[i] = (int8_t)(nxt() & 0xff);
        for (int j = 0; j < 16; j++) xq[b].bsums[j] = (int16_t)(nxt() % 4097) - 2048;
    }
}
static float ref_dot(uint32_t type, const uint8_t *w, const dsv4_q8_k *x, int n) {
    return type == DSV4_TYPE_IQ2_XXS ? quant_dot_iq2_xxs(w, x, n)
           : type == DSV4_TYPE_Q2_K  ? quant_dot_q2_k(w, x, n)
                                     : quant_dot_q4_k(w, x, n);
}
/* One row through the units; term[b] gets superblock b's float term (per lane group). */
static float emu_row(int kind, const uint8_t *sr, const uint8_t *xq, float *term) {
    if (kind == K_IQ2) {
        int part[32];
        md_act_iq2 a[32];
        for (int l = 0; l < 32; l++) {
            md_load_act_iq2(xq + 292 * (l >> 1), l & 1, &a[l]);
            part[l] = md_iq2_half<2>(sr, l >> 1, l & 1, a[l], (const uint8_t *)TG, (const uint8_t *)TS, 0u);
            /* the device addressing (LG = 7, lane copy) gives the same partial */
            const uint8_t *R = (const uint8_t *)TR;
            if (md_iq2_half<7>(sr, l >> 1, l & 1, a[l], R, R + 256 * 128, 4u * (uint32_t)l) != part[l])
                g_bad_rep++;
        }
        for (int l = 0; l < 32; l += 2) { /* part += shfl_xor(part, 1); lane 2b writes slot b */
            const int bsum = part[l] + part[l ^ 1];
            term[l >> 1] = md_iq2_term(sr, l >> 1, a[l].d, bsum);
        }
        return 0.125f * md_seq_sum<16>(term);
    }
    const int passes = kind == K_Q4K_GU ? 2 : 1;
    int is[2][32], sm[2][32];
    float d[2][32];
    for (int l = 0; l < 32; l++)
        for (int ps = 0; ps < passes; ps++) {
            const int b = (l >> 2) + 8 * ps, i = l & 3;
            if (kind == K_Q2K) {
                md_act_q2k a;
                md_load_act_q2k(xq + 292 * b, i, &a);
                md_q2k_piece(sr, b, i, a, &is[ps][l], &sm[ps][l]);
                d[ps][l] = a.d;
            } else {
                md_act_q4k a;
                md_load_act_q4k(xq + 292 * b, i, &a);
                md_q4k_quarter(sr, b, i, a, &is[ps][l], &sm[ps][l]);
                d[ps][l] = a.d;
            }
        }
    for (int l = 0; l < 32; l += 4) /* lane 4b of each group writes slot b (and b + 8) */
        for (int ps = 0; ps < passes; ps++) {
            const int b = (l >> 2) + 8 * ps;
            /* md_isum4: v += shfl_xor(v, 1); v += shfl_xor(v, 2): the 4 lanes' sum (exact ints) */
            const int isum = is[ps][l] + is[ps][l + 1] + is[ps][l + 2] + is[ps][l + 3];
            const int summs = sm[ps][l] + sm[ps][l + 1] + sm[ps][l + 2] + sm[ps][l + 3];
            const uint32_t dm = kind == K_Q2K ? md_q2k_dm(sr, b) : md_q4k_dm(sr, b);
            term[b] = md_k_term(dm, d[ps][l], isum, summs);
        }
    return passes == 2 ? md_seq_sum<16>(term) : md_seq_sum<8>(term);
}

static void check_kind(int kind, int rows, int random_w, int random_x) {
    const uint32_t type = kind == K_IQ2 ? DSV4_TYPE_IQ2_XXS : kind == K_Q2K ? DSV4_TYPE_Q2_K : DSV4_TYPE_Q4_K;
    const int in = kind == K_IQ2 || kind == K_Q4K_GU ? 4096 : 2048, nb = in / 256;
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, (uint64_t)in, &rb);
    const int bb = (int)(rb / nb);
    uint8_t *row = (uint8_t *)malloc(rb);
    uint8_t *stage = (uint8_t *)aligned_alloc(16, (rb + 16 + 15) & ~(uint64_t)15);
    dsv4_q8_k *xq = (dsv4_q8_k *)malloc(nb * sizeof(dsv4_q8_k));
    int bad_terms = 0, bad_rows = 0, bad_bits = 0;
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        fill_row(type, in, row, random_w);
        fill_act(xq, in, random_x);
        memset(stage, 0xa5, (rb + 16 + 15) & ~(uint64_t)15); /* garbage past the row */
        memcpy(stage, row, rb);
        __align__(16) float term[16];
        const float y = emu_row(kind, stage, (const uint8_t *)xq, term);
        double S = 0;
        for (int b = 0; b < nb; b++) {
            float ref = ref_dot(type, row + (size_t)b * bb, xq + b, 256);
            const float got = kind == K_IQ2 ? 0.125f * term[b] : term[b];
            if (!(ref == got)) { /* (0 + term on the CPU turns -0 into +0) */
                if (bad_terms < 3)
                    printf("  %s row %d block %d: term %.9g, quant_dot %.9g\n", kind_name[kind], r, b, got,
                           ref);
                bad_terms++;
            }
            S += fabs((double)ref);
        }
        const float reff = ref_dot(type, row, xq, in);
        const double ref = reff;
        bad_bits += memcmp(&reff, &y, 4) != 0; /* the CPU's order: the same bits */
        const double tol = 1e-5 * S + (nb + 8) * ldexp(1.0, -24) * S;
        const double err = fabs((double)y - ref);
        if (S > 0 && err / S > worst) worst = err / S;
        if (!(err <= tol)) {
            if (bad_rows < 3)
                printf("  %s row %d: %.9g vs quant_dot %.9g (tol %.3g)\n", kind_name[kind], r, y, ref, tol);
            bad_rows++;
        }
    }
    const bool ok = bad_terms == 0 && bad_rows == 0 && bad_bits == 0;
    printf("%s %-22s %s weights, %s activations: %d rows, %d superblock terms differ, %d rows not bitwise "
           "quant_dot, %d out of bound (worst |y-ref|/S %.2e)\n",
           ok ? "ok  " : "FAIL", kind_name[kind], random_w ? "random-byte" : "quantized",
           random_x ? "random-byte" : "quantized", rows, bad_terms, bad_bits, bad_rows, worst);
    g_fail += !ok;
    g_checks++;
    free(row), free(stage), free(xq);
}

int main(void) {
    for (int e = 0; e < 256; e++) {
        if (!md_iq2_grid_ok(dsv4_iq2xxs_grid[e])) {
            printf("FAIL grid entry %d has a byte outside {8, 25, 43}\n", e);
            return 1;
        }
        TG[e] = md_iq2_grid_sel(dsv4_iq2xxs_grid[e]);
    }
    for (int s = 0; s < 128; s++) TS[s] = md_iq2_sign_sel(dsv4_ksigns_iq2xs[s]);
    for (int e = 0; e < 384; e++)
        for (int c = 0; c < 32; c++) TR[32 * e + c] = e < 256 ? TG[e] : TS[e - 256];
    /* the selectors alone: every grid entry and sign pattern decodes to the signed grid bytes */
    int bad_sel = 0;
    for (int e = 0; e < 256; e++)
        for (int s = 0; s < 128; s++) {
            const uint32_t sel = TG[e] | TS[s];
            const uint32_t w[2] = {md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel),
                                   md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel >> 16)};
            for (int k = 0; k < 8; k++) {
                const int g = (int)((dsv4_iq2xxs_grid[e] >> (8 * k)) & 0xff);
                const int want = (dsv4_ksigns_iq2xs[s] >> k) & 1 ? -g : g;
                bad_sel += (int)(int8_t)(w[k >> 2] >> (8 * (k & 3))) != want;
            }
        }
    printf("%s IQ2_XXS selectors: %d of %d signed grid bytes differ\n", bad_sel ? "FAIL" : "ok  ", bad_sel,
           256 * 128 * 8);
    g_fail += bad_sel != 0;
    g_checks++;
    for (int kind = K_IQ2; kind <= K_Q4K_DN; kind++)
        for (int rw = 0; rw < 2; rw++)
            for (int rx = 0; rx < 2; rx++) check_kind(kind, 48, rw, rx);
    printf("%s IQ2_XXS replicated-table addressing (32 lane copies): %d partials differ from one copy\n",
           g_bad_rep ? "FAIL" : "ok  ", g_bad_rep);
    g_fail += g_bad_rep != 0;
    g_checks++;
    printf("%s: %d of %d checks failed\n", g_fail ? "FAIL" : "PASS", g_fail, g_checks);
    return g_fail ? 1 : 0;
}
