/* The prefill HC mix on TF32 tensor cores: design, numerics and layout in cuda_hc_mix_tc.cuh. */
#include <cuda_fp16.h>

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hc_mix_tc.cuh"
#include "backend/cuda/cuda_hc_mix_tc.h"

namespace {

/* d += a b, m16n8k8 tf32 x tf32 -> f32 */
__device__ __forceinline__ void hmt_mma(float d[4], const float a[4], const float b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
          "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

__device__ __forceinline__ float hmt_el(const float4 &v, uint32_t i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* One step: the A terms of tokens g (xa) and g + 8 (xb), the B values of the n8 tiles (w[nt]: 4
 * halves), sums of squares. */
template <int NT>
__device__ __forceinline__ void hmt_step(const float4 &xa, const float4 &xb, const uint2 *w,
                                         float (&acc)[NT][4], double &ssa, double &ssb) {
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        const float va = hmt_el(xa, i), vb = hmt_el(xb, i);
        ssa = fma((double)va, (double)va, ssa);
        ssb = fma((double)vb, (double)vb, ssb);
    }
    float gh[4], gl[4], g8h[4], g8l[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        hmt_split(hmt_el(xa, i), &gh[i], &gl[i]);
        hmt_split(hmt_el(xb, i), &g8h[i], &g8l[i]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float2 w01 = __half22float2(*(const __half2 *)&w[nt].x),
                     w23 = __half22float2(*(const __half2 *)&w[nt].y);
        const float wv[4] = {w01.x, w01.y, w23.x, w23.y};
#pragma unroll
        for (uint32_t s = 0; s < 2; s++) {
            float ah[4], al[4], b[2];
            hmt_frag_a(gh, g8h, s, ah);
            hmt_frag_a(gl, g8l, s, al);
            hmt_frag_b(wv, s, b);
            hmt_mma(acc[nt], ah, b);
            hmt_mma(acc[nt], al, b);
        }
    }
}

template <int NT, int U>
__global__ void __launch_bounds__(HMT_WARPS * 32)
    hmt_kernel(const float *x, uint64_t hd, uint32_t n, const uint8_t *w, uint64_t w_row_bytes,
               uint32_t n_mix, float eps, float *mix) {
    __shared__ float part[HMT_WARPS][HMT_TOK][HMT_MIX_MAX];
    __shared__ double ssw[HMT_WARPS][HMT_TOK];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint64_t tok0 = (uint64_t)blockIdx.x * HMT_TOK, kper = hd / HMT_WARPS, k0 = warp * kper + 4 * t;
    const bool va = tok0 + g < n, vb = tok0 + g + 8 < n;
    const float *xa = x + (tok0 + g) * hd + k0, *xb = x + (tok0 + g + 8) * hd + k0;
    const uint16_t *wr[NT];
    bool vw[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        vw[nt] = 8 * nt + g < n_mix;
        wr[nt] = (const uint16_t *)(w + (uint64_t)(vw[nt] ? 8 * nt + g : 0) * w_row_bytes) + k0;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    double ssa = 0.0, ssb = 0.0;
    const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (uint64_t k = 0; k < kper; k += HMT_STEP * U) {
        float4 ra[U], rb[U];
        uint2 rw[U][NT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint64_t o = k + (uint64_t)u * HMT_STEP;
            ra[u] = va ? __ldg((const float4 *)(xa + o)) : z4;
            rb[u] = vb ? __ldg((const float4 *)(xb + o)) : z4;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                rw[u][nt] = vw[nt] ? __ldg((const uint2 *)(wr[nt] + o)) : make_uint2(0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) hmt_step<NT>(ra[u], rb[u], rw[u], acc, ssa, ssb);
    }
    /* the token's sum of squares over its 4 lanes (xor 1, then 2), then per warp in shared memory */
    ssa += __shfl_xor_sync(0xffffffffu, ssa, 1);
    ssb += __shfl_xor_sync(0xffffffffu, ssb, 1);
    ssa += __shfl_xor_sync(0xffffffffu, ssa, 2);
    ssb += __shfl_xor_sync(0xffffffffu, ssb, 2);
    if (t == 0) ssw[warp][g] = ssa, ssw[warp][g + 8] = ssb;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            part[warp][hmt_acc_tok(lane, i)][hmt_acc_mix(lane, nt, i)] = acc[nt][i];
    __syncthreads();
    for (uint32_t i = tid; i < HMT_TOK * n_mix; i += HMT_WARPS * 32) {
        const uint32_t tk = i / n_mix, j = i % n_mix;
        if (tok0 + tk >= n) continue;
        float s = 0.0f;
        double ss = 0.0;
        for (uint32_t v = 0; v < HMT_WARPS; v++) s += part[v][tk][j], ss += ssw[v][tk];
        mix[(tok0 + tk) * n_mix + j] = s * hmt_factor(ss, hd, eps);
    }
}

} // namespace

extern "C" bool dsv4_cuda_hc_mix_tc_ok(const void *x, uint64_t hd, uint32_t n, const void *w,
                                       uint64_t w_row_bytes, uint32_t n_mix) {
    return n > 0 && hmt_shape_ok(hd, n_mix) && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 7) == 0 &&
           w_row_bytes % 8 == 0 && w_row_bytes >= 2 * hd && (uint64_t)n * hd <= (1ull << 40);
}

extern "C" int dsv4_cuda_hc_mix_tc(dsv4_cuda_stream s, const float *x, uint64_t hd, uint32_t n, const void *w,
                                   uint64_t w_row_bytes, uint32_t n_mix, float eps, float *mix) {
    if (!dsv4_cuda_hc_mix_tc_ok(x, hd, n, w, w_row_bytes, n_mix)) return (int)cudaErrorInvalidValue;
    const uint32_t blocks = (n + HMT_TOK - 1) / HMT_TOK, nt = (n_mix + 7) / 8;
    const uint8_t *wb = (const uint8_t *)w;
    cudaStream_t st = (cudaStream_t)s;
    const char *ue = getenv("DSV4_CUDA_HC_MIX_UNROLL"); /* =4: the short form where 8 would do (A/B) */
    const bool u8 = hmt_unroll(hd) == 8 && !(ue && !strcmp(ue, "4"));
    void (*k)(const float *, uint64_t, uint32_t, const uint8_t *, uint64_t, uint32_t, float, float *) =
        nt == 1   ? (u8 ? hmt_kernel<1, 8> : hmt_kernel<1, 4>)
        : nt == 2 ? (u8 ? hmt_kernel<2, 8> : hmt_kernel<2, 4>)
                  : (u8 ? hmt_kernel<3, 8> : hmt_kernel<3, 4>);
    k<<<blocks, HMT_WARPS * 32, 0, st>>>(x, hd, n, wb, w_row_bytes, n_mix, eps, mix);
    return (int)cudaGetLastError();
}
