/* Warp-per-row batch-1 matvec for dense Q8_0 and F16 weights, several segments per launch.
 *
 * Why this shape (the persistent cp.async kernel in cuda_matvec.cu exposes ~1 us per CTA-wide
 * pipeline iteration and gets few iterations on decode shapes): here every warp owns whole rows
 * and keeps its own loads in flight, so there is no CTA-wide barrier in the main loop and nothing
 * waits for the slowest warp. Weight bytes go straight from global memory into registers
 * (16-byte non-coherent loads that do not allocate in L1), MVW_*_D pieces (~6-8 KB) in flight per
 * warp, 16 warps per SM: ~100 KB per SM in flight, several times what Little's law asks at full
 * bandwidth. The grid is sized to the rows of all segments (one wave of MVW_MIN_CTAS CTAs per
 * SM), so a small launch starts every warp at once and a large one streams like a persistent
 * kernel. Q8_0 pieces are decoded from a per-warp shared buffer (__syncwarp only); Q8_0
 * activations are re-laid once per CTA (the only __syncthreads, before the loop, after the first
 * weight loads are issued; or, for f32 x (x_f32), quantized by every CTA into the same layout with
 * the quantizer kernel's arithmetic, which saves that kernel's launch); F16 activations are read
 * through L1. See cuda_mvw_units.cuh for the row cut and the fixed summation order that makes the
 * bits independent of the launch. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mvw.h"
#include "backend/cuda/cuda_mvw_units.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_router.cuh"

static __device__ __forceinline__ float mvw_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Pieces are numbered across the warp's rows (q = row * P + piece): loads run D pieces ahead of
 * the decode, across row boundaries. */
struct mvw_cursor {
    const uint8_t *row; /* current row's first byte */
    int p;              /* piece within the row */
};
static __device__ __forceinline__ void mvw_advance(mvw_cursor &c, int P, long long row_bytes) {
    if (++c.p == P) {
        c.p = 0;
        c.row += row_bytes;
    }
}

/* K words per lane per piece, D pieces in flight (the piece cut is the same for every K, D). */
template <int K, int D>
static __device__ __forceinline__ void mvw_q8_rows(const mvw_seg_dev &sg, uint8_t *smem, int act_smem,
                                                   long long r0, int nr, int warp, int lane) {
    const int P = mvw_pieces(MVW_Q8_0, sg.in);
    const int total = nr * P;
    uint8_t *act = smem;
    uint8_t *buf = smem + act_smem + warp * MVW_Q8_PIECE_BYTES;
    int4 b[D][K];
#pragma unroll
    for (int d = 0; d < D; d++)
#pragma unroll
        for (int j = 0; j < K; j++) b[d][j] = make_int4(0, 0, 0, 0);
    mvw_cursor ic = {sg.w + r0 * sg.row_bytes, 0};
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < total) {
            mvw_issue<K>(b[d], ic.row + ic.p * MVW_Q8_PIECE_BYTES, mvw_piece_words(MVW_Q8_0, sg.in, ic.p),
                         lane);
            mvw_advance(ic, P, sg.row_bytes);
        }
    cu_pdl_wait(); /* the weights above never change; the activations come from the previous kernel */
    if (sg.xf32) { /* segment-uniform: quantize f32 x while the weight loads fly */
        mvw_stage_act_f32((const float *)sg.x, act, sg.in, (int)threadIdx.x);
    } else {
        mvw_stage_act(sg.x, act, sg.in, (int)threadIdx.x, MVW_THREADS); /* overlaps the weight loads */
        mvw_stage_wait();
    }
    __syncthreads();
    float acc[2] = {0.0f, 0.0f};
    int cp = 0;
    long long crow = r0;
    for (int q0 = 0; q0 < total; q0 += D) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (q0 + d < total) {
                mvw_store<K>(b[d], buf, mvw_piece_words(MVW_Q8_0, sg.in, cp), lane);
                if (q0 + d + D < total) {
                    mvw_issue<K>(b[d], ic.row + ic.p * MVW_Q8_PIECE_BYTES,
                                 mvw_piece_words(MVW_Q8_0, sg.in, ic.p), lane);
                    mvw_advance(ic, P, sg.row_bytes);
                }
                __syncwarp();
                mvw_q8_decode(buf, act, sg.in, cp, lane, acc);
                __syncwarp();
                if (++cp == P) {
                    const float v = mvw_warp_sum(mvw_q8_total(acc));
                    if (lane == 0) sg.y[crow] = v;
                    acc[0] = acc[1] = 0.0f;
                    cp = 0;
                    crow++;
                }
            }
        }
    }
}

static __device__ __forceinline__ void mvw_cp_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void mvw_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* mvw_q8_rows with the pieces copied by cp.async into a ring of D per warp (DSV4_CUDA_MVW_ASYNC, the
 * default): no registers hold pieces in flight and no store instructions re-lay them, so the warp
 * spends its instructions on the decode. The pieces, their decode and the sums are mvw_q8_rows':
 * the same bits. One commit group per piece (an empty one past the last), so that before piece q
 * is read the D - 1 groups committed after it may still be in flight. */
template <int K, int D, int PB>
static __device__ __forceinline__ void mvw_q8_rows_async(const mvw_seg_dev &sg, uint8_t *smem, int act_smem,
                                                         long long r0, int nr, int warp, int lane) {
    const int P = mvw_pieces(MVW_Q8_0, sg.in);
    const int total = nr * P;
    uint8_t *act = smem;
    uint8_t *ring = smem + act_smem + warp * MVW_Q8_RING_BYTES;
    mvw_cursor ic = {sg.w + r0 * sg.row_bytes, 0};
#pragma unroll
    for (int d = 0; d < D; d++) {
        if (d < total) {
            mvw_issue_async<K>(ring + d * MVW_Q8_SLOT(PB), ic.row + ic.p * MVW_Q8_PIECE_BYTES,
                               mvw_piece_words(MVW_Q8_0, sg.in, ic.p), lane);
            mvw_advance(ic, P, sg.row_bytes);
        }
        mvw_cp_commit();
    }
    cu_pdl_wait(); /* the weights above never change; the activations come from the previous kernel */
    if (sg.xf32) { /* segment-uniform: quantize f32 x while the weight copies fly */
        mvw_stage_act_f32((const float *)sg.x, act, sg.in, (int)threadIdx.x);
    } else {
        mvw_stage_act(sg.x, act, sg.in, (int)threadIdx.x, MVW_THREADS);
        mvw_stage_wait(); /* all groups (the act copies are the newest): the first D pieces too */
    }
    __syncthreads();
    float acc[2] = {0.0f, 0.0f};
    int cp = 0, slot = 0;
    long long crow = r0;
    for (int q = 0; q < total; q++) {
        mvw_cp_wait<D - 1>(); /* this lane's part of piece q */
        __syncwarp();         /* ... and every other lane's */
        uint8_t *buf = ring + slot * MVW_Q8_SLOT(PB);
        mvw_q8_decode(buf, act, sg.in, cp, lane, acc);
        __syncwarp(); /* every lane is done with the slot before it is refilled */
        if (q + D < total) {
            mvw_issue_async<K>(buf, ic.row + ic.p * MVW_Q8_PIECE_BYTES,
                               mvw_piece_words(MVW_Q8_0, sg.in, ic.p), lane);
            mvw_advance(ic, P, sg.row_bytes);
        }
        mvw_cp_commit();
        if (++slot == D) slot = 0;
        if (++cp == P) {
            const float v = mvw_warp_sum(mvw_q8_total(acc));
            if (lane == 0) sg.y[crow] = v;
            acc[0] = acc[1] = 0.0f;
            cp = 0;
            crow++;
        }
    }
    mvw_cp_wait<0>();
}

static __device__ __forceinline__ void mvw_f16_rows(const mvw_seg_dev &sg, long long r0, int nr, int lane) {
    constexpr int K = MVW_F16_K, D = MVW_F16_D;
    const int P = mvw_pieces(MVW_F16, sg.in);
    const int total = nr * P;
    const float *x = (const float *)sg.x;
    int4 b[D][K];
#pragma unroll
    for (int d = 0; d < D; d++)
#pragma unroll
        for (int j = 0; j < K; j++) b[d][j] = make_int4(0, 0, 0, 0);
    mvw_cursor ic = {sg.w + r0 * sg.row_bytes, 0};
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < total) {
            mvw_issue<K>(b[d], ic.row + ic.p * MVW_F16_PIECE_BYTES, mvw_piece_words(MVW_F16, sg.in, ic.p),
                         lane);
            mvw_advance(ic, P, sg.row_bytes);
        }
    cu_pdl_wait(); /* as in mvw_q8_rows: x only after the previous kernel */
    /* warm L1 with x while the weights are in flight (every warp of the CTA reads all of it) */
    if (total > 0)
        for (int o = (int)threadIdx.x * 128; o < sg.in * 4; o += MVW_THREADS * 128)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(sg.x + o));
    float acc[K];
#pragma unroll
    for (int j = 0; j < K; j++) acc[j] = 0.0f;
    int cp = 0;
    long long crow = r0;
    for (int q0 = 0; q0 < total; q0 += D) {
#pragma unroll
        for (int d = 0; d < D; d++) {
            if (q0 + d < total) {
                mvw_f16_consume<K>(b[d], x, cp, mvw_piece_words(MVW_F16, sg.in, cp), lane, acc);
                if (q0 + d + D < total) {
                    mvw_issue<K>(b[d], ic.row + ic.p * MVW_F16_PIECE_BYTES,
                                 mvw_piece_words(MVW_F16, sg.in, ic.p), lane);
                    mvw_advance(ic, P, sg.row_bytes);
                }
                if (++cp == P) {
                    const float v = mvw_warp_sum(mvw_f16_total(acc));
                    if (lane == 0) sg.y[crow] = v;
#pragma unroll
                    for (int j = 0; j < K; j++) acc[j] = 0.0f;
                    cp = 0;
                    crow++;
                }
            }
        }
    }
}

/* ASYNC: the Q8_0 segments by mvw_q8_rows_async (its own instance: the register path's pieces in flight
 * would set its register count). ROUTER: segment 0's last CTA then runs the router (dsv4_cuda_mvw_router;
 * its own instance, so the plain launches keep their code). */
template <bool ASYNC, bool ROUTER>
__global__ void __launch_bounds__(MVW_THREADS, MVW_MIN_CTAS) mvw_kernel(const mvw_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    cu_pdl_trigger(); /* every path below reaches cu_pdl_wait() before it reads x or writes y */
    int local;
    const mvw_seg_dev sg = mvw_find_seg(p, (int)blockIdx.x, &local);
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    long long r0;
    const int nr = mvw_warp_rows(sg, local, warp, &r0);
    /* CTA-uniform branches (every thread reaches the staging barrier); rows of one short piece
     * keep more pieces in flight */
    if (sg.fmt == MVW_Q8_0 && ASYNC && sg.in <= 32 * MVW_Q8_SHORT_PB)
        mvw_q8_rows_async<MVW_Q8_SHORT_K, MVW_Q8_SHORT_D, MVW_Q8_SHORT_PB>(sg, smem, p.act_smem, r0, nr, warp,
                                                                           lane);
    else if (sg.fmt == MVW_Q8_0 && ASYNC)
        mvw_q8_rows_async<MVW_Q8_K, MVW_Q8_D, MVW_Q8_PB>(sg, smem, p.act_smem, r0, nr, warp, lane);
    else if (sg.fmt == MVW_Q8_0 && !ASYNC && sg.in <= 32 * MVW_Q8_SHORT_PB)
        mvw_q8_rows<MVW_Q8_SHORT_K, MVW_Q8_SHORT_D>(sg, smem, p.act_smem, r0, nr, warp, lane);
    else if (sg.fmt == MVW_Q8_0 && !ASYNC)
        mvw_q8_rows<MVW_Q8_K, MVW_Q8_D>(sg, smem, p.act_smem, r0, nr, warp, lane);
    else
        mvw_f16_rows(sg, r0, nr, lane);
    if (ROUTER) {
        const int seg0_end = p.n_segs > 1 ? p.seg[1].cta0 : (int)gridDim.x;
        if ((int)blockIdx.x >= seg0_end) return;
        __shared__ int last;
        __threadfence(); /* this thread's logits (lane 0 of each warp wrote its rows), device-wide */
        __syncthreads(); /* every warp of the CTA is done with its rows and with shared memory */
        if (threadIdx.x == 0) last = atomicAdd(p.rt.ticket, 1u) == (unsigned)(seg0_end - 1);
        __syncthreads();
        if (!last) return;
        __threadfence(); /* the other CTAs' logits, before they are read */
        cu_pdl_wait();   /* (already passed by the row paths) the earlier kernels' readers of sel are done */
        router_block<MVW_THREADS>(p.seg[0].y, p.rt.n_expert, p.rt.k, p.rt.bias, NULL, p.rt.scale,
                                  (float *)smem, p.rt.sel, p.rt.weights);
        if (threadIdx.x == 0) atomicExch(p.rt.ticket, 0u);
    }
}

/* ---- host side ---- */

static const char *mvw_tname(uint32_t t) {
    return t == DSV4_TYPE_Q8_0 ? "Q8_0" : t == DSV4_TYPE_F16 ? "F16" : "unsupported type";
}

extern "C" bool dsv4_cuda_mvw_ok(uint32_t type, const void *w, uint64_t row_bytes, int64_t in) {
    return mvw_ok(type, w, row_bytes, in);
}

/* DSV4_CUDA_MVW_ASYNC=0: Q8_0 pieces through registers (the session-3 path; the same bits). Read once. */
static int mvw_async_enabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("DSV4_CUDA_MVW_ASYNC");
        v = !(s && strcmp(s, "0") == 0);
    }
    return v;
}

/* The plan's rest_mul for router launches (DSV4_CUDA_ROUTER_REST=N, 1..8; default 2): the router's
 * rows end about halfway through the launch, so its last CTA's selection runs beside the shared
 * expert's rows instead of after them (session 12's form, N = 1, ended the launch later). Read once. */
static int mvw_router_rest(void) {
    static int v = 0;
    if (v == 0) {
        const char *s = getenv("DSV4_CUDA_ROUTER_REST");
        const int n = s ? atoi(s) : 2;
        v = n >= 1 && n <= 8 ? n : 2;
    }
    return v;
}

/* dsv4_cuda_mvw, with the router epilogue when rt is set (checked by the caller) */
static dsv4_status mvw_launch(const dsv4_cuda_mvw_seg *segs, int n_segs, const dsv4_cuda_mvw_router_args *rt,
                              struct CUstream_st *stream, dsv4_error *err) {
    if (!segs || n_segs <= 0 || n_segs > DSV4_CUDA_MVW_MAX_SEGS)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "dsv4_cuda_mvw: %d segments (1..%d supported)", n_segs,
                         DSV4_CUDA_MVW_MAX_SEGS);
    long long total = 0;
    for (int s = 0; s < n_segs; s++) {
        const dsv4_cuda_mvw_seg *g = &segs[s];
        if (!mvw_ok(g->type, g->w, g->row_bytes, g->in))
            return dsv4_fail(
                err, DSV4_ERR_UNSUPPORTED,
                "dsv4_cuda_mvw: segment %d (%s, in=%lld, row_bytes=%llu): needs 16-byte aligned w "
                "and rows, in a multiple of %d up to %d",
                s, mvw_tname(g->type), (long long)g->in, (unsigned long long)g->row_bytes,
                g->type == DSV4_TYPE_F16 ? 8 : 256,
                g->type == DSV4_TYPE_F16 ? DSV4_CUDA_MVW_F16_MAX_IN : DSV4_CUDA_MVW_Q8_0_MAX_IN);
        if (!g->x || !g->y || g->rows < 0)
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "dsv4_cuda_mvw: segment %d: x and y must be set, rows >= 0 (%lld)", s,
                             (long long)g->rows);
        const bool xf = g->type == DSV4_TYPE_F16 || g->x_f32;
        if (((uintptr_t)g->x & (xf ? 15 : 3)) != 0)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                             "dsv4_cuda_mvw: segment %d: x (%s) must be %d-byte aligned", s,
                             xf ? "f32" : "Q8_0 blocks", xf ? 16 : 4);
        if (g->rows > INT32_MAX)
            return dsv4_fail(err, DSV4_ERR_RANGE, "dsv4_cuda_mvw: segment %d: %lld rows", s,
                             (long long)g->rows);
        total += g->rows;
    }
    if (total == 0) return DSV4_OK;
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_mvw: device query: %s", cudaGetErrorString(e));
    mvw_params p;
    int grid = 0, smem = 0;
    mvw_plan(segs, n_segs, sms, &p, &grid, &smem, rt ? mvw_router_rest() : 1);
    p.q8_async = mvw_async_enabled();
    if (rt) {
        p.rt = *rt;
        const int need = (int)(3 * rt->n_expert * sizeof(float)); /* router_block's p, s, candidates */
        if (smem < need) smem = need;
    }
    const int ki = (p.q8_async ? 1 : 0) + (rt ? 2 : 0);
    const void *kern = ki == 0   ? (const void *)mvw_kernel<false, false>
                       : ki == 1 ? (const void *)mvw_kernel<true, false>
                       : ki == 2 ? (const void *)mvw_kernel<false, true>
                                 : (const void *)mvw_kernel<true, true>;
    if (smem > 48 * 1024) { /* in > 9728 (the ring plus a long activation); once per device (the limit is
                             * a per-device attribute of the kernel) */
        enum { MVW_DEVS = 64 };
        static int raised[MVW_DEVS][4];
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MVW_DEVS) dev = -1, cudaGetLastError();
        if (dev < 0 || !raised[dev][ki]) {
            e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     MVW_WARPS * MVW_Q8_RING_BYTES +
                                         DSV4_CUDA_MVW_Q8_0_MAX_IN / 32 * MVW_ACT_SLOT);
            if (e != cudaSuccess)
                return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_mvw: shared memory limit: %s",
                                 cudaGetErrorString(e));
            if (dev >= 0) raised[dev][ki] = 1;
        }
    }
    if (ki == 0)
        mvw_kernel<false, false><<<grid, MVW_THREADS, smem, stream>>>(p);
    else if (ki == 1)
        mvw_kernel<true, false><<<grid, MVW_THREADS, smem, stream>>>(p);
    else if (ki == 2)
        mvw_kernel<false, true><<<grid, MVW_THREADS, smem, stream>>>(p);
    else
        mvw_kernel<true, true><<<grid, MVW_THREADS, smem, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsv4_fail(err, DSV4_ERR_IO, "dsv4_cuda_mvw: launch of %d segments (grid %d, %d B shared): %s",
                         n_segs, grid, smem, cudaGetErrorString(e));
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_cuda_mvw(const dsv4_cuda_mvw_seg *segs, int n_segs, struct CUstream_st *stream,
                                     dsv4_error *err) {
    return mvw_launch(segs, n_segs, NULL, stream, err);
}

extern "C" dsv4_status dsv4_cuda_mvw_router(const dsv4_cuda_mvw_seg *segs, int n_segs,
                                            const dsv4_cuda_mvw_router_args *rt, struct CUstream_st *stream,
                                            dsv4_error *err) {
    if (!rt || !segs || n_segs < 1 || !rt->ticket || !rt->sel || !rt->weights || rt->k == 0 ||
        rt->k > rt->n_expert || rt->n_expert > DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS ||
        segs[0].rows != (int64_t)rt->n_expert)
        return dsv4_fail(
            err, DSV4_ERR_UNSUPPORTED,
            "dsv4_cuda_mvw_router: the router needs segment 0 = its %u logits, 1..%d experts, k of them",
            rt ? rt->n_expert : 0u, DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS);
    return mvw_launch(segs, n_segs, rt, stream, err);
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_mvw(const void **out) {
    out[0] = (const void *)mvw_kernel<false, false>;
    out[1] = (const void *)mvw_kernel<true, false>;
    out[2] = (const void *)mvw_kernel<false, true>;
    out[3] = (const void *)mvw_kernel<true, true>;
    return 4;
}
