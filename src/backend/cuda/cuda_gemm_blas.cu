/* Prefill products on cuBLAS (cuda_gemm_blas.h): the operand conversions (f16 weights, f16
 * activations with per-row power-of-two scales) and the GEMM calls. Units: cuda_gemm_blas.cuh. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_blas.h"
#include "backend/cuda/cuda_gemm_blas.cuh"
#include "backend/cuda/cuda_gemm_blas.h"

extern "C" {
#include "quant/quant.h" /* DSV4_TYPE_* */
}

/* f16 weights of one conversion at most (a Q8_0 tensor larger than this goes in row slices) */
#define XB_W16_CAP ((uint64_t)128 << 20)

/* Two values as f16: hi = f16(a) into *hi and, when lo is not NULL, lo = f16((a - hi) * 2^11) into *lo
 * (the two-term operands of cuda_gemm_blas.cuh, weights and activations alike). */
__device__ __forceinline__ void xb_terms2(__half2 *hi, __half2 *lo, float a0, float a1) {
    const __half2 h = __floats2half2_rn(a0, a1);
    *hi = h;
    if (lo) {
        const float2 f = __half22float2(h);
        *lo = __floats2half2_rn(xb_lo_operand(a0, f.x), xb_lo_operand(a1, f.y));
    }
}

/* Q8_0 rows -> f16 terms of v * 2^Sw (sw = 2^Sw): hi into w16 and, when lo is not NULL, lo there.
 * CTA (row, 1024-element segment), 4 elements per thread. */
__device__ __forceinline__ void xb_wstore(__half2 *hi, __half2 *lo, float sw, float v0, float v1) {
    xb_terms2(hi, lo, __fmul_rn(v0, sw), __fmul_rn(v1, sw));
}
__global__ void xb_wcvt_kernel(const uint8_t *w, uint64_t row_bytes, uint32_t in, __half *w16, __half *w16lo,
                               float sw) {
    const uint32_t k = (blockIdx.y * 256u + threadIdx.x) * 4u;
    if (k >= in) return;
    const uint8_t *blk = w + (uint64_t)blockIdx.x * row_bytes + (uint64_t)(k >> 5) * 34;
    const float d = __half2float(__ushort_as_half(*(const uint16_t *)blk));
    const uint16_t lo = *(const uint16_t *)(blk + 2 + (k & 31)), hi = *(const uint16_t *)(blk + 4 + (k & 31));
    const float v0 = (float)(int8_t)(lo & 0xff) * d, v1 = (float)(int8_t)(lo >> 8) * d;
    const float v2 = (float)(int8_t)(hi & 0xff) * d, v3 = (float)(int8_t)(hi >> 8) * d;
    const uint64_t at = (uint64_t)blockIdx.x * in + k;
    __half2 *o = (__half2 *)(w16 + at), *ol = w16lo ? (__half2 *)(w16lo + at) : NULL;
    xb_wstore(o, ol, sw, v0, v1);
    xb_wstore(o + 1, ol ? ol + 1 : NULL, sw, v2, v3);
}

__device__ __forceinline__ float4 xb_load4(const float *p, bool vec) {
    if (vec) return *(const float4 *)p;
    return make_float4(p[0], p[1], p[2], p[3]);
}

/* A float4 group's f16 operands before rounding: its Q8_0 values (q8; the block's 8 groups sit in 8
 * consecutive lanes, every lane calling) or the values, times the row scale s. */
__device__ __forceinline__ float4 xb_group(float4 v, float s, int q8) {
    if (!q8) return make_float4(xb_mul(v.x, s), xb_mul(v.y, s), xb_mul(v.z, s), xb_mul(v.w, s));
    float bm = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 1; o < 8; o <<= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
    const float d = act_q8_0_d(bm), id = act_q8_0_id(d);
    return make_float4(xb_act_q8_0(v.x, d, id, s), xb_act_q8_0(v.y, d, id, s), xb_act_q8_0(v.z, d, id, s),
                       xb_act_q8_0(v.w, d, id, s));
}

/* An operand as two f16 terms (xlo not NULL): hi = f16(r) and lo = f16((r - hi) * 2^11), whose sum
 * hi + lo * 2^-11 is r to ~2^-22 relative (r - hi is exact in f32), so the products give the CPU's
 * product to about f32 rounding instead of f16 rounding (cuda_gemm_blas.cuh; session 18: with hi
 * alone the DS4 oracle fixture tiny_f16_A failed on CUDA, median max|d| 0.143 against a bound of
 * 0.0133; session 19: tiny_q2_A, top-1 0.778 against 0.783). */
__device__ __forceinline__ void xb_store2(__half2 *out, __half2 *lo, uint32_t g, float4 r) {
    xb_terms2(out + 2 * g, lo ? lo + 2 * g : NULL, r.x, r.y);
    xb_terms2(out + 2 * g + 1, lo ? lo + 2 * g + 1 : NULL, r.z, r.w);
}

/* One token row of L floats -> f16 (Q8_0 values when q8), scaled by 2^-e; e_tok[t] = e.
 * CTA of 256 per row: the row's max |x| first, then the blocks (8 lanes per block of 32). */
__global__ void xb_xcvt_kernel(const float *x, uint64_t x_stride, uint32_t L, int q8, __half *x16,
                               int32_t *e_tok, __half *xlo) {
    __shared__ float red[8];
    const float *xr = x + (uint64_t)blockIdx.x * x_stride;
    const bool vec = ((uintptr_t)xr & 15) == 0;
    const uint32_t G = L / 4;
    float am = 0.0f;
    for (uint32_t g = threadIdx.x; g < G; g += 256) {
        const float4 v = xb_load4(xr + 4 * g, vec);
        am = fmaxf(am, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = am;
    __syncthreads();
    am = red[0];
    for (int i = 1; i < 8; i++) am = fmaxf(am, red[i]);
    const int e = xb_row_exp(am);
    const float s = xb_pow2(-e);
    if (threadIdx.x == 0) e_tok[blockIdx.x] = e;
    __half2 *out = (__half2 *)(x16 + (uint64_t)blockIdx.x * L);
    __half2 *lo = xlo ? (__half2 *)(xlo + (uint64_t)blockIdx.x * L) : NULL;
    for (uint32_t base = 0; base < G; base += 256) { /* G % 8 == 0: whole blocks per 8 lanes */
        const uint32_t g = base + threadIdx.x;
        const bool live = g < G;
        const float4 v = live ? xb_load4(xr + 4 * g, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 r = xb_group(v, s, q8);
        if (live) xb_store2(out, lo, g, r);
    }
}

/* The same in one pass: CTA of L / (4 V) threads, each holding V float4 groups of the row in
 * registers (g = k * blockDim.x + tid, so a block's 8 groups are 8 consecutive lanes). */
template <int V>
__global__ void __launch_bounds__(1024)
    xb_xcvt1_kernel(const float *x, uint64_t x_stride, int q8, __half *x16, int32_t *e_tok, __half *xlo) {
    __shared__ float red[32];
    const uint32_t T = blockDim.x, L = 4 * V * T;
    const float *xr = x + (uint64_t)blockIdx.x * x_stride;
    const bool vec = ((uintptr_t)xr & 15) == 0;
    float4 v[V];
    float am = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = xb_load4(xr + 4 * (k * T + threadIdx.x), vec);
        am = fmaxf(am, fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w))));
    }
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = am;
    __syncthreads();
    am = red[0];
    for (uint32_t i = 1; i < T / 32; i++) am = fmaxf(am, red[i]);
    const int e = xb_row_exp(am);
    const float s = xb_pow2(-e);
    if (threadIdx.x == 0) e_tok[blockIdx.x] = e;
    __half2 *out = (__half2 *)(x16 + (uint64_t)blockIdx.x * L);
    __half2 *lo = xlo ? (__half2 *)(xlo + (uint64_t)blockIdx.x * L) : NULL;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const uint32_t g = k * T + threadIdx.x;
        xb_store2(out, lo, g, xb_group(v[k], s, q8));
    }
}

/* The HC mix's operand in one pass (session 14): the weightless rmsnorm of a row of L = 1024 V floats
 * (rms_kernel<true>'s arithmetic in its order: thread tid's float4 groups tid, tid + 256, ... squared and
 * summed in double, a warp xor tree, the 8 warp sums in order, 1 / sqrtf(mean + eps), y = x * s), then
 * xb_xcvt1_kernel's conversion of y (largest |y|, row exponent, f16 of each group): the bytes of x16 and
 * e_tok are those of cu_rms_rows followed by xb_convert, without the f32 rows written and read back.
 * Row t at x + t * x_stride (16-byte aligned). */
template <int V>
__global__ void __launch_bounds__(256) xb_rms_xcvt_kernel(const float *x, uint64_t x_stride, float eps,
                                                          __half *x16, int32_t *e_tok, __half *xlo) {
    constexpr uint32_t T = 256, L = 4 * V * T;
    __shared__ double part[T / 32];
    __shared__ float red[T / 32];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float4 *xr = (const float4 *)(x + (uint64_t)blockIdx.x * x_stride);
    float4 v[V];
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = xr[k * T + tid];
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].x, (double)v[k].x));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].y, (double)v[k].y));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].z, (double)v[k].z));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].w, (double)v[k].w));
    }
    for (int o = 16; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    double tot = 0.0;
    for (uint32_t i = 0; i < T / 32; i++) tot = __dadd_rn(tot, part[i]);
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)__ddiv_rn(tot, (double)L), eps)));
    float am = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = make_float4(__fmul_rn(v[k].x, s), __fmul_rn(v[k].y, s), __fmul_rn(v[k].z, s),
                           __fmul_rn(v[k].w, s));
        am = fmaxf(am, fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w))));
    }
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    if (lane == 0) red[warp] = am;
    __syncthreads();
    am = red[0];
    for (uint32_t i = 1; i < T / 32; i++) am = fmaxf(am, red[i]);
    const int e = xb_row_exp(am);
    const float s2 = xb_pow2(-e);
    if (tid == 0) e_tok[blockIdx.x] = e;
    __half2 *out = (__half2 *)(x16 + (uint64_t)blockIdx.x * L);
    __half2 *lo = xlo ? (__half2 *)(xlo + (uint64_t)blockIdx.x * L) : NULL;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const uint32_t g = k * T + tid;
        xb_store2(out, lo, g, xb_group(v[k], s2, 0));
    }
}

/* The one-pass kernel's float4 groups per thread for a row of L floats (0: the two-pass kernel):
 * the fewest giving <= 256 threads, else 8 with <= 1024; threads a multiple of 32. */
static int xb_one_pass_v(uint32_t L) {
    const uint32_t G = L / 4;
    for (int v = 1; v <= 8; v *= 2)
        if (G % v == 0 && (G / v) % 32 == 0 && G / v <= 256) return v;
    return G % 8 == 0 && (G / 8) % 32 == 0 && G / 8 <= 1024 ? 8 : 0;
}

static void xb_convert(const float *x, uint64_t x_stride, uint32_t L, int q8, uint32_t n, __half *xh,
                       int32_t *e_tok, __half *xlo, cudaStream_t stream) {
    const int v = xb_one_pass_v(L);
    const unsigned T = v ? L / (4u * (unsigned)v) : 0;
    switch (v) {
    case 1: xb_xcvt1_kernel<1><<<n, T, 0, stream>>>(x, x_stride, q8, xh, e_tok, xlo); break;
    case 2: xb_xcvt1_kernel<2><<<n, T, 0, stream>>>(x, x_stride, q8, xh, e_tok, xlo); break;
    case 4: xb_xcvt1_kernel<4><<<n, T, 0, stream>>>(x, x_stride, q8, xh, e_tok, xlo); break;
    case 8: xb_xcvt1_kernel<8><<<n, T, 0, stream>>>(x, x_stride, q8, xh, e_tok, xlo); break;
    default: xb_xcvt_kernel<<<n, 256, 0, stream>>>(x, x_stride, L, q8, xh, e_tok, xlo);
    }
}

/* y row t *= 2^e_tok[t] where e > 0 (exact) */
__global__ void xb_rescale_kernel(float *y, uint64_t y_stride, uint64_t width, const int32_t *e_tok) {
    const int e = e_tok[blockIdx.x];
    if (e == 0) return;
    const float s = xb_pow2(e);
    float *yr = y + (uint64_t)blockIdx.x * y_stride;
    for (uint64_t i = threadIdx.x; i < width; i += blockDim.x) yr[i] *= s;
}

__global__ void xb_max_d_kernel(const uint8_t *w, uint64_t blocks, uint32_t block_bytes, uint32_t *out) {
    uint32_t m = 0;
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
         b += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t v = *(const uint16_t *)(w + block_bytes * b) & 0x7fffu;
        m = v > m ? v : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t v = __shfl_xor_sync(0xffffffffu, m, o);
        m = v > m ? v : m;
    }
    if ((threadIdx.x & 31) == 0 && m) atomicMax(out, m);
}

static bool xb_w_lo(const dsv4_cuda_blas_op *op) {
    return op->type == DSV4_TYPE_Q8_0 && dsv4_cuda_q8_three_terms();
}

static uint64_t xb_slice_rows(const dsv4_cuda_blas_op *op) {
    if (op->type != DSV4_TYPE_Q8_0 || op->groups > 1) return op->rows;
    const uint64_t cap = XB_W16_CAP / (op->in * 2);
    return op->rows < cap ? op->rows : (cap > 0 ? cap : 1);
}

extern "C" bool dsv4_cuda_gemm_blas_d_safe(uint32_t max_abs_bits) { return xb_d_bits_safe(max_abs_bits); }

extern "C" int dsv4_cuda_gemm_blas_w_exp(uint32_t max_abs_bits) { return xb_w_exp(max_abs_bits); }

/* the slice's hi halves, then (three terms) its lo halves */
extern "C" size_t dsv4_cuda_gemm_blas_w16_bytes(const dsv4_cuda_blas_op *op) {
    if (op->type != DSV4_TYPE_Q8_0) return 0;
    return (size_t)(xb_slice_rows(op) * op->groups * op->in * 2) * (xb_w_lo(op) ? 2 : 1);
}

/* A default-on switch read once: off when the variable `name` equals `off`. */
static bool xb_switch_on(int *cached, const char *name, const char *off) {
    if (*cached < 0) {
        const char *e = getenv(name);
        *cached = !(e && strcmp(e, off) == 0);
    }
    return *cached == 1;
}

/* DSV4_CUDA_F16_TWO_TERM=0: an F16 weight's operand as f16(x) only (one product; before session 18) */
extern "C" bool dsv4_cuda_f16_two_term(void) {
    static int v = -1;
    return xb_switch_on(&v, "DSV4_CUDA_F16_TWO_TERM", "0");
}

/* DSV4_CUDA_Q8_TERMS=1: a Q8_0 weight's product as f16(v) x f16(r) only (one product; before
 * session 19) */
extern "C" bool dsv4_cuda_q8_three_terms(void) {
    static int v = -1;
    return xb_switch_on(&v, "DSV4_CUDA_Q8_TERMS", "1");
}

/* x16's layout: the f16 operand (n L halves), e_tok (n ints), each 256-byte aligned; with two terms
 * the lo term (n L halves) after them. */
static size_t xb_hi_bytes(const dsv4_cuda_blas_op *op) {
    return ((size_t)op->n * op->groups * op->in * 2 + 255) & ~(size_t)255;
}
static size_t xb_lo_offset(const dsv4_cuda_blas_op *op) {
    return xb_hi_bytes(op) + (((size_t)op->n * 4 + 255) & ~(size_t)255);
}
static bool xb_two_term(const dsv4_cuda_blas_op *op) {
    return op->type == DSV4_TYPE_F16 ? dsv4_cuda_f16_two_term() : xb_w_lo(op);
}

extern "C" size_t dsv4_cuda_gemm_blas_x16_bytes(const dsv4_cuda_blas_op *op) {
    return xb_two_term(op) ? xb_lo_offset(op) + (size_t)op->n * op->groups * op->in * 2
                           : xb_hi_bytes(op) + (size_t)op->n * 4;
}

extern "C" bool dsv4_cuda_gemm_blas_ok(const dsv4_cuda_blas_op *op) {
    if (op->type != DSV4_TYPE_Q8_0 && op->type != DSV4_TYPE_F16) return false;
    const uint64_t L = op->in * op->groups;
    if (op->in == 0 || op->in % 32 || op->rows == 0 || op->groups == 0 || op->n == 0) return false;
    if (L > 0x7fffffffull || op->rows * op->groups > 0x7fffffffull || op->n > 0x7fffffffu ||
        op->y_stride > 0x7fffffffull || op->in / 1024 >= 65535)
        return false;
    if (op->type == DSV4_TYPE_Q8_0 && op->row_bytes != op->in / 32 * 34) return false;
    if (op->type == DSV4_TYPE_F16 &&
        (op->row_bytes % 2 || op->row_bytes / 2 < op->in || op->row_bytes / 2 > 0x7fffffffull))
        return false;
    return true;
}

extern "C" dsv4_status dsv4_cuda_gemm_blas(void *blas, const dsv4_cuda_blas_op *op, void *w16, void *x16,
                                           bool convert, cudaStream_t stream, dsv4_error *err) {
    if (!dsv4_cuda_gemm_blas_ok(op))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "blas gemm: shape or type not taken");
    const uint32_t L = (uint32_t)(op->in * op->groups);
    __half *xh = (__half *)x16;
    int32_t *e_tok = (int32_t *)((uint8_t *)x16 + xb_hi_bytes(op));
    __half *xlo = xb_two_term(op) ? (__half *)((uint8_t *)x16 + xb_lo_offset(op)) : NULL;
    if (convert)
        xb_convert(op->x, op->x_stride, L, op->type == DSV4_TYPE_Q8_0, op->n, xh, e_tok, xlo, stream);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "blas gemm: activation conversion: %s",
                         cudaGetErrorString(e));
    dsv4_status st = DSV4_OK;
    const float lo_alpha = xb_pow2(-XB_LO_SHIFT);
    if (op->type == DSV4_TYPE_F16) {
        const long long lda = (long long)(op->row_bytes / 2);
        st = dsv4_cuda_blas_gemm_f16(blas, stream, (int)op->rows, (int)op->n, (int)op->in, op->w, lda,
                                     lda * (long long)op->rows, xh, L, (long long)op->in, op->y,
                                     (long long)op->y_stride, (long long)op->rows, (int)op->groups, 1.0f, 0,
                                     err);
        if (st == DSV4_OK && xlo) /* + W lo 2^-11, into the same outputs */
            st = dsv4_cuda_blas_gemm_f16(blas, stream, (int)op->rows, (int)op->n, (int)op->in, op->w, lda,
                                         lda * (long long)op->rows, xlo, L, (long long)op->in, op->y,
                                         (long long)op->y_stride, (long long)op->rows, (int)op->groups,
                                         lo_alpha, 1, err);
    } else {
        const uint64_t S = xb_slice_rows(op);
        const bool terms3 = xb_w_lo(op); /* xlo is then set too (xb_two_term) */
        if (op->w_exp < -60 || op->w_exp > 60)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "blas gemm: weight exponent %d", (int)op->w_exp);
        const float alpha = xb_pow2(-op->w_exp), alpha_lo = xb_pow2(-op->w_exp - XB_LO_SHIFT);
        for (uint64_t r0 = 0; r0 < op->rows && st == DSV4_OK; r0 += S) {
            const uint64_t rs = op->rows - r0 < S ? op->rows - r0 : S;
            const uint64_t wrows = op->groups > 1 ? op->rows * op->groups : rs;
            const void *wh =
                op->w16_cached ? (const void *)((const __half *)op->w16_cached + r0 * op->in) : w16;
            const void *wl = NULL; /* the lo terms: cached beside the hi rows, or after them in w16 */
            if (terms3)
                wl = op->w16_cached
                         ? (op->w16_lo_cached ? (const __half *)op->w16_lo_cached + r0 * op->in : NULL)
                         : (const void *)((const __half *)w16 + wrows * op->in);
            if (terms3 && !wl)
                return dsv4_fail(err, DSV4_ERR_INVALID, "blas gemm: cached weights without their lo terms");
            if (!op->w16_cached) {
                const dim3 grid((unsigned)wrows, (unsigned)((op->in + 1023) / 1024));
                xb_wcvt_kernel<<<grid, 256, 0, stream>>>((const uint8_t *)op->w + r0 * op->row_bytes,
                                                         op->row_bytes, (uint32_t)op->in, (__half *)w16,
                                                         (__half *)wl, xb_pow2(op->w_exp));
                e = cudaGetLastError();
                if (e != cudaSuccess)
                    return dsv4_fail(err, DSV4_ERR_INVALID, "blas gemm: weight conversion: %s",
                                     cudaGetErrorString(e));
            }
            /* hi x hi, then hi x lo and lo x hi at 2^-11 (the lo x lo left out: ~2^-22) */
            const long long sa = (long long)(op->in * op->rows);
            st =
                dsv4_cuda_blas_gemm_f16(blas, stream, (int)rs, (int)op->n, (int)op->in, wh, (long long)op->in,
                                        sa, xh, L, (long long)op->in, op->y + r0, (long long)op->y_stride,
                                        (long long)op->rows, (int)op->groups, alpha, 0, err);
            if (st == DSV4_OK && terms3)
                st = dsv4_cuda_blas_gemm_f16(blas, stream, (int)rs, (int)op->n, (int)op->in, wh,
                                             (long long)op->in, sa, xlo, L, (long long)op->in, op->y + r0,
                                             (long long)op->y_stride, (long long)op->rows, (int)op->groups,
                                             alpha_lo, 1, err);
            if (st == DSV4_OK && terms3)
                st = dsv4_cuda_blas_gemm_f16(blas, stream, (int)rs, (int)op->n, (int)op->in, wl,
                                             (long long)op->in, sa, xh, L, (long long)op->in, op->y + r0,
                                             (long long)op->y_stride, (long long)op->rows, (int)op->groups,
                                             alpha_lo, 1, err);
        }
    }
    if (st != DSV4_OK) return st;
    xb_rescale_kernel<<<op->n, 256, 0, stream>>>(op->y, op->y_stride, op->rows * op->groups, e_tok);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "blas gemm: rescale: %s", cudaGetErrorString(e));
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_gemm_blas_w16_convert(const void *w, uint64_t row_bytes, uint64_t in,
                                                       uint64_t rows, int w_exp, void *w16, void *w16_lo,
                                                       cudaStream_t stream, dsv4_error *err) {
    if (in == 0 || in % 32 || in / 1024 >= 65535 || row_bytes != in / 32 * 34 || w_exp < -60 || w_exp > 60)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "blas f16 weights: in = %llu, Sw = %d",
                         (unsigned long long)in, w_exp);
    for (uint64_t r0 = 0; r0 < rows; r0 += 0x7fffffffull) { /* the grid's x limit */
        const uint64_t rs = rows - r0 < 0x7fffffffull ? rows - r0 : 0x7fffffffull;
        const dim3 grid((unsigned)rs, (unsigned)((in + 1023) / 1024));
        xb_wcvt_kernel<<<grid, 256, 0, stream>>>((const uint8_t *)w + r0 * row_bytes, row_bytes, (uint32_t)in,
                                                 (__half *)w16 + r0 * in,
                                                 w16_lo ? (__half *)w16_lo + r0 * in : NULL, xb_pow2(w_exp));
    }
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? DSV4_OK
               : dsv4_fail(err, DSV4_ERR_IO, "blas f16 weights: conversion: %s", cudaGetErrorString(e));
}

extern "C" bool dsv4_cuda_gemm_blas_rms_ok(const dsv4_cuda_blas_op *op) {
    return dsv4_cuda_gemm_blas_ok(op) && op->type == DSV4_TYPE_F16 && op->groups == 1 &&
           (op->in == 4096 || op->in == 8192 || op->in == 16384) && ((uintptr_t)op->x & 15) == 0 &&
           op->x_stride % 4 == 0;
}

extern "C" dsv4_status dsv4_cuda_gemm_blas_rms(void *blas, const dsv4_cuda_blas_op *op, float eps, void *x16,
                                               cudaStream_t stream, dsv4_error *err) {
    if (!dsv4_cuda_gemm_blas_rms_ok(op))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "blas gemm (rmsnorm operand): shape or type not taken");
    __half *xh = (__half *)x16;
    int32_t *e_tok = (int32_t *)((uint8_t *)x16 + xb_hi_bytes(op));
    __half *xlo = xb_two_term(op) ? (__half *)((uint8_t *)x16 + xb_lo_offset(op)) : NULL;
    if (op->in == 4096)
        xb_rms_xcvt_kernel<4><<<op->n, 256, 0, stream>>>(op->x, op->x_stride, eps, xh, e_tok, xlo);
    else if (op->in == 8192)
        xb_rms_xcvt_kernel<8><<<op->n, 256, 0, stream>>>(op->x, op->x_stride, eps, xh, e_tok, xlo);
    else
        xb_rms_xcvt_kernel<16><<<op->n, 256, 0, stream>>>(op->x, op->x_stride, eps, xh, e_tok, xlo);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "blas gemm: rmsnorm operand: %s", cudaGetErrorString(e));
    return dsv4_cuda_gemm_blas(blas, op, NULL, x16, false, stream, err);
}

extern "C" dsv4_status dsv4_cuda_block_max_d(const void *w, uint64_t blocks, uint32_t block_bytes,
                                             uint32_t d_offset, uint32_t *out_bits, cudaStream_t stream,
                                             dsv4_error *err) {
    const uint64_t want = (blocks + 255) / 256;
    if (block_bytes % 2 || d_offset % 2)
        return dsv4_fail(err, DSV4_ERR_INVALID, "block max d: %u-byte blocks, scale at %u", block_bytes,
                         d_offset);
    xb_max_d_kernel<<<(unsigned)(want < 4096 ? (want ? want : 1) : 4096), 256, 0, stream>>>(
        (const uint8_t *)w + d_offset, blocks, block_bytes, out_bits);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSV4_OK
                            : dsv4_fail(err, DSV4_ERR_INVALID, "block max d: %s", cudaGetErrorString(e));
}

extern "C" dsv4_status dsv4_cuda_q8_0_max_d(const void *w, uint64_t blocks, uint32_t *out_bits,
                                            cudaStream_t stream, dsv4_error *err) {
    return dsv4_cuda_block_max_d(w, blocks, 34, 0, out_bits, stream, err);
}
