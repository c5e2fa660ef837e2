/* Wide-tile grouped routed-expert products on int8 tensor cores (units, layout and the exactness
 * argument in cuda_moe_wide.cuh). Per product:
 *   1. the pairs' activations are packed in list order (gate/up: gathered from the quantized
 *      token rows; down: each mid row quantized to Q8_K straight into the pack);
 *   2. a CTA takes one tile (<= 64 pairs of one expert) and rb_per_cta row blocks of 256 weight
 *      rows (gate/up: 128 gate + the same 128 up rows; down: 256 rows). Its steps (row block,
 *      superblock) stream through a 2-4 stage cp.async pipeline: the 256 rows' raw superblock
 *      bytes and the tile's activations for that superblock. Each warp decodes its two m16 tiles
 *      into A fragments in registers and runs mma.m16n8k32 against every 8 pairs; at the end of a
 *      superblock the per-row float update, at the end of a row block the mid (gate/up) or y.
 * The grid runs the row blocks of a tile next to each other: the tile's activations stay in L2
 * while its expert's rows stream once from memory. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_moe_wide.cuh"
#include "backend/cuda/cuda_moe_wide.h"

/* d = a b + c: m16n8k32 and m16n8k16, s8 x s8 -> s32 */
__device__ __forceinline__ void mw_mma32(int32_t d[4], const uint32_t a[4], const uint32_t b[2],
                                         const int32_t c[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
          "r"(c[3]));
}
__device__ __forceinline__ void mw_mma16(int32_t d[4], const uint32_t a[2], uint32_t b, const int32_t c[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

/* ---- activation packs: a warp per (list position, superblock) ---- */
#define MW_PACK_WARPS 8

/* from quantized token rows: pair p reads row p / act_div */
__global__ void __launch_bounds__(MW_PACK_WARPS * 32)
    mw_pack_q8k_kernel(const uint8_t *act, uint64_t act_stride, int act_div, const int32_t *list,
                       const int *n_tiles, const mw_pack pk, int kq, uint8_t *dst) {
    const uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t i = w / (uint64_t)pk.nblk;
    if (i >= (uint64_t)n_tiles[1]) return; /* past the listed pairs */
    const int b = (int)(w - i * (uint64_t)pk.nblk), lane = threadIdx.x & 31;
    const uint8_t *blk = act + (uint64_t)(list[i] / act_div) * act_stride + 292 * (uint64_t)b;
    mw_pack_block(blk, lane, pk, i, b, kq != 0, dst);
}

/* from f32 rows (mid, pair p at p * x_stride): quantized to Q8_K as cu_quant_rows does
 * (act_q8_k_block), through a per-warp block in shared memory */
__global__ void __launch_bounds__(MW_PACK_WARPS * 32)
    mw_pack_f32_kernel(const float *x, uint64_t x_stride, const int32_t *list, const int *n_tiles,
                       const mw_pack pk, int kq, uint8_t *dst) {
    __shared__ __align__(16) uint8_t blk_s[MW_PACK_WARPS][296];
    const uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t i = w / (uint64_t)pk.nblk;
    if (i >= (uint64_t)n_tiles[1]) return;
    const int b = (int)(w - i * (uint64_t)pk.nblk), lane = threadIdx.x & 31;
    uint8_t *blk = blk_s[threadIdx.x >> 5];
    const float4 *xp = (const float4 *)(x + (uint64_t)list[i] * x_stride + 256 * (uint64_t)b + 8 * lane);
    const float4 v0 = xp[0], v1 = xp[1];
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    act_q8_k_block(v, lane, blk);
    __syncwarp();
    mw_pack_block(blk, lane, pk, i, b, kq != 0, dst);
}

/* ---- the product ---- */

/* One superblock of a step: the k-steps' products into per-superblock integer sums, then the min
 * terms and the float update of acc. par: the superblock's parity (IQ2_XXS), a constant. */
template <int K, bool DUAL>
__device__ __forceinline__ void mw_superblock(const uint8_t *st, const mw_layout &lay, int par, int warp,
                                              int lane, int nact, const uint64_t *tab,
                                              float (&acc)[MW_MT][MW_NT][4]) {
    constexpr bool KQ = K != GM_IQ2_XXS;
    const int32_t zero[4] = {0, 0, 0, 0};
    const int s = par;
    const uint8_t *W = st + lay.w, *X = st + lay.x;
    int32_t isum[MW_MT][MW_NT][4];
#pragma unroll
    for (int m = 0; m < MW_MT; m++)
#pragma unroll
        for (int nt = 0; nt < MW_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) isum[m][nt][i] = mw_isum0(K);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        uint32_t a[MW_MT][4];
        int32_t sc[MW_MT][2];
#pragma unroll
        for (int m = 0; m < MW_MT; m++)
            mw_frag_a<K>(W, mw_tile_row(DUAL, warp, m), s, j, lane, tab, a[m], sc[m]);
#pragma unroll
        for (int nt = 0; nt < MW_NT; nt++) {
            if (nt < nact) {
                uint32_t b[2];
                mw_frag_b(X, nt, j, lane, b);
#pragma unroll
                for (int m = 0; m < MW_MT; m++) {
                    if (K == GM_Q2_K) {
                        mw_mma32(isum[m][nt], a[m], b, isum[m][nt]);
                    } else {
                        int32_t d[4];
                        mw_mma32(d, a[m], b, zero);
                        mw_step(isum[m][nt], d, sc[m]);
                    }
                }
            }
        }
    }
    /* end of the superblock: min terms and the float update */
    float dw[MW_MT][2], dm[MW_MT][2];
    uint32_t am[MW_MT][2];
#pragma unroll
    for (int m = 0; m < MW_MT; m++) {
        mw_row_scales<K>(W, mw_tile_row(DUAL, warp, m), s, lane, dw[m], dm[m]);
        if (KQ) mw_frag_min<K>(W, mw_tile_row(DUAL, warp, m), lane, am[m]);
    }
#pragma unroll
    for (int nt = 0; nt < MW_NT; nt++) {
        if (nt < nact) {
            float dx[2];
            mw_frag_dx(st + lay.xd, nt, lane, dx);
            uint32_t blo = 0, bhi = 0;
            if (KQ) mw_frag_bs(st + lay.xb, nt, lane, &blo, &bhi);
#pragma unroll
            for (int m = 0; m < MW_MT; m++) {
                int32_t mn[4] = {0, 0, 0, 0};
                if (KQ) { /* summs = 128 * (m . hi) + (m . lo) */
                    int32_t h[4];
                    mw_mma16(h, am[m], bhi, zero);
                    const int32_t b0 = mw_isum0(K);
                    const int32_t c[4] = {h[0] * 128 + b0, h[1] * 128 + b0, h[2] * 128 + b0, h[3] * 128 + b0};
                    mw_mma16(mn, am[m], blo, c);
                }
                mw_update<K>(acc[m][nt], isum[m][nt], mn, dw[m], dm[m], dx);
            }
        }
    }
}

template <int K, bool DUAL> __global__ void __launch_bounds__(MW_THREADS, 1) mw_kernel(const mw_params p) {
    extern __shared__ __align__(16) uint8_t mw_smem[];
    if ((int)blockIdx.y >= p.n_tiles[0]) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int S = p.lay.stages, nblk = p.in / 256, nact = (mt + 7) >> 3;
    const int rb0 = (int)blockIdx.x * p.rb_per_cta;
    const int nrb = min(p.rb_per_cta, p.n_rb - rb0), nsteps = nrb * nblk;
    int *pid = (int *)(mw_smem + p.lay.pid);
    const uint64_t *tab = (const uint64_t *)(mw_smem + p.lay.tables);
    uint8_t *stage0 = mw_smem + p.lay.stage0;
    if (tid < mt) pid[tid] = p.list[start + tid];

    /* the loader runs S - 1 steps ahead: step lq = (row block lrb, superblock ls) into lbuf */
    int lq = 0, lrb = rb0, ls = 0, lbuf = 0;
    for (int i = 0; i < S - 1; i++) {
        if (lq < nsteps)
            mw_load_stage<K, DUAL>(p, e, start, mt, lrb, ls, stage0 + lbuf * p.lay.stage_bytes, tid);
        mw_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;
    }
    if (K == GM_IQ2_XXS)
        mw_fill_tables((uint64_t *)(mw_smem + p.lay.tables), p.grid, p.signs, tid, MW_THREADS);

    float acc[MW_MT][MW_NT][4];
#pragma unroll
    for (int m = 0; m < MW_MT; m++)
#pragma unroll
        for (int nt = 0; nt < MW_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.0f;
    int rb = rb0, s = 0, buf = 0;
    for (int q = 0; q < nsteps; q++) {
        mw_wait(S);
        __syncthreads(); /* step q landed; every warp is done with the buffer refilled next */
        if (lq < nsteps)
            mw_load_stage<K, DUAL>(p, e, start, mt, lrb, ls, stage0 + lbuf * p.lay.stage_bytes, tid);
        mw_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;

        /* IQ2_XXS: the superblock's parity decides where its words sit (mw_wsrc); as a constant
         * it folds into the decode */
        const uint8_t *st = stage0 + buf * p.lay.stage_bytes;
        if (K == GM_IQ2_XXS && (s & 1))
            mw_superblock<K, DUAL>(st, p.lay, 1, warp, lane, nact, tab, acc);
        else
            mw_superblock<K, DUAL>(st, p.lay, 0, warp, lane, nact, tab, acc);
        if (s == nblk - 1) { /* end of the row block: store and restart */
            const int orow = rb * mw_rb_rows(DUAL);
            if (K == GM_IQ2_XXS) {
#pragma unroll
                for (int m = 0; m < MW_MT; m++)
#pragma unroll
                    for (int nt = 0; nt < MW_NT; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) acc[m][nt][i] = qm_mul(0.125f, acc[m][nt][i]);
            }
#pragma unroll
            for (int nt = 0; nt < MW_NT; nt++) {
                if (nt < nact) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int tok = 8 * nt + 2 * t + (i & 1);
                        if (tok >= mt) continue;
                        const int pr = pid[tok];
                        if constexpr (DUAL) {
                            const int row = orow + mw_out_row(true, warp, 0) + g + 8 * (i >> 1);
                            if (row >= p.n_out) continue;
                            float gv = acc[0][nt][i], uv = acc[1][nt][i];
                            if (p.clamp_on) { /* as moe_mid_kernel and the CPU's store_mid */
                                if (gv > p.clamp) gv = p.clamp;
                                if (uv > p.clamp) uv = p.clamp;
                                if (uv < -p.clamp) uv = -p.clamp;
                            }
                            p.out[(uint64_t)pr * p.out_stride + row] = cu_silu(gv) * uv * p.weights[pr];
                        } else {
#pragma unroll
                            for (int m = 0; m < MW_MT; m++) {
                                const int row = orow + mw_out_row(false, warp, m) + g + 8 * (i >> 1);
                                if (row < p.n_out) p.out[(uint64_t)pr * p.out_stride + row] = acc[m][nt][i];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < MW_MT; m++)
#pragma unroll
                for (int nt = 0; nt < MW_NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.0f;
        }
        buf = buf + 1 == S ? 0 : buf + 1;
        if (++s == nblk) s = 0, rb++;
    }
}

/* ---- host ---- */

typedef void (*mw_fn)(const mw_params);
static mw_fn mw_kernel_of(int kind, bool dual) {
    switch (kind) {
    case GM_IQ2_XXS: return dual ? mw_kernel<GM_IQ2_XXS, true> : mw_kernel<GM_IQ2_XXS, false>;
    case GM_Q2_K: return dual ? mw_kernel<GM_Q2_K, true> : mw_kernel<GM_Q2_K, false>;
    case GM_Q4_K: return dual ? mw_kernel<GM_Q4_K, true> : mw_kernel<GM_Q4_K, false>;
    default: return NULL;
    }
}
static int mw_kind_of(uint32_t type) {
    switch (type) {
    case DSV4_TYPE_IQ2_XXS: return GM_IQ2_XXS;
    case DSV4_TYPE_Q2_K: return GM_Q2_K;
    case DSV4_TYPE_Q4_K: return GM_Q4_K;
    default: return GM_NONE;
    }
}

int cu_moe_mma_mode(void) {
    const char *v = getenv("DSV4_CUDA_MOE_MMA");
    if (v && strcmp(v, "0") == 0) return 0;
    if (v && strcmp(v, "old") == 0) return 1;
    return 2;
}

/* The deepest pipeline (2..4 stages) whose image fits the device; 0 if none does. */
static int mw_stages(const cuda_ctx *c, int kind) {
    for (int s = MW_MAX_STAGES; s >= 2; s--)
        if ((size_t)mw_layout_of(kind, s).total <= c->caps.smem_per_block_optin) return s;
    return 0;
}

static bool mw_side_ok(const cuda_ctx *c, int kind, bool dual, uint64_t in, uint64_t row_bytes,
                       const void *w) {
    if (kind == GM_NONE || in % 256 || in > (1u << 16)) return false;
    /* IQ2_XXS: an even number of superblocks keeps rows 4-aligned and the last copy inside the row */
    if (kind == GM_IQ2_XXS && (in / 256) % 2) return false;
    /* rows and base aligned for the stage copies (4 B; Q4_K 16 B) */
    const uint64_t al = (uint64_t)mw_wsize(kind);
    if (row_bytes % al || row_bytes < in / 256 * (uint64_t)mw_block_bytes(kind) || (uintptr_t)w % al)
        return false;
    const int st = mw_stages(c, kind);
    if (!st) return false;
    const mw_fn f = mw_kernel_of(kind, dual);
    if (cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             mw_layout_of(kind, st).total) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return true;
}

bool cu_moe_wide_ok(const cuda_ctx *c, uint32_t gu_type, uint32_t down_type, uint64_t in, uint64_t ff,
                    uint64_t embd, uint64_t gu_row_bytes, uint64_t down_row_bytes, const void *gd,
                    const void *ud, const void *dd) {
    if (c->caps.cc_major < 8) return false; /* mma.sync .s8, cp.async */
    if (embd == 0 || embd > (1u << 24) || ff == 0) return false;
    return mw_side_ok(c, mw_kind_of(gu_type), true, in, gu_row_bytes, gd) &&
           mw_side_ok(c, mw_kind_of(gu_type), true, in, gu_row_bytes, ud) &&
           mw_side_ok(c, mw_kind_of(down_type), false, ff, down_row_bytes, dd);
}

size_t cu_moe_wide_scratch_bytes(uint32_t gu_type, uint32_t down_type, uint64_t P, uint64_t in, uint64_t ff) {
    const uint64_t a = mw_pack_of(P, in, mw_kq(mw_kind_of(gu_type))).total;
    const uint64_t b = mw_pack_of(P, ff, mw_kq(mw_kind_of(down_type))).total;
    return (size_t)(a > b ? a : b);
}

/* Row blocks per CTA: 4 (the pipeline runs on across them, so its fill is paid once per 4), fewer
 * when the grid would be under ~3 CTAs per SM (tiles: at least one per expert hit). */
int cu_moe_wide_rb_per_cta(const cuda_ctx *c, int n_rb, uint64_t P, uint64_t E) {
    uint64_t tiles = (P + CU_MOE_WIDE_TILE - 1) / CU_MOE_WIDE_TILE;
    if (tiles < (E < P ? E : P)) tiles = E < P ? E : P;
    int g = 4;
    while (g > 1 && tiles * (uint64_t)((n_rb + g - 1) / g) < 3 * (uint64_t)c->caps.sm_count) g /= 2;
    return g < n_rb ? g : n_rb;
}

static dsv4_status mw_launch(cuda_ctx *c, int kind, bool dual, mw_params *p, const cu_moe_wide_args *a,
                             dsv4_error *err) {
    const int st = mw_stages(c, kind);
    if (!st) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe wide: no pipeline fits the device");
    p->lay = mw_layout_of(kind, st);
    p->n_rb = (p->n_out + mw_rb_rows(dual) - 1) / mw_rb_rows(dual);
    p->rb_per_cta = cu_moe_wide_rb_per_cta(c, p->n_rb, a->P, a->n_expert);
    const dim3 grid((unsigned)((p->n_rb + p->rb_per_cta - 1) / p->rb_per_cta), (unsigned)a->max_tiles);
    mw_kernel_of(kind, dual)<<<grid, MW_THREADS, (size_t)p->lay.total, c->stream>>>(*p);
    return cu_launched(err, dual ? "moe wide gate/up" : "moe wide down");
}

static dsv4_status mw_check(const cu_moe_wide_args *a, dsv4_error *err) {
    if (mw_kind_of(a->gu_type) == GM_NONE || mw_kind_of(a->down_type) == GM_NONE || a->max_tiles > 65535)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe wide: %s/%s experts, %llu tiles",
                         dsv4_type_name(a->gu_type), dsv4_type_name(a->down_type),
                         (unsigned long long)a->max_tiles);
    return DSV4_OK;
}

dsv4_status cu_moe_wide_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err) {
    dsv4_status st = mw_check(a, err);
    if (st != DSV4_OK) return st;
    const int kg = mw_kind_of(a->gu_type);
    uint8_t *pack = (uint8_t *)a->scratch;
    const unsigned pack_threads = MW_PACK_WARPS * 32;
    const mw_pack pg = mw_pack_of(a->P, a->in, mw_kq(kg));
    mw_pack_q8k_kernel<<<cu_blocks(a->P * pg.nblk * 32, pack_threads), pack_threads, 0, c->stream>>>(
        a->xq, a->xq_stride, (int)a->k, a->list, a->n_tiles, pg, mw_kq(kg), pack);
    if ((st = cu_launched(err, "moe wide pack gate/up")) != DSV4_OK) return st;
    mw_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->gd, p.w1 = a->ud;
    p.row_bytes = a->gu_row_bytes, p.expert_bytes = a->ff * a->gu_row_bytes;
    p.n_out = (int)a->ff, p.in = (int)a->in;
    p.pack = pack, p.pk = pg;
    p.tiles = a->tiles, p.n_tiles = a->n_tiles, p.list = a->list;
    p.weights = a->weights, p.clamp = a->clamp, p.clamp_on = a->clamp > 1.0e-6f;
    p.out = a->mid, p.out_stride = a->ff;
    p.grid = c->d_iq2_grid, p.signs = c->d_iq2_signs;
    return mw_launch(c, kg, true, &p, a, err);
}

dsv4_status cu_moe_wide_down(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err) {
    dsv4_status st = mw_check(a, err);
    if (st != DSV4_OK) return st;
    const int kd = mw_kind_of(a->down_type);
    uint8_t *pack = (uint8_t *)a->scratch;
    const unsigned pack_threads = MW_PACK_WARPS * 32;
    const mw_pack pd = mw_pack_of(a->P, a->ff, mw_kq(kd));
    mw_pack_f32_kernel<<<cu_blocks(a->P * pd.nblk * 32, pack_threads), pack_threads, 0, c->stream>>>(
        a->mid, a->ff, a->list, a->n_tiles, pd, mw_kq(kd), pack);
    if ((st = cu_launched(err, "moe wide pack down")) != DSV4_OK) return st;
    mw_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->dd, p.w1 = NULL;
    p.row_bytes = a->down_row_bytes, p.expert_bytes = a->embd * a->down_row_bytes;
    p.n_out = (int)a->embd, p.in = (int)a->ff;
    p.pack = pack, p.pk = pd;
    p.tiles = a->tiles, p.n_tiles = a->n_tiles, p.list = a->list;
    p.out = a->y, p.out_stride = a->embd;
    p.grid = c->d_iq2_grid, p.signs = c->d_iq2_signs;
    return mw_launch(c, kd, false, &p, a, err);
}
