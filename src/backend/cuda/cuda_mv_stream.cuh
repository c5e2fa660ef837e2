/* Batch-1 Q2_K and IQ2_XXS matvecs (expert rows) streamed per warp: mv_kernel's rows and arithmetic
 * without its CTA-wide pipeline. Included by cuda_matvec.cu only (it shares mv_params and the launch checks).
 *
 * Why: mv_kernel's Q2_K steady state stayed at ~53 % of the copy rate (bench/NOTES.md, sessions 7 and
 * 14). A first version of this kernel (one row per step: its own copy loop, warp sum, id load and
 * cursor) ran no faster (session 16, call 1): at 64 weights per lane and row the per-row overhead was
 * as large as the decode. So each warp owns a contiguous range of groups of PR rows of one slot; a
 * group is one contiguous copy (16-byte cp.async per lane, one commit group), D groups in flight in a
 * ring of the warp's own (__syncwarp only), one transposed warp sum for the PR rows (mvs_warp_sums),
 * and each lane keeps the activations of the quarter superblocks it decodes in registers: lane l
 * always takes quarters l, l + 32 (a row of `in` <= 4096 has at most 64), exactly the quarters
 * mv_kernel's lane l takes when a row is one segment (nseg = 1), in the same order, with the same
 * integer sums and float term (q2k_quarter_g) and the same butterfly pairs. So every row is the same
 * bits as mv_kernel's whenever its plan has nseg = 1 (cuda_matvec_emu and cuda_matvec_bench check
 * this), and within the usual error bound of quant_dot_q2_k otherwise.
 *
 * Shared memory: MVS_WARPS * D * PR * row_bytes per CTA (in = 2048: 43 KB at PR = 4, D = 2). */
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

/* The warp sums of N lane partials v[0..N-1] (N = 1, 2, 4, 8), each the bits of warp_sum(v[i]): the
 * same xor-butterfly pairs level by level (a float sum of two is commutative), but at each of the first
 * log2(N) levels a lane keeps half of its values (the upper half where its level bit is set) and sends
 * the other half, so the N sums cost N - 1 + 5 - log2(N) shuffles instead of 5 N. Value i ends in lane
 * i * 32 / N. */
template <int N> static __device__ __forceinline__ float mvs_warp_sums(const float (&v)[N], int lane) {
    float w[N];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = v[i];
#pragma unroll
    for (int o = 16, n = N; o > 0; o >>= 1) {
        if (n > 1) {
            const bool up = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < n / 2; i++) {
                const float keep = up ? w[i + n / 2] : w[i], send = up ? w[i] : w[i + n / 2];
                w[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
            n /= 2;
        } else {
            w[0] += __shfl_xor_sync(0xffffffffu, w[0], o);
        }
    }
    return w[0];
}

/* Group g of a launch: PR consecutive rows of one slot (out % PR == 0). */
struct mvs_group {
    int slot, r;
};
static __device__ __forceinline__ void mvs_next(mvs_group &c, int out, int pr) {
    c.r += pr;
    if (c.r == out) {
        c.r = 0;
        c.slot++;
    }
}

/* Copies group c (PR * row_bytes contiguous bytes, MAXC 16-byte copies per lane at most) into dst;
 * nothing for an invalid expert id. The caller commits the group. */
template <int PR, int MAXC>
static __device__ __forceinline__ void mvs_issue(const mv_params &p, uint8_t *dst, const mvs_group &c,
                                                 int lane) {
    const uint8_t *base;
    const int si = mv_src(p, c.slot, &base);
    const int e = p.ids ? __ldg(p.ids + si) : 0;
    if (e < 0 || e >= p.n_expert) return;
    const uint8_t *src = base + (long long)e * p.expert_bytes + (long long)c.r * p.row_bytes;
    const int bytes = PR * p.row_bytes;
#pragma unroll
    for (int i = 0; i < MAXC; i++) {
        const int o = (lane + 32 * i) * 16;
        if (o < bytes) cp_async16(dst + o, src + o);
    }
}

/* The warp's next group to copy (fc, index f of the range ending at end): copies it into dst when there
 * is one, then commits a group either way (an empty one past the end), so that the wait for group g
 * always leaves D - 1 newer groups in flight. */
struct mvs_fetch {
    mvs_group fc;
    int f, end;
};
template <int PR, int MAXC>
static __device__ __forceinline__ void mvs_fetch_next(const mv_params &p, uint8_t *dst, mvs_fetch &ft,
                                                      int lane) {
    if (ft.f < ft.end) {
        mvs_issue<PR, MAXC>(p, dst, ft.fc, lane);
        mvs_next(ft.fc, p.out, PR);
        ft.f++;
    }
    cp_async_commit();
}

/* UPL: quarters per lane (1: in <= 2048, 2: in <= 4096); PR: rows per group (one commit group, one
 * sum); D: groups in flight per warp. */
template <int UPL, int PR, int D>
__global__ void __launch_bounds__(MVS_THREADS, MVS_MIN_BLOCKS(UPL)) mvs_q2k_kernel(const mv_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int MAXC = (PR * UPL * 672 + 511) / 512; /* row bytes <= 672 per quarter per lane */
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int gbytes = PR * p.row_bytes;
    uint8_t *ring = smem + warp * D * gbytes;
    const long long total = (long long)p.k * p.out / PR, wg = (long long)blockIdx.x * MVS_WARPS + warp,
                    nw = (long long)gridDim.x * MVS_WARPS;
    const int begin = (int)(total * wg / nw), end = (int)(total * (wg + 1) / nw); /* groups */
    cu_pdl_trigger();
    cu_pdl_wait(); /* expert ids and activations come from earlier kernels */
    if (begin >= end) return;
    const int gpo = p.out / PR; /* groups per slot */
    mvs_group cc = {begin / gpo, (begin % gpo) * PR};
    mvs_fetch ft = {cc, begin, end};
#pragma unroll
    for (int d = 0; d < D; d++) mvs_fetch_next<PR, MAXC>(p, ring + d * gbytes, ft, lane);
    q2k_act a[UPL];
    int act_si = -1, ri = 0;
    const float nanv = __int_as_float(0x7fc00000);
    for (int g = begin; g < end; g++) {
        const uint8_t *base;
        const int si = mv_src(p, cc.slot, &base);
        const int ai = p.x_stride != 0 ? si : 0;
        if (ai != act_si) { /* while this group's copy may still be in flight */
            const uint8_t *x = p.x + (long long)ai * p.x_stride;
#pragma unroll
            for (int i = 0; i < UPL; i++)
                if (lane + 32 * i < p.units) q2k_act_q8k(x, lane + 32 * i, &a[i]);
            act_si = ai;
        }
        const int e = p.ids ? __ldg(p.ids + si) : 0;
        mvs_cp_wait<D - 1>(); /* this lane's part of group g */
        __syncwarp();         /* ... and every other lane's */
        uint8_t *rows = ring + ri * gbytes;
        float acc[PR];
#pragma unroll
        for (int r = 0; r < PR; r++) {
            acc[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < UPL; i++) {
                const int u = lane + 32 * i;
                if (u < p.units) q2k_quarter_g(rows + r * p.row_bytes + (u >> 2) * 84, u & 3, a[i], &acc[r]);
            }
        }
        const float y = mvs_warp_sums<PR>(acc, lane);
        if ((lane & (32 / PR - 1)) == 0)
            p.y[(long long)cc.slot * p.out + cc.r + lane / (32 / PR)] = e >= 0 && e < p.n_expert ? y : nanv;
        __syncwarp(); /* every lane is done with the slot before it is refilled */
        mvs_fetch_next<PR, MAXC>(p, rows, ft, lane);
        mvs_next(cc, p.out, PR);
        if (++ri == D) ri = 0;
    }
    mvs_cp_wait<0>();
}

/* ---- IQ2_XXS (gate and up rows), the same streaming with one 64 KB selector table per CTA ----
 * 16 warps and one table copy per CTA, one CTA per SM (the lane's activations stay in registers), table
 * addresses by one PRMT (grid) or a shift and a LOP3 (sign) with the table at a 64 KB-aligned shared
 * address, the PRMT pool's low word in a register, each lane a span of SPL sub-blocks of one superblock
 * (iq2s_span: SPL = 2 for in = 2048, 4 for in = 4096). A row's value is the butterfly sum of its lanes'
 * (d d_x / 8) bsum: within the usual float error of quant_dot_iq2_xxs, whose integer sums the lanes
 * reproduce exactly (cuda_matvec_emu). (Until session 17 the lanes took mv_kernel's sub-blocks and the
 * rows were its bits; a 32-warp form with the activations in shared memory ran slower, session 17 call
 * 1: 131.2 against 117.8 us for 128 experts.)
 *
 * Shared memory: the dynamic block starts after the block's reserved shared memory (1 KB on sm_90; the
 * host reads it from cudaDevAttrReservedSharedMemoryPerBlock), the table at the next 64 KB boundary; the
 * warps' rings fill the bytes before it, then those after it (mvi_layout, the same arithmetic on both sides).
 * The kernel checks that its layout fits what it was given. */
/* A warp's position in its range of groups for mvs_iq2_kernel: the slot, the groups left in it, its
 * activation index and whether its expert id is valid. Session 17's loop recomputed the slot's tensor,
 * expert id and 64-bit addresses for every group, twice (the copy and the sum: ~75 of the ~970
 * instructions of a 4-row group, call 4 SASS); a warp's range crosses a slot about once, so these are
 * computed when it does and the copy and output pointers step by one group otherwise. */
struct mvi_cursor {
    int slot, left, si;
    bool ok;
};
template <int PR>
static __device__ __forceinline__ int mvi_seek(const mv_params &p, int slot, int r, mvi_cursor *c,
                                               const uint8_t **base) {
    c->si = mv_src(p, slot, base);
    const int e = p.ids ? __ldg(p.ids + c->si) : 0;
    c->ok = e >= 0 && e < p.n_expert;
    c->slot = slot;
    c->left = (p.out - r) / PR;
    return c->ok ? e : 0;
}
/* The copy side: the lane's source (its 16 bytes of the next group) and the groups still to copy. */
struct mvi_fetch {
    mvi_cursor c;
    const uint8_t *src;
    int n;
};
template <int PR, int RB>
static __device__ __forceinline__ void mvi_fetch_seek(const mv_params &p, int slot, int r, mvi_fetch *ft,
                                                      int lane) {
    const uint8_t *base;
    const int e = mvi_seek<PR>(p, slot, r, &ft->c, &base);
    ft->src = base + (long long)e * p.expert_bytes + (long long)r * RB + lane * 16;
}
/* Copies the next group (if any) to the ring slot at shared address dst (the lane's 16 bytes: dst already
 * has + 16 lane), then commits a group either way (an empty one past the end), so that the wait for group
 * g always leaves D - 1 newer groups in flight. Nothing is copied for an invalid expert id. */
template <int PR, int RB>
static __device__ __forceinline__ void mvi_fetch_next(const mv_params &p, uint32_t dst, mvi_fetch &ft,
                                                      int lane) {
    constexpr int GB = PR * RB, MAXC = (GB + 511) / 512;
    if (ft.n > 0) {
        if (ft.c.ok) {
#pragma unroll
            for (int i = 0; i < MAXC; i++)
                if (i < MAXC - 1 || lane * 16 + 512 * i < GB)
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + 512u * i),
                                 "l"(ft.src + 512 * i)
                                 : "memory");
        }
        ft.src += GB;
        if (--ft.n > 0 && --ft.c.left == 0) mvi_fetch_seek<PR, RB>(p, ft.c.slot + 1, 0, &ft, lane);
    }
    cp_async_commit();
}

/* The MoE mid folded into the gate/up launch (p.midq set; p.k1 experts, gate slots 0..k1-1, up slots
 * k1..2 k1 - 1). A 256-row block b of expert j needs 256 / PR gate groups and as many up groups; each warp,
 * after its last row, adds the groups it finished in each block it touched to the block's ticket (its
 * lanes' stores fenced first), and the warp that completes a ticket forms the block's 256 mid values from
 * the rows through L2 and quantizes them: moe_mid_q8k_kernel's expression (cu_swiglu_mid times the route
 * weight, lane l taking values 8 l .. 8 l + 7) and act_q8_k_block, so the same bytes as the separate mid
 * kernel. It resets the ticket for the next launch (every group of the block has been counted by then). */
template <int PR>
static __device__ __forceinline__ void mvi_mid_tail(const mv_params &p, int begin, int end, int lane) {
    __threadfence(); /* this lane's rows, before any ticket counts them */
    __syncwarp();
    const int gpo = p.out / PR, gpb = 256 / PR, bpo = p.out / 256;
    for (int g = begin; g < end;) {
        const int slot = g / gpo, blk = (g % gpo) / gpb;
        const int stop = min(end, slot * gpo + (blk + 1) * gpb), n = stop - g;
        const int j = slot < p.k1 ? slot : slot - p.k1, b = j * bpo + blk;
        int done = 0;
        if (lane == 0) done = atomicAdd(p.tickets + b, n) + n == 2 * gpb;
        done = __shfl_sync(0xffffffffu, done, 0);
        if (done) {
            __threadfence(); /* the other warps' rows, after their tickets */
            const long long i0 = (long long)j * p.out + blk * 256 + lane * 8;
            const float *gr = p.y + i0, *ur = p.y + (long long)p.k1 * p.out + i0;
            const float wr = __ldcg(p.mid_w + j);
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = cu_swiglu_mid(__ldcg(gr + i), __ldcg(ur + i), p.mid_clamp_on, p.mid_clamp) * wr;
            act_q8_k_block(v, lane, p.midq + (long long)b * 292);
            if (lane == 0) p.tickets[b] = 0;
        }
        g = stop;
    }
}

template <int SPL, int PR, int D>
__global__ void __launch_bounds__(MVI_THREADS, 1) mvs_iq2_kernel(const mv_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int RB = SPL * 264; /* row bytes (in = 1024 SPL) */
    constexpr int GB = PR * RB;
    constexpr uint32_t RING = (uint32_t)(D * GB);
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    uint32_t toff, nb, dsz;
    const uint32_t need = mvi_layout(sbase, RING, &toff, &nb);
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsz));
    if (need > dsz) __trap(); /* the host sized the block for another base: never silently overrun it */
    uint8_t *lut = smem + toff;
    uint8_t *ring = (uint32_t)warp < nb ? smem + warp * RING : lut + MV_IQ2S_TABLE_BYTES + (warp - nb) * RING;
    const uint32_t sring = (uint32_t)__cvta_generic_to_shared(ring) + 16u * (uint32_t)lane;
    cu_pdl_trigger();
    mv_build_iq2s_table_nt<MVI_THREADS>(p.sel, lut, tid); /* a constant table: before the wait */
    __syncthreads();
    const long long total = (long long)p.k * p.out / PR, wg = (long long)blockIdx.x * MVI_WARPS + warp,
                    nw = (long long)gridDim.x * MVI_WARPS;
    const int begin = (int)(total * wg / nw), end = (int)(total * (wg + 1) / nw); /* groups */
    cu_pdl_wait(); /* expert ids and activations come from earlier kernels */
    if (begin >= end) return;
    const int gpo = p.out / PR, n = end - begin;
    mvi_fetch ft;
    ft.n = n;
    mvi_fetch_seek<PR, RB>(p, begin / gpo, (begin % gpo) * PR, &ft, lane);
#pragma unroll
    for (int d = 0; d < D; d++) mvi_fetch_next<PR, RB>(p, sring + d * GB, ft, lane);
    iq2s_lane lc;
    iq2s_lane_init<SPL>(lane, sbase + toff, &lc);
    const uint32_t pos = iq2s_word(lut, sbase + toff + MV_IQ2S_POS_OFF); /* MD_IQ2_POS, kept in a register */
    mvi_cursor cc;
    const uint8_t *unused;
    mvi_seek<PR>(p, begin / gpo, (begin % gpo) * PR, &cc, &unused);
    /* the lane's output (one lane per row of a group writes it) */
    float *yl = p.y + (long long)cc.slot * p.out + (begin % gpo) * PR + lane / (32 / PR);
    iq2s_act<SPL> a;
    int act_si = p.x_stride != 0 ? cc.si : 0;
    iq2s_act_q8k<SPL>(p.x + (long long)act_si * p.x_stride, lane, &a);
    const float nanv = __int_as_float(0x7fc00000);
    for (int g = 0; g < n; g += D) {
#pragma unroll
        for (int d = 0; d < D; d++) { /* ring slot d: compile-time offsets */
            if (g + d >= n) break;
            mvs_cp_wait<D - 1>(); /* this lane's part of the group */
            __syncwarp();         /* ... and every other lane's */
            const uint8_t *rows = ring + d * GB;
            float acc[PR];
#pragma unroll
            for (int r = 0; r < PR; r++) acc[r] = iq2s_span<SPL>(rows + r * RB, lc, a, lut, pos);
            const float y = mvs_warp_sums<PR>(acc, lane);
            if ((lane & (32 / PR - 1)) == 0) *yl = cc.ok ? y : nanv;
            yl += PR;
            __syncwarp(); /* every lane is done with the slot before it is refilled */
            mvi_fetch_next<PR, RB>(p, sring + d * GB, ft, lane);
            if (g + d + 1 < n && --cc.left == 0) { /* the next group starts a slot */
                mvi_seek<PR>(p, cc.slot + 1, 0, &cc, &unused);
                yl = p.y + (long long)cc.slot * p.out + lane / (32 / PR);
                const int ai = p.x_stride != 0 ? cc.si : 0;
                if (ai != act_si) {
                    iq2s_act_q8k<SPL>(p.x + (long long)ai * p.x_stride, lane, &a);
                    act_si = ai;
                }
            }
        }
    }
    mvs_cp_wait<0>();
    if (p.midq) mvi_mid_tail<PR>(p, begin, end, lane);
}

#endif
