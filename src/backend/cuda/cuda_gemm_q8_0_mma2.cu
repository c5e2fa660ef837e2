/* v2 of the Q8_0 x Q8_0 prefill GEMM on int8 tensor cores (DSV4_CUDA_PREFILL_MMA=v2 / v2n),
 * bitwise equal to v1 (cuda_gemm_q8_0_mma.cu) and to the CPU: same fragments, same biased MMA,
 * same per-block float update in block order; only the tiling and the pipeline differ
 * (cuda_gemm_q8_0_mma2.cuh). Two tiles, both 16-warp CTAs with one barrier per stage: "v2"
 * (q2_wide, CTA 256 x 128, warp 64 x 32) and "v2n" (q2_narrow, CTA 128 x 128, warp 32 x 32).
 *
 * Issue budget, warp instructions per Q8_0 block and warp (a warp instruction covers 32 lanes; an
 * H200 SM sub-partition issues one per clock and its FP32 units take one per clock, so the kernel
 * is issue bound and every non-FP32 instruction costs an FP32 slot):
 *   FP32 per output element per block: FADD (unbias the MMA's 1.5*2^23 start), FMUL (d_w * d_x:
 *   an outer product, unique per element), FMUL (* isum), FADD (into acc) = 4, the floor while
 *   the CPU's separate roundings are kept (no FFMA; I2F would also take an issue slot, on a slower
 *   pipe).
 *                     v1 (32x32: 2x4 MMAs)   v2 (64x32: 4x4 MMAs)   v2n (32x32: 2x4 MMAs)
 *   FP32 (16/MMA)     128                    256                    128
 *   A frags LDS+PRMT   16 (8 per m16, avg)    32                     16
 *   d_w LDS.U16+cvt     8                     16                      8
 *   B frags + d_x      16                     16                     16
 *   MMA                 8                     16                      8
 *   loader cp.async   ~10 (13/thread/stage) ~10 (13/thread/stage)   ~6.5 (8.75/thread/stage)
 *   barriers/stage      2                      1                      1
 *   total             ~186 = 5.8/element    ~346 = 5.4/element      ~183 = 5.7/element
 * so the FP32 share of the issue slots is ~69 % (v1), ~74 % (v2), ~70 % (v2n); the ceiling at
 * 100 % is ~474 TOPS on an H200 (132 SMs x 128 FP32/clk x 1.755 GHz / 4 ops x 64 int8 ops per
 * element-block). v1 measures ~180 TOPS, well under its ~330 TOPS issue ceiling, so most of its
 * loss is stalls, which both tiles attack: 2x (v2n) / 4x (v2) the work per CTA between barriers,
 * one barrier per stage instead of two, loads of stage s+1 issued before stage s is computed.
 * v2 sits at ptxas' 128-register cap of a 512-thread CTA (no spills), so it has few registers to
 * prefetch fragments with; v2n uses 80 and can. Which wins is for the H200 bench to say. */
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
/* all but the newest N groups of this thread have landed */
template <int N> __device__ __forceinline__ void q2_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <class C, bool ALIGNED> __global__ void __launch_bounds__(C::THREADS, 1) q2_kernel(const qm_args p) {
    extern __shared__ __align__(16) uint8_t q2_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long m0 = (long long)blockIdx.y * C::BM, c0 = (long long)blockIdx.x * C::BN;
    const int r_w = q2_warp_row<C>(warp), c_w = q2_warp_tok<C>(warp);
    /* n8 tiles wholly past the last token are skipped */
    const long long tok_left = p.n - (c0 + c_w);
    float acc[C::MT][C::NT][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; mt++)
#pragma unroll
        for (int nt = 0; nt < C::NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    const long long ns = (p.nb + QM_KB - 1) / QM_KB;
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
        if (s < ns) {
            uint8_t *buf = q2_smem + q2_buf<C>(s) * C::STAGE;
            q2_load_stage<C, ALIGNED>(p, m0, c0, s, buf, buf + C::WTILE, tid, C::THREADS);
        }
        q2_commit(); /* empty groups keep the count uniform */
    }
    for (long long s = 0; s < ns; s++) {
        q2_wait<C::STAGES - 2>(); /* this thread's copies of stage s have landed */
        __syncthreads();          /* everyone's have, and every warp is done with stage s - 1 */
        if (q2_ahead<C>(s) < ns) {
            uint8_t *nxt = q2_smem + q2_buf<C>(q2_ahead<C>(s)) * C::STAGE;
            q2_load_stage<C, ALIGNED>(p, m0, c0, q2_ahead<C>(s), nxt, nxt + C::WTILE, tid, C::THREADS);
        }
        q2_commit();
        const uint8_t *wt = q2_smem + q2_buf<C>(s) * C::STAGE, *xt = wt + C::WTILE;
        const int kb = ALIGNED ? QM_KB : qm_stage_blocks(p, s);
#pragma unroll
        for (int j = 0; j < QM_KB; j++) {
            if (j >= kb) break;
            uint32_t a[C::MT][4];
            float dw[C::MT][2];
#pragma unroll
            for (int mt = 0; mt < C::MT; mt++) {
                qm_frag_a(wt, r_w + mt * 16, j, lane, a[mt]);
                qm_scale_w(wt, r_w + mt * 16, j, lane, dw[mt]);
            }
#pragma unroll
            for (int nt = 0; nt < C::NT; nt++) {
                if (nt * 8 >= tok_left) break;
                uint32_t b[2];
                float dx[2];
                qm_frag_b(xt, c_w + nt * 8, j, lane, b);
                qm_scale_x(xt, c_w + nt * 8, j, lane, dx);
#pragma unroll
                for (int mt = 0; mt < C::MT; mt++) {
                    int32_t d[4];
                    q2_mma(d, a[mt], b);
                    qm_epilogue(acc[mt][nt], d, dw[mt], dx);
                }
            }
        }
    }
    q2_store<C>(p, m0, c0, warp, lane, acc);
}

extern "C" size_t dsv4_cuda_q8_0_mma2_smem_bytes(int tile) {
    return tile == DSV4_Q8_0_MMA2_NARROW ? q2_narrow::SMEM : q2_wide::SMEM;
}

extern "C" bool dsv4_cuda_q8_0_mma2_device_ok(int tile, int cc_major, size_t smem_per_block_optin) {
    return cc_major >= 8 && smem_per_block_optin >= dsv4_cuda_q8_0_mma2_smem_bytes(tile);
}

extern "C" int dsv4_cuda_q8_0_mma2_mode(int *tile) {
    const char *v = getenv("DSV4_CUDA_PREFILL_MMA");
    *tile = DSV4_Q8_0_MMA2_WIDE;
    if (!v || strncmp(v, "v2", 2) != 0) return 0;
    const char *rest = v + 2;
    if (*rest == 'n') *tile = DSV4_Q8_0_MMA2_NARROW, rest++;
    return !strcmp(rest, "") ? 1 : !strcmp(rest, "-all") ? 2 : 0;
}

template <class C>
static dsv4_status q2_launch(const qm_args &p, uint32_t min_ctas, cudaStream_t stream, dsv4_error *err) {
    const uint64_t gy = ((uint64_t)p.n_out + C::BM - 1) / C::BM, gx = ((uint64_t)p.n + C::BN - 1) / C::BN;
    if (gy > 65535) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %lld rows", p.n_out);
    if (gx * gy < (uint64_t)min_ctas)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %llu CTAs fill fewer than %u SMs",
                         (unsigned long long)(gx * gy), min_ctas);
    void (*k)(const qm_args) = qm_aligned(p) ? q2_kernel<C, true> : q2_kernel<C, false>;
    /* per call, cheap, and keeps the launcher free of per-process state */
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %d bytes of shared memory: %s", C::SMEM,
                         cudaGetErrorString(e));
    }
    k<<<dim3((unsigned)gx, (unsigned)gy), C::THREADS, C::SMEM, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 mma v2: launch (%lld x %lld): %s", p.n_out, p.n,
                         cudaGetErrorString(e));
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_gemm_q8_0_mma2(int tile, const void *w, uint64_t row_bytes, uint64_t in,
                                                uint64_t n_out, const void *x, uint64_t x_stride, uint32_t n,
                                                float *y, uint64_t y_stride, uint32_t min_ctas,
                                                cudaStream_t stream, dsv4_error *err) {
    if (in % 32 != 0 || row_bytes < in / 32 * 34 || (n > 1 && x_stride < in / 32 * 36))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: %llu inputs, %llu-byte rows",
                         (unsigned long long)in, (unsigned long long)row_bytes);
    if (((uintptr_t)w & 1) || row_bytes % 2 || ((uintptr_t)x & 3) || x_stride % 4 || ((uintptr_t)y & 3))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 mma v2: misaligned operands");
    if (n_out == 0 || n == 0) return DSV4_OK;
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
    return tile == DSV4_Q8_0_MMA2_NARROW ? q2_launch<q2_narrow>(p, min_ctas, stream, err)
                                         : q2_launch<q2_wide>(p, min_ctas, stream, err);
}
