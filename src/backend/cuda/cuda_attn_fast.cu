/* Fast sink attention for DS4 numerics: decode (`attention`, one query) and prefill
 * (`attention_chunk`). Design and numerics: cuda_attn_fast.cuh. The exact kernel
 * (cuda_attn_attention.cu) stays for EXACT numerics and DSV4_CUDA_ATTN=exact (cuda_ops_attn.cu
 * chooses).
 *
 * Pipeline of a CTA over its tiles: the next tile's rows are copied raw (cp.async, 16 B) into the
 * stage while the current tile (floats) is scored and accumulated; the stage becomes the tile
 * (F16 -> F32, masked rows -> zeros) after the copy lands. Four barriers per tile. Decode always
 * launches the split kernel and the combine (or, with the fold, the split kernel alone), so a recorded
 * step has the same nodes at every position (only grid sizes and arguments change). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_attn_common.cuh"
#include "backend/cuda/cuda_attn_fast.cuh"
#include "backend/cuda/cuda_attn_qnr.cuh"
#include "backend/cuda/cuda_attn_rope.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

namespace {

struct fa_smem {
    unsigned char stage[FA_TR * FA_ROWB]; /* raw bytes of the next tile */
    float tile[FA_TR * FA_D];             /* the current tile as floats */
    float sc[FA_G * FA_TR];               /* scores [head][row] */
    float pt[FA_TR * FA_G];               /* weights [row][head] */
    float fo[FA_G * FA_D];                /* chunk: the folded segments' o (each thread its own) */
    float m[FA_G], l[FA_G], f[FA_G];      /* the segment's running max and sum; this tile's rescale */
    float fm[FA_G], fl[FA_G];             /* chunk: the folded segments' M and L */
    fa_rowref rowp[2][FA_TR];             /* row references: current / next tile */
};

__device__ __forceinline__ void fa_cp16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

/* Copies of the tile's rows into the stage (one commit group per thread). */
__device__ __forceinline__ void fa_issue(fa_smem &s, const fa_rowref *rp, uint32_t tid) {
#pragma unroll
    for (uint32_t e = tid; e < FA_TR * (FA_ROWB / 16); e += FA_T) {
        const uint32_t r = e / (FA_ROWB / 16), c = e % (FA_ROWB / 16);
        const fa_rowref p = rp[r];
        if (p && c < fa_row_chunks(p))
            fa_cp16(s.stage + r * FA_ROWB + c * 16, fa_row_bytes(p) + (size_t)c * 16);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* One reduce-scatter stage (cuda_attn_fast.cuh fa_rs_send / fa_rs_keep). */
template <uint32_t O> __device__ __forceinline__ void fa_rs(float *acc, uint32_t lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (uint32_t i = 0; i < O; i++) {
        const float snd = fa_rs_send(acc, O, up, i), kp = fa_rs_keep(acc, O, up, i);
        acc[i] = kp + __shfl_xor_sync(0xffffffffu, snd, O);
    }
}

/* The combine's output v of element d of head h (token t); every lane of the warp calls it (lanes are 32
 * consecutive d of head h, one Q8_0 block, and the RoPE partner is the neighbouring lane): ra.half > 0 the
 * inverse RoPE of the tail with rope_rotate's expression (the rope op's bits; rot, cs, sn: this element's
 * angle), then out and its Q8_0 block. */
__device__ __forceinline__ void fa_combine_put(const fa_args &a, const rope_args &ra, uint32_t h, uint32_t t,
                                               uint32_t d, float v, bool rot, float cs, float sn) {
    const uint32_t r0 = FA_D - 2 * ra.half; /* first RoPE element of a head */
    const uint64_t th = (uint64_t)t * a.n_head + h;
    if (ra.half > 0) { /* uniform per launch: every lane takes part in the shuffle */
        const float other = __shfl_xor_sync(0xffffffffu, v, 1);
        if (rot) {
            float x0 = (d - r0) & 1u ? other : v, x1 = (d - r0) & 1u ? v : other;
            rope_rotate(&x0, &x1, cs, sn);
            v = (d - r0) & 1u ? x1 : x0;
        }
    }
    a.out[th * FA_D + d] = v;
    /* a warp's 32 values are one Q8_0 block (FA_D is a multiple of 32) */
    if (a.outq) act_q8_0_store_lane(v, (th * FA_D + d) >> 5, a.outq);
}

/* The partials of element d of head h (token t): m, l (per segment) and o (stride FA_D) */
struct fa_pref {
    const float *m, *l, *o;
};
__device__ __forceinline__ fa_pref fa_partials(const fa_args &a, uint32_t h, uint32_t t, uint32_t d) {
    const uint64_t idx = ((uint64_t)t * a.n_head + h) * a.stride;
    const float *m = a.part + (uint64_t)FA_PART * FA_D + idx;
    return {m, m + FA_PART, a.part + idx * FA_D + d};
}

/* One output element of the decode combine: the segments folded, the sink, then fa_combine_put. CG: the
 * partials read around L1. */
template <bool CG>
__device__ __forceinline__ void fa_combine_out(const fa_args &a, const rope_args &ra, uint32_t h, uint32_t t,
                                               uint32_t d, uint32_t splits, bool rot, float cs, float sn) {
    const fa_pref p = fa_partials(a, h, t, d);
    fa_combine_put(a, ra, h, t, d, fa_combine_pf<16, CG>(p.m, p.l, p.o, FA_D, splits, a.sinks[h]), rot, cs,
                   sn);
}

/* element d's RoPE angle for fa_combine_put (rot: d is in the tail; the arguments only) */
__device__ __forceinline__ bool fa_out_angle(const rope_args &ra, uint32_t t, uint32_t d, float *cs,
                                             float *sn) {
    const uint32_t r0 = FA_D - 2 * ra.half;
    const bool rot = ra.half > 0 && d >= r0;
    *cs = 0.0f;
    *sn = 0.0f;
    if (rot) rope_pair_cs_sn(ra, ra.pos0 + t * ra.pos_step, (d - r0) >> 1, cs, sn);
    return rot;
}

__device__ __forceinline__ uint64_t fa_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The n segment CTAs of one head group meet (thread 0 of each; bar: count, generation). Every CTA of the
 * grid is resident by then: fa_max_splits keeps the grid within the CTAs the device holds at once, the
 * earlier kernel has finished (cu_pdl_wait) and the next one starts only after every CTA of this one has
 * triggered. The last to arrive resets the count and advances the generation the others wait on; a wait
 * past 2 s traps (a launch error, never a hang). */
__device__ __forceinline__ void fa_meet(unsigned *bar, uint32_t n) {
    volatile unsigned *gen = bar + 1;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == n - 1) {
        atomicExch(bar, 0u);
        __threadfence();
        atomicAdd(bar + 1, 1u);
    } else {
        const uint64_t t0 = fa_ns();
        while (*gen == g)
            if (fa_ns() - t0 > 2000000000ull) __trap();
    }
    __threadfence();
}

/* on = 1 (attention_qnr): q holds the raw query heads, normed and rotated on the way in as q_norm_rope
 * does (qnr_head512: its bits), q itself left as it is. */
struct fa_qnr {
    rope_args a; /* the token's forward rotation */
    float eps;
    uint32_t on;
};

__global__ void __launch_bounds__(FA_T, 1) fa_kernel(fa_args a, fa_qnr r, rope_args ra) {
    cu_pdl_trigger();
    extern __shared__ __align__(16) unsigned char fa_dyn[];
    fa_smem &s = *reinterpret_cast<fa_smem *>(fa_dyn);
    const uint32_t tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    /* the pair angles (arguments only: before the wait) in the score and weight space, free until the
     * first tile's scores, which come after two barriers */
    static_assert(FA_G * FA_TR >= FA_D / 2 && FA_TR * FA_G >= FA_D / 2, "the angles fit sc and pt");
    float *const qcs = s.sc, *const qsn = s.pt;
    if (r.on)
        for (uint32_t k = tid; k < r.a.half; k += FA_T) rope_pair_cs_sn(r.a, r.a.pos0, k, &qcs[k], &qsn[k]);
    cu_pdl_wait();
    const uint32_t qd = w % (FA_G / FA_HW), wh = w / (FA_G / FA_HW); /* head quad; row / dim half */
    const uint32_t t = blockIdx.z, seg = blockIdx.y, h0 = blockIdx.x * FA_G;
    const fa_tok k = fa_token(a, t);
    const uint32_t n_tiles = (k.n_rows + FA_TR - 1) / FA_TR;
    const fa_plan tp = fa_token_plan(k.n_rows, a.n_head, a.slots);
    uint32_t tb = 0, te = n_tiles; /* chunk: every segment of the token */
    if (a.part) {                  /* decode: segment seg */
        if (seg >= tp.splits) return;
        tb = seg * tp.tps;
        te = n_tiles < tb + tp.tps ? n_tiles : tb + tp.tps;
    }

    if (tid < FA_TR) s.rowp[0][tid] = tb < te ? fa_row(a, k, tb * FA_TR + tid) : 0;
    if (tid < FA_G) {
        s.m[tid] = -INFINITY;
        s.l[tid] = 0.0f;
        s.fm[tid] = -INFINITY;
        s.fl[tid] = 0.0f;
    }
    __syncthreads();
    if (tb < te) fa_issue(s, s.rowp[0], tid);

    float4 q[FA_HW][4];
    const float *qh = a.q + ((uint64_t)t * a.n_head + h0 + qd * FA_HW) * FA_D + lane * 4;
#pragma unroll
    for (uint32_t hh = 0; hh < FA_HW; hh++)
#pragma unroll
        for (uint32_t j = 0; j < 4; j++) q[hh][j] = *(const float4 *)(qh + (size_t)hh * FA_D + 128 * j);
    static_assert(QNR_W == FA_D && QNR_GR == 4,
                  "q[hh] is qnr_head512's row: group j of lane l at 128 j + 4 l");
    if (r.on)
#pragma unroll
        for (uint32_t hh = 0; hh < FA_HW; hh++) qnr_head512(q[hh], lane, r.eps, r.a.half, qcs, qsn);
    float4 o[FA_HW][2];
#pragma unroll
    for (uint32_t hh = 0; hh < FA_HW; hh++) o[hh][0] = o[hh][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    /* this thread's elements of the fold: head quad qd, dims 256*wh + 4*lane + 128j */
    float *fo = s.fo + (size_t)qd * FA_HW * FA_D + wh * 256 + lane * 4;
    if (!a.part)
#pragma unroll
        for (uint32_t hh = 0; hh < FA_HW; hh++)
#pragma unroll
            for (uint32_t j = 0; j < 2; j++)
                *(float4 *)(fo + (size_t)hh * FA_D + 128 * j) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    for (uint32_t i = tb; i < te; i++) {
        const uint32_t b = (i - tb) & 1u;
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        __syncthreads(); /* the stage holds tile i; the previous tile is consumed */
#pragma unroll 2
        for (uint32_t e = tid; e < FA_TR * FA_D / 4; e += FA_T) {
            const uint32_t r = e / (FA_D / 4), c = e % (FA_D / 4);
            *(float4 *)(s.tile + r * FA_D + c * 4) = fa_convert(s.rowp[b][r], s.stage + r * FA_ROWB, c);
        }
        if (tid < FA_TR) s.rowp[b ^ 1u][tid] = i + 1 < te ? fa_row(a, k, (i + 1) * FA_TR + tid) : 0;
        __syncthreads(); /* the tile is ready, the stage free */
        if (i + 1 < te) fa_issue(s, s.rowp[b ^ 1u], tid);

        float acc[FA_HW * FA_RW];
        fa_qk_lane(acc, q, s.tile + (size_t)wh * FA_RW * FA_D, lane);
        fa_rs<16>(acc, lane);
        fa_rs<8>(acc, lane);
        fa_rs<4>(acc, lane);
        fa_rs<2>(acc, lane);
        fa_rs<1>(acc, lane);
        {
            const uint32_t hh = lane / FA_RW, rr = wh * FA_RW + lane % FA_RW;
            s.sc[(qd * FA_HW + hh) * FA_TR + rr] = s.rowp[b][rr] ? acc[0] * a.kq_scale : -INFINITY;
        }
        __syncthreads();
        { /* online softmax: half-warp = one head, lane = one row */
            const uint32_t h = tid / FA_TR, r = tid % FA_TR;
            const float sv = s.sc[h * FA_TR + r];
            float mx = sv;
#pragma unroll
            for (uint32_t x = FA_TR / 2; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
            const float m_old = s.m[h], m_new = fmaxf(m_old, mx);
            const float p = fa_weight(sv, m_new);
            float ps = p;
#pragma unroll
            for (uint32_t x = FA_TR / 2; x > 0; x >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, x);
            s.pt[r * FA_G + h] = p;
            if (r == 0) { /* after the shuffles: every lane has read m_old */
                const float f = fa_rescale(m_old, m_new);
                s.f[h] = f;
                s.l[h] = fmaf(s.l[h], f, ps);
                s.m[h] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (uint32_t hh = 0; hh < FA_HW; hh++) {
            const float f = s.f[qd * FA_HW + hh];
#pragma unroll
            for (uint32_t j = 0; j < 2; j++) {
                o[hh][j].x *= f;
                o[hh][j].y *= f;
                o[hh][j].z *= f;
                o[hh][j].w *= f;
            }
        }
        fa_pv_lane(o, s.tile, s.pt, qd, wh, lane);

        if (!a.part && ((i + 1) % tp.tps == 0 || i + 1 == te)) { /* chunk: a segment ends, fold it */
#pragma unroll
            for (uint32_t hh = 0; hh < FA_HW; hh++) {
                const uint32_t hl = qd * FA_HW + hh;
                const fa_fold_w fw = fa_fold_weights(s.fm[hl], s.m[hl]);
#pragma unroll
                for (uint32_t j = 0; j < 2; j++) {
                    float4 *po = (float4 *)(fo + (size_t)hh * FA_D + 128 * j);
                    float4 v = *po;
                    v.x = fa_fold(v.x, o[hh][j].x, fw);
                    v.y = fa_fold(v.y, o[hh][j].y, fw);
                    v.z = fa_fold(v.z, o[hh][j].z, fw);
                    v.w = fa_fold(v.w, o[hh][j].w, fw);
                    *po = v;
                    o[hh][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
            __syncthreads(); /* every thread has read m, fm */
            if (tid < FA_G) {
                const fa_fold_w fw = fa_fold_weights(s.fm[tid], s.m[tid]);
                s.fl[tid] = fa_fold(s.fl[tid], s.l[tid], fw);
                s.fm[tid] = fw.m;
                s.m[tid] = -INFINITY; /* the next segment starts afresh */
                s.l[tid] = 0.0f;
            }
            __syncthreads();
        }
    }

    /* m, l (decode) and fm, fl (chunk) were last written before a barrier */
#pragma unroll
    for (uint32_t hh = 0; hh < FA_HW; hh++) {
        const uint32_t hl = qd * FA_HW + hh, h = h0 + hl;
        const uint64_t th = (uint64_t)t * a.n_head + h;
        if (a.part) {
            const uint64_t idx = th * a.stride + seg;
            float *po = a.part + idx * FA_D + wh * 256 + lane * 4;
            *(float4 *)po = o[hh][0];
            *(float4 *)(po + 128) = o[hh][1];
            if (wh == 0 && lane == 0) {
                a.part[(uint64_t)FA_PART * FA_D + idx] = s.m[hl];
                a.part[(uint64_t)FA_PART * FA_D + FA_PART + idx] = s.l[hl];
            }
        } else {
            const float sc = fa_finish_scale(a.sinks[h], s.fm[hl], s.fl[hl]);
            float *po = a.out + th * FA_D + wh * 256 + lane * 4;
#pragma unroll
            for (uint32_t j = 0; j < 2; j++) {
                const float4 v = *(const float4 *)(fo + (size_t)hh * FA_D + 128 * j);
                *(float4 *)(po + 128 * j) = make_float4(v.x * sc, v.y * sc, v.z * sc, v.w * sc);
            }
        }
    }
    if (!a.part || !a.bar) return;
    /* decode fold (a.bar): the head group's segments meet, then CTA seg combines the group's 32-value
     * blocks seg, seg + splits, ... (warp w from block seg + splits w): the combine kernel's elements */
    __threadfence(); /* this thread's partials, before the meeting counts them */
    __syncthreads();
    if (tid == 0) fa_meet(a.bar + 2 * blockIdx.x, tp.splits);
    __syncthreads();
    constexpr uint32_t NB = FA_G * FA_D / 32, BPH = FA_D / 32, NW = FA_T / 32;
    const uint32_t step = tp.splits * NW;
    uint32_t b = seg + tp.splits * w;
    if (a.fold2 && tp.splits <= 16)            /* two blocks a round trip (one load batch each) */
        for (; b + step < NB; b += 2 * step) { /* warp-uniform */
            const uint32_t b1 = b + step, da = (b % BPH) * 32 + lane, db = (b1 % BPH) * 32 + lane;
            const uint32_t ha = h0 + b / BPH, hb = h0 + b1 / BPH;
            float csa, sna, csb, snb, va, vb;
            const bool ra_ = fa_out_angle(ra, t, da, &csa, &sna), rb_ = fa_out_angle(ra, t, db, &csb, &snb);
            const fa_pref pa = fa_partials(a, ha, t, da), pb = fa_partials(a, hb, t, db);
            fa_combine_pf2<16, true>(pa.m, pa.l, pa.o, pb.m, pb.l, pb.o, FA_D, tp.splits, a.sinks[ha],
                                     a.sinks[hb], &va, &vb);
            fa_combine_put(a, ra, ha, t, da, va, ra_, csa, sna);
            fa_combine_put(a, ra, hb, t, db, vb, rb_, csb, snb);
        }
    for (; b < NB; b += step) { /* warp-uniform */
        const uint32_t d = (b % BPH) * 32 + lane;
        float cs, sn;
        const bool rot = fa_out_angle(ra, t, d, &cs, &sn);
        fa_combine_out<true>(a, ra, h0 + b / BPH, t, d, tp.splits, rot, cs, sn);
    }
}

/* grid (n_head, FA_D / FA_CT, n): one thread per output element folds its token's segments. */
constexpr uint32_t FA_CT = 128;
/* ra.half > 0 (attention_rope): the heads' inverse RoPE on the way out. Element d of the RoPE tail
 * is one of pair k's two values; its partner comes from the neighbouring lane, and each lane forms
 * its own output with rope_rotate's expression: the rope op's bits. The angle depends on the
 * arguments only, so it is computed before the wait. */
__global__ void __launch_bounds__(FA_CT) fa_combine_kernel(fa_args a, rope_args ra) {
    cu_pdl_trigger();
    const uint32_t h = blockIdx.x, t = blockIdx.z, d = blockIdx.y * FA_CT + threadIdx.x;
    float cs, sn;
    const bool rot = fa_out_angle(ra, t, d, &cs, &sn);
    cu_pdl_wait();
    const fa_tok k = fa_token(a, t);
    const fa_plan tp = fa_token_plan(k.n_rows, a.n_head, a.slots);
    fa_combine_out<false>(a, ra, h, t, d, tp.splits, rot, cs, sn); /* FA_CT: whole warps of one head */
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* DSV4_CUDA_FA_FOLD=2: the fold's warps take two blocks a round trip (A/B; the same bits) */
uint32_t fa_fold_pairs(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_FA_FOLD");
        v = e && strcmp(e, "2") == 0;
    }
    return (uint32_t)v;
}

/* Decode (n = 1, with the scratch) runs a CTA per segment and the combine; a chunk does the same
 * while its partials fit the scratch and its tokens alone would not fill the device, else one CTA
 * per (token, head group) folds the segments itself (fa_shape). slots: the fa_kernel CTAs the
 * device holds at once, so the segments (and the bits) are a function of the device and the
 * token's row count only. */
int fa_launch(fa_args &a, uint32_t n, uint32_t max_rows, void *scratch, bool decode, cudaStream_t st,
              const rope_args *ra = nullptr, const fa_qnr *qr = nullptr, unsigned *bar = nullptr) {
    const size_t smem = sizeof(fa_smem);
    int dev = 0, sms = 0, occ = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(fa_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fa_kernel, (int)FA_T, smem);
    if (e != cudaSuccess) return (int)e;
    if (occ < 1 || sms < 1) return (int)cudaErrorInvalidConfiguration;
    a.slots = (uint32_t)(sms * occ);
    const fa_launch_shape g = fa_shape(a, n, max_rows, scratch != nullptr, decode);
    a.part = g.segments ? (float *)scratch : nullptr;
    a.stride = g.grid_y;
    if (qr && n != 1) return (int)cudaErrorInvalidValue;              /* one token's angles */
    if (ra && !g.segments) return (int)cudaErrorInvalidConfiguration; /* the RoPE rides on the combine */
    /* the fold: one decode token, its grid within the device (fa_meet), a barrier pair per head group */
    a.bar = bar && decode && n == 1 && g.segments && a.n_head / FA_G <= FA_BAR_GROUPS &&
                    (uint64_t)(a.n_head / FA_G) * g.grid_y <= a.slots
                ? bar
                : nullptr;
    a.fold2 = a.bar ? fa_fold_pairs() : 0;
    fa_qnr no_qnr = {};
    rope_args none = {};
    fa_kernel<<<dim3(a.n_head / FA_G, g.grid_y, n), FA_T, smem, st>>>(a, qr ? *qr : no_qnr, ra ? *ra : none);
    if (g.segments && !a.bar)
        fa_combine_kernel<<<dim3(a.n_head, FA_D / FA_CT, n), FA_CT, 0, st>>>(a, ra ? *ra : none);
    return attn_launch_status();
}

} // namespace

extern "C" size_t dsv4_cuda_attention_fast_scratch_bytes(void) { return FA_SCRATCH_BYTES; }

extern "C" bool dsv4_cuda_attention_fast_ok(uint32_t n_head, uint32_t head_dim, const void *q,
                                            const void *out, const void *raw, const void *comp,
                                            const void *chunk_kv) {
    return head_dim == FA_D && n_head > 0 && n_head % FA_G == 0 && n_head <= FA_PART && aligned16(q) &&
           aligned16(out) && aligned16(raw) && aligned16(comp) && aligned16(chunk_kv);
}

static int attention_fast(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                          uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                          uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                          uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out, void *scratch,
                          const rope_args *rope_inv, void *outq = nullptr, const fa_qnr *qr = nullptr,
                          unsigned *bar = nullptr) {
    if (n_raw > raw_cap || (n_raw && raw_start >= raw_cap)) return (int)cudaErrorInvalidValue;
    if (kv_type != DSV4_TYPE_F32 && kv_type != DSV4_TYPE_F16) return (int)cudaErrorInvalidValue;
    if (!dsv4_cuda_attention_fast_ok(n_head, head_dim, q, out, raw, comp, nullptr) || !aligned16(scratch))
        return (int)cudaErrorInvalidValue;
    fa_args a = {};
    a.q = q;
    a.raw = (const unsigned char *)raw;
    a.comp = (const unsigned char *)comp;
    a.sel = sel;
    a.sinks = sinks_dev;
    a.out = out;
    a.outq = (uint8_t *)outq;
    a.kv = nullptr;
    a.n_head = n_head;
    a.raw_cap = raw_cap;
    a.raw_start = raw_start;
    a.n_raw = n_raw;
    a.n_comp = n_comp;
    a.n_sel = n_sel;
    a.kq_scale = kq_scale;
    a.half = kv_type == DSV4_TYPE_F16;
    const uint32_t max_rows = n_raw + (sel ? n_sel : n_comp);
    return fa_launch(a, 1, max_rows, scratch, true, (cudaStream_t)s, rope_inv, qr, bar);
}

extern "C" int dsv4_cuda_attention_fast(dsv4_cuda_stream s, const float *q, uint32_t n_head,
                                        uint32_t head_dim, uint32_t kv_type, const void *raw,
                                        uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                                        const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                                        const float *sinks_dev, float kq_scale, float *out, void *scratch,
                                        unsigned *bar) {
    return attention_fast(s, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp, n_comp, sel,
                          n_sel, sinks_dev, kq_scale, out, scratch, nullptr, nullptr, nullptr, bar);
}

extern "C" int dsv4_cuda_attention_fast_rope(dsv4_cuda_stream s, const float *q, uint32_t n_head,
                                             uint32_t head_dim, uint32_t kv_type, const void *raw,
                                             uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                                             const void *comp, uint32_t n_comp, const int32_t *sel,
                                             uint32_t n_sel, const float *sinks_dev, float kq_scale,
                                             float *out, void *scratch, uint32_t pos, const dsv4_rope *rope,
                                             void *outq, unsigned *bar) {
    if (!rope || rope->n_rot % 2 || rope->n_rot > head_dim) return (int)cudaErrorInvalidValue;
    if (outq && ((uintptr_t)outq & 3u) != 0) return (int)cudaErrorInvalidValue;
    const rope_args ra = rope_args_make(rope, true, n_head, head_dim, pos, 1);
    return attention_fast(s, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp, n_comp, sel,
                          n_sel, sinks_dev, kq_scale, out, scratch, &ra, outq, nullptr, bar);
}

extern "C" int dsv4_cuda_attention_fast_qnr_rope(
    dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type, const void *raw,
    uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw, const void *comp, uint32_t n_comp,
    const int32_t *sel, uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out, void *scratch,
    uint32_t pos, const dsv4_rope *rope, float eps, void *outq, unsigned *bar) {
    if (!rope || rope->n_rot % 2 || rope->n_rot > head_dim) return (int)cudaErrorInvalidValue;
    if (outq && ((uintptr_t)outq & 3u) != 0) return (int)cudaErrorInvalidValue;
    const rope_args ra = rope_args_make(rope, true, n_head, head_dim, pos, 1);
    fa_qnr qr = {};
    qr.a = rope_args_make(rope, false, n_head, head_dim, pos, 1);
    qr.eps = eps;
    qr.on = 1;
    return attention_fast(s, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp, n_comp, sel,
                          n_sel, sinks_dev, kq_scale, out, scratch, &ra, outq, &qr, bar);
}

extern "C" int dsv4_cuda_attention_chunk_fast(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                                              uint32_t head_dim, uint32_t pos0, const float *chunk_kv,
                                              uint32_t kv_type, const void *raw, uint32_t raw_cap,
                                              const void *comp, uint32_t ratio, const int32_t *sel,
                                              uint32_t n_sel, const float *sinks_dev, float kq_scale,
                                              float *out, void *scratch) {
    if (!chunk_kv || n > 65535) return (int)cudaErrorInvalidValue;
    if (kv_type != DSV4_TYPE_F32 && kv_type != DSV4_TYPE_F16) return (int)cudaErrorInvalidValue;
    if (!dsv4_cuda_attention_fast_ok(n_head, head_dim, q, out, raw, comp, chunk_kv) || !aligned16(scratch))
        return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    fa_args a = fa_chunk_args(q, raw, comp, sel, sinks_dev, out, chunk_kv, n_head, raw_cap, pos0, ratio,
                              n_sel, kq_scale, kv_type == DSV4_TYPE_F16);
    /* the widest token: the last one (windows and compressed rows only grow) */
    const uint32_t p = pos0 + n - 1, n_comp = ratio ? (p + 1) / ratio : 0;
    const uint32_t max_rows = (p + 1 < raw_cap ? p + 1 : raw_cap) + (sel && n_comp > n_sel ? n_sel : n_comp);
    return fa_launch(a, n, max_rows, scratch, false, (cudaStream_t)s);
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_fast(const void **out) {
    out[0] = (const void *)fa_kernel;
    out[1] = (const void *)fa_combine_kernel;
    return 2;
}
