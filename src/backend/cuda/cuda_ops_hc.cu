/* Embedding and hyper-connection ops (spec model-attention-hc.md §3), ports of
 * backend/cpu/cpu_hc.c and cpu_hc_split (cpu_kernels.c) with the same float order. */
#include <cuda_fp16.h>

#include "backend/cuda/cuda_backend.h"

#define HC_NEG_INF (-1e30f)
#define HC_MAX 16

/* ---- embed ---- */

template <int T>
__global__ void embed_kernel(const uint8_t *emb, uint64_t row_bytes, const int32_t *tok, uint32_t n,
                             uint32_t n_hc, uint32_t n_embd, float *out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n * n_embd) return;
    const uint32_t t = (uint32_t)(i / n_embd), d = (uint32_t)(i % n_embd);
    const uint8_t *row = emb + (uint64_t)tok[t] * row_bytes;
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
    const int32_t *dtok = NULL;
    dsv4_status st = cu_tokens(c, tokens, n, &dtok, err);
    if (st != DSV4_OK) return st;
    const uint32_t n_embd = (uint32_t)emb->ne[0];
    const unsigned blocks = cu_blocks((uint64_t)n * n_embd, 256);
    if (emb->type == DSV4_TYPE_F32)
        embed_kernel<DSV4_TYPE_F32>
            <<<blocks, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, n, n_hc, n_embd, out_hc);
    else if (emb->type == DSV4_TYPE_F16)
        embed_kernel<DSV4_TYPE_F16>
            <<<blocks, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, n, n_hc, n_embd, out_hc);
    else
        embed_kernel<DSV4_TYPE_BF16>
            <<<blocks, 256, 0, c->stream>>>(ed, emb->row_bytes, dtok, n, n_hc, n_embd, out_hc);
    return cu_launched(err, "embed");
}

/* ---- shared pieces ---- */

/* u[t][d] = sum_h x[t][h][d] * w[t*w_stride + h], h in order. */
__global__ void wsum_kernel(const float *x, const float *w, uint32_t n, uint32_t n_hc, uint32_t n_embd,
                            uint32_t w_stride, float *out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)n * n_embd) return;
    const uint64_t t = i / n_embd, d = i % n_embd;
    const float *xt = x + t * n_hc * n_embd;
    const float *wt = w + t * w_stride;
    float acc = 0.0f;
    for (uint32_t h = 0; h < n_hc; h++) acc += xt[(uint64_t)h * n_embd + d] * wt[h];
    out[i] = acc;
}

/* flat = rmsnorm_noweight(x) (hd wide), mix = fn . flat (n x n_mix) in scratch. */
static dsv4_status hc_mix(cuda_ctx *c, const dsv4_tensor *fn, const float *x_hc, uint32_t n, uint64_t hd,
                          uint32_t n_mix, float rms_eps, float **mix_out, dsv4_error *err) {
    if (fn->ne[0] != hd || fn->ne[1] != n_mix)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc: tensor %s is %llux%llu, expected %llux%u",
                         fn->name ? fn->name : "?", (unsigned long long)fn->ne[0],
                         (unsigned long long)fn->ne[1], (unsigned long long)hd, n_mix);
    float *flat = (float *)cu_scratch(c, CU_SLOT_FLAT, (size_t)n * hd * sizeof(float), err);
    if (!flat) return DSV4_ERR_NOMEM;
    float *mix = (float *)cu_scratch(c, CU_SLOT_MIX, (size_t)n * n_mix * sizeof(float), err);
    if (!mix) return DSV4_ERR_NOMEM;
    dsv4_status st = cu_rms_rows(c, x_hc, NULL, n, (uint32_t)hd, rms_eps, flat, err);
    if (st == DSV4_OK) st = cu_matmul(c, fn, 0, n_mix, flat, hd, n, mix, n_mix, err);
    *mix_out = mix;
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

/* ---- hc_pre ---- */

/* One thread per token: cpu_hc_split. */
__global__ void hc_split_kernel(const float *mix_all, const float *scale, const float *base, uint32_t n,
                                uint32_t n_hc, uint32_t iters, float eps, float *out_all) {
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    const float *mix = mix_all + (uint64_t)t * n_mix;
    float *out = out_all + (uint64_t)t * n_mix;
    for (uint32_t i = 0; i < n_hc; i++) {
        const float z = mix[i] * scale[0] + base[i];
        out[i] = 1.0f / (1.0f + cu_expf(-z)) + eps;
    }
    for (uint32_t i = 0; i < n_hc; i++) {
        const uint32_t o = n_hc + i;
        const float z = mix[o] * scale[1] + base[o];
        out[o] = 2.0f / (1.0f + cu_expf(-z));
    }
    float *cm = out + 2 * n_hc;
    const float *m = mix + 2 * n_hc;
    const float *b = base + 2 * n_hc;
    for (uint32_t r = 0; r < n_hc; r++) {
        float mx = HC_NEG_INF;
        for (uint32_t j = 0; j < n_hc; j++) {
            const float v = m[r * n_hc + j] * scale[2] + b[r * n_hc + j];
            cm[r * n_hc + j] = v;
            if (v > mx) mx = v;
        }
        float sum = 0.0f;
        for (uint32_t j = 0; j < n_hc; j++) {
            const float v = cu_expf(cm[r * n_hc + j] - mx);
            cm[r * n_hc + j] = v;
            sum += v;
        }
        const float inv = 1.0f / sum;
        for (uint32_t j = 0; j < n_hc; j++) cm[r * n_hc + j] = cm[r * n_hc + j] * inv + eps;
    }
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            for (uint32_t r = 0; r < n_hc; r++) {
                float sum = 0.0f;
                for (uint32_t j = 0; j < n_hc; j++) sum += cm[r * n_hc + j];
                const float inv = 1.0f / (sum + eps);
                for (uint32_t j = 0; j < n_hc; j++) cm[r * n_hc + j] *= inv;
            }
        }
        for (uint32_t j = 0; j < n_hc; j++) {
            float sum = 0.0f;
            for (uint32_t r = 0; r < n_hc; r++) sum += cm[r * n_hc + j];
            const float inv = 1.0f / (sum + eps);
            for (uint32_t r = 0; r < n_hc; r++) cm[r * n_hc + j] *= inv;
        }
    }
}

dsv4_status cu_hc_pre(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                      const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                      float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    if (n_hc == 0 || n_hc > HC_MAX)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc: %u streams (1..%d supported)", n_hc, HC_MAX);
    const float *sv = NULL, *bv = NULL;
    dsv4_status st = hc_vecs(c, scale, 3, base, n_mix, &sv, &bv, "hc", err);
    if (st != DSV4_OK || n == 0) return st;
    float *mix;
    if ((st = hc_mix(c, fn, x_hc, n, hd, n_mix, rms_eps, &mix, err)) != DSV4_OK) return st;
    hc_split_kernel<<<cu_blocks(n, 64), 64, 0, c->stream>>>(mix, sv, bv, n, n_hc, iters, hc_eps, split);
    if ((st = cu_launched(err, "hc split")) != DSV4_OK) return st;
    wsum_kernel<<<cu_blocks((uint64_t)n * n_embd, 256), 256, 0, c->stream>>>(x_hc, split, n, n_hc, n_embd,
                                                                             n_mix, u);
    return cu_launched(err, "hc pre sum");
}

/* ---- hc_post ---- */

__global__ void hc_post_kernel(const float *f, const float *x, const float *split, uint32_t n, uint32_t n_hc,
                               uint32_t n_embd, float *out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    if (i >= (uint64_t)n * hd) return;
    const uint64_t t = i / hd;
    const uint32_t dst = (uint32_t)((i % hd) / n_embd), d = (uint32_t)(i % n_embd);
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    const float *post = split + t * n_mix + n_hc;
    const float *comb = post + n_hc;
    const float *xt = x + t * hd;
    float acc = f[t * n_embd + d] * post[dst];
    for (uint32_t src = 0; src < n_hc; src++) acc += comb[src * n_hc + dst] * xt[(uint64_t)src * n_embd + d];
    out[i] = acc;
}

dsv4_status cu_hc_post(void *vctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                       uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint64_t total = (uint64_t)n * n_hc * n_embd;
    if (!total) return DSV4_OK;
    hc_post_kernel<<<cu_blocks(total, 256), 256, 0, c->stream>>>(f, x_hc, split, n, n_hc, n_embd, out_hc);
    return cu_launched(err, "hc post");
}

/* ---- hc_head ---- */

__global__ void hc_head_weights_kernel(float *mix, const float *scale, const float *base, uint32_t n,
                                       uint32_t n_hc, float eps) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * n_hc) return;
    mix[i] = cu_sigmoid_stable(mix[i] * scale[0] + base[i % n_hc]) + eps;
}

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
    if ((st = hc_mix(c, fn, x_hc, n, hd, n_hc, rms_eps, &mix, err)) != DSV4_OK) return st;
    hc_head_weights_kernel<<<cu_blocks((uint64_t)n * n_hc, 64), 64, 0, c->stream>>>(mix, sv, bv, n, n_hc,
                                                                                    hc_eps);
    if ((st = cu_launched(err, "hc head weights")) != DSV4_OK) return st;
    wsum_kernel<<<cu_blocks((uint64_t)n * n_embd, 256), 256, 0, c->stream>>>(x_hc, mix, n, n_hc, n_embd, n_hc,
                                                                             y);
    return cu_launched(err, "hc head sum");
}
