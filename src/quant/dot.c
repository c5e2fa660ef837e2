/* Run-time choice between the AVX2 and scalar dot kernels, decided once per process. */
#include <pthread.h>
#include <stdlib.h>

#include "quant/quant_internal.h"

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static bool simd_on; /* written once under simd_once, read-only afterwards */

static void simd_decide(void) {
    const char *env = getenv("DSV4_NO_SIMD");
    const bool forced_off = env && env[0] && !(env[0] == '0' && env[1] == '\0');
    bool cpu = false;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#endif
    simd_on = !forced_off && cpu && quant_avx2_compiled();
}

bool quant_simd_active(void) {
    pthread_once(&simd_once, simd_decide);
    return simd_on;
}

float quant_dot_q8_0(const void *wrow, const dsv4_q8_0_act *x, int64_t n) {
    return quant_simd_active() ? quant_dot_q8_0_avx2(wrow, x, n) : quant_dot_q8_0_scalar(wrow, x, n);
}

float quant_dot_q2_k(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    return quant_simd_active() ? quant_dot_q2_k_avx2(wrow, x, n) : quant_dot_q2_k_scalar(wrow, x, n);
}

float quant_dot_iq2_xxs(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    return quant_simd_active() ? quant_dot_iq2_xxs_avx2(wrow, x, n) : quant_dot_iq2_xxs_scalar(wrow, x, n);
}

float quant_dot_q4_k(const void *wrow, const dsv4_q8_k *x, int64_t n) {
    return quant_simd_active() ? quant_dot_q4_k_avx2(wrow, x, n) : quant_dot_q4_k_scalar(wrow, x, n);
}

float quant_dot_f16(const uint16_t *wrow, const float *x, int64_t n) {
    return quant_simd_active() ? quant_dot_f16_avx2(wrow, x, n) : quant_dot_f16_scalar(wrow, x, n);
}

void quant_dot_q8_0_x(const void *wrow, const dsv4_q8_0_act *const *x, int nx, int64_t n, float *out) {
    if (quant_simd_active()) {
        quant_dot_q8_0_x_avx2(wrow, x, nx, n, out);
        return;
    }
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q8_0_scalar(wrow, x[i], n);
}

void quant_dot_q2_k_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    if (quant_simd_active()) {
        quant_dot_q2_k_x_avx2(wrow, x, nx, n, out);
        return;
    }
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q2_k_scalar(wrow, x[i], n);
}

void quant_dot_iq2_xxs_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    if (quant_simd_active()) {
        quant_dot_iq2_xxs_x_avx2(wrow, x, nx, n, out);
        return;
    }
    for (int i = 0; i < nx; i++) out[i] = quant_dot_iq2_xxs_scalar(wrow, x[i], n);
}

void quant_dot_q4_k_x(const void *wrow, const dsv4_q8_k *const *x, int nx, int64_t n, float *out) {
    if (quant_simd_active()) {
        quant_dot_q4_k_x_avx2(wrow, x, nx, n, out);
        return;
    }
    for (int i = 0; i < nx; i++) out[i] = quant_dot_q4_k_scalar(wrow, x[i], n);
}
