/* Batch-1 Q2_K matvec (expert rows) streamed per warp: mv_kernel's rows and arithmetic without its
 * CTA-wide pipeline. Included by cuda_matvec.cu only (it shares mv_params and the launch checks).
 *
 * Why: mv_kernel's Q2_K steady state stayed at ~53 % of the copy rate (bench/NOTES.md, sessions 7 and
 * 14) while its unit needs ~1.2 instructions per weight: the time goes to the CTA-wide stage barriers
 * (every warp waits for the slowest, ~1 us per iteration) and to re-reading the activations from
 * shared memory for every row pair. Here each warp owns a contiguous range of the k*out rows, keeps
 * D whole rows in flight in a ring of its own (16-byte cp.async per lane, one commit group per row,
 * __syncwarp only), and each lane keeps the activations of the quarter superblocks it decodes in
 * registers: lane l always takes quarters l, l + 32 (a row of `in` <= 4096 has at most 64), exactly
 * the quarters mv_kernel's lane l takes when a row is one segment (nseg = 1), in the same order, with
 * the same unit (q2k_quarter) and the same warp sum. So every row is the same bits as mv_kernel's
 * whenever its plan has nseg = 1 (cuda_matvec_bench checks this), and within the usual error bound
 * of quant_dot_q2_k otherwise.
 *
 * Shared memory: MVS_WARPS * D * row_bytes per CTA (in = 2048: 21.5 KB at D = 4). */
#ifndef DSV4_CUDA_MV_STREAM_CUH
#define DSV4_CUDA_MV_STREAM_CUH

#define MVS_WARPS 8
#define MVS_THREADS (MVS_WARPS * 32)
/* resident CTAs the registers are sized for: 64 per thread (4 CTAs, 32 warps per SM) with one quarter
 * per lane; two quarters' activations need more (3 CTAs: no spills) */
#define MVS_MIN_BLOCKS(upl) ((upl) == 1 ? 4 : 3)

template <int N> static __device__ __forceinline__ void mvs_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* A row cursor over the launch's k*out virtual rows: slot and row within the slot. */
struct mvs_cursor {
    int slot, r;
};
static __device__ __forceinline__ void mvs_next(mvs_cursor &c, int out) {
    if (++c.r == out) {
        c.r = 0;
        c.slot++;
    }
}

/* Copies row c into dst (nothing for an invalid expert id); the caller commits the group. */
static __device__ __forceinline__ void mvs_issue(const mv_params &p, uint8_t *dst, const mvs_cursor &c,
                                                 int lane) {
    const uint8_t *base;
    const int si = mv_src(p, c.slot, &base);
    const int e = p.ids ? __ldg(p.ids + si) : 0;
    if (e < 0 || e >= p.n_expert) return;
    const uint8_t *src = base + (long long)e * p.expert_bytes + (long long)c.r * p.row_bytes;
    for (int o = lane * 16; o < p.row_bytes; o += 32 * 16) cp_async16(dst + o, src + o);
}

/* UPL: quarters per lane (1: in <= 2048, 2: in <= 4096); D: rows in flight per warp. */
template <int UPL, int D>
__global__ void __launch_bounds__(MVS_THREADS, MVS_MIN_BLOCKS(UPL)) mvs_q2k_kernel(const mv_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    uint8_t *ring = smem + warp * D * p.row_bytes;
    const long long total = (long long)p.k * p.out, wg = (long long)blockIdx.x * MVS_WARPS + warp,
                    nw = (long long)gridDim.x * MVS_WARPS;
    const int begin = (int)(total * wg / nw), end = (int)(total * (wg + 1) / nw);
    cu_pdl_trigger();
    cu_pdl_wait(); /* expert ids and activations come from earlier kernels */
    if (begin >= end) return;
    mvs_cursor fc = {begin / p.out, begin % p.out}, cc = fc;
    int f = begin;
#pragma unroll
    for (int d = 0; d < D; d++) {
        if (f < end) {
            mvs_issue(p, ring + d * p.row_bytes, fc, lane);
            mvs_next(fc, p.out);
            f++;
        }
        cp_async_commit();
    }
    q2k_act a[UPL];
    int act_si = -1, ri = 0;
    const float nanv = __int_as_float(0x7fc00000);
    for (int v = begin; v < end; v++) {
        const uint8_t *base;
        const int si = mv_src(p, cc.slot, &base);
        const int ai = p.x_stride != 0 ? si : 0;
        if (ai != act_si) { /* while this row's copy may still be in flight */
            const uint8_t *x = p.x + (long long)ai * p.x_stride;
#pragma unroll
            for (int i = 0; i < UPL; i++)
                if (lane + 32 * i < p.units) q2k_act_q8k(x, lane + 32 * i, &a[i]);
            act_si = ai;
        }
        const int e = p.ids ? __ldg(p.ids + si) : 0;
        mvs_cp_wait<D - 1>(); /* this lane's part of row v */
        __syncwarp();         /* ... and every other lane's */
        uint8_t *row = ring + ri * p.row_bytes;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < UPL; i++) {
            const int u = lane + 32 * i;
            if (u < p.units) q2k_quarter(row + (u >> 2) * 84, u & 3, a[i], &acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) p.y[v] = e >= 0 && e < p.n_expert ? acc : nanv;
        __syncwarp(); /* every lane is done with the slot before it is refilled */
        if (f < end) {
            mvs_issue(p, row, fc, lane);
            mvs_next(fc, p.out);
            f++;
        }
        cp_async_commit();
        mvs_next(cc, p.out);
        if (++ri == D) ri = 0;
    }
    mvs_cp_wait<0>();
}

#endif
