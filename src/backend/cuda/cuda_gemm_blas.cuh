/* Units of the cuBLAS prefill products (cuda_gemm_blas.cu), host and device:
 * tests/cuda/gemm_blas_emu_check.cu runs these same functions on the CPU.
 *
 * Operands of the f16 GEMM:
 *   - a Q8_0 weight element becomes f16(q * f16->f32(d)): the product is exact in f32 (8 x 11 bits)
 *     and the one rounding is to f16 (relative error <= 2^-11). A tensor whose largest |d| is over
 *     511.75 (half bits 0x5FFF) could overflow f16 (128 * 511.75 = 65504, the f16 maximum): the
 *     path does not take it (xb_d_bits_safe);
 *   - a Q8_0-weight product's activation is the CPU's Q8_0 activation value q * d (quant_act_q8_0's
 *     block scale and rounding; the product q * d rounded once in f32) rounded to f16, so the
 *     operand is the CPU's own integer times scale up to that last rounding; an F16 weight's
 *     activation is two f16 terms, f16(x) and f16(x - f16(x)), each multiplied by W and the two sums
 *     added (session 18; f16(x) alone with DSV4_CUDA_F16_TWO_TERM=0), as in the tensor-core F16
 *     kernel (cuda_gemm_f16_mma.h);
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
/* The Q8_0 activation value of v in a block with scale d, inverse id (quant_act_q8_0's q times d),
 * times the row scale s = 2^-e. */
XB_HD float xb_act_q8_0(float v, float d, float id, float s) {
    return xb_mul(xb_mul((float)act_q8_0_q(v, id), d), s);
}

#endif
