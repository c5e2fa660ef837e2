/* The random operands of the Q8_0 warpgroup GEMM checks (q8_wg_check.cu on the GPU, q8_wg_emu_check.cu
 * on the host): Q8_0 weight rows with row scales spread over 2^-12..2^4, and f32 activations in
 * [-1, 1) with about one value in 97 scaled by 300 (outliers in most blocks). Include after
 * check_rng.h and quant/quant.h. */
#ifndef DSV4_Q8_WG_DATA_H
#define DSV4_Q8_WG_DATA_H

#include <math.h>
#include <stdlib.h>

/* R rows of `in` values as Q8_0 blocks (R * in / 32 * 34 bytes, malloc'd) */
static uint8_t *q8wg_weights(uint64_t R, uint64_t in) {
    uint8_t *w = (uint8_t *)malloc(R * (in / 32) * 34);
    float *row = (float *)malloc(in * sizeof(float));
    if (!w || !row) abort();
    for (uint64_t r = 0; r < R; r++) {
        const float scale = ldexpf(1.0f, (int)(nxt() % 17) - 12);
        for (uint64_t k = 0; k < in; k++) row[k] = uni() * scale;
        quant_quantize_q8_0(row, w + r * (in / 32) * 34, (int64_t)in);
    }
    free(row);
    return w;
}
/* count activations (malloc'd) */
static float *q8wg_acts(uint64_t count) {
    float *x = (float *)malloc(count * sizeof(float));
    if (!x) abort();
    for (uint64_t i = 0; i < count; i++) {
        const float v = uni();
        x[i] = nxt() % 97 == 0 ? v * 300.0f : v;
    }
    return x;
}

#endif
