/* Units of the exact Q8_0 prefill GEMM on warpgroup tensor cores (cuda_gemm_q8_wg.cu; the contract
 * is cuda_gemm_q8_wg.h). Device code for sm_90a only: the wgmma bodies are empty elsewhere.
 *
 * The CTA: 128 tokens (M: two warpgroups of 64) x 128 weight rows (N), 8 warps, one CTA per SM. A
 * stage is 64 k (two Q8_0 blocks): the token tile and the weight tile as 128 rows of 128 bytes in
 * the 128-byte swizzle (chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16); 1024-byte aligned
 * tiles), then the token tile's block scales as [row][2] floats and the weight tile's as [block][row]. Per block a warpgroup runs two
 * wgmma.m64n128k16 f16 x f16 -> f32 (scale-d 0, then 1) into a block accumulator: the integer
 * isum of every (token, row), exact (each product |q_x q_w| <= 128 * 127 is an exact f32, their sum
 * stays below 2^24). Then the CPU's update acc = acc + (d_w * d_x) * isum for each of the thread's
 * 64 outputs: three FP32 operations, no contraction. The two warpgroups share the tensor cores:
 * one's products run while the other updates. */
#ifndef DSV4_CUDA_GEMM_Q8_WG_CUH
#define DSV4_CUDA_GEMM_Q8_WG_CUH

#include <stdint.h>

#include "backend/cuda/cuda_wgmma_x16.cuh" /* fence / commit / wait, the swizzled descriptor */

#define QW_WGMMA X16_WGMMA
#define QW_HD __host__ __device__ __forceinline__

enum {
    QW_BM = 128,                        /* tokens per CTA */
    QW_BN = 128,                        /* weight rows per CTA */
    QW_BK = 64,                         /* k per stage: two Q8_0 blocks */
    QW_TILE = 128 * 128,                /* one operand tile of a stage, bytes */
    QW_SCALES = 128 * 2 * 4,            /* one tile's block scales, bytes */
    QW_STAGE = 2 * QW_TILE + 2 * QW_SCALES, /* 34816 = 34 * 1024: tiles stay 1024-aligned */
    QW_STAGES = 5,
    QW_SMEM = QW_STAGES * QW_STAGE + 1024, /* + the alignment of the dynamic base */
    QW_THREADS = 256
};

/* Byte offset of 16-byte chunk ch (k 8 ch .. 8 ch + 7 of the stage) of tile row r. */
QW_HD int qw_chunk_off(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

/* The thread's accumulator element e (wgmma m64nN f32 layout) of warp w (of its warpgroup):
 * token row (of the warpgroup's 64) and weight column (of the 128). */
QW_HD int qw_acc_row(int w, int lane, int e) { return 16 * w + (lane >> 2) + 8 * ((e & 3) >> 1); }
QW_HD int qw_acc_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1); }

/* Pins block accumulators around the asynchronous products (cuda_wgmma_x16.cuh x16_fence_acc) */
__device__ __forceinline__ void qw_fence_acc64(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 floats) = A B (+ d when acc != 0): m64n128k16, A (64 x 16) and B (128 x 16) K-major in
 * shared memory through their descriptors */
__device__ __forceinline__ void qw_mma128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
#if QW_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
#else
    (void)d, (void)da, (void)db, (void)acc;
#endif
}

#endif
