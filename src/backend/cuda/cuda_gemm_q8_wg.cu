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
#include "backend/cuda/cuda_async.cuh"     /* cp.async, mbarriers, setmaxnreg */
#include "backend/cuda/cuda_gemm_q8_wg.cuh"
#include "backend/cuda/cuda_gemm_q8_wg.h"

/* Stage s into st (k 64 s .. 64 s + 63 of the CTA's group) */
template <int T>
__device__ __forceinline__ void qw_load(const qw_args &p, const qw_src<T> &q, uint8_t *st, int s, int tid) {
    const uint8_t *xq = (const uint8_t *)p.xq + 128u * s, *wq = (const uint8_t *)p.wq + 128u * s;
#pragma unroll
    for (int i = 0; i < 1024 / T; i++) {
        ca_cp16(st + q.dst + 16 * T * i, xq + q.a[i]);
        ca_cp16(st + QW_TILE + q.dst + 16 * T * i, wq + q.b[i]);
    }
    if (tid < 128) { /* XD: [token][2] */
        ca_cp8(st + 2 * QW_TILE + 8 * tid, (const uint8_t *)p.xd + q.sc + 8u * s);
    } else if (T == 256 ||
               tid < 256) { /* WD: [block][row], so a thread's two rows of one block are one 8-byte read */
        const uint8_t *src = (const uint8_t *)p.wd + q.sc + 8u * s;
        uint8_t *wd = st + 2 * QW_TILE + QW_SCALES + 4 * (tid - 128);
        ca_cp4(wd, src);
        ca_cp4(wd + 512, src + 4);
    }
}

/* The stage barrier: this thread's copies of stage q landed and made visible to the tensor cores,
 * everyone's too, and every warpgroup is past stage q - 2, whose buffer takes stage q + S - 2 (stage
 * q - 1's products may still be in flight). */
template <int T>
__device__ __forceinline__ void qw_barrier(const qw_args &p, const qw_src<T> &src, uint8_t *smem, int q,
                                           int ns, int tid) {
    ca_cp_wait<QW_STAGES - 3>();
    x16_proxy_fence();
    __syncthreads();
    const int nx = q + QW_STAGES - 2;
    if (nx < ns) qw_load<T>(p, src, smem + (nx % QW_STAGES) * QW_STAGE, nx, tid);
    ca_commit();
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
        x16_pin(d);
        qw_update<EXACT>(acc, d, WD, t, j, dx0, dx1);
    }
}

/* The thread's 64 outputs of its token rows r0, r0 + 8 (of the tile at t0, o0, group g) */
__device__ __forceinline__ void qw_store(const qw_args &p, const float (&acc)[64], uint32_t t0, uint32_t o0,
                                         uint32_t g, int r0, int t) {
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
    x16_pin(d0); /* defined here, before any product is in flight (scale-d 0 ignores them) */
    x16_pin(d1);
    /* stages 0 .. S - 3 in flight, one commit group each (empty ones keep the count uniform) */
#pragma unroll
    for (int s = 0; s < QW_STAGES - 2; s++) {
        if (s < ns) qw_load<QW_THREADS>(p, src, smem + s * QW_STAGE, s, tid);
        ca_commit();
    }
    const int r0 = 64 * wg + qw_acc_row(w, lane, 0); /* the thread's two token rows: r0, r0 + 8 */
#pragma unroll 1
    for (int q = 0; q < ns; q++) qw_stage<EXACT>(p, src, smem, q, ns, tid, wg, t, r0, acc, d0, d1);
    ca_cp_wait<0>();
    qw_store(p, acc, t0, o0, g, r0, t);
}

/* ---- qws_kernel: a producer warpgroup, two consumer warpgroups, a persistent grid ----
 * Why: qw_kernel's stalls (bench/NOTES.md session 20: two warps per scheduler, each stage's loads, copy
 * waits, proxy fence and CTA barrier in every warp's path, the warpgroups in lockstep) held it at ~200
 * TOPS against the FP32 update's ~630. Here warpgroup 0 only loads: thread tid copies its 8 + 8 code
 * chunks of a stage and token tid's and row tid's scales (cp.async, the same stage image as qw_kernel),
 * waits for its own copies of the stage QWS_LAG behind, fences them for the tensor cores and arrives on
 * that stage's `full` barrier (128 arrivals). Warpgroups 1 and 2 (tokens 0..63, 64..127 of the tile, all
 * 128 rows) wait on `full`, run both blocks' products and updates as qw_kernel does, and arrive on
 * `empty` (256 arrivals), which the producer waits for before it refills the buffer. The CTA walks tiles
 * blockIdx.x, + gridDim.x, ... (token tiles fastest, so the CTAs at work share weight rows in L2); the
 * stage counter runs on across tiles, so the producer loads the next tile while the consumers store. */
#define QWS_THREADS 384
enum {
    QWS_LAG = 3, /* stages a producer thread keeps in flight behind the one it issues */
    QWS_SMEM = QW_SMEM + 16 * QW_STAGES /* + the full and empty barriers */
};

/* The producer thread tid's copies of stage s into st (the stage image of qw_load) */
__device__ __forceinline__ void qws_load(const qw_args &p, const qw_src<128> &q, uint8_t *st, int s,
                                         int tid) {
    const uint8_t *xq = (const uint8_t *)p.xq + 128u * s, *wq = (const uint8_t *)p.wq + 128u * s;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        ca_cp16(st + q.dst + 2048 * i, xq + q.a[i]);
        ca_cp16(st + QW_TILE + q.dst + 2048 * i, wq + q.b[i]);
    }
    ca_cp8(st + 2 * QW_TILE + 8 * tid, (const uint8_t *)p.xd + q.sc + 8u * s);
    const uint8_t *src = (const uint8_t *)p.wd + q.sw + 8u * s;
    uint8_t *wd = st + 2 * QW_TILE + QW_SCALES + 4 * tid;
    ca_cp4(wd, src);
    ca_cp4(wd + 512, src + 4);
}

/* acc += block j's isums in d with the block's weight scales dw (qw_update with the scales loaded before) */
template <bool EXACT>
__device__ __forceinline__ void qw_update_dw(float (&acc)[64], const float (&d)[64], const float2 (&dw)[16],
                                             float dx0, float dx1) {
#pragma unroll
    for (int i = 0; i < 16; i++) {
        acc[4 * i + 0] = qw_update1<EXACT>(acc[4 * i + 0], dw[i].x, dx0, d[4 * i + 0]);
        acc[4 * i + 1] = qw_update1<EXACT>(acc[4 * i + 1], dw[i].y, dx0, d[4 * i + 1]);
        acc[4 * i + 2] = qw_update1<EXACT>(acc[4 * i + 2], dw[i].x, dx1, d[4 * i + 2]);
        acc[4 * i + 3] = qw_update1<EXACT>(acc[4 * i + 3], dw[i].y, dx1, d[4 * i + 3]);
    }
}

/* FORM: how a consumer orders its products and updates.
 * QWS_SERIAL: a consumer's two blocks one after the other through one accumulator set (the block's scales
 * loaded while its products run), so 64 registers fewer are live and the update has room to be scheduled.
 * QWS_OVERLAP: both blocks' products issued at once into two sets, block 0 updated while block 1's run.
 * QWS_PIPE: a block's products always run while the block before it is updated, across stages too: in stage
 * s, (s, 1)'s products run during (s, 0)'s update and (s + 1, 0)'s during (s, 1)'s, each retired before
 * the next issue and all of them before the loop's back edge (ptxas serializes the products when a group is
 * in flight across it, C7514). Session 21's measurements (bench/NOTES.md) showed the products and the
 * updates adding up in the other two forms: the two consumer warpgroups run in step.
 * DIAG (measurement only, wrong outputs; DSV4_CUDA_Q8_WG_DIAG): bit 0 leaves the float update out, bit 1
 * the products, bit 2 the loads and the hand-over (the consumers work on whatever shared memory holds), so
 * each part's cost shows on its own. */
enum { QWS_OVERLAP, QWS_SERIAL, QWS_PIPE };
template <bool EXACT, int FORM, int DIAG = 0>
__global__ void __launch_bounds__(QWS_THREADS, 1)
    qws_kernel(const qw_args p, uint32_t nx, uint32_t ny, uint32_t tiles) {
    extern __shared__ __align__(16) uint8_t qw_smem_raw[];
    uint8_t *smem =
        qw_smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(qw_smem_raw) & 1023u)) & 1023u);
    uint64_t *full = (uint64_t *)(smem + QW_STAGES * QW_STAGE), *empty = full + QW_STAGES;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int ns = (int)(p.in / QW_BK);
    if (tid == 0)
        for (int s = 0; s < QW_STAGES; s++) ca_bar_init(full + s, 128), ca_bar_init(empty + s, 256);
    __syncthreads();
    if (wg == 0) { /* the producer */
        ca_setmaxnreg_dec<40>();
        if (DIAG & 4) return;
        uint32_t it = 0; /* stages issued, over all of this CTA's tiles */
        for (uint32_t i = blockIdx.x; i < tiles; i += gridDim.x) {
            const qws_tile tl = qws_tile_of(i, nx, ny);
            const qw_src<128> src = qw_src_of<128>(p, tl.t0, tl.o0, tl.g, tid);
#pragma unroll 1
            for (int s = 0; s < ns; s++, it++) {
                const uint32_t slot = it % QW_STAGES;
                if (it >= QW_STAGES) ca_bar_wait(empty + slot, (it / QW_STAGES + 1) & 1);
                qws_load(p, src, smem + slot * QW_STAGE, s, tid);
                ca_commit();
                if (it >= QWS_LAG) {
                    ca_cp_wait<QWS_LAG>();
                    x16_proxy_fence();
                    ca_bar_arrive(full + (it - QWS_LAG) % QW_STAGES);
                }
            }
        }
        ca_cp_wait<0>();
        x16_proxy_fence();
        for (uint32_t k = it > QWS_LAG ? it - QWS_LAG : 0; k < it; k++) ca_bar_arrive(full + k % QW_STAGES);
        return;
    }
    ca_setmaxnreg_inc<232>();
    const int cw = wg - 1, w = (tid >> 5) & 3, lane = tid & 31, t = lane & 3;
    const int r0 = 64 * cw + qw_acc_row(w, lane, 0); /* the thread's two token rows: r0, r0 + 8 */
    float acc[64], d0[64], d1[64];
#pragma unroll
    for (int e = 0; e < 64; e++) d0[e] = 0.0f, d1[e] = 0.0f;
    x16_pin(d0); /* defined here, before any product is in flight (scale-d 0 ignores them) */
    if (FORM != QWS_SERIAL) x16_pin(d1);
    uint32_t slot = 0, phase = 0;
    for (uint32_t i = blockIdx.x; i < tiles; i += gridDim.x) {
        const qws_tile tl = qws_tile_of(i, nx, ny);
#pragma unroll
        for (int e = 0; e < 64; e++) acc[e] = 0.0f;
        if constexpr (FORM == QWS_PIPE) {
            ca_bar_wait(full + slot, phase); /* (0, 0) of the tile */
            qw_issue(d0, ca_saddr(smem + slot * QW_STAGE), cw, 0);
            x16_wait<0>();
            x16_pin(d0);
#pragma unroll 1
            for (int s = 0; s < ns; s++) {
                const uint8_t *st = smem + slot * QW_STAGE;
                const float *XD = (const float *)(st + 2 * QW_TILE), *WD = XD + 2 * 128;
                qw_issue(d1, ca_saddr(st), cw, 1);                                 /* (s, 1) */
                qw_update<EXACT>(acc, d0, WD, t, 0, XD[2 * r0], XD[2 * (r0 + 8)]); /* (s, 0) */
                x16_wait<0>();
                x16_pin(d1);
                const uint32_t nslot = slot + 1 == QW_STAGES ? 0 : slot + 1,
                               nphase = nslot ? phase : phase ^ 1;
                if (s + 1 < ns) { /* (s + 1, 0) */
                    ca_bar_wait(full + nslot, nphase);
                    qw_issue(d0, ca_saddr(smem + nslot * QW_STAGE), cw, 0);
                }
                qw_update<EXACT>(acc, d1, WD, t, 1, XD[2 * r0 + 1], XD[2 * (r0 + 8) + 1]); /* (s, 1) */
                x16_wait<0>();
                x16_pin(d0);
                ca_bar_arrive(empty + slot);
                slot = nslot, phase = nphase;
            }
            qw_store(p, acc, tl.t0, tl.o0, tl.g, r0, t);
        } else {
#pragma unroll 1
            for (int s = 0; s < ns; s++) {
                if (!(DIAG & 4)) ca_bar_wait(full + slot, phase);
                const uint8_t *st = smem + slot * QW_STAGE;
                const uint32_t ts = ca_saddr(st);
                const float *XD = (const float *)(st + 2 * QW_TILE), *WD = XD + 2 * 128;
                if (FORM == QWS_SERIAL) {
                    float2 dw[16];
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        if (!(DIAG & 2)) qw_issue(d0, ts, cw, j);
                        const float dx0 = XD[2 * r0 + j], dx1 = XD[2 * (r0 + 8) + j];
#pragma unroll
                        for (int k = 0; k < 16; k++) dw[k] = *(const float2 *)(WD + 128 * j + 8 * k + 2 * t);
                        if (!(DIAG & 2)) x16_wait<0>();
                        x16_pin(d0);
                        if (!(DIAG & 1)) qw_update_dw<EXACT>(acc, d0, dw, dx0, dx1);
                    }
                } else {
                    qw_issue(d0, ts, cw, 0);
                    qw_issue(d1, ts, cw, 1);
                    const float2 xa = *(const float2 *)(XD + 2 * r0),
                                 xb = *(const float2 *)(XD + 2 * (r0 + 8));
                    x16_wait<1>();
                    x16_pin(d0);
                    qw_update<EXACT>(acc, d0, WD, t, 0, xa.x, xb.x);
                    x16_wait<0>();
                    x16_pin(d1);
                    qw_update<EXACT>(acc, d1, WD, t, 1, xa.y, xb.y);
                }
                if (!(DIAG & 4)) ca_bar_arrive(empty + slot);
                if (++slot == QW_STAGES) slot = 0, phase ^= 1;
            }
            if (DIAG & 1)
#pragma unroll
                for (int e = 0; e < 64; e++) acc[e] = d0[e];
            qw_store(p, acc, tl.t0, tl.o0, tl.g, r0, t);
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

/* DSV4_CUDA_Q8_WG_KERNEL: unset / "ws1" qws_kernel in its serial form, "ws" overlapped, "pipe" pipelined
 * (the FORM), "v1" qw_kernel (session 20: QW_V1); read once */
static const int QW_V1 = -1;
static int qw_kernel_choice(void) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("DSV4_CUDA_Q8_WG_KERNEL");
        v = e && !strcmp(e, "v1")     ? QW_V1
            : e && !strcmp(e, "ws")   ? QWS_OVERLAP
            : e && !strcmp(e, "pipe") ? QWS_PIPE
                                      : QWS_SERIAL;
    }
    return v;
}
typedef void (*qws_fn)(const qw_args, uint32_t, uint32_t, uint32_t);
/* DSV4_CUDA_Q8_WG_DIAG: the serial kernel with parts left out (wrong outputs: for measuring the parts
 * only; DIAG bits of qws_kernel); read once */
static const char *const qw_diag_names[8] = {"",        "noupdate",     "noproducts", "loadsonly",
                                             "noloads", "productsonly", "updateonly", "nothing"};
static const qws_fn qw_diag_kernels[8] = {qws_kernel<true, QWS_SERIAL, 0>, qws_kernel<true, QWS_SERIAL, 1>,
                                          qws_kernel<true, QWS_SERIAL, 2>, qws_kernel<true, QWS_SERIAL, 3>,
                                          qws_kernel<true, QWS_SERIAL, 4>, qws_kernel<true, QWS_SERIAL, 5>,
                                          qws_kernel<true, QWS_SERIAL, 6>, qws_kernel<true, QWS_SERIAL, 7>};
static int qw_diag(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_Q8_WG_DIAG");
        v = 0;
        for (int i = 1; e && i < 8; i++)
            if (!strcmp(e, qw_diag_names[i])) v = i;
    }
    return v;
}
static qws_fn qws_kernel_of(bool exact, int form) {
    if (qw_diag()) return qw_diag_kernels[qw_diag()];
    if (form == QWS_SERIAL) return exact ? qws_kernel<true, QWS_SERIAL> : qws_kernel<false, QWS_SERIAL>;
    if (form == QWS_PIPE) return exact ? qws_kernel<true, QWS_PIPE> : qws_kernel<false, QWS_PIPE>;
    return exact ? qws_kernel<true, QWS_OVERLAP> : qws_kernel<false, QWS_OVERLAP>;
}

/* On the current device (the shared-memory limit is a per-device attribute of each kernel: the backend
 * asks once per context, on its device) */
extern "C" bool dsv4_cuda_q8_wg_device_ok(int cc_major, size_t smem_per_block_optin) {
    if (cc_major != 9 || smem_per_block_optin < (size_t)QWS_SMEM) return false;
    cudaFuncAttributes fa;
    bool ok = cudaFuncGetAttributes(&fa, (const void *)qw_kernel<true>) == cudaSuccess;
    const void *k[7] = {(const void *)qw_kernel<true>,
                        (const void *)qw_kernel<false>,
                        (const void *)qws_kernel<true, QWS_OVERLAP>,
                        (const void *)qws_kernel<false, QWS_OVERLAP>,
                        (const void *)qws_kernel<false, QWS_SERIAL>,
                        (const void *)qws_kernel<true, QWS_PIPE>,
                        (const void *)qws_kernel<false, QWS_PIPE>};
    for (int i = 0; ok && i < 15; i++) /* qw_kernel's two, then the qws_kernel forms (serial exact: diag 0) */
        ok = cudaFuncSetAttribute(i < 7 ? k[i] : (const void *)qw_diag_kernels[i - 7],
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  i < 2 ? (int)QW_SMEM : (int)QWS_SMEM) == cudaSuccess;
    cudaGetLastError();
    return ok;
}

extern "C" bool dsv4_cuda_q8_wg_ok(const dsv4_cuda_q8_wg_op *op) {
    const uint64_t L = op->in * op->groups;
    if (op->in == 0 || op->in % QW_BK || op->rows == 0 || op->groups == 0 || op->groups > 65535 ||
        !op->sm_count)
        return false;
    if (op->rows * op->groups > 0xffffffffull || op->rows > 65535ull * QW_BN || L > 0xffffffffull)
        return false;
    /* the loader's 32-bit byte offsets (qw_src) */
    if ((uint64_t)op->n * L * 2 + 128 > 0xffffffffull ||
        op->rows * op->groups * op->in * 2 + 128 > 0xffffffffull)
        return false;
    if (((uintptr_t)op->wq | (uintptr_t)op->xq) % 16 || ((uintptr_t)op->wd | (uintptr_t)op->xd) % 8)
        return false;
    const uint64_t tiles =
        (op->n + (uint64_t)QW_BM - 1) / QW_BM * ((op->rows + QW_BN - 1) / QW_BN) * op->groups;
    return tiles <= 0xffffffffull && ((uintptr_t)op->y & 3) == 0;
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
    const uint32_t nx = (op->n + QW_BM - 1) / QW_BM, ny = (uint32_t)((op->rows + QW_BN - 1) / QW_BN);
    const bool exact = dsv4_cuda_q8_wg_exact();
    const int kc = qw_kernel_choice();
    if (kc == QW_V1) {
        const dim3 grid(nx, ny, op->groups);
        (exact ? qw_kernel<true> : qw_kernel<false>)<<<grid, QW_THREADS, QW_SMEM, stream>>>(p);
    } else {
        const uint32_t tiles = nx * ny * op->groups, sms = op->sm_count;
        const unsigned ctas = tiles < sms ? tiles : sms;
        qws_kernel_of(exact, kc)<<<ctas, QWS_THREADS, QWS_SMEM, stream>>>(p, nx, ny, tiles);
    }
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
