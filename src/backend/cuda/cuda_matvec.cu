/* Batch-1 quantized matvec: a persistent grid streams the weight rows through a cp.async
 * pipeline in shared memory and decodes them there.
 *
 * Why this shape: the rows are contiguous, so a CTA's share of the output rows is one byte
 * range; it is copied 16 bytes per thread per instruction (fully coalesced, many loads in flight,
 * no registers held), S stages deep. Block sizes of 34/66/84 bytes never line up with 16-byte
 * lanes, so decoding from shared memory (any alignment, word loads) is cheaper than decoding
 * from registers. Each CTA gets an exact share of rows (no tile quantization at the tail).
 * Activations are re-laid in shared memory once per CTA in a bank-conflict-free layout:
 *   Q8_0 / F16: 48 bytes per 32 int8 (or 8 f32) elements, Q8_K: 48 bytes per 32 elements
 *   (qs, f32 d, the two int16 bsums), 400 bytes per superblock.
 * Each warp handles RPL rows at once (the activation unit is loaded once for all of them) and
 * its lanes split the row into units (a Q8_0 block, an IQ2_XXS sub-block, a quarter Q2_K/Q4_K
 * superblock, 8 F16 values). When a stage holds fewer row groups than warps, rows are split in
 * segments whose partial sums meet in shared memory (fixed order: deterministic results).
 * IQ2_XXS keeps its grid and sign-mask tables in shared memory, one copy per half-warp lane so
 * that random indices never collide on a bank. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_matvec.h"
#include "backend/cuda/cuda_mv_common.cuh"

#include "backend/cuda/cuda_mv_units.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

/* ---- device-only helpers ---- */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
/* 4- and 8-byte copies (activation re-layout, IQ2_XXS grid replication): L1-allocating .ca */
static __device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async8(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void cp_async_wait(int pending) {
    if (pending >= 3)
        asm volatile("cp.async.wait_group 3;\n" ::: "memory");
    else if (pending == 2)
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Rows [v, v + n) of the stage starting at virtual row v (slot = v / out), cut at the end of the
 * CTA's range and at the slot's last row. Returns n; issues nothing for an invalid expert id. */
static __device__ __forceinline__ int mv_issue(const mv_params &p, uint8_t *dst, int v, int end, int tid) {
    const int slot = v / p.out, r = v - slot * p.out;
    int n = p.R;
    if (end - v < n) n = end - v;
    if (p.out - r < n) n = p.out - r;
    const uint8_t *base;
    const int si = mv_src(p, slot, &base);
    const int e = p.ids ? __ldg(p.ids + si) : 0;
    if (e >= 0 && e < p.n_expert) {
        const uint8_t *src = base + (long long)e * p.expert_bytes + (long long)r * p.row_bytes;
        const int bytes = n * p.row_bytes;
        for (int o = tid * 16; o < bytes; o += MV_THREADS * 16) cp_async16(dst + o, src + o);
    }
    return n;
}

/* Activation re-layout as 4-byte cp.async: joins the first weight stage's commit group, so its
 * latency overlaps the weight stream instead of preceding it. */
template <int F>
static __device__ __forceinline__ void mv_act_async(const mv_params &p, uint8_t *act, const uint8_t *x,
                                                    int tid) {
    const int n = mv_act_ncopies<F>(p.in);
    for (int i = tid; i < n; i += MV_THREADS) {
        int so, d;
        mv_act_map<F>(i, &so, &d);
        cp_async4(act + d, x + so);
    }
}
static __device__ __forceinline__ void mv_grid_async(const uint64_t *grid, uint8_t *lut, int tid) {
    for (int i = tid; i < 256 * 16; i += MV_THREADS) cp_async8(lut + 8 * i, grid + (i >> 4));
}

/* Resident CTAs per SM the registers are sized for (__launch_bounds__): 3 for IQ2_XXS and 4 for Q2_K
 * (64 registers either way: the same code as with 2 and 3) so that a smaller plan can hold more
 * warps per SM (DSV4_CUDA_MV_PLAN_*); 3 for the rest. */
static constexpr int mv_min_blocks(int f) { return f == MV_Q2_K ? 4 : 3; }

/* The barrier of one row pipeline: the whole CTA when it runs one (NP = 1), else named barrier 1 + gi
 * over that pipeline's MV_THREADS threads (NP: pipelines per CTA). */
template <int NP> static __device__ __forceinline__ void mv_pipe_sync(int gi) {
    if (NP == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(1 + gi), "r"(MV_THREADS) : "memory");
}

/* V: the IQ2_XXS decoder (0: sign masks, unit_iq2_xxs; 1: PRMT selectors, unit_iq2_xxs_sel; the same
 * bits); 0 for every other format.
 * NP: row pipelines per CTA (IQ2_XXS selectors only; mv_plan). Each pipeline is MV_THREADS threads with
 * its own share of the rows, stages, activation and segment sums, exactly the NP = 1 kernel's; the G
 * pipelines share one copy of the 48 KB selector table, so an SM holds more warps in the same shared
 * memory. A row's value depends only on (R, nseg) and its bytes, never on the pipeline or CTA: the
 * same bits for every NP. */
template <int F, int V, int NP>
__global__ void __launch_bounds__(MV_THREADS *NP, NP == 1 ? mv_min_blocks(F) : 1)
    mv_kernel(const mv_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int RPL = mv_rpl(F);
    uint8_t *lut = smem;
    const int gi = NP == 1 ? 0 : (int)threadIdx.x / MV_THREADS; /* this thread's pipeline */
    uint8_t *act = smem + mv_lut_bytes(F) + gi * (p.act_bytes + p.red_bytes + p.S * p.stage_bytes);
    float *red = (float *)(act + p.act_bytes);
    uint8_t *stage0 = (uint8_t *)red + p.red_bytes;
    const int tid = (int)threadIdx.x - gi * MV_THREADS, lane = tid & 31, warp = tid >> 5;
    const long long total = (long long)p.k * p.out, part = (long long)blockIdx.x * NP + gi,
                    parts = (long long)gridDim.x * NP;
    const int begin = (int)(total * part / parts);
    const int end = (int)(total * (part + 1) / parts);
    cu_pdl_trigger();
    /* the IQ2_XXS grid (a constant table) in its own, oldest commit group, while the previous
     * kernel may still run; the first wait below covers it */
    if (F == MV_IQ2_XXS && V == 0) {
        mv_grid_async(p.grid, lut, tid);
        cp_async_commit();
    }
    if (F == MV_IQ2_XXS && V == 1) { /* constant table: before the wait */
        if (NP == 1 || gi == 0) mv_build_iq2_sel(p.sel, lut, tid);
        if (NP > 1) __syncthreads(); /* the one copy, before any pipeline reads it */
    }
    cu_pdl_wait(); /* expert ids and activations come from earlier kernels */
    if (begin >= end) {
        cp_async_wait(0);
        return;
    }

    /* prologue: weights of stage 0 first, then (same group) the activations, then stages
     * 1..S-2; nothing waits before all of them are in flight. */
    const uint8_t *base0;
    const int slot0 = mv_src(p, begin / p.out, &base0); /* activation index of the first row */
    int f = begin, fs = 0;                              /* next row to fetch, its stage buffer */
    if (f < end) f += mv_issue(p, stage0, f, end, tid);
    mv_act_async<F>(p, act, p.x + (long long)slot0 * p.x_stride, tid);
    cp_async_commit();
    fs = 1;
    for (int s = 1; s < p.S - 1; s++, fs++) {
        if (f < end) f += mv_issue(p, stage0 + fs * p.stage_bytes, f, end, tid);
        cp_async_commit();
    }
    if (fs == p.S) fs = 0;
    if (F == MV_IQ2_XXS && V == 0) mv_build_iq2_masks(lut, tid);
    const uint2 *G = (const uint2 *)lut + (lane & 15);
    const uint2 *M = (const uint2 *)(lut + MV_IQ2_GRID_BYTES) + (lane & 15);

    int c = begin, cs = 0, act_slot = slot0;
    const float nanv = __int_as_float(0x7fc00000);
    const int segmask = p.nseg - 1;
    while (c < end) {
        if (f < end) f += mv_issue(p, stage0 + fs * p.stage_bytes, f, end, tid);
        if (++fs == p.S) fs = 0;
        cp_async_commit();
        cp_async_wait(p.S - 1);
        mv_pipe_sync<NP>(gi);
        const int slot = c / p.out, r0 = c - slot * p.out;
        int n = p.R;
        if (end - c < n) n = end - c;
        if (p.out - r0 < n) n = p.out - r0;
        const uint8_t *base;
        const int si = mv_src(p, slot, &base);
        if (p.x_stride != 0 && si != act_slot) {
            mv_load_act<F>(p, act, p.x + (long long)si * p.x_stride, tid);
            act_slot = si;
            mv_pipe_sync<NP>(gi);
        }
        const int e = p.ids ? __ldg(p.ids + si) : 0;
        const bool valid = e >= 0 && e < p.n_expert;
        const uint8_t *tile = stage0 + cs * p.stage_bytes;
        const int groups = (n + RPL - 1) / RPL;
        const int items = groups << p.lg_nseg;
        for (int it = warp; it < items; it += MV_WARPS) {
            const int g = it >> p.lg_nseg, sg = it & segmask;
            const int r = g * RPL;
            const int u0 = (sg * p.units) >> p.lg_nseg, u1 = ((sg + 1) * p.units) >> p.lg_nseg;
            float acc[RPL];
#pragma unroll
            for (int j = 0; j < RPL; j++) acc[j] = 0.0f;
            const uint8_t *wr = tile + r * p.row_bytes;
            for (int u = u0 + lane; u < u1; u += 32) {
                if (F == MV_Q8_0) unit_q8_0<RPL>(wr, p.row_bytes, u, act, acc);
                if (F == MV_IQ2_XXS && V == 0) unit_iq2_xxs<RPL>(wr, p.row_bytes, u, act, G, M, acc);
                if (F == MV_IQ2_XXS && V == 1)
                    unit_iq2_xxs_sel<RPL, 7>(wr, p.row_bytes, u, act, lut, lut + MV_IQ2_GRID_BYTES,
                                             4u * (uint32_t)lane, acc);
                if (F == MV_Q2_K) unit_q2_k<RPL>(wr, p.row_bytes, u, act, acc);
                if (F == MV_Q4_K) unit_q4_k<RPL>(wr, p.row_bytes, u, act, acc);
                if (F == MV_F16) unit_f16<RPL>(wr, p.row_bytes, u, act, acc);
            }
#pragma unroll
            for (int j = 0; j < RPL; j++) {
                const float v = warp_sum(acc[j]);
                if (lane == j && r + j < n) {
                    if (p.nseg == 1)
                        p.y[c + r + j] = valid ? v : nanv;
                    else
                        red[(r + j) * p.nseg + sg] = v;
                }
            }
        }
        mv_pipe_sync<NP>(gi);
        if (p.nseg > 1) {
            for (int t = tid; t < n; t += MV_THREADS) {
                float v = 0.0f;
                for (int sg = 0; sg < p.nseg; sg++) v += red[t * p.nseg + sg];
                p.y[c + t] = valid ? v : nanv;
            }
        }
        c += n;
        if (++cs == p.S) cs = 0;
    }
    cp_async_wait(0);
}

#include "backend/cuda/cuda_act_quant.cuh" /* act_q8_k_block: the folded MoE mid */
#include "backend/cuda/cuda_backend.h"     /* cu_swiglu_mid */
#include "backend/cuda/cuda_mv_stream.cuh" /* Q2_K / IQ2_XXS rows streamed per warp (uses the helpers above) */

/* ---- host side ---- */

typedef void (*mv_kernel_fn)(const mv_params);
/* v: the IQ2_XXS decoder (mv_kernel's V); g: row pipelines per CTA (MV_IQ2_GROUPS_MIN.. for the
 * selector decoder only, else 1) */
#define MV_IQ2_GROUPS_MIN 3
#define MV_IQ2_GROUPS_MAX 4
static mv_kernel_fn mv_kernel_of(int f, int v, int g) {
    switch (f) {
    case MV_Q8_0: return mv_kernel<MV_Q8_0, 0, 1>;
    case MV_IQ2_XXS:
        if (v != 1) return mv_kernel<MV_IQ2_XXS, 0, 1>;
        return g == 4   ? mv_kernel<MV_IQ2_XXS, 1, 4>
               : g == 3 ? mv_kernel<MV_IQ2_XXS, 1, 3>
                        : mv_kernel<MV_IQ2_XXS, 1, 1>;
    case MV_Q2_K: return mv_kernel<MV_Q2_K, 0, 1>;
    case MV_Q4_K: return mv_kernel<MV_Q4_K, 0, 1>;
    case MV_F16: return mv_kernel<MV_F16, 0, 1>;
    default: return NULL;
    }
}

/* The streamed Q2_K kernel for (quarters per lane, rows per group, groups in flight per warp); NULL:
 * no instance. */
#define MVS_PR(pr, d) (pr == 2 ? mvs_q2k_kernel<U, 2, d> : pr == 4 ? mvs_q2k_kernel<U, 4, d> : NULL)
template <int U> static mv_kernel_fn mvs_kernel_upl(int pr, int d) {
    return d == 2 ? MVS_PR(pr, 2) : d == 3 ? MVS_PR(pr, 3) : NULL;
}
#undef MVS_PR
static mv_kernel_fn mvs_kernel_of(int upl, int pr, int d) {
    return upl == 1 ? mvs_kernel_upl<1>(pr, d) : upl == 2 ? mvs_kernel_upl<2>(pr, d) : NULL;
}
/* The streamed IQ2_XXS kernel for (sub-blocks per lane: 2 or 4), rows per group and
 * groups in flight. */
#define MVI_PR(pr, d) (pr == 2 ? mvs_iq2_kernel<U, 2, d> : pr == 4 ? mvs_iq2_kernel<U, 4, d> : NULL)
template <int U> static mv_kernel_fn mvi_kernel_upl(int pr, int d) {
    return d == 2 ? MVI_PR(pr, 2) : d == 3 ? MVI_PR(pr, 3) : NULL;
}
#undef MVI_PR
static mv_kernel_fn mvi_kernel_of(int spl, int pr, int d) {
    return spl == 2 ? mvi_kernel_upl<2>(pr, d) : spl == 4 ? mvi_kernel_upl<4>(pr, d) : NULL;
}

/* The IQ2_XXS decoder a launch uses: the tuning's choice, else DSV4_CUDA_MV_IQ2 (read at init), and
 * the sign masks when the selector table could not be built. */
static int mv_iq2_variant(const dsv4_cuda_mv_ctx *ctx) {
    const int d = ctx->tune.iq2_decoder > 0 ? ctx->tune.iq2_decoder : ctx->iq2_decoder_default;
    return d == DSV4_MV_IQ2_SEL && ctx->d_iq2_sel ? 1 : 0;
}

static const char *mv_format_name(int f) {
    static const char *names[] = {"Q8_0", "IQ2_XXS", "Q2_K", "Q4_K", "F16"};
    return f >= 0 && f <= MV_F16 ? names[f] : "?";
}

extern "C" dsv4_status dsv4_cuda_mv_init(dsv4_cuda_mv_ctx *ctx, int device, dsv4_error *err) {
    if (!ctx) return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_mv_init: ctx is NULL");
    memset(ctx, 0, sizeof *ctx);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_mv_init: device %d: %s", device, cudaGetErrorString(e));
    ctx->device = device;
    ctx->sm_count = prop.multiProcessorCount;
    ctx->smem_per_sm = (int)prop.sharedMemPerMultiprocessor;
    ctx->smem_per_block_optin = (int)prop.sharedMemPerBlockOptin;
    if (cudaDeviceGetAttribute(&ctx->smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, device) !=
        cudaSuccess)
        ctx->smem_reserved = -1; /* unknown: no streamed IQ2_XXS plan (its table layout needs the base) */
    for (int f = MV_Q8_0; f <= MV_F16; f++)
        for (int v = 0; v < (f == MV_IQ2_XXS ? 2 + MV_IQ2_GROUPS_MAX - MV_IQ2_GROUPS_MIN + 1 : 1); v++) {
            /* v 0, 1: the two decoders; 2..: the selector decoder with 3, 4 pipelines per CTA */
            const mv_kernel_fn kf = mv_kernel_of(f, v < 2 ? v : 1, v < 2 ? 1 : MV_IQ2_GROUPS_MIN + v - 2);
            e = cudaFuncSetAttribute((const void *)kf, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     ctx->smem_per_block_optin);
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute((const void *)kf, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         100);
            if (e != cudaSuccess)
                return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_mv_init: %s kernel attributes: %s",
                                 mv_format_name(f), cudaGetErrorString(e));
        }
    for (int upl = 1; upl <= 4; upl++) /* the streamed kernels: Q2_K upl 1, 2; IQ2_XXS upl 2, 4 */
        for (int pr = 2; pr <= 4; pr += 2)
            for (int d = 2; d <= 3; d++)
                for (int iq2 = 0; iq2 < 2; iq2++) { /* Q2_K, IQ2_XXS */
                    const mv_kernel_fn kf = iq2 ? mvi_kernel_of(upl, pr, d) : mvs_kernel_of(upl, pr, d);
                    if (!kf) continue;
                    e = cudaFuncSetAttribute((const void *)kf, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             ctx->smem_per_block_optin);
                    if (e == cudaSuccess)
                        e = cudaFuncSetAttribute((const void *)kf,
                                                 cudaFuncAttributePreferredSharedMemoryCarveout, 100);
                    if (e != cudaSuccess)
                        return dsv4_fail(err, DSV4_ERR_IO,
                                         "dsv4_cuda_mv_init: streamed %s kernel attributes: %s",
                                         iq2 ? "IQ2_XXS" : "Q2_K", cudaGetErrorString(e));
                }
    const char *qv = getenv("DSV4_CUDA_MV_Q2K");
    ctx->q2k_kernel_default = qv && strcmp(qv, "pipe") == 0 ? DSV4_MV_PIPE : DSV4_MV_STREAM;
    /* per-format plans for A/B runs: "tile,stages,ctas[,groups]" (bench/NOTES.md, sessions 10, 11) */
    const char *plan_env[2] = {"DSV4_CUDA_MV_PLAN_IQ2", "DSV4_CUDA_MV_PLAN_Q2K"};
    const int plan_fmt[2] = {MV_IQ2_XXS, MV_Q2_K};
    for (int i = 0; i < 2; i++) {
        const char *pv = getenv(plan_env[i]);
        dsv4_cuda_mv_tuning t = {0, 0, 0, 0, 0, 0};
        if (pv && sscanf(pv, "%d,%d,%d,%d", &t.tile_bytes, &t.stages, &t.ctas_per_sm, &t.groups) >= 3 &&
            t.tile_bytes >= 0 && t.stages >= 0 && t.ctas_per_sm >= 0 && t.groups >= 0)
            ctx->fmt_tune[plan_fmt[i]] = t;
    }
    const char *sv = getenv("DSV4_CUDA_MVI_SPARE");
    ctx->mvi_spare = sv ? atoi(sv) : 0;
    if (ctx->mvi_spare < 0) ctx->mvi_spare = 0;
    const char *iv = getenv("DSV4_CUDA_MV_IQ2");
    /* DSV4_CUDA_MV_IQ2=mask|sel: the pipeline kernel with that decoder; unset or "stream": the rows
     * streamed per warp (session 16) */
    ctx->iq2_kernel_default =
        iv && (strcmp(iv, "mask") == 0 || strcmp(iv, "sel") == 0) ? DSV4_MV_PIPE : DSV4_MV_STREAM;
    /* selectors by default: 12.8 vs 17.0 us on the decode shape, 194 vs 204 us steady state, decode
     * p50 7.65 / 7.67 vs 7.77 / 7.89 ms on the full flash q2 (session 7, the same bits) */
    ctx->iq2_decoder_default = iv && strcmp(iv, "mask") == 0 ? DSV4_MV_IQ2_MASK : DSV4_MV_IQ2_SEL;
    e = cudaMalloc((void **)&ctx->d_iq2_grid, sizeof dsv4_iq2xxs_grid);
    if (e == cudaSuccess)
        e = cudaMemcpy(ctx->d_iq2_grid, dsv4_iq2xxs_grid, sizeof dsv4_iq2xxs_grid, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        if (ctx->d_iq2_grid) cudaFree(ctx->d_iq2_grid);
        ctx->d_iq2_grid = NULL;
        return dsv4_fail(err, DSV4_ERR_NOMEM, "dsv4_cuda_mv_init: IQ2_XXS grid table: %s",
                         cudaGetErrorString(e));
    }
    /* the selector tables (256 grid, 128 sign selectors); without them the sign-mask decoder runs */
    uint32_t tab[384];
    bool grid_ok = true;
    for (int i = 0; i < 256; i++) {
        grid_ok = grid_ok && md_iq2_grid_ok(dsv4_iq2xxs_grid[i]);
        tab[i] = md_iq2_grid_sel(dsv4_iq2xxs_grid[i]);
    }
    for (int i = 0; i < 128; i++) tab[256 + i] = md_iq2_sign_sel(dsv4_ksigns_iq2xs[i]);
    e = cudaMalloc((void **)&ctx->d_mid_tickets, DSV4_CUDA_MV_MID_TICKETS * sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(ctx->d_mid_tickets, 0, DSV4_CUDA_MV_MID_TICKETS * sizeof(int));
    if (e != cudaSuccess) {
        dsv4_cuda_mv_destroy(ctx);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "dsv4_cuda_mv_init: MoE mid tickets: %s",
                         cudaGetErrorString(e));
    }
    if (grid_ok) {
        e = cudaMalloc((void **)&ctx->d_iq2_sel, sizeof tab);
        if (e == cudaSuccess) e = cudaMemcpy(ctx->d_iq2_sel, tab, sizeof tab, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            dsv4_cuda_mv_destroy(ctx);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "dsv4_cuda_mv_init: IQ2_XXS selector table: %s",
                             cudaGetErrorString(e));
        }
    }
    return DSV4_OK;
}

extern "C" void dsv4_cuda_mv_destroy(dsv4_cuda_mv_ctx *ctx) {
    if (!ctx) return;
    if (ctx->d_iq2_grid) cudaFree(ctx->d_iq2_grid);
    if (ctx->d_iq2_sel) cudaFree(ctx->d_iq2_sel);
    if (ctx->d_mid_tickets) cudaFree(ctx->d_mid_tickets);
    ctx->d_iq2_grid = NULL;
    ctx->d_iq2_sel = NULL;
    ctx->d_mid_tickets = NULL;
}

extern "C" size_t dsv4_cuda_act_bytes(uint32_t weight_type, int64_t n) {
    const int f = mv_format_of(weight_type);
    if (f == MV_NONE || n <= 0 || n % mv_block_elems(f) != 0) return 0;
    if (f != MV_Q8_0 && f != MV_F16 && n % 256 != 0) return 0;
    return (size_t)mv_act_global(f, n);
}

static int64_t align16(int64_t v) { return (v + 15) & ~(int64_t)15; }

/* Stage geometry, shared-memory budget and grid size for one launch. */
static dsv4_status mv_plan(const dsv4_cuda_mv_ctx *ctx, int f, int64_t in, int64_t out, int k, mv_params *p,
                           int *grid, int *smem, int *pipes, dsv4_error *err) {
    const int rpl = mv_rpl(f);
    const int64_t rb = mv_row_bytes(f, in);
    /* Defaults from the first H200 sweep (bench/results/2026-11-29-cuda-matvec-h200.txt): time per
     * pipeline iteration was ~1 us + bytes/BW whatever the depth, so few large stages win: 64 KB x 2
     * stages x 2 CTAs/SM was best for every Q8_0/F16/Q2_K/Q4_K shape; IQ2_XXS (48 KB of tables per
     * CTA) was best at 32 KB x 3 stages, 2 CTAs/SM on the steady-state case. */
    /* Q2_K: 32 KB x 2 x 3 CTAs/SM, best in session 7's sweep at both the decode (11.40 vs 12.25 us) and
     * the steady-state shape (157 vs 163 us; bench/results/2026-11-29-s7-c1-*) */
    const dsv4_cuda_mv_tuning *ft = &ctx->fmt_tune[f];
    const int tile = ctx->tune.tile_bytes > 0          ? ctx->tune.tile_bytes
                     : ft->tile_bytes > 0              ? ft->tile_bytes
                     : f == MV_IQ2_XXS || f == MV_Q2_K ? 32768
                                                       : 65536;
    int S = ctx->tune.stages > 0 ? ctx->tune.stages : ft->stages > 0 ? ft->stages : (f == MV_IQ2_XXS ? 3 : 2);
    if (S < 2) S = 2;
    if (S > MV_MAX_STAGES) S = MV_MAX_STAGES;
    const int lb = mv_min_blocks(f); /* __launch_bounds__ minimum blocks */
    int ctas = ctx->tune.ctas_per_sm > 0 ? ctx->tune.ctas_per_sm
               : ft->ctas_per_sm > 0     ? ft->ctas_per_sm
               : f == MV_Q2_K            ? 3
                                         : 2;
    int64_t R = 1;
    while (R * 2 <= out && R * 2 * rb <= tile) R *= 2;
    if (R < rpl && out >= rpl) R = rpl;
    const int64_t units = mv_units(f, in);
    const int64_t groups = (R + rpl - 1) / rpl;
    int64_t nseg = 1;
    while (groups * nseg < MV_WARPS && units / (nseg * 2) >= 32) nseg *= 2;
    const int64_t stage = align16((R > rpl ? R : rpl) * rb + 16);
    const int64_t actb = align16(mv_act_smem(f, in));
    const int64_t redb = align16(R * nseg * 4);
    /* IQ2_XXS selectors: G row pipelines per CTA over one table copy, one CTA per SM (mv_kernel).
     * Default 4 (session 11, cuda_matvec_bench on the H200, the same bits: decode gate+up x12 22.32 ->
     * 20.86 us, 128 experts 197.6 -> 158.2 us; 3 pipelines: 21.58 / 168.7); groups = 1 switches back. */
    int G = ctx->tune.groups > 0 ? ctx->tune.groups : ft->groups > 0 ? ft->groups : MV_IQ2_GROUPS_MAX;
    if (f != MV_IQ2_XXS || mv_iq2_variant(ctx) != 1 || G < MV_IQ2_GROUPS_MIN) G = 1;
    if (G > MV_IQ2_GROUPS_MAX) G = MV_IQ2_GROUPS_MAX;
    int64_t need = mv_lut_bytes(f) + G * (actb + redb + S * stage);
    while (need > ctx->smem_per_block_optin && S > 2) {
        S--;
        need -= G * stage;
    }
    if (need > ctx->smem_per_block_optin && G > 1) { /* the plain kernel's budget */
        G = 1;
        need = mv_lut_bytes(f) + actb + redb + S * stage;
    }
    if (need > ctx->smem_per_block_optin)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "dsv4_cuda_matvec(%s, in=%lld): needs %lld bytes of shared memory, device allows %d",
                         mv_format_name(f), (long long)in, (long long)need, ctx->smem_per_block_optin);
    const int fit = ctx->smem_per_sm / (int)(need + 1024); /* 1 KB reserved per block */
    if (ctas > fit) ctas = fit;
    if (ctas > lb) ctas = lb; /* registers are only guaranteed for `lb` blocks */
    if (ctas < 1) ctas = 1;
    if (G > 1) ctas = 1;
    const int64_t total = (int64_t)k * out;
    int64_t g = (int64_t)ctas * ctx->sm_count;
    if (g * G > total) g = (total + G - 1) / G;
    p->row_bytes = (int)rb;
    p->in = (int)in;
    p->out = (int)out;
    p->k = k;
    p->R = (int)R;
    p->nseg = (int)nseg;
    p->lg_nseg = 0;
    while ((1 << p->lg_nseg) < nseg) p->lg_nseg++;
    p->S = S;
    p->stage_bytes = (int)stage;
    p->act_bytes = (int)actb;
    p->red_bytes = (int)redb;
    p->units = (int)units;
    p->expert_bytes = (long long)(rb * out);
    *grid = (int)g;
    *smem = (int)need;
    *pipes = G;
    return DSV4_OK;
}

/* The streamed plan (cuda_mv_stream.cuh) when the tuning selects it and the shape fits: kernel, grid,
 * shared memory, threads, rows per group and groups in flight. Q2_K: default 4 rows x 2 groups in
 * flight, MVS_MIN_BLOCKS CTAs of 8 warps per SM; IQ2_XXS (in = 2048 or 4096, with the selector table): 2
 * or 4 rows x 2 groups, one CTA of 16 warps per SM. */
static bool mvs_plan(const dsv4_cuda_mv_ctx *ctx, int f, int64_t in, int64_t out, int k, int *grid, int *smem,
                     mv_kernel_fn *fn, int *threads, int *rows, int *depth) {
    const bool q2k = f == MV_Q2_K && in <= 4096 && mv_row_bytes(f, in) % 16 == 0;
    const bool iq2 =
        f == MV_IQ2_XXS && (in == 2048 || in == 4096) && ctx->d_iq2_sel && ctx->smem_reserved >= 0;
    if (!q2k && !iq2) return false;
    const dsv4_cuda_mv_tuning *t = &ctx->tune;
    const dsv4_cuda_mv_tuning *ft = &ctx->fmt_tune[f]; /* DSV4_CUDA_MV_PLAN_*: a pipeline plan */
    const bool pipe_knobs =
        t->tile_bytes > 0 || t->stages > 0 || t->ctas_per_sm > 0 ||
        (iq2 && (t->iq2_decoder > 0 || t->groups > 0)) ||
        (t->kernel == 0 && (ft->tile_bytes > 0 || ft->stages > 0 || ft->ctas_per_sm > 0 || ft->groups > 0));
    const int kind = t->kernel > 0 ? t->kernel
                     : pipe_knobs  ? DSV4_MV_PIPE
                                   : (q2k ? ctx->q2k_kernel_default : ctx->iq2_kernel_default);
    if (kind != DSV4_MV_STREAM) return false;
    const bool own = t->kernel == DSV4_MV_STREAM;
    const int d = own && t->stages > 0 ? t->stages : 2;
    /* IQ2_XXS: groups of 2 rows unless the launch has more than 4 groups of 4 per warp (session 16, call
     * 5 sweep, the same bits: gate x6 12.61 vs 14.08 us, gate+up x12 18.49-18.57 vs 18.92, 128 experts
     * 129.0 vs 117.5); Q2_K: 4 (decode x6 9.48 vs 9.79 us, 128 experts 95.0 vs 109.7; call 2) */
    const int pr_auto = iq2 && (int64_t)k * out / 4 < (int64_t)4 * ctx->sm_count * MVI_WARPS ? 2 : 4;
    const int pr = own && t->groups > 0 ? t->groups : pr_auto;
    const int64_t rb = mv_row_bytes(f, in);
    int warps, ctas;
    int64_t need;
    if (q2k) {
        const int upl = in <= 2048 ? 1 : 2;
        warps = MVS_WARPS;
        ctas = own && t->ctas_per_sm > 0 ? t->ctas_per_sm : MVS_MIN_BLOCKS(upl);
        if (ctas > MVS_MIN_BLOCKS(upl)) ctas = MVS_MIN_BLOCKS(upl); /* what the registers are sized for */
        need = (int64_t)MVS_WARPS * d * pr * rb;
        *fn = mvs_kernel_of(upl, pr, d);
    } else {
        warps = MVI_WARPS;
        ctas = 1;
        uint32_t toff, nb; /* the table at the next 64 KB boundary of the block's shared addresses */
        need = mvi_layout((uint32_t)ctx->smem_reserved, (uint32_t)(d * pr * rb), &toff, &nb);
        *fn = mvi_kernel_of((int)(in / 1024), pr, d);
    }
    if (out % pr != 0 || !*fn || need > ctx->smem_per_block_optin) return false;
    const int fit = ctx->smem_per_sm / (int)(need + 1024);
    if (ctas > fit) ctas = fit;
    if (ctas < 1) return false;
    const int64_t groups = (int64_t)k * out / pr, warps_needed = (groups + 1) / 2; /* >= 2 groups a warp */
    /* IQ2_XXS: one CTA an SM, so an SM still busy with the kernel before (the router's block, a side lane's
     * kernel) starts its CTA late and the launch ends with it; DSV4_CUDA_MVI_SPARE leaves that many SMs out
     * (session 32 A/B; the rows' bits do not depend on which warp takes a group) */
    int64_t g =
        (int64_t)ctas * (ctx->sm_count - (iq2 && ctx->mvi_spare < ctx->sm_count ? ctx->mvi_spare : 0));
    if (g * warps > warps_needed) g = (warps_needed + warps - 1) / warps;
    *grid = (int)(g < 1 ? 1 : g);
    *smem = (int)need;
    *threads = warps * 32;
    *rows = pr;
    *depth = d;
    return true;
}

/* k slots on w, or with w2 set 2k slots (k on w, then k on w2, same ids and activations). */
static dsv4_status mv_launch(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *w, const void *w2,
                             int64_t in, int64_t out, int64_t n_expert, const int32_t *ids, int k,
                             const void *x, int64_t x_stride_bytes, float *y, struct CUstream_st *cstream,
                             const dsv4_cuda_mv_mid *mid, dsv4_error *err) {
    const int f = mv_format_of(type);
    if (!ctx || f == MV_NONE)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "dsv4_cuda_matvec: weight type %u has no CUDA matvec",
                         type);
    if (!w || !x || !y || in <= 0 || out <= 0 || k <= 0 || n_expert <= 0 || (k > 1 && !ids))
        return dsv4_fail(
            err, DSV4_ERR_INVALID,
            "dsv4_cuda_matvec(%s): bad arguments (w, x, y, ids must be set; in=%lld out=%lld k=%d "
            "n_expert=%lld)",
            mv_format_name(f), (long long)in, (long long)out, k, (long long)n_expert);
    const int64_t rb = mv_row_bytes(f, in);
    if (in % (f == MV_Q8_0 || f == MV_F16 ? mv_block_elems(f) : 256) != 0 || rb % 16 != 0 ||
        ((uintptr_t)w & 15) != 0)
        return dsv4_fail(
            err, DSV4_ERR_UNSUPPORTED,
            "dsv4_cuda_matvec(%s): in=%lld gives %lld-byte rows; rows and the weight base must be "
            "16-byte aligned",
            mv_format_name(f), (long long)in, (long long)rb);
    if (((uintptr_t)x & 3) != 0 || (x_stride_bytes & 3) != 0 || x_stride_bytes < 0)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "dsv4_cuda_matvec(%s): x and its slot stride must be 4-byte aligned",
                         mv_format_name(f));
    if (w2 && (((uintptr_t)w2 & 15) != 0 || k > INT_MAX / 2))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "dsv4_cuda_matvec(%s): second tensor not 16-byte aligned",
                         mv_format_name(f));
    const int slots = w2 ? 2 * k : k;
    if ((int64_t)slots * out > INT_MAX || in > INT_MAX / 4)
        return dsv4_fail(err, DSV4_ERR_RANGE, "dsv4_cuda_matvec(%s): k*out=%lld rows or in=%lld too large",
                         mv_format_name(f), (long long)k * out, (long long)in);
    if (f == MV_IQ2_XXS && !ctx->d_iq2_grid)
        return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_matvec(IQ2_XXS): context not initialized");
    mv_params p;
    memset(&p, 0, sizeof p);
    int grid = 0, smem = 0, pipes = 1, threads = 0;
    mv_kernel_fn sfn = NULL;
    int rows = 0, depth = 0;
    const bool stream = mvs_plan(ctx, f, in, out, slots, &grid, &smem, &sfn, &threads, &rows, &depth);
    if (mid) { /* the folded mid: the streamed IQ2_XXS pair only, nothing launched otherwise */
        if (!stream || f != MV_IQ2_XXS || !w2 || !mid->weights || !mid->midq || !ctx->d_mid_tickets ||
            out % 256 != 0 || (int64_t)k * out / 256 > DSV4_CUDA_MV_MID_TICKETS || x_stride_bytes != 0)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "dsv4_cuda_matvec(%s): no folded mid for this plan",
                             mv_format_name(f));
        p.midq = (uint8_t *)mid->midq;
        p.mid_w = mid->weights;
        p.tickets = ctx->d_mid_tickets;
        p.mid_clamp = mid->clamp;
        p.mid_clamp_on = mid->clamp_on;
    }
    if (stream) {
        p.row_bytes = (int)rb;
        p.in = (int)in;
        p.out = (int)out;
        p.k = slots;
        p.units = (int)mv_units(f, in);
        p.expert_bytes = (long long)(rb * out);
    } else {
        dsv4_status st = mv_plan(ctx, f, in, out, slots, &p, &grid, &smem, &pipes, err);
        if (st != DSV4_OK) return st;
    }
    p.w = (const uint8_t *)w;
    p.w2 = (const uint8_t *)w2;
    p.k1 = k;
    p.ids = ids;
    p.x = (const uint8_t *)x;
    p.y = y;
    p.grid = ctx->d_iq2_grid;
    p.sel = ctx->d_iq2_sel;
    p.x_stride = x_stride_bytes;
    p.n_expert = (int)(n_expert > INT_MAX ? INT_MAX : n_expert);
    if (stream)
        sfn<<<grid, threads, smem, cstream>>>(p);
    else
        mv_kernel_of(f, f == MV_IQ2_XXS ? mv_iq2_variant(ctx) : 0,
                     pipes)<<<grid, MV_THREADS * pipes, smem, cstream>>>(p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_matvec(%s, in=%lld, out=%lld, k=%d): launch: %s",
                         mv_format_name(f), (long long)in, (long long)out, slots, cudaGetErrorString(e));
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_matvec_experts(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *w,
                                                int64_t in, int64_t out, int64_t n_expert, const int32_t *ids,
                                                int k, const void *x, int64_t x_stride_bytes, float *y,
                                                struct CUstream_st *stream, dsv4_error *err) {
    return mv_launch(ctx, type, w, NULL, in, out, n_expert, ids, k, x, x_stride_bytes, y, stream, NULL, err);
}

extern "C" dsv4_status dsv4_cuda_matvec_experts_pair(const dsv4_cuda_mv_ctx *ctx, uint32_t type,
                                                     const void *wa, const void *wb, int64_t in, int64_t out,
                                                     int64_t n_expert, const int32_t *ids, int k,
                                                     const void *x, int64_t x_stride_bytes, float *y,
                                                     struct CUstream_st *stream, dsv4_error *err) {
    if (!wb) return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_matvec_experts_pair: second tensor is NULL");
    return mv_launch(ctx, type, wa, wb, in, out, n_expert, ids, k, x, x_stride_bytes, y, stream, NULL, err);
}

extern "C" dsv4_status dsv4_cuda_matvec_experts_pair_mid(const dsv4_cuda_mv_ctx *ctx, uint32_t type,
                                                         const void *wa, const void *wb, int64_t in,
                                                         int64_t out, int64_t n_expert, const int32_t *ids,
                                                         int k, const void *x, float *y,
                                                         const dsv4_cuda_mv_mid *mid,
                                                         struct CUstream_st *stream, dsv4_error *err) {
    if (!wb || !mid)
        return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_matvec_experts_pair_mid: NULL argument");
    return mv_launch(ctx, type, wa, wb, in, out, n_expert, ids, k, x, 0, y, stream, mid, err);
}

extern "C" dsv4_status dsv4_cuda_mv_describe(const dsv4_cuda_mv_ctx *ctx, uint32_t type, int64_t in,
                                             int64_t out, int k, char *buf, size_t len, dsv4_error *err) {
    const int f = mv_format_of(type);
    if (!ctx || f == MV_NONE || in <= 0 || out <= 0 || k <= 0 || !buf)
        return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_mv_describe: bad arguments");
    int grid = 0, smem = 0, pipes = 1, threads = 0;
    mv_kernel_fn sfn = NULL;
    int rows = 0, depth = 0;
    if (mvs_plan(ctx, f, in, out, k, &grid, &smem, &sfn, &threads, &rows, &depth)) { /* one x */
        snprintf(buf, len, "stream rows=%d x %d groups grid=%d x %d warps smem=%dB", rows, depth, grid,
                 threads / 32, smem);
        return DSV4_OK;
    }
    mv_params p;
    memset(&p, 0, sizeof p);
    const dsv4_status st = mv_plan(ctx, f, in, out, k, &p, &grid, &smem, &pipes, err);
    if (st != DSV4_OK) return st;
    snprintf(buf, len, "R=%d nseg=%d S=%d stage=%dB grid=%d x %d pipes smem=%dB%s", p.R, p.nseg, p.S,
             p.stage_bytes, grid, pipes, smem,
             f != MV_IQ2_XXS            ? ""
             : mv_iq2_variant(ctx) == 1 ? " iq2=sel"
                                        : " iq2=mask");
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_matvec(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *w, int64_t in,
                                        int64_t out, const void *x, float *y, struct CUstream_st *stream,
                                        dsv4_error *err) {
    return dsv4_cuda_matvec_experts(ctx, type, w, in, out, 1, NULL, 1, x, 0, y, stream, err);
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_mv(const void **out) {
    out[0] = (const void *)mv_kernel<MV_Q8_0, 0, 1>;
    out[1] = (const void *)mv_kernel<MV_IQ2_XXS, 0, 1>;
    out[2] = (const void *)mv_kernel<MV_Q2_K, 0, 1>;
    out[3] = (const void *)mv_kernel<MV_Q4_K, 0, 1>;
    out[4] = (const void *)mv_kernel<MV_F16, 0, 1>;
    out[5] = (const void *)mv_kernel<MV_IQ2_XXS, 1, 1>;
    out[6] = (const void *)mv_kernel<MV_IQ2_XXS, 1, 3>;
    out[7] = (const void *)mv_kernel<MV_IQ2_XXS, 1, 4>;
    int n = 8;
    for (int upl = 1; upl <= 2; upl++)
        for (int pr = 2; pr <= 4; pr += 2)
            for (int d = 2; d <= 3; d++) out[n++] = (const void *)mvs_kernel_of(upl, pr, d);
    for (int upl = 2; upl <= 4; upl += 2)
        for (int pr = 2; pr <= 4; pr += 2)
            for (int d = 2; d <= 3; d++) out[n++] = (const void *)mvi_kernel_of(upl, pr, d);
    return n;
}
