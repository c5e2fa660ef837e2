/* Grouped routed-expert products on the int8 tensor cores (units and the exactness argument in
 * cuda_moe_mma.cuh). A CTA: one expert tile of up to BN pairs x 128 rows; its activations are
 * staged once, then each warp streams its 16 rows superblock by superblock with the next
 * superblock's bytes already in flight in registers, decodes into a warp-private int8 tile and
 * runs mma.m16n8k32 per 8 pairs. No CTA barrier in the main loop. The grid runs the tiles of a row
 * block next to each other, so tiles of one expert read its rows from L2 at about the same time. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_mma.cuh"
#include "backend/cuda/cuda_moe_mma.h"
#include "backend/cuda/cuda_moe_wide.h"

/* d = a b + c */
__device__ __forceinline__ void mx_mma(int32_t d[4], const uint32_t a[4], const uint32_t b[2],
                                       const int32_t c[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
          "r"(c[3]));
}

static int mx_block_bytes(int kind) { return kind == GM_IQ2_XXS ? 66 : kind == GM_Q2_K ? 84 : 144; }

template <int K, int BN, bool DUAL>
__global__ void __launch_bounds__(MX_THREADS) mx_kernel(const mx_params p) {
    constexpr int NT = BN / 8;
    constexpr int BB = K == GM_IQ2_XXS ? 66 : K == GM_Q2_K ? 84 : 144;
    extern __shared__ __align__(16) uint8_t mx_smem[];
    if ((int)blockIdx.x >= *p.n_tiles) return; /* the grid is sized for the worst case */
    const int4 tl = p.tiles[blockIdx.x];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const mx_layout L = mx_layout_of(BN, p.in);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int *pid = (int *)(mx_smem + L.pid);
    uint64_t *grid = (uint64_t *)(mx_smem + L.tables), *smask = grid + 256;
    uint8_t *ws = mx_smem + L.ws + warp * MX_WS, *dec = mx_smem + L.dec + warp * MX_DEC;
    const float *xd = (const float *)(mx_smem + L.xd);
    const uint8_t *xq = mx_smem + L.xq;
    if (tid < mt) pid[tid] = p.list[start + tid];
    if (K == GM_IQ2_XXS) {
        for (int i = tid; i < 256; i += MX_THREADS) grid[i] = p.grid[i];
        for (int i = tid; i < 128; i += MX_THREADS) smask[i] = mg_sign_mask(p.signs, i);
    }
    __syncthreads();
    mx_load_x(p.act, p.act_stride, p.act_div, pid, mt, BN, p.in, L.xrow, mx_smem + L.xq,
              (float *)(mx_smem + L.xd), tid, MX_THREADS);
    __syncthreads();

    constexpr int ROWS = DUAL ? MX_BM / 2 : MX_BM;
    const int rw = DUAL ? (warp & 3) : warp, which = DUAL ? warp >> 2 : 0;
    const int row0 = (int)blockIdx.y * ROWS + 16 * rw; /* the warp's first row */
    const int lr = row0 + (lane >> 1);
    const uint8_t *wrow = (which ? p.w1 : p.w0) + (uint64_t)e * p.expert_bytes +
                          (uint64_t)(lr < p.n_out ? lr : p.n_out - 1) * p.row_bytes;
    const int nblk = p.in / 256, h = lane & 1, nt_act = (mt + 7) / 8;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = 0.0f;
    uint32_t raw[MX_RAW];
    mx_load_raw<K>(wrow, h, raw);
    for (int s = 0; s < nblk; s++) {
        uint32_t nraw[MX_RAW]; /* the next superblock (the last one again at the end) */
        mx_load_raw<K>(wrow + (uint64_t)(s + 1 < nblk ? s + 1 : s) * BB, h, nraw);
        mx_decode<K>(raw, lane, dec, ws, grid, smask);
        __syncwarp();
        int32_t isum[NT][4], mn[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) isum[nt][i] = 0, mn[nt][i] = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            uint32_t a[4], am[4];
            mx_frag_a(dec, j, lane, a);
            if (K != GM_IQ2_XXS) mx_frag_m(ws, j, lane, am);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                if (nt >= nt_act) break;
                uint32_t b[2];
                mx_frag_b(xq, L.xrow, 8 * nt, s, j, lane, b);
                int32_t d[4];
                if (K == GM_Q2_K) {
                    mx_mma(d, a, b, isum[nt]);
                } else {
                    const int32_t zero[4] = {0, 0, 0, 0};
                    mx_mma(d, a, b, zero);
                }
                mx_step<K>(isum[nt], d, ws, j, lane);
                if (K != GM_IQ2_XXS) mx_mma(mn[nt], am, b, mn[nt]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            if (nt < nt_act) mx_update<K>(acc[nt], isum[nt], mn[nt], ws, xd, nblk, 8 * nt, s, lane);
        __syncwarp(); /* dec and ws are rewritten by the next superblock's decode */
#pragma unroll
        for (int i = 0; i < MX_RAW; i++) raw[i] = nraw[i];
    }
    if (K == GM_IQ2_XXS) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[nt][i] = qm_mul(0.125f, acc[nt][i]);
    }
    const int g = lane >> 2, t = lane & 3;
    if constexpr (DUAL) {
        /* gate warps park their values in their own (now unused) decode tile for the up warps */
        float *gsh = (float *)(mx_smem + L.dec + (warp & 3) * MX_DEC);
        if (which == 0) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    gsh[(g + 8 * (i >> 1)) * BN + 8 * nt + 2 * t + (i & 1)] = acc[nt][i];
        }
        __syncthreads();
        if (which == 1) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int rl = g + 8 * (i >> 1), tok = 8 * nt + 2 * t + (i & 1);
                    if (tok < mt && row0 + rl < p.n_out) {
                        const int pr = pid[tok];
                        float gv = gsh[rl * BN + tok], uv = acc[nt][i];
                        p.out[(uint64_t)pr * p.out_stride + row0 + rl] =
                            cu_swiglu_mid(gv, uv, p.clamp_on, p.clamp) * p.weights[pr];
                    }
                }
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int rl = g + 8 * (i >> 1), tok = 8 * nt + 2 * t + (i & 1);
                if (tok < mt && row0 + rl < p.n_out)
                    p.out[(uint64_t)pid[tok] * p.out_stride + row0 + rl] = acc[nt][i];
            }
    }
}

typedef void (*mx_fn)(const mx_params);
template <int BN> static mx_fn mx_kernel_bn(int kind, bool dual) {
    switch (kind) {
    case GM_IQ2_XXS: return dual ? mx_kernel<GM_IQ2_XXS, BN, true> : mx_kernel<GM_IQ2_XXS, BN, false>;
    case GM_Q2_K: return dual ? mx_kernel<GM_Q2_K, BN, true> : mx_kernel<GM_Q2_K, BN, false>;
    case GM_Q4_K: return dual ? mx_kernel<GM_Q4_K, BN, true> : mx_kernel<GM_Q4_K, BN, false>;
    default: return NULL;
    }
}
static mx_fn mx_kernel_of(int kind, bool dual, int bn) {
    return bn == 16 ? mx_kernel_bn<16>(kind, dual) : bn == 32 ? mx_kernel_bn<32>(kind, dual) : NULL;
}
static int mx_kind_of(uint32_t type) {
    switch (type) {
    case DSV4_TYPE_IQ2_XXS: return GM_IQ2_XXS;
    case DSV4_TYPE_Q2_K: return GM_Q2_K;
    case DSV4_TYPE_Q4_K: return GM_Q4_K;
    default: return GM_NONE;
    }
}

int cu_moe_mma_tile(uint64_t P, uint64_t E) { return E > 0 && P > 12 * E ? 32 : 16; }

static bool mx_smem_ok(const cuda_ctx *c, mx_fn f, size_t smem) {
    if (smem > c->caps.smem_per_block_optin) return false;
    if (cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return true;
}

bool cu_moe_mma_ok(const cuda_ctx *c, uint32_t gu_type, uint32_t down_type, uint64_t in, uint64_t ff,
                   uint64_t gu_row_bytes, uint64_t down_row_bytes, int bn) {
    if (cu_moe_mma_mode() == 0) return false;
    if (c->caps.cc_major < 8) return false; /* mma.sync .s8 */
    const int kg = mx_kind_of(gu_type), kd = mx_kind_of(down_type);
    if (kg == GM_NONE || kd == GM_NONE) return false;
    /* whole superblocks, conflict-free activation rows, 4-byte aligned rows of whole blocks */
    if (in % 256 || ff % 256 || in > (1u << 16) || ff > (1u << 16)) return false;
    if (gu_row_bytes % 4 || down_row_bytes % 4 || gu_row_bytes < in / 256 * mx_block_bytes(kg) ||
        down_row_bytes < ff / 256 * mx_block_bytes(kd))
        return false;
    const mx_fn fgu = mx_kernel_of(kg, true, bn), fd = mx_kernel_of(kd, false, bn);
    return fgu && fd && mx_smem_ok(c, fgu, (size_t)mx_layout_of(bn, (int)in).total) &&
           mx_smem_ok(c, fd, (size_t)mx_layout_of(bn, (int)ff).total);
}

dsv4_status cu_moe_mma_launch(cuda_ctx *c, uint32_t type, bool dual, int bn, const mx_params *p,
                              uint64_t max_tiles, dsv4_error *err) {
    const mx_fn f = mx_kernel_of(mx_kind_of(type), dual, bn);
    if (!f) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe mma: %s experts", dsv4_type_name(type));
    const int rows = dual ? MX_BM / 2 : MX_BM;
    const dim3 grid((unsigned)max_tiles, (unsigned)((p->n_out + rows - 1) / rows));
    f<<<grid, MX_THREADS, (size_t)mx_layout_of(bn, p->in).total, c->stream>>>(*p);
    return cu_launched(err, dual ? "moe mma gate/up" : "moe mma down");
}
