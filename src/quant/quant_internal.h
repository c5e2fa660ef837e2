/* Private declarations shared by the quant/ sources (not part of the public API). */
#ifndef DSV4_QUANT_INTERNAL_H
#define DSV4_QUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

/* Float results must not depend on whether the compiler fuses a*b+c into an FMA: scalar and
 * SIMD kernels are compared bitwise, and FMA availability differs between targets. */
#if defined(__clang__)
#define DSV4_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define DSV4_NO_FP_CONTRACT _Pragma("GCC optimize(\"fp-contract=off\")")
#else
#define DSV4_NO_FP_CONTRACT
#endif

static inline uint32_t quant_load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* The 8 magnitudes (8, 25 or 43) of grid entry g, element k = byte k of the LE u64. */
static inline int quant_iq2_grid_elem(uint32_t g, int k) {
    return (int)((dsv4_iq2xxs_grid[g] >> (8 * k)) & 0xff);
}

/* Q4_K 6-bit scale/min of sub-block j (ggml get_scale_min_k4). */
static inline void quant_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* F16/BF16 dots: element i accumulates into lane i%8 (product rounded, then added); the lanes
 * combine as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), the natural AVX2 horizontal reduction. */
static inline float quant_combine_lanes8(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* AVX2 kernels (dot_avx2.c); only called after the run-time CPU check. */
float quant_dot_q8_0_avx2(const void *wrow, const dsv4_q8_0_act *x, int64_t n);
float quant_dot_q2_k_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_iq2_xxs_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_q4_k_avx2(const void *wrow, const dsv4_q8_k *x, int64_t n);
float quant_dot_f16_avx2(const uint16_t *wrow, const float *x, int64_t n);
void quant_dot_q8_0_x_avx2(const void *wrow, const dsv4_q8_0_act *const *x, int nx, int64_t n, float *out);
void quant_dot_q2_k_x_avx2(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);
void quant_dot_iq2_xxs_x_avx2(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);
void quant_dot_q4_k_x_avx2(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out);
/* The F16C conversion the AVX2 kernels use for block scales (must equal dsv4_f16_to_f32). */
float quant_f16_to_f32_avx2(uint16_t h);
/* true when this build has the AVX2 kernels at all (x86-64 with GNU C). */
int quant_avx2_compiled(void);

#endif
