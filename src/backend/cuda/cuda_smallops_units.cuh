/* Pieces of the small CUDA ops that must keep the CPU's exact float order, written once for the
 * device kernels (cuda_ops_hc.cu, cuda_ops_moe.cu, cuda_ops_dense.cu) and the host check
 * tests/cuda/smallops_units_check.cu (which runs them lane by lane against cpu_hc_split and
 * cpu_topk_desc). The exp function is a parameter so the host check can use the CPU's expf. */
#ifndef DSV4_CUDA_SMALLOPS_UNITS_CUH
#define DSV4_CUDA_SMALLOPS_UNITS_CUH

#include <stdint.h>

#define HCU_NEG_INF (-1e30f)

/* ---- HC split (cpu_hc_split), cut at the points where rows / columns are independent ---- */

/* Element i < 2 n_hc of the split: the pre weights (i < n_hc), then the post weights. */
#pragma nv_exec_check_disable /* E is a host functor in the host check, a device one in the kernels */
template <class E>
__host__ __device__ inline float hcu_pre_post(const float *mix, const float *scale, const float *base,
                                              uint32_t n_hc, float eps, uint32_t i, E ex) {
    if (i < n_hc) {
        const float z = mix[i] * scale[0] + base[i];
        return 1.0f / (1.0f + ex(-z)) + eps;
    }
    const float z = mix[i] * scale[1] + base[i];
    return 2.0f / (1.0f + ex(-z));
}

/* Row r of the combine matrix: softmax over the row, + eps (m, b: the comb parts of mix, base). */
#pragma nv_exec_check_disable /* E is a host functor in the host check, a device one in the kernels */
template <class E>
__host__ __device__ inline void hcu_comb_softmax_row(const float *m, float scale2, const float *b,
                                                     uint32_t n_hc, uint32_t r, float eps, float *c, E ex) {
    float *cr = c + r * n_hc;
    float mx = HCU_NEG_INF;
    for (uint32_t j = 0; j < n_hc; j++) {
        const float v = m[r * n_hc + j] * scale2 + b[r * n_hc + j];
        cr[j] = v;
        if (v > mx) mx = v;
    }
    float sum = 0.0f;
    for (uint32_t j = 0; j < n_hc; j++) {
        const float v = ex(cr[j] - mx);
        cr[j] = v;
        sum += v;
    }
    const float inv = 1.0f / sum;
    for (uint32_t j = 0; j < n_hc; j++) cr[j] = cr[j] * inv + eps;
}

/* Sinkhorn row pass of row r (iterations after the first). */
__host__ __device__ inline void hcu_comb_row_pass(float *c, uint32_t n_hc, uint32_t r, float eps) {
    float *cr = c + r * n_hc;
    float sum = 0.0f;
    for (uint32_t j = 0; j < n_hc; j++) sum += cr[j];
    const float inv = 1.0f / (sum + eps);
    for (uint32_t j = 0; j < n_hc; j++) cr[j] *= inv;
}

/* Sinkhorn column pass of column j. */
__host__ __device__ inline void hcu_comb_col_pass(float *c, uint32_t n_hc, uint32_t j, float eps) {
    float sum = 0.0f;
    for (uint32_t r = 0; r < n_hc; r++) sum += c[r * n_hc + j];
    const float inv = 1.0f / (sum + eps);
    for (uint32_t r = 0; r < n_hc; r++) c[r * n_hc + j] *= inv;
}

/* ---- HC combine matrix in registers: one element per lane (n_hc * n_hc <= 32) ----
 * Lane l < n_hc² holds c[l / n_hc][l % n_hc]. Every step is a function of the lane's own value
 * and of other lanes' values through `get(src)` (a shuffle on the device, a read of a snapshot of
 * all 32 lanes in the host check), summed in the order of the hcu_* functions above, so every
 * lane ends with the bytes those give. Every lane of the warp runs every step (lanes past n_hc²
 * compute values nobody stores). */
#define HCR_MAX 5 /* largest n_hc with n_hc² <= 32 */

/* get(first), get(first + stride), ... added in that order from 0.0f. */
#pragma nv_exec_check_disable
template <class G>
__host__ __device__ inline float hcr_sum(const G &get, uint32_t first, uint32_t stride, uint32_t n) {
    float s = 0.0f;
    for (uint32_t k = 0; k < n; k++) s += get(first + k * stride);
    return s;
}

/* Softmax logit of the lane's element (hcu_comb_softmax_row's v). */
__host__ __device__ inline float hcr_logit(const float *m, float scale2, const float *b, uint32_t n_hc,
                                           uint32_t lane) {
    return lane < n_hc * n_hc ? m[lane] * scale2 + b[lane] : 0.0f;
}

/* The row maximum as hcu_comb_softmax_row scans it, over the logits get() reads. */
#pragma nv_exec_check_disable
template <class G> __host__ __device__ inline float hcr_row_max(const G &get, uint32_t n_hc, uint32_t lane) {
    const uint32_t r0 = lane / n_hc * n_hc;
    float mx = HCU_NEG_INF;
    for (uint32_t k = 0; k < n_hc; k++) {
        const float v = get(r0 + k);
        if (v > mx) mx = v;
    }
    return mx;
}

/* The softmax's last step: e / (row sum of the exps get() reads) + eps. */
#pragma nv_exec_check_disable
template <class G>
__host__ __device__ inline float hcr_softmax_norm(const G &get, float e, uint32_t n_hc, uint32_t lane,
                                                  float eps) {
    const float inv = 1.0f / hcr_sum(get, lane / n_hc * n_hc, 1, n_hc);
    return e * inv + eps;
}

/* Sinkhorn row pass (get: the matrix before it). */
#pragma nv_exec_check_disable
template <class G>
__host__ __device__ inline float hcr_row_pass(const G &get, float v, uint32_t n_hc, uint32_t lane,
                                              float eps) {
    const float inv = 1.0f / (hcr_sum(get, lane / n_hc * n_hc, 1, n_hc) + eps);
    return v * inv;
}

/* Sinkhorn column pass. */
#pragma nv_exec_check_disable
template <class G>
__host__ __device__ inline float hcr_col_pass(const G &get, float v, uint32_t n_hc, uint32_t lane,
                                              float eps) {
    const float inv = 1.0f / (hcr_sum(get, lane % n_hc, n_hc, n_hc) + eps);
    return v * inv;
}

/* 1.0f / x, correctly rounded (on the device the reciprocal intrinsic: the same bits as the IEEE
 * division, without the division routine). On sm_90, __frcp_rn's own fast path (rcp.approx, then one
 * Newton step with fma: ptxas's expansion for exponent fields other than 0, 253, 254, 255) is
 * computed before that range test instead of after it, so the test and its branch leave the
 * dependent chain of the Sinkhorn passes (20 iterations in one warp: 5,880 -> 5,031 cycles on an
 * H200); __frcp_rn itself outside the range. The fast path gave __frcp_rn's bits for every one of
 * the 4,227,858,432 floats in the range (exhaustive run on an H200, 2026-11-29). */
__host__ __device__ __forceinline__ float hcu_recip(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
    float r0;
    asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(x)); /* volatile: not sunk past the test */
    const float r = __fmaf_rn(r0, -__fmaf_rn(x, r0, -1.0f), r0);
    if (((__float_as_uint(x) + 0x1800000u) & 0x7f800000u) > 0x1ffffffu) return r;
    return __frcp_rn(x);
#elif defined(__CUDA_ARCH__)
    return __frcp_rn(x);
#else
    return 1.0f / x;
#endif
}

/* hcr_softmax_norm / hcr_row_pass / hcr_col_pass for n_hc = N known at compile time: the same
 * sums in the same order, unrolled (the reads issue together), and the reciprocal intrinsic. */
#pragma nv_exec_check_disable
template <uint32_t N, class G>
__host__ __device__ inline float hcr_sum_n(const G &get, uint32_t first, uint32_t stride) {
    float v[N];
    for (uint32_t k = 0; k < N; k++) v[k] = get(first + k * stride);
    float s = 0.0f;
    for (uint32_t k = 0; k < N; k++) s += v[k];
    return s;
}
#pragma nv_exec_check_disable
template <uint32_t N, class G>
__host__ __device__ inline float hcr_softmax_norm_n(const G &get, float e, uint32_t lane, float eps) {
    const float inv = hcu_recip(hcr_sum_n<N>(get, lane / N * N, 1));
    return e * inv + eps;
}
#pragma nv_exec_check_disable
template <uint32_t N, class G>
__host__ __device__ inline float hcr_row_pass_n(const G &get, float v, uint32_t lane, float eps) {
    return v * hcu_recip(hcr_sum_n<N>(get, lane / N * N, 1) + eps);
}
#pragma nv_exec_check_disable
template <uint32_t N, class G>
__host__ __device__ inline float hcr_col_pass_n(const G &get, float v, uint32_t lane, float eps) {
    return v * hcu_recip(hcr_sum_n<N>(get, lane % N, N) + eps);
}

/* ---- router top-k ---- */

/* Does (sa, a) rank before (sb, b)? Higher score first, ties to the lower index: the order
 * cpu_topk_desc's insertion produces for scores without NaN. Index -1 is "none" and ranks last. */
__host__ __device__ inline bool rtu_before(float sa, int32_t a, float sb, int32_t b) {
    if (a < 0) return false;
    if (b < 0) return true;
    return sa > sb || (sa == sb && a < b);
}

/* The pruning bound of the rank top-k (router_kernel): the k-th largest of the n warp maxima m (with
 * multiplicity), or -inf when k > n. k distinct experts score >= it, so an expert scoring below it
 * has k experts strictly before it and cannot take a slot. */
__host__ __device__ inline float rtu_kth_max(const float *m, uint32_t n, uint32_t k) {
    float t = -INFINITY;
    if (k > n) return t;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ge = 0;
        for (uint32_t j = 0; j < n; j++) ge += m[j] >= m[i];
        if (ge >= k && m[i] > t) t = m[i];
    }
    return t;
}

/* Expert e's rank among the candidates cand[0..nc) (rtu_before's order): its slot when < k. Every
 * expert before e is a candidate (rtu_kth_max), so this is its rank among all experts. */
__host__ __device__ inline uint32_t rtu_rank(const float *s, const int32_t *cand, uint32_t nc, int32_t e) {
    const float se = s[e];
    uint32_t r = 0;
    for (uint32_t j = 0; j < nc; j++) r += rtu_before(s[cand[j]], cand[j], se, e) ? 1u : 0u;
    return r;
}

/* rtu_rank with the candidates' scores beside their ids (cs[j] = s[cand[j]]; se = s[e]): the same rank. */
__host__ __device__ inline uint32_t rtu_rank_cs(const float *cs, const int32_t *cand, uint32_t nc, float se,
                                                int32_t e) {
    uint32_t r = 0;
    for (uint32_t j = 0; j < nc; j++) r += rtu_before(cs[j], cand[j], se, e) ? 1u : 0u;
    return r;
}

/* Token ids passed by value in the launch (no upload, no host wait) when a call has few. */
#define CU_TOK_INLINE 32
struct cu_tok_arg {
    int32_t v[CU_TOK_INLINE];
};

#ifdef __CUDACC__
/* ---- device: the row sum of squares shared by rmsnorm and the HC mix ---- */
#define RMS_THREADS 256

/* Σx² of a row in double, in one fixed tree for a given width (whatever the launch, the number
 * of rows or the alignment): thread t adds the 4-element groups t, t + 256, ... element by
 * element, then the lanes (xor butterfly: every lane ends with the same value) and the 8 warp
 * sums in order. Call with RMS_THREADS threads; every thread gets the total. vec: the row is
 * 16-byte aligned and width % 4 == 0 (same sums, wider loads). The products and sums are explicit
 * _rn intrinsics: no contraction, so the sums are the same in files built with or without
 * --fmad=false (the fused norm + RoPE kernels live with the RoPE kernels, built without it). */
__device__ inline double cu_row_sumsq(const float *xr, uint32_t width, bool vec, double *part) {
    double ss = 0.0;
    const uint32_t groups = (width + 3) / 4;
    if (vec) {
        const float4 *x4 = (const float4 *)xr;
#pragma unroll 16 /* one round trip for a 16384-wide row */
        for (uint32_t g = threadIdx.x; g < groups; g += RMS_THREADS) {
            const float4 v = x4[g];
            ss = __dadd_rn(ss, __dmul_rn((double)v.x, (double)v.x));
            ss = __dadd_rn(ss, __dmul_rn((double)v.y, (double)v.y));
            ss = __dadd_rn(ss, __dmul_rn((double)v.z, (double)v.z));
            ss = __dadd_rn(ss, __dmul_rn((double)v.w, (double)v.w));
        }
    } else {
        for (uint32_t g = threadIdx.x; g < groups; g += RMS_THREADS)
            for (uint32_t i = 4 * g; i < 4 * g + 4 && i < width; i++)
                ss = __dadd_rn(ss, __dmul_rn((double)xr[i], (double)xr[i]));
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int i = 0; i < RMS_THREADS / 32; i++) tot += part[i];
    return tot;
}

/* The rmsnorm scale 1 / sqrtf(mean + eps) of a row with Σx² tot (IEEE division and square root,
 * as the default -prec-div / -prec-sqrt compile `1.0f / sqrtf(...)`). */
__device__ __forceinline__ float cu_rms_inv(double tot, uint32_t width, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)__ddiv_rn(tot, (double)width), eps)));
}
#endif

#endif
