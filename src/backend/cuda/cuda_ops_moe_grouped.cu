/* Grouped routed experts for prefill chunks (n >= 2). The generic path computes every (token,
 * slot) pair against its expert on its own, so each selected expert's weights are read once per
 * token. Here, all on the stream (no host sync):
 *   1. the n input rows are quantized once (Q8_K, or Q8_0 for Q8_0 experts);
 *   2. one CTA builds per-expert lists of pairs t*k + s (counting sort; within an expert, in
 *      pair order) and cuts them into tiles of up to MG_TT pairs;
 *   3. gate and up: a CTA per (row tile, expert tile); each thread owns one gate or up row, reads
 *      it once and takes its dot with every pair of the tile; the up thread of a row then writes
 *      mid = silu(min(g, c)) * clamp(u, +-c) * w for each pair;
 *   4. each mid row is quantized for the down weights;
 *   5. down: the same tiles, y per pair;
 *   6. out[t] = ((0 + y_0) + y_1) + ... in slot order, as the CPU sums.
 * Each product is quant_dot_* bit for bit (cuda_moe_grouped.cuh), so the op equals the generic
 * path and the CPU. DSV4_CUDA_MOE_GROUPED=0 turns it off. IQ2_XXS / Q2_K / Q4_K experts on sm_80+
 * take tensor-core products for steps 3 to 5: by default the wide-tile kernels of
 * cuda_ops_moe_wide.cu (tiles of 64 pairs, activations packed per product), else (shapes they do
 * not take, or DSV4_CUDA_MOE_MMA=old) those of cuda_ops_moe_mma.cu (tiles of 16 or 32 pairs);
 * DSV4_CUDA_MOE_MMA=0 keeps the scalar kernels below. Chunks of >= 256 tokens with IQ2_XXS gate/up
 * or Q2_K down take the f16 tensor-core products of cuda_ops_moe_half.cu instead (NOT bitwise; the
 * gate there, DSV4_CUDA_MOE_F16=0 turns them off), the other product on the wide kernel. On a
 * compute capability 9.0 device with DSV4_CUDA_MOE_X16=1 both products of IQ2_XXS gate/up and Q2_K
 * down experts take the exact warpgroup kernels of cuda_ops_moe_x16.cu first wherever the wide or
 * f16 ones would run (bitwise the wide ones; off by default: slower than the f16 ones so far). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_grouped.cuh"
#include "backend/cuda/cuda_moe_grouped.h"
#include "backend/cuda/cuda_moe_half.h"
#include "backend/cuda/cuda_moe_mma.h"
#include "backend/cuda/cuda_moe_wide.h"
#include "backend/cuda/cuda_moe_x16.h"

#define MG_THREADS 256
#define MG_ROWS_DUAL (MG_THREADS / 2) /* gate/up CTA: 128 gate rows and the same 128 up rows */
#define MG_IDX_THREADS 1024
#define MG_MAX_EXPERTS 4096
#define MG_SMEM_DEFAULT (48 * 1024)

static int mg_kind_of(uint32_t type) {
    switch (type) {
    case DSV4_TYPE_Q8_0: return GM_Q8_0;
    case DSV4_TYPE_Q2_K: return GM_Q2_K;
    case DSV4_TYPE_Q4_K: return GM_Q4_K;
    case DSV4_TYPE_IQ2_XXS: return GM_IQ2_XXS;
    default: return GM_NONE;
    }
}

/* Per-expert pair lists and tiles. Counts with all threads; then warp 0 scans the counts, writes
 * the tiles (expert, first list entry, pairs) and scatters the pairs stably: lanes holding the
 * same expert take consecutive places in lane order (match_any), chunk after chunk. A pair whose
 * expert id is out of range is left out (the sum kernel makes its slot NaN). n_tiles[1] gets the
 * number of listed pairs. STAGE: the counting pass also copies the ids into shared memory, so the
 * one-warp scatter reads them there (session 14: its 384 chunks of a 2048-token chunk each waited
 * for a global load, ~100 us per layer); the same lists. */
__global__ void __launch_bounds__(MG_IDX_THREADS)
    mg_index_kernel(const int32_t *sel, int n_pairs, int n_expert, int tt, int4 *tiles, int *n_tiles,
                    int32_t *list, bool stage) {
    extern __shared__ int mg_idx_sh[];
    int *cnt = mg_idx_sh, *cur = mg_idx_sh + n_expert, *ssel = mg_idx_sh + 2 * n_expert;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
        const int e = sel[i];
        if (stage) ssel[i] = e;
        if (e >= 0 && e < n_expert) atomicAdd(&cnt[e], 1);
    }
    if (stage) sel = ssel; /* after the barrier below: every id staged */
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    int pbase = 0, tbase = 0;
    for (int e0 = 0; e0 < n_expert; e0 += 32) {
        const int e = e0 + lane;
        const int c = e < n_expert ? cnt[e] : 0, nt = (c + tt - 1) / tt;
        int ic = c, it = nt; /* inclusive scans over the lanes */
        for (int o = 1; o < 32; o <<= 1) {
            const int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, it, o);
            if (lane >= o) ic += a, it += b;
        }
        const int off = pbase + ic - c, toff = tbase + it - nt;
        if (e < n_expert) cur[e] = off;
        for (int j = 0; j < nt; j++) tiles[toff + j] = make_int4(e, off + j * tt, min(tt, c - j * tt), 0);
        pbase += __shfl_sync(0xffffffffu, ic, 31);
        tbase += __shfl_sync(0xffffffffu, it, 31);
    }
    if (lane == 0) n_tiles[0] = tbase, n_tiles[1] = pbase;
    __syncwarp();
    for (int i0 = 0; i0 < n_pairs; i0 += 32) {
        const int i = i0 + lane;
        const int e = i < n_pairs ? sel[i] : -1;
        const bool ok = e >= 0 && e < n_expert;
        const unsigned same = __match_any_sync(0xffffffffu, ok ? e : -1);
        const unsigned below = same & ((1u << lane) - 1u);
        if (ok) list[cur[e] + __popc(below)] = i;
        __syncwarp();
        if (ok && below == 0) cur[e] += __popc(same);
        __syncwarp();
    }
}

struct mg_params {
    const uint8_t *w0, *w1; /* expert tensors (w1: up, gate/up kernel only) */
    uint64_t row_bytes, expert_bytes;
    int n_out, in;
    const uint8_t *act; /* quantized activation rows; pair p uses row p / act_div */
    uint64_t act_stride;
    int act_div;
    const int4 *tiles;
    const int *n_tiles;
    const int32_t *list;
    const float *weights; /* route weights per pair (gate/up kernel) */
    float clamp;
    int clamp_on;
    float *out; /* mid (gate/up) or y (down): pair p's row at p * out_stride */
    uint64_t out_stride;
    const uint64_t *grid;
    const uint8_t *signs;
};

/* Dynamic shared memory of a grouped CTA: the tile, its pair ids, the gate values (gate/up), the
 * IQ2_XXS tables. */
static size_t mg_smem_bytes(int kind, int in, bool dual) {
    return mg_xtile_bytes(kind, in) + 32 + (dual ? (size_t)MG_TT * MG_ROWS_DUAL * 4 : 0) +
           (kind == GM_IQ2_XXS ? 384 * 8 : 0);
}

template <int K, bool DUAL> __global__ void __launch_bounds__(MG_THREADS) mg_kernel(const mg_params p) {
    extern __shared__ __align__(16) uint8_t mg_smem[];
    if ((int)blockIdx.y >= *p.n_tiles) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const mg_xtile x = mg_xtile_at(mg_smem, K, p.in);
    uint8_t *tail = mg_smem + mg_xtile_bytes(K, p.in);
    int *pid = (int *)tail;
    float *gsh = (float *)(tail + 32);
    uint64_t *grid_s = (uint64_t *)(tail + 32 + (DUAL ? MG_TT * MG_ROWS_DUAL * 4 : 0));
    uint64_t *smask_s = grid_s + 256;
    if ((int)threadIdx.x < mt) pid[threadIdx.x] = p.list[start + threadIdx.x];
    if (K == GM_IQ2_XXS) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) grid_s[i] = p.grid[i];
        for (int i = threadIdx.x; i < 128; i += blockDim.x) smask_s[i] = mg_sign_mask(p.signs, i);
    }
    __syncthreads();
    constexpr int WPB = K == GM_Q8_0 ? 9 : 73; /* = mg_act_block_words(K) */
    const int wpr = x.nblk * WPB;
    for (int t = 0; t < mt; t++) {
        const uint32_t *row = (const uint32_t *)(p.act + (uint64_t)(pid[t] / p.act_div) * p.act_stride);
        for (int i = threadIdx.x; i < wpr; i += blockDim.x) {
            const int b = i / WPB;
            mg_stage_put(x, K, t, b, i - b * WPB, row[i]);
        }
    }
    __syncthreads();
    constexpr int ROWS = DUAL ? MG_ROWS_DUAL : MG_THREADS;
    const int lr = (int)threadIdx.x % ROWS, which = (int)threadIdx.x / ROWS;
    const int r = (int)blockIdx.x * ROWS + lr;
    float acc[MG_TT];
#pragma unroll
    for (int t = 0; t < MG_TT; t++) acc[t] = 0.0f;
    if (r < p.n_out) {
        const uint8_t *w = (which ? p.w1 : p.w0) + (uint64_t)e * p.expert_bytes + (uint64_t)r * p.row_bytes;
        mg_row<K>(w, x, mt, grid_s, smask_s, acc);
    }
    if constexpr (DUAL) {
        if (which == 0 && r < p.n_out) {
#pragma unroll
            for (int t = 0; t < MG_TT; t++)
                if (t < mt) gsh[t * ROWS + lr] = acc[t];
        }
        __syncthreads();
        if (which == 1 && r < p.n_out) {
#pragma unroll
            for (int t = 0; t < MG_TT; t++) {
                if (t < mt) {
                    const int pr = pid[t];
                    float gv = gsh[t * ROWS + lr], uv = acc[t];
                    p.out[(uint64_t)pr * p.out_stride + r] =
                        cu_swiglu_mid(gv, uv, p.clamp_on, p.clamp) * p.weights[pr];
                }
            }
        }
    } else {
        if (r < p.n_out) {
#pragma unroll
            for (int t = 0; t < MG_TT; t++)
                if (t < mt) p.out[(uint64_t)pid[t] * p.out_stride + r] = acc[t];
        }
    }
}

/* out[t][d] = sum over slots in order from 0.0f; a slot with an expert id out of range is NaN. */
__global__ void mg_sum_kernel(const float *y, const int32_t *sel, int n_expert, uint32_t n, uint32_t k,
                              uint32_t embd, float *out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n * embd) return;
    const uint64_t t = i / embd, d = i % embd;
    float acc = 0.0f;
    for (uint32_t s = 0; s < k; s++) {
        const int32_t e = sel[t * k + s];
        acc += e >= 0 && e < n_expert ? y[(t * k + s) * embd + d] : __int_as_float(0x7fc00000);
    }
    out[i] = acc;
}

/* The same sums four outputs per thread (embd % 4 == 0, y and out 16-byte aligned): each output
 * still adds its k slots in slot order from 0.0, so the bits are mg_sum_kernel's; the ids are read
 * once per four outputs and the rows as float4 (session 14: 89 us per 2048-token layer before). */
__global__ void mg_sum4_kernel(const float4 *y, const int32_t *sel, int n_expert, uint32_t n, uint32_t k,
                               uint32_t embd4, float4 *out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n * embd4) return;
    const uint64_t t = i / embd4, d = i % embd4;
    const float nan = __int_as_float(0x7fc00000);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (uint32_t s = 0; s < k; s++) {
        const int32_t e = sel[t * k + s];
        const float4 v =
            e >= 0 && e < n_expert ? y[(t * k + s) * embd4 + d] : make_float4(nan, nan, nan, nan);
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    out[i] = acc;
}

/* The slot sum of n tokens (out = sum over the k slots of y, in slot order): four outputs a thread
 * where the rows allow it. */
static void mg_sum_launch(cuda_ctx *c, const float *y, const int32_t *sel, uint64_t E, uint32_t n, uint32_t k,
                          uint64_t embd, float *out) {
    if (embd % 4 == 0 && (((uintptr_t)y | (uintptr_t)out) & 15) == 0)
        mg_sum4_kernel<<<cu_blocks((uint64_t)n * embd / 4, 256), 256, 0, c->stream>>>(
            (const float4 *)y, sel, (int)E, n, k, (uint32_t)(embd / 4), (float4 *)out);
    else
        mg_sum_kernel<<<cu_blocks((uint64_t)n * embd, 256), 256, 0, c->stream>>>(y, sel, (int)E, n, k,
                                                                                 (uint32_t)embd, out);
}

typedef void (*mg_fn)(const mg_params);
static mg_fn mg_kernel_of(int kind, bool dual) {
    switch (kind) {
    case GM_Q8_0: return dual ? mg_kernel<GM_Q8_0, true> : mg_kernel<GM_Q8_0, false>;
    case GM_Q2_K: return dual ? mg_kernel<GM_Q2_K, true> : mg_kernel<GM_Q2_K, false>;
    case GM_Q4_K: return dual ? mg_kernel<GM_Q4_K, true> : mg_kernel<GM_Q4_K, false>;
    case GM_IQ2_XXS: return dual ? mg_kernel<GM_IQ2_XXS, true> : mg_kernel<GM_IQ2_XXS, false>;
    default: return NULL;
    }
}

/* Can this kernel get smem bytes of dynamic shared memory (raising its limit if needed)? */
static bool mg_smem_ok(const cuda_ctx *c, mg_fn f, size_t smem) {
    if (smem <= MG_SMEM_DEFAULT) return true;
    if (smem > c->caps.smem_per_block_optin) return false;
    if (cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return true;
}

static mx_params mg_mma_params(const mg_params &p) {
    mx_params q;
    memset(&q, 0, sizeof q);
    q.w0 = p.w0, q.w1 = p.w1;
    q.row_bytes = p.row_bytes, q.expert_bytes = p.expert_bytes;
    q.n_out = p.n_out, q.in = p.in;
    q.act = p.act, q.act_stride = p.act_stride, q.act_div = p.act_div;
    q.tiles = p.tiles, q.n_tiles = p.n_tiles, q.list = p.list;
    q.weights = p.weights, q.clamp = p.clamp, q.clamp_on = p.clamp_on;
    q.out = p.out, q.out_stride = p.out_stride;
    q.grid = p.grid, q.signs = p.signs;
    return q;
}

static bool mg_enabled(void) {
    const char *v = getenv("DSV4_CUDA_MOE_GROUPED");
    return !(v && strcmp(v, "0") == 0);
}

dsv4_status cu_moe_grouped(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up,
                           const dsv4_tensor *down, const uint8_t *gd, const uint8_t *ud, const uint8_t *dd,
                           const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                           float clamp, float *out, dsv4_error *err) {
    /* ---- decline (nothing launched) ---- */
    if (n < 2 || k == 0 || c->generic_only || c->numerics != DSV4_NUMERICS_DS4 || !mg_enabled())
        return DSV4_ERR_UNSUPPORTED;
    const int kg = mg_kind_of(gate->type), kd = mg_kind_of(down->type);
    if (kg == GM_NONE || kd == GM_NONE || up->type != gate->type) return DSV4_ERR_UNSUPPORTED;
    const uint64_t E = gate->ne[2], in = gate->ne[0], ff = gate->ne[1], embd = down->ne[1];
    const uint64_t P = (uint64_t)n * k;
    if (E == 0 || E > MG_MAX_EXPERTS || in % mg_block_elems(kg) || ff % mg_block_elems(kd) ||
        in > (1u << 20) || ff > (1u << 20) || embd > (1u << 30) || P > (1u << 24))
        return DSV4_ERR_UNSUPPORTED;
    /* 4-byte aligned bases (each tensor is its own cudaMalloc); rows of whole blocks */
    if (((uintptr_t)gd | (uintptr_t)ud | (uintptr_t)dd) & 3) return DSV4_ERR_UNSUPPORTED;
    /* the wide tensor-core products (cuda_ops_moe_wide.cu) where they apply, else the older ones
     * (cuda_ops_moe_mma.cu), else the scalar ones */
    const int mma_mode = cu_moe_mma_mode(), mode = mg_mma_chunk(gate->type, n, P, E) ? mma_mode : 0;
    const uint64_t wide_tiles =
        (P + (CU_MOE_WIDE_TILE - 1) * (E < P ? E : P) + CU_MOE_WIDE_TILE - 1) / CU_MOE_WIDE_TILE;
    const bool wide_ok =
        mma_mode == 2 && wide_tiles <= 65535u &&
        cu_moe_wide_ok(c, gate->type, down->type, in, ff, embd, gate->row_bytes, down->row_bytes, gd, ud, dd);
    /* the f16 gate/up (cuda_ops_moe_half.cu, not bitwise) where it applies, whatever the exact
     * kernels' crossover says, with the wide kernel's down */
    cu_moe_half_plan plan;
    int half = wide_ok ? cu_moe_half_ok(c, gate, up, down, n, gd, ud, dd, &plan) : 0;
    /* the exact warpgroup products (cuda_ops_moe_x16.cu, sm_90, DSV4_CUDA_MOE_X16=1) where the wide
     * or the f16 ones would run: each product they take leaves the others */
    cu_moe_x16_plan xplan;
    const int x16 = wide_ok && (half || mode == 2) ? cu_moe_x16_ok(c, gate, up, down, gd, ud, dd, &xplan) : 0;
    half &= ~x16;
    const bool wide = x16 || half || (mode == 2 && wide_ok);
    const int mma_bn = cu_moe_mma_tile(P, E);
    const bool mma =
        !wide && mode >= 1 && embd <= 65535u * 128u &&
        cu_moe_mma_ok(c, gate->type, down->type, in, ff, gate->row_bytes, down->row_bytes, mma_bn);
    const uint64_t tt = wide ? (uint64_t)CU_MOE_WIDE_TILE : mma ? (uint64_t)mma_bn : MG_TT;
    const uint64_t max_tiles = (P + (tt - 1) * (E < P ? E : P) + tt - 1) / tt;
    if (max_tiles > (wide || !mma ? 65535u : (1u << 30))) return DSV4_ERR_UNSUPPORTED;
    const mg_fn fgu = mg_kernel_of(kg, true), fd = mg_kernel_of(kd, false);
    const size_t smem_gu = mg_smem_bytes(kg, (int)in, true), smem_d = mg_smem_bytes(kd, (int)ff, false);
    if (!wide && !mma && (!mg_smem_ok(c, fgu, smem_gu) || !mg_smem_ok(c, fd, smem_d)))
        return DSV4_ERR_UNSUPPORTED;

    /* ---- scratch (grow-only: no allocation once the largest chunk has run) ---- */
    const size_t tiles_bytes = (size_t)max_tiles * sizeof(int4);
    uint8_t *idx = (uint8_t *)cu_scratch(c, CU_SLOT_G, tiles_bytes + 16 + P * sizeof(int32_t), err);
    float *mid = idx ? (float *)cu_scratch(c, CU_SLOT_MID, P * ff * sizeof(float), err) : NULL;
    float *y = mid ? (float *)cu_scratch(c, CU_SLOT_Y, P * embd * sizeof(float), err) : NULL;
    if (!y) return DSV4_ERR_NOMEM;
    void *pack = NULL; /* the wide kernels' activation packs, or the f16 token rows */
    if (wide) {
        size_t pb = cu_moe_wide_scratch_bytes(gate->type, down->type, P, in, ff);
        const size_t hg = (half & 1) ? cu_moe_half_scratch_bytes(n, in) : 0,
                     hd = (half & 2) ? cu_moe_half_scratch_bytes(P, ff) : 0,
                     xb = x16 ? cu_moe_x16_scratch_bytes(n, P, in, ff) : 0;
        pb = pb > hg ? pb : hg;
        pb = pb > xb ? pb : xb;
        if (!(pack = cu_scratch(c, CU_SLOT_U, pb > hd ? pb : hd, err))) return DSV4_ERR_NOMEM;
    }
    int4 *tiles = (int4 *)idx;
    int *n_tiles = (int *)(idx + tiles_bytes);
    int32_t *list = (int32_t *)(idx + tiles_bytes + 16);

    /* ---- 1. input rows ---- */
    const void *xq;
    uint64_t xq_stride;
    dsv4_status st = cu_quant_rows(c, gate->type, x, in, in, n, CU_SLOT_XQ, &xq, &xq_stride, err);
    if (st != DSV4_OK) return st;
    /* ---- 2. lists and tiles ---- */
    const size_t idx_smem = 2 * E * sizeof(int), staged = idx_smem + P * sizeof(int);
    const bool stage = staged <= c->caps.smem_per_block_optin;
    if (stage && staged > MG_SMEM_DEFAULT &&
        cudaFuncSetAttribute(mg_index_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)staged) !=
            cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "moe grouped lists: shared memory %zu B: %s", staged,
                         cudaGetErrorString(cudaGetLastError()));
    mg_index_kernel<<<1, MG_IDX_THREADS, stage ? staged : idx_smem, c->stream>>>(sel, (int)P, (int)E, (int)tt,
                                                                                 tiles, n_tiles, list, stage);
    if ((st = cu_launched(err, "moe grouped lists")) != DSV4_OK) return st;
    if (wide) { /* ---- 3. to 5. in cuda_ops_moe_wide.cu ---- */
        cu_moe_wide_args a;
        memset(&a, 0, sizeof a);
        a.gu_type = gate->type, a.down_type = down->type;
        a.gd = gd, a.ud = ud, a.dd = dd;
        a.gu_row_bytes = gate->row_bytes, a.down_row_bytes = down->row_bytes;
        a.in = in, a.ff = ff, a.embd = embd, a.P = P, a.n_expert = E, a.k = k;
        a.xq = (const uint8_t *)xq, a.xq_stride = xq_stride;
        a.tiles = tiles, a.n_tiles = n_tiles, a.list = list, a.max_tiles = max_tiles;
        a.weights = weights, a.clamp = clamp;
        a.mid = mid, a.y = y, a.scratch = pack;
        st = (x16 & 1)    ? cu_moe_x16_gate_up(c, &a, n, &xplan, err)
             : (half & 1) ? cu_moe_half_gate_up(c, &a, n, &plan, err)
                          : cu_moe_wide_gate_up(c, &a, err);
        if (st != DSV4_OK) return st;
        st = (x16 & 2)    ? cu_moe_x16_down(c, &a, err)
             : (half & 2) ? cu_moe_half_down(c, &a, &plan, err)
                          : cu_moe_wide_down(c, &a, err);
        if (st != DSV4_OK) return st;
        mg_sum_launch(c, y, sel, E, n, k, embd, out);
        return cu_launched(err, "moe grouped sum");
    }
    /* ---- 3. gate and up -> mid ---- */
    mg_params p;
    memset(&p, 0, sizeof p);
    p.w0 = gd, p.w1 = ud;
    p.row_bytes = gate->row_bytes, p.expert_bytes = ff * gate->row_bytes;
    p.n_out = (int)ff, p.in = (int)in;
    p.act = (const uint8_t *)xq, p.act_stride = xq_stride, p.act_div = (int)k;
    p.tiles = tiles, p.n_tiles = n_tiles, p.list = list;
    p.weights = weights, p.clamp = clamp, p.clamp_on = clamp > 1.0e-6f;
    p.out = mid, p.out_stride = ff;
    p.grid = c->d_iq2_grid, p.signs = c->d_iq2_signs;
    if (mma) {
        const mx_params q = mg_mma_params(p);
        st = cu_moe_mma_launch(c, gate->type, true, mma_bn, &q, max_tiles, err);
    } else {
        const dim3 ggu((unsigned)((ff + MG_ROWS_DUAL - 1) / MG_ROWS_DUAL), (unsigned)max_tiles);
        fgu<<<ggu, MG_THREADS, smem_gu, c->stream>>>(p);
        st = cu_launched(err, "moe grouped gate/up");
    }
    if (st != DSV4_OK) return st;
    /* ---- 4. mid rows quantized for the down weights ---- */
    const void *mq;
    uint64_t mq_stride;
    st = cu_quant_rows(c, down->type, mid, ff, ff, (uint32_t)P, CU_SLOT_MIDQ, &mq, &mq_stride, err);
    if (st != DSV4_OK) return st;
    /* ---- 5. down -> y ---- */
    p.w0 = dd, p.w1 = NULL;
    p.row_bytes = down->row_bytes, p.expert_bytes = embd * down->row_bytes;
    p.n_out = (int)embd, p.in = (int)ff;
    p.act = (const uint8_t *)mq, p.act_stride = mq_stride, p.act_div = 1;
    p.weights = NULL;
    p.out = y, p.out_stride = embd;
    if (mma) {
        const mx_params q = mg_mma_params(p);
        st = cu_moe_mma_launch(c, down->type, false, mma_bn, &q, max_tiles, err);
    } else {
        const dim3 gd3((unsigned)((embd + MG_THREADS - 1) / MG_THREADS), (unsigned)max_tiles);
        fd<<<gd3, MG_THREADS, smem_d, c->stream>>>(p);
        st = cu_launched(err, "moe grouped down");
    }
    if (st != DSV4_OK) return st;
    /* ---- 6. slots summed in order ---- */
    mg_sum_launch(c, y, sel, E, n, k, embd, out);
    return cu_launched(err, "moe grouped sum");
}
