/* Pieces of the warp-per-row matvec (cuda_mvw.cu) that are plain arithmetic: launch plan, segment
 * lookup, row pieces, per-lane loads, block decoders, and a sequential model of one warp's row.
 * Host-callable, so tests/cuda/mvw_emu_check.cu runs the kernel's own code on the CPU.
 *
 * A row is cut into pieces that depend on `in` only (Q8_0: 64 blocks = 2176 bytes; F16: 1024
 * elements = 2048 bytes). Lane l loads 16-byte words l, l+32, ... of a piece (coalesced), so each
 * lane holds up to K words per piece. F16 words are 8 whole elements: the lane multiplies them in
 * place. A Q8_0 block (34 bytes) straddles lanes: the warp stores the piece to its own shared
 * buffer and lane l then decodes blocks l and l+32 from there. Lane l keeps one f32 accumulator
 * per block position (Q8_0: 2) or word slot (F16: 4) across the pieces, adds them in a fixed
 * order, and the warp sums the 32 lane totals with an xor butterfly: the row's bits depend only
 * on (type, in, row bytes, x). */
#ifndef DSV4_CUDA_MVW_UNITS_CUH
#define DSV4_CUDA_MVW_UNITS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "common/types.h" /* C header without its own extern "C" */
}
#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_mvw.h"

#ifdef __CUDA_ARCH__
#define MVW_UNROLL _Pragma("unroll")
#else
#define MVW_UNROLL
#endif

#define MVW_WARPS 4
#define MVW_THREADS (MVW_WARPS * 32)
#define MVW_MIN_CTAS 4 /* __launch_bounds__ minimum CTAs per SM (<= 128 registers), the plan's residency */
#define MVW_Q8_PB 64   /* Q8_0 blocks per piece */
#define MVW_Q8_PIECE_BYTES (MVW_Q8_PB * 34)
#define MVW_Q8_K 5 /* 16-byte words per lane per piece: 136 words / 32 lanes */
#define MVW_Q8_D 3 /* pieces in flight per warp */
/* rows of <= 32 blocks (in <= 1024) are one piece of <= 68 words: 3 per lane, 5 pieces in flight */
#define MVW_Q8_SHORT_PB 32
#define MVW_Q8_SHORT_K 3
#define MVW_Q8_SHORT_D 5
#define MVW_F16_PE 1024
#define MVW_F16_PIECE_BYTES (MVW_F16_PE * 2)
#define MVW_F16_K 4 /* 128 words / 32 lanes */
#define MVW_F16_D 4
#define MVW_ACT_SLOT 48 /* Q8_0 activation block in shared memory: 32 qs, f32 d at +32 (conflict-free) */
/* The cp.async path's per-warp ring: D pieces of the long (D = MVW_Q8_D, 64 blocks) or the short
 * (MVW_Q8_SHORT_D, 32 blocks) instance, whichever is larger. */
#define MVW_Q8_SLOT(pb) ((pb)*34)
#define MVW_Q8_RING_BYTES                                                                                    \
    (MVW_Q8_D * MVW_Q8_SLOT(MVW_Q8_PB) > MVW_Q8_SHORT_D * MVW_Q8_SLOT(MVW_Q8_SHORT_PB)                       \
         ? MVW_Q8_D * MVW_Q8_SLOT(MVW_Q8_PB)                                                                 \
         : MVW_Q8_SHORT_D * MVW_Q8_SLOT(MVW_Q8_SHORT_PB))
#define MVW_QA_U 4 /* fused staging (x_f32): float4 loads per thread in flight per round */

enum { MVW_Q8_0 = 0, MVW_F16 = 1 };

struct mvw_seg_dev {
    const uint8_t *w;
    const uint8_t *x;
    float *y;
    long long row_bytes, rows;
    int in, fmt;
    int xf32; /* Q8_0: x is f32, quantized while staging */
    int rpw;  /* rows per warp */
    int cta0; /* first CTA of this segment */
};
struct mvw_params {
    mvw_seg_dev seg[DSV4_CUDA_MVW_MAX_SEGS];
    int n_segs;
    int act_smem;                 /* bytes of the Q8_0 activation area at the start of shared memory */
    int q8_async;                 /* Q8_0 pieces by cp.async into a per-warp ring (else through registers) */
    dsv4_cuda_mvw_router_args rt; /* mvw_kernel<*, true>: the router epilogue's arguments */
};

/* ---- validation and launch plan (host) ---- */
static inline bool mvw_ok(uint32_t type, const void *w, uint64_t row_bytes, int64_t in) {
    if (!w || ((uintptr_t)w & 15) != 0 || (row_bytes & 15) != 0 || in <= 0) return false;
    if (type == DSV4_TYPE_Q8_0)
        return in % 256 == 0 && in <= DSV4_CUDA_MVW_Q8_0_MAX_IN && row_bytes >= (uint64_t)(in / 32 * 34);
    if (type == DSV4_TYPE_F16)
        return in % 8 == 0 && in <= DSV4_CUDA_MVW_F16_MAX_IN && row_bytes >= (uint64_t)(in * 2);
    return false;
}

/* Natural bytes of one row (what the kernel reads of it). */
static inline long long mvw_read_bytes(const dsv4_cuda_mvw_seg *g) {
    return g->type == DSV4_TYPE_Q8_0 ? g->in / 32 * 34 : g->in * 2;
}
static inline long long mvw_rpw_for(long long budget, const dsv4_cuda_mvw_seg *g) {
    const long long rb = mvw_read_bytes(g), r = (budget + rb / 2) / rb; /* nearest */
    return r < 1 ? 1 : r;
}
/* Rows per warp from one byte budget per warp, so that every warp streams about as many bytes
 * whatever its segment's row size (none idles while another still has half its rows to go): the
 * smallest budget that fits every CTA into one wave of MVW_MIN_CTAS per SM (small launches start
 * all their warps at once; large ones become persistent-like streams). rest_mul > 1: the segments
 * after the first take rest_mul times the budget (fewer CTAs), so segment 0 ends about 1 / rest_mul
 * into the launch (the router epilogue then runs while the other rows stream). Fills p (pointers
 * included), the grid and the dynamic shared memory. Segments must be valid. */
static inline void mvw_plan(const dsv4_cuda_mvw_seg *segs, int n, int sms, mvw_params *p, int *grid,
                            int *smem, int rest_mul) {
    if (rest_mul < 1) rest_mul = 1;
    memset(p, 0, sizeof *p);
    long long bytes = 0;
    int act = 0;
    bool q8 = false;
    for (int s = 0; s < n; s++) {
        bytes += segs[s].rows * mvw_read_bytes(&segs[s]);
        if (segs[s].type == DSV4_TYPE_Q8_0) {
            q8 = true;
            const int a = (int)(segs[s].in / 32) * MVW_ACT_SLOT;
            if (a > act) act = a;
        }
    }
    const long long slots = (long long)(sms > 0 ? sms : 1) * MVW_MIN_CTAS;
    long long budget = (bytes + slots * MVW_WARPS - 1) / (slots * MVW_WARPS);
    if (budget < 1) budget = 1;
    for (;;) { /* rounding up per segment can overshoot the wave: grow the budget until it fits (or one CTA
                  each) */
        long long ctas = 0, nonempty = 0;
        for (int s = 0; s < n; s++) {
            const long long rpw = mvw_rpw_for(s > 0 ? budget * rest_mul : budget, &segs[s]);
            ctas += (segs[s].rows + MVW_WARPS * rpw - 1) / (MVW_WARPS * rpw);
            nonempty += segs[s].rows > 0;
        }
        if (ctas <= slots || ctas == nonempty) break;
        const long long next = budget * ctas / slots;
        budget = next > budget ? next : budget + 1;
    }
    int cta = 0;
    for (int s = 0; s < n; s++) {
        mvw_seg_dev *d = &p->seg[s];
        const long long rpw = mvw_rpw_for(s > 0 ? budget * rest_mul : budget, &segs[s]);
        d->w = (const uint8_t *)segs[s].w;
        d->x = (const uint8_t *)segs[s].x;
        d->y = segs[s].y;
        d->row_bytes = (long long)segs[s].row_bytes;
        d->rows = segs[s].rows;
        d->in = (int)segs[s].in;
        d->fmt = segs[s].type == DSV4_TYPE_Q8_0 ? MVW_Q8_0 : MVW_F16;
        d->xf32 = d->fmt == MVW_Q8_0 && segs[s].x_f32 != 0;
        d->rpw = (int)(rpw < segs[s].rows ? rpw : segs[s].rows > 0 ? segs[s].rows : 1);
        d->cta0 = cta;
        cta += (int)((segs[s].rows + MVW_WARPS * d->rpw - 1) / (MVW_WARPS * d->rpw));
    }
    p->n_segs = n;
    p->act_smem = act;
    *grid = cta;
    *smem = q8 ? act + MVW_WARPS * MVW_Q8_RING_BYTES : 0; /* the ring also holds the register path's piece */
}

/* CTA b -> its segment (the last one starting at or before b; empty segments are skipped) and its
 * index within it. Static indices only: the parameters stay in the constant bank. */
static __host__ __device__ __forceinline__ mvw_seg_dev mvw_find_seg(const mvw_params &p, int b, int *local) {
    mvw_seg_dev sg = p.seg[0];
    MVW_UNROLL
    for (int s = 1; s < DSV4_CUDA_MVW_MAX_SEGS; s++)
        if (s < p.n_segs && b >= p.seg[s].cta0) sg = p.seg[s];
    *local = b - sg.cta0;
    return sg;
}
/* Rows [*r0, *r0 + return) of warp `warp` in CTA `local` of a segment (0 rows: none). */
static __host__ __device__ __forceinline__ int mvw_warp_rows(const mvw_seg_dev &sg, int local, int warp,
                                                             long long *r0) {
    *r0 = ((long long)local * MVW_WARPS + warp) * sg.rpw;
    const long long left = sg.rows - *r0;
    return left <= 0 ? 0 : left < sg.rpw ? (int)left : sg.rpw;
}

/* ---- row pieces ---- */
static __host__ __device__ __forceinline__ int mvw_pieces(int fmt, int in) {
    return fmt == MVW_Q8_0 ? (in / 32 + MVW_Q8_PB - 1) / MVW_Q8_PB : (in + MVW_F16_PE - 1) / MVW_F16_PE;
}
static __host__ __device__ __forceinline__ int mvw_piece_bytes(int fmt) {
    return fmt == MVW_Q8_0 ? MVW_Q8_PIECE_BYTES : MVW_F16_PIECE_BYTES;
}
/* 16-byte words in piece p (Q8_0: a multiple of 8 blocks = 17 words per 8 blocks). */
static __host__ __device__ __forceinline__ int mvw_piece_words(int fmt, int in, int p) {
    if (fmt == MVW_Q8_0) {
        const int nb = in / 32 - p * MVW_Q8_PB;
        return (nb < MVW_Q8_PB ? nb : MVW_Q8_PB) * 17 / 8;
    }
    const int ne = in - p * MVW_F16_PE;
    return (ne < MVW_F16_PE ? ne : MVW_F16_PE) / 8;
}

/* ---- small helpers (portable spellings so the decoders also run on the host) ---- */
static __host__ __device__ __forceinline__ int4 mvw_ld16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    /* streamed once: read-only path, no L1 allocation; volatile keeps the loads where they are issued */
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
#else
    int4 v;
    memcpy(&v, p, 16);
    return v;
#endif
}
static __host__ __device__ __forceinline__ float4 mvw_ldx4(const float *p) {
#ifdef __CUDA_ARCH__
    return __ldg((const float4 *)p);
#else
    float4 v;
    memcpy(&v, p, 16);
    return v;
#endif
}
static __host__ __device__ __forceinline__ int mvw_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}
/* (hi:lo) >> sh, low word, sh in {16, 32} */
static __host__ __device__ __forceinline__ uint32_t mvw_fshr(uint32_t lo, uint32_t hi, unsigned sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_rc(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh > 32 ? 32 : sh));
#endif
}
/* a product that must not be contracted into an FMA (host and device give the same bits) */
static __host__ __device__ __forceinline__ float mvw_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
static __host__ __device__ __forceinline__ float mvw_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
static __host__ __device__ __forceinline__ float mvw_h2f(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}

/* ---- per-lane loads and stores of one piece ---- */
template <int K>
static __host__ __device__ __forceinline__ void mvw_issue(int4 (&s)[K], const uint8_t *src, int words,
                                                          int lane) {
    MVW_UNROLL
    for (int j = 0; j < K; j++)
        if (lane + 32 * j < words) s[j] = mvw_ld16(src + 16 * (lane + 32 * j));
}
template <int K>
static __host__ __device__ __forceinline__ void mvw_store(const int4 (&s)[K], uint8_t *buf, int words,
                                                          int lane) {
    MVW_UNROLL
    for (int j = 0; j < K; j++)
        if (lane + 32 * j < words) *(int4 *)(buf + 16 * (lane + 32 * j)) = s[j];
}
/* The same words straight from global to shared memory (cp.async.cg: no L1 allocation, no
 * registers); the host spelling copies at once. */
template <int K>
static __host__ __device__ __forceinline__ void mvw_issue_async(uint8_t *buf, const uint8_t *src, int words,
                                                                int lane) {
    MVW_UNROLL
    for (int j = 0; j < K; j++)
        if (lane + 32 * j < words) {
#ifdef __CUDA_ARCH__
            const unsigned d = (unsigned)__cvta_generic_to_shared(buf + 16 * (lane + 32 * j));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src + 16 * (lane + 32 * j))
                         : "memory");
#else
            memcpy(buf + 16 * (lane + 32 * j), src + 16 * (lane + 32 * j), 16);
#endif
        }
}

/* ---- Q8_0 ---- */
/* Block u of a piece in buf (34 bytes at 34u, 2-byte aligned: nine aligned words cover it, the qs
 * re-aligned by a funnel shift) against activation slot a (48 bytes: qs[32], f32 d). */
static __host__ __device__ __forceinline__ float mvw_q8_0_block(const uint8_t *buf, int u, const uint8_t *a,
                                                                float acc) {
    const int4 xa = *(const int4 *)a, xb = *(const int4 *)(a + 16);
    const float ad = *(const float *)(a + 32);
    const int xq[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    const int off = u * 34;
    const bool odd = (off & 2) != 0;
    const unsigned sh = odd ? 32u : 16u;
    const uint32_t *wp = (const uint32_t *)(buf + (off & ~3));
    uint32_t w[9];
    MVW_UNROLL
    for (int k = 0; k < 9; k++) w[k] = wp[k];
    const uint32_t d16 = odd ? (w[0] >> 16) : (w[0] & 0xffffu);
    /* two dependent dp4a chains of 4 instead of one of 8 (integer sums: the same value) */
    int s0 = 0, s1 = 0;
    MVW_UNROLL
    for (int k = 0; k < 8; k += 2) {
        s0 = mvw_dp4a((int)mvw_fshr(w[k], w[k + 1], sh), xq[k], s0);
        s1 = mvw_dp4a((int)mvw_fshr(w[k + 1], w[k + 2], sh), xq[k + 1], s1);
    }
    return fmaf(mvw_mul(mvw_h2f(d16), ad), (float)(s0 + s1), acc);
}
/* Lane's blocks of piece p (stored in buf): block lane -> acc[0], block lane+32 -> acc[1]. */
static __host__ __device__ __forceinline__ void mvw_q8_decode(const uint8_t *buf, const uint8_t *act, int in,
                                                              int p, int lane, float (&acc)[2]) {
    const int nb = in / 32 - p * MVW_Q8_PB;
    const uint8_t *ap = act + (p * MVW_Q8_PB) * MVW_ACT_SLOT;
    MVW_UNROLL
    for (int h = 0; h < 2; h++) {
        const int u = lane + 32 * h;
        if (u < nb && u < MVW_Q8_PB) acc[h] = mvw_q8_0_block(buf, u, ap + u * MVW_ACT_SLOT, acc[h]);
    }
}
static __host__ __device__ __forceinline__ float mvw_q8_total(const float (&acc)[2]) {
    return mvw_add(acc[0], acc[1]);
}
/* Activation re-layout, copy i of in/32*9 (4-byte words): block b = i/9, word k of its 36 bytes
 * (d, then qs) -> slot b (qs at +0..31, d at +32). */
static __host__ __device__ __forceinline__ void mvw_act_map(int i, int *src, int *dst) {
    const int b = i / 9, k = i - 9 * b;
    *src = 36 * b + 4 * k;
    *dst = MVW_ACT_SLOT * b + (k == 0 ? 32 : 4 * (k - 1));
}
/* One 4-byte copy global -> shared: cp.async on the device, so every copy of the re-layout is in
 * flight at once (a load + store loop would pay one L2 round trip per iteration). */
static __host__ __device__ __forceinline__ void mvw_cp4(uint8_t *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
#else
    memcpy(dst, src, 4);
#endif
}
/* Thread tid's share of the re-layout; complete after mvw_stage_wait() and a CTA barrier. */
static __host__ __device__ __forceinline__ void mvw_stage_act(const uint8_t *x, uint8_t *act, int in, int tid,
                                                              int nthreads) {
    const int n = in / 32 * 9;
    for (int i = tid; i < n; i += nthreads) {
        int so, d;
        mvw_act_map(i, &so, &d);
        mvw_cp4(act + d, x + so);
    }
}
static __host__ __device__ __forceinline__ void mvw_stage_wait() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/* ---- fused staging (x_f32): quant_act_q8_0 of f32 x, written straight into the slots ----
 * Float4 i of x (elements 4i..4i+3) is block i/8, word i%8 of its qs. Thread tid takes float4s
 * i0 + u * MVW_THREADS, u < MVW_QA_U (i0 = tid + k * MVW_QA_U * MVW_THREADS): coalesced loads, and
 * the 8 lanes of a group (p = lane & 7) share the same MVW_QA_U = 4 blocks, one per u. The group's
 * 4 block maxima are reduce-scattered over its 8 lanes (xor 4: 2 values each, xor 2: 1, xor 1), so
 * lanes 2u and 2u+1 end with block u's amax; lane p computes d and id of block p >> 1 once (the
 * quantizer kernel's own act_q8_0_* arithmetic) and the group reads id back by shuffle. amax is a
 * max, so its grouping cannot change its bits. */
static __host__ __device__ __forceinline__ float mvw_qa_amax4(float4 v) {
    return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}
/* the reduce-scatter's picks: step 1 (xor 4) pair k of lane p's 4 maxima, step 2 (xor 2) of its 2 */
static __host__ __device__ __forceinline__ float mvw_qa_send4(const float (&m)[MVW_QA_U], int p, int k) {
    return (p & 4) ? m[k] : m[k + 2];
}
static __host__ __device__ __forceinline__ float mvw_qa_keep4(const float (&m)[MVW_QA_U], int p, int k) {
    return (p & 4) ? m[k + 2] : m[k];
}
static __host__ __device__ __forceinline__ float mvw_qa_send2(const float (&r)[2], int p) {
    return (p & 2) ? r[0] : r[1];
}
static __host__ __device__ __forceinline__ float mvw_qa_keep2(const float (&r)[2], int p) {
    return (p & 2) ? r[1] : r[0];
}
/* float4 i of x (v) quantized with its block's id -> word i%8 of slot i/8 */
static __host__ __device__ __forceinline__ void mvw_qa_store_q(uint8_t *act, int i, float4 v, float id) {
    const uint32_t q = (uint32_t)(act_q8_0_q(v.x, id) & 0xff) | (uint32_t)(act_q8_0_q(v.y, id) & 0xff) << 8 |
                       (uint32_t)(act_q8_0_q(v.z, id) & 0xff) << 16 |
                       (uint32_t)(act_q8_0_q(v.w, id) & 0xff) << 24;
    *(uint32_t *)(act + (i >> 3) * MVW_ACT_SLOT + 4 * (i & 7)) = q;
}
static __host__ __device__ __forceinline__ void mvw_qa_store_d(uint8_t *act, int i, float d) {
    *(float *)(act + (i >> 3) * MVW_ACT_SLOT + 32) = d;
}
#ifdef __CUDACC__
/* Thread tid's share of the fused staging (all MVW_THREADS threads call it; complete after a CTA
 * barrier). Lines past the first round are prefetched into L1 first, so only the first round waits
 * on L2. A warp's 32 float4s of one u are 4 whole blocks and in % 256 == 0 makes `i < in / 4`
 * warp-uniform, so every shuffle runs with the full mask (an idle u quantizes zeros, stores nothing). */
static __device__ __forceinline__ void mvw_stage_act_f32(const float *x, uint8_t *act, int in, int tid) {
    static_assert(MVW_QA_U == 4, "the reduce-scatter spreads 4 blocks over 8 lanes");
    const int n4 = in / 4, p = tid & 7;
    for (int l = MVW_QA_U * MVW_THREADS / 8 + tid; l < in / 32; l += MVW_THREADS) /* 128-byte lines */
        asm volatile("prefetch.global.L1 [%0];" ::"l"(x + 32 * l));
    for (int i0 = tid; i0 < n4; i0 += MVW_QA_U * MVW_THREADS) {
        float4 v[MVW_QA_U];
        float m[MVW_QA_U], r[2];
#pragma unroll
        for (int u = 0; u < MVW_QA_U; u++) {
            const int i = i0 + u * MVW_THREADS;
            v[u] = i < n4 ? mvw_ldx4(x + 4 * i) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < MVW_QA_U; u++) m[u] = mvw_qa_amax4(v[u]);
#pragma unroll
        for (int k = 0; k < 2; k++)
            r[k] = fmaxf(mvw_qa_keep4(m, p, k), __shfl_xor_sync(0xffffffffu, mvw_qa_send4(m, p, k), 4));
        float a = fmaxf(mvw_qa_keep2(r, p), __shfl_xor_sync(0xffffffffu, mvw_qa_send2(r, p), 2));
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1)); /* block p >> 1's amax */
        const float d = act_q8_0_d(a), id = act_q8_0_id(d);
#pragma unroll
        for (int u = 0; u < MVW_QA_U; u++) {
            const int i = i0 + u * MVW_THREADS;
            const float idu = __shfl_sync(0xffffffffu, id, 2 * u, 8);
            if (i < n4) mvw_qa_store_q(act, i, v[u], idu);
        }
        const int id_i = i0 + (p >> 1) * MVW_THREADS;
        if ((p & 1) == 0 && id_i < n4) mvw_qa_store_d(act, id_i, d);
    }
}
#endif
/* Host model of one CTA's fused staging: every warp, round and lane in the kernel's order, the
 * shuffles spelled out (a lane reads what lane l ^ o sent, or lane 2u of its group). */
static inline void mvw_emu_stage_act_f32(const float *x, uint8_t *act, int in) {
    const int n4 = in / 4;
    for (int warp = 0; warp < MVW_WARPS; warp++)
        for (int i0w = 32 * warp; i0w < n4; i0w += MVW_QA_U * MVW_THREADS) {
            float4 v[32][MVW_QA_U];
            float m[32][MVW_QA_U], r[32][2], a[32], a1[32], d[32], id[32];
            for (int l = 0; l < 32; l++)
                for (int u = 0; u < MVW_QA_U; u++) {
                    const int i = i0w + l + u * MVW_THREADS;
                    v[l][u] = i < n4 ? mvw_ldx4(x + 4 * i) : make_float4(0, 0, 0, 0);
                    m[l][u] = mvw_qa_amax4(v[l][u]);
                }
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 2; k++)
                    r[l][k] = fmaxf(mvw_qa_keep4(m[l], l & 7, k), mvw_qa_send4(m[l ^ 4], (l ^ 4) & 7, k));
            for (int l = 0; l < 32; l++)
                a[l] = fmaxf(mvw_qa_keep2(r[l], l & 7), mvw_qa_send2(r[l ^ 2], (l ^ 2) & 7));
            for (int l = 0; l < 32; l++) a1[l] = fmaxf(a[l], a[l ^ 1]);
            for (int l = 0; l < 32; l++) {
                d[l] = act_q8_0_d(a1[l]);
                id[l] = act_q8_0_id(d[l]);
            }
            for (int l = 0; l < 32; l++) {
                for (int u = 0; u < MVW_QA_U; u++) {
                    const int i = i0w + l + u * MVW_THREADS;
                    if (i < n4) mvw_qa_store_q(act, i, v[l][u], id[(l & ~7) | (2 * u)]);
                }
                const int id_i = i0w + l + ((l & 7) >> 1) * MVW_THREADS;
                if ((l & 1) == 0 && id_i < n4) mvw_qa_store_d(act, id_i, d[l]);
            }
        }
}

/* ---- F16 ---- */
/* Lane's words of piece p against x (f32): word slot j -> acc[j], 8 FMAs in element order. */
template <int K>
static __host__ __device__ __forceinline__ void mvw_f16_consume(const int4 (&s)[K], const float *x, int p,
                                                                int words, int lane, float (&acc)[K]) {
    MVW_UNROLL
    for (int j = 0; j < K; j++) {
        const int i = lane + 32 * j;
        if (i < words) {
            const float *xp = x + p * MVW_F16_PE + 8 * i;
            const float4 xa = mvw_ldx4(xp), xb = mvw_ldx4(xp + 4);
            const uint32_t w0 = (uint32_t)s[j].x, w1 = (uint32_t)s[j].y, w2 = (uint32_t)s[j].z,
                           w3 = (uint32_t)s[j].w;
            float a = acc[j];
            a = fmaf(mvw_h2f(w0 & 0xffffu), xa.x, a);
            a = fmaf(mvw_h2f(w0 >> 16), xa.y, a);
            a = fmaf(mvw_h2f(w1 & 0xffffu), xa.z, a);
            a = fmaf(mvw_h2f(w1 >> 16), xa.w, a);
            a = fmaf(mvw_h2f(w2 & 0xffffu), xb.x, a);
            a = fmaf(mvw_h2f(w2 >> 16), xb.y, a);
            a = fmaf(mvw_h2f(w3 & 0xffffu), xb.z, a);
            a = fmaf(mvw_h2f(w3 >> 16), xb.w, a);
            acc[j] = a;
        }
    }
}
static __host__ __device__ __forceinline__ float mvw_f16_total(const float (&acc)[MVW_F16_K]) {
    return mvw_add(mvw_add(acc[0], acc[1]), mvw_add(acc[2], acc[3]));
}

/* ---- sequential model of one warp computing one row (host) ---- */
/* Q8_0 pieces with the kernel's K words per lane: loads, stores to the piece buffer, decode. */
template <int K>
static inline void mvw_emu_q8_pieces(const uint8_t *row, int in, const uint8_t *act, float (&acc)[32][2]) {
    uint8_t buf[MVW_Q8_PIECE_BYTES + 16];
    int4 s[32][K];
    memset(s, 0, sizeof s);
    for (int p = 0; p < mvw_pieces(MVW_Q8_0, in); p++) {
        const int words = mvw_piece_words(MVW_Q8_0, in, p);
        memset(buf, 0xcd, sizeof buf); /* stale bytes must never be read */
        for (int l = 0; l < 32; l++) mvw_issue<K>(s[l], row + (size_t)p * MVW_Q8_PIECE_BYTES, words, l);
        for (int l = 0; l < 32; l++) mvw_store<K>(s[l], buf, words, l);
        for (int l = 0; l < 32; l++) mvw_q8_decode(buf, act, in, p, l, acc[l]);
    }
}
/* act: the re-laid Q8_0 activations (mvw_stage_act), x: the F16 path's f32 input. Same loads,
 * stores, decoders and summation order as the kernel; the butterfly is the kernel's xor shuffle sum. */
static inline float mvw_emu_row(int fmt, const uint8_t *row, int in, const uint8_t *act, const float *x) {
    float lane_v[32];
    static_assert(MVW_F16_K == 4, "mvw_f16_total adds four accumulators");
    const int P = mvw_pieces(fmt, in);
    if (fmt == MVW_Q8_0) {
        float acc[32][2];
        memset(acc, 0, sizeof acc);
        if (in <= 32 * MVW_Q8_SHORT_PB) /* the kernel's short-row instance */
            mvw_emu_q8_pieces<MVW_Q8_SHORT_K>(row, in, act, acc);
        else
            mvw_emu_q8_pieces<MVW_Q8_K>(row, in, act, acc);
        for (int l = 0; l < 32; l++) lane_v[l] = mvw_q8_total(acc[l]);
    } else {
        float acc[32][MVW_F16_K];
        int4 s[32][MVW_F16_K];
        memset(acc, 0, sizeof acc);
        memset(s, 0, sizeof s);
        for (int p = 0; p < P; p++) {
            const int words = mvw_piece_words(fmt, in, p);
            for (int l = 0; l < 32; l++) {
                mvw_issue<MVW_F16_K>(s[l], row + (size_t)p * MVW_F16_PIECE_BYTES, words, l);
                mvw_f16_consume<MVW_F16_K>(s[l], x, p, words, l, acc[l]);
            }
        }
        for (int l = 0; l < 32; l++) lane_v[l] = mvw_f16_total(acc[l]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float nv[32];
        for (int l = 0; l < 32; l++) nv[l] = lane_v[l] + lane_v[l ^ o];
        memcpy(lane_v, nv, sizeof nv);
    }
    return lane_v[0];
}

#endif
