/* Weight type -> activation format and dot kernel, shared by matmul and the routed experts (ds4 CPU:
 * Q8_0 weights take Q8_0 activations, K-quant/IQ2 weights Q8_K activations, float weights f32). */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

static void dot_f32_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_f32(w, x[i], n);
}
static void dot_f16_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_f16(w, x[i], n);
}
static void dot_bf16_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    for (int i = 0; i < nx; i++) out[i] = quant_dot_bf16(w, x[i], n);
}
static void dot_q8_0_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    quant_dot_q8_0_x(w, (const dsv4_q8_0_act *const *)x, nx, n, out);
}
static void dot_q2_k_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    quant_dot_q2_k_x(w, (const dsv4_q8_k *const *)x, nx, n, out);
}
static void dot_q4_k_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    quant_dot_q4_k_x(w, (const dsv4_q8_k *const *)x, nx, n, out);
}
static void dot_iq2_w(const void *w, const void *const *x, int nx, int64_t n, float *out) {
    quant_dot_iq2_xxs_x(w, (const dsv4_q8_k *const *)x, nx, n, out);
}

bool cpu_kernel_for(uint32_t type, cpu_act_kind *kind, cpu_dot_fn *dot, uint32_t *block) {
    uint32_t b;
    switch (type) {
    case DSV4_TYPE_F32: *kind = CPU_ACT_F32, *dot = dot_f32_w, b = 1; break;
    case DSV4_TYPE_F16: *kind = CPU_ACT_F32, *dot = dot_f16_w, b = 1; break;
    case DSV4_TYPE_BF16: *kind = CPU_ACT_F32, *dot = dot_bf16_w, b = 1; break;
    case DSV4_TYPE_Q8_0: *kind = CPU_ACT_Q8_0, *dot = dot_q8_0_w, b = DSV4_QK8_0; break;
    case DSV4_TYPE_Q2_K: *kind = CPU_ACT_Q8_K, *dot = dot_q2_k_w, b = DSV4_QK_K; break;
    case DSV4_TYPE_Q4_K: *kind = CPU_ACT_Q8_K, *dot = dot_q4_k_w, b = DSV4_QK_K; break;
    case DSV4_TYPE_IQ2_XXS: *kind = CPU_ACT_Q8_K, *dot = dot_iq2_w, b = DSV4_QK_K; break;
    default: return false;
    }
    if (block) *block = b;
    return true;
}

size_t cpu_act_bytes(cpu_act_kind kind, uint64_t n) {
    switch (kind) {
    case CPU_ACT_Q8_0: return (size_t)(n / DSV4_QK8_0) * sizeof(dsv4_q8_0_act);
    case CPU_ACT_Q8_K: return (size_t)(n / DSV4_QK_K) * sizeof(dsv4_q8_k);
    default: return (size_t)n * sizeof(float);
    }
}

void cpu_act_quant_row(cpu_act_kind kind, const float *x, void *dst, uint64_t n) {
    switch (kind) {
    case CPU_ACT_Q8_0: quant_act_q8_0(x, dst, (int64_t)n); break;
    case CPU_ACT_Q8_K: quant_act_q8_k(x, dst, (int64_t)n); break;
    default: memcpy(dst, x, n * sizeof(float)); break;
    }
}
