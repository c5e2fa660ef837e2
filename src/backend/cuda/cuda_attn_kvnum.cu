/* KV-path roundings on the device: FP8 E4M3 blocks of 64, Hadamard + FP4 E2M1 blocks of 32,
 * f16 rounding (spec model-attention-hc.md §6.1-6.3; CPU: src/quant/kvnum.c, half.c).
 * All three are bitwise equal to the CPU: the block amax is a max (order-free), the scale
 * exponent is the CPU's ceilf(log2f(.)) (see cuda_attn_common.cuh), the grid rounding is exact
 * scaling plus rintf, the Hadamard butterflies run in the CPU's stride order 1, 2, 4, ... and
 * its 1/sqrt(n) factor is the CPU's double expression, computed on the host. */
#include <cuda_fp16.h>
#include <math.h>

#include "backend/cuda/cuda_attn_kvnum.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

namespace {

/* One warp per block of 64 values (two per lane). */
__global__ void fp8_kernel(float *x, uint64_t n_blocks, uint32_t blocks_per_row, uint32_t width) {
    cu_pdl_enter();
    const uint64_t b = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;
    const uint32_t lane = threadIdx.x % 32;
    float *p = x + (b / blocks_per_row) * width + (b % blocks_per_row) * 64;
    fp8_block64(p, lane);
}

/* One block per row: the butterflies in shared memory, then one warp per FP4 block of 32. */
__global__ void hadamard_fp4_kernel(float *x, uint32_t width, float norm) {
    cu_pdl_enter();
    extern __shared__ float sh[];
    float *row = x + (uint64_t)blockIdx.x * width;
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) sh[i] = row[i];
    __syncthreads();
    hadamard_fp4_smem(sh, row, width, norm);
}

__global__ void f16_kernel(float *dst, const float *src, uint64_t n) {
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = __half2float(__float2half_rn(src[i]));
}

__global__ void f16_store_kernel(__half *dst, const float *src, uint64_t n) {
    cu_pdl_enter();
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

/* One thread per block of 32 (backend.h DSV4_KV_FP4; CPU: dsv4_fp4_pack_row). */
__global__ void fp4_store_kernel(unsigned char *dst, const float *src, uint64_t n_blocks) {
    cu_pdl_enter();
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks;
         b += (uint64_t)gridDim.x * blockDim.x)
        fp4_pack_block32(src + b * 32, dst + b * DSV4_KV_FP4_BLOCK_BYTES);
}

} // namespace

extern "C" int dsv4_cuda_fp8_kv(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t width,
                                uint32_t n_nope) {
    if (n_nope % 64 || n_nope > width) return (int)cudaErrorInvalidValue;
    const uint32_t bpr = n_nope / 64;
    const uint64_t nb = (uint64_t)n_rows * bpr;
    if (nb == 0) return 0;
    const uint32_t warps = 8;
    const uint64_t grid = (nb + warps - 1) / warps;
    if (grid > 0x7fffffffu) return (int)cudaErrorInvalidValue;
    fp8_kernel<<<(unsigned)grid, warps * 32, 0, (cudaStream_t)s>>>(x, nb, bpr, width);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_hadamard_fp4(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t width) {
    /* 8192 floats = 32 KiB of shared memory, under the default 48 KiB limit */
    if (width == 0 || (width & (width - 1)) || width % 32 || width > 8192) return (int)cudaErrorInvalidValue;
    if (n_rows == 0) return 0;
    const float norm = (float)(1.0 / sqrt((double)width));
    const uint32_t threads = width / 2 < 32 ? 32 : width / 2 > 512 ? 512 : width / 2; /* whole warps */
    hadamard_fp4_kernel<<<n_rows, threads, width * sizeof(float), (cudaStream_t)s>>>(x, width, norm);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_store_f16(dsv4_cuda_stream s, void *dst, uint32_t dst_type, const float *src,
                                   uint32_t n_rows, uint32_t width) {
    const uint64_t n = (uint64_t)n_rows * width;
    if (dst_type == DSV4_KV_FP4 && width % 32) return (int)cudaErrorInvalidValue;
    if (dst_type != DSV4_TYPE_F32 && dst_type != DSV4_TYPE_F16 && dst_type != DSV4_KV_FP4)
        return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    const uint64_t items = dst_type == DSV4_KV_FP4 ? n / 32 : n;
    uint64_t grid = (items + 255) / 256;
    if (grid > 65536) grid = 65536;
    if (dst_type == DSV4_TYPE_F16)
        f16_store_kernel<<<(unsigned)grid, 256, 0, (cudaStream_t)s>>>((__half *)dst, src, n);
    else if (dst_type == DSV4_KV_FP4)
        fp4_store_kernel<<<(unsigned)grid, 256, 0, (cudaStream_t)s>>>((unsigned char *)dst, src, items);
    else
        f16_kernel<<<(unsigned)grid, 256, 0, (cudaStream_t)s>>>((float *)dst, src, n);
    return attn_launch_status();
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_kvnum(const void **out) {
    out[0] = (const void *)fp8_kernel;
    out[1] = (const void *)hadamard_fp4_kernel;
    out[2] = (const void *)f16_store_kernel;
    out[3] = (const void *)fp4_store_kernel;
    return 4;
}
