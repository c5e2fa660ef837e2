/* Units of the v2 Q8_0 tensor-core prefill GEMM (cuda_gemm_q8_0_mma2.cu), host and device, shared
 * with the host emulation (tests/cuda/q8_0_mma_emu_check.cu).
 *
 * Numerics are v1's (cuda_gemm_q8_0_mma.cuh): the same fragment reads, the same biased MMA and the
 * same per-block float update qm_update, blocks in increasing order, so every output is bitwise
 * v1's and the CPU's. What changes is the work around the 4 FP32 operations per output element and
 * block that bound the kernel (see the budget in cuda_gemm_q8_0_mma2.cu):
 *   - q2_wide ("v2"): CTA 256 rows x 128 tokens (v1: 128 x 64), 16 warps as 4 (rows) x 4
 *     (tokens), each warp 64 x 32 = 4 x 4 MMAs per block (v1: 2 x 4): a B fragment feeds 4 MMAs
 *     instead of 2 and the loader moves half the bytes per MMA; one CTA of 16 warps per SM (v1:
 *     two of 8). q2_narrow ("v2n"): CTA 128 x 128 of v1's 32 x 32 warp tile;
 *   - one __syncthreads per stage (v1: two): the barrier that makes stage s visible also proves
 *     every warp is done with the buffer the next load refills.
 * A stage keeps v1's raw shared-memory rows (QM_WROW / QM_XROW bytes per row), so qm_frag_a,
 * qm_frag_b, qm_scale_w, qm_scale_x and qm_epilogue are reused unchanged. */
#ifndef DSV4_CUDA_GEMM_Q8_0_MMA2_CUH
#define DSV4_CUDA_GEMM_Q8_0_MMA2_CUH

#include "backend/cuda/cuda_gemm_q8_0_mma.cuh"

/* A tile shape: warps as WARPS_M (rows) x WARPS_N (tokens), each warp MT m16 x NT n8 tiles. */
template <int WARPS_M, int WARPS_N, int MT_, int NT_> struct q2_cfg {
    static constexpr int MT = MT_, NT = NT_;
    static constexpr int WM = WARPS_M, WN = WARPS_N;
    static constexpr int BM = WARPS_M * MT * 16; /* weight rows per CTA */
    static constexpr int BN = WARPS_N * NT * 8;  /* tokens per CTA */
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WTILE = BM * QM_WROW, XTILE = BN * QM_XROW, STAGE = WTILE + XTILE;
    static constexpr int STAGES = 2; /* ring depth (the code is written for any depth >= 2) */
    static constexpr int SMEM = STAGES * STAGE;
};
/* "v2": CTA 256 x 128, warp 64 x 32 (4 x 4 MMAs per block), 217088 B: sm_90, not sm_80 */
typedef q2_cfg<4, 4, 4, 4> q2_wide;
/* "v2n": CTA 128 x 128, warp 32 x 32 (v1's 2 x 4), 147456 B; half the accumulators of q2_wide,
 * so the compiler has registers to prefetch fragments (which one wins is for the H200 to say) */
typedef q2_cfg<4, 4, 2, 4> q2_narrow;

/* A rolled loop on the device: the loader's unrolled address math spilled registers of the 4x4
 * warp tile (ptxas -v); the host pass does not know the pragma. */
#ifdef __CUDA_ARCH__
#define Q2_ROLLED _Pragma("unroll 1")
#else
#define Q2_ROLLED
#endif

/* The ring: stage s lives in buffer s % STAGES; iteration s, after its barrier, refills the
 * buffer of stage s - 1 (all warps are past it) with stage s + STAGES - 1. */
template <class C> QM_HD int q2_buf(long long s) { return (int)(s % C::STAGES); }
template <class C> QM_HD long long q2_ahead(long long s) { return s + C::STAGES - 1; }

/* v1's loader (qm_load_stage) for the larger tile: stage s (blocks 8s..8s+7) of the CTA at weight
 * row m0, token c0, by thread tid of nthr. Rows past n_out / tokens past n re-read the last valid
 * one (their results are dropped by q2_store). */
template <class C, bool ALIGNED>
QM_HD void q2_load_stage(const qm_args &p, long long m0, long long c0, long long s, uint8_t *wt, uint8_t *xt,
                         int tid, int nthr) {
    const long long b0 = s * QM_KB;
    if (ALIGNED) {
        Q2_ROLLED
        for (int c = tid; c < C::BM * (QM_WROW / 16); c += nthr) {
            const int r = c / (QM_WROW / 16), ch = c % (QM_WROW / 16);
            const long long row = m0 + r < p.n_out ? m0 + r : p.n_out - 1;
            qm_copy16(wt + r * QM_WROW + ch * 16, p.w + (uint64_t)row * p.row_bytes + b0 * 34 + ch * 16);
        }
        Q2_ROLLED
        for (int c = tid; c < C::BN * (QM_KB * 36 / 16); c += nthr) {
            const int r = c / (QM_KB * 36 / 16), ch = c % (QM_KB * 36 / 16);
            const long long tok = c0 + r < p.n ? c0 + r : p.n - 1;
            qm_copy16(xt + r * QM_XROW + ch * 16, p.x + (uint64_t)tok * p.x_stride + b0 * 36 + ch * 16);
        }
    } else {
        const int kb = p.nb - b0 < QM_KB ? (int)(p.nb - b0) : QM_KB;
        const int wu = kb * 17, xu = kb * 9; /* 2-byte / 4-byte units per row */
        Q2_ROLLED
        for (int c = tid; c < C::BM * wu; c += nthr) {
            const int r = c / wu, u = c % wu;
            const long long row = m0 + r < p.n_out ? m0 + r : p.n_out - 1;
            qm_copy2(wt + r * QM_WROW + 2 * u, p.w + (uint64_t)row * p.row_bytes + b0 * 34 + 2 * u);
        }
        Q2_ROLLED
        for (int c = tid; c < C::BN * xu; c += nthr) {
            const int r = c / xu, u = c % xu;
            const long long tok = c0 + r < p.n ? c0 + r : p.n - 1;
            qm_copy4(xt + r * QM_XROW + 4 * u, p.x + (uint64_t)tok * p.x_stride + b0 * 36 + 4 * u);
        }
    }
}

/* Warp `warp` of the CTA: its first row and token inside the CTA tile. */
template <class C> QM_HD int q2_warp_row(int warp) { return (warp % C::WM) * (C::MT * 16); }
template <class C> QM_HD int q2_warp_tok(int warp) { return (warp / C::WM) * (C::NT * 8); }

/* Store lane `lane`'s accumulators of warp `warp` of the CTA at (m0, c0). */
template <class C>
QM_HD void q2_store(const qm_args &p, long long m0, long long c0, int warp, int lane,
                    const float acc[C::MT][C::NT][4]) {
    const int g = lane >> 2, t = lane & 3;
    for (int mt = 0; mt < C::MT; mt++)
        for (int nt = 0; nt < C::NT; nt++)
            for (int i = 0; i < 4; i++) {
                const long long row = m0 + q2_warp_row<C>(warp) + mt * 16 + g + (i >> 1) * 8;
                const long long tok = c0 + q2_warp_tok<C>(warp) + nt * 8 + 2 * t + (i & 1);
                if (row < p.n_out && tok < p.n)
                    p.y[(uint64_t)tok * p.y_stride + (uint64_t)row] = acc[mt][nt][i];
            }
}

#endif
