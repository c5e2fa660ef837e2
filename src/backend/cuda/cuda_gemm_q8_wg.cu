/* Q8_0 prefill products on warpgroup tensor cores, bitwise the CPU (cuda_gemm_q8_wg.h; tile, layout
 * and numerics in cuda_gemm_q8_wg.cuh), and the conversions that prepare its operands. This file is
 * built for sm_90a only (Makefile): on any other device the kernels have no image and
 * dsv4_cuda_q8_wg_device_ok says no.
 *
 * Why: the cuBLAS path needs three f16 GEMMs per Q8_0 product to be exact enough for the oracle
 * fixtures (session 19: 4,538-4,575 tok/s at 2K against 5,700 with one term); the int8 mma.sync
 * kernels are exact but reach 131-190 TOPS. Here the integer part of each block runs on the
 * warpgroup tensor cores in f16 (exact for Q8_0 codes), and the float update per output and block
 * (3 FP32 operations) bounds the kernel: ~630 TOPS on an H200 at full issue. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh" /* act_q8_0_d / _id / _q: quant_act_q8_0's arithmetic */
#include "backend/cuda/cuda_gemm_q8_wg.cuh"
#include "backend/cuda/cuda_gemm_q8_wg.h"

__device__ __forceinline__ void qw_cp16(uint8_t *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void qw_cp8(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void qw_cp4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void qw_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void qw_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Stage s into st (k 64 s .. 64 s + 63 of the CTA's group) */
template <int T>
__device__ __forceinline__ void qw_load(const qw_args &p, const qw_src<T> &q, uint8_t *st, int s, int tid) {
    const uint8_t *xq = (const uint8_t *)p.xq + 128u * s, *wq = (const uint8_t *)p.wq + 128u * s;
#pragma unroll
    for (int i = 0; i < 1024 / T; i++) {
        qw_cp16(st + q.dst + 16 * T * i, xq + q.a[i]);
        qw_cp16(st + QW_TILE + q.dst + 16 * T * i, wq + q.b[i]);
    }
    if (tid < 128) { /* XD: [token][2] */
        qw_cp8(st + 2 * QW_TILE + 8 * tid, (const uint8_t *)p.xd + q.sc + 8u * s);
    } else if (T == 256 ||
               tid < 256) { /* WD: [block][row], so a thread's two rows of one block are one 8-byte read */
        const uint8_t *src = (const uint8_t *)p.wd + q.sc + 8u * s;
        uint8_t *wd = st + 2 * QW_TILE + QW_SCALES + 4 * (tid - 128);
        qw_cp4(wd, src);
        qw_cp4(wd + 512, src + 4);
    }
}

/* The stage barrier: this thread's copies of stage q landed and made visible to the tensor cores,
 * everyone's too, and every warpgroup is past stage q - 2, whose buffer takes stage q + S - 2 (stage
 * q - 1's products may still be in flight). */
template <int T>
__device__ __forceinline__ void qw_barrier(const qw_args &p, const qw_src<T> &src, uint8_t *smem, int q,
                                           int ns, int tid) {
    qw_cp_wait<QW_STAGES - 3>();
    x16_proxy_fence();
    __syncthreads();
    const int nx = q + QW_STAGES - 2;
    if (nx < ns) qw_load<T>(p, src, smem + (nx % QW_STAGES) * QW_STAGE, nx, tid);
    qw_commit();
}

/* acc + (dw * dx) * isum: EXACT as quant_dot_q8_0 rounds it (three operations), else with the last
 * two fused (two operations, f32-accurate, not bitwise) */
template <bool EXACT> __device__ __forceinline__ float qw_update1(float acc, float dw, float dx, float isum) {
    if (EXACT) return __fadd_rn(acc, __fmul_rn(__fmul_rn(dw, dx), isum));
    return __fmaf_rn(__fmul_rn(dw, dx), isum, acc);
}

/* Block b's products (its two k16 steps, one commit group) into d: A the warpgroup's 64 token rows
 * of the stage at `tile` (shared address), B the 128 weight rows. No operand lives in registers,
 * so no instruction but the products defines their inputs while others are in flight (ptxas
 * serializes the products otherwise). */
__device__ __forceinline__ void qw_issue(float (&d)[64], uint32_t tile, int wg, int b) {
    const uint32_t a = tile + 64 * 128 * wg + 64 * (b & 1), bb = tile + QW_TILE + 64 * (b & 1);
    x16_fence();
    qw_mma128(d, x16_desc_sw(a, 1024), x16_desc_sw(bb, 1024), 0);
    qw_mma128(d, x16_desc_sw(a + 32, 1024), x16_desc_sw(bb + 32, 1024), 1);
    x16_commit();
}

/* acc (the thread's 64 outputs) += block j's isums in d (wgmma m64n128 layout: element 4 i + k is
 * token row r0 + 8 (k / 2), weight row 8 i + 2 t + k % 2) */
template <bool EXACT>
__device__ __forceinline__ void qw_update(float (&acc)[64], const float (&d)[64], const float *WD, int t,
                                          int j, float dx0, float dx1) {
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const float2 dw = *(const float2 *)(WD + 128 * j + 8 * i + 2 * t);
        acc[4 * i + 0] = qw_update1<EXACT>(acc[4 * i + 0], dw.x, dx0, d[4 * i + 0]);
        acc[4 * i + 1] = qw_update1<EXACT>(acc[4 * i + 1], dw.y, dx0, d[4 * i + 1]);
        acc[4 * i + 2] = qw_update1<EXACT>(acc[4 * i + 2], dw.x, dx1, d[4 * i + 2]);
        acc[4 * i + 3] = qw_update1<EXACT>(acc[4 * i + 3], dw.y, dx1, d[4 * i + 3]);
    }
}

/* Stage q: both blocks' product groups issued, then each block updated once its group is done, so
 * block 1's products run while block 0 is updated. Nothing is in flight across the caller's loop:
 * with products outstanding at a back edge, ptxas cannot tell which group a wait retires and
 * serializes them all (C7514; issuing the next stage's groups early measured no faster, bench/NOTES.md
 * session 20). */
template <bool EXACT>
__device__ __forceinline__ void qw_stage(const qw_args &p, const qw_src<QW_THREADS> &src, uint8_t *smem,
                                         int q, int ns, int tid, int wg, int t, int r0, float (&acc)[64],
                                         float (&d0)[64], float (&d1)[64]) {
    constexpr int G = 2; /* the stage's blocks */
    qw_barrier<QW_THREADS>(p, src, smem, q, ns, tid);
    const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(smem);
    qw_issue(d0, s0 + (q % QW_STAGES) * QW_STAGE, wg, 0);
    qw_issue(d1, s0 + (q % QW_STAGES) * QW_STAGE, wg, 1);
#pragma unroll
    for (int k = 0; k < G; k++) {
        const int sq = q + k / 2, j = k & 1;
        const float *XD = (const float *)(smem + (sq % QW_STAGES) * QW_STAGE + 2 * QW_TILE),
                    *WD = XD + 2 * 128;
        const float dx0 = XD[2 * r0 + j], dx1 = XD[2 * (r0 + 8) + j];
        if (k == G - 1)
            x16_wait<0>();
        else
            x16_wait<1>();
        float(&d)[64] = j ? d1 : d0;
        qw_fence_acc(d);
        qw_update<EXACT>(acc, d, WD, t, j, dx0, dx1);
    }
}

template <bool EXACT> __global__ void __launch_bounds__(QW_THREADS, 1) qw_kernel(const qw_args p) {
    extern __shared__ __align__(16) uint8_t qw_smem_raw[];
    uint8_t *smem =
        qw_smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(qw_smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, t = lane & 3;
    const uint32_t t0 = blockIdx.x * QW_BM, o0 = blockIdx.y * QW_BN, g = blockIdx.z;
    const int ns = (int)(p.in / QW_BK);
    const qw_src<QW_THREADS> src = qw_src_of<QW_THREADS>(p, t0, o0, g, tid);
    float acc[64], d0[64], d1[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f, d0[e] = 0.0f, d1[e] = 0.0f;
    qw_fence_acc(d0); /* defined here, before any product is in flight (scale-d 0 ignores them) */
    qw_fence_acc(d1);
    /* stages 0 .. S - 3 in flight, one commit group each (empty ones keep the count uniform) */
#pragma unroll
    for (int s = 0; s < QW_STAGES - 2; s++) {
        if (s < ns) qw_load<QW_THREADS>(p, src, smem + s * QW_STAGE, s, tid);
        qw_commit();
    }
    const int r0 = 64 * wg + qw_acc_row(w, lane, 0); /* the thread's two token rows: r0, r0 + 8 */
#pragma unroll 1
    for (int q = 0; q < ns; q++) qw_stage<EXACT>(p, src, smem, q, ns, tid, wg, t, r0, acc, d0, d1);
    qw_cp_wait<0>();
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const uint32_t tok = t0 + r0 + 8 * hh;
        if (tok >= p.n) continue;
        float *yr = p.y + (uint64_t)tok * p.y_stride + (uint64_t)g * p.rows;
#pragma unroll
        for (int e = 0; e < 16; e++) { /* half e / 8, n8 chunk e % 8 */
            const uint32_t o = o0 + 64 * (e >> 3) + 8 * (e & 7) + 2 * t;
            const float v0 = acc[4 * e + 2 * hh], v1 = acc[4 * e + 2 * hh + 1];
            if (p.vec2 && o + 1 < p.rows) {
                *(float2 *)(yr + o) = make_float2(v0, v1);
            } else {
                if (o < p.rows) yr[o] = v0;
                if (o + 1 < p.rows) yr[o + 1] = v1;
            }
        }
    }
}

/* ---- wg4 (DSV4_CUDA_Q8_WG_KERNEL=wg4; session 20, written after the device budget was spent: not yet
 * run on a GPU) ----
 * The same CTA tile, stage layout and arithmetic with 4 warpgroups of 64 tokens x 64 weight rows
 * (warpgroup v: tokens 64 (v % 2).., rows 64 (v / 2)..) and 512 threads: a thread holds 32 outputs and
 * two 32-float block sums (<= 128 registers), so an SM has 4 warps per scheduler instead of 2 to hide
 * the scale loads, the stage waits and the products' latency (the shipped kernel's stalls, bench/NOTES.md
 * session 20). Per stage a warpgroup issues both blocks' products (m64n64k16, A and B from shared
 * memory), loads the weight scales before each wait, and updates block 0 while block 1's run. Its
 * prologue and stores repeat qw_kernel's on purpose: folding both into shared helpers changed the
 * measured kernel's machine code, which this variant must leave as it was measured. */
#define QW4_THREADS 512

template <bool EXACT>
__device__ __forceinline__ void qw4_update(float (&acc)[32], const float (&d)[32], const float2 (&dw)[8],
                                           float dx0, float dx1) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        acc[4 * i + 0] = qw_update1<EXACT>(acc[4 * i + 0], dw[i].x, dx0, d[4 * i + 0]);
        acc[4 * i + 1] = qw_update1<EXACT>(acc[4 * i + 1], dw[i].y, dx0, d[4 * i + 1]);
        acc[4 * i + 2] = qw_update1<EXACT>(acc[4 * i + 2], dw[i].x, dx1, d[4 * i + 2]);
        acc[4 * i + 3] = qw_update1<EXACT>(acc[4 * i + 3], dw[i].y, dx1, d[4 * i + 3]);
    }
}
/* block j's products of the warpgroup's 64 tokens (ta) x 64 rows (rb) of the stage at `tile` */
__device__ __forceinline__ void qw4_issue(float (&d)[32], uint32_t tile, int ta, int rb, int j) {
    const uint32_t a = tile + 64 * 128 * ta + 64 * j, b = tile + QW_TILE + 64 * 128 * rb + 64 * j;
    x16_fence();
    qw_mma64(d, x16_desc_sw(a, 1024), x16_desc_sw(b, 1024), 0);
    qw_mma64(d, x16_desc_sw(a + 32, 1024), x16_desc_sw(b + 32, 1024), 1);
    x16_commit();
}

template <bool EXACT> __global__ void __launch_bounds__(QW4_THREADS, 1) qw4_kernel(const qw_args p) {
    extern __shared__ __align__(16) uint8_t qw_smem_raw[];
    uint8_t *smem =
        qw_smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(qw_smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, v = tid >> 7, ta = v & 1, rb = v >> 1, w = (tid >> 5) & 3, lane = tid & 31,
              t = lane & 3;
    const uint32_t t0 = blockIdx.x * QW_BM, o0 = blockIdx.y * QW_BN, g = blockIdx.z;
    const int ns = (int)(p.in / QW_BK);
    const qw_src<QW4_THREADS> src = qw_src_of<QW4_THREADS>(p, t0, o0, g, tid);
    float acc[32], d0[32], d1[32];
#pragma unroll
    for (int e = 0; e < 32; e++) acc[e] = 0.0f, d0[e] = 0.0f, d1[e] = 0.0f;
    qw_fence_acc(d0); /* defined here, before any product is in flight (scale-d 0 ignores them) */
    qw_fence_acc(d1);
#pragma unroll
    for (int s = 0; s < QW_STAGES - 2; s++) {
        if (s < ns) qw_load<QW4_THREADS>(p, src, smem + s * QW_STAGE, s, tid);
        qw_commit();
    }
    const int r0 = 64 * ta + qw_acc_row(w, lane, 0),
              c0 = 64 * rb + 2 * t; /* rows r0, r0 + 8; columns c0 + 8 i.. */
#pragma unroll 1
    for (int q = 0; q < ns; q++) {
        qw_barrier<QW4_THREADS>(p, src, smem, q, ns, tid);
        const uint8_t *st = smem + (q % QW_STAGES) * QW_STAGE;
        const uint32_t ts = (uint32_t)__cvta_generic_to_shared(st);
        qw4_issue(d0, ts, ta, rb, 0);
        qw4_issue(d1, ts, ta, rb, 1);
        const float *XD = (const float *)(st + 2 * QW_TILE), *WD = XD + 2 * 128;
        const float2 xa = *(const float2 *)(XD + 2 * r0), xb = *(const float2 *)(XD + 2 * (r0 + 8));
        float2 dw[8];
#pragma unroll
        for (int i = 0; i < 8; i++) dw[i] = *(const float2 *)(WD + c0 + 8 * i);
        x16_wait<1>();
        qw_fence_acc(d0);
        qw4_update<EXACT>(acc, d0, dw, xa.x, xb.x);
#pragma unroll
        for (int i = 0; i < 8; i++) dw[i] = *(const float2 *)(WD + 128 + c0 + 8 * i);
        x16_wait<0>();
        qw_fence_acc(d1);
        qw4_update<EXACT>(acc, d1, dw, xa.y, xb.y);
    }
    qw_cp_wait<0>();
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const uint32_t tok = t0 + r0 + 8 * hh;
        if (tok >= p.n) continue;
        float *yr = p.y + (uint64_t)tok * p.y_stride + (uint64_t)g * p.rows;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t o = o0 + c0 + 8 * i;
            const float v0 = acc[4 * i + 2 * hh], v1 = acc[4 * i + 2 * hh + 1];
            if (p.vec2 && o + 1 < p.rows) {
                *(float2 *)(yr + o) = make_float2(v0, v1);
            } else {
                if (o < p.rows) yr[o] = v0;
                if (o + 1 < p.rows) yr[o + 1] = v1;
            }
        }
    }
}

/* ---- conversions: a warp per Q8_0 block ---- */

/* weight block b (row b / nb, block b % nb): codes as f16 integers, the scale as a float */
__global__ void qw_wcvt_kernel(const uint8_t *w, uint64_t row_bytes, uint64_t nb, uint64_t blocks, __half *wq,
                               float *wd) {
    const uint64_t b = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= blocks) return;
    const uint8_t *blk = w + (b / nb) * row_bytes + (b % nb) * 34;
    wq[b * 32 + lane] = __int2half_rn((int)(int8_t)blk[2 + lane]);
    if (lane == 0) wd[b] = __half2float(__ushort_as_half(*(const uint16_t *)blk));
}

/* activation block b (token b / nb, block b % nb): quant_act_q8_0's code and scale */
__global__ void qw_xcvt_kernel(const float *x, uint64_t x_stride, uint64_t nb, uint64_t blocks, __half *xq,
                               float *xd) {
    const uint64_t b = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= blocks) return;
    const float v = x[(b / nb) * x_stride + (b % nb) * 32 + lane];
    float am = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float d = act_q8_0_d(am), id = act_q8_0_id(d);
    xq[b * 32 + lane] = __int2half_rn(act_q8_0_q(v, id));
    if (lane == 0) xd[b] = d;
}

/* ---- host ---- */

/* DSV4_CUDA_Q8_WG: unset / "1" the exact kernel, "fma" the fused update, "0" off (read once) */
static int qw_mode(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_Q8_WG");
        v = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "fma") ? 2 : 1;
    }
    return v;
}
extern "C" bool dsv4_cuda_q8_wg_enabled(void) { return qw_mode() != 0; }
extern "C" bool dsv4_cuda_q8_wg_exact(void) { return qw_mode() == 1; }

typedef void (*qw_fn)(const qw_args);
static qw_fn qw_kernel_of(int exact, bool wg4) {
    if (wg4) return exact ? qw4_kernel<true> : qw4_kernel<false>;
    return exact ? qw_kernel<true> : qw_kernel<false>;
}
/* DSV4_CUDA_Q8_WG_KERNEL=wg4: the 4-warpgroup kernel (not yet measured); read once */
static bool qw_wg4(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_Q8_WG_KERNEL");
        v = e && !strcmp(e, "wg4");
    }
    return v == 1;
}

/* On the current device (the shared-memory limit is a per-device attribute of each kernel: the backend
 * asks once per context, on its device) */
extern "C" bool dsv4_cuda_q8_wg_device_ok(int cc_major, size_t smem_per_block_optin) {
    if (cc_major != 9 || smem_per_block_optin < (size_t)QW_SMEM) return false;
    cudaFuncAttributes fa;
    bool ok = cudaFuncGetAttributes(&fa, (const void *)qw_kernel<true>) == cudaSuccess;
    for (int k = 0; ok && k < 4; k++)
        ok = cudaFuncSetAttribute((const void *)qw_kernel_of(k & 1, k >= 2),
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, QW_SMEM) == cudaSuccess;
    cudaGetLastError();
    return ok;
}

extern "C" bool dsv4_cuda_q8_wg_ok(const dsv4_cuda_q8_wg_op *op) {
    const uint64_t L = op->in * op->groups;
    if (op->in == 0 || op->in % QW_BK || op->rows == 0 || op->groups == 0 || op->groups > 65535) return false;
    if (op->rows * op->groups > 0xffffffffull || op->rows > 65535ull * QW_BN || L > 0xffffffffull)
        return false;
    /* the loader's 32-bit byte offsets (qw_src) */
    if ((uint64_t)op->n * L * 2 + 128 > 0xffffffffull ||
        op->rows * op->groups * op->in * 2 + 128 > 0xffffffffull)
        return false;
    if (((uintptr_t)op->wq | (uintptr_t)op->xq) % 16 || ((uintptr_t)op->wd | (uintptr_t)op->xd) % 8)
        return false;
    return ((uintptr_t)op->y & 3) == 0;
}

extern "C" dsv4_status dsv4_cuda_q8_wg_gemm(const dsv4_cuda_q8_wg_op *op, cudaStream_t stream,
                                            dsv4_error *err) {
    if (!dsv4_cuda_q8_wg_ok(op)) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 wgmma: shape not taken");
    if (op->n == 0) return DSV4_OK;
    qw_args p;
    memset(&p, 0, sizeof p);
    p.xq = op->xq, p.xd = op->xd, p.wq = op->wq, p.wd = op->wd;
    p.L = op->in * op->groups, p.in = op->in;
    p.rows = (uint32_t)op->rows, p.n = op->n;
    p.y = op->y, p.y_stride = op->y_stride;
    p.vec2 = ((uintptr_t)op->y & 7) == 0 && op->y_stride % 2 == 0 && (op->groups == 1 || op->rows % 2 == 0);
    const dim3 grid((op->n + QW_BM - 1) / QW_BM, (unsigned)((op->rows + QW_BN - 1) / QW_BN), op->groups);
    const bool wg4 = qw_wg4();
    qw_kernel_of(dsv4_cuda_q8_wg_exact(), wg4)<<<grid, wg4 ? QW4_THREADS : QW_THREADS, QW_SMEM, stream>>>(p);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? DSV4_OK
               : dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 wgmma: launch: %s", cudaGetErrorString(e));
}

extern "C" size_t dsv4_cuda_q8_wg_scales_offset(uint64_t rows, uint64_t in) {
    return ((size_t)(rows * in * 2) + 255) & ~(size_t)255;
}
extern "C" size_t dsv4_cuda_q8_wg_copy_bytes(uint64_t rows, uint64_t in) {
    return dsv4_cuda_q8_wg_scales_offset(rows, in) + (((size_t)(rows * (in / 32) * 4) + 255) & ~(size_t)255);
}

static unsigned qw_warp_blocks(uint64_t blocks) { return (unsigned)((blocks * 32 + 255) / 256); }

extern "C" dsv4_status dsv4_cuda_q8_wg_wconvert(const void *w, uint64_t row_bytes, uint64_t in, uint64_t rows,
                                                void *dst, cudaStream_t stream, dsv4_error *err) {
    const uint64_t nb = in / 32, blocks = rows * nb;
    if (in == 0 || in % 32 || row_bytes != nb * 34 || blocks * 32 / 256 >= 0x7fffffffull)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 wgmma weights: in = %llu, %llu-byte rows",
                         (unsigned long long)in, (unsigned long long)row_bytes);
    if (!blocks) return DSV4_OK;
    __half *wq = (__half *)dst;
    float *wd = (float *)((uint8_t *)dst + dsv4_cuda_q8_wg_scales_offset(rows, in));
    qw_wcvt_kernel<<<qw_warp_blocks(blocks), 256, 0, stream>>>((const uint8_t *)w, row_bytes, nb, blocks, wq,
                                                               wd);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? DSV4_OK
               : dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 wgmma weights: %s", cudaGetErrorString(e));
}

extern "C" dsv4_status dsv4_cuda_q8_wg_xconvert(const float *x, uint64_t x_stride, uint64_t L, uint32_t n,
                                                void *dst, cudaStream_t stream, dsv4_error *err) {
    const uint64_t nb = L / 32, blocks = (uint64_t)n * nb;
    if (L == 0 || L % 32 || blocks * 32 / 256 >= 0x7fffffffull)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q8_0 wgmma activations: %llu values a row",
                         (unsigned long long)L);
    if (!blocks) return DSV4_OK;
    __half *xq = (__half *)dst;
    float *xd = (float *)((uint8_t *)dst + dsv4_cuda_q8_wg_scales_offset(n, L));
    qw_xcvt_kernel<<<qw_warp_blocks(blocks), 256, 0, stream>>>(x, x_stride, nb, blocks, xq, xd);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? DSV4_OK
               : dsv4_fail(err, DSV4_ERR_INVALID, "q8_0 wgmma activations: %s", cudaGetErrorString(e));
}
