/* Host-only check of the generic product's block decoders (src/backend/cuda/cuda_gemm_units.cuh):
 * rows of every quantized type (quantized from random floats, and random bytes with valid
 * scales), activations from quant_act_*, terms added in block order exactly as gm_kernel adds
 * them; the result must equal quant_dot_* bit for bit. Also the EXACT units
 * (cuda_exact_units.cuh): every element of such rows (and of F32/F16/BF16 rows) against
 * quant_dequant_row, and the EXACT dot against the CPU backend's cpu_dot_exact over
 * quant_dequant_row, bit for bit. Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda -> build-x/cuda/gemm_units_check */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_exact_units.cuh"
#include "backend/cuda/cuda_gemm_units.cuh"
extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_dot_exact: the CPU backend's EXACT dot */
}

#define CHECK_RNG_SEED 99
#include "check_rng.h"

template <int K> static float row_dot(const uint8_t *w, const uint8_t *x, long long nb) {
    float acc = 0.0f; /* gm_kernel: terms of blocks 0, 1, ... added to acc from 0.0f */
    for (long long b = 0; b < nb; b++)
        acc = acc + gm_block_term<K>(w, x, b, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs);
    return K == GM_IQ2_XXS ? 0.125f * acc : acc;
}

static int check(const char *name, uint32_t type, int kind, int64_t in, int random_bytes) {
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, in, &rb);
    const int blk = kind == GM_Q8_0 ? 32 : 256;
    const size_t ab =
        kind == GM_Q8_0 ? (size_t)(in / 32) * sizeof(dsv4_q8_0_act) : (size_t)(in / 256) * sizeof(dsv4_q8_k);
    float *xf = (float *)malloc(in * sizeof(float)), *wf = (float *)malloc(in * sizeof(float));
    uint8_t *w = (uint8_t *)malloc(rb), *x = (uint8_t *)malloc(ab);
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        const float xs = rep % 7 == 0 ? 1e-3f : (rep % 5 == 0 ? 40.0f : 1.0f);
        for (int64_t i = 0; i < in; i++) xf[i] = uni() * xs, wf[i] = uni() * 0.05f;
        if (rep % 11 == 3) xf[5] = 0.0f, xf[6] = -xf[7]; /* ties in |x| */
        if (random_bytes) {
            for (uint64_t i = 0; i < rb; i++) w[i] = (uint8_t)nxt();
            /* valid finite scales: overwrite the f16 scale fields */
            for (int64_t b = 0; b < in / blk; b++) {
                const uint16_t d = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
                uint8_t *bb = w + b * (rb / (in / blk));
                if (kind == GM_Q8_0 || kind == GM_IQ2_XXS) memcpy(bb, &d, 2);
                if (kind == GM_Q4_K) memcpy(bb, &d, 2), memcpy(bb + 2, &dm, 2);
                if (kind == GM_Q2_K) memcpy(bb + 80, &d, 2), memcpy(bb + 82, &dm, 2);
            }
        } else {
            quant_quantize_row(type, wf, w, in);
        }
        float ref, got;
        if (kind == GM_Q8_0) {
            quant_act_q8_0(xf, (dsv4_q8_0_act *)x, in);
            ref = quant_dot_q8_0(w, (const dsv4_q8_0_act *)x, in);
            got = row_dot<GM_Q8_0>(w, x, in / 32);
        } else {
            quant_act_q8_k(xf, (dsv4_q8_k *)x, in);
            const dsv4_q8_k *xk = (const dsv4_q8_k *)x;
            if (kind == GM_Q2_K)
                ref = quant_dot_q2_k(w, xk, in), got = row_dot<GM_Q2_K>(w, x, in / 256);
            else if (kind == GM_Q4_K)
                ref = quant_dot_q4_k(w, xk, in), got = row_dot<GM_Q4_K>(w, x, in / 256);
            else
                ref = quant_dot_iq2_xxs(w, xk, in), got = row_dot<GM_IQ2_XXS>(w, x, in / 256);
        }
        uint32_t a, b;
        memcpy(&a, &ref, 4), memcpy(&b, &got, 4);
        if (a != b) {
            if (bad < 3) fprintf(stderr, "  %s rep %d: %.9g vs quant %.9g\n", name, rep, got, ref);
            bad++;
        }
    }
    /* f16/bf16 conversions used for scales and F16 rows: every bit pattern */
    printf("%s %-8s in=%-5lld %s: %d of 200 rows differ from quant_dot\n", bad ? "FAIL" : "ok  ", name,
           (long long)in, random_bytes ? "random bytes" : "quantized", bad);
    free(xf), free(wf), free(w), free(x);
    return bad != 0;
}

/* EXACT units: ex_elem == quant_dequant_row for every element, ex_dot == cpu_dot_exact. */
template <int K> static int check_exact(const char *name, uint32_t type, int64_t in, int random_bytes) {
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, in, &rb);
    const int blk = K == GM_Q8_0 ? 32 : (K == GM_Q2_K || K == GM_Q4_K || K == GM_IQ2_XXS ? 256 : 1);
    float *xf = (float *)malloc(in * sizeof(float)), *wf = (float *)malloc(in * sizeof(float));
    float *deq = (float *)malloc(in * sizeof(float));
    uint8_t *w = (uint8_t *)malloc(rb);
    int bad_elem = 0, bad_dot = 0;
    for (int rep = 0; rep < 50; rep++) {
        const float xs = rep % 7 == 0 ? 1e-3f : (rep % 5 == 0 ? 40.0f : 1.0f);
        for (int64_t i = 0; i < in; i++) xf[i] = uni() * xs, wf[i] = uni() * 0.05f;
        if (random_bytes) {
            for (uint64_t i = 0; i < rb; i++) w[i] = (uint8_t)nxt();
            for (int64_t b = 0; b < in / blk && blk > 1; b++) { /* finite scales */
                const uint16_t d = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
                uint8_t *bb = w + b * (rb / (in / blk));
                if (K == GM_Q8_0 || K == GM_IQ2_XXS) memcpy(bb, &d, 2);
                if (K == GM_Q4_K) memcpy(bb, &d, 2), memcpy(bb + 2, &dm, 2);
                if (K == GM_Q2_K) memcpy(bb + 80, &d, 2), memcpy(bb + 82, &dm, 2);
            }
            if (K == GM_F16 || K == GM_BF16) /* finite halves: clear the top exponent bit */
                for (int64_t i = 0; i < in; i++) w[2 * i + 1] &= K == GM_F16 ? 0xbb : 0xbf;
            if (K == GM_F32) memcpy(w, wf, rb);
        } else if (K == GM_F32) {
            memcpy(w, wf, rb);
        } else if (K == GM_F16 || K == GM_BF16) {
            for (int64_t i = 0; i < in; i++) {
                const uint16_t h = K == GM_F16 ? dsv4_f32_to_f16(wf[i]) : dsv4_f32_to_bf16(wf[i]);
                memcpy(w + 2 * i, &h, 2);
            }
        } else {
            quant_quantize_row(type, wf, w, in);
        }
        if (!quant_dequant_row(type, w, deq, in)) {
            fprintf(stderr, "  %s: quant_dequant_row refused\n", name);
            bad_elem++;
            break;
        }
        for (int64_t i = 0; i < in; i++) {
            const float e = ex_elem<K>(w, (uint64_t)i, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs);
            if (memcmp(&e, &deq[i], 4)) {
                if (bad_elem < 3)
                    fprintf(stderr, "  %s rep %d elem %lld: %.9g vs %.9g\n", name, rep, (long long)i, e,
                            deq[i]);
                bad_elem++;
            }
        }
        const float ref = cpu_dot_exact(deq, xf, (uint64_t)in);
        const float got = ex_dot<K>(w, xf, (uint64_t)in, dsv4_iq2xxs_grid, dsv4_ksigns_iq2xs);
        if (memcmp(&ref, &got, 4)) {
            if (bad_dot < 3)
                fprintf(stderr, "  %s rep %d dot: %.9g vs cpu_dot_exact %.9g\n", name, rep, got, ref);
            bad_dot++;
        }
    }
    printf("%s exact %-8s in=%-5lld %s: %d elements, %d of 50 dots differ\n",
           bad_elem || bad_dot ? "FAIL" : "ok  ", name, (long long)in,
           random_bytes ? "random bytes" : "quantized", bad_elem, bad_dot);
    free(xf), free(wf), free(deq), free(w);
    return bad_elem || bad_dot;
}

int main(void) {
    int fails = 0;
    for (int rnd = 0; rnd < 2; rnd++) {
        fails += check_exact<GM_F32>("F32", DSV4_TYPE_F32, 67, rnd); /* odd width: the lane-0 tail */
        fails += check_exact<GM_F16>("F16", DSV4_TYPE_F16, 1027, rnd);
        fails += check_exact<GM_BF16>("BF16", DSV4_TYPE_BF16, 258, rnd);
        fails += check_exact<GM_Q8_0>("Q8_0", DSV4_TYPE_Q8_0, 4096, rnd);
        fails += check_exact<GM_Q2_K>("Q2_K", DSV4_TYPE_Q2_K, 2048, rnd);
        fails += check_exact<GM_Q4_K>("Q4_K", DSV4_TYPE_Q4_K, 512, rnd);
        fails += check_exact<GM_IQ2_XXS>("IQ2_XXS", DSV4_TYPE_IQ2_XXS, 4096, rnd);
    }
    for (int rnd = 0; rnd < 2; rnd++) {
        fails += check("Q8_0", DSV4_TYPE_Q8_0, GM_Q8_0, 64, rnd);
        fails += check("Q8_0", DSV4_TYPE_Q8_0, GM_Q8_0, 4096, rnd);
        fails += check("Q2_K", DSV4_TYPE_Q2_K, GM_Q2_K, 256, rnd);
        fails += check("Q2_K", DSV4_TYPE_Q2_K, GM_Q2_K, 2048, rnd);
        fails += check("Q4_K", DSV4_TYPE_Q4_K, GM_Q4_K, 512, rnd);
        fails += check("IQ2_XXS", DSV4_TYPE_IQ2_XXS, GM_IQ2_XXS, 256, rnd);
        fails += check("IQ2_XXS", DSV4_TYPE_IQ2_XXS, GM_IQ2_XXS, 4096, rnd);
    }
    int hbad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = gm_f16((uint16_t)h), b = dsv4_f16_to_f32((uint16_t)h);
        const float c = gm_bf16((uint16_t)h), d = dsv4_bf16_to_f32((uint16_t)h);
        if (memcmp(&a, &b, 4) || memcmp(&c, &d, 4)) hbad++;
    }
    printf("%s f16/bf16 -> f32: %d of 65536 bit patterns differ\n", hbad ? "FAIL" : "ok  ", hbad);
    fails += hbad != 0;
    printf("%s\n", fails ? "GEMM UNITS FAILED" : "GEMM UNITS PASSED");
    return fails ? 1 : 0;
}
