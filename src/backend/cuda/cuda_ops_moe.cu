/* Router selection and routed experts on the device (spec model-moe-gguf-tokenizer.md §2), ports
 * of backend/cpu/cpu_moe.c: selection, weights and the expert products stay on the device (no
 * host round trip); token ids for hash layers come from the host array the graph passes. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_moe_grouped.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_router.cuh"
#include "backend/cuda/cuda_smallops_units.cuh"

#define ROUTER_THREADS 256

/* One block per token: router_block (cuda_router.cuh) with ROUTER_THREADS threads. Hash layers read
 * the token id by value (tk) for a few tokens, else from tok. */
__global__ void __launch_bounds__(ROUTER_THREADS)
    router_kernel(const float *logits, uint32_t n_expert, uint32_t k, const float *bias, const int32_t *hash,
                  const int32_t *tok, const cu_tok_arg tk, float scale, int32_t *sel, float *weights,
                  bool smem_slots) {
    cu_pdl_enter();
    extern __shared__ float sh[];
    const uint32_t t = blockIdx.x;
    const int32_t *row = hash ? hash + (uint64_t)(tok ? tok[t] : tk.v[t]) * k : NULL;
    router_block<ROUTER_THREADS>(logits + (uint64_t)t * n_expert, n_expert, k, bias, row, scale, sh,
                                 sel + (uint64_t)t * k, weights + (uint64_t)t * k, smem_slots);
}

dsv4_status cu_router_select(void *vctx, const float *logits, uint32_t n, uint32_t n_expert, uint32_t k,
                             const dsv4_tensor *bias, const dsv4_tensor *tid2eid, const int32_t *tokens,
                             float scale, int32_t *sel, float *weights, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (k == 0 || k > n_expert)
        return dsv4_fail(err, DSV4_ERR_INVALID, "router: %u of %u experts", k, n_expert);
    const float *bv = NULL;
    if (bias && !tid2eid) { /* the bias never applies to hash-routed layers */
        if (bias->ne[0] != n_expert || bias->type != DSV4_TYPE_F32)
            return dsv4_fail(err, DSV4_ERR_INVALID, "router: cannot use bias %s",
                             bias->name ? bias->name : "?");
        if (!(bv = (const float *)cu_weight_dev(c, bias, err))) return DSV4_ERR_INVALID;
    }
    const int32_t *hash = NULL, *dtok = NULL;
    if (tid2eid) {
        if (tid2eid->type != DSV4_TYPE_I32 || tid2eid->ne[0] != k)
            return dsv4_fail(err, DSV4_ERR_INVALID, "router: hash table %s must be I32 [%u, vocab]",
                             tid2eid->name ? tid2eid->name : "?", k);
        for (uint32_t t = 0; t < n; t++)
            if (tokens[t] < 0 || (uint64_t)tokens[t] >= tid2eid->ne[1])
                return dsv4_fail(err, DSV4_ERR_RANGE, "router: token %d outside hash table %s", tokens[t],
                                 tid2eid->name ? tid2eid->name : "?");
        if (!(hash = (const int32_t *)cu_weight_dev(c, tid2eid, err))) return DSV4_ERR_INVALID;
    }
    if (n == 0) return DSV4_OK;
    cu_tok_arg tk;
    memset(&tk, 0, sizeof tk);
    if (hash) { /* a few ids go by value: no upload, no wait on the staging buffer */
        if (n == 1 && c->step_capturing) { /* a recorded step reads its token when it runs */
            dtok = c->d_step_tok;
        } else if (n <= CU_TOK_INLINE) {
            memcpy(tk.v, tokens, (size_t)n * sizeof(int32_t));
        } else {
            dsv4_status st = cu_tokens(c, tokens, n, &dtok, err);
            if (st != DSV4_OK) return st;
        }
    }
    const size_t smem = (size_t)3 * n_expert * sizeof(float); /* p, s, the candidates */
    if (smem > 48 * 1024)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "router: %u experts (at most 4096 on CUDA)", n_expert);
    const char *sv = getenv("DSV4_CUDA_ROUTER_SMEM"); /* =0: the slots formed in global memory (A/B) */
    router_kernel<<<n, ROUTER_THREADS, smem, c->stream>>>(logits, n_expert, k, bv, hash, dtok, tk, scale, sel,
                                                          weights, !(sv && strcmp(sv, "0") == 0));
    return cu_launched(err, "router select");
}

/* ---- routed experts ---- */

/* mid[p][r] = silu(min(g, c)) * clamp(u, +-c) * w[p] (route weight before the down projection). */
__global__ void moe_mid_kernel(const float *g, const float *u, const float *w, uint64_t total, uint32_t ff,
                               float clamp, int clamp_on, float *mid) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float gv = g[i], uv = u[i];
    if (clamp_on) {
        if (gv > clamp) gv = clamp;
        if (uv > clamp) uv = clamp;
        if (uv < -clamp) uv = -clamp;
    }
    mid[i] = cu_silu(gv) * uv * w[i / ff];
}

/* moe_mid_kernel's values, quantized to Q8_K in the same kernel: one warp per block of 256 mid
 * values (ff % 256 == 0, so a block never straddles two pairs); the same expression, built with the
 * same flags as moe_mid_kernel, then act_q8_k_block, which dsv4_cuda_quant_act_rows also runs: the
 * bytes equal moe_mid_kernel + the Q8_K quantizer's. g and u are pairs * ff floats each. */
#define MIDQ_WARPS 8
__global__ void __launch_bounds__(MIDQ_WARPS * 32)
    moe_mid_q8k_kernel(const float *g, const float *u, const float *w, uint64_t nblocks, uint32_t ff,
                       float clamp, int clamp_on, uint8_t *midq) {
    cu_pdl_enter();
    const uint64_t b = (uint64_t)blockIdx.x * MIDQ_WARPS + (threadIdx.x >> 5);
    if (b >= nblocks) return; /* whole warps leave together */
    const int lane = threadIdx.x & 31;
    const uint64_t i0 = b * 256 + (uint64_t)lane * 8;
    const float wr = w[i0 / ff];
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float gv = g[i0 + j], uv = u[i0 + j];
        if (clamp_on) {
            if (gv > clamp) gv = clamp;
            if (uv > clamp) uv = clamp;
            if (uv < -clamp) uv = -clamp;
        }
        v[j] = cu_silu(gv) * uv * wr;
    }
    act_q8_k_block(v, lane, midq + b * 292);
}

/* moe_mid_q8k_kernel's bytes with a CTA per Q8_K block: each thread forms one mid value (the
 * double-precision exp of SiLU is the long part: one per thread instead of eight in a row), then
 * one warp quantizes the block from shared memory with the same unit. */
__global__ void __launch_bounds__(256)
    moe_mid_q8k_wide_kernel(const float *g, const float *u, const float *w, uint32_t ff, float clamp,
                            int clamp_on, uint8_t *midq) {
    __shared__ float mv[256];
    cu_pdl_enter();
    const uint64_t b = blockIdx.x, i = b * 256 + threadIdx.x;
    float gv = g[i], uv = u[i];
    if (clamp_on) {
        if (gv > clamp) gv = clamp;
        if (uv > clamp) uv = clamp;
        if (uv < -clamp) uv = -clamp;
    }
    mv[threadIdx.x] = cu_silu(gv) * uv * w[i / ff];
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = mv[lane * 8 + j];
    act_q8_k_block(v, lane, midq + b * 292);
}

/* DSV4_CUDA_MOE_MID=warp: the warp-per-block mid kernel (same bytes; read on every call). */
static bool moe_mid_wide(void) {
    const char *v = getenv("DSV4_CUDA_MOE_MID");
    return !(v && strcmp(v, "warp") == 0);
}
/* DSV4_CUDA_MOE_MID=fold: the mid formed by the gate/up launch's last warp per block (same bytes;
 * dsv4_cuda_matvec_experts_pair_mid), the mid kernel when the plan declines it. Read on every call. */
static bool moe_mid_fold(void) {
    const char *v = getenv("DSV4_CUDA_MOE_MID");
    return v && strcmp(v, "fold") == 0;
}

/* out[t][d] = sum over slots in order. */
__global__ void moe_sum_kernel(const float *y, uint32_t n, uint32_t k, uint32_t embd, float *out) {
    cu_pdl_enter();
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n * embd) return;
    const uint64_t t = i / embd, d = i % embd;
    float acc = 0.0f;
    for (uint32_t s = 0; s < k; s++) acc += y[(t * k + s) * embd + d];
    out[i] = acc;
}

/* y[p*out + r] = W[sel[p]][r] . act[p / act_div], p < n_pairs: the tuned matvec for a single
 * token when the shape allows, else the generic kernel. */
static dsv4_status expert_products(cuda_ctx *c, const dsv4_tensor *w, const uint8_t *wd, const int32_t *sel,
                                   uint32_t n, uint32_t k, const void *act, uint64_t act_stride,
                                   uint32_t act_div, float *y, dsv4_error *err) {
    const uint64_t in = w->ne[0], out = w->ne[1], n_expert = w->ne[2];
    if (n == 1 && cu_mv_ok(c, w->type, wd, w->row_bytes, in)) {
        const dsv4_status st =
            dsv4_cuda_matvec_experts(&c->mv, w->type, wd, (int64_t)in, (int64_t)out, (int64_t)n_expert, sel,
                                     (int)k, act, act_div == 1 ? (int64_t)act_stride : 0, y, c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* a shape the tuned kernel declines (nothing was launched) */
    }
    return cu_gemm_generic(c, w->type, wd, w->row_bytes, in, out, (int64_t)n_expert, sel, 0, out, act,
                           act_stride, act_div, n * k, y, out, err);
}

/* DSV4_CUDA_MOE_DECODE_FUSED=0 turns the fused one-token paths off (read on every call). */
static bool moe_decode_fused_enabled(void) {
    const char *v = getenv("DSV4_CUDA_MOE_DECODE_FUSED");
    return !(v && strcmp(v, "0") == 0);
}

/* DSV4_CUDA_MOE_DECODE=2launch: the 2-launch path (cuda_ops_moe_decode.cu) instead of the 5-launch
 * fused path below; =nopdl: the 2-launch path with an ordinary launch of its down kernel (same
 * bits). Not the default: on the H200 it took 58.8 us per q2 layer against 45.0 for the 5-launch
 * path (cuda_moe_decode_bench, session 3). Read on every call. */
static bool moe_decode_is(const char *what) {
    const char *v = getenv("DSV4_CUDA_MOE_DECODE");
    return v && strcmp(v, what) == 0;
}

/* One token in two launches (cuda_moe_decode.h); DSV4_ERR_UNSUPPORTED with nothing launched for
 * the shapes and types it does not take. */
static dsv4_status moe_decode_2l(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *down,
                                 const uint8_t *gd, const uint8_t *ud, const uint8_t *dd, const float *x,
                                 const int32_t *sel, const float *weights, uint32_t k, float clamp,
                                 float *out, dsv4_error *err) {
    /* DSV4_CUDA_MATVEC=generic (CPU-order products) excludes it as it excludes the tuned matvec */
    if (!c->moe_dec_ready || c->generic_only || !moe_decode_fused_enabled() ||
        !(moe_decode_is("2launch") || moe_decode_is("nopdl")) || k > 0x3fffffff)
        return DSV4_ERR_UNSUPPORTED;
    dsv4_cuda_moe_dec_args a;
    memset(&a, 0, sizeof a);
    a.gate_type = gate->type, a.down_type = down->type;
    a.gate = gd, a.up = ud, a.down = dd;
    a.n_embd = (int64_t)gate->ne[0], a.n_ff = (int64_t)gate->ne[1], a.n_expert = (int64_t)gate->ne[2];
    a.ids = sel, a.weights = weights, a.k = (int)k, a.x = x, a.clamp = clamp, a.out = out;
    a.no_pdl = moe_decode_is("nopdl");
    uint64_t grb = 0, drb = 0; /* the kernels assume packed rows and experts */
    if (down->ne[1] != gate->ne[0] || !dsv4_type_row_bytes(gate->type, gate->ne[0], &grb) ||
        grb != gate->row_bytes || !dsv4_type_row_bytes(down->type, down->ne[0], &drb) ||
        drb != down->row_bytes)
        return DSV4_ERR_UNSUPPORTED;
    if (dsv4_cuda_moe_dec_check(&c->moe_dec, &a, err) != DSV4_OK) return DSV4_ERR_UNSUPPORTED;
    a.mid = (float *)cu_scratch(c, CU_SLOT_MID, (size_t)k * a.n_ff * sizeof(float), err);
    a.midq = a.mid ? cu_scratch(c, CU_SLOT_MIDQ, (size_t)k * (a.n_ff / 256) * 292, err) : NULL;
    if (!a.midq) return DSV4_ERR_NOMEM;
    return dsv4_cuda_moe_decode(&c->moe_dec, &a, c->stream, err);
}

/* One token, K-quant experts, tuned matvec shapes: 5 launches instead of 7, the same bits as the
 * unfused path below (same kernels per row, same mid expression, same quantizer unit):
 *   quantize x -> gate and up in one matvec launch (2k slots) -> mid + Q8_K in one kernel ->
 *   down matvec -> slot sum.
 * DSV4_ERR_UNSUPPORTED with nothing launched when the shape or types do not fit. */
static dsv4_status moe_decode_fused(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *down,
                                    const uint8_t *gd, const uint8_t *ud, const uint8_t *dd, const float *x,
                                    const int32_t *sel, const float *weights, uint32_t k, float clamp,
                                    float *out, float *slots, const uint8_t *xq_pre, dsv4_error *err) {
    const uint64_t n_expert = gate->ne[2], in = gate->ne[0], ff = gate->ne[1], embd = down->ne[1];
    const bool kq = down->type == DSV4_TYPE_Q2_K || down->type == DSV4_TYPE_Q4_K ||
                    down->type == DSV4_TYPE_IQ2_XXS; /* down consumes Q8_K activations */
    if (!moe_decode_fused_enabled() || !kq || ff % 256 != 0 || k > 0x3fffffff ||
        !cu_mv_ok(c, gate->type, gd, gate->row_bytes, in) ||
        !cu_mv_ok(c, gate->type, ud, gate->row_bytes, in) ||
        !cu_mv_ok(c, down->type, dd, down->row_bytes, ff))
        return DSV4_ERR_UNSUPPORTED;
    const size_t mqb = cu_act_bytes(down->type, ff);
    float *gu = (float *)cu_scratch(c, CU_SLOT_G, (size_t)2 * k * ff * sizeof(float), err);
    uint8_t *mq = gu ? (uint8_t *)cu_scratch(c, CU_SLOT_MIDQ, mqb * k, err) : NULL;
    float *y = !mq     ? NULL
               : slots ? slots
                       : (float *)cu_scratch(c, CU_SLOT_Y, (size_t)k * embd * sizeof(float), err);
    if (!y) return DSV4_ERR_NOMEM;
    const void *xq = NULL;
    uint64_t xq_stride = 0;
    dsv4_status st = DSV4_OK;
    if (xq_pre && cu_act_bytes(gate->type, in) == in / 256 * 292)
        xq = xq_pre; /* hc_pre_norm wrote x's Q8_K blocks (the quantizer's bytes) */
    else
        st = cu_quant_rows(c, gate->type, x, in, in, 1, CU_SLOT_XQ, &xq, &xq_stride, err);
    if (st != DSV4_OK) return st;
    bool folded = false;
    if (moe_mid_fold()) { /* kq: the mid as Q8_K blocks */
        const dsv4_cuda_mv_mid mid = {weights, clamp, clamp > 1.0e-6f, mq};
        st = dsv4_cuda_matvec_experts_pair_mid(&c->mv, gate->type, gd, ud, (int64_t)in, (int64_t)ff,
                                               (int64_t)n_expert, sel, (int)k, xq, gu, &mid, c->stream, err);
        if (st == DSV4_OK)
            folded = true;
        else if (st != DSV4_ERR_UNSUPPORTED)
            return st;
        else
            dsv4_error_clear(err); /* declined, nothing launched: the pair and the mid kernel */
    }
    if (!folded) {
        st = dsv4_cuda_matvec_experts_pair(&c->mv, gate->type, gd, ud, (int64_t)in, (int64_t)ff,
                                           (int64_t)n_expert, sel, (int)k, xq, 0, gu, c->stream, err);
        if (st != DSV4_OK) return st; /* UNSUPPORTED: nothing launched but the x quantization (harmless) */
        const uint64_t nblocks = (uint64_t)k * ff / 256;
        if (moe_mid_wide())
            moe_mid_q8k_wide_kernel<<<(unsigned)nblocks, 256, 0, c->stream>>>(
                gu, gu + (size_t)k * ff, weights, (uint32_t)ff, clamp, clamp > 1.0e-6f, mq);
        else
            moe_mid_q8k_kernel<<<(unsigned)((nblocks + MIDQ_WARPS - 1) / MIDQ_WARPS), MIDQ_WARPS * 32, 0,
                                 c->stream>>>(gu, gu + (size_t)k * ff, weights, nblocks, (uint32_t)ff, clamp,
                                              clamp > 1.0e-6f, mq);
        if ((st = cu_launched(err, "moe mid q8_k")) != DSV4_OK) return st;
    }
    st = dsv4_cuda_matvec_experts(&c->mv, down->type, dd, (int64_t)ff, (int64_t)embd, (int64_t)n_expert, sel,
                                  (int)k, mq, (int64_t)mqb, y, c->stream, err);
    if (st != DSV4_OK || slots) return st; /* moe_slots: the post sums them */
    moe_sum_kernel<<<cu_blocks(embd, 256), 256, 0, c->stream>>>(y, 1, k, (uint32_t)embd, out);
    return cu_launched(err, "moe sum");
}

/* The device copies of the three expert tensors (false, with err set, if one has none). */
static bool experts_dev(const cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up,
                        const dsv4_tensor *down, const uint8_t **gd, const uint8_t **ud, const uint8_t **dd,
                        dsv4_error *err) {
    *gd = (const uint8_t *)cu_weight_dev(c, gate, err);
    *ud = *gd ? (const uint8_t *)cu_weight_dev(c, up, err) : NULL;
    *dd = *ud ? (const uint8_t *)cu_weight_dev(c, down, err) : NULL;
    return *dd != NULL;
}

dsv4_status cu_moe(void *vctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                   const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                   float clamp, float *out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_weight_type_ok(gate->type) || gate->type != up->type || !cu_weight_type_ok(down->type))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "moe: expert types %s/%s/%s are not supported (gate and up must match)",
                         dsv4_type_name(gate->type), dsv4_type_name(up->type), dsv4_type_name(down->type));
    const uint64_t n_expert = gate->ne[2], in = gate->ne[0], ff = gate->ne[1], embd = down->ne[1];
    if (up->ne[0] != in || up->ne[1] != ff || down->ne[0] != ff || up->ne[2] != n_expert ||
        down->ne[2] != n_expert)
        return dsv4_fail(err, DSV4_ERR_INVALID, "moe: expert tensors %s/%s/%s have mismatched shapes",
                         gate->name ? gate->name : "?", up->name ? up->name : "?",
                         down->name ? down->name : "?");
    if (n == 0 || k == 0) return DSV4_OK;
    /* the producer-side Q8_K record (cu_preq_*): for this call at most */
    const uint8_t *xq_pre = n == 1 && c->preqk_x && c->preqk_x == x && c->preqk_n == in ? c->preqk_q : NULL;
    c->preqk_x = NULL;
    const uint8_t *gd, *ud, *dd;
    if (!experts_dev(c, gate, up, down, &gd, &ud, &dd, err)) return DSV4_ERR_INVALID;
    /* prefill chunks: each expert's rows read once per tile of its tokens (same bits) */
    const dsv4_status gs =
        cu_moe_grouped(c, gate, up, down, gd, ud, dd, x, n, sel, weights, k, clamp, out, err);
    if (gs != DSV4_ERR_UNSUPPORTED) return gs;
    if (n == 1 && c->numerics == DSV4_NUMERICS_DS4) {
        dsv4_status fs = moe_decode_2l(c, gate, down, gd, ud, dd, x, sel, weights, k, clamp, out, err);
        if (fs != DSV4_ERR_UNSUPPORTED) return fs;
        dsv4_error_clear(err);
        fs = moe_decode_fused(c, gate, down, gd, ud, dd, x, sel, weights, k, clamp, out, NULL, xq_pre, err);
        if (fs != DSV4_ERR_UNSUPPORTED) return fs;
        dsv4_error_clear(err);
    }
    const uint64_t pairs = (uint64_t)n * k;
    float *g = (float *)cu_scratch(c, CU_SLOT_G, pairs * ff * sizeof(float), err);
    float *u = g ? (float *)cu_scratch(c, CU_SLOT_U, pairs * ff * sizeof(float), err) : NULL;
    float *mid = u ? (float *)cu_scratch(c, CU_SLOT_MID, pairs * ff * sizeof(float), err) : NULL;
    float *y = mid ? (float *)cu_scratch(c, CU_SLOT_Y, pairs * embd * sizeof(float), err) : NULL;
    if (!y) return DSV4_ERR_NOMEM;

    dsv4_status st;
    if (c->numerics == DSV4_NUMERICS_EXACT) { /* f32 activations, dequantized rows, double sums */
        st = cu_gemm_exact(c, gate->type, gd, gate->row_bytes, in, ff, (int64_t)n_expert, sel, 0, ff, x, in,
                           k, (uint32_t)pairs, g, ff, err);
        if (st == DSV4_OK)
            st = cu_gemm_exact(c, up->type, ud, up->row_bytes, in, ff, (int64_t)n_expert, sel, 0, ff, x, in,
                               k, (uint32_t)pairs, u, ff, err);
        if (st != DSV4_OK) return st;
        moe_mid_kernel<<<cu_blocks(pairs * ff, 256), 256, 0, c->stream>>>(
            g, u, weights, pairs * ff, (uint32_t)ff, clamp, clamp > 1.0e-6f, mid);
        if ((st = cu_launched(err, "moe mid")) != DSV4_OK) return st;
        st = cu_gemm_exact(c, down->type, dd, down->row_bytes, ff, embd, (int64_t)n_expert, sel, 0, embd, mid,
                           ff, 1, (uint32_t)pairs, y, embd, err);
        if (st != DSV4_OK) return st;
        moe_sum_kernel<<<cu_blocks((uint64_t)n * embd, 256), 256, 0, c->stream>>>(y, n, k, (uint32_t)embd,
                                                                                  out);
        return cu_launched(err, "moe sum");
    }
    const void *xq;
    uint64_t xq_stride;
    st = cu_quant_rows(c, gate->type, x, in, in, n, CU_SLOT_XQ, &xq, &xq_stride, err);
    if (st == DSV4_OK) st = expert_products(c, gate, gd, sel, n, k, xq, xq_stride, k, g, err);
    if (st == DSV4_OK) st = expert_products(c, up, ud, sel, n, k, xq, xq_stride, k, u, err);
    if (st != DSV4_OK) return st;
    moe_mid_kernel<<<cu_blocks(pairs * ff, 256), 256, 0, c->stream>>>(g, u, weights, pairs * ff, (uint32_t)ff,
                                                                      clamp, clamp > 1.0e-6f, mid);
    if ((st = cu_launched(err, "moe mid")) != DSV4_OK) return st;
    const void *mq;
    uint64_t mq_stride;
    st = cu_quant_rows(c, down->type, mid, ff, ff, (uint32_t)pairs, CU_SLOT_MIDQ, &mq, &mq_stride, err);
    if (st == DSV4_OK) st = expert_products(c, down, dd, sel, n, k, mq, mq_stride, 1, y, err);
    if (st != DSV4_OK) return st;
    moe_sum_kernel<<<cu_blocks((uint64_t)n * embd, 256), 256, 0, c->stream>>>(y, n, k, (uint32_t)embd, out);
    return cu_launched(err, "moe sum");
}

/* Gate of moe_sum_post (backend.h fused_available): one decode token whose experts take the 5-launch
 * decode path (K-quant down rows); the remaining shape checks run in cu_moe_slots, which declines
 * with nothing launched. */
bool cu_moe_slots_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t gate_type, uint32_t down_type,
                     uint64_t in, uint64_t ff) {
    uint64_t grb = 0, drb = 0; /* the tuned matvec's row conditions (cu_mv_ok) */
    return n_tokens == 1 && c->numerics == DSV4_NUMERICS_DS4 && moe_decode_fused_enabled() &&
           !moe_decode_is("2launch") && !moe_decode_is("nopdl") &&
           (down_type == DSV4_TYPE_Q2_K || down_type == DSV4_TYPE_Q4_K || down_type == DSV4_TYPE_IQ2_XXS) &&
           ff % 256 == 0 && dsv4_type_row_bytes(gate_type, in, &grb) && grb % 16 == 0 &&
           dsv4_type_row_bytes(down_type, ff, &drb) && drb % 16 == 0 &&
           cu_mv_ok(c, gate_type, NULL, grb, in) && cu_mv_ok(c, down_type, NULL, drb, ff);
}

/* moe_slots (backend.h): the 5-launch decode path without its slot-sum launch; the slot rows go to
 * `slots` for hc_post_slots to sum. DSV4_ERR_UNSUPPORTED (nothing launched) where that path does not
 * apply: the graph then runs moe. */
dsv4_status cu_moe_slots(void *vctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                         const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                         float clamp, float *slots, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_moe_slots_ok(c, n, gate->type, down->type, gate->ne[0], gate->ne[1]) ||
        !cu_weight_type_ok(gate->type) || gate->type != up->type || up->ne[0] != gate->ne[0] ||
        up->ne[1] != gate->ne[1] || down->ne[0] != gate->ne[1] || up->ne[2] != gate->ne[2] ||
        down->ne[2] != gate->ne[2] || k == 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "moe_slots: not on the one-token decode path here");
    const uint64_t in = gate->ne[0];
    const uint8_t *xq_pre = c->preqk_x && c->preqk_x == x && c->preqk_n == in ? c->preqk_q : NULL;
    const uint8_t *gd, *ud, *dd;
    if (!experts_dev(c, gate, up, down, &gd, &ud, &dd, err)) return DSV4_ERR_INVALID;
    const dsv4_status st =
        moe_decode_fused(c, gate, down, gd, ud, dd, x, sel, weights, k, clamp, NULL, slots, xq_pre, err);
    if (st != DSV4_ERR_UNSUPPORTED) c->preqk_x = NULL; /* taken (declined: the moe op takes it) */
    return st;
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_moe(const void **out) {
    out[0] = (const void *)router_kernel;
    out[1] = (const void *)moe_mid_q8k_kernel;
    out[2] = (const void *)moe_sum_kernel;
    out[3] = (const void *)moe_mid_q8k_wide_kernel;
    return 4;
}
