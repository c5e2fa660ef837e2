/* The per-head norm (no weight) and RoPE of one 512-wide query head row by one warp: the q_norm_rope op's
 * prefill numerics, shared by q_norm_rope_warp_kernel (cuda_attn_fused.cu) and the tensor-core prefill
 * attention's fused query load (cuda_attn_tc.cu, DSV4_FUSED_ATTN_CHUNK_QNR), so that both give the same
 * bits by construction (both files build without --fmad=false; every float operation is an explicit _rn
 * intrinsic).
 *
 * The sum of squares is cu_row_sumsq's over RMS_THREADS threads, emulated: lane l holds the float4
 * groups of threads l, l + 32, l + 64, l + 96 (the only ones with a group at width 512), each summed as
 * that thread sums it, each warp's butterfly done on its own value (every lane ends with the warp's sum,
 * addition being commutative), the 8 warp sums added in order from 0.0 (the 4 empty warps add +0.0,
 * which leaves a sum of squares unchanged). Then the rmsnorm op's products and the rope op's rotation of
 * the tail pairs. */
#ifndef DSV4_CUDA_ATTN_QNR_CUH
#define DSV4_CUDA_ATTN_QNR_CUH

#include "backend/cuda/cuda_attn_rope.cuh"
#include "backend/cuda/cuda_smallops_units.cuh"

constexpr uint32_t QNR_W = 512;             /* head width */
constexpr uint32_t QNR_GR = QNR_W / 4 / 32; /* float4 groups per lane */

/* v[k]: group k * 32 + lane of the head row, normed and rotated in place. cs / sn: the token's pair
 * angles (rope_pair_cs_sn), `half` pairs rotated at the end of the row. */
__device__ __forceinline__ void qnr_head512(float4 (&v)[QNR_GR], uint32_t lane, float eps, uint32_t half,
                                            const float *cs, const float *sn) {
    double part[QNR_GR];
#pragma unroll
    for (uint32_t k = 0; k < QNR_GR; k++) {
        double ss = 0.0;
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].x, (double)v[k].x));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].y, (double)v[k].y));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].z, (double)v[k].z));
        ss = __dadd_rn(ss, __dmul_rn((double)v[k].w, (double)v[k].w));
        for (int o = 16; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
        part[k] = ss;
    }
    double tot = 0.0;
#pragma unroll
    for (uint32_t k = 0; k < QNR_GR; k++) tot = __dadd_rn(tot, part[k]);
    for (uint32_t k = QNR_GR; k < RMS_THREADS / 32; k++) tot = __dadd_rn(tot, 0.0);
    const float s = cu_rms_inv(tot, QNR_W, eps);
    const uint32_t nope = QNR_W - 2 * half;
#pragma unroll
    for (uint32_t k = 0; k < QNR_GR; k++) {
        const uint32_t i = 4 * (k * 32 + lane); /* pairs (i, i + 1) and (i + 2, i + 3) */
        float y[4] = {__fmul_rn(v[k].x, s), __fmul_rn(v[k].y, s), __fmul_rn(v[k].z, s), __fmul_rn(v[k].w, s)};
        if (i >= nope) rope_rotate(&y[0], &y[1], cs[(i - nope) / 2], sn[(i - nope) / 2]);
        if (i + 2 >= nope) rope_rotate(&y[2], &y[3], cs[(i + 2 - nope) / 2], sn[(i + 2 - nope) / 2]);
        v[k] = make_float4(y[0], y[1], y[2], y[3]);
    }
}

#endif
