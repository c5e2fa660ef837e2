/* The routed experts' IQ2_XXS gate/up and Q2_K down products of large prefill chunks with producer and
 * consumer warpgroups (cuda_moe_ws.h; units, layout and numerics in cuda_moe_ws.cuh). Built for sm_90a only
 * (Makefile): elsewhere the kernel has no image and dsv4_cuda_moe_ws_device_ok says no.
 *
 * Why: mh_kernel (cuda_ops_moe_half.cu) spends 2.95 ms a flash layer at n = 2048 with its warps
 * decoding A fragments between CTA barriers (tensor pipe 34 %); the Q8_0 warpgroup GEMM showed in
 * session 21 that handing stages from producer warps to consumer warpgroups through mbarriers removes
 * such lockstep. Here the decode (the producers') and the products (the consumers') overlap across
 * stages: the floors are ~0.4 ms of decode issue and ~0.6 ms of shared-memory traffic a layer. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_async.cuh"
#include "backend/cuda/cuda_backend.h" /* cu_silu */
#include "backend/cuda/cuda_moe_ws.cuh"
#include "backend/cuda/cuda_moe_ws.h"
#include "backend/cuda/cuda_wgmma_x16.cuh"

/* d (32 floats) = A B (+ d when acc != 0): m64n64k16, A (64 x 16) and B (64 x 16) K-major in shared
 * memory through their descriptors */
__device__ __forceinline__ void mp_mma64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
#if X16_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
#else
    (void)d, (void)da, (void)db, (void)acc;
#endif
}

/* The stage's 8 chunks of the thread's staged row into the A tile at st (KS: the IQ2_XXS signs from the
 * 128-byte table ks) */
template <int K, bool KS>
__device__ __forceinline__ void mp_decode_row(const mp_raw<K> &r, int q, float wsc, int u, const uint32_t *gh,
                                              const uint32_t *sh, const uint8_t *ks, uint8_t *st) {
    uint32_t dw2, nm2 = 0;
    if constexpr (K == GM_IQ2_XXS)
        dw2 = mp_dw2(r.w[0], wsc);
    else
        mp_q2k_scales(r.w[9], wsc, &dw2, &nm2);
#pragma unroll
    for (int jj = 0; jj < 2; jj++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            uint32_t h[4];
            if constexpr (K == GM_IQ2_XXS && KS)
                mp_decode_chunk_ks(r.w[1 + 2 * jj], r.w[2 + 2 * jj], c, u & (MH_REP - 1), gh, ks, dw2, h);
            else if constexpr (K == GM_IQ2_XXS)
                mp_decode_chunk(r.w[1 + 2 * jj], r.w[2 + 2 * jj], c, u & (MH_REP - 1), gh, sh, dw2, h);
            else
                mp_q2k_chunk(r.w, q, jj, c, dw2, nm2, h);
            *(uint4 *)(st + mp_chunk_off(u, 4 * jj + c)) = make_uint4(h[0], h[1], h[2], h[3]);
        }
}

/* K = GM_IQ2_XXS: the gate/up product (mid rows out); GM_Q2_K: the down product (y rows out). KS: the
 * IQ2_XXS sign masks computed from the sign bytes (mp_decode_chunk_ks) */
template <int K, bool KS = false>
__global__ void __launch_bounds__(MP_THREADS, 1) mp_kernel(const mh_params p) {
    constexpr bool DUAL = K == GM_IQ2_XXS;
    extern __shared__ __align__(16) uint8_t mp_smem_raw[];
    uint8_t *smem = mp_smem_raw + ((1024u - (ca_saddr(mp_smem_raw) & 1023u)) & 1023u);
    if ((int)blockIdx.y >= p.n_tiles[0]) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int rb0 = (int)blockIdx.x * p.rb_per_cta, nrb = min(p.rb_per_cta, p.n_rb - rb0);
    const int nq = p.in / MP_BK, nsteps = nrb * nq;
    uint32_t *gh = (uint32_t *)(smem + mp_off_tables()), *sh = gh + MH_GRID_BYTES / 4;
    int *pid = (int *)(smem + mp_off_pid());
    float *xsc = (float *)(smem + mp_off_xsc());
    uint64_t *full = (uint64_t *)(smem + mp_off_bars()), *empty = full + MP_STAGES;
    if (tid < mt) {
        const int pr = p.list[start + tid];
        pid[tid] = pr;
        xsc[tid] = p.xs[pr / p.kdiv];
    }
    uint8_t *ks = smem + mp_off_ksigns();
    if (DUAL) mh_fill_tables(gh, sh, p.grid, p.signs, tid, MP_THREADS);
    if (KS && tid < 128) ks[tid] = p.signs[tid];
    if (tid == 0)
        for (int s = 0; s < MP_STAGES; s++) ca_bar_init(full + s, MP_PRODUCERS), ca_bar_init(empty + s, 256);
    __syncthreads();

    if (wg < 2) { /* a producer: staged row u of every stage, and its two B-tile chunks */
        constexpr int RW = DUAL ? MP_RAW_IQ2 : MP_RAW_Q2K;
        const int u = tid, lane = tid & 31, wbase = tid & ~31, nsb = p.in / 256;
        const int bpair = mp_b_pair(u), bp = bpair < mt ? bpair : mt - 1;
        const uint8_t *xrow = (const uint8_t *)(p.xh + (uint64_t)(pid[bp] / p.kdiv) * (uint64_t)p.in);
        uint32_t *raw = (uint32_t *)(smem + mp_off_raw(DUAL));
        const uint32_t *R = raw + u * RW;
        int which;
        mp_weight_row(DUAL, rb0, u, p.n_out,
                      &which); /* the tensor of staged row u: the same in every block */
        const float wsc = which ? p.wsc[1] : p.wsc[0];
        uint32_t pre[RW]; /* the warp's next superblock, in flight while the current one is decoded */
        mp_raw_load<DUAL>(p, e, rb0, 0, wbase, lane, pre);
        mp_raw_store<DUAL>(raw, wbase, lane, pre);
        __syncwarp();
        int lrb = rb0, ls = 1, qq = 0; /* the next superblock to load: row block lrb, superblock ls */
        if (ls == nsb) ls = 0, lrb++;
#pragma unroll 1
        for (int q = 0; q < nsteps; q++) {
            const int slot = q % MP_STAGES;
            const bool more = lrb < rb0 + nrb;
            if (q >= MP_STAGES) ca_bar_wait(empty + slot, (uint32_t)(q / MP_STAGES + 1) & 1);
            uint8_t *st = smem + slot * MP_STAGE;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int ch = mp_b_chunk(u, i);
                ca_cp16(st + MP_ATILE + mp_chunk_off(bpair, ch), xrow + 128 * qq + 16 * ch);
            }
            ca_commit();
            if ((qq & 3) == 0 && more) mp_raw_load<DUAL>(p, e, lrb, ls, wbase, lane, pre);
            mp_decode_row<K, KS>(mp_stage_words<K>(R, qq), qq, wsc, u, gh, sh, ks, st);
            if ((qq & 3) == 3 && more) { /* the warp is done with this superblock's raw rows */
                __syncwarp();
                mp_raw_store<DUAL>(raw, wbase, lane, pre);
                __syncwarp();
                if (++ls == nsb) ls = 0, lrb++;
            }
            ca_cp_wait<0>();
            x16_proxy_fence(); /* this thread's stores and copies, for the tensor cores */
            ca_bar_arrive(full + slot);
            if (++qq == nq) qq = 0;
        }
        return;
    }

    /* a consumer: its two m64 blocks of staged rows (mp_block_row) against all 64 pairs */
    const int c = wg - 2, w = (tid >> 5) & 3, lane = tid & 31;
    float a0[32], a1[32];
#pragma unroll
    for (int i = 0; i < 32; i++) a0[i] = 0.0f, a1[i] = 0.0f;
    x16_pin(a0); /* defined before any product is in flight (scale-d 0 ignores them) */
    x16_pin(a1);
    uint32_t slot = 0, phase = 0;
    for (int r = 0; r < nrb; r++) {
#pragma unroll 1
        for (int qq = 0; qq < nq; qq++) {
            ca_bar_wait(full + slot, phase);
            const uint32_t sa = ca_saddr(smem + slot * MP_STAGE);
            const uint32_t m0 = sa + mp_block_row(DUAL, c, 0) * 128, m1 = sa + mp_block_row(DUAL, c, 1) * 128,
                           b = sa + MP_ATILE;
            x16_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const int acc = qq | kk;
                mp_mma64(a0, x16_desc_sw(m0 + 32 * kk, 1024), x16_desc_sw(b + 32 * kk, 1024), acc);
                mp_mma64(a1, x16_desc_sw(m1 + 32 * kk, 1024), x16_desc_sw(b + 32 * kk, 1024), acc);
            }
            x16_commit();
            x16_wait<0>();
            x16_pin(a0);
            x16_pin(a1);
            ca_bar_arrive(empty + slot);
            if (++slot == MP_STAGES) slot = 0, phase ^= 1;
        }
        /* the output rows, as mh_kernel writes them */
        const int orow = (rb0 + r) * mp_rb_rows(DUAL);
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int pair = mp_acc_col(lane, i);
            if (pair >= mt) continue;
            const int pr = pid[pair];
            if constexpr (DUAL) {
                const int row = orow + mp_block_out(true, c, 0) + mp_acc_row(w, lane, i);
                if (row >= p.n_out) continue;
                float gv = a0[i] * p.winv[0] * xsc[pair], uv = a1[i] * p.winv[1] * xsc[pair];
                p.out[(uint64_t)pr * p.out_stride + row] =
                    cu_swiglu_mid(gv, uv, p.clamp_on, p.clamp) * p.weights[pr];
            } else {
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const int row = orow + mp_block_out(false, c, m) + mp_acc_row(w, lane, i);
                    if (row < p.n_out)
                        p.out[(uint64_t)pr * p.out_stride + row] =
                            (m ? a1[i] : a0[i]) * p.winv[0] * xsc[pair];
                }
            }
        }
    }
}

/* ---- host ---- */

typedef void (*qwmp_fn)(const mh_params);

int dsv4_cuda_moe_ws_mode(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_MOE_WS");
        v = e && !strcmp(e, "1") ? 1 : e && !strcmp(e, "2") ? 2 : 0;
    }
    return v;
}

bool dsv4_cuda_moe_ws_device_ok(int cc_major, size_t smem_per_block_optin) {
    if (cc_major != 9 || smem_per_block_optin < (size_t)MP_SMEM) return false;
    cudaFuncAttributes fa;
    bool ok = cudaFuncGetAttributes(&fa, (const void *)mp_kernel<GM_IQ2_XXS>) == cudaSuccess;
    const void *k[3] = {(const void *)mp_kernel<GM_IQ2_XXS>, (const void *)mp_kernel<GM_IQ2_XXS, true>,
                        (const void *)mp_kernel<GM_Q2_K>};
    for (int i = 0; ok && i < 3; i++)
        ok = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, MP_SMEM) == cudaSuccess;
    cudaGetLastError();
    return ok;
}

bool dsv4_cuda_moe_ws_ok(const mh_params *p, bool down) {
    /* the raw rows are read in 4-byte words (mp_raw_src); gate/up: an even superblock's window reads the 2
     * bytes after it, which stay inside the row only when the row ends on an odd one (in % 512 == 0) */
    const bool rows_ok = p->row_bytes % 4 == 0 && p->expert_bytes % 4 == 0 &&
                         ((uintptr_t)p->w0 | (uintptr_t)(down ? p->w0 : p->w1)) % 4 == 0;
    return p->in > 0 && p->in % (down ? 256 : 512) == 0 && p->n_out > 0 && rows_ok &&
           (uintptr_t)p->xh % 16 == 0;
}

dsv4_status dsv4_cuda_moe_ws_product(const mh_params *p, bool down, unsigned groups, unsigned max_tiles,
                                     cudaStream_t stream, dsv4_error *err) {
    if (!dsv4_cuda_moe_ws_ok(p, down))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe ws %s: shape not taken", down ? "down" : "gate/up");
    if (!groups || !max_tiles) return DSV4_OK;
    const qwmp_fn fn = down                           ? mp_kernel<GM_Q2_K>
                       : dsv4_cuda_moe_ws_mode() == 2 ? mp_kernel<GM_IQ2_XXS, true>
                                                      : mp_kernel<GM_IQ2_XXS>;
    fn<<<dim3(groups, max_tiles), MP_THREADS, MP_SMEM, stream>>>(*p);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSV4_OK
                            : dsv4_fail(err, DSV4_ERR_INVALID, "moe ws %s: launch: %s",
                                        down ? "down" : "gate/up", cudaGetErrorString(e));
}
