/* Embedding and hyper-connection ops (spec model-attention-hc.md §3), ports of
 * backend/cpu/cpu_hc.c and cpu_hc_split (cpu_kernels.c) with the same float order. */
#include <cuda_fp16.h>

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_hc_mix_tc.h"
#include "backend/cuda/cuda_hc_tail_units.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_smallops_units.cuh"

#define HC_NEG_INF (-1e30f)
#define HC_MAX 16

/* Pull the 128-byte line holding p into L2 (a hint: no value changes). */
__device__ __forceinline__ void cu_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
#define CU_GRID_Y 65535u /* grid.y limit: token loops stride by it */

/* ---- embed ---- */

/* Block (x, t): 256 dims of token t, copied to every stream. The ids come by value (tk) for a
 * few tokens, else from the device array tok. */
template <int T>
__global__ void embed_kernel(const uint8_t *emb, uint64_t row_bytes, const int32_t *tok, const cu_tok_arg tk,
                             uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out) {
    const uint32_t d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_embd) return;
    for (uint32_t t = blockIdx.y; t < n; t += gridDim.y) {
        const int32_t id = tok ? tok[t] : tk.v[t];
        const uint8_t *row = emb + (uint64_t)id * row_bytes;
        float v;
        if (T == DSV4_TYPE_F32)
            v = ((const float *)row)[d];
        else if (T == DSV4_TYPE_F16)
            v = __half2float(__ushort_as_half(((const uint16_t *)row)[d]));
        else
            v = __uint_as_float((uint32_t)((const uint16_t *)row)[d] << 16);
        float *o = out + (uint64_t)t * n_hc * n_embd + d;
        for (uint32_t h = 0; h < n_hc; h++) o[(uint64_t)h * n_embd] = v;
    }
}

/* The ids of a call: by value when they fit the launch (decode: no upload, no wait on the
 * staging buffer), else through cu_tokens. */
static dsv4_status hc_tokens(cuda_ctx *c, const int32_t *tokens, uint32_t n, cu_tok_arg *tk,
                             const int32_t **dtok, dsv4_error *err) {
    memset(tk, 0, sizeof *tk);
    *dtok = NULL;
    if (n <= CU_TOK_INLINE) {
        memcpy(tk->v, tokens, (size_t)n * sizeof(int32_t));
        return DSV4_OK;
    }
    return cu_tokens(c, tokens, n, dtok, err);
}

dsv4_status cu_embed(void *vctx, const dsv4_tensor *emb, const int32_t *tokens, uint32_t n, uint32_t n_hc,
                     float *out_hc, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint64_t vocab = emb->ne[1];
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint64_t)tokens[t] >= vocab)
            return dsv4_fail(err, DSV4_ERR_RANGE, "token id %d at index %u is outside the vocabulary (%llu)",
                             tokens[t], t, (unsigned long long)vocab);
    if (emb->type != DSV4_TYPE_F32 && emb->type != DSV4_TYPE_F16 && emb->type != DSV4_TYPE_BF16)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "embedding tensor %s has type %s (CUDA reads F32/F16/BF16)",
                         emb->name ? emb->name : "?", dsv4_type_name(emb->type));
    if (n == 0) return DSV4_OK;
    const uint8_t *ed = (const uint8_t *)cu_weight_dev(c, emb, err);
    if (!ed) return DSV4_ERR_INVALID;
    cu_tok_arg tk;
    const int32_t *dtok = NULL;
    dsv4_status st = hc_tokens(c, tokens, n, &tk, &dtok, err);
    if (st != DSV4_OK) return st;
    if (n == 1 && c->step_capturing) dtok = c->d_step_tok; /* a recorded step reads its token when it runs */
    const uint32_t n_embd = (uint32_t)emb->ne[0];
    const dim3 grid(cu_blocks(n_embd, 256), n < CU_GRID_Y ? n : CU_GRID_Y);
    if (emb->type == DSV4_TYPE_F32)
        embed_kernel<DSV4_TYPE_F32>
            <<<grid, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, tk, n, n_hc, n_embd, out_hc);
    else if (emb->type == DSV4_TYPE_F16)
        embed_kernel<DSV4_TYPE_F16>
            <<<grid, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, tk, n, n_hc, n_embd, out_hc);
    else
        embed_kernel<DSV4_TYPE_BF16>
            <<<grid, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, tk, n, n_hc, n_embd, out_hc);
    return cu_launched(err, "embed");
}

/* ---- shared pieces ---- */

#define HCM_CHUNK 256 /* inputs per block of the decode mix: 32 lanes x 8 */
#define HCS_THREADS 256
#define HCS_PF                                                                                               \
    4 /* float4s of each stream a thread of hc_weights_sum_kernel loads ahead (n_embd <= 4096 at one block)  \
       */

#define HCM_PREFETCH 3 /* mix rows per warp whose weights load before the row's sum of squares */

/* One mix row's partial dot over the lane's 8 inputs: exact products summed in double in order,
 * then a xor butterfly over the warp; lane 0 stores it. */
__device__ __forceinline__ void hc_mix_dot_to(const uint4 q, const float *f, uint32_t lane, double *dst) {
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float w0 = __half2float(__ushort_as_half((unsigned short)(qw[j] & 0xffffu)));
        const float w1 = __half2float(__ushort_as_half((unsigned short)(qw[j] >> 16)));
        acc += (double)w0 * f[2 * j];
        acc += (double)w1 * f[2 * j + 1];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) *dst = acc;
}
/* block blockIdx.x's partial of mix row m (chunk blockIdx.x of the row) into part_t */
__device__ __forceinline__ void hc_mix_dot(const uint4 q, const float *f, uint32_t lane, uint32_t m,
                                           uint32_t n_mix, double *part_t) {
    hc_mix_dot_to(q, f, lane, part_t + (uint64_t)blockIdx.x * n_mix + m);
}

/* Decode mix, partial dots. Block (p, t) takes token t's Σx² over the whole row (the rmsnorm op's
 * tree, so s and flat = x * s are the values the rmsnorm op gives), then for every mix row m the
 * dot of inputs [256 p, 256 p + 256) with flat (hc_mix_dot). The row is read by every block (from
 * L2); the weights once. The first rows' weights and the block's inputs are loaded before the sum
 * of squares, so their latency overlaps it (loads only: the same values). */
__device__ __forceinline__ void hc_mix_part_token(const float *xr, const uint8_t *fn, uint64_t fn_row_bytes,
                                                  uint32_t hd, uint32_t n_mix, float rms_eps, double *part_t,
                                                  double *red) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = RMS_THREADS / 32;
    const uint32_t i0 = blockIdx.x * HCM_CHUNK + lane * 8;
    uint4 qp[HCM_PREFETCH];
#pragma unroll
    for (uint32_t i = 0; i < HCM_PREFETCH; i++)
        if (warp + i * W < n_mix)
            qp[i] = *(const uint4 *)(fn + (uint64_t)(warp + i * W) * fn_row_bytes + (uint64_t)i0 * 2);
    const float4 a = *(const float4 *)(xr + i0), b = *(const float4 *)(xr + i0 + 4);
    const double tot = cu_row_sumsq(xr, hd, true, red);
    const float s = 1.0f / sqrtf((float)(tot / (double)hd) + rms_eps);
    const float f[8] = {a.x * s, a.y * s, a.z * s, a.w * s, b.x * s, b.y * s, b.z * s, b.w * s};
#pragma unroll
    for (uint32_t i = 0; i < HCM_PREFETCH; i++)
        if (warp + i * W < n_mix) hc_mix_dot(qp[i], f, lane, warp + i * W, n_mix, part_t);
    for (uint32_t m = warp + HCM_PREFETCH * W; m < n_mix; m += W)
        hc_mix_dot(*(const uint4 *)(fn + (uint64_t)m * fn_row_bytes + (uint64_t)i0 * 2), f, lane, m, n_mix,
                   part_t);
}

__global__ void __launch_bounds__(RMS_THREADS)
    hc_mix_part_kernel(const float *x, const uint8_t *fn, uint64_t fn_row_bytes, uint32_t n, uint32_t hd,
                       uint32_t n_mix, float rms_eps, double *part) {
    __shared__ double red[RMS_THREADS / 32];
    for (uint32_t t = blockIdx.y; t < n; t += gridDim.y) {
        hc_mix_part_token(x + (uint64_t)t * hd, fn, fn_row_bytes, hd, n_mix, rms_eps,
                          part + (uint64_t)t * gridDim.x * n_mix, red);
        __syncthreads(); /* red is reused by the next token */
    }
}

struct hc_exp {
    __device__ float operator()(float v) const { return cu_expf(v); }
};

struct hc_shfl_get { /* hcr_* lane reads: warp shuffles of v */
    float v;
    __device__ float operator()(uint32_t src) const { return __shfl_sync(0xffffffffu, v, (int)src); }
};

/* One warp (all 32 lanes): the n_hc = 4 combine matrix from the mix, one element per lane in
 * registers (hcr_*_n<4>: the hcu_* sums in their order); lane l < 16 returns element l. */
__device__ __forceinline__ float hc_comb4_warp(const float *mix, const float *scale, const float *base,
                                               uint32_t iters, float eps) {
    const uint32_t lane = threadIdx.x & 31;
    const hc_exp ex;
    const float v = hcr_logit(mix + 8, scale[2], base + 8, 4, lane);
    const float mx = hcr_row_max(hc_shfl_get{v}, 4, lane);
    const float e = ex(v - mx);
    float cv = hcr_softmax_norm_n<4>(hc_shfl_get{e}, e, lane, eps);
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) cv = hcr_row_pass_n<4>(hc_shfl_get{cv}, cv, lane, eps);
        cv = hcr_col_pass_n<4>(hc_shfl_get{cv}, cv, lane, eps);
    }
    return cv;
}

/* Warp 0 (all 32 lanes): the split weights of one token from its mix, hc_weights_sum_kernel's
 * values: pre/post one lane per element; the combine matrix one element per lane in registers
 * (hcr_*: the hcu_* sums in their order) when n_hc² <= 32, else hcu_* through shared memory. */
__device__ void hc_split_warp(const float *mix, const float *scale, const float *base, uint32_t n_hc,
                              uint32_t iters, float eps, float *wts) {
    const uint32_t lane = threadIdx.x & 31;
    const hc_exp ex;
    if (lane < 2 * n_hc) wts[lane] = hcu_pre_post(mix, scale, base, n_hc, eps, lane, ex);
    float *cm = wts + 2 * n_hc;
    if (n_hc == 4) { /* DeepSeek V4: unrolled, 4x faster than the loops below (same bits) */
        const float cv = hc_comb4_warp(mix, scale, base, iters, eps);
        if (lane < 16) cm[lane] = cv;
        return;
    }
    if (n_hc <= HCR_MAX) {
        const float v = hcr_logit(mix + 2 * n_hc, scale[2], base + 2 * n_hc, n_hc, lane);
        const float mx = hcr_row_max(hc_shfl_get{v}, n_hc, lane);
        const float e = ex(v - mx);
        float cv = hcr_softmax_norm(hc_shfl_get{e}, e, n_hc, lane, eps);
        for (uint32_t it = 0; it < iters; it++) {
            if (it > 0) cv = hcr_row_pass(hc_shfl_get{cv}, cv, n_hc, lane, eps);
            cv = hcr_col_pass(hc_shfl_get{cv}, cv, n_hc, lane, eps);
        }
        if (lane < n_hc * n_hc) cm[lane] = cv;
        return;
    }
    if (lane < n_hc) hcu_comb_softmax_row(mix + 2 * n_hc, scale[2], base + 2 * n_hc, n_hc, lane, eps, cm, ex);
    __syncwarp();
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            if (lane < n_hc) hcu_comb_row_pass(cm, n_hc, lane, eps);
            __syncwarp();
        }
        if (lane < n_hc) hcu_comb_col_pass(cm, n_hc, lane, eps);
        __syncwarp();
    }
}

/* Block (x, t): token t's mix (the partials of hc_mix_part_kernel summed in block order, or a
 * row of the mix matrix), then its weights: the split of cpu_hc_split (pre/post one lane per
 * element, the combine matrix one lane per row, then per column: the CPU's expressions in its
 * order, rows and columns being independent) or the head weights; every block computes them and
 * block 0 stores the split. Then u[t][d] = sum_h x[t][h][d] * w[h], h in order, for this
 * block's dims. */
template <bool HEAD>
__global__ void __launch_bounds__(HCS_THREADS)
    hc_weights_sum_kernel(const float *mix_in, const double *part, uint32_t P, const float *x,
                          const float *scale, const float *base, uint32_t n, uint32_t n_hc, uint32_t n_embd,
                          uint32_t iters, float eps, float *split_out, float *u, bool vec_on) {
    __shared__ float mix[2 * HC_MAX + HC_MAX * HC_MAX];
    __shared__ float wts[2 * HC_MAX + HC_MAX * HC_MAX];
    const uint32_t n_mix = HEAD ? n_hc : 2 * n_hc + n_hc * n_hc;
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    /* Four streams in float4s, at most HCS_PF a thread: the token's rows are prefetched into L2 before
     * its weights are computed (the split warp's Sinkhorn passes), then loaded all at once; each
     * output keeps the loop's expression (the same bits). */
    const uint32_t ne4 = n_embd / 4, stride = gridDim.x * blockDim.x,
                   d4 = blockIdx.x * blockDim.x + threadIdx.x;
    const bool vec = vec_on && n_hc == 4 && (n_embd & 3) == 0 && ((uintptr_t)x & 15) == 0 &&
                     ((uintptr_t)u & 15) == 0 && ne4 <= HCS_PF * stride;
    for (uint32_t t = blockIdx.y; t < n; t += gridDim.y) {
        const float *xt = x + (uint64_t)t * hd;
        if (vec) /* the token's rows into L2 while its weights are computed: a 128-byte line a thread */
            for (uint64_t b = (uint64_t)(blockIdx.x * blockDim.x + threadIdx.x) * 128; b < hd * 4;
                 b += (uint64_t)stride * 128)
                cu_prefetch_l2((const uint8_t *)xt + b);
        for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x) {
            if (part) {
                const double *pp = part + (uint64_t)t * P * n_mix + m;
                double acc = 0.0;
#pragma unroll 16 /* loads in flight together; the sum stays in block order */
                for (uint32_t p = 0; p < P; p++) acc += pp[(uint64_t)p * n_mix];
                mix[m] = (float)acc;
            } else {
                mix[m] = mix_in[(uint64_t)t * n_mix + m];
            }
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            const uint32_t lane = threadIdx.x;
            if (HEAD) {
                if (lane < n_hc) wts[lane] = cu_sigmoid_stable(mix[lane] * scale[0] + base[lane]) + eps;
            } else {
                hc_split_warp(mix, scale, base, n_hc, iters, eps, wts); /* the same bytes, faster */
            }
        }
        __syncthreads();
        if (split_out && blockIdx.x == 0)
            for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x)
                split_out[(uint64_t)t * n_mix + m] = wts[m];
        if (vec) {
            /* stream by stream (the outputs' order of terms), each stream's HCS_PF loads issued together */
            float4 a[HCS_PF];
#pragma unroll
            for (uint32_t i = 0; i < HCS_PF; i++) a[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (uint32_t h = 0; h < 4; h++) {
                const float w = wts[h];
                const float4 *xr = (const float4 *)(xt + (uint64_t)h * n_embd) + d4;
                float4 v[HCS_PF];
#pragma unroll
                for (uint32_t i = 0; i < HCS_PF; i++)
                    v[i] =
                        d4 + i * stride < ne4 ? __ldg(xr + i * stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (uint32_t i = 0; i < HCS_PF; i++) {
                    a[i].x += v[i].x * w, a[i].y += v[i].y * w;
                    a[i].z += v[i].z * w, a[i].w += v[i].w * w;
                }
            }
#pragma unroll
            for (uint32_t i = 0; i < HCS_PF; i++)
                if (d4 + i * stride < ne4) *((float4 *)(u + (uint64_t)t * n_embd) + d4 + i * stride) = a[i];
        } else {
            for (uint32_t d = blockIdx.x * blockDim.x + threadIdx.x; d < n_embd;
                 d += gridDim.x * blockDim.x) {
                float acc = 0.0f;
#pragma unroll 4
                for (uint32_t h = 0; h < n_hc; h++) acc += xt[(uint64_t)h * n_embd + d] * wts[h];
                u[(uint64_t)t * n_embd + d] = acc;
            }
        }
        __syncthreads(); /* mix and wts are reused by the next token */
    }
}

/* Grid of hc_weights_sum_kernel: every block recomputes its token's weights (the split warp's
 * Sinkhorn passes while the other warps wait), so a few tokens get one thread per dim, more tokens
 * fewer blocks, and a prefill chunk one block per token (the weights once per token; session 14:
 * DSV4_CUDA_HC_SUM_BLOCKS=N keeps N blocks per token for the A/B). The results do not depend on it. */
static unsigned hc_sum_blocks_env(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_HC_SUM_BLOCKS");
        v = e && atoi(e) > 0 ? atoi(e) : 0;
    }
    return (unsigned)v;
}
/* DSV4_CUDA_HC_SUM_VEC=0: the weighted sum's scalar loop (the A/B of the float4 form; the same bits) */
static bool hc_sum_vec(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_HC_SUM_VEC");
        v = !(e && !strcmp(e, "0"));
    }
    return v != 0;
}
static dim3 hc_sum_grid(uint32_t n, uint32_t n_embd) {
    unsigned bx = n <= 4 ? cu_blocks(n_embd, HCS_THREADS) : n < 64 ? cu_blocks(n_embd, 4 * HCS_THREADS) : 1;
    if (n > 4 && hc_sum_blocks_env()) bx = hc_sum_blocks_env();
    return dim3(bx, n < CU_GRID_Y ? n : CU_GRID_Y);
}

/* The decode mix (hc_mix_part_kernel) replaces rmsnorm + the matmul op where the op would take
 * the tuned matvec (one token, not EXACT, not DSV4_CUDA_MATVEC=generic: those keep the CPU's
 * product bit for bit) for F16 weights in whole, aligned 256-input chunks. */
static bool hc_fast_mix(const cuda_ctx *c, const dsv4_tensor *fn, const float *x_hc, uint32_t n,
                        uint64_t hd) {
    return n == 1 && c->numerics != DSV4_NUMERICS_EXACT && !c->generic_only && fn->type == DSV4_TYPE_F16 &&
           hd % HCM_CHUNK == 0 && hd <= 0x7fffffffull && fn->row_bytes % 16 == 0 &&
           ((uintptr_t)x_hc & 15) == 0;
}

/* The prefill mix on the TF32 kernel: an F16 mix of a chunk that may leave the CPU's bits, not
 * DSV4_CUDA_HC_MIX=blas (the cuBLAS path) or =rows (the rmsnorm rows, then the matmul op; read per call). */
static bool hc_mix_tc_takes(const cuda_ctx *c, const dsv4_tensor *fn, uint32_t n) {
    const char *v = getenv("DSV4_CUDA_HC_MIX");
    if (v && (!strcmp(v, "blas") || !strcmp(v, "rows"))) return false;
    return n > 1 && fn->type == DSV4_TYPE_F16 && cu_prefill_inexact_ok(c, n);
}
static bool hc_mix_exact_env(void) {
    const char *v = getenv("DSV4_CUDA_HC_MIX");
    return v && !strcmp(v, "rows");
}

/* The mix of n token rows: either partial dots (*part_out, *p_out chunks per token: the decode
 * path) or the mix matrix (*mix_out, n x n_mix) from rmsnorm_noweight and the matmul op. */
static dsv4_status hc_mix(cuda_ctx *c, const dsv4_tensor *fn, const float *x_hc, uint32_t n, uint64_t hd,
                          uint32_t n_mix, float rms_eps, float **mix_out, double **part_out, uint32_t *p_out,
                          dsv4_error *err) {
    *mix_out = NULL;
    *part_out = NULL;
    *p_out = 0;
    if (fn->ne[0] != hd || fn->ne[1] != n_mix)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc: tensor %s is %llux%llu, expected %llux%u",
                         fn->name ? fn->name : "?", (unsigned long long)fn->ne[0],
                         (unsigned long long)fn->ne[1], (unsigned long long)hd, n_mix);
    if (hc_fast_mix(c, fn, x_hc, n, hd)) {
        const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, fn, err);
        if (!wd) return DSV4_ERR_INVALID;
        if (((uintptr_t)wd & 15) == 0) {
            const uint32_t P = (uint32_t)(hd / HCM_CHUNK);
            double *part = (double *)cu_scratch(c, CU_SLOT_FLAT, (size_t)n * P * n_mix * sizeof(double), err);
            if (!part) return DSV4_ERR_NOMEM;
            hc_mix_part_kernel<<<dim3(P, n < CU_GRID_Y ? n : CU_GRID_Y), RMS_THREADS, 0, c->stream>>>(
                x_hc, wd, fn->row_bytes, n, (uint32_t)hd, n_mix, rms_eps, part);
            *part_out = part;
            *p_out = P;
            return cu_launched(err, "hc mix");
        }
    }
    float *mix = (float *)cu_scratch(c, CU_SLOT_MIX, (size_t)n * n_mix * sizeof(float), err);
    if (!mix) return DSV4_ERR_NOMEM;
    *mix_out = mix;
    if (hc_mix_tc_takes(c, fn, n)) { /* a prefill chunk: one read of the rows (cuda_hc_mix_tc.cuh) */
        const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, fn, err);
        if (!wd) return DSV4_ERR_INVALID;
        if (dsv4_cuda_hc_mix_tc_ok(x_hc, hd, n, wd, fn->row_bytes, n_mix)) {
            const int rc = dsv4_cuda_hc_mix_tc((dsv4_cuda_stream)c->stream, x_hc, hd, n, wd, fn->row_bytes,
                                               n_mix, rms_eps, mix);
            if (rc != 0)
                return dsv4_fail(err, DSV4_ERR_IO, "hc mix (tf32): %s", cudaGetErrorString((cudaError_t)rc));
            c->hc_mix_tc++;
            return DSV4_OK;
        }
    }
    /* a prefill chunk: the rmsnorm inside the product's f16 conversion (same bytes, no f32 rows) */
    dsv4_status st = hc_mix_exact_env()
                         ? DSV4_ERR_UNSUPPORTED
                         : cu_matmul_blas_rms(c, fn, n_mix, x_hc, hd, n, rms_eps, mix, n_mix, err);
    if (st != DSV4_ERR_UNSUPPORTED) return st;
    dsv4_error_clear(err);
    float *flat = (float *)cu_scratch(c, CU_SLOT_FLAT, (size_t)n * hd * sizeof(float), err);
    if (!flat) return DSV4_ERR_NOMEM;
    st = cu_rms_rows(c, x_hc, NULL, n, (uint32_t)hd, rms_eps, flat, err);
    if (st == DSV4_OK) st = cu_matmul(c, fn, 0, n_mix, flat, hd, n, mix, n_mix, err);
    return st;
}

static dsv4_status hc_vecs(cuda_ctx *c, const dsv4_tensor *scale, uint32_t n_scale, const dsv4_tensor *base,
                           uint32_t n_base, const float **sv, const float **bv, const char *what,
                           dsv4_error *err) {
    if (scale->ne[0] < n_scale || base->ne[0] < n_base || scale->type != DSV4_TYPE_F32 ||
        base->type != DSV4_TYPE_F32)
        return dsv4_fail(err, DSV4_ERR_INVALID, "%s: cannot read scale %s / base %s", what,
                         scale->name ? scale->name : "?", base->name ? base->name : "?");
    *sv = (const float *)cu_weight_dev(c, scale, err);
    if (!*sv) return DSV4_ERR_INVALID;
    *bv = (const float *)cu_weight_dev(c, base, err);
    return *bv ? DSV4_OK : DSV4_ERR_INVALID;
}

/* ---- one-launch decode pre step (hc_pre / hc_pre_norm, one token, DSV4_CUDA_HC_FAST) ---- */

#define HCO_STAGE_BYTES (48u * 1024u) /* partials staged in shared memory up to this size */

/* Grid of P = hd / 256 blocks. Every block writes its partial dots (hc_mix_part_token, the decode
 * mix kernel's code); the last block to finish (a ticket it puts back to 0, so every launch, replays
 * of a recorded step included, finds it at 0) then does hc_weights_sum_kernel<false>'s work for
 * the whole row (NORM: hc_pre_norm_kernel's: u kept in shared memory, then the RMSNorm), with the
 * same expressions in the same order: the partials summed in block order (staged in shared memory
 * first when they fit: one round trip to L2), the split from hc_split_warp. */
template <bool NORM>
__global__ void __launch_bounds__(RMS_THREADS)
    hc_pre_one_kernel(const float *x, const uint8_t *fn, uint64_t fn_row_bytes, uint32_t n_hc,
                      uint32_t n_embd, float rms_eps, double *part, unsigned *ticket, bool stage,
                      const float *scale, const float *base, const float *norm_w, uint32_t iters, float eps,
                      float *split_out, float *y) {
    cu_pdl_enter();
    extern __shared__ float4 hco_dyn[]; /* NORM: u (n_embd floats); first: the staged partials */
    __shared__ float mix[2 * HC_MAX + HC_MAX * HC_MAX];
    __shared__ float wts[2 * HC_MAX + HC_MAX * HC_MAX];
    __shared__ double red[RMS_THREADS / 32];
    __shared__ bool last;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc, P = gridDim.x;
    /* The last block reads the split's scale/base and the norm weight after the grid-wide sum: pull
     * them into L2 now (each block a slice), so the tail's loads do not wait on DRAM. */
    if (threadIdx.x < 32) {
        const uint32_t lines = (n_embd * 4 + 127) / 128, per = (lines + P - 1) / P;
        const uint32_t l = blockIdx.x * per + threadIdx.x;
        if (NORM && threadIdx.x < per && l < lines) cu_prefetch_l2((const char *)norm_w + (uint64_t)l * 128);
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            cu_prefetch_l2(scale);
            for (uint32_t b = 0; b < n_mix * 4; b += 128) cu_prefetch_l2((const char *)base + b);
        }
    }
    hc_mix_part_token(x, fn, fn_row_bytes, n_hc * n_embd, n_mix, rms_eps, part, red);
    __threadfence(); /* this block's partials, device-wide, before its ticket */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(ticket, 1u) == P - 1;
        if (last) atomicExch(ticket, 0u);
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const uint32_t np = P * n_mix;
    double *st = (double *)hco_dyn;
    if (stage) {
#pragma unroll 8 /* the loads in flight together, not one L2 round trip each */
        for (uint32_t i = threadIdx.x; i < np; i += blockDim.x) st[i] = __ldcg(part + i);
        __syncthreads();
    }
    for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x) {
        double acc = 0.0;
        if (stage) {
#pragma unroll 16
            for (uint32_t p = 0; p < P; p++) acc += st[(uint64_t)p * n_mix + m];
        } else {
#pragma unroll 16
            for (uint32_t p = 0; p < P; p++) acc += __ldcg(part + (uint64_t)p * n_mix + m);
        }
        mix[m] = (float)acc;
    }
    __syncthreads();
    if (threadIdx.x < 32) hc_split_warp(mix, scale, base, n_hc, iters, eps, wts);
    __syncthreads();
    if (split_out)
        for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x) split_out[m] = wts[m];
    /* u[d] = sum_h x[h][d] * w[h], h in order; 4 dims per thread and iteration (float4 loads, all in
     * flight together: one block does the whole row) when n_embd % 4 == 0 */
    float *u_s = (float *)hco_dyn; /* the staged partials are dead */
    if (n_embd % 4 == 0) {
        const uint32_t n4 = n_embd / 4;
#pragma unroll 4
        for (uint32_t g = threadIdx.x; g < n4; g += blockDim.x) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (uint32_t h = 0; h < n_hc; h++) {
                const float4 v = *(const float4 *)(x + (uint64_t)h * n_embd + 4 * g);
                const float w = wts[h];
                acc.x += v.x * w;
                acc.y += v.y * w;
                acc.z += v.z * w;
                acc.w += v.w * w;
            }
            if (NORM) {
                ((float4 *)u_s)[g] = acc;
            } else {
                y[4 * g] = acc.x;
                y[4 * g + 1] = acc.y;
                y[4 * g + 2] = acc.z;
                y[4 * g + 3] = acc.w;
            }
        }
    } else {
#pragma unroll 4
        for (uint32_t d = threadIdx.x; d < n_embd; d += blockDim.x) {
            float acc = 0.0f;
            for (uint32_t h = 0; h < n_hc; h++) acc += x[(uint64_t)h * n_embd + d] * wts[h];
            if (NORM)
                u_s[d] = acc;
            else
                y[d] = acc;
        }
    }
    if (NORM) {
        __syncthreads();
        const double tot = cu_row_sumsq(u_s, n_embd, true, red);
        const float sc = 1.0f / sqrtf((float)(tot / (double)n_embd) + rms_eps);
#pragma unroll 16 /* every norm weight load in flight at once */
        for (uint32_t d = threadIdx.x; d < n_embd; d += blockDim.x) y[d] = u_s[d] * sc * norm_w[d];
    }
}

/* ---- register-tail decode pre step (DSV4_CUDA_HC_TAIL=multi|last; n_hc = 4, n_embd = 1024 KE) ----
 *
 * hc_pre_one_kernel's work and values with a shorter path after the grid-wide sum. The row layout
 * and sum orders are in cuda_hc_tail_units.cuh (checked on the host by tests/cuda/hc_tail_emu_check.cu):
 * thread t's float4 groups t + 256 k of the row are the ones cu_row_sumsq gives it, so phase 1 keeps
 * them in registers (64 floats) and the tail forms u from them (no reload of x); Σu² over u's groups
 * t + 256 e, e in order, is cu_row_sumsq's tree over u (so no u in shared memory). A ninth warp
 * (the split warp, HCT_BLOCK) holds no part of the row: after the mix it computes the combine matrix
 * and stores it from its registers, while the 8 row warps each compute pre/post (the same
 * per-element function in every warp: the same bits) and go on to u, Σu² and y without waiting
 * for it (their barriers are the named barrier of the row threads, hct_row_sync). scale, base, the
 * norm weight and the first mix weights are loaded before the PDL wait (weights only). Every
 * expression (Σx², s, the dots, the block-order sum of the partials, the split, u, Σu², the scale,
 * y = u * s * w) is the one hc_pre_one_kernel uses, in the same order, in a file built with
 * --fmad=false: bitwise the same outputs.
 *
 * grid = false ("last"): as today, the last block to finish (ticket) does the tail alone.
 * grid = true ("multi"): every block waits at a grid-wide point (count + generation words, the count
 * put back to 0 by the last arrival, so graph replays find it at 0), then every block runs the tail
 * and writes the groups g % P == blockIdx.x of y (block 0 the split). Needs all P blocks resident at
 * once: the host launches it only when the occupancy API says P blocks fit on the device
 * (cu_hc_tail_init); otherwise hc_pre_one_kernel.
 *
 * Critical path after the last block's partials are stored (RT: an L2 round trip):
 *   today:  fence + ticket atomic (RT), fence, partial loads (RT), sum of 64 (dependent double adds),
 *           pre/post exp then comb softmax exp + 20 Sinkhorn iterations (one warp, in sequence),
 *           split store + x loads for u (64 KB into one SM: RT + ~0.5 us of L1<-L2 bandwidth),
 *           barrier, Σu² from shared memory, barrier, norm weight loads (RT), 16 KB of y from one SM.
 *   last:   fence + ticket atomic (RT), fence, partial loads (RT), sum of 64, comb || pre/post,
 *           u from registers, Σu² from registers, barrier, 16 KB of y from one SM.
 *   multi:  fence + count atomic (RT) + generation poll (<= RT), partial loads (RT), sum of 64,
 *           comb || pre/post, u from registers, Σu² from registers, barrier, 256 B of y per block.
 * Expected (not measured): ~2 us less per call for either (x reload, norm weight RT, the pre/post
 * exp off the path); multi trades the ticket for a poll (one RT more) against the y store spread.
 * Now (last): fence + ticket atomic (RT), fence, partial loads (RT), sum of 64, then the longer of
 *   the split warp (comb softmax + 39 Sinkhorn passes, 64 B store from registers) and the row warps
 *   (pre/post exp, u, Σu², barrier, y): the comb no longer runs before u, nor the split store after
 *   a barrier. Measured (ncu, H200, 4-layer 4096-wide model; with hcu_recip's test moved off the
 *   pass chain): hc_pre_norm 11.71 -> 10.40 us, hc_pre 11.07 -> 10.14 us per call, same bytes. A
 *   matrix held whole in every lane (no shuffles, 4 reciprocals per pass) measured slower: the
 *   reciprocals' range-test branches serialise them, and branch-free the 4 MUFU.RCP per pass and 4x
 *   the adds and products still cost more than the 4 shuffles (6,854 vs 5,880 cycles, 20 iterations). */

#define HCT_MAX_P 64u /* blocks (hd / 256) the staged partials are sized for (n_embd <= 4096) */
#define HCT_NMIX (2 * HCT_NH + HCT_NH * HCT_NH)
#define HCT_BLOCK (HCT_THREADS + 32) /* the row threads, then the split warp (holds no part of the row) */

__device__ __forceinline__ unsigned hct_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* The row's Q8_K blocks (quant_act_q8_k's bytes; act_q8_k_block's operations) from the row threads'
 * float4 groups t + 256 e: block b = the 64 groups of threads 64 m .. 64 m + 63 (two warps) for one e.
 * Each warp picks its largest |v| (the lowest index among ties, as the CPU's strict scan), the two
 * warps of a block meet through shared memory, then every thread writes its 4 codes and the 4-lane
 * groups their 16-element sums. All 256 row threads call it (one named barrier). */
template <uint32_t KE>
__device__ __forceinline__ void hct_q8_k(const float4 (&yv)[KE], uint8_t *yk, int only_e = -1,
                                         int only_m = -1) {
    __shared__ float s_am[HCT_THREADS / 32][KE], s_mv[HCT_THREADS / 32][KE];
    __shared__ int s_ai[HCT_THREADS / 32][KE];
    const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float am[KE], mv[KE];
    int ai[KE];
#pragma unroll
    for (uint32_t e = 0; e < KE; e++) {
        if (only_e >= 0 && e != (uint32_t)only_e) continue; /* the cluster tail: one block a CTA */
        const uint32_t g = hct_group(t, e);
        const float v[4] = {yv[e].x, yv[e].y, yv[e].z, yv[e].w};
        am[e] = 0.0f, mv[e] = 0.0f, ai[e] = 0x7fffffff;
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (fabsf(v[k]) > am[e]) am[e] = fabsf(v[k]), mv[e] = v[k], ai[e] = (int)(4 * (g & 63) + k);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float am2 = __shfl_xor_sync(0xffffffffu, am[e], o);
            const float mv2 = __shfl_xor_sync(0xffffffffu, mv[e], o);
            const int ai2 = __shfl_xor_sync(0xffffffffu, ai[e], o);
            if (am2 > am[e] || (am2 == am[e] && ai2 < ai[e])) am[e] = am2, mv[e] = mv2, ai[e] = ai2;
        }
        if (lane == 0) s_am[warp][e] = am[e], s_mv[warp][e] = mv[e], s_ai[warp][e] = ai[e];
    }
    hct_row_sync();
#pragma unroll
    for (uint32_t e = 0; e < KE; e++) {
        if (only_e >= 0 && e != (uint32_t)only_e) continue;
        const float am2 = s_am[warp ^ 1][e], mv2 = s_mv[warp ^ 1][e];
        const int ai2 = s_ai[warp ^ 1][e];
        if (am2 > am[e] || (am2 == am[e] && ai2 < ai[e])) am[e] = am2, mv[e] = mv2, ai[e] = ai2;
        const uint32_t g = hct_group(t, e);
        uint8_t *ob = yk + (uint64_t)(g >> 6) * 292;
        const float v[4] = {yv[e].x, yv[e].y, yv[e].z, yv[e].w};
        uint32_t pk = 0;
        int sum = 0;
        float d = 0.0f;
        if (am[e] != 0.0f) { /* the same in both warps of the block */
            const float iscale = __fdiv_rn(-127.0f, mv[e]);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int q = clamp_i8(__float2int_rn(__fmul_rn(iscale, v[k])));
                sum += q;
                pk |= (uint32_t)(q & 0xff) << (8 * k);
            }
            d = __fdiv_rn(1.0f, iscale);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* 16 elements = the 4 lanes 4j .. 4j + 3 */
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (only_m >= 0 && (int)(t >> 6) != only_m) continue; /* another CTA's block (cluster tail) */
        *(uint32_t *)(ob + 4 + 4 * (g & 63)) = pk;
        if ((g & 3) == 0) *(int16_t *)(ob + 260 + 2 * ((g & 63) >> 2)) = (int16_t)sum;
        if ((g & 63) == 0) *(float *)ob = d;
    }
}

/* One output of the HC post, stream dst at one position: fd * post[dst] + comb[src][dst] * xs[src] for
 * src in order (hc_post_kernel's expression; this file is built with --fmad=false). NH: n_hc at
 * compile time, 0: n_hc. */
template <uint32_t NH>
__device__ __forceinline__ float hc_post_value(float fd, const float *post, const float *comb,
                                               const float *xs, uint32_t n_hc, uint32_t dst) {
    const uint32_t nh = NH ? NH : n_hc;
    float acc = fd * post[dst];
    for (uint32_t src = 0; src < nh; src++) acc += comb[src * nh + dst] * xs[src];
    return acc;
}

/* The previous sublayer's HC post folded into this pre step (hc_post_pre_norm): x is not read but
 * formed, x[h][d] = f[d] * post[h] + sum over src of comb[src][h] * x_old[src][d] (hc_post_kernel's
 * expression in its order, in this file's --fmad=false build: the same bits), post and comb from
 * split_old; each block also writes its chunk of x (the post's output) to out. */
struct hct_post {
    const float *f, *x_old, *split_old;
    float *out;
};

/* Four consecutive values of stream h at d0..d0+3 of the post's output: f4 = f[d0..], o[src] =
 * x_old[src][d0..]; pc = post[4] then comb[16]. */
__device__ __forceinline__ float4 hct_post4(const float4 f4, const float4 (&o)[HCT_NH], const float *pc,
                                            uint32_t h) {
    float v[4];
    const float fv[4] = {f4.x, f4.y, f4.z, f4.w};
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        float xs[HCT_NH];
#pragma unroll
        for (uint32_t src = 0; src < HCT_NH; src++)
            xs[src] = j == 0 ? o[src].x : j == 1 ? o[src].y : j == 2 ? o[src].z : o[src].w;
        v[j] = hc_post_value<HCT_NH>(fv[j], pc, pc + HCT_NH, xs, HCT_NH, h);
    }
    return make_float4(v[0], v[1], v[2], v[3]);
}

/* f[d0..d0+3] and the four streams' x_old there */
template <uint32_t NE>
__device__ __forceinline__ float4 hct_post_load(const hct_post &po, uint32_t d0, float4 (&o)[HCT_NH]) {
#pragma unroll
    for (uint32_t src = 0; src < HCT_NH; src++)
        o[src] = *(const float4 *)(po.x_old + (uint64_t)src * NE + d0);
    return *(const float4 *)(po.f + d0);
}

/* The cluster tail (CL > 0 CTAs, one thread-block cluster, DSV4_CUDA_HC_CLUSTER=1; sm_90): CTA r takes
 * mix chunks r CPC .. r CPC + CPC - 1 (the same per-chunk partials, hc_mix_dot's), keeps them in its
 * shared memory, and after a cluster barrier every CTA reads all of them through distributed shared
 * memory and sums them in chunk order (the one-block tail's sum): no fence, ticket or L2 round trip.
 * Every CTA then forms u and Σu² (it holds the whole row, as every block does) and writes only its
 * slice of y (hct_cl_mine: NE / 4 / CL float4 groups = one Q8_K block at NE = 4096, CL = 16) with that
 * slice's Q8_0 and Q8_K blocks, so the one-block tail's quantization is split CL ways; CTA 0 writes the
 * split. The same expressions in the same orders: the same bits as the one-block tail. */
/* the cluster barrier's halves and a double from CTA `rank`'s shared memory (sm_90; never run below) */
__device__ __forceinline__ void hct_cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void hct_cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ double hct_dsmem_ld(const double *p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    uint32_t r;
    double v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(r) : "memory");
    return v;
#else
    (void)p, (void)rank;
    return 0.0;
#endif
}

template <bool NORM, uint32_t KE, bool POST, uint32_t CL = 0>
__global__ void __launch_bounds__(HCT_BLOCK)
    hc_tail_kernel(const float *x, const uint8_t *fn, uint64_t fn_row_bytes, float rms_eps, double *part,
                   unsigned *sync, bool grid, const float *scale, const float *base, const float *norm_w,
                   uint32_t iters, float eps, float *split_out, float *y, uint8_t *yq, uint8_t *yk,
                   hct_post po) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    if (CL > 0) __trap(); /* clusters need sm_90: the host never launches it there */
#endif
    cu_pdl_trigger();
    constexpr uint32_t NE = 1024 * KE, HD = HCT_NH * NE, NX = HCT_NH * KE, W = HCT_THREADS / 32;
    constexpr uint32_t CPC = CL ? HD / HCM_CHUNK / CL : 1; /* mix chunks a CTA */
    static_assert(CL == 0 || (NORM && CL == 4 * KE && (HD / HCM_CHUNK) % (CL ? CL : 1) == 0),
                  "hc_tail_kernel: the cluster tail normalizes, a Q8_K block a CTA, whole chunks a CTA");
    __shared__ double st[HCT_MAX_P * HCT_NMIX];
    __shared__ double cpart[CL ? CPC * HCT_NMIX : 1]; /* the cluster tail: this CTA's chunk partials */
    __shared__ float mix[HCT_NMIX], s_base[HCT_NMIX], s_scale[3];
    __shared__ double red[HCT_THREADS / 32];
    __shared__ bool go;
    const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5, P = CL ? HD / HCM_CHUNK : gridDim.x;
    const bool row = warp < W; /* a row thread; warp W is the split warp */
    const bool split = split_out && (CL ? blockIdx.x == 0 : (!grid || blockIdx.x == 0));
    /* Before the wait only weights and arguments (cuda_pdl.cuh): their loads overlap the end of the
     * kernel before. Nothing global is written, and x, part and sync are touched, after it. */
    if (t < HCT_NMIX) s_base[t] = base[t];
    if (t < 3) s_scale[t] = scale[t];
    float4 nw[KE];
#pragma unroll
    for (uint32_t e = 0; e < KE; e++)
        if (NORM && row &&
            (CL ? hct_cl_mine(hct_group(t, e), blockIdx.x, KE, CL)
                : hct_writes(hct_group(t, e), P, blockIdx.x, grid)))
            nw[e] = ((const float4 *)norm_w)[hct_group(t, e)];
    uint4 qp[CPC][HCM_PREFETCH];
#pragma unroll
    for (uint32_t j = 0; j < CPC; j++) {
        const uint32_t i0 = (blockIdx.x * CPC + j) * HCM_CHUNK + lane * 8;
#pragma unroll
        for (uint32_t i = 0; i < HCM_PREFETCH; i++)
            if (row && warp + i * W < HCT_NMIX)
                qp[j][i] = *(const uint4 *)(fn + (uint64_t)(warp + i * W) * fn_row_bytes + (uint64_t)i0 * 2);
    }
    cu_pdl_wait();
    __shared__ float s_pc[HCT_NH + HCT_NH * HCT_NH]; /* POST: the previous split's post and comb */
    if (POST) {
        if (t < HCT_NH + HCT_NH * HCT_NH) s_pc[t] = po.split_old[HCT_NH + t];
        __syncthreads();
    }
    /* phase 1 (row threads): hc_mix_part_token with the row's groups kept in registers */
    float4 xv[NX];
    if (row) {
        float4 a, b;
        const uint32_t i0 = blockIdx.x * CPC * HCM_CHUNK + lane * 8; /* this CTA's first chunk */
        if (POST) {
            /* thread t's groups t + 256 k, k = h * KE + e: stream h at d0 = 4 (t + 256 e) */
#pragma unroll
            for (uint32_t e = 0; e < KE; e++) {
                float4 o[HCT_NH];
                const float4 f4 = hct_post_load<NE>(po, 4 * hct_group(t, e), o);
#pragma unroll
                for (uint32_t h = 0; h < HCT_NH; h++) xv[hct_slot(h, e, KE)] = hct_post4(f4, o, s_pc, h);
            }
            const uint32_t h0 = i0 / NE, d0 = i0 % NE; /* the 8 values of the dots: one stream */
            float4 o[HCT_NH];
            float4 f4 = hct_post_load<NE>(po, d0, o);
            a = hct_post4(f4, o, s_pc, h0);
            f4 = hct_post_load<NE>(po, d0 + 4, o);
            b = hct_post4(f4, o, s_pc, h0);
            if (warp == 0) { /* this block's chunk of the post's output */
                *(float4 *)(po.out + i0) = a;
                *(float4 *)(po.out + i0 + 4) = b;
            }
        } else {
            a = *(const float4 *)(x + i0), b = *(const float4 *)(x + i0 + 4);
#pragma unroll
            for (uint32_t k = 0; k < NX; k++) xv[k] = ((const float4 *)x)[hct_group(t, k)];
        }
        double ss = 0.0;
#pragma unroll
        for (uint32_t k = 0; k < NX; k++) ss = hct_sq4(ss, xv[k].x, xv[k].y, xv[k].z, xv[k].w);
        const double tot = hct_finish(ss, red);
        const float s = 1.0f / sqrtf((float)(tot / (double)HD) + rms_eps);
#pragma unroll
        for (uint32_t j = 0; j < CPC; j++) {
            const uint32_t ij = i0 + j * HCM_CHUNK;
            if (j > 0) { /* the cluster tail's further chunks: their 8 values, as chunk 0's above */
                if (POST) {
                    const uint32_t h0 = ij / NE, d0 = ij % NE;
                    float4 o[HCT_NH];
                    float4 f4 = hct_post_load<NE>(po, d0, o);
                    a = hct_post4(f4, o, s_pc, h0);
                    f4 = hct_post_load<NE>(po, d0 + 4, o);
                    b = hct_post4(f4, o, s_pc, h0);
                    if (warp == 0) {
                        *(float4 *)(po.out + ij) = a;
                        *(float4 *)(po.out + ij + 4) = b;
                    }
                } else {
                    a = *(const float4 *)(x + ij), b = *(const float4 *)(x + ij + 4);
                }
            }
            const float f[8] = {a.x * s, a.y * s, a.z * s, a.w * s, b.x * s, b.y * s, b.z * s, b.w * s};
            double *dst = CL ? cpart + j * HCT_NMIX : part + (uint64_t)blockIdx.x * HCT_NMIX;
#pragma unroll
            for (uint32_t i = 0; i < HCM_PREFETCH; i++)
                if (warp + i * W < HCT_NMIX) hc_mix_dot_to(qp[j][i], f, lane, dst + warp + i * W);
            for (uint32_t m = warp + HCM_PREFETCH * W; m < HCT_NMIX; m += W)
                hc_mix_dot_to(*(const uint4 *)(fn + (uint64_t)m * fn_row_bytes + (uint64_t)ij * 2), f, lane,
                              dst + m);
        }
    }
    /* the grid-wide sum */
    const uint32_t np = P * HCT_NMIX;
    if (CL) { /* the cluster's chunk partials: a cluster barrier, then every CTA reads them all */
        hct_cluster_arrive();
        hct_cluster_wait(); /* every CTA's cpart written (release / acquire) */
#pragma unroll 8
        for (uint32_t i = t; i < np; i += HCT_BLOCK) {
            const uint32_t pc = i / HCT_NMIX, m = i % HCT_NMIX;
            st[i] = hct_dsmem_ld(cpart + (pc % CPC) * HCT_NMIX + m, pc / CPC);
        }
        hct_cluster_arrive(); /* done with the others' shared memory; no CTA leaves before every arrival */
        __syncthreads();
    } else {
        __threadfence(); /* this block's partials, device-wide, before it arrives */
        __syncthreads();
        if (t == 0) {
            if (grid) {
                const unsigned g0 = hct_ld_acquire(sync + 32); /* before arriving: the last bumps it after */
                if (atomicAdd(sync, 1u) == P - 1) {
                    atomicExch(sync, 0u);
                    __threadfence();
                    atomicAdd(sync + 32, 1u);
                } else {
                    while (hct_ld_acquire(sync + 32) == g0) __nanosleep(32);
                }
                go = true;
            } else {
                go = atomicAdd(sync, 1u) == P - 1;
                if (go) atomicExch(sync, 0u);
            }
        }
        __syncthreads();
        if (!go) return;
        __threadfence();
#pragma unroll 8 /* the loads in flight together */
        for (uint32_t i = t; i < np; i += HCT_BLOCK) st[i] = __ldcg(part + i);
        __syncthreads();
    }
    if (t < HCT_NMIX) {
        double acc = 0.0;
#pragma unroll 16
        for (uint32_t p = 0; p < P; p++) acc += st[(uint64_t)p * HCT_NMIX + t];
        mix[t] = (float)acc;
    }
    __syncthreads();
    /* From here the split warp and the row warps share no barrier: the combine matrix (the longest
     * chain, 39 Sinkhorn passes) runs beside u, Σu² and y instead of before them. */
    if (!row) { /* the split warp: the combine matrix, stored from its registers */
        const float cv = hc_comb4_warp(mix, s_scale, s_base, iters, eps);
        if (split && lane < HCT_NH * HCT_NH) split_out[2 * HCT_NH + lane] = cv;
        if (CL) hct_cluster_wait();
        return;
    }
    /* Every row warp: pre/post one per lane (each warp the same bits; warp 0 stores them), the four
     * pre weights to every lane by shuffles: no barrier between the mix and u. */
    const float pw =
        lane < 2 * HCT_NH ? hcu_pre_post(mix, s_scale, s_base, HCT_NH, eps, lane, hc_exp{}) : 0.0f;
    if (split && warp == 0 && lane < 2 * HCT_NH) split_out[lane] = pw;
    float wh[HCT_NH];
#pragma unroll
    for (uint32_t h = 0; h < HCT_NH; h++) wh[h] = __shfl_sync(0xffffffffu, pw, (int)h);
    /* u[d] = sum_h x[h][d] * w[h], h in order (hc_pre_one_kernel's float4 form) */
    float4 u[KE];
#pragma unroll
    for (uint32_t e = 0; e < KE; e++) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (uint32_t h = 0; h < HCT_NH; h++) {
            const float4 v = xv[hct_slot(h, e, KE)];
            const float w = wh[h];
            acc.x += v.x * w;
            acc.y += v.y * w;
            acc.z += v.z * w;
            acc.w += v.w * w;
        }
        u[e] = acc;
    }
    float4 *y4 = (float4 *)y;
    if (NORM) {
        double su = 0.0;
#pragma unroll
        for (uint32_t e = 0; e < KE; e++) su = hct_sq4(su, u[e].x, u[e].y, u[e].z, u[e].w);
        const double tu = hct_finish(su, red); /* red's phase-1 reads are several barriers back */
        const float sc = 1.0f / sqrtf((float)(tu / (double)NE) + rms_eps);
        float4 yv[KE];
#pragma unroll
        for (uint32_t e = 0; e < KE; e++) {
            if (CL) yv[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* another CTA's groups: not stored */
            if (CL ? hct_cl_mine(hct_group(t, e), blockIdx.x, KE, CL)
                   : hct_writes(hct_group(t, e), P, blockIdx.x, grid)) {
                const float4 v = make_float4(u[e].x * sc * nw[e].x, u[e].y * sc * nw[e].y,
                                             u[e].z * sc * nw[e].z, u[e].w * sc * nw[e].w);
                yv[e] = v;
                y4[hct_group(t, e)] = v;
                /* yq (the one-block tail only: this block writes every group): y's Q8_0 activation
                 * blocks, quant_act_q8_0's bytes (cuda_act_quant.cuh; the amax is an fmaxf reduction,
                 * order-free). Block b's 8 float4 groups are the 8 lanes t ^ 0..7 of this warp. */
                if (yq) act_q8_0_store_group(v, hct_group(t, e), yq);
            }
        }
        /* the one-block tail: every block; the cluster tail: this CTA's one (stream group e, warps 2m, 2m+1)
         */
        if (yk)
            hct_q8_k<KE>(yv, yk, CL ? (int)hct_cl_q8k_e(blockIdx.x) : -1,
                         CL ? (int)hct_cl_q8k_m(blockIdx.x) : -1);
        if (CL) hct_cluster_wait();
    } else {
#pragma unroll
        for (uint32_t e = 0; e < KE; e++)
            if (hct_writes(hct_group(t, e), P, blockIdx.x, grid)) y4[hct_group(t, e)] = u[e];
    }
}

template <bool NORM, uint32_t KE> static int hct_blocks_per_sm(void) {
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, hc_tail_kernel<NORM, KE, false>, HCT_BLOCK, 0) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return nb;
}

/* The most blocks of every hc_tail_kernel instance resident at once on this device (0: unknown,
 * the grid tail is never launched). */
/* The cluster tail's launch: one cluster of cl CTAs (the cluster size is a launch attribute). */
static void hct_cluster_cfg(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *at, uint32_t cl, cudaStream_t st) {
    *cfg = cudaLaunchConfig_t{};
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = cl, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
    cfg->gridDim = dim3(cl), cfg->blockDim = dim3(HCT_BLOCK), cfg->stream = st, cfg->attrs = at,
    cfg->numAttrs = 1;
}

/* Whether a cluster of the cluster-tail instance K (CL CTAs) can be resident on this device. */
static bool hct_cluster_fits(const void *k, uint32_t cl) {
    if (cl > 8 && cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    hct_cluster_cfg(&cfg, &at, cl, 0);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, k, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

void cu_hc_tail_init(cuda_ctx *c) {
    int nb = hct_blocks_per_sm<true, 1>();
    const int n[3] = {hct_blocks_per_sm<false, 1>(), hct_blocks_per_sm<true, 4>(),
                      hct_blocks_per_sm<false, 4>()};
    for (int i = 0; i < 3; i++)
        if (n[i] < nb) nb = n[i];
    c->hc_tail_resident = (uint32_t)nb * (uint32_t)c->caps.sm_count;
    /* DSV4_CUDA_HC_CLUSTER=1 (off by default: written in session 28, not yet run on a GPU): the one-block
     * tail's launches as the cluster tail, where the device runs thread-block clusters of its size */
    const char *hc = getenv("DSV4_CUDA_HC_CLUSTER");
    c->hc_cluster_ok = c->caps.cc_major >= 9 &&
                       hct_cluster_fits((const void *)hc_tail_kernel<true, 4, false, 16>, 16) &&
                       hct_cluster_fits((const void *)hc_tail_kernel<true, 4, true, 16>, 16) &&
                       hct_cluster_fits((const void *)hc_tail_kernel<true, 1, false, 4>, 4) &&
                       hct_cluster_fits((const void *)hc_tail_kernel<true, 1, true, 4>, 4);
    c->hc_cluster = hc && strcmp(hc, "1") == 0 && c->hc_cluster_ok;
}

/* The cluster tail: one cluster of 4 KE CTAs (cudaLaunchKernelEx). */
template <uint32_t KE, bool POST>
static cudaError_t hct_cluster_launch(cudaStream_t st, const float *x, const uint8_t *fn,
                                      uint64_t fn_row_bytes, float rms_eps, double *part, unsigned *sync,
                                      const float *scale, const float *base, const float *norm_w,
                                      uint32_t iters, float eps, float *split_out, float *y, uint8_t *yq,
                                      uint8_t *yk, hct_post po) {
    constexpr uint32_t CL = 4 * KE;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    hct_cluster_cfg(&cfg, &at, CL, st);
    return cudaLaunchKernelEx(&cfg, hc_tail_kernel<true, KE, POST, CL>, x, fn, fn_row_bytes, rms_eps, part,
                              sync, false, scale, base, norm_w, iters, eps, split_out, y, yq, yk, po);
}

/* The register-tail pre step when DSV4_CUDA_HC_TAIL asks for it and the shapes fit (n_hc = 4,
 * n_embd 1024 or 4096, aligned vectors; multi: the grid resident at once); *done says whether it
 * ran. The caller has checked hc_pre_one's conditions. po: the previous post folded in (the one-block
 * tail with the norm only; x_hc is then its output). */
static dsv4_status hc_tail(cuda_ctx *c, const uint8_t *wd, uint64_t fn_row_bytes, const float *sv,
                           const float *bv, const float *norm_w, const float *x_hc, uint32_t n_hc,
                           uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps, double *part,
                           float *y, float *split, uint8_t *yq, uint8_t *yk, const hct_post *po, bool *done,
                           dsv4_error *err) {
    *done = false;
    const uint32_t P = n_hc * n_embd / HCM_CHUNK;
    const bool grid = c->hc_tail == CU_HC_TAIL_MULTI;
    if (c->hc_tail == CU_HC_TAIL_OFF || !c->d_hc_tail || n_hc != HCT_NH ||
        (n_embd != 1024 && n_embd != 4096) || P > HCT_MAX_P || ((uintptr_t)y & 15) != 0 ||
        (norm_w && ((uintptr_t)norm_w & 15) != 0) || (grid && P > c->hc_tail_resident))
        return DSV4_OK;
    if (po && (grid || !norm_w || (((uintptr_t)po->f | (uintptr_t)po->x_old | (uintptr_t)po->out) & 15) != 0))
        return DSV4_OK;
    const hct_post pv = po ? *po : hct_post{NULL, NULL, NULL, NULL};
    unsigned *sync = c->d_hc_tail + (grid ? 0 : 64); /* the two modes keep their own words */
    if (grid || !norm_w) yq = yk = NULL;    /* the Q8 copies need the one-block tail (and the normed row) */
    if (c->hc_cluster && !grid && norm_w) { /* the cluster tail in place of the one-block tail */
        const cudaError_t e =
            n_embd == 4096
                ? (po ? hct_cluster_launch<4, true>
                      : hct_cluster_launch<4, false>)(c->stream, x_hc, wd, fn_row_bytes, rms_eps, part, sync,
                                                      sv, bv, norm_w, iters, hc_eps, split, y, yq, yk, pv)
                : (po ? hct_cluster_launch<1, true>
                      : hct_cluster_launch<1, false>)(c->stream, x_hc, wd, fn_row_bytes, rms_eps, part, sync,
                                                      sv, bv, norm_w, iters, hc_eps, split, y, yq, yk, pv);
        if (e != cudaSuccess) return cu_fail(err, e, "hc pre (cluster tail)");
        c->hc_tail_launches++;
        c->hc_cluster_launches++;
        *done = true;
        if (yq) cu_preq_set(c, y, n_embd, yq);
        if (yk) cu_preqk_set(c, y, n_embd, yk);
        return DSV4_OK;
    }
#define HCT_LAUNCH(NORM, KE, POST)                                                                           \
    hc_tail_kernel<NORM, KE, POST><<<P, HCT_BLOCK, 0, c->stream>>>(x_hc, wd, fn_row_bytes, rms_eps, part,    \
                                                                   sync, grid, sv, bv, norm_w, iters,        \
                                                                   hc_eps, split, y, yq, yk, pv)
    if (po && n_embd == 4096)
        HCT_LAUNCH(true, 4, true);
    else if (po)
        HCT_LAUNCH(true, 1, true);
    else if (norm_w && n_embd == 4096)
        HCT_LAUNCH(true, 4, false);
    else if (norm_w)
        HCT_LAUNCH(true, 1, false);
    else if (n_embd == 4096)
        HCT_LAUNCH(false, 4, false);
    else
        HCT_LAUNCH(false, 1, false);
#undef HCT_LAUNCH
    c->hc_tail_launches++;
    *done = true;
    const dsv4_status st = cu_launched(err, grid ? "hc pre (grid tail)" : "hc pre (register tail)");
    if (st == DSV4_OK && yq) cu_preq_set(c, y, n_embd, yq);
    if (st == DSV4_OK && yk) cu_preqk_set(c, y, n_embd, yk);
    return st;
}

/* The one-launch pre step when it applies (DSV4_CUDA_HC_FAST not 0, and the decode mix's
 * conditions: hc_fast_mix and aligned weights); *done says whether it ran. norm_w: NULL for
 * hc_pre (y = u), else hc_pre_norm's weight (y = the normed row). */
static dsv4_status hc_pre_one(cuda_ctx *c, const dsv4_tensor *fn, const float *sv, const float *bv,
                              const float *norm_w, const float *x_hc, uint32_t n_hc, uint32_t n_embd,
                              uint32_t iters, float rms_eps, float hc_eps, float *y, float *split,
                              const hct_post *po, bool *done, dsv4_error *err) {
    *done = false;
    cu_preq_clear(c); /* y is rewritten */
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    if (!c->hc_fast || !c->d_hc_ticket || n_hc == 0 || n_hc > HC_MAX || !hc_fast_mix(c, fn, x_hc, 1, hd) ||
        fn->ne[0] != hd || fn->ne[1] != n_mix)
        return DSV4_OK;
    const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, fn, err);
    if (!wd) return DSV4_ERR_INVALID;
    if (((uintptr_t)wd & 15) != 0) return DSV4_OK;
    const uint32_t P = (uint32_t)(hd / HCM_CHUNK);
    const size_t part_bytes = (size_t)P * n_mix * sizeof(double);
    double *part = (double *)cu_scratch(c, CU_SLOT_FLAT, part_bytes, err);
    if (!part) return DSV4_ERR_NOMEM;
    /* hc_pre_norm's row feeds Q8_0 products next (the attention set, the router + shared gate/up):
     * its activation blocks are written by the same kernel (cu_preq_*). The Q8_K blocks only where the
     * routed experts read the row: the FFN's pre step, which is the folded-post form (po) whenever the
     * one-block tail runs. In the attention's pre they had no reader and lengthened the one-block
     * tail, the kernel's critical path (session 28, bench/NOTES.md; DSV4_CUDA_PREQK_ALL=1 writes
     * them there too). The FFN's unfused pre leaves them to the moe op's quantizer (the same bytes). */
    uint8_t *yq = NULL, *yk = NULL; /* Q8_0 blocks, then (n_embd % 256 == 0) Q8_K blocks */
    if (norm_w && c->preq_on && n_embd % 32 == 0) {
        const size_t qb = (size_t)n_embd / 32 * 36,
                     kb = (po || c->preqk_all) && n_embd % 256 == 0 ? (size_t)n_embd / 256 * 292 : 0;
        yq = (uint8_t *)cu_scratch(c, CU_SLOT_PREQ, qb + kb, err);
        if (!yq) return DSV4_ERR_NOMEM;
        if (kb) yk = yq + qb; /* qb is a multiple of 4 */
    }
    dsv4_status st = hc_tail(c, wd, fn->row_bytes, sv, bv, norm_w, x_hc, n_hc, n_embd, iters, rms_eps, hc_eps,
                             part, y, split, yq, yk, po, done, err);
    if (st != DSV4_OK || *done || po) return st; /* the folded post has no other kernel: not done */
    const bool stage = part_bytes <= HCO_STAGE_BYTES;
    size_t smem = norm_w ? (size_t)n_embd * sizeof(float) : 0;
    if (stage && part_bytes > smem) smem = part_bytes;
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(norm_w ? hc_pre_one_kernel<true> : hc_pre_one_kernel<false>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return cu_fail(err, e, "hc pre (one launch) shared memory");
    }
    if (norm_w)
        hc_pre_one_kernel<true><<<P, RMS_THREADS, smem, c->stream>>>(x_hc, wd, fn->row_bytes, n_hc, n_embd,
                                                                     rms_eps, part, c->d_hc_ticket, stage, sv,
                                                                     bv, norm_w, iters, hc_eps, split, y);
    else
        hc_pre_one_kernel<false><<<P, RMS_THREADS, smem, c->stream>>>(x_hc, wd, fn->row_bytes, n_hc, n_embd,
                                                                      rms_eps, part, c->d_hc_ticket, stage,
                                                                      sv, bv, NULL, iters, hc_eps, split, y);
    *done = true;
    return cu_launched(err, "hc pre (one launch)");
}

/* ---- hc_pre ---- */

dsv4_status cu_hc_pre(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                      const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                      float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    if (n_hc == 0 || n_hc > HC_MAX)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc: %u streams (1..%d supported)", n_hc, HC_MAX);
    const float *sv = NULL, *bv = NULL;
    dsv4_status st = hc_vecs(c, scale, 3, base, n_mix, &sv, &bv, "hc", err);
    if (st != DSV4_OK || n == 0) return st;
    if (n == 1) {
        bool done;
        st = hc_pre_one(c, fn, sv, bv, NULL, x_hc, n_hc, n_embd, iters, rms_eps, hc_eps, u, split, NULL,
                        &done, err);
        if (st != DSV4_OK || done) return st;
    }
    float *mix;
    double *part;
    uint32_t P;
    if ((st = hc_mix(c, fn, x_hc, n, hd, n_mix, rms_eps, &mix, &part, &P, err)) != DSV4_OK) return st;
    hc_weights_sum_kernel<false><<<hc_sum_grid(n, n_embd), HCS_THREADS, 0, c->stream>>>(
        mix, part, P, x_hc, sv, bv, n, n_hc, n_embd, iters, hc_eps, split, u, hc_sum_vec());
    return cu_launched(err, "hc pre split and sum");
}

/* ---- hc_pre_norm (fused: hc_pre + the sublayer RMSNorm, one token) ---- */

/* One block: the token's split weights exactly as hc_weights_sum_kernel<false> computes them,
 * u[d] with its expression (kept in shared memory, never stored), then the rmsnorm op's sum of
 * squares over u (cu_row_sumsq: the same per-thread groups, butterfly and warp order) and
 * y = u * s * w as rms_kernel writes it. Every output is bitwise the unfused pair's; it saves
 * the rmsnorm launch and the u round trip. */
__global__ void __launch_bounds__(RMS_THREADS)
    hc_pre_norm_kernel(const float *mix_in, const double *part, uint32_t P, const float *x,
                       const float *scale, const float *base, const float *norm_w, uint32_t n_hc,
                       uint32_t n_embd, uint32_t iters, float eps, float rms_eps, float *split_out,
                       float *y) {
    extern __shared__ float u_s[]; /* n_embd floats, 16-byte aligned */
    __shared__ float mix[2 * HC_MAX + HC_MAX * HC_MAX];
    __shared__ float wts[2 * HC_MAX + HC_MAX * HC_MAX];
    __shared__ double red[RMS_THREADS / 32];
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x) {
        if (part) {
            const double *pp = part + m;
            double acc = 0.0;
#pragma unroll 16
            for (uint32_t p = 0; p < P; p++) acc += pp[(uint64_t)p * n_mix];
            mix[m] = (float)acc;
        } else {
            mix[m] = mix_in[m];
        }
    }
    __syncthreads();
    if (threadIdx.x < 32) hc_split_warp(mix, scale, base, n_hc, iters, eps, wts);
    __syncthreads();
    for (uint32_t m = threadIdx.x; m < n_mix; m += blockDim.x) split_out[m] = wts[m];
    for (uint32_t d = threadIdx.x; d < n_embd; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll 4
        for (uint32_t h = 0; h < n_hc; h++) acc += x[(uint64_t)h * n_embd + d] * wts[h];
        u_s[d] = acc;
    }
    __syncthreads();
    const double tot = cu_row_sumsq(u_s, n_embd, true, red);
    const float sc = 1.0f / sqrtf((float)(tot / (double)n_embd) + rms_eps);
    for (uint32_t d = threadIdx.x; d < n_embd; d += blockDim.x) y[d] = u_s[d] * sc * norm_w[d];
}

/* The gate (backend.h fused_available): one token, n_hc <= HC_MAX, the row fits shared memory,
 * an F32 norm weight; any numerics (the mix comes from the same producer as hc_pre's). */
bool cu_hc_pre_norm_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_hc, uint32_t n_embd,
                       uint32_t norm_type) {
    return n_tokens == 1 && n_hc >= 1 && n_hc <= HC_MAX && n_embd % 4 == 0 && norm_type == DSV4_TYPE_F32 &&
           (size_t)n_embd * sizeof(float) <= (size_t)c->caps.smem_per_block_optin;
}

dsv4_status cu_hc_pre_norm(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                           const dsv4_tensor *base, const dsv4_tensor *norm_w, const float *x_hc, uint32_t n,
                           uint32_t n_hc, uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                           float *u_normed, float *split, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    if (!cu_hc_pre_norm_ok(c, n, n_hc, n_embd, norm_w->type) || norm_w->ne[0] != n_embd)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc_pre_norm: %u tokens of %u x %u with norm %s", n, n_hc,
                         n_embd, norm_w->name ? norm_w->name : "?");
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    const float *sv = NULL, *bv = NULL;
    dsv4_status st = hc_vecs(c, scale, 3, base, n_mix, &sv, &bv, "hc_pre_norm", err);
    if (st != DSV4_OK) return st;
    const float *wd = (const float *)cu_weight_dev(c, norm_w, err);
    if (!wd) return DSV4_ERR_INVALID;
    bool done;
    st = hc_pre_one(c, fn, sv, bv, wd, x_hc, n_hc, n_embd, iters, rms_eps, hc_eps, u_normed, split, NULL,
                    &done, err);
    if (st != DSV4_OK || done) return st;
    float *mix;
    double *part;
    uint32_t P;
    if ((st = hc_mix(c, fn, x_hc, n, hd, n_mix, rms_eps, &mix, &part, &P, err)) != DSV4_OK) return st;
    const size_t smem = (size_t)n_embd * sizeof(float);
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(hc_pre_norm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return cu_fail(err, e, "hc_pre_norm shared memory");
    }
    hc_pre_norm_kernel<<<1, RMS_THREADS, smem, c->stream>>>(mix, part, P, x_hc, sv, bv, wd, n_hc, n_embd,
                                                            iters, hc_eps, rms_eps, split, u_normed);
    return cu_launched(err, "hc_pre_norm");
}

/* hc_post_pre_norm (backend.h): the register-tail kernel forms the post's output itself (hct_post)
 * and writes it beside the pre step's outputs. Gate: not switched off (DSV4_CUDA_HC_POST_PRE=0;
 * bitwise the unfused pair, session 12), one token, the
 * register tail in its one-block mode, n_hc = 4, n_embd 1024 or 4096, an F32 norm weight.
 * DSV4_ERR_UNSUPPORTED (nothing launched) where the kernel does not take the call. */
bool cu_hc_post_pre_norm_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_hc, uint32_t n_embd,
                            uint32_t norm_type) {
    /* DS4 numerics and not generic-only: hc_fast_mix's conditions for the register tail (session 17: in
     * EXACT the gate was open and every call declined at run time) */
    return c->hc_post_pre_on && n_tokens == 1 && c->hc_fast && c->numerics != DSV4_NUMERICS_EXACT &&
           !c->generic_only && c->hc_tail == CU_HC_TAIL_LAST && n_hc == HCT_NH &&
           (n_embd == 1024 || n_embd == 4096) && norm_type == DSV4_TYPE_F32;
}

dsv4_status cu_hc_post_pre_norm(void *vctx, const float *f, const float *x_hc, const float *split_old,
                                float *out_hc, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                const dsv4_tensor *base, const dsv4_tensor *norm_w, uint32_t n_hc,
                                uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps, float *u_normed,
                                float *split_new, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c);
    if (!cu_hc_post_pre_norm_ok(c, 1, n_hc, n_embd, norm_w->type) || norm_w->ne[0] != n_embd ||
        split_new == split_old || out_hc == x_hc)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "hc_post_pre_norm: not on the one-token register tail here");
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    const float *sv = NULL, *bv = NULL;
    dsv4_status st = hc_vecs(c, scale, 3, base, n_mix, &sv, &bv, "hc_post_pre_norm", err);
    if (st != DSV4_OK) return st;
    const float *wd = (const float *)cu_weight_dev(c, norm_w, err);
    if (!wd) return DSV4_ERR_INVALID;
    const hct_post po = {f, x_hc, split_old, out_hc};
    bool done = false;
    st = hc_pre_one(c, fn, sv, bv, wd, out_hc, n_hc, n_embd, iters, rms_eps, hc_eps, u_normed, split_new, &po,
                    &done, err);
    if (st == DSV4_OK && !done)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "hc_post_pre_norm: the register tail declined the shapes");
    return st;
}

/* ---- hc_post ---- */

/* Thread (d, t): token t's outputs dst = 0..n_hc-1 at dim d, so each input is read once (the
 * expression and its order per output are unchanged). */
template <uint32_t NH> /* NH: n_hc at compile time (registers, unrolled), 0: from the argument */
__global__ void hc_post_kernel(const float *f, uint32_t k, const float *f2, const float *x,
                               const float *split, uint32_t n, uint32_t n_hc_arg, uint32_t n_embd,
                               float *out) {
    cu_pdl_enter();
    const uint32_t n_hc = NH ? NH : n_hc_arg;
    const uint32_t d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_embd) return;
    const uint32_t hd = n_hc * n_embd, n_mix = 2 * n_hc + n_hc * n_hc;
    for (uint32_t t = blockIdx.y; t < n; t += gridDim.y) {
        const float *post = split + (uint64_t)t * n_mix + n_hc;
        const float *comb = post + n_hc;
        const float *xt = x + (uint64_t)t * hd;
        float xs[HC_MAX];
        for (uint32_t src = 0; src < n_hc; src++) xs[src] = xt[(uint64_t)src * n_embd + d];
        float fd;
        if (k) { /* hc_post_slots: f holds k slot rows per token, summed as moe_sum_kernel sums them;
                  * eight loads issued before their adds (not one L2 round trip per slot) */
            fd = 0.0f;
            for (uint32_t s0 = 0; s0 < k; s0 += 8) {
                float sv[8];
#pragma unroll
                for (uint32_t j = 0; j < 8; j++)
                    if (s0 + j < k) sv[j] = f[((uint64_t)t * k + s0 + j) * n_embd + d];
#pragma unroll
                for (uint32_t j = 0; j < 8; j++)
                    if (s0 + j < k) fd += sv[j];
            }
        } else {
            fd = f[(uint64_t)t * n_embd + d];
        }
        if (f2) fd = fd + f2[(uint64_t)t * n_embd + d]; /* hc_post_add: the add op's sum */
        for (uint32_t dst = 0; dst < n_hc; dst++)
            out[(uint64_t)t * hd + (uint64_t)dst * n_embd + d] =
                hc_post_value<NH>(fd, post, comb, xs, n_hc, dst);
    }
}

static dsv4_status hc_post_launch(cuda_ctx *c, const float *f, uint32_t k, const float *f2, const float *x_hc,
                                  const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd,
                                  float *out_hc, dsv4_error *err) {
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    if (!n || !hd) return DSV4_OK;
    if (hd > 0x7fffffffull)
        return dsv4_fail(err, DSV4_ERR_RANGE, "hc post: %u x %u values per token", n_hc, n_embd);
    if (n_hc > HC_MAX) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc post: %u streams", n_hc);
    const dim3 grid(cu_blocks(n_embd, 128), n < CU_GRID_Y ? n : CU_GRID_Y);
    if (n_hc == 4)
        hc_post_kernel<4><<<grid, 128, 0, c->stream>>>(f, k, f2, x_hc, split, n, n_hc, n_embd, out_hc);
    else
        hc_post_kernel<0><<<grid, 128, 0, c->stream>>>(f, k, f2, x_hc, split, n, n_hc, n_embd, out_hc);
    return cu_launched(err, k ? "hc post slots" : f2 ? "hc post add" : "hc post");
}

dsv4_status cu_hc_post(void *vctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                       uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err) {
    return hc_post_launch((cuda_ctx *)vctx, f, 0, NULL, x_hc, split, n, n_hc, n_embd, out_hc, err);
}

/* Fused hc_post_add (backend.h): the FFN's routed + shared sum inside the post, one launch less. */
dsv4_status cu_hc_post_add(void *vctx, const float *a, const float *b, const float *x_hc, const float *split,
                           uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err) {
    return hc_post_launch((cuda_ctx *)vctx, a, 0, b, x_hc, split, n, n_hc, n_embd, out_hc, err);
}

/* Fused hc_post_slots (backend.h, moe_sum_post): the routed slot sum and the shared add inside the
 * post, the moe's sum launch less. */
dsv4_status cu_hc_post_slots(void *vctx, const float *slots, uint32_t k, const float *b, const float *x_hc,
                             const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc,
                             dsv4_error *err) {
    if (k == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "hc_post_slots: no slots");
    return hc_post_launch((cuda_ctx *)vctx, slots, k, b, x_hc, split, n, n_hc, n_embd, out_hc, err);
}

/* ---- hc_head ---- */

dsv4_status cu_hc_head(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                       const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, float rms_eps,
                       float hc_eps, float *y, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    if (n_hc == 0 || n_hc > HC_MAX)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc head: %u streams (1..%d supported)", n_hc, HC_MAX);
    const float *sv = NULL, *bv = NULL;
    dsv4_status st = hc_vecs(c, scale, 1, base, n_hc, &sv, &bv, "hc head", err);
    if (st != DSV4_OK || n == 0) return st;
    float *mix;
    double *part;
    uint32_t P;
    if ((st = hc_mix(c, fn, x_hc, n, hd, n_hc, rms_eps, &mix, &part, &P, err)) != DSV4_OK) return st;
    hc_weights_sum_kernel<true><<<hc_sum_grid(n, n_embd), HCS_THREADS, 0, c->stream>>>(
        mix, part, P, x_hc, sv, bv, n, n_hc, n_embd, 0, hc_eps, NULL, y, hc_sum_vec());
    return cu_launched(err, "hc head weights and sum");
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_hc(const void **out) {
    out[0] = (const void *)(hc_tail_kernel<true, 1, false>);
    out[1] = (const void *)(hc_tail_kernel<true, 4, false>);
    out[2] = (const void *)(hc_tail_kernel<false, 1, false>);
    out[3] = (const void *)(hc_tail_kernel<false, 4, false>);
    out[4] = (const void *)hc_pre_one_kernel<true>;
    out[5] = (const void *)hc_pre_one_kernel<false>;
    out[6] = (const void *)hc_post_kernel<4>;
    out[7] = (const void *)hc_post_kernel<0>;
    out[8] = (const void *)(hc_tail_kernel<true, 1, true>);
    out[9] = (const void *)(hc_tail_kernel<true, 4, true>);
    out[10] = (const void *)(hc_tail_kernel<true, 1, false, 4>);
    out[11] = (const void *)(hc_tail_kernel<true, 1, true, 4>);
    out[12] = (const void *)(hc_tail_kernel<true, 4, false, 16>);
    out[13] = (const void *)(hc_tail_kernel<true, 4, true, 16>);
    return 14;
}
