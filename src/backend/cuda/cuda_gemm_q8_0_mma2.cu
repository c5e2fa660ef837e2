/* v2 of the Q8_0 x Q8_0 prefill GEMM on int8 tensor cores (DSV4_CUDA_PREFILL_MMA=v2), bitwise
 * equal to v1 (cuda_gemm_q8_0_mma.cu) and to the CPU: same fragments, same biased MMA, same
 * per-block float update in block order; only the tiling and the pipeline differ
 * (cuda_gemm_q8_0_mma2.cuh).
 *
 * Issue budget, warp instructions per Q8_0 block and warp (a warp instruction covers 32 lanes; an
 * H200 SM sub-partition issues one per clock and its FP32 units take one per clock, so the kernel
 * is issue bound and every non-FP32 instruction costs an FP32 slot):
 *   FP32 per output element per block: FADD (unbias the MMA's 1.5*2^23 start), FMUL (d_w * d_x:
 *   an outer product, unique per element), FMUL (* isum), FADD (into acc) = 4, the floor while
 *   the CPU's separate roundings are kept (no FFMA, no I2F: I2F issues at 1/8 the rate).
 *                       v1 (warp 32x32: 2x4 MMAs)   v2 (warp 64x32: 4x4 MMAs)
 *   FP32 (16 per MMA)   128                         256
 *   A frags (LDS+PRMT)   16 (8 per m16, avg)         32
 *   d_w (LDS.U16+cvt)     8                          16
 *   B frags + d_x        16                          16
 *   MMA                   8                          16
 *   loader (cp.async)   ~10 (13 per thread/stage)  ~10 (13 per thread/stage)
 *   barriers / stage      2                           1
 *   total               ~186 = 5.8 per element     ~346 = 5.4 per element
 * so the FP32 share of the issue slots goes from ~69 % to ~74 % (ceiling ~474 TOPS at 100 % on an
 * H200: 132 SMs x 128 FP32/clk x 1.755 GHz / 4 ops x 64 int8 ops per element-block). v1 measures
 * ~180 TOPS, well under its ~330 TOPS issue ceiling, so most of its loss is stalls; v2 attacks
 * them with 4x the work per CTA between barriers, half the barriers, and a 16-warp CTA whose
 * loads for stage s+1 are issued before stage s is computed. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_q8_0_mma2.cuh"
#include "backend/cuda/cuda_gemm_q8_0_mma2.h"

__device__ __forceinline__ void q2_mma(int32_t d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"((int)QM_MAGIC_I));
}
__device__ __forceinline__ void q2_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* all but the newest Q2_STAGES - 2 groups of this thread have landed */
__device__ __forceinline__ void q2_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Q2_STAGES - 2) : "memory");
}

template <bool ALIGNED> __global__ void __launch_bounds__(Q2_THREADS, 1) q2_kernel(const qm_args p) {
    extern __shared__ __align__(16) uint8_t q2_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long m0 = (long long)blockIdx.y * Q2_BM, c0 = (long long)blockIdx.x * Q2_BN;
    const int r_w = q2_warp_row(warp), c_w = q2_warp_tok(warp);
    /* n8 tiles wholly past the last token are skipped */
    const long long tok_left = p.n - (c0 + c_w);
    float acc[Q2_MT][Q2_NT][4];
#pragma unroll
    for (int mt = 0; mt < Q2_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < Q2_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    const long long ns = (p.nb + QM_KB - 1) / QM_KB;
#pragma unroll
    for (int s = 0; s < Q2_STAGES - 1; s++) {
        if (s < ns) {
            uint8_t *buf = q2_smem + q2_buf(s) * Q2_STAGE;
            q2_load_stage<ALIGNED>(p, m0, c0, s, buf, buf + Q2_WTILE, tid, Q2_THREADS);
        }
        q2_commit(); /* empty groups keep the count uniform */
    }
    for (long long s = 0; s < ns; s++) {
        q2_wait();       /* this thread's copies of stage s have landed */
        __syncthreads(); /* everyone's have, and every warp is done with stage s - 1 */
        if (q2_ahead(s) < ns) {
            uint8_t *nxt = q2_smem + q2_buf(q2_ahead(s)) * Q2_STAGE;
            q2_load_stage<ALIGNED>(p, m0, c0, q2_ahead(s), nxt, nxt + Q2_WTILE, tid, Q2_THREADS);
        }
        q2_commit();
        const uint8_t *wt = q2_smem + q2_buf(s) * Q2_STAGE, *xt = wt + Q2_WTILE;
        const int kb = ALIGNED ? QM_KB : qm_stage_blocks(p, s);
#pragma unroll
        for (int j = 0; j < QM_KB; j++) {
            if (j >= kb) break;
            uint32_t a[Q2_MT][4];
            float dw[Q2_MT][2];
#pragma unroll
            for (int mt = 0; mt < Q2_MT; mt++) {
                qm_frag_a(wt, r_w + mt * 16, j, lane, a[mt]);
                qm_scale_w(wt, r_w + mt * 16, j, lane, dw[mt]);
            }
#pragma unroll
            for (int nt = 0; nt < Q2_NT; nt++) {
                if (nt * 8 >= tok_left) break;
                uint32_t b[2];
                float dx[2];
                qm_frag_b(xt, c_w + nt * 8, j, lane, b);
                qm_scale_x(xt, c_w + nt * 8, j, lane, dx);
#pragma unroll
                for (int mt = 0; mt < Q2_MT; mt++) {
                    int32_t d[4];
                    q2_mma(d, a[mt], b);
                    qm_epilogue(acc[mt][nt], d, dw[mt], dx);
                }
            }
        }
    }
    q2_store(p, m0, c0, warp, lane, acc);
}

extern "C" size_t dsv4_cuda_q8_0_mma2_smem_bytes(void) { return Q2_SMEM; }

extern "C" bool dsv4_cuda_q8_0_mma2_device_ok(int cc_major, size_t smem_per_block_optin) {
    return cc_major >= 8 && smem_per_block_optin >= (size_t)Q2_SMEM;
}

extern "C" int dsv4_cuda_q8_0_mma2_mode(void) {
    const char *v = getenv("DSV4_CUDA_PREFILL_MMA");
    if (!v) return 0;
    return strcmp(v, "v2") == 0 ? 1 : strcmp(v, "v2-all") == 0 ? 2 : 0;
}

extern "C" dsv4_status dsv4_cuda_gemm_q8_0_mma2(const void *w, uint64_t row_bytes, uint64_t in,
                                                uint64_t n_out, const void *x, uint64_t x_stride, uint32_t n,
                                                float *y, uint64_t y_stride, uint32_t min_ctas,
                                                cudaStream_t stream, dsv4_error *err) {
    if (in % 32 != 0 || row_bytes < in / 32 * 34 || (n > 1 && x_stride < in / 32 * 36))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %llu inputs, %llu-byte rows",
                         (unsigned long long)in, (unsigned long long)row_bytes);
    if (((uintptr_t)w & 1) || row_bytes % 2 || ((uintptr_t)x & 3) || x_stride % 4 || ((uintptr_t)y & 3))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: misaligned operands");
    if (n_out == 0 || n == 0) return DSV4_OK;
    const uint64_t gy = (n_out + Q2_BM - 1) / Q2_BM, gx = ((uint64_t)n + Q2_BN - 1) / Q2_BN;
    if (gy > 65535)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %llu rows", (unsigned long long)n_out);
    if (gx * gy < (uint64_t)min_ctas)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %llu CTAs fill fewer than %u SMs",
                         (unsigned long long)(gx * gy), min_ctas);
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
    void (*k)(const qm_args) = qm_aligned(p) ? q2_kernel<true> : q2_kernel<false>;
    /* per call, cheap, and keeps the launcher free of per-process state */
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Q2_SMEM);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %d bytes of shared memory: %s",
                         (int)Q2_SMEM, cudaGetErrorString(e));
    }
    k<<<dim3((unsigned)gx, (unsigned)gy), Q2_THREADS, Q2_SMEM, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 mma v2: launch (%llu x %u): %s",
                         (unsigned long long)n_out, n, cudaGetErrorString(e));
    return DSV4_OK;
}
