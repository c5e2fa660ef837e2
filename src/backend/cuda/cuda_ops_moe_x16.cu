/* The exact routed-expert prefill products on Hopper warpgroup tensor cores (units, layout and the
 * exactness argument in cuda_moe_x16.cuh). Per product:
 *   1. the activation rows are packed once: f16 of their Q8_K codes in the kernels' k order
 *      (gate/up: the token rows, a heavy superblock split into lo / hi codes; down: each mid row
 *      quantized to Q8_K as the CPU does, its block sums beside it);
 *   2. a CTA of two warpgroups takes one tile (<= 64 pairs of one expert) and rb_per_cta row
 *      blocks; its steps (row block, superblock) stream through a cp.async pipeline: 128 weight
 *      rows' raw superblock bytes (staged as the wide kernel stages them), the tile's B image and
 *      the pairs' d. Each warp decodes its 16 rows sub-block by sub-block into f16 A registers;
 *      wgmma.m64nNk16 (N = the tile's pairs rounded up to 16) sums every superblock exactly; the
 *      CPU's float update follows per superblock, the mid (gate/up) or y (down) per row block.
 * This file is built for sm_90a only: its kernels exist in no other image, and cu_moe_x16_ok
 * takes them only on a compute capability 9.0 device whose runtime reports them. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh" /* act_q8_k_block */
#include "backend/cuda/cuda_moe_x16.cuh"
#include "backend/cuda/cuda_moe_x16.h"
#include "backend/cuda/cuda_wgmma_x16.cuh"

__device__ __forceinline__ void x16_cp_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void x16_cp16(uint8_t *dst, const uint8_t *src) { mw_copy()(dst, src, 16); }
__device__ __forceinline__ void x16_cp4(uint8_t *dst, const uint8_t *src) { mw_copy()(dst, src, 4); }

/* ---- packs: a warp per (row, superblock) ---- */
#define X16_PACK_WARPS 8

__device__ __forceinline__ void x16_store8(uint8_t *dst, const uint16_t h[8]) {
    *(uint4 *)dst =
        make_uint4((uint32_t)h[0] | ((uint32_t)h[1] << 16), (uint32_t)h[2] | ((uint32_t)h[3] << 16),
                   (uint32_t)h[4] | ((uint32_t)h[5] << 16), (uint32_t)h[6] | ((uint32_t)h[7] << 16));
}

/* gate/up: token rows of Q8_K blocks (292 B: f32 d, int8 qs[256], int16 bsums[16]) */
__global__ void __launch_bounds__(X16_PACK_WARPS * 32)
    x16_pack_tok_kernel(const uint8_t *xq, uint64_t xq_stride, uint32_t n, const x16_pack pk, uint8_t *dst) {
    const uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t r = w / (uint64_t)pk.nblk;
    if (r >= n) return;
    const int b = (int)(w - r * (uint64_t)pk.nblk), lane = threadIdx.x & 31;
    const uint8_t *blk = xq + r * xq_stride + 292 * (uint64_t)b;
    const int8_t *qs = (const int8_t *)(blk + 4);
    uint32_t q2 = 0;
    for (int i = 0; i < 8; i++) q2 += (uint32_t)((int)qs[8 * lane + i] * (int)qs[8 * lane + i]);
    for (int o = 16; o > 0; o >>= 1) q2 += __shfl_xor_sync(0xffffffffu, q2, o);
    uint16_t h1[8], hl[8], hh[8];
    x16_pack_lane(qs, lane, h1, hl, hh);
    const uint64_t off = (r * (uint64_t)pk.nblk + b) * 512 + 16 * lane; /* bytes */
    x16_store8(dst + pk.b1 + off, h1);
    x16_store8(dst + pk.blo + off, hl);
    x16_store8(dst + pk.bhi + off, hh);
    if (lane == 0) {
        *(uint32_t *)(dst + pk.dx + 4 * (r * pk.nblk + b)) = *(const uint32_t *)blk;
        *(uint32_t *)(dst + pk.q2 + 4 * (r * pk.nblk + b)) = q2;
    }
}

/* down: the f32 mid rows (pair p at p * x_stride), each block quantized as cu_quant_rows does */
__global__ void __launch_bounds__(X16_PACK_WARPS * 32)
    x16_pack_mid_kernel(const float *x, uint64_t x_stride, uint64_t rows, const x16_pack pk, uint8_t *dst) {
    __shared__ __align__(16) uint8_t blk_s[X16_PACK_WARPS][296];
    const uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t r = w / (uint64_t)pk.nblk;
    if (r >= rows) return;
    const int b = (int)(w - r * (uint64_t)pk.nblk), lane = threadIdx.x & 31;
    uint8_t *blk = blk_s[threadIdx.x >> 5];
    const float4 *xp = (const float4 *)(x + r * x_stride + 256 * (uint64_t)b + 8 * lane);
    const float4 v0 = xp[0], v1 = xp[1];
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    act_q8_k_block(v, lane, blk);
    __syncwarp();
    uint16_t h1[8], hl[8], hh[8];
    x16_pack_lane((const int8_t *)(blk + 4), lane, h1, hl, hh);
    x16_store8(dst + pk.b1 + (r * (uint64_t)pk.nblk + b) * 512 + 16 * lane, h1);
    if (lane < 16) {
        const int16_t bs = (int16_t)(blk[260 + 2 * lane] | (blk[261 + 2 * lane] << 8));
        *(uint16_t *)(dst + pk.bm + ((r * (uint64_t)pk.nblk + b) * 16 + lane) * 2) = mh_f2h((float)bs);
    }
    if (lane == 0) *(uint32_t *)(dst + pk.dx + 4 * (r * pk.nblk + b)) = *(const uint32_t *)blk;
}

/* ---- the product ---- */
struct x16_params {
    const uint8_t *w0, *w1; /* expert tensors (w1: up, gate/up only) */
    uint64_t row_bytes, expert_bytes;
    int n_out, in, kdiv; /* pack row of pair p: p / kdiv */
    const uint8_t *pack;
    x16_pack pk;
    const int4 *tiles;
    const int *n_tiles;
    const int32_t *list;
    const float *weights; /* route weights per pair (gate/up) */
    float clamp;
    int clamp_on;
    float *out; /* mid (gate/up) or y (down): pair p's row at p * out_stride */
    uint64_t out_stride;
    const uint8_t *tab;        /* IQ2_XXS: the f16 grid and sign tables (MH_GRID_BYTES + MH_SIGN_BYTES) */
    const uint32_t *w2[2];     /* IQ2_XXS gate, up: each expert's largest Σ w'^2 of a row superblock */
    unsigned long long *stats; /* IQ2_XXS: steps, heavy steps (cuda_ctx.d_x16_stats) */
    int n_rb, rb_per_cta;
    int swz; /* B images in the 128-byte swizzle (else interleaved core matrices) */
    x16_layout lay;
};

/* The f16 tables of the IQ2_XXS decode, once per context (the same words mh_fill_tables writes). */
__global__ void x16_tables_kernel(const uint64_t *grid, const uint8_t *signs, uint32_t *tab) {
    mh_fill_tables(tab, tab + MH_GRID_BYTES / 4, grid, signs, (int)(blockIdx.x * blockDim.x + threadIdx.x),
                   (int)(gridDim.x * blockDim.x));
}

/* Each expert's largest Σ w'^2 over its row superblocks (x16_iq2_w2) of an IQ2_XXS tensor of
 * n_expert experts, rows_e rows of nblk superblocks each (w2: n_expert words, zeroed). */
__global__ void x16_w2_kernel(const uint8_t *w, uint64_t row_bytes, uint32_t rows_e, int nblk,
                              uint32_t n_expert, const uint64_t *grid, uint32_t *w2) {
    __shared__ uint32_t g2[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) g2[i] = x16_grid_sq(grid[i]);
    __syncthreads();
    const uint64_t total = (uint64_t)n_expert * rows_e * nblk;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t row = i / (uint64_t)nblk;
        const int b = (int)(i - row * (uint64_t)nblk);
        const uint32_t v = x16_iq2_w2(w + row * row_bytes + 66 * (uint64_t)b, g2);
        const uint32_t e = (uint32_t)(row / rows_e);
        /* many rows of one expert in a warp: one atomic per warp and expert */
        const unsigned same = __match_any_sync(__activemask(), e);
        const uint32_t m = __reduce_max_sync(same, v);
        if (__ffs(same) - 1 == (int)(threadIdx.x & 31)) atomicMax(&w2[e], m);
    }
}

/* The B loader of a thread of warpgroup 1 (u = tid - 128 in 0..127): 16-byte chunk (pair n, k
 * positions 8 kb..) with n = 8 nb + (u & 7) for nb < NT and kb = 4 (u >> 5) + ((u >> 3) & 3) and 16
 * more: a warp's 32 copies then land in 8 distinct bank groups (rows n & 7 of a core matrix, 16 bytes
 * apart) and read 64 contiguous bytes of 8 pack rows. roff[nb]: the pack row of its pair n times the
 * row's bytes (rows past mt repeat the tile's last pair). */
template <int NT> struct x16_bload {
    uint32_t roff[NT];
    int kb0, d0, d1,
        dstep; /* the image offsets of chunks (8 nb + nlo, kb0) and (.., kb0 + 16): d + nb dstep */
};
template <int NT>
__device__ __forceinline__ void x16_bload_init(x16_bload<NT> &l, const uint32_t *prow, uint32_t row_bytes,
                                               int u, bool swz) {
    const int nlo = u & 7;
    l.kb0 = 4 * (u >> 5) + ((u >> 3) & 3);
    l.d0 = swz ? x16_b_chunk_sw(nlo, l.kb0) : x16_b_chunk(nlo, l.kb0);
    l.d1 = swz ? x16_b_chunk_sw(nlo, l.kb0 + 16) : x16_b_chunk(nlo, l.kb0 + 16);
    l.dstep = swz ? 1024 : X16_CORE;
#pragma unroll
    for (int nb = 0; nb < NT; nb++) l.roff[nb] = prow[8 * nb + nlo] * row_bytes;
}
/* the chunks of superblock s of the image at src (a pack of rows of row_bytes) into the B image b */
template <int NT>
__device__ __forceinline__ void x16_bload_run(const x16_bload<NT> &l, const uint8_t *src, int s, uint8_t *b) {
    const uint8_t *sp = src + 512 * s + 16 * l.kb0;
#pragma unroll
    for (int nb = 0; nb < NT; nb++) {
        x16_cp16(b + l.d0 + nb * l.dstep, sp + l.roff[nb]);
        x16_cp16(b + l.d1 + nb * l.dstep, sp + l.roff[nb] + 256);
    }
}

/* Thread tid copies its part of step (row block rb, superblock s) into stage st: threads 0..127
 * the 128 weight rows (mw_load_weights), 128..255 the B image of the tile's 8 NT pairs (a heavy
 * superblock of the tile, bit s of hm: the lo codes), the min term's B (down) and the pairs' d.
 * prow[n]: the pack row of the tile's pair n (n < 8 NT). */
template <int K, int NT>
__device__ __forceinline__ void x16_load_stage(const x16_params &p, int e, const uint32_t *prow,
                                               const x16_bload<NT> &bl, int rb, int s, uint32_t hm,
                                               uint8_t *st, int tid) {
    constexpr bool DUAL = K == GM_IQ2_XXS;
    if (tid < X16_ROWS) {
        mw_load_weights<K, DUAL, X16_ROWS>(p.w0, p.w1, p.row_bytes, p.expert_bytes, p.n_out, e, rb, s,
                                           st + p.lay.w, tid);
        return;
    }
    const int u = tid - X16_ROWS, nblk = p.pk.nblk;
    x16_bload_run<NT>(bl, p.pack + (DUAL && ((hm >> s) & 1u) ? p.pk.blo : p.pk.b1), s, st + p.lay.b);
    if (!DUAL && u < 16 * NT) { /* the min term: 2 chunks of 16 block sums per pair */
        const int n = u >> 1, kb = u & 1;
        x16_cp16(st + p.lay.bm + x16_b_chunk(n, kb),
                 p.pack + p.pk.bm + ((uint64_t)prow[n] * nblk + s) * 32 + 16 * kb);
    }
    if (u < 8 * NT) x16_cp4(st + p.lay.dx + 4 * u, p.pack + p.pk.dx + 4 * ((uint64_t)prow[u] * nblk + s));
}

/* One superblock of the warpgroup's 64 rows x 8 NT pairs: c1 (and for a heavy one c2, the hi
 * codes' chain; mn, the Q2_K min term) = the superblock's exact sums. w: the stage's weight rows;
 * b, bx, bm: shared addresses of the B images. PAR: the superblock's parity (IQ2_XXS staging) and
 * HEAVY, constants (a heavy superblock takes its own copy of the loop: no branch in the common one). */
template <int K, int NT, int PAR, bool HEAVY>
__device__ __forceinline__ void x16_superblock(const uint8_t *w, int r0, int lane, uint32_t b, uint32_t bx,
                                               uint32_t bm, bool swz, const uint32_t *grid_h,
                                               const uint32_t *sign_h, const uint32_t *lstab, float (&c1)[32],
                                               float (&c2)[32], float (&mn)[32]) {
    /* step st's descriptor: the image's plus the step's start (interleaved: 2048 st bytes; swizzled:
     * (st / 4) 8192 + (st % 4) 32), in the 16-byte units of the address field */
    const uint64_t d1 = swz ? x16_desc_sw(b, 1024) : x16_desc(b, X16_LBO, X16_SBO);
    const uint64_t d2 = swz ? x16_desc_sw(bx, 1024) : x16_desc(bx, X16_LBO, X16_SBO);
    constexpr int R = 4 * NT;
    /* two sub-blocks a group (4 k16 steps): the decode of group q + 1 runs while group q's products do */
    uint32_t a[2][16], am[4];
    x16_frag_a<K>(w, r0, PAR, 0, lane, grid_h, sign_h, lstab, a[0]);
    x16_frag_a<K>(w, r0, PAR, 1, lane, grid_h, sign_h, lstab, a[0] + 8);
    if (K == GM_Q2_K) x16_frag_min(w, r0, lane, am);
    x16_fence_acc<R>(c1);
    if (HEAVY) x16_fence_acc<R>(c2);
    if (K == GM_Q2_K) x16_fence_acc<R>(mn);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const uint32_t *aq = a[q & 1];
        x16_fence();
#pragma unroll
        for (int h = 0; h < 4; h++) { /* k16 step 4 q + h */
            const uint32_t *ah = aq + 4 * h;
            const uint64_t inc = swz ? (uint64_t)(512 * q + 2 * h) : (uint64_t)(128 * (4 * q + h));
            x16_mma<NT>(c1, ah[0], ah[1], ah[2], ah[3], d1 + inc, q > 0 || h > 0);
            if (HEAVY) x16_mma<NT>(c2, ah[0], ah[1], ah[2], ah[3], d2 + inc, q > 0 || h > 0);
        }
        if (K == GM_Q2_K && q == 3)
            x16_mma<NT>(mn, am[0], am[1], am[2], am[3], x16_desc(bm, X16_LBO, X16_SBO), 0);
        x16_commit();
        if (q < 3) {
            x16_wait<1>(); /* the products of group q - 1 are done with a[(q + 1) & 1] */
            x16_frag_a<K>(w, r0, PAR, 2 * q + 2, lane, grid_h, sign_h, lstab, a[(q + 1) & 1]);
            x16_frag_a<K>(w, r0, PAR, 2 * q + 3, lane, grid_h, sign_h, lstab, a[(q + 1) & 1] + 8);
        }
    }
    x16_wait<0>();
    x16_fence_acc<R>(c1);
    if (HEAVY) x16_fence_acc<R>(c2);
    if (K == GM_Q2_K) x16_fence_acc<R>(mn);
}

template <int K, int NT>
__device__ __forceinline__ void x16_body(const x16_params &p, uint8_t *smem, int e, int mt) {
    constexpr bool DUAL = K == GM_IQ2_XXS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, g = lane >> 2,
              t = lane & 3;
    const int r0 = X16_WG_ROWS * wg + 16 * (warp & 3); /* the warp's first staged row */
    const int S = p.lay.stages, nblk = p.pk.nblk, nact = (mt + 7) >> 3;
    const int rb0 = (int)blockIdx.x * p.rb_per_cta;
    const int nrb = min(p.rb_per_cta, p.n_rb - rb0), nsteps = nrb * nblk;
    const int *pid = (const int *)(smem + p.lay.pid);
    const uint32_t *prow = (const uint32_t *)(smem + p.lay.prow);
    const uint32_t hm = DUAL ? *(const uint32_t *)(smem + p.lay.misc) : 0u;
    x16_bload<NT> bl;
    x16_bload_init<NT>(bl, prow, (uint32_t)(p.pk.nblk * 512), tid & (X16_ROWS - 1), p.swz != 0);
    const uint32_t *grid_h = (const uint32_t *)(smem + p.lay.grid),
                   *sign_h = (const uint32_t *)(smem + p.lay.sign);
    const uint32_t *lstab = (const uint32_t *)(smem + p.lay.lstab);
    uint8_t *stage0 = smem + p.lay.stage0;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);

    /* the loader runs S - 1 steps ahead: step lq = (row block lrb, superblock ls) into lbuf */
    int lq = 0, lrb = rb0, ls = 0, lbuf = 0;
    for (int i = 0; i < S - 1; i++) {
        if (lq < nsteps)
            x16_load_stage<K, NT>(p, e, prow, bl, lrb, ls, hm, stage0 + lbuf * p.lay.stage_bytes, tid);
        mw_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;
    }

    float acc[32], c1[32], c2[32], mn[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = c1[i] = c2[i] = mn[i] = 0.0f;
    int rb = rb0, s = 0, buf = 0;
    for (int q = 0; q < nsteps; q++) {
        mw_wait(S);
        x16_proxy_fence(); /* the copies are read by the tensor cores */
        __syncthreads();   /* step q landed; every warp is done with the buffer refilled next */
        if (lq < nsteps)
            x16_load_stage<K, NT>(p, e, prow, bl, lrb, ls, hm, stage0 + lbuf * p.lay.stage_bytes, tid);
        mw_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;

        const uint8_t *st = stage0 + buf * p.lay.stage_bytes;
        const bool heavy = DUAL && ((hm >> s) & 1u);
        if (DUAL && heavy) { /* the hi codes' B image, loaded now (rare) */
            if (tid >= X16_ROWS) x16_bload_run<NT>(bl, p.pack + p.pk.bhi, s, smem + p.lay.x);
            mw_commit();
            x16_cp_wait_all();
            x16_proxy_fence();
            __syncthreads();
        }
        const uint32_t sb = sbase + p.lay.stage0 + buf * p.lay.stage_bytes;
        const uint8_t *sw = st + p.lay.w;
        const uint32_t bb = sb + p.lay.b, bx = sbase + p.lay.x, bm = sb + p.lay.bm;
        const bool swz = p.swz != 0;
        if (K == GM_Q2_K)
            x16_superblock<K, NT, 0, false>(sw, r0, lane, bb, bx, bm, swz, grid_h, sign_h, lstab, c1, c2, mn);
        else if (heavy && (s & 1))
            x16_superblock<K, NT, 1, true>(sw, r0, lane, bb, bx, bm, swz, grid_h, sign_h, lstab, c1, c2, mn);
        else if (heavy)
            x16_superblock<K, NT, 0, true>(sw, r0, lane, bb, bx, bm, swz, grid_h, sign_h, lstab, c1, c2, mn);
        else if (s & 1)
            x16_superblock<K, NT, 1, false>(sw, r0, lane, bb, bx, bm, swz, grid_h, sign_h, lstab, c1, c2, mn);
        else
            x16_superblock<K, NT, 0, false>(sw, r0, lane, bb, bx, bm, swz, grid_h, sign_h, lstab, c1, c2, mn);
        /* the CPU's float update of the superblock */
        float dw[2], dm[2];
        mw_row_scales<K>(st + p.lay.w, r0, s, lane, dw, dm);
        const float *dxs = (const float *)(st + p.lay.dx);
#pragma unroll
        for (int i = 0; i < NT; i++) {
            if (i < nact) {
                const float2 dv = *(const float2 *)(dxs + 8 * i + 2 * t);
                const float dx[2] = {dv.x, dv.y};
                if (K == GM_IQ2_XXS)
                    x16_update_iq2(acc + 4 * i, c1 + 4 * i, c2 + 4 * i, heavy, dw, dx);
                else
                    x16_update_q2k(acc + 4 * i, c1 + 4 * i, mn + 4 * i, dw, dm, dx);
            }
        }
        if (s == nblk - 1) { /* end of the row block: store and restart */
            if constexpr (DUAL) {
                /* the gate warpgroup hands its values to the up warpgroup through x (the heavy
                 * image: every product of this step is done once both warpgroups are here) */
                float *X = (float *)(smem + p.lay.x);
                __syncthreads();
                if (wg == 0) {
#pragma unroll
                    for (int i = 0; i < NT; i++)
#pragma unroll
                        for (int k = 0; k < 4; k++)
                            X[(16 * (warp & 3) + g + 8 * (k >> 1)) * X16_BN + 8 * i + 2 * t + (k & 1)] =
                                qm_mul(0.125f, acc[4 * i + k]);
                }
                __syncthreads();
                if (wg == 1) {
                    const int orow = rb * X16_WG_ROWS + 16 * (warp & 3);
#pragma unroll
                    for (int i = 0; i < NT; i++) {
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            const int n = 8 * i + 2 * t + (k & 1), rl = g + 8 * (k >> 1), row = orow + rl;
                            if (n >= mt || row >= p.n_out) continue;
                            float gv = X[(16 * (warp & 3) + rl) * X16_BN + n],
                                  uv = qm_mul(0.125f, acc[4 * i + k]);
                            if (p.clamp_on) { /* as moe_mid_kernel and the CPU's store_mid */
                                if (gv > p.clamp) gv = p.clamp;
                                if (uv > p.clamp) uv = p.clamp;
                                if (uv < -p.clamp) uv = -p.clamp;
                            }
                            const int pr = pid[n];
                            p.out[(uint64_t)pr * p.out_stride + row] = cu_silu(gv) * uv * p.weights[pr];
                        }
                    }
                }
            } else {
                const int orow = rb * X16_ROWS + r0;
#pragma unroll
                for (int i = 0; i < NT; i++) {
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const int n = 8 * i + 2 * t + (k & 1), row = orow + g + 8 * (k >> 1);
                        if (n < mt && row < p.n_out)
                            p.out[(uint64_t)pid[n] * p.out_stride + row] = acc[4 * i + k];
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < 32; i++) acc[i] = 0.0f;
        }
        buf = buf + 1 == S ? 0 : buf + 1;
        if (++s == nblk) s = 0, rb++;
    }
}

template <int K> __global__ void __launch_bounds__(X16_THREADS, 1) x16_kernel(const x16_params p) {
#if X16_WGMMA
    extern __shared__ __align__(1024) uint8_t x16_smem[];
    if ((int)blockIdx.y >= p.n_tiles[0]) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int tid = threadIdx.x;
    int *pid = (int *)(x16_smem + p.lay.pid);
    uint32_t *misc = (uint32_t *)(x16_smem + p.lay.misc);
    uint32_t *prow = (uint32_t *)(x16_smem + p.lay.prow);
    if (tid < X16_BN) { /* the pair ids, and the pack rows (rows past mt: the last pair's) */
        const int pr = p.list[start + (tid < mt ? tid : mt - 1)];
        if (tid < mt) pid[tid] = pr;
        prow[tid] = (uint32_t)(pr / p.kdiv);
    }
    if (K == GM_IQ2_XXS) { /* the f16 tables, built once per context (x16_tables_kernel) */
        const uint4 *src = (const uint4 *)p.tab;
        uint4 *dst = (uint4 *)(x16_smem + p.lay.grid); /* grid then sign: contiguous */
        for (int i = tid; i < (MH_GRID_BYTES + MH_SIGN_BYTES) / 16; i += X16_THREADS) dst[i] = src[i];
        x16_fill_lstab_iq2((uint32_t *)(x16_smem + p.lay.lstab), tid, X16_THREADS);
    } else {
        x16_fill_lstab_q2k((uint32_t *)(x16_smem + p.lay.lstab), tid, X16_THREADS);
    }
    __syncthreads();                   /* pid */
    if (K == GM_IQ2_XXS && tid < 64) { /* the tile's heavy superblocks (x16_heavy) */
        const uint32_t w2 = max(p.w2[0][e], p.w2[1][e]);
        const uint32_t *q2 = (const uint32_t *)(p.pack + p.pk.q2) + (uint64_t)prow[tid] * p.pk.nblk;
        uint32_t hv = 0;
        for (int b = 0; b < p.pk.nblk; b++) {
            const uint32_t m = __reduce_max_sync(0xffffffffu, tid < mt ? q2[b] : 0u);
            hv |= (uint32_t)x16_heavy(w2, m) << b;
        }
        if ((tid & 31) == 0) misc[1 + (tid >> 5)] = hv;
    }
    __syncthreads();
    if (K == GM_IQ2_XXS && tid == 0) {
        const uint32_t hm = misc[1] | misc[2];
        misc[0] = hm;
        const int rb0 = (int)blockIdx.x * p.rb_per_cta, nrb = min(p.rb_per_cta, p.n_rb - rb0);
        atomicAdd(&p.stats[0], (unsigned long long)(nrb * p.pk.nblk));
        if (hm) atomicAdd(&p.stats[1], (unsigned long long)(nrb * __popc(hm)));
    }
    __syncthreads();
    switch ((mt + 15) >> 4) {
    case 1: x16_body<K, 2>(p, x16_smem, e, mt); break;
    case 2: x16_body<K, 4>(p, x16_smem, e, mt); break;
    case 3: x16_body<K, 6>(p, x16_smem, e, mt); break;
    default: x16_body<K, 8>(p, x16_smem, e, mt); break;
    }
#else
    (void)p;
#endif
}

/* ---- host ---- */

/* which products DSV4_CUDA_MOE_X16 asks for: bit 0 gate/up, bit 1 down. Off unless set: on the
 * H200 these products are exact but slower than the f16 ones (session 15: 5.62 against 4.35 ms per
 * flash layer at n = 2048, the full flash 2K prefill 4,449 against 5,837 tok/s; bench/NOTES.md). */
static int x16_switch(void) {
    const char *v = getenv("DSV4_CUDA_MOE_X16");
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return 3;
    if (!strcmp(v, "gate_up")) return 1;
    if (!strcmp(v, "down")) return 2;
    return 0;
}
/* DSV4_CUDA_MOE_X16_SWIZZLE=0: the B images as interleaved core matrices (read per call) */
static int x16_swizzle(void) {
    const char *v = getenv("DSV4_CUDA_MOE_X16_SWIZZLE");
    return !(v && !strcmp(v, "0"));
}
typedef void (*x16_fn)(const x16_params);
static x16_fn x16_kernel_of(int kind) {
    return kind == GM_IQ2_XXS ? x16_kernel<GM_IQ2_XXS> : x16_kernel<GM_Q2_K>;
}
static int x16_stages_max(int kind) { return kind == GM_IQ2_XXS ? 3 : 4; }

/* The deepest pipeline (2..) whose image fits the device; 0 if none does. */
static int x16_stages(const cuda_ctx *c, int kind) {
    for (int s = x16_stages_max(kind); s >= 2; s--)
        if ((size_t)x16_layout_of(kind, s).total <= c->caps.smem_per_block_optin) return s;
    return 0;
}

/* Does the runtime have this kernel's image for the device, and may it take its shared memory?
 * (bit 0 IQ2_XXS, bit 1 Q2_K of c->moe_x16_attr: done; bits 4, 5: refused) */
static bool x16_kernel_ok(cuda_ctx *c, int kind) {
    const int bit = kind == GM_IQ2_XXS ? 1 : 2;
    if (c->moe_x16_attr & (bit << 4)) return false;
    if (c->moe_x16_attr & bit) return true;
    if (c->step_capturing) return false; /* the first call's setup is not recorded */
    const int st = x16_stages(c, kind);
    cudaFuncAttributes fa;
    bool ok =
        st > 0 && cudaFuncGetAttributes(&fa, (const void *)x16_kernel_of(kind)) == cudaSuccess &&
        cudaFuncSetAttribute((const void *)x16_kernel_of(kind), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             x16_layout_of(kind, st).total) == cudaSuccess;
    if (ok && kind == GM_IQ2_XXS && !c->d_x16_tab) { /* the decode tables, on the stream */
        ok = c->d_iq2_grid && c->d_iq2_signs &&
             cudaMalloc(&c->d_x16_tab, MH_GRID_BYTES + MH_SIGN_BYTES) == cudaSuccess;
        if (ok) {
            x16_tables_kernel<<<48, 256, 0, c->stream>>>(c->d_iq2_grid, c->d_iq2_signs,
                                                         (uint32_t *)c->d_x16_tab);
            ok = cudaGetLastError() == cudaSuccess;
        }
        if (!ok && c->d_x16_tab) cudaFree(c->d_x16_tab), c->d_x16_tab = NULL;
        if (ok && !c->d_x16_stats)
            ok = cudaMalloc((void **)&c->d_x16_stats, 2 * sizeof(unsigned long long)) == cudaSuccess &&
                 cudaMemsetAsync(c->d_x16_stats, 0, 2 * sizeof(unsigned long long), c->stream) == cudaSuccess;
    }
    if (!ok) cudaGetLastError();
    c->moe_x16_attr |= ok ? bit : bit << 4;
    return ok;
}

/* The tensor's experts' largest Σ w'^2 (x16_w2_kernel, once per tensor, on the stream). */
static const uint32_t *x16_tensor_w2(cuda_ctx *c, const dsv4_tensor *t) {
    cu_weight *rec = cu_weight_rec(c, t);
    if (!rec) return NULL;
    if (rec->x16_w2) return rec->x16_w2;
    if (c->step_capturing || !c->d_iq2_grid) return NULL;
    const uint32_t ne = (uint32_t)t->ne[2], rows_e = (uint32_t)t->ne[1];
    const int nblk = (int)(t->ne[0] / 256);
    uint32_t *w2 = NULL;
    if (cudaMalloc((void **)&w2, ne * sizeof(uint32_t)) != cudaSuccess ||
        cudaMemsetAsync(w2, 0, ne * sizeof(uint32_t), c->stream) != cudaSuccess) {
        if (w2) cudaFree(w2);
        cudaGetLastError();
        return NULL;
    }
    x16_w2_kernel<<<4 * c->caps.sm_count, 256, 0, c->stream>>>((const uint8_t *)rec->dev, t->row_bytes,
                                                               rows_e, nblk, ne, c->d_iq2_grid, w2);
    if (cudaGetLastError() != cudaSuccess) {
        cudaFree(w2);
        return NULL;
    }
    rec->x16_w2 = w2;
    return w2;
}

int cu_moe_x16_ok(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                  const void *gd, const void *ud, const void *dd, cu_moe_x16_plan *plan) {
    memset(plan, 0, sizeof *plan);
    const int sw = x16_switch();
    if (!sw || c->numerics != DSV4_NUMERICS_DS4 || c->generic_only || c->caps.cc_major != 9 ||
        c->caps.cc_minor != 0)
        return 0;
    int which = 0;
    const uint64_t in = gate->ne[0], ff = down->ne[0];
    if ((sw & 1) && gate->type == DSV4_TYPE_IQ2_XXS && up->type == DSV4_TYPE_IQ2_XXS && in % 512 == 0 &&
        in <= (1u << 16) && gate->row_bytes == up->row_bytes && gate->row_bytes % 4 == 0 &&
        gate->row_bytes >= in / 256 * 66 && ((uintptr_t)gd | (uintptr_t)ud) % 4 == 0 &&
        gate->ne[1] % 64 == 0 && up->ne[2] == gate->ne[2] && x16_kernel_ok(c, GM_IQ2_XXS) &&
        (plan->w2[0] = x16_tensor_w2(c, gate)) && (plan->w2[1] = x16_tensor_w2(c, up)))
        which |= 1;
    if ((sw & 2) && down->type == DSV4_TYPE_Q2_K && ff % 256 == 0 && ff <= (1u << 16) &&
        down->row_bytes % 4 == 0 && down->row_bytes >= ff / 256 * 84 && (uintptr_t)dd % 4 == 0 &&
        down->ne[1] % 128 == 0 && x16_kernel_ok(c, GM_Q2_K))
        which |= 2;
    plan->which = which;
    return which;
}

size_t cu_moe_x16_scratch_bytes(uint64_t n, uint64_t P, uint64_t in, uint64_t ff) {
    const uint64_t a = x16_pack_of(n, in, true).total, b = x16_pack_of(P, ff, false).total;
    return (size_t)(a > b ? a : b);
}

static dsv4_status x16_launch(cuda_ctx *c, int kind, x16_params *p, const cu_moe_wide_args *a,
                              dsv4_error *err) {
    const int st = x16_stages(c, kind);
    const bool dual = kind == GM_IQ2_XXS;
    if (!st) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe x16: no pipeline fits the device");
    p->tab = (const uint8_t *)c->d_x16_tab;
    p->tiles = a->tiles, p->n_tiles = a->n_tiles, p->list = a->list;
    p->lay = x16_layout_of(kind, st);
    p->swz = x16_swizzle();
    const int rows = dual ? X16_WG_ROWS : X16_ROWS;
    p->n_rb = (p->n_out + rows - 1) / rows;
    p->rb_per_cta = cu_moe_wide_rb_per_cta(c, p->n_rb, a->P, a->n_expert);
    const dim3 grid((unsigned)((p->n_rb + p->rb_per_cta - 1) / p->rb_per_cta), (unsigned)a->max_tiles);
    x16_kernel_of(kind)<<<grid, X16_THREADS, (size_t)p->lay.total, c->stream>>>(*p);
    const dsv4_status s = cu_launched(err, dual ? "moe x16 gate/up" : "moe x16 down");
    if (s == DSV4_OK) c->moe_x16_calls++;
    return s;
}

dsv4_status cu_moe_x16_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, uint32_t n,
                               const cu_moe_x16_plan *plan, dsv4_error *err) {
    uint8_t *pack = (uint8_t *)a->scratch;
    const x16_pack pk = x16_pack_of(n, a->in, true);
    const unsigned pt = X16_PACK_WARPS * 32;
    x16_pack_tok_kernel<<<cu_blocks((uint64_t)n * pk.nblk * 32, pt), pt, 0, c->stream>>>(a->xq, a->xq_stride,
                                                                                         n, pk, pack);
    dsv4_status s = cu_launched(err, "moe x16 pack gate/up");
    if (s != DSV4_OK) return s;
    x16_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->gd, p.w1 = a->ud;
    p.row_bytes = a->gu_row_bytes, p.expert_bytes = a->ff * a->gu_row_bytes;
    p.n_out = (int)a->ff, p.in = (int)a->in, p.kdiv = (int)a->k;
    p.pack = pack, p.pk = pk;
    p.w2[0] = plan->w2[0], p.w2[1] = plan->w2[1];
    p.stats = c->d_x16_stats;
    p.weights = a->weights, p.clamp = a->clamp, p.clamp_on = a->clamp > 1.0e-6f;
    p.out = a->mid, p.out_stride = a->ff;
    return x16_launch(c, GM_IQ2_XXS, &p, a, err);
}

dsv4_status cu_moe_x16_down(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err) {
    uint8_t *pack = (uint8_t *)a->scratch;
    const x16_pack pk = x16_pack_of(a->P, a->ff, false);
    const unsigned pt = X16_PACK_WARPS * 32;
    x16_pack_mid_kernel<<<cu_blocks(a->P * pk.nblk * 32, pt), pt, 0, c->stream>>>(a->mid, a->ff, a->P, pk,
                                                                                  pack);
    dsv4_status s = cu_launched(err, "moe x16 pack down");
    if (s != DSV4_OK) return s;
    x16_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->dd, p.w1 = NULL;
    p.row_bytes = a->down_row_bytes, p.expert_bytes = a->embd * a->down_row_bytes;
    p.n_out = (int)a->embd, p.in = (int)a->ff, p.kdiv = 1;
    p.pack = pack, p.pk = pk;
    p.out = a->y, p.out_stride = a->embd;
    return x16_launch(c, GM_Q2_K, &p, a, err);
}
