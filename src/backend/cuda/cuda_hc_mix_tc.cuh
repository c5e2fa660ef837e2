/* Units of the prefill HC mix on TF32 tensor cores (cuda_hc_mix_tc.cu), host and device:
 * tests/cuda/hc_mix_tc_emu_check.cu runs these same functions on the CPU with an emulated
 * mma.m16n8k8 TF32 product.
 *
 * What it computes, per token t of a chunk (hd = n_hc * n_embd inputs, n_mix <= 24 outputs):
 *   mix[t][j] = (sum_k W[j][k] x[t][k]) * r_t,  r_t = 1 / sqrt(sum_k x[t][k]^2 / hd + eps)
 * (rmsnorm_noweight then the F16 product, with the norm's factor applied once to the sums instead of
 * to every input). The operands: W is F16, exact in TF32; x as hi + lo TF32 terms (hi = tf32(x),
 * lo = tf32(x - hi), x - hi exact in f32), so hi + lo is x to ~2^-22 relative, as the cuBLAS path's
 * f16 hi + lo of the normed row; the products exact, the sums f32 in the tensor core. Sum of squares
 * in double (each lane's inputs in order, the 4 lanes of a token by a xor butterfly, the warps in
 * order), r_t as xb_rms_xcvt_kernel forms it. Not bitwise the CPU (nor the cuBLAS path); deterministic.
 * It replaces the cuBLAS path's f16 conversion of the normed rows, its two GEMMs with 24 outputs and
 * the rescale: one read of the rows (session 24: that path took ~170 us of hc_pre's 224 us a call on
 * a 2K flash chunk, ~45 us being one read of its 134 MB).
 *
 * The CTA: HMT_WARPS warps over one tile of 16 tokens; warp w takes inputs [w hd/16, (w+1) hd/16) in
 * steps of 16. In a step lane (g = lane / 4, t = lane % 4) reads inputs 4t..4t+3 of tokens g and g + 8
 * (one float4 each) and of mix rows 8 nt + g (4 halves each): a product over k is a sum, so the k
 * order inside a step is free as long as A and B agree. Four m16n8k8 per step and n8 tile: sub-step
 * s takes inputs 4t + 2s (the fragment's column t) and 4t + 2s + 1 (column t + 4), the hi terms
 * then the lo terms into the same f32 sums. The 16 warps'
 * partial sums meet in shared memory and are added in warp order. */
#ifndef DSV4_CUDA_HC_MIX_TC_CUH
#define DSV4_CUDA_HC_MIX_TC_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#define HMT_HD __host__ __device__ __forceinline__

enum {
    HMT_TOK = 16,   /* tokens of a CTA (the m16 of the product) */
    HMT_WARPS = 16, /* warps of a CTA, each a slice of the inputs */
    HMT_STEP = 16,  /* inputs per step */
    HMT_UNROLL = 4, /* steps whose loads are issued together (8 where hd allows: hmt_unroll) */
    HMT_NT = 3,     /* n8 tiles: up to 24 mix rows */
    HMT_MIX_MAX = 8 * HMT_NT
};

/* Does the kernel take the shape? hd a multiple of HMT_WARPS x HMT_STEP x HMT_UNROLL, n_mix <= 24. */
HMT_HD bool hmt_shape_ok(uint64_t hd, uint32_t n_mix) {
    return hd > 0 && hd % ((uint64_t)HMT_WARPS * HMT_STEP * HMT_UNROLL) == 0 && hd <= 0x7fffffffull &&
           n_mix > 0 && n_mix <= HMT_MIX_MAX;
}

/* Steps whose loads the kernel issues together: 8 where every warp's slice holds a whole number
 * of 8 steps (flash: hd 16384), else 4. */
HMT_HD int hmt_unroll(uint64_t hd) { return hd % ((uint64_t)HMT_WARPS * HMT_STEP * 8) == 0 ? 8 : 4; }

/* The input (of a step's 16) that lane t's register r (0: column t, 1: column t + 4) holds in
 * sub-step s, in A and B alike. */
HMT_HD uint32_t hmt_k(uint32_t t, uint32_t s, uint32_t r) { return 4 * t + 2 * s + r; }

/* f32 -> tf32 (10 mantissa bits), rounded to nearest, ties away from zero (cvt.rna.tf32.f32); the
 * result's low 13 bits are zero. Finite inputs only (the rows' non-finite values give non-finite
 * sums on every path). */
HMT_HD float hmt_tf32(float x) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1fffu; /* sign-magnitude: adding half an ulp to the magnitude rounds away */
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
/* x as hi + lo */
HMT_HD void hmt_split(float x, float *hi, float *lo) {
    *hi = hmt_tf32(x);
    *lo = hmt_tf32(x - *hi);
}

/* The norm's factor from the token's sum of squares, as xb_rms_xcvt_kernel forms it. */
HMT_HD float hmt_factor(double ss, uint64_t hd, float eps) {
    const float m = (float)(ss / (double)hd);
    return 1.0f / sqrtf(m + eps);
}

/* The fragments of sub-step s from a lane's 4 inputs of a step (element i is input 4t + i of the
 * step: hmt_k(t, i / 2, i % 2)) of token g (vg), token g + 8 (vg8) and a mix row (w): m16n8k8 A
 * a0 = (row g, column t), a1 = (row g + 8, column t), a2 = (row g, column t + 4), a3 = (row g + 8,
 * column t + 4); B b0 = (k t, column g), b1 = (k t + 4, column g). */
HMT_HD void hmt_frag_a(const float vg[4], const float vg8[4], uint32_t s, float a[4]) {
    a[0] = vg[2 * s], a[1] = vg8[2 * s], a[2] = vg[2 * s + 1], a[3] = vg8[2 * s + 1];
}
HMT_HD void hmt_frag_b(const float w[4], uint32_t s, float b[2]) { b[0] = w[2 * s], b[1] = w[2 * s + 1]; }

/* Where an accumulator lands: register i of n8 tile nt of lane (g, t) is token g + 8 (i >> 1), mix
 * row 8 nt + 2 t + (i & 1). */
HMT_HD uint32_t hmt_acc_tok(uint32_t lane, uint32_t i) { return (lane >> 2) + 8 * (i >> 1); }
HMT_HD uint32_t hmt_acc_mix(uint32_t lane, uint32_t nt, uint32_t i) {
    return 8 * nt + 2 * (lane & 3) + (i & 1);
}

#endif
