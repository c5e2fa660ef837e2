/* The routed experts' IQ2_XXS gate/up and Q2_K down products of large prefill chunks on warpgroup tensor
 * cores, every warpgroup decoding its own rows (cuda_moe_ws.h; units, layout and numerics in
 * cuda_moe_ws.cuh). Built for sm_90a only (Makefile): elsewhere the kernel has no image and
 * dsv4_cuda_moe_ws_device_ok says no.
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

/* K = GM_IQ2_XXS: the gate/up product (mid rows out); GM_Q2_K: the down product (y rows out). Every thread
 * decodes one 64-k half of a staged row a stage and every warpgroup multiplies its own 64 rows
 * (cuda_moe_ws.cuh). Iteration q (A slot q % 2, B slot q % 3):
 *   1. copy stage q + 1's B chunks (that slot's stage q - 2 retired by every thread: `empty`);
 *   2. the next superblock's raw words in flight (loaded at even q, stored at odd q);
 *   3. decode stage q's half row into the A tile;
 *   4. this thread's copies of stage q + 1 landed: fence (them and the A stores), arrive on its `full`;
 *   5. the warpgroup's 128 threads meet (its A rows written and fenced);
 *   6. stage q's B tile complete (`full`, arrived in iteration q - 1);
 *   7. the 8 m64n64k16 products, retired; the row block's last stage: the outputs;
 *   8. arrive on stage q's `empty`.
 * Each wait is on something of an earlier iteration, so no cycle; every group is retired in its iteration,
 * and an A slot is rewritten two iterations later, after its warpgroup met past the products on it. */
template <int K> __global__ void __launch_bounds__(MP_THREADS, 1) mp_kernel(const mh_params p) {
    constexpr bool DUAL = K == GM_IQ2_XXS;
    constexpr int RW = DUAL ? MP_RAW_IQ2 : MP_RAW_Q2K;
    extern __shared__ __align__(16) uint8_t mp_smem_raw[];
    uint8_t *smem = mp_smem_raw + ((1024u - (ca_saddr(mp_smem_raw) & 1023u)) & 1023u);
    if ((int)blockIdx.y >= p.n_tiles[0]) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.y];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int tid = threadIdx.x, g = tid >> 7, W = tid >> 5, w = W & 3, lane = tid & 31;
    const int rb0 = (int)blockIdx.x * p.rb_per_cta, nrb = min(p.rb_per_cta, p.n_rb - rb0);
    const int nq = p.in / MP_BK, nsteps = nrb * nq, nsb = p.in / 256;
    uint32_t *gh = (uint32_t *)(smem + mp_off_tables());
    int *pid = (int *)(smem + mp_off_pid());
    float *xsc = (float *)(smem + mp_off_xsc());
    uint64_t *full = (uint64_t *)(smem + mp_off_bars()), *empty = full + MP_BSLOTS;
    uint8_t *bt = smem + mp_off_b(), *ks = smem + mp_off_ksigns();
    if (tid < mt) {
        const int pr = p.list[start + tid];
        pid[tid] = pr;
        xsc[tid] = p.xs[pr / p.kdiv];
    }
    if (DUAL) mh_fill_tables(gh, NULL, p.grid, p.signs, tid, MP_THREADS);
    if (DUAL && tid < 128) ks[tid] = p.signs[tid];
    if (tid == 0)
        for (int s = 0; s < MP_BSLOTS; s++)
            ca_bar_init(full + s, MP_THREADS), ca_bar_init(empty + s, MP_THREADS);
    __syncthreads();

    /* this thread's B chunks: the same pair row every stage, 256 bytes further each */
    const int bpair = mp_b_pair(tid), bch = mp_b_chunk(tid);
    const uint8_t *xsrc =
        (const uint8_t *)(p.xh + (uint64_t)(pid[bpair < mt ? bpair : mt - 1] / p.kdiv) * (uint64_t)p.in) +
        16 * bch;
    const int boff = mp_chunk_off(bpair, bch);
    ca_cp16(bt + boff, xsrc), ca_cp16(bt + MP_BHALF + boff, xsrc + 128);
    ca_commit();
    ca_cp_wait<0>();
    x16_proxy_fence();
    ca_bar_arrive(full);

    /* this thread's staged row: its raw superblock, tensor and scale */
    const int srow = mp_thread_row(tid), hf = mp_thread_half(tid), rep = lane & (MH_REP - 1);
    uint32_t *raw = (uint32_t *)(smem + mp_off_raw(DUAL));
    const uint32_t *R = raw + srow * RW;
    int which;
    mp_staged_out(DUAL, srow, &which);
    const float wsc = which ? p.wsc[1] : p.wsc[0];
    uint32_t
        pre[mp_raw_loads(RW)]; /* the warp's next superblock, in flight while the current one is decoded */
    mp_raw_load<DUAL>(p, e, rb0, 0, W, lane, pre);
    mp_raw_store<DUAL>(raw, W, lane, pre);
    __syncwarp();
    int lrb = rb0, ls = 1; /* the next superblock to load: row block lrb, superblock ls */
    if (ls == nsb) ls = 0, lrb++;

    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    x16_pin(acc); /* defined before any product is in flight (scale-d 0 ignores them) */
    int qq = 0, r = 0;
#pragma unroll 1
    for (int q = 0; q < nsteps; q++) {
        const int bslot = q % MP_BSLOTS;
        uint8_t *at = smem + (q & 1) * MP_ATILE;
        if (q + 1 < nsteps) { /* 1 */
            const int nb = (q + 1) % MP_BSLOTS, nk = (q + 1) % nq;
            if (q + 1 >= MP_BSLOTS) ca_bar_wait(empty + nb, (uint32_t)((q + 1) / MP_BSLOTS + 1) & 1);
            uint8_t *d = bt + nb * MP_BTILE + boff;
            ca_cp16(d, xsrc + 256 * nk), ca_cp16(d + MP_BHALF, xsrc + 256 * nk + 128);
        }
        ca_commit();
        const bool more = lrb < rb0 + nrb; /* 2 */
        if ((qq & 1) == 0 && more) mp_raw_load<DUAL>(p, e, lrb, ls, W, lane, pre);
        const int qd = mp_stage_step(qq, hf); /* 3 */
        uint8_t *ah = at + hf * MP_AHALF;
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
            uint32_t h[4][4];
            mp_decode_half<K>(R, qd, jj, wsc, rep, gh, ks, h);
#pragma unroll
            for (int c = 0; c < 4; c++)
                *(uint4 *)(ah + mp_chunk_off(srow, 4 * jj + c)) =
                    make_uint4(h[c][0], h[c][1], h[c][2], h[c][3]);
        }
        if ((qq & 1) == 1 && more) { /* the warp is done with this superblock's raw rows */
            __syncwarp();
            mp_raw_store<DUAL>(raw, W, lane, pre);
            __syncwarp();
            if (++ls == nsb) ls = 0, lrb++;
        }
        ca_cp_wait<0>(); /* 4 */
        x16_proxy_fence();
        if (q + 1 < nsteps) ca_bar_arrive(full + (q + 1) % MP_BSLOTS);
        ca_named_sync(1 + g, 128);                                /* 5 */
        ca_bar_wait(full + bslot, (uint32_t)(q / MP_BSLOTS) & 1); /* 6 */
        const uint32_t a = ca_saddr(at) + MP_WG_ROWS * 128 * g, b = ca_saddr(bt + bslot * MP_BTILE);
        x16_fence(); /* 7 */
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const uint32_t off = (kk >> 2) * MP_AHALF + 32 * (kk & 3),
                           boff2 = (kk >> 2) * MP_BHALF + 32 * (kk & 3);
            mp_mma64(acc, x16_desc_sw(a + off, 1024), x16_desc_sw(b + boff2, 1024), qq | kk);
        }
        x16_commit();
        x16_wait<0>();
        x16_pin(acc);
        if (qq == nq - 1) { /* the output rows, as mh_kernel writes them */
            const int orow = (rb0 + r) * mp_rb_rows(DUAL);
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int pair = mp_acc_col(lane, i), row = orow + mp_epi_row(DUAL, g, w, lane, i);
                if ((DUAL && (i & 2)) || pair >= mt || row >= p.n_out) continue;
                const int pr = pid[pair];
                if constexpr (DUAL) {
                    const float gv = acc[i] * p.winv[0] * xsc[pair], uv = acc[i + 2] * p.winv[1] * xsc[pair];
                    p.out[(uint64_t)pr * p.out_stride + row] =
                        cu_swiglu_mid(gv, uv, p.clamp_on, p.clamp) * p.weights[pr];
                } else {
                    p.out[(uint64_t)pr * p.out_stride + row] = acc[i] * p.winv[0] * xsc[pair];
                }
            }
            r++;
        }
        ca_bar_arrive(empty + bslot); /* 8 */
        if (++qq == nq) qq = 0;
    }
}

/* ---- host ---- */

typedef void (*qwmp_fn)(const mh_params);

int dsv4_cuda_moe_ws_mode(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_MOE_WS");
        v = !e                     ? 0
            : !strcmp(e, "1")      ? DSV4_MOE_WS_GATE_UP | DSV4_MOE_WS_DOWN
            : !strcmp(e, "2")      ? DSV4_MOE_WS_GATE_UP | DSV4_MOE_WS_DOWN /* was: sign masks computed */
            : !strcmp(e, "down")   ? DSV4_MOE_WS_DOWN
            : !strcmp(e, "gateup") ? DSV4_MOE_WS_GATE_UP
                                   : 0;
    }
    return v;
}

bool dsv4_cuda_moe_ws_device_ok(int cc_major, size_t smem_per_block_optin) {
    if (cc_major != 9 || smem_per_block_optin < (size_t)MP_SMEM) return false;
    cudaFuncAttributes fa;
    bool ok = cudaFuncGetAttributes(&fa, (const void *)mp_kernel<GM_IQ2_XXS>) == cudaSuccess;
    const void *k[2] = {(const void *)mp_kernel<GM_IQ2_XXS>, (const void *)mp_kernel<GM_Q2_K>};
    for (int i = 0; ok && i < 2; i++)
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
    const qwmp_fn fn = down ? mp_kernel<GM_Q2_K> : mp_kernel<GM_IQ2_XXS>;
    fn<<<dim3(groups, max_tiles), MP_THREADS, MP_SMEM, stream>>>(*p);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSV4_OK
                            : dsv4_fail(err, DSV4_ERR_INVALID, "moe ws %s: launch: %s",
                                        down ? "down" : "gate/up", cudaGetErrorString(e));
}
