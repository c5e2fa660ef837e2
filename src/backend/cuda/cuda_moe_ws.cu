/* The routed experts' IQ2_XXS gate/up product of large prefill chunks with producer and consumer
 * warpgroups (cuda_moe_ws.h; units, layout and numerics in cuda_moe_ws.cuh). Built for sm_90a only
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
template <int R> __device__ __forceinline__ void mp_fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* A producer thread's raw words of one stage: the superblock scale and two sub-blocks' (a0, a1) */
struct mp_raw {
    uint32_t d, a[4];
};
__device__ __forceinline__ const uint8_t *mp_row_ptr(const mh_params &p, int e, int rb, int u, int *which) {
    const int wrow = mp_weight_row(rb, u, p.n_out, which);
    return (*which ? p.w1 : p.w0) + (uint64_t)e * p.expert_bytes + (uint64_t)wrow * p.row_bytes;
}
__device__ __forceinline__ mp_raw mp_fetch(const uint8_t *row, int q) {
    mp_raw r;
    const int S = mp_stage_sb(q);
    r.d = mp_iq2_d(row, S);
    mp_iq2_words(row, S, mp_stage_sub(q, 0), &r.a[0], &r.a[1]);
    mp_iq2_words(row, S, mp_stage_sub(q, 1), &r.a[2], &r.a[3]);
    return r;
}

__global__ void __launch_bounds__(MP_THREADS, 1) mp_kernel(const mh_params p) {
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
    mh_fill_tables(gh, sh, p.grid, p.signs, tid, MP_THREADS);
    if (tid == 0)
        for (int s = 0; s < MP_STAGES; s++) ca_bar_init(full + s, MP_PRODUCERS), ca_bar_init(empty + s, 256);
    __syncthreads();

    if (wg < 2) { /* a producer: staged row u of every stage, and its two B-tile chunks */
        const int u = tid, rep = u & (MH_REP - 1);
        const int bpair = mp_b_pair(u), bp = bpair < mt ? bpair : mt - 1;
        const uint8_t *xrow = (const uint8_t *)(p.xh + (uint64_t)(pid[bp] / p.kdiv) * (uint64_t)p.in);
        int which, rb = rb0, qq = 0;
        const uint8_t *row = mp_row_ptr(p, e, rb, u, &which);
        mp_raw next = mp_fetch(row, 0);
#pragma unroll 1
        for (int q = 0; q < nsteps; q++) {
            const int slot = q % MP_STAGES;
            if (q >= MP_STAGES) ca_bar_wait(empty + slot, (uint32_t)(q / MP_STAGES + 1) & 1);
            uint8_t *st = smem + slot * MP_STAGE;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int ch = mp_b_chunk(u, i);
                ca_cp16(st + MP_ATILE + mp_chunk_off(bpair, ch), xrow + 128 * qq + 16 * ch);
            }
            ca_commit();
            const mp_raw cur = next;
            const float wsc = which ? p.wsc[1] : p.wsc[0];
            /* the next stage's words, in flight while this one is decoded */
            if (++qq == nq) qq = 0, rb++, row = q + 1 < nsteps ? mp_row_ptr(p, e, rb, u, &which) : row;
            if (q + 1 < nsteps) next = mp_fetch(row, qq);
            const uint32_t dw2 = mp_dw2(cur.d, wsc);
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    uint32_t h[4];
                    mp_decode_chunk(cur.a[2 * jj], cur.a[2 * jj + 1], c, rep, gh, sh, dw2, h);
                    *(uint4 *)(st + mp_chunk_off(u, 4 * jj + c)) = make_uint4(h[0], h[1], h[2], h[3]);
                }
            ca_cp_wait<0>();
            x16_proxy_fence(); /* this thread's stores and copies, for the tensor cores */
            ca_bar_arrive(full + slot);
        }
        return;
    }

    /* a consumer: gate rows 64 c.., up rows 64 c.. of each row block, all 64 pairs */
    const int c = wg - 2, w = (tid >> 5) & 3, lane = tid & 31;
    float ag[32], au[32];
#pragma unroll
    for (int i = 0; i < 32; i++) ag[i] = 0.0f, au[i] = 0.0f;
    mp_fence_acc(ag); /* defined before any product is in flight (scale-d 0 ignores them) */
    mp_fence_acc(au);
    uint32_t slot = 0, phase = 0;
    for (int r = 0; r < nrb; r++) {
#pragma unroll 1
        for (int qq = 0; qq < nq; qq++) {
            ca_bar_wait(full + slot, phase);
            const uint32_t sa = ca_saddr(smem + slot * MP_STAGE);
            const uint32_t ga = sa + 64 * 128 * c, ua = sa + (MP_RB_ROWS + 64 * c) * 128, b = sa + MP_ATILE;
            x16_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const int acc = qq | kk;
                mp_mma64(ag, x16_desc_sw(ga + 32 * kk, 1024), x16_desc_sw(b + 32 * kk, 1024), acc);
                mp_mma64(au, x16_desc_sw(ua + 32 * kk, 1024), x16_desc_sw(b + 32 * kk, 1024), acc);
            }
            x16_commit();
            x16_wait<0>();
            mp_fence_acc(ag);
            mp_fence_acc(au);
            ca_bar_arrive(empty + slot);
            if (++slot == MP_STAGES) slot = 0, phase ^= 1;
        }
        /* the mid rows, as mh_kernel and the wide kernel write them */
        const int orow = (rb0 + r) * MP_RB_ROWS + 64 * c;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int pair = mp_acc_col(lane, i), row = orow + mp_acc_row(w, lane, i);
            if (pair >= mt || row >= p.n_out) continue;
            const int pr = pid[pair];
            float gv = ag[i] * p.winv[0] * xsc[pair], uv = au[i] * p.winv[1] * xsc[pair];
            if (p.clamp_on) {
                if (gv > p.clamp) gv = p.clamp;
                if (uv > p.clamp) uv = p.clamp;
                if (uv < -p.clamp) uv = -p.clamp;
            }
            p.out[(uint64_t)pr * p.out_stride + row] = cu_silu(gv) * uv * p.weights[pr];
        }
    }
}

/* ---- host ---- */

bool dsv4_cuda_moe_ws_enabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_MOE_WS");
        v = e && !strcmp(e, "1");
    }
    return v == 1;
}

bool dsv4_cuda_moe_ws_device_ok(int cc_major, size_t smem_per_block_optin) {
    if (cc_major != 9 || smem_per_block_optin < (size_t)MP_SMEM) return false;
    cudaFuncAttributes fa;
    const bool ok = cudaFuncGetAttributes(&fa, (const void *)mp_kernel) == cudaSuccess &&
                    cudaFuncSetAttribute((const void *)mp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         MP_SMEM) == cudaSuccess;
    cudaGetLastError();
    return ok;
}

bool dsv4_cuda_moe_ws_ok(const mh_params *p) {
    return p->in > 0 && p->in % 256 == 0 && p->n_out > 0 && p->row_bytes % 2 == 0 && p->expert_bytes % 2 == 0 &&
           ((uintptr_t)p->w0 | (uintptr_t)p->w1) % 2 == 0 && (uintptr_t)p->xh % 16 == 0 && p->in * 2 % 16 == 0;
}

dsv4_status dsv4_cuda_moe_ws_gate_up(const mh_params *p, unsigned groups, unsigned max_tiles, cudaStream_t stream,
                                     dsv4_error *err) {
    if (!dsv4_cuda_moe_ws_ok(p)) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe ws gate/up: shape not taken");
    if (!groups || !max_tiles) return DSV4_OK;
    mp_kernel<<<dim3(groups, max_tiles), MP_THREADS, MP_SMEM, stream>>>(*p);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSV4_OK
                            : dsv4_fail(err, DSV4_ERR_INVALID, "moe ws gate/up: launch: %s", cudaGetErrorString(e));
}
