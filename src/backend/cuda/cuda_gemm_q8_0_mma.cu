/* Q8_0 x Q8_0 prefill GEMM on the tensor cores (int8 mma.sync), bitwise equal to the CPU.
 *
 * CTA: 128 weight rows x 64 tokens, 8 warps as 4 (rows) x 2 (tokens), each warp 32 x 32 = 2 x 4
 * MMAs of m16n8k32 per Q8_0 block. The k loop walks stages of 8 blocks through a 2-deep shared-memory
 * pipeline (cp.async of the raw 34-byte weight blocks and 36-byte activation blocks; no repacking:
 * the fragment reads realign the 2 mod 4 quants with a byte permute). After each MMA the block's
 * exact integer sum goes into one f32 accumulator per (row, token) with the CPU's float operations
 * (cuda_gemm_q8_0_mma.cuh). The grid runs the token tiles of one row tile next to each other, so
 * a weight tile is read from DRAM about once and served to the other token tiles from L2.
 * Work per block is bound by the f32 updates (4 per MMA element), not by the tensor cores. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_q8_0_mma.cuh"
#include "backend/cuda/cuda_gemm_q8_0_mma.h"

__device__ __forceinline__ void qm_mma(int32_t d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"((int)QM_MAGIC_I));
}
__device__ __forceinline__ void qm_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void qm_wait_one(void) { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

template <bool ALIGNED> __global__ void __launch_bounds__(QM_THREADS, 2) qm_kernel(const qm_args p) {
    extern __shared__ __align__(16) uint8_t qm_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % QM_WARPS_M, wn = warp / QM_WARPS_M;
    const long long m0 = (long long)blockIdx.y * QM_BM, c0 = (long long)blockIdx.x * QM_BN;
    const int r_w = wm * QM_MT * 16, c_w = wn * QM_NT * 8; /* warp tile inside the CTA tile */
    /* n8 tiles wholly past the last token are skipped (small n: most of the CTA idles) */
    const long long tok_left = p.n - (c0 + c_w);
    float acc[QM_MT][QM_NT][4];
#pragma unroll
    for (int mt = 0; mt < QM_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < QM_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    const long long ns = (p.nb + QM_KB - 1) / QM_KB;
    if (ns > 0) qm_load_stage<ALIGNED>(p, m0, c0, 0, qm_smem, qm_smem + QM_WTILE, tid, QM_THREADS);
    qm_commit();
    for (long long s = 0; s < ns; s++) {
        if (s + 1 < ns) {
            uint8_t *nxt = qm_smem + ((s + 1) & 1) * QM_STAGE;
            qm_load_stage<ALIGNED>(p, m0, c0, s + 1, nxt, nxt + QM_WTILE, tid, QM_THREADS);
        }
        qm_commit();
        qm_wait_one(); /* stage s has landed (this thread's copies) */
        __syncthreads();
        const uint8_t *wt = qm_smem + (s & 1) * QM_STAGE, *xt = wt + QM_WTILE;
        const int kb = ALIGNED ? QM_KB : qm_stage_blocks(p, s);
#pragma unroll
        for (int j = 0; j < QM_KB; j++) {
            if (j >= kb) break;
            uint32_t a[QM_MT][4];
            float dw[QM_MT][2];
#pragma unroll
            for (int mt = 0; mt < QM_MT; mt++) {
                qm_frag_a(wt, r_w + mt * 16, j, lane, a[mt]);
                qm_scale_w(wt, r_w + mt * 16, j, lane, dw[mt]);
            }
#pragma unroll
            for (int nt = 0; nt < QM_NT; nt++) {
                if (nt * 8 >= tok_left) break;
                uint32_t b[2];
                float dx[2];
                qm_frag_b(xt, c_w + nt * 8, j, lane, b);
                qm_scale_x(xt, c_w + nt * 8, j, lane, dx);
#pragma unroll
                for (int mt = 0; mt < QM_MT; mt++) {
                    int32_t d[4];
                    qm_mma(d, a[mt], b);
                    qm_epilogue(acc[mt][nt], d, dw[mt], dx);
                }
            }
        }
        __syncthreads(); /* the buffer is refilled by the next iteration's loads */
    }
    qm_store(p, m0, c0, wm, wn, lane, acc);
}

extern "C" size_t dsv4_cuda_q8_0_mma_smem_bytes(void) { return QM_SMEM; }

extern "C" bool dsv4_cuda_q8_0_mma_device_ok(int cc_major, size_t smem_per_block_optin) {
    return cc_major >= 8 && smem_per_block_optin >= (size_t)QM_SMEM;
}

extern "C" bool dsv4_cuda_q8_0_mma_enabled(void) {
    const char *v = getenv("DSV4_CUDA_PREFILL_MMA");
    return !(v && strcmp(v, "0") == 0);
}

extern "C" dsv4_status dsv4_cuda_gemm_q8_0_mma(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                               const void *x, uint64_t x_stride, uint32_t n, float *y,
                                               uint64_t y_stride, cudaStream_t stream, dsv4_error *err) {
    if (in % 32 != 0 || row_bytes < in / 32 * 34 || (n > 1 && x_stride < in / 32 * 36))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma: %llu inputs, %llu-byte rows",
                         (unsigned long long)in, (unsigned long long)row_bytes);
    if (((uintptr_t)w & 1) || row_bytes % 2 || ((uintptr_t)x & 3) || x_stride % 4 || ((uintptr_t)y & 3))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma: misaligned operands");
    if (n_out == 0 || n == 0) return DSV4_OK;
    const uint64_t gy = (n_out + QM_BM - 1) / QM_BM, gx = ((uint64_t)n + QM_BN - 1) / QM_BN;
    if (gy > 65535)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma: %llu rows", (unsigned long long)n_out);
    qm_args p;
    memset(&p, 0, sizeof p);
    p.w = (const uint8_t *)w;
    p.row_bytes = row_bytes;
    p.n_out = (long long)n_out;
    p.nb = (long long)(in / 32);
    p.x = (const uint8_t *)x;
    p.x_stride = x_stride;
    p.n = n;
    p.y = y;
    p.y_stride = y_stride;
    void (*k)(const qm_args) = qm_aligned(p) ? qm_kernel<true> : qm_kernel<false>;
    /* per call, cheap, and keeps the launcher free of per-process state */
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, QM_SMEM);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma: %d bytes of shared memory: %s", (int)QM_SMEM,
                         cudaGetErrorString(e));
    }
    k<<<dim3((unsigned)gx, (unsigned)gy), QM_THREADS, QM_SMEM, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 mma: launch (%llu x %u): %s", (unsigned long long)n_out,
                         n, cudaGetErrorString(e));
    return DSV4_OK;
}
