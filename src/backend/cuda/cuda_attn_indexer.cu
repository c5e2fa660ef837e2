/* Indexer on the device (spec model-attention-hc.md §4.5; CPU: cpu_indexer_topk).
 *
 * Scores: one block per tile of rows; q (rows padded by one float against bank conflicts), the
 * pre-multiplied weights w[h]*w_scale and the row tile sit in shared memory. Each (row, head)
 * dot runs sequentially over d, then each row sums relu(dot)*w over heads in head order: the
 * CPU's exact operation order, so scores are bitwise equal to the CPU's.
 * Top-k: one block radix-selects the k-th largest score (8 bits per pass on an order-preserving
 * key, -0 folded into +0 as the CPU's comparisons do), then writes the rows above it plus the
 * lowest-index rows equal to it, in ascending row order. The set is the CPU's (ties to the
 * lower index), for any n_rows.
 * Rows are F32, F16 or packed FP4 (rows_type, backend.h); each element is decoded exactly into
 * the shared row tile, so the scores are those of the decoded f32 rows. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attn_common.cuh"
#include "backend/cuda/cuda_iscore_tiled_units.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_select_units.cuh"

namespace {

constexpr int SELECT_THREADS = 1024;
constexpr size_t SMEM_LIMIT = 48 * 1024;

/* q_glob: read q from global memory (it does not fit in shared memory with one row). */
/* Which rows a block scores. One query (ratio 0): n_rows, blockIdx.y == 0. A chunk: token
 * t = blockIdx.y at position pos0 + t sees (pos0+t+1)/ratio rows, skipped when that is <= k; its
 * q, w and scores are t*n_head*head_dim, t*n_head and t*score_stride further. */
struct itok {
    uint32_t pos0, ratio, k;
    uint64_t score_stride;
    uint32_t staged_keys; /* select_kernel: keys its dynamic shared memory holds (0: none) */
};

constexpr uint32_t SEL_SMEM_KEYS = 11776; /* 46 KB of keys: with the static 1.2 KB, under 48 KB */
/* Dynamic shared memory of a selection over at most n rows, and the keys it holds. */
static inline uint32_t sel_keys(uint64_t n) { return n <= SEL_SMEM_KEYS ? (uint32_t)n : 0u; }

__device__ __forceinline__ uint32_t itok_rows(const itok &c, uint32_t n_rows, uint32_t t) {
    return c.ratio ? (c.pos0 + t + 1) / c.ratio : n_rows;
}

constexpr uint32_t ISC_PF = 8;   /* row staging loads in flight per thread */
constexpr uint32_t ISC_QPF = 32; /* q staging loads in flight per thread (64 x 128 q: all of them) */
constexpr uint32_t ISC_DOTS = 4; /* dot chains per thread side by side */
constexpr uint32_t ISC_SPF = 16; /* head dots read ahead of the score's chain */

/* e / d and e % d, by a shift and a mask when d is a power of two (sh = log2 d, else 32): the integer
 * divisions of the staging loops were a third of the kernel's instructions */
struct isc_div {
    uint32_t d, sh;
};
__device__ __forceinline__ isc_div isc_div_make(uint32_t d) {
    return {d, (d & (d - 1)) == 0 ? (uint32_t)__ffs((int)d) - 1 : 32u};
}
__device__ __forceinline__ uint32_t isc_q(uint32_t e, isc_div v) { return v.sh < 32 ? e >> v.sh : e / v.d; }
__device__ __forceinline__ uint32_t isc_r(uint32_t e, isc_div v) {
    return v.sh < 32 ? e & (v.d - 1) : e % v.d;
}

/* Rows r0 .. r0 + nr of type T decoded into the row tile ks (kv_load's values), ISC_PF loads per
 * thread in flight. */
template <uint32_t T>
__device__ __forceinline__ void isc_stage_rows(const void *rows, uint32_t head_dim, isc_div hd, uint32_t r0,
                                               uint32_t nr, float *ks, uint32_t ks_stride) {
    for (uint32_t e0 = threadIdx.x; e0 < nr * head_dim; e0 += ISC_PF * blockDim.x) {
        float v[ISC_PF];
#pragma unroll
        for (uint32_t j = 0; j < ISC_PF; j++) {
            const uint32_t e = e0 + j * blockDim.x;
            if (e < nr * head_dim) v[j] = kv_load(rows, T, head_dim, r0 + isc_q(e, hd), isc_r(e, hd));
        }
#pragma unroll
        for (uint32_t j = 0; j < ISC_PF; j++) {
            const uint32_t e = e0 + j * blockDim.x;
            if (e < nr * head_dim) ks[isc_q(e, hd) * ks_stride + isc_r(e, hd)] = v[j];
        }
    }
}

/* isc_stage_rows for the rows' type (F32, F16 or packed FP4) */
__device__ __forceinline__ void isc_stage_rows_of(const void *rows, uint32_t rows_type, uint32_t head_dim,
                                                  isc_div hd, uint32_t r0, uint32_t nr, float *ks,
                                                  uint32_t ks_stride) {
    if (rows_type == DSV4_KV_FP4)
        isc_stage_rows<DSV4_KV_FP4>(rows, head_dim, hd, r0, nr, ks, ks_stride);
    else if (rows_type == DSV4_TYPE_F16)
        isc_stage_rows<DSV4_TYPE_F16>(rows, head_dim, hd, r0, nr, ks, ks_stride);
    else
        isc_stage_rows<DSV4_TYPE_F32>(rows, head_dim, hd, r0, nr, ks, ks_stride);
}

/* A row's score from its head dots d[0..n_head): relu(d[h]) * ws[h] summed from 0.0f in head order,
 * ISC_SPF dots read ahead of the chain (the one-query kernels' form). */
__device__ __forceinline__ float isc_score_ahead(const float *d, const float *ws, uint32_t n_head) {
    float sv = 0.0f;
    for (uint32_t h0 = 0; h0 < n_head; h0 += ISC_SPF) {
        float dv[ISC_SPF], wv[ISC_SPF];
#pragma unroll
        for (uint32_t j = 0; j < ISC_SPF; j++)
            if (h0 + j < n_head) dv[j] = d[h0 + j], wv[j] = ws[h0 + j];
#pragma unroll
        for (uint32_t j = 0; j < ISC_SPF; j++)
            if (h0 + j < n_head) {
                const float dot = dv[j] < 0.0f ? 0.0f : dv[j];
                sv = __fadd_rn(sv, __fmul_rn(dot, wv[j]));
            }
    }
    return sv;
}

/* ONE: a single query (decode): the staging, dot and score loops below that issue their loads
 * together; prefill chunks (ONE = false) keep the session-9 loops. The build with the read-ahead
 * loops in every launch prefilled a 32K flash4 prompt slower (33.8K vs 35.3K tok/s, bench/NOTES.md
 * session 10); which of that build's changes cost it was not isolated, and this split has not run on
 * a GPU yet. The same values either way. */
template <bool q_glob, bool ONE>
__global__ void iscore_kernel(const float *q, const float *w, float w_scale, uint32_t n_head,
                              uint32_t head_dim, const void *rows, uint32_t rows_type, uint32_t n_rows,
                              uint32_t tile, float *scores, itok c) {
    cu_pdl_enter();
    extern __shared__ float sh[];
    const uint32_t tok = blockIdx.y;
    n_rows = itok_rows(c, n_rows, tok);
    if (c.ratio && n_rows <= c.k) return;
    if (blockIdx.x * tile >= n_rows) return; /* a tile past this token's rows (block-uniform) */
    q += (uint64_t)tok * n_head * head_dim;
    w += (uint64_t)tok * n_head;
    scores += tok * c.score_stride;
    const uint32_t qs_stride = q_glob ? head_dim : head_dim + 1, ks_stride = head_dim + 1;
    float *ws = sh;
    float *ks = ws + n_head;
    float *dots = ks + (uint64_t)tile * ks_stride;
    float *qs = dots + (uint64_t)tile * (n_head + 1);
    const uint32_t r0 = blockIdx.x * tile;
    const uint32_t nr = n_rows - r0 < tile ? n_rows - r0 : tile;
    for (uint32_t h = threadIdx.x; h < n_head; h += blockDim.x) ws[h] = __fmul_rn(w[h], w_scale);
    /* the staging loads go out ISC_PF at a time before their stores (one L2 round trip per ISC_PF
     * elements, not per element: the kernel's time was these chains) */
    const isc_div hd = isc_div_make(head_dim), nh = isc_div_make(n_head);
    if (!ONE) {
        if (!q_glob)
            for (uint32_t e = threadIdx.x; e < n_head * head_dim; e += blockDim.x)
                qs[(e / head_dim) * qs_stride + e % head_dim] = q[e];
        for (uint32_t e = threadIdx.x; e < nr * head_dim; e += blockDim.x)
            ks[(e / head_dim) * ks_stride + e % head_dim] =
                kv_load(rows, rows_type, head_dim, r0 + e / head_dim, e % head_dim);
    } else if (!q_glob)
        for (uint32_t e0 = threadIdx.x; e0 < n_head * head_dim; e0 += ISC_QPF * blockDim.x) {
            float v[ISC_QPF];
#pragma unroll
            for (uint32_t j = 0; j < ISC_QPF; j++) {
                const uint32_t e = e0 + j * blockDim.x;
                if (e < n_head * head_dim) v[j] = q[e];
            }
#pragma unroll
            for (uint32_t j = 0; j < ISC_QPF; j++) {
                const uint32_t e = e0 + j * blockDim.x;
                if (e < n_head * head_dim) qs[isc_q(e, hd) * qs_stride + isc_r(e, hd)] = v[j];
            }
        }
    if (ONE) isc_stage_rows_of(rows, rows_type, head_dim, hd, r0, nr, ks, ks_stride);
    __syncthreads();
    const float *qb = q_glob ? q : qs;
    /* ISC_DOTS (row, head) dots per thread side by side: each its own chain over d in order (the
     * same bits), the chains interleaved so their adds overlap */
    if (!ONE)
        for (uint32_t e = threadIdx.x; e < nr * n_head; e += blockDim.x) {
            const uint32_t r = e / n_head, h = e % n_head;
            const float *k = ks + r * ks_stride, *qh = qb + (uint64_t)h * qs_stride;
            float dot = 0.0f;
            for (uint32_t d = 0; d < head_dim; d++) dot = __fadd_rn(dot, __fmul_rn(k[d], qh[d]));
            dots[r * (n_head + 1) + h] = dot;
        }
    for (uint32_t e0 = threadIdx.x; ONE && e0 < nr * n_head; e0 += ISC_DOTS * blockDim.x) {
        const float *k[ISC_DOTS], *qh[ISC_DOTS];
        float dot[ISC_DOTS];
#pragma unroll
        for (uint32_t j = 0; j < ISC_DOTS; j++) {
            const uint32_t e = e0 + j * blockDim.x < nr * n_head ? e0 + j * blockDim.x : e0;
            k[j] = ks + isc_q(e, nh) * ks_stride;
            qh[j] = qb + (uint64_t)isc_r(e, nh) * qs_stride;
            dot[j] = 0.0f;
        }
        for (uint32_t d = 0; d < head_dim; d++)
#pragma unroll
            for (uint32_t j = 0; j < ISC_DOTS; j++) dot[j] = __fadd_rn(dot[j], __fmul_rn(k[j][d], qh[j][d]));
#pragma unroll
        for (uint32_t j = 0; j < ISC_DOTS; j++) {
            const uint32_t e = e0 + j * blockDim.x;
            if (e < nr * n_head) dots[isc_q(e, nh) * (n_head + 1) + isc_r(e, nh)] = dot[j];
        }
    }
    __syncthreads();
    for (uint32_t r = threadIdx.x; r < nr; r += blockDim.x) {
        float sv = 0.0f;
        if (!ONE)
            for (uint32_t h = 0; h < n_head; h++) {
                float dot = dots[r * (n_head + 1) + h];
                if (dot < 0.0f) dot = 0.0f;
                sv = __fadd_rn(sv, __fmul_rn(dot, ws[h]));
            }
        if (ONE) sv = isc_score_ahead(dots + r * (n_head + 1), ws, n_head);
        scores[r0 + r] = sv;
    }
}

/* One query (decode; DSV4_CUDA_ISCORE_ONE=0 switches back to iscore_kernel<q, true>): a thread owns
 * whole (row, head) dots, 256 / n_head rows side by side, q and the row tile read as float4 from
 * shared memory (stride head_dim + 4: conflict-free for 8 consecutive heads; one row per warp, a
 * broadcast). iscore_kernel's decode form gave each of 256 threads four chains of which, at 2 rows
 * a tile, three repeated the first, one shared-memory load per multiply-add: ~15 us a call at 2K
 * context (ncu, session 12) for 4.2 M multiply-adds. The same expressions in the same order: each
 * dot a chain over d from 0.0f, each score a chain over heads in order (relu(dot) * w[h] * w_scale):
 * the same bits. Tiles of I1_RP(n_head) .. I1_MAX_TILE rows. */
constexpr uint32_t I1_THREADS = 256, I1_MAX_TILE = 16, I1_PAD = 4;
__host__ __device__ constexpr uint32_t i1_rows_per_pass(uint32_t n_head) { return I1_THREADS / n_head; }
__host__ __device__ inline size_t i1_smem(uint32_t n_head, uint32_t head_dim, uint32_t tile) {
    return ((size_t)n_head + (size_t)tile * (head_dim + I1_PAD) + (size_t)tile * (n_head + 1) +
            (size_t)n_head * (head_dim + I1_PAD)) *
           sizeof(float);
}

__global__ void __launch_bounds__(I1_THREADS)
    iscore_one_kernel(const float *q, const float *w, float w_scale, uint32_t n_head, uint32_t head_dim,
                      const void *rows, uint32_t rows_type, uint32_t n_rows, uint32_t tile, float *scores) {
    cu_pdl_enter();
    extern __shared__ __align__(16) float i1_sh[];
    const uint32_t t = threadIdx.x, st = head_dim + I1_PAD, st4 = st / 4, hd4 = head_dim / 4;
    const uint32_t r0 = blockIdx.x * tile;
    if (r0 >= n_rows) return;
    const uint32_t nr = n_rows - r0 < tile ? n_rows - r0 : tile;
    float *ws = i1_sh, *ks = ws + n_head, *dots = ks + (size_t)tile * st,
          *qs = dots + (size_t)tile * (n_head + 1);
    for (uint32_t h = t; h < n_head; h += I1_THREADS) ws[h] = __fmul_rn(w[h], w_scale);
    /* q: every float4 of it in flight at once (8 per thread for 64 x 128); its rows by a shift where
     * head_dim / 4 is a power of two (a division and a remainder per float4: 9.50 -> 8.89 M warp
     * instructions and 18.3 -> 17.7 us at 8,192 rows, 7.3 -> 7.0 us at 513, ncu session 27) */
    const uint32_t nq4 = n_head * hd4;
    const isc_div q4 = isc_div_make(hd4);
    for (uint32_t e0 = t; e0 < nq4; e0 += ISC_PF * I1_THREADS) {
        float4 v[ISC_PF];
#pragma unroll
        for (uint32_t j = 0; j < ISC_PF; j++) {
            const uint32_t e = e0 + j * I1_THREADS;
            if (e < nq4) v[j] = ((const float4 *)q)[e];
        }
#pragma unroll
        for (uint32_t j = 0; j < ISC_PF; j++) {
            const uint32_t e = e0 + j * I1_THREADS;
            if (e < nq4) ((float4 *)qs)[isc_q(e, q4) * st4 + isc_r(e, q4)] = v[j];
        }
    }
    const isc_div hd = isc_div_make(head_dim);
    isc_stage_rows_of(rows, rows_type, head_dim, hd, r0, nr, ks, st);
    __syncthreads();
    /* thread t: head t % n_head of rows t / n_head + RP i; two rows' chains side by side */
    const uint32_t RP = i1_rows_per_pass(n_head), h = t % n_head;
    const float4 *qh = (const float4 *)qs + (size_t)h * st4;
    for (uint32_t ra = t / n_head; ra < nr; ra += 2 * RP) {
        const uint32_t rc = ra + RP < nr ? ra + RP : ra;
        const float4 *ka = (const float4 *)ks + (size_t)ra * st4, *kc = (const float4 *)ks + (size_t)rc * st4;
        float da = 0.0f, dc = 0.0f;
#pragma unroll 8
        for (uint32_t d4 = 0; d4 < hd4; d4++) {
            const float4 qv = qh[d4], a = ka[d4], c = kc[d4];
            da = __fadd_rn(da, __fmul_rn(a.x, qv.x));
            dc = __fadd_rn(dc, __fmul_rn(c.x, qv.x));
            da = __fadd_rn(da, __fmul_rn(a.y, qv.y));
            dc = __fadd_rn(dc, __fmul_rn(c.y, qv.y));
            da = __fadd_rn(da, __fmul_rn(a.z, qv.z));
            dc = __fadd_rn(dc, __fmul_rn(c.z, qv.z));
            da = __fadd_rn(da, __fmul_rn(a.w, qv.w));
            dc = __fadd_rn(dc, __fmul_rn(c.w, qv.w));
        }
        dots[(size_t)ra * (n_head + 1) + h] = da;
        if (rc != ra) dots[(size_t)rc * (n_head + 1) + h] = dc;
    }
    __syncthreads();
    for (uint32_t r = t; r < nr; r += I1_THREADS)
        scores[r0 + r] = isc_score_ahead(dots + (size_t)r * (n_head + 1), ws, n_head);
}

/* Prefill chunks (the default since session 11; DSV4_CUDA_ISCORE=plain switches back): iscore_kernel's
 * plain loops load two shared-memory values per multiply-add; this one a quarter
 * (cuda_iscore_tiled_units.cuh: a warp 2 rows, a lane 2 heads, 16-byte loads; the same sequential
 * chain per dot, so the same bits). 64 heads, head_dim a multiple of 4, tile = 2 rows per warp.
 * H200, flash4 32K prefill: 35,342 / 35,390 -> 39,038 / 38,972 tok/s (session 11, call 3). */
__host__ __device__ inline size_t ist_smem(uint32_t head_dim) {
    return (size_t)ist_layout_of(head_dim).total * sizeof(float);
}

__global__ void __launch_bounds__(IST_WARPS * 32)
    iscore_tiled_kernel(const float *q, const float *w, float w_scale, uint32_t head_dim, const void *rows,
                        uint32_t rows_type, float *scores, itok c) {
    cu_pdl_enter();
    extern __shared__ __align__(16) float ist_sh[];
    const uint32_t tok = blockIdx.y;
    const uint32_t n_rows = itok_rows(c, 0, tok);
    if (n_rows <= c.k) return;
    if (blockIdx.x * IST_TILE >= n_rows) return;
    q += (uint64_t)tok * IST_HEADS * head_dim;
    w += (uint64_t)tok * IST_HEADS;
    scores += tok * c.score_stride;
    const ist_layout L = ist_layout_of(head_dim);
    const uint32_t r0 = blockIdx.x * IST_TILE;
    const uint32_t nr = n_rows - r0 < IST_TILE ? n_rows - r0 : IST_TILE;
    for (uint32_t h = threadIdx.x; h < IST_HEADS; h += blockDim.x)
        ist_sh[L.ws + h] = __fmul_rn(w[h], w_scale);
    for (uint32_t e = threadIdx.x; e < IST_HEADS * head_dim; e += blockDim.x)
        ist_sh[L.qs + (e / head_dim) * L.st + e % head_dim] = q[e];
    for (uint32_t e = threadIdx.x; e < IST_TILE * head_dim; e += blockDim.x) /* rows past nr: zeros */
        ist_sh[L.ks + (e / head_dim) * L.st + e % head_dim] =
            e / head_dim < nr ? kv_load(rows, rows_type, head_dim, r0 + e / head_dim, e % head_dim) : 0.0f;
    __syncthreads();
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float d[2][2];
    ist_thread_dots(ist_sh, L, head_dim, warp, lane, d);
    for (uint32_t i = 0; i < 2; i++)
        for (uint32_t j = 0; j < 2; j++) ist_sh[ist_dot_at(L, warp, lane, i, j)] = d[i][j];
    __syncthreads();
    for (uint32_t r = threadIdx.x; r < nr; r += blockDim.x) scores[r0 + r] = ist_row_score(ist_sh, L, r);
}

/* Exclusive block-wide prefix sum of v (blockDim.x == SELECT_THREADS); *total gets the sum. */
__device__ __forceinline__ uint32_t block_excl_scan(uint32_t v, uint32_t *warp_sums, uint32_t *total) {
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= (uint32_t)o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint32_t t = warp_sums[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= (uint32_t)o) t += y;
        }
        warp_sums[lane] = t; /* inclusive over warps */
    }
    __syncthreads();
    const uint32_t before = (warp ? warp_sums[warp - 1] : 0u) + x - v;
    *total = warp_sums[SELECT_THREADS / 32 - 1];
    __syncthreads(); /* warp_sums is reused by the next scan */
    return before;
}

/* A selection block's token (blockIdx.x): its row count, scores and output; false when it has
 * nothing to select (a chunk's token that sees at most k rows). */
__device__ __forceinline__ bool sel_token(const itok &c, uint32_t k, uint32_t *n, const float **scores,
                                          int32_t **sel) {
    const uint32_t tok = blockIdx.x;
    *n = itok_rows(c, *n, tok);
    if (c.ratio && *n <= k) return false;
    *scores += tok * c.score_stride;
    *sel += (uint64_t)tok * k;
    return true;
}

/* agg: the histogram counts a warp's keys of one bin with one atomic (DSV4_CUDA_SELECT_AGG=0: one per
 * key). The counts, so the selection, are the same integers either way. */
__global__ void __launch_bounds__(SELECT_THREADS)
    select_kernel(const float *scores, uint32_t n, uint32_t k, int32_t *sel, itok c, bool agg) {
    cu_pdl_enter();
    if (!sel_token(c, k, &n, &scores, &sel)) return;
    /* the keys in shared memory when the launch gave room for them (SEL_SMEM_KEYS): read from
     * global memory once, not once per pass */
    extern __shared__ uint32_t skeys[];
    const bool staged = c.staged_keys >= n;
    if (staged)
        for (uint32_t i0 = threadIdx.x; i0 < n; i0 += 8 * blockDim.x) {
            float v[8];
#pragma unroll
            for (uint32_t j = 0; j < 8; j++)
                if (i0 + j * blockDim.x < n) v[j] = scores[i0 + j * blockDim.x];
#pragma unroll
            for (uint32_t j = 0; j < 8; j++)
                if (i0 + j * blockDim.x < n) skeys[i0 + j * blockDim.x] = sel_order_key(v[j]);
        }
#define SEL_KEY(i) (staged ? skeys[(i)] : sel_order_key(scores[(i)]))
    __shared__ uint32_t hist[256];
    __shared__ uint32_t warp_sums[32];
    __shared__ uint32_t s_prefix, s_remaining;
    if (threadIdx.x == 0) {
        s_prefix = 0;
        s_remaining = k;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint32_t b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix;
        if (agg) /* a warp's keys of one bin counted once (scores of one magnitude share the top bins: the
                    per-key shared atomics to one address were serialised) */
            for (uint32_t i0 = threadIdx.x & ~31u; i0 < n; i0 += blockDim.x) {
                const uint32_t i = i0 + (threadIdx.x & 31u);
                uint32_t bin = 256u; /* none */
                if (i < n) {
                    const uint32_t key = SEL_KEY(i);
                    if ((key & mask) == prefix) bin = (key >> shift) & 255u;
                }
                const uint32_t same = __match_any_sync(0xffffffffu, bin);
                if (bin < 256u && (threadIdx.x & 31u) == (uint32_t)(__ffs((int)same) - 1))
                    atomicAdd(&hist[bin], (uint32_t)__popc((int)same));
            }
        else
            for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
                const uint32_t key = SEL_KEY(i);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
        __syncthreads();
        if (threadIdx.x < 32) { /* the bin holding the remaining-th largest key of this prefix: the
                                    first bin from 255 down whose running count reaches it; lane l
                                    owns bins 255 - 8l .. 248 - 8l, a lane scan finds the lane */
            const uint32_t lane = threadIdx.x, rem = s_remaining;
            uint32_t h[8], loc = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) loc += h[j] = hist[255 - 8 * lane - j];
            uint32_t incl = loc;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= (uint32_t)o) incl += y;
            }
            uint32_t cum = incl - loc;
            if (cum < rem && rem <= incl) {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (cum + h[j] >= rem) {
                        s_prefix = prefix | ((255u - 8 * lane - j) << shift);
                        s_remaining = rem - cum;
                        break;
                    }
                    cum += h[j];
                }
            }
        }
        mask |= 255u << shift;
        __syncthreads();
    }
    /* Take every key above thr and the first need_eq keys equal to it, in index order: each thread
     * a contiguous run of rows, two block scans (ranks among the equal keys, output slots). */
    const uint32_t thr = s_prefix, need_eq = s_remaining;
    const uint32_t per = (n + blockDim.x - 1) / blockDim.x, i0 = threadIdx.x * per;
    const uint32_t i1 = i0 + per < n ? i0 + per : n;
    uint32_t n_eq = 0, tot;
    for (uint32_t i = i0; i < i1; i++) n_eq += SEL_KEY(i) == thr ? 1u : 0u;
    const uint32_t eq_base = block_excl_scan(n_eq, warp_sums, &tot);
    uint32_t n_take = 0, r = eq_base;
    for (uint32_t i = i0; i < i1; i++) {
        const uint32_t key = SEL_KEY(i);
        if (key > thr || (key == thr && r++ < need_eq)) n_take++;
    }
    uint32_t at = block_excl_scan(n_take, warp_sums, &tot);
    r = eq_base;
    for (uint32_t i = i0; i < i1; i++) {
        const uint32_t key = SEL_KEY(i);
        if (key > thr || (key == thr && r++ < need_eq)) sel[at++] = (int32_t)i;
    }
#undef SEL_KEY
}

/* The same selection with the keys in registers and the k-th largest key found bit by bit
 * (DSV4_CUDA_SELECT=radix: select_kernel). select_kernel's four radix passes re-read every key
 * from shared memory and count it with a warp match and an atomic: one CTA at 8,192 rows took
 * 17.9 us (61 K warp instructions, ncu at the real clock, session 27) of a 32K decode layer.
 * Here thread t owns rows [t KPT, t KPT + KPT) as keys in registers; T, the largest key with at
 * least k keys >= T, is built from bit 31 down (a bit stays set when at least k keys are >= T
 * with it): 32 rounds of KPT compares, a warp sum and one barrier. T is the k-th largest key, the
 * value select_kernel's passes find; the rows above T and the need_eq = k - #(> T) lowest-index
 * rows equal to it are written in row order from one block scan of the packed (> T, == T) counts
 * (n < 65,536). So the set and its order are select_kernel's, for any keys (NaN included: the
 * same sel_order_key). Measured (session 27, ncu at the real clock, same calls): at 513 rows (one
 * key a thread) 6.5-6.8 against 7.0 us; at 8,192 rows 11.7 against 17.8 (12.4 without the
 * compaction below); at 8,193 15.9 against 17.8 (18.3 without); a 2,048-token prefill chunk at 32K
 * 117 against 206 us. A form with two bits a round (three counts) was slower (7.8 / 13.4 us). */
constexpr uint32_t SELB_MAX_KPT = 16; /* rows a thread: up to 16,384 rows */

/* Rounds for bits hi .. lo of T over v[0..N), `above` keys counted as >= every candidate: a bit
 * stays set when at least k keys are >= T with it. wc: two buffers of 32 warp counts; a warp writes
 * a round's only after every warp has passed the barrier of the round between, so after every read
 * of the round before. */
template <uint32_t N>
__device__ __forceinline__ uint32_t selb_bits(const uint32_t (&v)[N], uint32_t T, int hi, int lo,
                                              uint32_t above, uint32_t k,
                                              uint32_t (*wc)[SELECT_THREADS / 32]) {
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (int b = hi; b >= lo; b--) {
        const uint32_t cand = T | (1u << b);
        const uint32_t cnt = __reduce_add_sync(0xffffffffu, selb_count_ge<N>(v, cand));
        if (lane == 0) wc[b & 1][warp] = cnt;
        __syncthreads();
        const uint32_t tot = __reduce_add_sync(0xffffffffu, wc[b & 1][lane]) + above;
        if (tot >= k) T = cand;
    }
    return T;
}

/* COMPACT: after the top 16 bits, the keys whose top half is T's (the only ones a later round can
 * split) move to one a thread when there are at most SELECT_THREADS of them, and the keys above
 * that half are counted once: the last 16 rounds compare one key a thread instead of KPT. */
template <uint32_t KPT, bool COMPACT>
__global__ void __launch_bounds__(SELECT_THREADS)
    select_bits_kernel(const float *scores, uint32_t n, uint32_t k, int32_t *sel, itok c) {
    cu_pdl_enter();
    if (!sel_token(c, k, &n, &scores, &sel)) return;
    const uint32_t t = threadIdx.x, i0 = t * KPT;
    uint32_t key[KPT];
#pragma unroll
    for (uint32_t j = 0; j < KPT; j++) key[j] = i0 + j < n ? sel_order_key(scores[i0 + j]) : 0u;
    /* a padding key 0 is below every candidate (each has a bit set); the output tests i < n */
    __shared__ uint32_t wc[2][SELECT_THREADS / 32];
    __shared__ uint32_t warp_sums[32];
    uint32_t T, tot;
    if (!COMPACT) {
        T = selb_bits<KPT>(key, 0u, 31, 0, 0u, k, wc);
    } else {
        __shared__ uint32_t live[SELECT_THREADS];
        T = selb_bits<KPT>(key, 0u, 31, 16, 0u, k, wc);
        const uint32_t lb = block_excl_scan(selb_half_counts<KPT>(key, T), warp_sums, &tot) & 0xffffu;
        if ((tot & 0xffffu) <= SELECT_THREADS) {
            selb_compact<KPT>(key, T, lb, live);
            __syncthreads();
            const uint32_t one[1] = {t < (tot & 0xffffu) ? live[t] : 0u};
            T = selb_bits<1>(one, T, 15, 0, tot >> 16, k, wc);
        } else {
            T = selb_bits<KPT>(key, T, 15, 0, 0u, k, wc);
        }
    }
    const uint32_t before = block_excl_scan(selb_out_counts<KPT>(key, i0, n, T), warp_sums, &tot);
    selb_write<KPT>(key, i0, n, T, before, tot, k, sel);
}

/* DSV4_CUDA_SELECT=radix: select_kernel everywhere; =bits1: select_bits_kernel without the
 * compaction (A/B; read on every call, as the tests set it) */
static bool select_is(const char *what) {
    const char *v = getenv("DSV4_CUDA_SELECT");
    return v && strcmp(v, what) == 0;
}
/* Launches the selection of m tokens over at most max_rows rows each: select_bits_kernel where a
 * thread's rows fit SELB_MAX_KPT, else select_kernel. */
static int select_launch(cudaStream_t st, uint32_t m, const float *scores, uint32_t n, uint64_t max_rows,
                         uint32_t k, int32_t *sel, itok c, bool agg) {
    const uint64_t kpt = (max_rows + SELECT_THREADS - 1) / SELECT_THREADS;
    if (!select_is("radix") && kpt <= SELB_MAX_KPT) {
#define SELB(K_, C_) select_bits_kernel<K_, C_><<<m, SELECT_THREADS, 0, st>>>(scores, n, k, sel, c)
        const bool compact = !select_is("bits1");
        if (kpt <= 1)
            SELB(1, false);
        else if (kpt <= 2)
            SELB(2, false);
        else if (kpt <= 4)
            SELB(4, false);
        else if (kpt <= 8 && compact)
            SELB(8, true);
        else if (kpt <= 8)
            SELB(8, false);
        else if (compact)
            SELB(16, true);
        else
            SELB(16, false);
#undef SELB
    } else {
        select_kernel<<<m, SELECT_THREADS, (size_t)c.staged_keys * 4, st>>>(scores, n, k, sel, c, agg);
    }
    return attn_launch_status();
}

/* DSV4_CUDA_SELECT_AGG=0: one histogram atomic per key (A/B; read on every call, as the tests set it) */
static bool select_agg(void) {
    const char *v = getenv("DSV4_CUDA_SELECT_AGG");
    return !(v && strcmp(v, "0") == 0);
}

/* Shared memory of a tile of rows: the weights, the row tile, the dots, q when it sits there. */
static size_t isc_smem(uint32_t n_head, uint32_t head_dim, uint32_t tile, bool q_in) {
    const size_t q_bytes = (size_t)n_head * (head_dim + 1) * sizeof(float);
    return (n_head + (size_t)tile * (head_dim + 1) + (size_t)tile * (n_head + 1)) * sizeof(float) +
           (q_in ? q_bytes : 0);
}

/* The largest row tile whose shared memory fits; q moves to global memory if even one row
 * won't. 0 when nothing fits. */
static uint32_t iscore_tile(uint32_t n_head, uint32_t head_dim, bool *q_in, size_t *smem) {
    *q_in = isc_smem(n_head, head_dim, 1, true) <= SMEM_LIMIT;
    uint32_t tile = 64;
    while (tile > 1 && isc_smem(n_head, head_dim, tile, *q_in) > SMEM_LIMIT) tile /= 2;
    if (isc_smem(n_head, head_dim, tile, *q_in) > SMEM_LIMIT) return 0;
    *smem = isc_smem(n_head, head_dim, tile, *q_in);
    return tile;
}

/* SMs of the current device (1 when it cannot be read: the largest tiles, as before). */
static uint32_t isc_sm_count(void) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 1;
    return sms > 0 ? (uint32_t)sms : 1;
}

static int iscore_launch(cudaStream_t st, dim3 grid, bool q_in, size_t smem, const float *q, const float *w,
                         float w_scale, uint32_t n_head, uint32_t head_dim, const void *rows,
                         uint32_t rows_type, uint32_t n_rows, uint32_t tile, float *scores, itok c) {
    const bool one = grid.y == 1 && c.ratio == 0;
#define ISC_LAUNCH(QG, ONE_)                                                                                 \
    iscore_kernel<QG, ONE_>                                                                                  \
        <<<grid, 256, smem, st>>>(q, w, w_scale, n_head, head_dim, rows, rows_type, n_rows, tile, scores, c)
    if (q_in && one)
        ISC_LAUNCH(false, true);
    else if (q_in)
        ISC_LAUNCH(false, false);
    else if (one)
        ISC_LAUNCH(true, true);
    else
        ISC_LAUNCH(true, false);
#undef ISC_LAUNCH
    return attn_launch_status();
}

} // namespace

extern "C" size_t dsv4_cuda_indexer_scratch_bytes(uint32_t n_rows) {
    return ((size_t)n_rows * sizeof(float) + 255) / 256 * 256 + 256;
}

static bool rows_type_ok(uint32_t t, uint32_t head_dim) {
    return t == DSV4_TYPE_F32 || t == DSV4_TYPE_F16 || (t == DSV4_KV_FP4 && head_dim % 32 == 0);
}

extern "C" int dsv4_cuda_indexer_topk(dsv4_cuda_stream s, const float *q, const float *w, float w_scale,
                                      uint32_t n_head, uint32_t head_dim, uint32_t rows_type,
                                      const void *rows, uint32_t n_rows, uint32_t k, int32_t *sel,
                                      void *scratch) {
    if (k > n_rows || !scratch || !rows_type_ok(rows_type, head_dim)) return (int)cudaErrorInvalidValue;
    if (k == 0) return 0;
    cudaStream_t st = (cudaStream_t)s;
    float *scores = (float *)scratch;
    bool q_in = false;
    size_t smem = 0;
    uint32_t tile = iscore_tile(n_head, head_dim, &q_in, &smem);
    if (!tile) return (int)cudaErrorInvalidValue;
    const uint32_t sms = isc_sm_count();
    const itok one = {0, 0, k, 0, sel_keys(n_rows)};
    const char *ov = getenv("DSV4_CUDA_ISCORE_ONE"); /* read on every call (A/B and the tests) */
    const uint32_t rp = n_head && n_head <= I1_THREADS ? i1_rows_per_pass(n_head) : 0;
    int e;
    if (!(ov && strcmp(ov, "0") == 0) && rp && I1_THREADS % n_head == 0 && head_dim % 4 == 0 &&
        ((uintptr_t)q & 15) == 0 && i1_smem(n_head, head_dim, rp) <= SMEM_LIMIT) {
        /* the fewest rows a tile whose tiles still give two CTAs per SM, within the shared memory */
        uint32_t t1 = rp;
        const char *tv = getenv("DSV4_CUDA_ISCORE_ONE_TILE"); /* the least rows a tile (A/B; same scores) */
        const uint32_t t_min = tv ? (uint32_t)atoi(tv) : 0;
        while (t1 * 2 <= (rp > I1_MAX_TILE ? rp : I1_MAX_TILE) &&
               ((n_rows + t1 - 1) / t1 > 2 * sms || t1 < t_min) &&
               i1_smem(n_head, head_dim, t1 * 2) <= SMEM_LIMIT)
            t1 *= 2;
        iscore_one_kernel<<<(n_rows + t1 - 1) / t1, I1_THREADS, i1_smem(n_head, head_dim, t1), st>>>(
            q, w, w_scale, n_head, head_dim, rows, rows_type, n_rows, t1, scores);
        e = attn_launch_status();
    } else {
        /* one query: smaller tiles until its rows cover the SMs (a CTA per SM and tile rows each was a
         * quarter of the SMs at 2K context); a row's score does not depend on its tile */
        while (tile > 1 && (n_rows + tile - 1) / tile < sms) tile /= 2;
        smem = isc_smem(n_head, head_dim, tile, q_in);
        e = iscore_launch(st, dim3((n_rows + tile - 1) / tile, 1), q_in, smem, q, w, w_scale, n_head,
                          head_dim, rows, rows_type, n_rows, tile, scores, one);
    }
    if (e) return e;
    return select_launch(st, 1, scores, n_rows, n_rows, k, sel, one, select_agg());
}

extern "C" size_t dsv4_cuda_indexer_chunk_scratch_bytes(uint32_t pos0, uint32_t n, uint32_t ratio) {
    const uint64_t max_rows = ratio ? ((uint64_t)pos0 + n) / ratio : 0;
    const uint64_t stride = (max_rows + 63) / 64 * 64;
    uint64_t group = stride ? DSV4_CUDA_INDEXER_CHUNK_SCRATCH / (stride * sizeof(float)) : n;
    if (group < 1) group = 1;
    if (group > n) group = n;
    return (size_t)(group * stride * sizeof(float)) + 256;
}

extern "C" int dsv4_cuda_indexer_topk_chunk(dsv4_cuda_stream s, const float *q, const float *w, float w_scale,
                                            uint32_t n_head, uint32_t head_dim, uint32_t rows_type,
                                            const void *rows, uint32_t pos0, uint32_t n, uint32_t ratio,
                                            uint32_t k, int32_t *sel, void *scratch) {
    if (ratio == 0 || !scratch || !rows_type_ok(rows_type, head_dim)) return (int)cudaErrorInvalidValue;
    const uint64_t max_rows = ((uint64_t)pos0 + n) / ratio;
    if (n == 0 || k == 0 || max_rows <= k) return 0;
    cudaStream_t st = (cudaStream_t)s;
    bool q_in = false;
    size_t smem = 0;
    const uint32_t tile = iscore_tile(n_head, head_dim, &q_in, &smem);
    if (!tile) return (int)cudaErrorInvalidValue;
    const char *iv = getenv("DSV4_CUDA_ISCORE"); /* read on every call */
    const bool tiled = !(iv && strcmp(iv, "plain") == 0) && n_head == IST_HEADS && head_dim % 4 == 0 &&
                       ist_smem(head_dim) <= SMEM_LIMIT;
    /* tokens in groups whose scores fit the scratch (every token of a 2048 chunk at once up to
     * ~32K rows); each group is one scoring and one selection launch */
    const uint64_t stride = (max_rows + 63) / 64 * 64;
    uint64_t group = DSV4_CUDA_INDEXER_CHUNK_SCRATCH / (stride * sizeof(float));
    if (group < 1) group = 1;
    if (group > n) group = n;
    for (uint32_t t0 = 0; t0 < n; t0 += (uint32_t)group) {
        const uint32_t m = n - t0 < group ? n - t0 : (uint32_t)group;
        const uint32_t last_rows = (pos0 + t0 + m) / ratio; /* the group's widest token */
        if (last_rows <= k) continue;
        const itok c = {pos0 + t0, ratio, k, stride, 0}; /* chunks: the keys read from the scores */
        const float *qg = q + (uint64_t)t0 * n_head * head_dim, *wg = w + (uint64_t)t0 * n_head;
        int e;
        if (tiled) {
            iscore_tiled_kernel<<<dim3((last_rows + IST_TILE - 1) / IST_TILE, m), IST_WARPS * 32,
                                  ist_smem(head_dim), st>>>(qg, wg, w_scale, head_dim, rows, rows_type,
                                                            (float *)scratch, c);
            e = attn_launch_status();
        } else {
            e = iscore_launch(st, dim3((last_rows + tile - 1) / tile, m), q_in, smem, qg, wg, w_scale, n_head,
                              head_dim, rows, rows_type, 0, tile, (float *)scratch, c);
        }
        if (e) return e;
        e = select_launch(st, m, (const float *)scratch, 0, last_rows, k, sel + (uint64_t)t0 * k, c,
                          select_agg());
        if (e) return e;
    }
    return 0;
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_indexer(const void **out) {
    out[0] = (const void *)iscore_kernel<false, false>;
    out[1] = (const void *)iscore_kernel<true, false>;
    out[2] = (const void *)select_kernel;
    out[3] = (const void *)iscore_kernel<false, true>;
    out[4] = (const void *)iscore_kernel<true, true>;
    out[5] = (const void *)iscore_tiled_kernel;
    out[6] = (const void *)iscore_one_kernel;
    out[7] = (const void *)select_bits_kernel<1, false>;
    out[8] = (const void *)select_bits_kernel<2, false>;
    out[9] = (const void *)select_bits_kernel<4, false>;
    out[10] = (const void *)select_bits_kernel<8, false>;
    out[11] = (const void *)select_bits_kernel<16, false>;
    out[12] = (const void *)select_bits_kernel<8, true>;
    out[13] = (const void *)select_bits_kernel<16, true>;
    return 14;
}
