/* EXACT numerics products (validation only, see backend.h): every weight row dequantized as
 * quant_dequant_row does it and dotted with the f32 activation row in double, in the CPU
 * EXACT lane order (cuda_exact_units.cuh), so each value equals the CPU backend's EXACT value
 * bit for bit. One thread per (output row, slot), slots fastest so the threads of a warp share a
 * weight row when n > 1; a row's value never depends on n. Slow by design. */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_exact_units.cuh"

#define EX_THREADS 128

struct ex_params {
    const uint8_t *w;      /* row 0 of expert 0 */
    uint64_t row_bytes;    /* bytes of one row */
    uint64_t expert_bytes; /* bytes of one expert */
    const int32_t *ids;    /* per slot expert, or NULL */
    long long n_expert;
    uint64_t row0;
    long long n_slots;
    long long in;
    const float *x;    /* activation rows */
    uint64_t x_stride; /* floats */
    unsigned x_div;
    long long n_items; /* n_out * n_slots */
    float *y;
    uint64_t y_stride; /* floats between slots */
    const uint64_t *grid;
    const uint8_t *signs;
};

template <int K> __global__ void __launch_bounds__(EX_THREADS) ex_kernel(const ex_params p) {
    const long long item = (long long)blockIdx.x * EX_THREADS + threadIdx.x;
    if (item >= p.n_items) return;
    const long long slot = item % p.n_slots, o = item / p.n_slots;
    long long e = 0;
    if (p.ids) {
        e = p.ids[slot];
        if (e < 0 || e >= p.n_expert) { /* not an expert (corrupt selection): make it visible */
            p.y[(uint64_t)slot * p.y_stride + (uint64_t)o] = __int_as_float(0x7fc00000);
            return;
        }
    }
    const uint8_t *wr = p.w + (uint64_t)e * p.expert_bytes + (p.row0 + (uint64_t)o) * p.row_bytes;
    const float *xr = p.x + (uint64_t)(slot / p.x_div) * p.x_stride;
    p.y[(uint64_t)slot * p.y_stride + (uint64_t)o] = ex_dot<K>(wr, xr, (uint64_t)p.in, p.grid, p.signs);
}

dsv4_status cu_gemm_exact(cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in,
                          uint64_t expert_rows, int64_t n_expert, const int32_t *ids, uint64_t row0,
                          uint64_t n_out, const float *x, uint64_t x_stride, uint32_t x_div, uint32_t n_slots,
                          float *y, uint64_t y_stride, dsv4_error *err) {
    if (n_out == 0 || n_slots == 0) return DSV4_OK;
    ex_params p;
    memset(&p, 0, sizeof p);
    p.w = (const uint8_t *)w;
    p.row_bytes = row_bytes;
    p.expert_bytes = expert_rows * row_bytes;
    p.ids = ids;
    p.n_expert = n_expert;
    p.row0 = row0;
    p.n_slots = n_slots;
    p.in = (long long)in;
    p.x = x;
    p.x_stride = x_stride;
    p.x_div = x_div ? x_div : 1;
    p.n_items = (long long)n_out * n_slots;
    p.y = y;
    p.y_stride = y_stride;
    p.grid = c->d_iq2_grid;
    p.signs = c->d_iq2_signs;
    const uint64_t blocks = ((uint64_t)p.n_items + EX_THREADS - 1) / EX_THREADS;
    if (blocks > 0x7fffffffull)
        return dsv4_fail(err, DSV4_ERR_RANGE, "cuda exact matmul: %llu outputs",
                         (unsigned long long)p.n_items);
    void (*fn)(const ex_params) = NULL;
    switch (type) {
    case DSV4_TYPE_F32: fn = ex_kernel<GM_F32>; break;
    case DSV4_TYPE_F16: fn = ex_kernel<GM_F16>; break;
    case DSV4_TYPE_BF16: fn = ex_kernel<GM_BF16>; break;
    case DSV4_TYPE_Q8_0: fn = ex_kernel<GM_Q8_0>; break;
    case DSV4_TYPE_Q2_K: fn = ex_kernel<GM_Q2_K>; break;
    case DSV4_TYPE_Q4_K: fn = ex_kernel<GM_Q4_K>; break;
    case DSV4_TYPE_IQ2_XXS: fn = ex_kernel<GM_IQ2_XXS>; break;
    default:
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda exact matmul: weight type %s has no kernel",
                         dsv4_type_name(type));
    }
    fn<<<(unsigned)blocks, EX_THREADS, 0, c->stream>>>(p);
    return cu_launched(err, "exact matmul");
}
