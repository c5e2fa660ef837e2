/* Block formats (ggml layouts), activation quantization, dot products in ds4's CPU numerics,
 * weight quantizers for writing models, and the FP8/FP4/Hadamard round trips of the KV path.
 * See shared/spec/model-moe-gguf-tokenizer.md §1.5, §2.8 and model-attention-hc.md §6.
 *
 * Every dot kernel has a scalar reference. SIMD variants (AVX2, selected at run time with
 * __builtin_cpu_supports) produce BITWISE the same result as the scalar reference: integer
 * partial sums are exact and the float combination order is fixed and documented per kernel. */
#ifndef DSV4_QUANT_H
#define DSV4_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "common/types.h"

/* ---- half precision ---- */
float dsv4_f16_to_f32(uint16_t h); /* exact, subnormals included */
uint16_t dsv4_f32_to_f16(float f); /* RNE, subnormals kept, overflow -> inf, NaN -> sign|0x7e00 */
float dsv4_f16_round(float f);     /* f32(f16(f)) */
float dsv4_bf16_to_f32(uint16_t h);
uint16_t dsv4_f32_to_bf16(float f); /* RNE; NaN stays NaN */

/* ---- block layouts (little-endian, packed; sizes asserted in quant.c) ---- */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} dsv4_block_q8_0; /* 34 B */
typedef struct {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d;
    uint16_t dmin;
} dsv4_block_q2_k; /* 84 B */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} dsv4_block_q4_k; /* 144 B */
typedef struct {
    uint16_t d;
    uint16_t qs[32];
} dsv4_block_iq2_xxs; /* 66 B */

/* Activation formats (in-memory only). Q8_0 activations keep an f32 scale (ds4 CPU, not ggml). */
typedef struct {
    float d;
    int8_t qs[32];
} dsv4_q8_0_act;
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} dsv4_q8_k; /* ggml block_q8_K, 292 B */

#define DSV4_QK8_0 32
#define DSV4_QK_K 256

/* Dequantize n elements (n a multiple of the type's block) of a row. Supported: F32, F16, BF16,
 * Q8_0, Q2_K, Q4_K, IQ2_XXS (I32 is converted to float). Returns false for other types. */
bool quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* ---- activation quantization ---- */
/* ds4 CPU Q8_0: per 32: amax -> d = amax/127 (f32), id = d ? 1/d : 0, q = clamp(lrintf(x*id), -128, 127). */
void quant_act_q8_0(const float *x, dsv4_q8_0_act *out, int64_t n);
/* ds4 Q8_K: per 256: max = signed value of largest |x| (first wins); amax==0 -> zeros;
 * iscale = -127/max; q = clamp(lrintf(iscale*x), -128, 127); bsums; d = 1/iscale. */
void quant_act_q8_k(const float *x, dsv4_q8_k *out, int64_t n);

/* ---- dot products of one weight row with one activation vector (n elements) ---- */
float quant_dot_q8_0(const void *wrow, const dsv4_q8_0_act *x, int64_t n);
float quant_dot_q2_k(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_iq2_xxs(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_q4_k(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_f16(const uint16_t *wrow, const float *x, int64_t n);  /* f32 accumulate */
float quant_dot_f32(const float *wrow, const float *x, int64_t n);     /* double accumulate */
float quant_dot_bf16(const uint16_t *wrow, const float *x, int64_t n); /* f32 accumulate */

/* One weight row against nx activation vectors: out[i] is bitwise quant_dot_<type>(wrow, x[i], n)
 * (each activation keeps its own accumulator and the single-row float order); only the weight
 * loads and decoding are shared, so prefill and expert batches read and decode each row once. */
void quant_dot_q8_0_x(const void *wrow, const dsv4_q8_0_act *const *x, int nx, int64_t n, float *out);
void quant_dot_q2_k_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);
void quant_dot_iq2_xxs_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);
void quant_dot_q4_k_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);

/* Reference scalar versions (always available; the dispatching functions above must equal them). */
float quant_dot_q8_0_scalar(const void *wrow, const dsv4_q8_0_act *x, int64_t n);
float quant_dot_q2_k_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_iq2_xxs_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_q4_k_scalar(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_f16_scalar(const uint16_t *wrow, const float *x, int64_t n);
/* true when SIMD kernels are in use (DSV4_NO_SIMD=1 in the environment forces scalar). */
bool quant_simd_active(void);

/* ---- weight quantizers (for writing models; need not be optimal, must be sane) ---- */
void quant_quantize_q8_0(const float *x, void *dst, int64_t n);
void quant_quantize_q2_k(const float *x, void *dst, int64_t n);
void quant_quantize_q4_k(const float *x, void *dst, int64_t n);
void quant_quantize_iq2_xxs(const float *x, void *dst, int64_t n); /* nearest-grid search */
/* Quantize a row of n floats into `type` (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS). */
bool quant_quantize_row(uint32_t type, const float *x, void *dst, int64_t n);

/* Fast random row for synthesized models: writes n elements of `type` whose dequantized values
 * have mean ~0 and standard deviation ~`std` (e.g. 1/sqrt(fan_in)), with finite, non-zero scales.
 * Generates quantized codes directly (no float quantization), so it runs at >= ~1 GB/s per core.
 * `*rng_state` is a 64-bit PRNG state advanced by the call (deterministic for a given seed). */
bool quant_fill_random_row(uint32_t type, uint64_t *rng_state, float std, void *dst, int64_t n);

/* IQ2_XXS tables (standard ggml values). */
extern const uint64_t dsv4_iq2xxs_grid[256];
extern const uint8_t dsv4_ksigns_iq2xs[128];

/* ---- KV-path numerics (model-attention-hc.md §6) ---- */
float dsv4_e4m3_round(float v); /* nearest e4m3fn value of v (saturating at ±448), ties to even */
float dsv4_e2m1_round(float v); /* nearest of {0,.5,1,1.5,2,3,4,6} (±, saturating at 6), ties to even */
/* FP8 round trip in place over n elements in blocks of 64 (n a multiple of 64). */
void dsv4_fp8_roundtrip_blocks64(float *x, int64_t n);
/* FP4 round trip in place over n elements in blocks of 32 (n a multiple of 32). */
void dsv4_fp4_roundtrip_blocks32(float *x, int64_t n);
/* Packed FP4 KV rows (backend.h DSV4_KV_FP4): n a multiple of 32, 17 bytes per 32 elements. */
void dsv4_fp4_pack_row(const float *x, int64_t n, uint8_t *out);
void dsv4_fp4_unpack_row(const uint8_t *in, int64_t n, float *out);
/* In-place fast Walsh-Hadamard of n (power of two) elements, scaled by 1/sqrt(n)
 * (for n = 128 the scale is exactly 0.08838834764831845f as ds4). */
void dsv4_hadamard_inplace(float *x, int64_t n);

#endif
