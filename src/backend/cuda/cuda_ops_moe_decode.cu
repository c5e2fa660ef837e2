/* One-token routed experts in two launches (API and numerics: cuda_moe_decode.h).
 *
 * Why this shape (the 5-launch path spent 52 us on 42 MB, ~19 % of the copy rate): every weight
 * byte is read once, so the time is the time to stream the expert rows, and the pieces that are
 * not streaming (launch gaps, pipeline bubbles, decode instructions) are what to remove.
 *  - Two launches instead of five: the gate/up kernel quantizes x itself (every CTA, 16 warp
 *    blocks, bit-exact with the Q8_K unit), and the mid + its Q8_K quantization happen in the
 *    gate/up kernel: the warp that finishes the last of the 256 rows of a mid block (a ticket
 *    counter per block) quantizes that block. The down kernel sums the slots in order per CTA.
 *  - No CTA-wide barrier in the main loops: a warp owns whole rows (a gate/up row pair, or one
 *    down row), loads them with 16-byte coalesced ld.global.nc into registers one task ahead,
 *    stores them into its own shared-memory buffer (__syncwarp only) and decodes from there
 *    (IQ2_XXS blocks of 66 bytes and Q2_K blocks of 84 never line up with 16-byte lanes). Bytes
 *    in flight per SM: gate/up 16 warps x one row pair (34 KB IQ2_XXS, 74 KB Q4_K), down 24
 *    warps x two rows (32 KB Q2_K, 55 KB Q4_K), above the ~26 KB Little's law asks at 4.3 TB/s.
 *  - Each lane keeps its fixed slice of the activations in registers for the whole kernel (the
 *    same slice on every row), so activations cost no shared-memory traffic in the main loop.
 *  - IQ2_XXS: grid and sign selectors (cuda_moe_decode_units.cuh) in 32 lane copies (48 KB per
 *    CTA, one per SM): each lookup is one conflict-free LDS.32, and per 8 weights the decode is
 *    2 LDS + OR + 2 PRMT + SHF + 2 dp4a (no sign masks, no dp4a for the negative part).
 * Numerics: the CPU's. A lane group's integer partials of a superblock are added exactly (integer
 * shuffles), the superblock's float term is the CPU's, and the terms meet in per-warp slots and
 * are added in the CPU's order: every row equals quant_dot_* bit for bit (deterministic, whatever
 * else is in the launch). */
#include <cuda_runtime.h>
#include <limits.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_backend.h" /* cu_silu */
#include "backend/cuda/cuda_moe_decode.h"
#include "backend/cuda/cuda_moe_decode_units.cuh"

#define MD_FULL 0xffffffffu
#define MDA_WARPS 16 /* gate/up kernel: one CTA of 16 warps per SM (128 registers per thread) */
#define MDA_THREADS (MDA_WARPS * 32)
#define MDB_THREADS 384 /* down kernel: at most 12 warps, two CTAs per SM */
#define MD_COPIES 32
#define MD_TAB_ENTRIES (256 + 128)
#define MD_TAB_BYTES (MD_TAB_ENTRIES * MD_COPIES * 4)
#define MD_IN_GU 4096 /* gate/up width the lane slices assume: 16 superblocks */
#define MD_IN_DN 2048 /* down width: 8 superblocks */
#define MD_XQ_BYTES (MD_IN_GU / 256 * 292)

enum { MD_GU_IQ2 = 0, MD_GU_Q4K = 1 };
enum { MD_DN_Q2K = 0, MD_DN_Q4K = 1 };

__host__ __device__ constexpr int md_gu_rb(int f) {
    return f == MD_GU_IQ2 ? MD_IN_GU / 256 * 66 : MD_IN_GU / 256 * 144;
}
__host__ __device__ constexpr int md_dn_rb(int f) {
    return f == MD_DN_Q2K ? MD_IN_DN / 256 * 84 : MD_IN_DN / 256 * 144;
}
__host__ __device__ constexpr int md_cpl(int rb) { return (rb / 16 + 31) / 32; }
/* per-warp buffers: the staged rows, 16 spare bytes, 16 term slots per row */
__host__ __device__ constexpr int md_gu_wbuf(int f) { return 2 * md_gu_rb(f) + 16 + 2 * 64; }
__host__ __device__ constexpr int md_dn_wbuf(int f) { return md_dn_rb(f) + 16 + 64; }
__host__ __device__ constexpr int md_gu_smem(int f) {
    return (f == MD_GU_IQ2 ? MD_TAB_BYTES : 0) + MD_XQ_BYTES + MDA_WARPS * md_gu_wbuf(f);
}

struct md_params {
    const uint8_t *gate, *up, *down;
    long long gu_expert_bytes, dn_expert_bytes;
    const int32_t *ids;
    const float *w, *x;
    float *mid, *out, *gu_debug, *y_debug;
    uint8_t *midq;
    unsigned *tickets;
    const uint32_t *tables;
    int k, ff, embd, n_expert, clamp_on;
    float clamp;
};

/* Row of RB bytes (16-byte aligned) -> registers: chunk lane + 32 i in v[i]. */
template <int RB>
static __device__ __forceinline__ void md_ldg_row(const uint8_t *row, int lane, int4 (&v)[md_cpl(RB)]) {
#pragma unroll
    for (int i = 0; i < md_cpl(RB); i++) {
        const int c = lane + 32 * i;
        if (c < RB / 16) v[i] = __ldg((const int4 *)row + c);
    }
}
template <int RB>
static __device__ __forceinline__ void md_sts_row(uint8_t *sr, int lane, const int4 (&v)[md_cpl(RB)]) {
#pragma unroll
    for (int i = 0; i < md_cpl(RB); i++) {
        const int c = lane + 32 * i;
        if (c < RB / 16) *((int4 *)sr + c) = v[i];
    }
}
template <int RB> static __device__ __forceinline__ void md_zero(int4 (&v)[md_cpl(RB)]) {
#pragma unroll
    for (int i = 0; i < md_cpl(RB); i++) v[i] = make_int4(0, 0, 0, 0);
}

/* The superblock terms meet in the warp's term slots (16-byte aligned, 16 floats) and every lane
 * adds them in the CPU's order (md_seq_sum). The slots are rewritten only after the loop-top
 * __syncwarp of the next task. */
template <int NT> static __device__ __forceinline__ float md_terms_sum(float *tsm) {
    __syncwarp();
    return md_seq_sum<NT>(tsm);
}
static __device__ __forceinline__ int md_isum4(int v) {
    v += __shfl_xor_sync(MD_FULL, v, 1);
    return v + __shfl_xor_sync(MD_FULL, v, 2);
}

/* ---- row dots (the row staged at sr; every lane returns the row's value) ---- */
struct md_gu_act {
    md_act_iq2 iq2;
    md_act_q4k q4[2];
};
template <int F>
static __device__ __forceinline__ float md_gu_dot(const uint8_t *sr, int lane, const md_gu_act &a,
                                                  const uint8_t *TG, const uint8_t *TS, float *tsm) {
    if (F == MD_GU_IQ2) {
        const int b = lane >> 1;
        int part = md_iq2_half<7>(sr, b, lane & 1, a.iq2, TG, TS, 4u * (uint32_t)lane);
        part += __shfl_xor_sync(MD_FULL, part, 1);
        const float t = md_iq2_term(sr, b, a.iq2.d, part);
        if ((lane & 1) == 0) tsm[b] = t;
        return 0.125f * md_terms_sum<16>(tsm);
    } else {
        const int b = lane >> 2, c = lane & 3;
        int is0, sm0, is1, sm1;
        md_q4k_quarter(sr, b, c, a.q4[0], &is0, &sm0);
        md_q4k_quarter(sr, b + 8, c, a.q4[1], &is1, &sm1);
        is0 = md_isum4(is0), sm0 = md_isum4(sm0), is1 = md_isum4(is1), sm1 = md_isum4(sm1);
        const float t0 = md_k_term(md_q4k_dm(sr, b), a.q4[0].d, is0, sm0);
        const float t1 = md_k_term(md_q4k_dm(sr, b + 8), a.q4[1].d, is1, sm1);
        if (c == 0) tsm[b] = t0, tsm[b + 8] = t1;
        return md_terms_sum<16>(tsm);
    }
}
struct md_dn_act {
    md_act_q2k q2;
    md_act_q4k q4;
};
template <int F>
static __device__ __forceinline__ float md_dn_dot(const uint8_t *sr, int lane, const md_dn_act &a,
                                                  float *tsm) {
    const int b = lane >> 2, i = lane & 3;
    int is, sm;
    uint32_t dm;
    float d;
    if (F == MD_DN_Q2K) {
        md_q2k_piece(sr, b, i, a.q2, &is, &sm);
        dm = md_q2k_dm(sr, b);
        d = a.q2.d;
    } else {
        md_q4k_quarter(sr, b, i, a.q4, &is, &sm);
        dm = md_q4k_dm(sr, b);
        d = a.q4.d;
    }
    is = md_isum4(is), sm = md_isum4(sm);
    const float t = md_k_term(dm, d, is, sm);
    if (i == 0) tsm[b] = t;
    return md_terms_sum<8>(tsm);
}

/* ---- kernel 1: gate + up rows, mid, Q8_K of each finished mid block ---- */
template <int F> __global__ void __launch_bounds__(MDA_THREADS, 1) md_gate_up_kernel(const md_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int RB = md_gu_rb(F), TABB = F == MD_GU_IQ2 ? MD_TAB_BYTES : 0;
    uint32_t *tab = (uint32_t *)smem;
    uint8_t *xq = smem + TABB;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint8_t *buf = xq + MD_XQ_BYTES + warp * md_gu_wbuf(F);
    float *tsm = (float *)(buf + 2 * RB + 16); /* gate terms, then up terms */
    const int nw = gridDim.x * MDA_WARPS, total = p.k * p.ff;
    const int my_id = lane < p.k ? __ldg(p.ids + lane) : -1; /* lane s: the id of slot s */
    int4 vg[md_cpl(RB)], vu[md_cpl(RB)];
    md_zero<RB>(vg), md_zero<RB>(vu);
    /* task t = s * ff + r: gate and up row r of slot s; false (nothing loaded) for a bad id */
    auto issue = [&](int t) -> bool {
        const int s = t / p.ff, r = t - s * p.ff;
        const int e = __shfl_sync(MD_FULL, my_id, s);
        if (e < 0 || e >= p.n_expert) return false;
        const long long off = (long long)e * p.gu_expert_bytes + (long long)r * RB;
        md_ldg_row<RB>(p.gate + off, lane, vg);
        md_ldg_row<RB>(p.up + off, lane, vu);
        return true;
    };
    int t = blockIdx.x * MDA_WARPS + warp;
    bool have = t < total, ok = have && issue(t); /* first rows in flight before the prologue */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* the down kernel (a programmatic dependent launch) may start on an SM as soon as this CTA
     * leaves it, streaming its first rows; it waits for this grid before it reads the mids */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif

    if (F == MD_GU_IQ2) /* selectors: entry e in 32 copies (copy = lane) */
        for (int i = tid; i < MD_TAB_ENTRIES * 8; i += MDA_THREADS) {
            const uint32_t v = __ldg(p.tables + (i >> 3));
            *(uint4 *)(tab + (i >> 3) * MD_COPIES + (i & 7) * 4) = make_uint4(v, v, v, v);
        }
    for (int b = warp; b < MD_IN_GU / 256; b += MDA_WARPS) { /* x -> Q8_K, the shared unit */
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = p.x[256 * b + 8 * lane + j];
        act_q8_k_block(v, lane, xq + 292 * b);
    }
    __syncthreads();
    md_gu_act a;
    if (F == MD_GU_IQ2) {
        md_load_act_iq2(xq + 292 * (lane >> 1), lane & 1, &a.iq2);
    } else {
        md_load_act_q4k(xq + 292 * (lane >> 2), lane & 3, &a.q4[0]);
        md_load_act_q4k(xq + 292 * (8 + (lane >> 2)), lane & 3, &a.q4[1]);
    }
    const uint8_t *TG = (const uint8_t *)tab, *TS = TG + 256 * MD_COPIES * 4; /* + 4 lane in the units */
    const float nanv = __int_as_float(0x7fc00000);
    /* The ticket of a pair's mid block is taken after its mid is stored (release fence, relaxed
     * atomic) and read one pair later, so the atomic's round trip never stalls the warp; the warp
     * that took a block's 256th ticket quantizes the block (acquire fence: every mid is visible). */
    unsigned pend_old = 0u; /* lane 0: the value the last ticket returned */
    int pend_blk = -1;      /* its block (warp-uniform), -1: none */
    auto retire = [&]() {
        if (pend_blk < 0) return;
        if (__shfl_sync(MD_FULL, pend_old == 255u ? 1 : 0, 0)) {
            if (lane == 0) p.tickets[pend_blk] = 0; /* no more increments of it in this launch */
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            __syncwarp(); /* the other lanes: after lane 0's ticket */
            float v[8];
            const float *mb = p.mid + (size_t)pend_blk * 256 + 8 * lane;
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = __ldcg(mb + j);
            act_q8_k_block(v, lane, p.midq + (size_t)pend_blk * 292);
        }
        pend_blk = -1;
    };

    while (have) {
        const int tn = t + nw;
        const bool haven = tn < total;
        __syncwarp();
        if (ok) md_sts_row<RB>(buf, lane, vg), md_sts_row<RB>(buf + RB, lane, vu);
        __syncwarp();
        const bool okn = haven && issue(tn); /* the next pair streams while this one is decoded */
        float g = nanv, u = nanv;
        if (ok) {
            g = md_gu_dot<F>(buf, lane, a, TG, TS, tsm);
            u = md_gu_dot<F>(buf + RB, lane, a, TG, TS, tsm + 16);
        }
        retire();
        const int s = t / p.ff;
        const int blk = t >> 8; /* ff % 256 == 0: a block never spans two slots */
        if (lane == 0) {        /* moe_mid_q8k_kernel's expression and flags */
            float gv = g, uv = u;
            if (p.clamp_on) {
                if (gv > p.clamp) gv = p.clamp;
                if (uv > p.clamp) uv = p.clamp;
                if (uv < -p.clamp) uv = -p.clamp;
            }
            if (p.gu_debug) p.gu_debug[2 * t] = g, p.gu_debug[2 * t + 1] = u;
            p.mid[t] = cu_silu(gv) * uv * __ldg(p.w + s);
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            pend_old = atomicAdd(p.tickets + blk, 1u);
        }
        pend_blk = blk;
        t = tn, have = haven, ok = okn;
    }
    retire();
}

/* ---- kernel 2: down rows per slot (one warp group per slot), slot sum in order ---- */
template <int F>
__global__ void __launch_bounds__(MDB_THREADS, 2) md_down_kernel(const md_params p, int wps) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int RB = md_dn_rb(F);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r0 = (int)((long long)p.embd * blockIdx.x / gridDim.x);
    const int r1 = (int)((long long)p.embd * (blockIdx.x + 1) / gridDim.x);
    const int maxr = (p.embd + gridDim.x - 1) / gridDim.x;
    float *ys = (float *)smem;
    uint8_t *buf = smem + (((size_t)p.k * maxr * 4 + 15) & ~(size_t)15) + warp * md_dn_wbuf(F);
    float *tsm = (float *)(buf + RB + 16);
    const int s = warp / wps, j = warp - s * wps;
    const int e = __ldg(p.ids + s);
    const bool ok = e >= 0 && e < p.n_expert;
    const uint8_t *wb = p.down + (ok ? (long long)e * p.dn_expert_bytes : 0);
    /* rows in flight per warp: DEPTH (Q2_K rows are small: three, ~48 KB per SM) */
    constexpr int DEPTH = F == MD_DN_Q2K ? 3 : 2;
    int4 v[DEPTH][md_cpl(RB)];
    int r = r0 + j;
#pragma unroll
    for (int d = 0; d < DEPTH; d++) {
        md_zero<RB>(v[d]);
        if (ok && r + d * wps < r1) md_ldg_row<RB>(wb + (long long)(r + d * wps) * RB, lane, v[d]);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* launched as a programmatic dependent of the gate/up kernel: the weight rows above do not
     * depend on it, the mids below do (a no-op in an ordinary launch) */
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const uint8_t *xb = p.midq + (size_t)s * (MD_IN_DN / 256) * 292 + 292 * (lane >> 2);
    md_dn_act a;
    if (F == MD_DN_Q2K)
        md_load_act_q2k<true>(xb, lane & 3, &a.q2);
    else
        md_load_act_q4k<true>(xb, lane & 3, &a.q4);
    const float nanv = __int_as_float(0x7fc00000);
    for (; r < r1; r += wps) {
        __syncwarp();
        if (ok) md_sts_row<RB>(buf, lane, v[0]);
        __syncwarp();
#pragma unroll
        for (int d = 0; d + 1 < DEPTH; d++)
#pragma unroll
            for (int i = 0; i < md_cpl(RB); i++) v[d][i] = v[d + 1][i];
        if (ok && r + DEPTH * wps < r1)
            md_ldg_row<RB>(wb + (long long)(r + DEPTH * wps) * RB, lane, v[DEPTH - 1]);
        const float y = ok ? md_dn_dot<F>(buf, lane, a, tsm) : nanv;
        if (lane == 0) {
            ys[s * maxr + (r - r0)] = y;
            if (p.y_debug) p.y_debug[(size_t)s * p.embd + r] = y;
        }
    }
    __syncthreads();
    for (int i = tid; i < r1 - r0; i += blockDim.x) { /* moe_sum_kernel's order */
        float acc = 0.0f;
        for (int q = 0; q < p.k; q++) acc += ys[q * maxr + i];
        p.out[r0 + i] = acc;
    }
}

/* ---- host side ---- */

static int md_gu_format(uint32_t t) {
    return t == DSV4_TYPE_IQ2_XXS ? MD_GU_IQ2 : t == DSV4_TYPE_Q4_K ? MD_GU_Q4K : -1;
}
static int md_dn_format(uint32_t t) {
    return t == DSV4_TYPE_Q2_K ? MD_DN_Q2K : t == DSV4_TYPE_Q4_K ? MD_DN_Q4K : -1;
}

extern "C" dsv4_status dsv4_cuda_moe_dec_init(dsv4_cuda_moe_dec_ctx *ctx, int device, dsv4_error *err) {
    if (!ctx) return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_moe_dec_init: ctx is NULL");
    memset(ctx, 0, sizeof *ctx);
    uint32_t tab[MD_TAB_ENTRIES];
    for (int e = 0; e < 256; e++) {
        if (!md_iq2_grid_ok(dsv4_iq2xxs_grid[e]))
            return dsv4_fail(err, DSV4_ERR_INVALID, "dsv4_cuda_moe_dec_init: IQ2_XXS grid entry %d", e);
        tab[e] = md_iq2_grid_sel(dsv4_iq2xxs_grid[e]);
    }
    for (int s = 0; s < 128; s++) tab[256 + s] = md_iq2_sign_sel(dsv4_ksigns_iq2xs[s]);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMalloc((void **)&ctx->d_tables, sizeof tab);
    if (e == cudaSuccess) e = cudaMemcpy(ctx->d_tables, tab, sizeof tab, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMalloc((void **)&ctx->d_tickets, DSV4_MOE_DEC_TICKETS * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMemset(ctx->d_tickets, 0, DSV4_MOE_DEC_TICKETS * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute((const void *)md_gate_up_kernel<MD_GU_IQ2>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, md_gu_smem(MD_GU_IQ2));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute((const void *)md_gate_up_kernel<MD_GU_Q4K>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, md_gu_smem(MD_GU_Q4K));
    if (e != cudaSuccess) {
        dsv4_cuda_moe_dec_destroy(ctx);
        return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_moe_dec_init: device %d: %s", device,
                         cudaGetErrorString(e));
    }
    ctx->sm_count = prop.multiProcessorCount;
    ctx->smem_optin = (int)prop.sharedMemPerBlockOptin;
    ctx->pdl = prop.major >= 9; /* griddepcontrol (programmatic dependent launch) is sm_90+ */
    return DSV4_OK;
}

extern "C" void dsv4_cuda_moe_dec_destroy(dsv4_cuda_moe_dec_ctx *ctx) {
    if (!ctx) return;
    if (ctx->d_tables) cudaFree(ctx->d_tables);
    if (ctx->d_tickets) cudaFree(ctx->d_tickets);
    ctx->d_tables = NULL;
    ctx->d_tickets = NULL;
}

static int md_wps(int k) { return k * 2 * 32 <= MDB_THREADS ? 2 : 1; }

extern "C" dsv4_status dsv4_cuda_moe_dec_check(const dsv4_cuda_moe_dec_ctx *ctx,
                                               const dsv4_cuda_moe_dec_args *a, dsv4_error *err) {
    if (!ctx || !a) return dsv4_fail(err, DSV4_ERR_INVALID, "moe decode: NULL context or arguments");
    if (!ctx->d_tables || !ctx->d_tickets || ctx->sm_count <= 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe decode: context not initialized");
    const int fg = md_gu_format(a->gate_type), fd = md_dn_format(a->down_type);
    if (fg < 0 || fd < 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe decode: expert types %s/%s",
                         dsv4_type_name(a->gate_type), dsv4_type_name(a->down_type));
    if (a->n_embd != MD_IN_GU || a->n_ff != MD_IN_DN)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe decode: n_embd=%lld n_ff=%lld (takes 4096 / 2048)",
                         (long long)a->n_embd, (long long)a->n_ff);
    if (a->k < 1 || a->k * 32 > MDB_THREADS || (int64_t)a->k * a->n_ff / 256 > DSV4_MOE_DEC_TICKETS ||
        a->n_expert < 1 || a->n_expert > INT_MAX)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe decode: k=%d of %lld experts", a->k,
                         (long long)a->n_expert);
    if (!a->gate || !a->up || !a->down || !a->ids || !a->weights || !a->x || !a->out)
        return dsv4_fail(err, DSV4_ERR_INVALID, "moe decode: NULL device pointer");
    if ((((uintptr_t)a->gate | (uintptr_t)a->up | (uintptr_t)a->down) & 15) != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe decode: expert tensors must be 16-byte aligned");
    if (md_gu_smem(fg) > ctx->smem_optin)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "moe decode: needs %d bytes of shared memory, device allows %d", md_gu_smem(fg),
                         ctx->smem_optin);
    return DSV4_OK;
}

template <int FG, int FD>
static cudaError_t md_launch(const dsv4_cuda_moe_dec_ctx *ctx, const md_params &p, bool pdl,
                             cudaStream_t st) {
    md_gate_up_kernel<FG><<<ctx->sm_count, MDA_THREADS, md_gu_smem(FG), st>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int wps = md_wps(p.k);
    int grid = 2 * ctx->sm_count;
    if (grid > p.embd) grid = p.embd;
    const int maxr = (p.embd + grid - 1) / grid;
    const size_t smem = (((size_t)p.k * maxr * 4 + 15) & ~(size_t)15) + (size_t)p.k * wps * md_dn_wbuf(FD);
    if (!pdl) {
        md_down_kernel<FD><<<grid, p.k * wps * 32, smem, st>>>(p, wps);
        return cudaGetLastError();
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)(p.k * wps * 32));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, md_down_kernel<FD>, p, wps);
}

extern "C" dsv4_status dsv4_cuda_moe_decode(const dsv4_cuda_moe_dec_ctx *ctx, const dsv4_cuda_moe_dec_args *a,
                                            struct CUstream_st *stream, dsv4_error *err) {
    const dsv4_status st = dsv4_cuda_moe_dec_check(ctx, a, err);
    if (st != DSV4_OK) return st;
    if (!a->mid || !a->midq || ((uintptr_t)a->midq & 3) != 0)
        return dsv4_fail(err, DSV4_ERR_INVALID, "moe decode: scratch missing or midq not 4-byte aligned");
    const int fg = md_gu_format(a->gate_type), fd = md_dn_format(a->down_type);
    md_params p;
    memset(&p, 0, sizeof p);
    p.gate = (const uint8_t *)a->gate;
    p.up = (const uint8_t *)a->up;
    p.down = (const uint8_t *)a->down;
    p.gu_expert_bytes = (long long)md_gu_rb(fg) * a->n_ff;
    p.dn_expert_bytes = (long long)md_dn_rb(fd) * a->n_embd;
    p.ids = a->ids;
    p.w = a->weights;
    p.x = a->x;
    p.mid = a->mid;
    p.out = a->out;
    p.midq = (uint8_t *)a->midq;
    p.gu_debug = a->gu_debug;
    p.y_debug = a->y_debug;
    p.tickets = ctx->d_tickets;
    p.tables = ctx->d_tables;
    p.k = a->k;
    p.ff = (int)a->n_ff;
    p.embd = (int)a->n_embd;
    p.n_expert = (int)a->n_expert;
    p.clamp = a->clamp;
    p.clamp_on = a->clamp > 1.0e-6f;
    const bool pdl = ctx->pdl && !a->no_pdl;
    cudaError_t e;
    if (fg == MD_GU_IQ2)
        e = fd == MD_DN_Q2K ? md_launch<MD_GU_IQ2, MD_DN_Q2K>(ctx, p, pdl, stream)
                            : md_launch<MD_GU_IQ2, MD_DN_Q4K>(ctx, p, pdl, stream);
    else
        e = fd == MD_DN_Q2K ? md_launch<MD_GU_Q4K, MD_DN_Q2K>(ctx, p, pdl, stream)
                            : md_launch<MD_GU_Q4K, MD_DN_Q4K>(ctx, p, pdl, stream);
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "moe decode %s/%s: launch: %s", dsv4_type_name(a->gate_type),
                         dsv4_type_name(a->down_type), cudaGetErrorString(e));
    return DSV4_OK;
}
