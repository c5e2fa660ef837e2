/* Fused norm + RoPE (+ FP8) of the attention's query heads and KV rows (backend.h q_norm_rope,
 * kv_norm_rope_fp8, q_norm_rope_idx): one block per row, the unfused kernels' pieces in their order.
 *
 * Bitwise the unfused ops by construction: the sum of squares is cu_row_sumsq (the rmsnorm op's
 * tree) and the scale cu_rms_inv (cuda_smallops_units.cuh), y = x * s (* w) is the rms kernel's
 * left-to-right product; the pair angles and rotation are cuda_attn_rope.cuh's (the rope op's);
 * the FP8 blocks are cuda_attn_kvnum.cuh's fp8_block64 (the fp8_kv op's), the Hadamard and FP4 blocks
 * its hadamard_fp4_smem (the hadamard_fp4 op's). This file is built like
 * the rope and KV files (without --fmad=false): every float operation above is an explicit _rn
 * intrinsic and cos/sin/log2 are the same libdevice calls as there, so the flag changes nothing. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attn_kvnum.cuh"
#include "backend/cuda/cuda_attn_qnr.cuh"
#include "backend/cuda/cuda_attn_rope.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_smallops_units.cuh"

namespace {

/* The pair angles at position pos into cs, sn: before the programmatic wait (they depend on the
 * arguments only, so they are computed while the previous kernel still runs) unless a.early is 0. */
__device__ __forceinline__ void rope_angles(const rope_args &a, uint32_t pos, float *cs, float *sn) {
    rope_wait_if(a, 0);
    for (uint32_t k = threadIdx.x; k < a.half; k += blockDim.x) rope_pair_cs_sn(a, pos, k, &cs[k], &sn[k]);
    rope_wait_if(a, 1);
}

/* Row xr of width values: its RMSNorm (x * s, times w[i] when w is set: the rmsnorm op's products
 * left to right) and the rotation of its tail pairs, into out (which may be xr: after the sum each
 * thread reads and writes only its own pairs). The sum synchronizes the block, so cs and sn written
 * before the call are ready. */
__device__ __forceinline__ void norm_rope_row(const float *xr, const float *w, uint32_t width, float eps,
                                              bool vec, uint32_t half, const float *cs, const float *sn,
                                              double *part, float *out) {
    const double tot = cu_row_sumsq(xr, width, vec, part);
    const float s = cu_rms_inv(tot, width, eps);
    const uint32_t nope = width - 2 * half;
    for (uint32_t p = threadIdx.x; p < width / 2; p += blockDim.x) {
        const uint32_t i = 2 * p;
        float y0 = __fmul_rn(xr[i], s), y1 = __fmul_rn(xr[i + 1], s);
        if (w) y0 = __fmul_rn(y0, w[i]), y1 = __fmul_rn(y1, w[i + 1]);
        if (i >= nope) rope_rotate(&y0, &y1, cs[(i - nope) / 2], sn[(i - nope) / 2]);
        out[i] = y0;
        out[i + 1] = y1;
    }
}

/* One block per head row r (token r / n_head): norm without weight, then the rotation of its
 * tail pairs. Each thread reads and writes only its own pairs after the sum. */
/* Block b: heads [g * G, g * G + G) of token t (b = t * n_head / G + g). The token's pair angles
 * are computed once for its G heads (prefill chunks: G = 8, the angles cost more than a head's
 * norm); each head row is then normed and rotated exactly as with G = 1. */
__global__ void __launch_bounds__(RMS_THREADS)
    q_norm_rope_kernel(float *x, uint32_t head_dim, float eps, bool vec, rope_args a, uint32_t G) {
    cu_pdl_trigger();
    __shared__ double part[RMS_THREADS / 32];
    __shared__ float cs[256], sn[256];
    const uint32_t groups = a.n_head / G;
    const uint64_t t = blockIdx.x / groups, r0 = t * a.n_head + (uint64_t)(blockIdx.x % groups) * G;
    const uint32_t pos = a.pos0 + (uint32_t)t * a.pos_step;
    rope_angles(a, pos, cs, sn);
    for (uint32_t gi = 0; gi < G; gi++) {
        float *xr = x + (r0 + gi) * head_dim;
        norm_rope_row(xr, NULL, head_dim, eps, vec, a.half, cs, sn, part, xr);
        __syncthreads(); /* part is reused by the next head's sum */
    }
}

/* Prefill chunks of 512-wide heads (session 14): a warp per head, 8 heads of one token per block, no
 * block barrier after the angles; the head's norm and rotation are qnr_head512's (cuda_attn_qnr.cuh:
 * cu_row_sumsq's tree emulated, then norm_rope_row's products and rotation per element, from the
 * registers). The same bits as q_norm_rope_kernel. */
__global__ void __launch_bounds__(256) q_norm_rope_warp_kernel(float *x, float eps, rope_args a) {
    cu_pdl_trigger();
    __shared__ float cs[256], sn[256];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = blockDim.x >> 5;
    const uint32_t hb = a.n_head / per; /* blocks per token */
    const uint64_t t = blockIdx.x / hb, r = t * a.n_head + (uint64_t)(blockIdx.x % hb) * per + warp;
    rope_angles(a, a.pos0 + (uint32_t)t * a.pos_step, cs, sn);
    __syncthreads(); /* the angles */
    float4 *xr = (float4 *)(x + r * QNR_W);
    float4 v[QNR_GR];
#pragma unroll
    for (uint32_t k = 0; k < QNR_GR; k++) v[k] = xr[k * 32 + lane];
    qnr_head512(v, lane, eps, a.half, cs, sn);
#pragma unroll
    for (uint32_t k = 0; k < QNR_GR; k++) xr[k * 32 + lane] = v[k];
}

__global__ void __launch_bounds__(RMS_THREADS)
    kv_norm_rope_fp8_kernel(float *x, const float *w, uint32_t width, float eps, bool vec, uint32_t n_nope,
                            rope_args a) {
    cu_pdl_trigger();
    extern __shared__ float row[]; /* width floats */
    __shared__ double part[RMS_THREADS / 32];
    __shared__ float cs[256], sn[256];
    const uint32_t r = blockIdx.x;
    const uint32_t pos = a.pos0 + r * a.pos_step;
    rope_angles(a, pos, cs, sn);
    float *xr = x + (uint64_t)r * width;
    norm_rope_row(xr, w, width, eps, vec, a.half, cs, sn, part, row);
    __syncthreads();
    const uint32_t lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (uint32_t b = threadIdx.x / 32; b < n_nope / 64; b += warps)
        fp8_block64(row + (uint64_t)b * 64, lane);
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) xr[i] = row[i];
}

/* One token at a.pos0: blocks [0, a.n_head) are q_norm_rope_kernel's (G = 1) on the query heads;
 * blocks [a.n_head, a.n_head + idx_n_head) the indexer's query heads: the rope op's rotation of the
 * row's tail pairs (the same angles: they depend on the position and pair only), then
 * hadamard_fp4_smem, the hadamard_fp4 op's own code. One launch instead of three. */
__global__ void __launch_bounds__(RMS_THREADS)
    q_norm_rope_idx_kernel(float *q, uint32_t head_dim, float eps, bool vec, rope_args a, float *iq,
                           uint32_t idx_head_dim, float hnorm) {
    cu_pdl_trigger();
    __shared__ double part[RMS_THREADS / 32];
    __shared__ float cs[256], sn[256];
    __shared__ float row[DSV4_CUDA_Q_IDX_MAX_WIDTH];
    rope_angles(a, a.pos0, cs, sn);
    if (blockIdx.x < a.n_head) {
        float *xr = q + (uint64_t)blockIdx.x * head_dim;
        norm_rope_row(xr, NULL, head_dim, eps, vec, a.half, cs, sn, part, xr);
        return;
    }
    float *ir = iq + (uint64_t)(blockIdx.x - a.n_head) * idx_head_dim;
    for (uint32_t i = threadIdx.x; i < idx_head_dim; i += blockDim.x) row[i] = ir[i];
    __syncthreads(); /* cs, sn and the row */
    const uint32_t nope = idx_head_dim - 2 * a.half;
    for (uint32_t k = threadIdx.x; k < a.half; k += blockDim.x)
        rope_rotate(&row[nope + 2 * k], &row[nope + 2 * k + 1], cs[k], sn[k]);
    __syncthreads();
    hadamard_fp4_smem(row, ir, idx_head_dim, hnorm);
}

/* A compressor's emitted row (backend.h emit_row), one block: kv_norm_rope_fp8_kernel's norm and
 * rotation into shared memory (the rmsnorm and rope ops' expressions), then its FP8 blocks over
 * the first n_nope values (hadamard = 0) or hadamard_fp4_smem (hadamard = 1, the hadamard op's code),
 * the row to y and its cache copy to dst: F16 (__float2half_rn), F32 (f16-rounded floats) or packed
 * FP4 (fp4_pack_block32_warp: fp4_pack_block32's bytes, a warp per block), the store op's conversions. */
__global__ void __launch_bounds__(RMS_THREADS)
    emit_row_kernel(const float *x, const float *w, uint32_t width, float eps, bool vec, uint32_t n_nope,
                    uint32_t hadamard, float hnorm, rope_args a, float *y, void *dst, uint32_t dst_type) {
    cu_pdl_trigger();
    extern __shared__ float row[]; /* width floats */
    __shared__ double part[RMS_THREADS / 32];
    __shared__ float cs[256], sn[256];
    rope_angles(a, a.pos0, cs, sn);
    norm_rope_row(x, w, width, eps, vec, a.half, cs, sn, part, row);
    __syncthreads();
    const uint32_t lane = threadIdx.x % 32, warps = blockDim.x / 32;
    if (hadamard) {
        hadamard_fp4_smem(row, row, width, hnorm); /* each value read and rewritten by one thread */
    } else {
        for (uint32_t b = threadIdx.x / 32; b < n_nope / 64; b += warps)
            fp8_block64(row + (uint64_t)b * 64, lane);
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) y[i] = row[i];
    if (dst_type == DSV4_TYPE_F16) {
        for (uint32_t i = threadIdx.x; i < width; i += blockDim.x)
            ((__half *)dst)[i] = __float2half_rn(row[i]);
    } else if (dst_type == DSV4_TYPE_F32) {
        for (uint32_t i = threadIdx.x; i < width; i += blockDim.x)
            ((float *)dst)[i] = __half2float(__float2half_rn(row[i]));
    } else {
        for (uint32_t b = threadIdx.x / 32; b < width / 32; b += warps)
            fp4_pack_block32_warp(row + (uint64_t)b * 32,
                                  (unsigned char *)dst + (uint64_t)b * DSV4_KV_FP4_BLOCK_BYTES, lane);
    }
}

bool rope_fits(const dsv4_rope *rope, uint32_t head_dim) {
    return rope && rope->n_rot <= head_dim && rope->n_rot % 2 == 0 && rope->n_rot <= 512 && head_dim % 2 == 0;
}

} // namespace

extern "C" int dsv4_cuda_q_norm_rope(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t n_head,
                                     uint32_t head_dim, float eps, uint32_t pos0, uint32_t pos_step,
                                     const dsv4_rope *rope) {
    if (!rope_fits(rope, head_dim)) return (int)cudaErrorInvalidValue;
    const uint64_t blocks = (uint64_t)n_rows * n_head;
    if (blocks == 0 || head_dim == 0) return 0;
    if (blocks > 0x7fffffffu) return (int)cudaErrorInvalidValue;
    const rope_args a = rope_args_make(rope, false, n_head, head_dim, pos0, pos_step);
    const bool vec = head_dim % 4 == 0 && ((uintptr_t)x & 15) == 0;
    const uint32_t G = n_rows >= 64 && n_head % 8 == 0 ? 8 : 1; /* decode keeps a block per head */
    const char *wk = getenv("DSV4_CUDA_QNR_WARP"); /* =0: a block per head row (q_norm_rope_kernel) */
    if (G == 8 && head_dim == 512 && vec && 2 * a.half <= head_dim && !(wk && !strcmp(wk, "0")))
        q_norm_rope_warp_kernel<<<(unsigned)(blocks / 8), 256, 0, (cudaStream_t)s>>>(x, eps, a);
    else
        q_norm_rope_kernel<<<(unsigned)(blocks / G), RMS_THREADS, 0, (cudaStream_t)s>>>(x, head_dim, eps, vec,
                                                                                        a, G);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_q_norm_rope_idx(dsv4_cuda_stream s, float *q, uint32_t n_head, uint32_t head_dim,
                                         float eps, float *iq, uint32_t idx_n_head, uint32_t idx_head_dim,
                                         uint32_t pos, const dsv4_rope *rope) {
    if (!rope_fits(rope, head_dim) || !rope_fits(rope, idx_head_dim) || idx_head_dim == 0 ||
        (idx_head_dim & (idx_head_dim - 1)) || idx_head_dim % 32 ||
        idx_head_dim > DSV4_CUDA_Q_IDX_MAX_WIDTH || n_head > 0x7fffffffu - idx_n_head)
        return (int)cudaErrorInvalidValue;
    if (n_head == 0 || head_dim == 0 || idx_n_head == 0) return (int)cudaErrorInvalidValue;
    const rope_args a = rope_args_make(rope, false, n_head, head_dim, pos, 1);
    const bool vec = head_dim % 4 == 0 && ((uintptr_t)q & 15) == 0;
    const float hnorm = (float)(1.0 / sqrt((double)idx_head_dim)); /* as dsv4_cuda_hadamard_fp4 */
    q_norm_rope_idx_kernel<<<n_head + idx_n_head, RMS_THREADS, 0, (cudaStream_t)s>>>(q, head_dim, eps, vec, a,
                                                                                     iq, idx_head_dim, hnorm);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_emit_row(dsv4_cuda_stream s, const float *x, const float *w_dev, uint32_t width,
                                  float eps, uint32_t pos, const dsv4_rope *rope, bool hadamard,
                                  uint32_t n_nope, float *y, void *dst, uint32_t dst_type) {
    if (!rope_fits(rope, width) || width == 0 || width > DSV4_CUDA_KV_FUSED_MAX_WIDTH || !x || !w_dev || !y ||
        !dst)
        return (int)cudaErrorInvalidValue;
    if (hadamard ? ((width & (width - 1)) || width % 32 || width > 8192) : (n_nope % 64 || n_nope > width))
        return (int)cudaErrorInvalidValue;
    if (dst_type != DSV4_TYPE_F16 && dst_type != DSV4_TYPE_F32 &&
        !(dst_type == DSV4_KV_FP4 && width % 32 == 0))
        return (int)cudaErrorInvalidValue;
    const rope_args a = rope_args_make(rope, false, 1, width, pos, 0);
    const bool vec = width % 4 == 0 && ((uintptr_t)x & 15) == 0;
    const float hnorm = (float)(1.0 / sqrt((double)width)); /* as dsv4_cuda_hadamard_fp4 */
    emit_row_kernel<<<1, RMS_THREADS, (size_t)width * sizeof(float), (cudaStream_t)s>>>(
        x, w_dev, width, eps, vec, n_nope, hadamard ? 1u : 0u, hnorm, a, y, dst, dst_type);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_kv_norm_rope_fp8(dsv4_cuda_stream s, float *x, const float *w_dev, uint32_t n_rows,
                                          uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                          const dsv4_rope *rope, uint32_t n_nope) {
    if (!rope_fits(rope, width) || n_nope % 64 || n_nope > width || width > DSV4_CUDA_KV_FUSED_MAX_WIDTH)
        return (int)cudaErrorInvalidValue;
    if (n_rows == 0 || width == 0) return 0;
    const rope_args a = rope_args_make(rope, false, 1, width, pos0, pos_step);
    const bool vec = width % 4 == 0 && ((uintptr_t)x & 15) == 0;
    kv_norm_rope_fp8_kernel<<<n_rows, RMS_THREADS, (size_t)width * sizeof(float), (cudaStream_t)s>>>(
        x, w_dev, width, eps, vec, n_nope, a);
    return attn_launch_status();
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_fused(const void **out) {
    out[0] = (const void *)q_norm_rope_kernel;
    out[1] = (const void *)kv_norm_rope_fp8_kernel;
    out[2] = (const void *)q_norm_rope_idx_kernel;
    out[3] = (const void *)emit_row_kernel;
    return 4;
}
