/* Sink attention of one query on the device (spec model-attention-hc.md §4.6; CPU:
 * cpu_attention + cpu_attention_head). One block per head.
 *
 * Pass 1: one thread per row computes the score q.k sequentially over d (the CPU's
 * dot_f32_seq order), times kq_scale, and the block takes the max with the sink as the CPU does.
 * Pass 2: the weights expf(s - M) are formed per row; then one thread per output dim walks the
 * rows in the CPU order (raw oldest -> newest, then compressed rows) accumulating w*v and the
 * denominator (which starts with the sink term), and scales by 1/den. Scores are kept in shared
 * memory when they fit, otherwise recomputed (identically) chunk by chunk in pass 2.
 *
 * Parity: every float operation is the CPU's, in its order and without contraction; expf is
 * rounded from double, so outputs are bitwise equal to the CPU's unless glibc's expf is off by an
 * ulp on one of the weights (then a relative difference of ~1e-7).
 * Selected rows out of range (sel[i] >= n_comp, which the CPU rejects) get weight 0. */
#include "backend/cuda/cuda_attn_common.cuh"

namespace {

constexpr size_t SMEM_LIMIT = 48 * 1024;

struct attn_args {
    const float *q, *raw, *comp;
    const int32_t *sel;
    const float *sinks;
    float *out;
    uint32_t head_dim, raw_cap, raw_start, n_raw, n_comp, n_rows, chunk;
    float kq_scale;
    bool vec4; /* every row and q start 16-byte aligned and head_dim % 4 == 0 */
};

__device__ __forceinline__ const float *row_ptr(const attn_args &a, uint32_t r) {
    if (r < a.n_raw) return a.raw + (uint64_t)((a.raw_start + r) % a.raw_cap) * a.head_dim;
    const uint32_t c = r - a.n_raw;
    const int64_t i = a.sel ? (int64_t)a.sel[c] : (int64_t)c;
    if (i < 0 || i >= (int64_t)a.n_comp) return nullptr;
    return a.comp + (uint64_t)i * a.head_dim;
}

__device__ __forceinline__ float row_score(const attn_args &a, const float *qs, uint32_t r) {
    const float *k = row_ptr(a, r);
    if (!k) return -INFINITY;
    float acc = 0.0f;
    if (a.vec4) {
        const float4 *k4 = (const float4 *)k;
        for (uint32_t d = 0; d < a.head_dim / 4; d++) {
            const float4 v = k4[d];
            acc = __fadd_rn(acc, __fmul_rn(qs[4 * d], v.x));
            acc = __fadd_rn(acc, __fmul_rn(qs[4 * d + 1], v.y));
            acc = __fadd_rn(acc, __fmul_rn(qs[4 * d + 2], v.z));
            acc = __fadd_rn(acc, __fmul_rn(qs[4 * d + 3], v.w));
        }
    } else {
        for (uint32_t d = 0; d < a.head_dim; d++) acc = __fadd_rn(acc, __fmul_rn(qs[d], k[d]));
    }
    return __fmul_rn(acc, a.kq_scale);
}

__global__ void attention_kernel(attn_args a) {
    extern __shared__ float sh[];
    __shared__ float red[32];
    const uint32_t h = blockIdx.x;
    float *qs = sh, *ws = sh + a.head_dim;
    const float *qh = a.q + (uint64_t)h * a.head_dim;
    for (uint32_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) qs[i] = qh[i];
    __syncthreads();
    const bool cached = a.n_rows <= a.chunk;
    const float sink = a.sinks[h];

    /* pass 1: scores and their max (a max is exact in any order) */
    float mx_local = -INFINITY;
    for (uint32_t r = threadIdx.x; r < a.n_rows; r += blockDim.x) {
        const float sv = row_score(a, qs, r);
        if (cached) ws[r] = sv;
        mx_local = fmaxf(mx_local, sv);
    }
    mx_local = warp_max(mx_local);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx_local;
    __syncthreads();
    float mx_rows = -INFINITY;
    for (uint32_t w = 0; w < (blockDim.x + 31) / 32; w++) mx_rows = fmaxf(mx_rows, red[w]);
    const float mx = mx_rows > sink ? mx_rows : sink;

    /* pass 2: weights, then one thread per dim in row order */
    const float den0 = attn_expf(__fsub_rn(sink, mx));
    const uint32_t n_dim_groups = (a.head_dim + blockDim.x - 1) / blockDim.x;
    if (cached) {
        __syncthreads(); /* every thread has read red[] */
        for (uint32_t r = threadIdx.x; r < a.n_rows; r += blockDim.x) ws[r] = attn_expf(__fsub_rn(ws[r], mx));
        __syncthreads();
    }
    for (uint32_t g = 0; g < n_dim_groups; g++) {
        const uint32_t i = g * blockDim.x + threadIdx.x;
        float acc = 0.0f, den = den0;
        for (uint32_t c0 = 0; c0 < a.n_rows; c0 += a.chunk) {
            const uint32_t cn = a.n_rows - c0 < a.chunk ? a.n_rows - c0 : a.chunk;
            if (!cached) {
                __syncthreads(); /* the previous chunk's weights are consumed */
                for (uint32_t r = threadIdx.x; r < cn; r += blockDim.x)
                    ws[r] = attn_expf(__fsub_rn(row_score(a, qs, c0 + r), mx));
                __syncthreads();
            }
            for (uint32_t r = 0; r < cn; r++) {
                const float w = ws[r];
                den = __fadd_rn(den, w);
                const float *v = row_ptr(a, c0 + r);
                if (i < a.head_dim && v) acc = __fadd_rn(acc, __fmul_rn(w, v[i]));
            }
        }
        if (i < a.head_dim) a.out[(uint64_t)h * a.head_dim + i] = __fmul_rn(acc, __fdiv_rn(1.0f, den));
    }
}

} // namespace

extern "C" int dsv4_cuda_attention(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                                   const float *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                                   const float *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                                   const float *sinks_dev, float kq_scale, float *out) {
    if (n_raw > raw_cap || (n_raw && raw_start >= raw_cap)) return (int)cudaErrorInvalidValue;
    if (head_dim == 0 || (size_t)head_dim * sizeof(float) + 1024 * sizeof(float) > SMEM_LIMIT)
        return (int)cudaErrorInvalidValue;
    if (n_head == 0) return 0;
    attn_args a;
    a.q = q;
    a.raw = raw;
    a.comp = comp;
    a.sel = sel;
    a.sinks = sinks_dev;
    a.out = out;
    a.head_dim = head_dim;
    a.raw_cap = raw_cap;
    a.raw_start = raw_start;
    a.n_raw = n_raw;
    a.n_comp = n_comp;
    a.n_rows = n_raw + (sel ? n_sel : n_comp);
    a.kq_scale = kq_scale;
    a.chunk = (uint32_t)((SMEM_LIMIT - 512) / sizeof(float) - head_dim); /* 512 B for static shared */
    a.vec4 = head_dim % 4 == 0 && ((uintptr_t)raw % 16) == 0 && ((uintptr_t)comp % 16) == 0;
    uint32_t threads = (head_dim + 31) / 32 * 32;
    if (threads < 128) threads = 128;
    if (threads > 1024) threads = 1024;
    const size_t smem = (size_t)(head_dim + a.chunk) * sizeof(float);
    attention_kernel<<<n_head, threads, smem, (cudaStream_t)s>>>(a);
    return attn_launch_status();
}
