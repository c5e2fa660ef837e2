/* Units of the cuBLAS prefill products (cuda_gemm_blas.cu), host and device:
 * tests/cuda/gemm_blas_emu_check.cu runs these same functions on the CPU.
 *
 * Operands of the f16 GEMM:
 *   - a Q8_0 weight element v = q * f16->f32(d) is exact in f32 (8 x 11 bits); times the tensor's
 *     power of two 2^Sw (xb_w_exp: its largest |v| near 2^15, so small block scales stay in the f16
 *     normal range) it becomes two f16 terms, hi = f16(a) and lo = f16((a - hi) * 2^11), whose sum
 *     hi + lo * 2^-11 is a exactly (a - hi has at most 7 significant bits). A tensor whose largest
 *     |d| is over 511.75 (half bits 0x5FFF) is not taken (xb_d_bits_safe; kept from the one-term
 *     form, where q * d itself had to be a finite f16);
 *   - a Q8_0-weight product's activation is the CPU's Q8_0 activation value q * d (quant_act_q8_0's
 *     block scale and rounding; the product q * d rounded once in f32), and an F16 weight's is x;
 *     either as two f16 terms, hi = f16(r) and lo = f16((r - hi) * 2^11) (r - hi exact in f32), so
 *     hi + lo * 2^-11 is r to ~2^-22 relative;
 *   - the products (session 19, after the HF-oracle fixture tiny_q2_A failed on CUDA with f16(v) and
 *     f16(r) alone): Q8_0, W hi x hi + (W hi x lo + W lo x hi) * 2^-11, all times 2^-Sw (three GEMMs;
 *     DSV4_CUDA_Q8_TERMS=1: W hi x hi only); F16, W x hi + W x lo * 2^-11 (two GEMMs;
 *     DSV4_CUDA_F16_TWO_TERM=0: W x hi only). The dropped lo x lo is ~2^-22 relative;
 *   - a token row whose largest |x| is over XB_XMAX is scaled by 2^-e (exact: a power of two) so
 *     that no operand overflows f16, and its outputs are multiplied by 2^e after the GEMM (exact).
 *     Values that scaling pushes below the f16 normal range lose bits, only in such rows, which
 *     are far outside what a layer's activations hold. */
#ifndef DSV4_CUDA_GEMM_BLAS_CUH
#define DSV4_CUDA_GEMM_BLAS_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh" /* act_q8_0_d / _id / _q */

#define XB_HD __host__ __device__ __forceinline__
/* the largest |x| a row may hold unscaled: x̂ <= amax * (1 + 2^-11) stays below 65504 */
#define XB_XMAX 61440.0f

enum { XB_D_SAFE_BITS = 0x5FFF }; /* f16 511.75 */

/* Half bits of a Q8_0 block scale, sign dropped: may the tensor's elements all become f16? */
XB_HD bool xb_d_bits_safe(uint32_t max_abs_bits) { return max_abs_bits <= XB_D_SAFE_BITS; }

/* 2^k for -126 <= k <= 127 (exact) */
XB_HD float xb_pow2(int k) {
    const uint32_t b = (uint32_t)(127 + k) << 23;
    float f;
#ifdef __CUDA_ARCH__
    f = __uint_as_float(b);
#else
    memcpy(&f, &b, 4);
#endif
    return f;
}
/* The row's scale exponent e >= 0: the smallest with amax * 2^-e <= XB_XMAX (0 for non-finite
 * amax: such rows give non-finite outputs on every path). */
XB_HD int xb_row_exp(float amax) {
    int e = 0;
    if (!(amax <= 3.0e38f)) return 0;
    while (amax > XB_XMAX && e < 126) {
        amax *= 0.5f;
        e++;
    }
    return e;
}
XB_HD float xb_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
/* the lo terms' scale 2^XB_LO_SHIFT (undone by the GEMM's alpha) */
#define XB_LO_SHIFT 11

/* A lo term before its f16 rounding: (a - hi) * 2^11, exact for the a, hi above. */
XB_HD float xb_lo_operand(float a, float hi) { return xb_mul(a - hi, 2048.0f); }

/* Sw of a Q8_0 tensor whose largest |d| has these half bits (sign dropped): the largest Sw with
 * 128 * dmax * 2^Sw <= 2^15 (0 for zero or non-finite scales). */
XB_HD int xb_w_exp(uint32_t max_abs_bits) {
    max_abs_bits &= 0x7fffu;
    if (max_abs_bits == 0 || max_abs_bits >= 0x7c00u) return 0;
    const uint32_t e = max_abs_bits >> 10, m = max_abs_bits & 1023u;
    const float d = e ? (float)(1024u + m) * xb_pow2((int)e - 25) : (float)m * xb_pow2(-24);
    int s = 0;
    while (128.0f * d * xb_pow2(s) > 32768.0f) s--;
    while (128.0f * d * xb_pow2(s + 1) <= 32768.0f) s++;
    return s;
}

/* The Q8_0 activation value of v in a block with scale d, inverse id (quant_act_q8_0's q times d),
 * times the row scale s = 2^-e. */
XB_HD float xb_act_q8_0(float v, float d, float id, float s) {
    return xb_mul(xb_mul((float)act_q8_0_q(v, id), d), s);
}

#endif
