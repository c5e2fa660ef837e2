/* Helpers shared by the attention-side kernels (cuda_attn_*.cu).
 *
 * Bitwise parity with the CPU reference (gcc, -std=c11, so no FMA contraction): every float
 * product and sum the CPU evaluates separately is written with __fmul_rn / __fadd_rn so that nvcc
 * cannot fuse it. expf/cosf/sinf are evaluated in double and rounded to float: that is the
 * correctly rounded value, which glibc's float functions return in all but rare cases (then
 * they differ by 1 ulp). log2f only feeds ceilf for the FP8/FP4 block scales; its double
 * version gives the same ceilf for every positive float (checked exhaustively against glibc). */
#ifndef DSV4_CUDA_ATTN_COMMON_CUH
#define DSV4_CUDA_ATTN_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_attn.h"

#define DSV4_ATTN_NEG_INF (-1e30f) /* CPU_NEG_INF: the empty-frontier score */

static __device__ __forceinline__ float attn_expf(float x) { return (float)exp((double)x); }
static __device__ __forceinline__ float attn_cosf(float x) { return (float)cos((double)x); }
static __device__ __forceinline__ float attn_sinf(float x) { return (float)sin((double)x); }
/* ceilf(log2f(y)) of the CPU for y > 0 */
static __device__ __forceinline__ int attn_ceil_log2(float y) { return (int)ceilf((float)log2((double)y)); }

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- KV rows (backend.h: F32, F16 and DSV4_KV_FP4 rows); every read is exact ---- */

/* Bytes of one KV row of `width` elements of `type`. */
static __host__ __device__ __forceinline__ uint64_t kv_row_bytes(uint32_t type, uint32_t width) {
    return type == DSV4_KV_FP4 ? (uint64_t)width / 32 * DSV4_KV_FP4_BLOCK_BYTES
                               : (uint64_t)width * (type == DSV4_TYPE_F16 ? 2u : 4u);
}

static __device__ __forceinline__ float kv_fp4_magnitude(uint32_t idx) {
    return idx < 4 ? 0.5f * (float)idx : idx == 4 ? 2.0f : idx == 5 ? 3.0f : idx == 6 ? 4.0f : 6.0f;
}

/* Element d of a packed FP4 row: f16_round(±m * 2^e). */
static __device__ __forceinline__ float kv_fp4_load(const unsigned char *row, uint32_t d) {
    const unsigned char *blk = row + (uint64_t)(d / 32) * DSV4_KV_FP4_BLOCK_BYTES;
    const int e = (int)(signed char)blk[0];
    const uint32_t b = blk[1 + (d % 32) / 2], code = d % 2 ? b >> 4 : b & 15u;
    const float m = ldexpf(kv_fp4_magnitude(code & 7u), e);
    return __half2float(__float2half_rn(code & 8u ? -m : m));
}

/* Element d of row r of a KV row array of `type` (F32, F16 or FP4). */
static __device__ __forceinline__ float kv_load(const void *rows, uint32_t type, uint32_t width, uint64_t r,
                                                uint32_t d) {
    if (type == DSV4_TYPE_F16) return __half2float(((const __half *)rows)[r * width + d]);
    if (type == DSV4_KV_FP4)
        return kv_fp4_load((const unsigned char *)rows + r * kv_row_bytes(type, width), d);
    return ((const float *)rows)[r * width + d];
}

/* The launcher's result: the launch error, if any, as the header's int. */
static inline int attn_launch_status(void) { return (int)cudaGetLastError(); }

#endif
