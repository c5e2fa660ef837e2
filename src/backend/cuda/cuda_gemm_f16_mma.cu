/* F16-weight prefill GEMM on the tensor cores (mma.sync m16n8k16, f16 x f16 -> f32).
 *
 * Two or three launches: the activations rounded to f16 once (fm_cvt_kernel), the GEMM, and for
 * split-K shapes the ordered sum of the partials (fm_reduce_kernel: deterministic, no atomics).
 * CTA: 64 weight rows x 64 tokens, 4 warps as 2 x 2, each warp 32 x 32 = 2 x 4 MMAs per k16; k
 * walks 32-half stages through a 3-deep cp.async pipeline (zero-filled past the edges, so any
 * n_out, n and in % 8 == 0 work). Small outputs (the router 4096->256, the hc mix 16384->24, the
 * indexer 4096->64) have few tiles: split-K spreads the k range over up to 16 CTAs per tile.
 * Numerics: cuda_gemm_f16_mma.h. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_blas.h" /* dsv4_cuda_f16_two_term */
#include "backend/cuda/cuda_gemm_f16_mma.cuh"
#include "backend/cuda/cuda_gemm_f16_mma.h"

__device__ __forceinline__ void fm_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void fm_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void fm_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(FM_STAGES - 2) : "memory");
}

__global__ void __launch_bounds__(FM_THREADS) fm_kernel(const fm_args p) {
    __shared__ __align__(16) uint16_t sm[FM_STAGES * FM_STAGE];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % FM_WARPS_M, wn = warp / FM_WARPS_M;
    const long long m0 = (long long)blockIdx.y * FM_BM, c0 = (long long)blockIdx.x * FM_BN;
    const int z = blockIdx.z;
    const int r_w = wm * FM_MT * 16, c_w = wn * FM_NT * 8;
    const long long tok_left = p.n - (c0 + c_w); /* n8 tiles wholly past the last token are skipped */
    float acc[FM_MT][FM_NT][4];
#pragma unroll
    for (int mt = 0; mt < FM_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < FM_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    long long t0, t1;
    fm_split_range(p, z, &t0, &t1);
#pragma unroll
    for (int s = 0; s < FM_STAGES - 1; s++) {
        if (t0 + s < t1)
            fm_load_stage(p, m0, c0, t0 + s, sm + s * FM_STAGE, sm + s * FM_STAGE + FM_ATILE, tid,
                          FM_THREADS);
        fm_commit();
    }
    for (long long t = t0; t < t1; t++) {
        fm_wait();       /* stage t has landed (this thread's copies) */
        __syncthreads(); /* ... everyone's, and stage t-1's buffer is free */
        const long long tn = t + FM_STAGES - 1;
        if (tn < t1) {
            uint16_t *nb = sm + (int)((tn - t0) % FM_STAGES) * FM_STAGE;
            fm_load_stage(p, m0, c0, tn, nb, nb + FM_ATILE, tid, FM_THREADS);
        }
        fm_commit();
        const uint16_t *as = sm + (int)((t - t0) % FM_STAGES) * FM_STAGE, *bs = as + FM_ATILE;
#pragma unroll
        for (int kk = 0; kk < FM_BK; kk += 16) {
            uint32_t a[FM_MT][4];
#pragma unroll
            for (int mt = 0; mt < FM_MT; mt++) fm_frag_a(as, r_w + mt * 16, kk, lane, a[mt]);
#pragma unroll
            for (int nt = 0; nt < FM_NT; nt++) {
                if (nt * 8 >= tok_left) break;
                uint32_t b[2];
                fm_frag_b(bs, c_w + nt * 8, kk, lane, b);
#pragma unroll
                for (int mt = 0; mt < FM_MT; mt++) fm_mma(acc[mt][nt], a[mt], b);
            }
        }
    }
    fm_store(p, m0, c0, z, wm, wn, lane, acc);
}

/* x (f32, rows x_stride apart) -> x16 (dense rows of `in` halves), |x| clamped to the f16 range so
 * an outlier gives 65504, not inf (and inf * 0 = NaN in the sums); lo (two terms) the rows of
 * f16(v - hi) (v - hi is exact in f32). */
__global__ void fm_cvt_kernel(const float *x, uint64_t x_stride, uint64_t in, uint64_t total, __half *x16,
                              __half *lo) {
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t t = i / in, k = i - t * in;
        float v = x[t * x_stride + k];
        v = fminf(fmaxf(v, -FM_F16_MAX), FM_F16_MAX); /* NaN stays NaN */
        const __half h = __float2half_rn(v);
        x16[i] = h;
        if (lo) lo[i] = __float2half_rn(v - __half2float(h));
    }
}

/* y[t][o] = sum over splits in order (from 0.0f). */
__global__ void fm_reduce_kernel(const float *part, int splits, uint64_t n, uint64_t n_out, float *y,
                                 uint64_t y_stride) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * n_out) return;
    const uint64_t t = i / n_out, o = i - t * n_out;
    float s = 0.0f;
    for (int z = 0; z < splits; z++) s += part[((uint64_t)z * n + t) * n_out + o];
    y[t * y_stride + o] = s;
}

extern "C" bool dsv4_cuda_f16_mma_device_ok(int cc_major) { return cc_major >= 8; }

extern "C" bool dsv4_cuda_f16_mma_enabled(void) {
    const char *v = getenv("DSV4_CUDA_PREFILL_F16");
    return !(v && strcmp(v, "0") == 0);
}

extern "C" bool dsv4_cuda_f16_mma_ok(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                     uint32_t n) {
    return in > 0 && in % 8 == 0 && row_bytes % 16 == 0 && row_bytes >= in * 2 && ((uintptr_t)w & 15) == 0 &&
           n_out > 0 && n > 0 && (n_out + FM_BM - 1) / FM_BM <= 65535 && in <= ((uint64_t)1 << 40);
}

extern "C" uint32_t dsv4_cuda_f16_mma_splits(uint64_t in, uint64_t n_out, uint32_t n, int sm_count) {
    return (uint32_t)fm_pick_splits((long long)in, (long long)n_out, (long long)n, sm_count);
}

extern "C" size_t dsv4_cuda_f16_mma_x16_bytes(uint64_t in, uint32_t n) {
    return (size_t)in * n * 2 * (dsv4_cuda_f16_two_term() ? 2 : 1);
}

extern "C" size_t dsv4_cuda_f16_mma_part_bytes(uint64_t in, uint64_t n_out, uint32_t n, int sm_count) {
    const uint32_t s = dsv4_cuda_f16_mma_splits(in, n_out, n, sm_count);
    return s > 1 ? (size_t)s * n * n_out * sizeof(float) : 0;
}

extern "C" dsv4_status dsv4_cuda_gemm_f16_mma(const void *w, uint64_t row_bytes, uint64_t in, uint64_t n_out,
                                              const float *x, uint64_t x_stride, uint32_t n, float *y,
                                              uint64_t y_stride, void *x16, float *part, int sm_count,
                                              cudaStream_t stream, dsv4_error *err) {
    if (!dsv4_cuda_f16_mma_ok(w, row_bytes, in, n_out, n) || ((uintptr_t)x & 3) || ((uintptr_t)y & 3) ||
        ((uintptr_t)x16 & 15))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "f16 mma: %llu inputs, %llu-byte rows, %llu outputs, n=%u", (unsigned long long)in,
                         (unsigned long long)row_bytes, (unsigned long long)n_out, n);
    const int terms = dsv4_cuda_f16_two_term() ? 2 : 1;
    const int splits = fm_pick_splits((long long)in, (long long)n_out, (long long)n, sm_count);
    if (splits > 1 && !part)
        return dsv4_fail(err, DSV4_ERR_INVALID, "f16 mma: split-K needs a partial-sum buffer");
    const uint64_t total = in * n;
    const uint64_t cb = (total + 255) / 256;
    fm_cvt_kernel<<<(unsigned)(cb < 65536 ? cb : 65536), 256, 0, stream>>>(
        x, x_stride, in, total, (__half *)x16, terms > 1 ? (__half *)x16 + total : NULL);
    fm_args p;
    memset(&p, 0, sizeof p);
    p.w = (const uint8_t *)w;
    p.row_bytes = row_bytes;
    p.n_out = (long long)n_out;
    p.in = (long long)in;
    p.n = n;
    p.x16 = (const uint16_t *)x16;
    p.terms = terms;
    p.y = y;
    p.y_stride = y_stride;
    p.part = part;
    p.splits = splits;
    const dim3 grid((unsigned)(((uint64_t)n + FM_BN - 1) / FM_BN), (unsigned)((n_out + FM_BM - 1) / FM_BM),
                    (unsigned)splits);
    fm_kernel<<<grid, FM_THREADS, 0, stream>>>(p);
    if (splits > 1)
        fm_reduce_kernel<<<(unsigned)(((uint64_t)n * n_out + 255) / 256), 256, 0, stream>>>(
            part, splits, n, n_out, y, y_stride);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_INVALID, "f16 mma: launch (%llu x %u): %s", (unsigned long long)n_out,
                         n, cudaGetErrorString(e));
    return DSV4_OK;
}
