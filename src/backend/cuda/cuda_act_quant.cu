/* Device activation quantizers, bit-exact with quant_act_q8_0 / quant_act_q8_k (src/quant/act.c):
 * IEEE division and rounding-to-nearest-even conversions are spelled out (__fdiv_rn,
 * __fmul_rn, __float2int_rn) so no compiler flag can turn them into approximations or FMAs. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_matvec.h"
#include "backend/cuda/cuda_mv_common.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

#define ACT_WARPS 8

/* One warp per block of 32: lane = element. Output: f32 d, then 32 int8 (36 B, dsv4_q8_0_act). */
__global__ void __launch_bounds__(ACT_WARPS * 32) act_q8_0_kernel(const float *x, uint8_t *out, int64_t nb) {
    cu_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t b = (int64_t)blockIdx.x * ACT_WARPS + (threadIdx.x >> 5);
    if (b >= nb) return;
    const float v = x[b * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = act_q8_0_d(amax);
    const int q = act_q8_0_q(v, act_q8_0_id(d));
    uint8_t *o = out + b * 36;
    if (lane == 0) *(float *)o = d;
    o[4 + lane] = (uint8_t)(int8_t)q;
}

/* One warp per block of 256 (cuda_act_quant.cuh). */
__global__ void __launch_bounds__(ACT_WARPS * 32) act_q8_k_kernel(const float *x, uint8_t *out, int64_t nb) {
    cu_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t b = (int64_t)blockIdx.x * ACT_WARPS + (threadIdx.x >> 5);
    if (b >= nb) return;
    const float4 *xp = (const float4 *)(x + b * 256 + lane * 8);
    const float4 v0 = xp[0], v1 = xp[1];
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    act_q8_k_block(v, lane, out + b * 292);
}

static dsv4_status launch_check(const char *what, dsv4_error *err) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "%s: launch failed: %s", what, cudaGetErrorString(e));
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_quant_act_q8_0(const float *x, void *out, int64_t n,
                                                struct CUstream_st *stream, dsv4_error *err) {
    if (!x || !out || n <= 0 || n % 32 != 0)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "dsv4_cuda_quant_act_q8_0: n=%lld must be a positive multiple of 32", (long long)n);
    const int64_t nb = n / 32;
    act_q8_0_kernel<<<(unsigned)((nb + ACT_WARPS - 1) / ACT_WARPS), ACT_WARPS * 32, 0, stream>>>(
        x, (uint8_t *)out, nb);
    return launch_check("dsv4_cuda_quant_act_q8_0", err);
}

extern "C" dsv4_status dsv4_cuda_quant_act_q8_k(const float *x, void *out, int64_t n,
                                                struct CUstream_st *stream, dsv4_error *err) {
    if (!x || !out || n <= 0 || n % 256 != 0 || ((uintptr_t)x & 15) != 0)
        return dsv4_fail(
            err, DSV4_ERR_INVALID,
            "dsv4_cuda_quant_act_q8_k: n=%lld must be a positive multiple of 256, x 16-byte aligned",
            (long long)n);
    const int64_t nb = n / 256;
    act_q8_k_kernel<<<(unsigned)((nb + ACT_WARPS - 1) / ACT_WARPS), ACT_WARPS * 32, 0, stream>>>(
        x, (uint8_t *)out, nb);
    return launch_check("dsv4_cuda_quant_act_q8_k", err);
}

extern "C" dsv4_status dsv4_cuda_quant_act_rows(uint32_t weight_type, const float *x, void *out, int64_t n,
                                                int rows, struct CUstream_st *stream, dsv4_error *err) {
    if (rows <= 0) return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_quant_act_rows: rows=%d", rows);
    switch (mv_format_of(weight_type)) {
    case MV_Q8_0: return dsv4_cuda_quant_act_q8_0(x, out, n * rows, stream, err);
    case MV_IQ2_XXS:
    case MV_Q2_K:
    case MV_Q4_K:
        if (n % 256 != 0)
            return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_quant_act_rows: n=%lld not a multiple of 256",
                             (long long)n);
        return dsv4_cuda_quant_act_q8_k(x, out, n * rows, stream, err);
    case MV_F16: {
        const cudaError_t e =
            cudaMemcpyAsync(out, x, (size_t)n * rows * sizeof(float), cudaMemcpyDeviceToDevice, stream);
        if (e != cudaSuccess)
            return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_quant_act_rows: copy: %s", cudaGetErrorString(e));
        return DSV4_OK;
    }
    default: break;
    }
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "dsv4_cuda_quant_act_rows: weight type %u", weight_type);
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_act(const void **out) {
    out[0] = (const void *)act_q8_0_kernel;
    out[1] = (const void *)act_q8_k_kernel;
    return 2;
}
