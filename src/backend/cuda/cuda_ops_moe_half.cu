/* The routed experts' products of large prefill chunks on f16 tensor cores: the IQ2_XXS gate/up
 * and the Q2_K down (units, operands and error in cuda_moe_half.cuh). NOT bitwise the CPU: the
 * grouped path (cuda_ops_moe_grouped.cu) takes each in place of the exact wide kernel's when
 *   - DS4 numerics, not DSV4_CUDA_MATVEC=generic; DSV4_CUDA_MOE_F16 (read per call): unset or
 *     "1" both products, "gate_up" or "down" one of them, "0" neither;
 *   - the chunk has >= DSV4_CUDA_MOE_F16_MIN_N tokens (default 256, the cuBLAS path's bound: the
 *     smaller chunks of the parity checks stay bitwise);
 *   - IQ2_XXS gate and up / Q2_K down whose block scales are finite (scanned once per tensor);
 *   - an sm_80+ device whose shared memory holds the CTA image.
 * Per product: the activation rows' Q8_K values become f16 rows (gate/up: the token rows, a warp
 * per block; down: each mid row quantized as the CPU does, a warp per row), then one CTA per (tile
 * of <= 64 pairs of an expert, row blocks) runs the wide kernel's pipeline with f16 A fragments
 * decoded in registers and mma.m16n8k16 into f32 sums over the whole row; a row block ends with
 * the mid rows (gate/up, as the wide kernel writes them) or the y rows (down). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh" /* act_q8_k_block */
#include "backend/cuda/cuda_gemm_blas.h"   /* dsv4_cuda_block_max_d */
#include "backend/cuda/cuda_moe_half.cuh"
#include "backend/cuda/cuda_moe_half.h"
#include "backend/cuda/cuda_moe_ws.cuh" /* mp_rb_rows */
#include "backend/cuda/cuda_moe_ws.h"

/* d += a b, m16n8k16 f16 x f16 -> f32 */
__device__ __forceinline__ void mh_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mh_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void mh_wait(int stages) {
    if (stages >= 3)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Lane `lane` writes values 8 lane.. of Q8_K block blk, times scale, as f16 at out (16 bytes). */
__device__ __forceinline__ void mh_store8(const uint8_t *blk, int lane, float scale, uint16_t *out) {
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        h[k] = (uint32_t)mh_f2h(mh_act_value(blk, 8 * lane + 2 * k, scale)) |
               ((uint32_t)mh_f2h(mh_act_value(blk, 8 * lane + 2 * k + 1, scale)) << 16);
    *(uint4 *)(out + 8 * lane) = make_uint4(h[0], h[1], h[2], h[3]);
}

/* ---- gate/up: f16 token rows from the Q8_K rows, a warp per (token, block) ---- */
#define MH_PACK_WARPS 8
__global__ void __launch_bounds__(MH_PACK_WARPS * 32)
    mh_pack_kernel(const uint8_t *xq, uint64_t xq_stride, uint32_t n, int nblk, uint16_t *xh, float *xs) {
    const uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint64_t tok = w / (uint64_t)nblk;
    if (tok >= n) return;
    const int b = (int)(w - tok * (uint64_t)nblk), lane = threadIdx.x & 31;
    const uint8_t *row = xq + tok * xq_stride;
    float m = 0.0f;
    for (int k = lane; k < nblk; k += 32) {
        const float v = mh_block_bound(row + 292 * (uint64_t)k);
        m = v > m ? v : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, m, o);
        m = v > m ? v : m;
    }
    const int e = xb_row_exp(m);
    const float scale = xb_pow2(-e);
    mh_store8(row + 292 * (uint64_t)b, lane, scale, xh + tok * (uint64_t)nblk * 256 + 256 * (uint64_t)b);
    if (b == 0 && lane == 0) xs[tok] = xb_pow2(e);
}

/* ---- down: f16 rows of the mid rows' Q8_K values (act_q8_k_block, as the exact path and the
 * CPU quantize them), a warp per pair row: the row's largest |x| first, then block by block ---- */
__global__ void __launch_bounds__(MH_PACK_WARPS * 32)
    mh_pack_mid_kernel(const float *x, uint64_t x_stride, uint64_t rows, int nblk, uint16_t *xh, float *xs) {
    __shared__ __align__(16) uint8_t blk_s[MH_PACK_WARPS][296];
    const uint64_t r = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const float *xr = x + r * x_stride;
    float m = 0.0f;
    for (int i = lane; i < nblk * 256; i += 32) {
        const float v = fabsf(xr[i]);
        m = v > m ? v : m; /* a NaN is left out: its block is NaN on every path */
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, m, o);
        m = v > m ? v : m;
    }
    /* a Q8_K value q d is within one rounding of its block's largest |x|, far below the margin of
     * XB_XMAX under 65504 */
    const int e = xb_row_exp(m);
    const float scale = xb_pow2(-e);
    uint8_t *blk = blk_s[threadIdx.x >> 5];
    for (int b = 0; b < nblk; b++) {
        const float4 *xp = (const float4 *)(xr + 256 * b + 8 * lane);
        const float4 v0 = xp[0], v1 = xp[1];
        const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        act_q8_k_block(v, lane, blk);
        __syncwarp();
        mh_store8(blk, lane, scale, xh + r * (uint64_t)nblk * 256 + 256 * (uint64_t)b);
        __syncwarp(); /* the block buffer is rewritten next */
    }
    if (lane == 0) xs[r] = xb_pow2(e);
}

/* ---- the product ---- */
template <int K, int W, bool DUAL, int PAR>
__device__ __forceinline__ void mh_superblock(const uint8_t *st, const mh_layout &lay, int warp, int lane,
                                              int nact, const uint32_t *gh, const uint32_t *sh, float wsc0,
                                              float wsc1, float (&acc)[MH_MT][MH_NT][4]) {
    const uint8_t *WS = st + lay.w, *X = st + lay.x;
    mh_scales sc[MH_MT];
    mh_row_scales<K>(WS, mh_tile_row(W, DUAL, warp, 0), PAR, lane, wsc0, &sc[0]);
    mh_row_scales<K>(WS, mh_tile_row(W, DUAL, warp, 1), PAR, lane, DUAL ? wsc1 : wsc0, &sc[1]);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        uint32_t a[MH_MT][8];
#pragma unroll
        for (int m = 0; m < MH_MT; m++)
            mh_frag_a<K>(WS, mh_tile_row(W, DUAL, warp, m), PAR, j, lane, gh, sh, sc[m], a[m]);
            /* a branch past the tile's empty n8 tiles (nact is the CTA's): as a predicate they were
             * still issued, 24 % of the products of a flash 2K chunk (session 24's ncu) */
#pragma unroll
        for (int nt = 0; nt < MH_NT; nt++) {
            if (nt >= nact) break;
            uint32_t b[4];
            mh_frag_b(X, nt, j, lane, b);
#pragma unroll
            for (int m = 0; m < MH_MT; m++) {
                mh_mma(acc[m][nt], a[m], b[0], b[1]);
                mh_mma(acc[m][nt], a[m] + 4, b[2], b[3]);
            }
        }
    }
}

template <int K, int W, bool DUAL> __global__ void __launch_bounds__(32 * W, 1) mh_kernel(const mh_params p) {
    extern __shared__ __align__(16) uint8_t mh_smem[];
    if ((int)blockIdx.y >= p.n_tiles[0]) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int S = p.lay.stages, nblk = p.in / 256, nact = (mt + 7) >> 3;
    const int rb0 = (int)blockIdx.x * p.rb_per_cta;
    const int nrb = min(p.rb_per_cta, p.n_rb - rb0), nsteps = nrb * nblk;
    int *pid = (int *)(mh_smem + p.lay.pid);
    float *xsc = (float *)(mh_smem + p.lay.xs);
    uint32_t *gh = (uint32_t *)(mh_smem + p.lay.grid), *sh = (uint32_t *)(mh_smem + p.lay.sign);
    uint8_t *stage0 = mh_smem + p.lay.stage0;
    if (tid < mt) {
        const int pr = p.list[start + tid];
        pid[tid] = pr;
        xsc[tid] = p.xs[pr / p.kdiv];
    }
    __syncthreads(); /* the loader reads pid */

    int lq = 0, lrb = rb0, ls = 0, lbuf = 0;
    for (int i = 0; i < S - 1; i++) {
        if (lq < nsteps)
            mh_load_stage<K, W, DUAL>(p, e, pid, mt, lrb, ls, stage0 + lbuf * p.lay.stage_bytes, tid);
        mh_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;
    }
    if (K == GM_IQ2_XXS) mh_fill_tables(gh, sh, p.grid, p.signs, tid, 32 * W);

    float acc[MH_MT][MH_NT][4];
#pragma unroll
    for (int m = 0; m < MH_MT; m++)
#pragma unroll
        for (int nt = 0; nt < MH_NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.0f;
    int rb = rb0, s = 0, buf = 0;
    for (int q = 0; q < nsteps; q++) {
        mh_wait(S);
        __syncthreads(); /* step q landed; every warp is done with the buffer refilled next */
        if (lq < nsteps)
            mh_load_stage<K, W, DUAL>(p, e, pid, mt, lrb, ls, stage0 + lbuf * p.lay.stage_bytes, tid);
        mh_commit();
        lq++, lbuf = lbuf + 1 == S ? 0 : lbuf + 1;
        if (++ls == nblk) ls = 0, lrb++;

        const uint8_t *st = stage0 + buf * p.lay.stage_bytes;
        if (K == GM_IQ2_XXS && (s & 1)) /* the superblock's parity places its words (mw_wsrc) */
            mh_superblock<K, W, DUAL, 1>(st, p.lay, warp, lane, nact, gh, sh, p.wsc[0], p.wsc[1], acc);
        else
            mh_superblock<K, W, DUAL, 0>(st, p.lay, warp, lane, nact, gh, sh, p.wsc[0], p.wsc[1], acc);
        if (s == nblk - 1) { /* end of the row block: the output rows, then restart */
            const int orow = rb * mh_rb_rows(W, DUAL);
#pragma unroll
            for (int nt = 0; nt < MH_NT; nt++) {
                if (nt < nact) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int tok = 8 * nt + 2 * t + (i & 1);
                        if (tok >= mt) continue;
                        const int pr = pid[tok];
                        if constexpr (DUAL) {
                            const int row = orow + mh_out_row(true, warp, 0) + g + 8 * (i >> 1);
                            if (row >= p.n_out) continue;
                            float gv = acc[0][nt][i] * p.winv[0] * xsc[tok],
                                  uv = acc[1][nt][i] * p.winv[1] * xsc[tok];
                            if (p.clamp_on) { /* as the wide kernel and the CPU's store_mid */
                                if (gv > p.clamp) gv = p.clamp;
                                if (uv > p.clamp) uv = p.clamp;
                                if (uv < -p.clamp) uv = -p.clamp;
                            }
                            p.out[(uint64_t)pr * p.out_stride + row] = cu_silu(gv) * uv * p.weights[pr];
                        } else {
#pragma unroll
                            for (int m = 0; m < MH_MT; m++) {
                                const int row = orow + mh_out_row(false, warp, m) + g + 8 * (i >> 1);
                                if (row < p.n_out)
                                    p.out[(uint64_t)pr * p.out_stride + row] =
                                        acc[m][nt][i] * p.winv[0] * xsc[tok];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < MH_MT; m++)
#pragma unroll
                for (int nt = 0; nt < MH_NT; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.0f;
        }
        buf = buf + 1 == S ? 0 : buf + 1;
        if (++s == nblk) s = 0, rb++;
    }
}

/* ---- host ---- */

static uint32_t mh_min_n(void) {
    const char *v = getenv("DSV4_CUDA_MOE_F16_MIN_N");
    if (v && *v) {
        const long n = strtol(v, NULL, 10);
        return n < 2 ? 2u : (uint32_t)n;
    }
    return 256;
}
/* which products DSV4_CUDA_MOE_F16 allows: bit 0 gate/up, bit 1 down */
static int mh_switch(void) {
    const char *v = getenv("DSV4_CUDA_MOE_F16");
    if (!v || !*v || !strcmp(v, "1")) return 3;
    if (!strcmp(v, "gate_up")) return 1;
    if (!strcmp(v, "down")) return 2;
    return 0;
}
/* Warps per CTA: DSV4_CUDA_MOE_F16_WARPS=8 or 16 (default 16), read per call. */
static int mh_warps(void) {
    const char *v = getenv("DSV4_CUDA_MOE_F16_WARPS");
    return v && !strcmp(v, "8") ? 8 : 16;
}
typedef void (*mh_fn)(const mh_params);
static mh_fn mh_kernel_of(int kind, int W) {
    if (kind == GM_IQ2_XXS) return W == 8 ? mh_kernel<GM_IQ2_XXS, 8, true> : mh_kernel<GM_IQ2_XXS, 16, true>;
    return W == 8 ? mh_kernel<GM_Q2_K, 8, false> : mh_kernel<GM_Q2_K, 16, false>;
}
static int mh_kind_of(uint32_t type) {
    return type == DSV4_TYPE_IQ2_XXS ? GM_IQ2_XXS : type == DSV4_TYPE_Q2_K ? GM_Q2_K : GM_NONE;
}

/* The deepest pipeline (2..mh_max_stages) whose image fits the device; 0 if none does. */
static int mh_stages(const cuda_ctx *c, int kind, int W) {
    for (int s = mh_max_stages(W); s >= 2; s--)
        if ((size_t)mh_layout_of(kind, s, W).total <= c->caps.smem_per_block_optin) return s;
    return 0;
}

/* Scale scans of every IQ2_XXS / Q2_K tensor not yet known (only: that one): largest |d| (and
 * |dmin|), one wait. */
static bool mh_scan(cuda_ctx *c, cu_weight *only) {
    size_t nq = 0;
#define MH_SCANNED(r)                                                                                        \
    ((r)->host && ((r)->type == DSV4_TYPE_IQ2_XXS || (r)->type == DSV4_TYPE_Q2_K) && (r)->half_state == 0 && \
     (!only || (r) == only))
    for (size_t i = 0; i < c->map_cap; i++) nq += MH_SCANNED(&c->map[i]);
    if (!nq) return true;
    uint32_t *d = NULL, *h = (uint32_t *)calloc(2 * nq, sizeof *h);
    dsv4_error e;
    memset(&e, 0, sizeof e);
    bool ok = h && cudaMalloc((void **)&d, 2 * nq * sizeof *d) == cudaSuccess &&
              cudaMemsetAsync(d, 0, 2 * nq * sizeof *d, c->stream) == cudaSuccess;
    size_t k = 0;
    for (size_t i = 0; ok && i < c->map_cap; i++) {
        cu_weight *r = &c->map[i];
        if (!MH_SCANNED(r)) continue;
        if (r->type == DSV4_TYPE_IQ2_XXS)
            ok = dsv4_cuda_block_max_d(r->dev, r->bytes / 66, 66, 0, d + 2 * k, c->stream, &e) == DSV4_OK;
        else
            ok =
                dsv4_cuda_block_max_d(r->dev, r->bytes / 84, 84, 80, d + 2 * k, c->stream, &e) == DSV4_OK &&
                dsv4_cuda_block_max_d(r->dev, r->bytes / 84, 84, 82, d + 2 * k + 1, c->stream, &e) == DSV4_OK;
        k++;
    }
    ok = ok && cudaMemcpyAsync(h, d, 2 * nq * sizeof *d, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess &&
         cudaStreamSynchronize(c->stream) == cudaSuccess;
    k = 0;
    for (size_t i = 0; ok && i < c->map_cap; i++) {
        cu_weight *r = &c->map[i];
        if (!MH_SCANNED(r)) continue;
        bool fin;
        r->half_shift = (int8_t)mh_shift_of(mh_kind_of(r->type), h[2 * k], h[2 * k + 1], &fin);
        r->half_state = fin ? 1 : -1;
        k++;
    }
#undef MH_SCANNED
    if (ok) c->n_sync[CU_SYNC_READ]++;
    if (d) cudaFree(d);
    free(h);
    cudaGetLastError();
    return ok;
}

void cu_moe_half_prepare(cuda_ctx *c) {
    if (c->numerics != DSV4_NUMERICS_DS4 || c->generic_only || c->caps.cc_major < 8 || !mh_switch()) return;
    mh_scan(c, NULL);
}

/* Shift of one tensor (scanned now if it was not at creation; never while a step is recorded). */
static bool mh_tensor_shift(cuda_ctx *c, const dsv4_tensor *t, int *p) {
    cu_weight *rec = cu_weight_rec(c, t);
    if (!rec) return false;
    if (rec->half_state == 0 && (c->step_capturing || !mh_scan(c, rec))) return false;
    *p = rec->half_shift;
    return rec->half_state > 0;
}

/* May the kernel of this kind run here (shared memory, its limit raised once)? */
static bool mh_kernel_ok(cuda_ctx *c, int kind, int W) {
    const int st = mh_stages(c, kind, W);
    if (!st) return false;
    const int bit = (kind == GM_IQ2_XXS ? 1 : 4) << (W == 8 ? 0 : 1);
    if (!(c->moe_half_attr & bit)) {
        if (cudaFuncSetAttribute((const void *)mh_kernel_of(kind, W),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 mh_layout_of(kind, st, W).total) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        c->moe_half_attr |= bit;
    }
    return true;
}

int cu_moe_half_ok(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                   uint32_t n, const void *gd, const void *ud, const void *dd, cu_moe_half_plan *plan) {
    memset(plan, 0, sizeof *plan);
    const int sw = mh_switch();
    if (!sw || n < mh_min_n() || c->numerics != DSV4_NUMERICS_DS4 || c->generic_only || c->caps.cc_major < 8)
        return 0;
    const int W = mh_warps();
    int which = 0, pg, pu, pd;
    const uint64_t in = gate->ne[0], ff = down->ne[0];
    if ((sw & 1) && gate->type == DSV4_TYPE_IQ2_XXS && up->type == DSV4_TYPE_IQ2_XXS && in % 512 == 0 &&
        in <= (1u << 16) && gate->row_bytes == up->row_bytes && gate->row_bytes % 4 == 0 &&
        gate->row_bytes >= in / 256 * 66 && ((uintptr_t)gd | (uintptr_t)ud) % 4 == 0 &&
        mh_kernel_ok(c, GM_IQ2_XXS, W) && mh_tensor_shift(c, gate, &pg) && mh_tensor_shift(c, up, &pu)) {
        plan->wsc[0] = xb_pow2(pg - 3), plan->wsc[1] = xb_pow2(pu - 3);
        plan->winv[0] = xb_pow2(-pg), plan->winv[1] = xb_pow2(-pu);
        which |= 1;
    }
    if ((sw & 2) && down->type == DSV4_TYPE_Q2_K && ff % 256 == 0 && ff <= (1u << 16) &&
        down->row_bytes % 4 == 0 && down->row_bytes >= ff / 256 * 84 && (uintptr_t)dd % 4 == 0 &&
        mh_kernel_ok(c, GM_Q2_K, W) && mh_tensor_shift(c, down, &pd)) {
        plan->dsc = xb_pow2(pd), plan->dinv = xb_pow2(-pd);
        which |= 2;
    }
    plan->which = which;
    return which;
}

size_t cu_moe_half_scratch_bytes(uint64_t rows, uint64_t in) {
    return (size_t)(rows * in * 2 + ((rows * 4 + 255) & ~255ull));
}

static dsv4_status mh_launch(cuda_ctx *c, int kind, mh_params *p, const cu_moe_wide_args *a,
                             dsv4_error *err) {
    const int W = mh_warps(), st = mh_stages(c, kind, W);
    const bool dual = kind == GM_IQ2_XXS;
    if (!st) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe f16: no pipeline fits the device");
    p->grid = c->d_iq2_grid, p->signs = c->d_iq2_signs;
    p->tiles = a->tiles, p->n_tiles = a->n_tiles, p->list = a->list;
    p->lay = mh_layout_of(kind, st, W);
    p->n_rb = (p->n_out + mh_rb_rows(W, dual) - 1) / mh_rb_rows(W, dual);
    p->rb_per_cta = cu_moe_wide_rb_per_cta(c, p->n_rb, a->P, a->n_expert);
    const dim3 grid((unsigned)((p->n_rb + p->rb_per_cta - 1) / p->rb_per_cta), (unsigned)a->max_tiles);
    mh_kernel_of(kind, W)<<<grid, 32 * W, (size_t)p->lay.total, c->stream>>>(*p);
    const dsv4_status s = cu_launched(err, dual ? "moe f16 gate/up" : "moe f16 down");
    if (s == DSV4_OK) c->moe_half_calls++;
    return s;
}

/* DSV4_CUDA_MOE_WS asks for the warpgroup kernel for this product (down or gate/up) and a compute capability
 * 9.0 device runs it (cuda_moe_ws.h; the device asked once per context) */
static bool mh_ws_on(cuda_ctx *c, bool down) {
    if (!(dsv4_cuda_moe_ws_mode() & (down ? DSV4_MOE_WS_DOWN : DSV4_MOE_WS_GATE_UP))) return false;
    if (c->moe_ws_state == 0)
        c->moe_ws_state = dsv4_cuda_moe_ws_device_ok(c->caps.cc_major, c->caps.smem_per_block_optin) ? 1 : -1;
    return c->moe_ws_state > 0;
}
/* A product on it: mh_kernel's tiles, its own row blocks (mp_rb_rows: 128 rows of gate and of up, 256 of
 * down) */
static dsv4_status mh_ws_launch(cuda_ctx *c, mh_params *p, bool down, const cu_moe_wide_args *a,
                                dsv4_error *err) {
    p->grid = c->d_iq2_grid, p->signs = c->d_iq2_signs;
    p->tiles = a->tiles, p->n_tiles = a->n_tiles, p->list = a->list;
    const int rows = mp_rb_rows(!down);
    p->n_rb = (p->n_out + rows - 1) / rows;
    p->rb_per_cta = cu_moe_wide_rb_per_cta(c, p->n_rb, a->P, a->n_expert);
    const dsv4_status s =
        dsv4_cuda_moe_ws_product(p, down, (unsigned)((p->n_rb + p->rb_per_cta - 1) / p->rb_per_cta),
                                 (unsigned)a->max_tiles, c->stream, err);
    if (s == DSV4_OK) c->moe_half_calls++, c->moe_ws_calls++;
    return s;
}

dsv4_status cu_moe_half_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, uint32_t n,
                                const cu_moe_half_plan *plan, dsv4_error *err) {
    uint16_t *xh = (uint16_t *)a->scratch;
    float *xs = (float *)((uint8_t *)a->scratch + ((n * a->in * 2 + 255) & ~255ull));
    const int nblk = (int)(a->in / 256);
    const unsigned pack_threads = MH_PACK_WARPS * 32;
    mh_pack_kernel<<<cu_blocks((uint64_t)n * nblk * 32, pack_threads), pack_threads, 0, c->stream>>>(
        a->xq, a->xq_stride, n, nblk, xh, xs);
    dsv4_status s = cu_launched(err, "moe f16 pack");
    if (s != DSV4_OK) return s;
    mh_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->gd, p.w1 = a->ud;
    p.row_bytes = a->gu_row_bytes, p.expert_bytes = a->ff * a->gu_row_bytes;
    p.n_out = (int)a->ff, p.in = (int)a->in, p.kdiv = (int)a->k;
    p.xh = xh, p.xs = xs;
    p.wsc[0] = plan->wsc[0], p.wsc[1] = plan->wsc[1], p.winv[0] = plan->winv[0], p.winv[1] = plan->winv[1];
    p.weights = a->weights, p.clamp = a->clamp, p.clamp_on = a->clamp > 1.0e-6f;
    p.out = a->mid, p.out_stride = a->ff;
    if (mh_ws_on(c, false) && dsv4_cuda_moe_ws_ok(&p, false)) return mh_ws_launch(c, &p, false, a, err);
    return mh_launch(c, GM_IQ2_XXS, &p, a, err);
}

dsv4_status cu_moe_half_down(cuda_ctx *c, const cu_moe_wide_args *a, const cu_moe_half_plan *plan,
                             dsv4_error *err) {
    uint16_t *xh = (uint16_t *)a->scratch;
    float *xs = (float *)((uint8_t *)a->scratch + ((a->P * a->ff * 2 + 255) & ~255ull));
    const unsigned pack_threads = MH_PACK_WARPS * 32;
    mh_pack_mid_kernel<<<cu_blocks(a->P * 32, pack_threads), pack_threads, 0, c->stream>>>(
        a->mid, a->ff, a->P, (int)(a->ff / 256), xh, xs);
    dsv4_status s = cu_launched(err, "moe f16 pack down");
    if (s != DSV4_OK) return s;
    mh_params p;
    memset(&p, 0, sizeof p);
    p.w0 = a->dd, p.w1 = NULL;
    p.row_bytes = a->down_row_bytes, p.expert_bytes = a->embd * a->down_row_bytes;
    p.n_out = (int)a->embd, p.in = (int)a->ff, p.kdiv = 1;
    p.xh = xh, p.xs = xs;
    p.wsc[0] = plan->dsc, p.winv[0] = plan->dinv;
    p.out = a->y, p.out_stride = a->embd;
    if (mh_ws_on(c, true) && dsv4_cuda_moe_ws_ok(&p, true)) return mh_ws_launch(c, &p, true, a, err);
    return mh_launch(c, GM_Q2_K, &p, a, err);
}
