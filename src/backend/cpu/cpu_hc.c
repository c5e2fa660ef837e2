/* Embedding and hyper-connection ops (spec model-attention-hc.md §3). */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

typedef struct {
    const dsv4_tensor *emb;
    const int32_t *tokens;
    uint32_t n_hc, n_embd;
    float *out;
    bool ok;
} embed_job;

static void embed_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    (void)th;
    embed_job *j = arg;
    for (uint64_t t = t0; t < t1; t++) {
        float *dst = j->out + t * j->n_hc * j->n_embd;
        if (!quant_dequant_row(j->emb->type, dsv4_tensor_row(j->emb, (uint64_t)j->tokens[t]), dst,
                               j->n_embd)) {
            j->ok = false;
            return;
        }
        for (uint32_t h = 1; h < j->n_hc; h++)
            memcpy(dst + (uint64_t)h * j->n_embd, dst, j->n_embd * sizeof(float));
    }
}

dsv4_status cpu_embed(void *vctx, const dsv4_tensor *emb, const int32_t *tokens, uint32_t n, uint32_t n_hc,
                      float *out_hc, dsv4_error *err) {
    cpu_ctx *c = vctx;
    const uint64_t vocab = emb->ne[1];
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint64_t)tokens[t] >= vocab)
            return dsv4_fail(err, DSV4_ERR_RANGE, "token id %d at index %u is outside the vocabulary (%llu)",
                             tokens[t], t, (unsigned long long)vocab);
    embed_job j = {emb, tokens, n_hc, (uint32_t)emb->ne[0], out_hc, true};
    dsv4_tp_run(c->tp, n, 8, embed_worker, &j);
    if (!j.ok)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "embedding tensor %s has type %s, which cannot be decoded",
                         emb->name ? emb->name : "?", dsv4_type_name(emb->type));
    return DSV4_OK;
}

typedef struct {
    const float *x;
    uint64_t width;
    float eps;
    float *y;
} norm_job;

static void norm_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    (void)th;
    const norm_job *j = arg;
    for (uint64_t t = t0; t < t1; t++)
        cpu_rmsnorm_row(j->x + t * j->width, NULL, j->width, j->eps, j->y + t * j->width);
}

typedef struct {
    const float *x, *w; /* w: n x w_stride weights, the first n_hc used */
    uint32_t n_hc, n_embd, w_stride;
    float *out;
} wsum_job;

static void wsum_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    (void)th;
    const wsum_job *j = arg;
    const uint64_t hd = (uint64_t)j->n_hc * j->n_embd;
    for (uint64_t t = t0; t < t1; t++) {
        const float *x = j->x + t * hd;
        const float *w = j->w + t * j->w_stride;
        float *o = j->out + t * j->n_embd;
        for (uint32_t d = 0; d < j->n_embd; d++) {
            float acc = 0.0f;
            for (uint32_t h = 0; h < j->n_hc; h++) acc += x[(uint64_t)h * j->n_embd + d] * w[h];
            o[d] = acc;
        }
    }
}

/* flat = rmsnorm_noweight(x) per token, mix = fn . flat (n x n_mix) into scratch. */
static dsv4_status hc_mix(cpu_ctx *c, const dsv4_tensor *fn, const float *x_hc, uint32_t n, uint64_t hd,
                          uint32_t n_mix, float rms_eps, float **mix_out, dsv4_error *err) {
    if (fn->ne[0] != hd || fn->ne[1] != n_mix)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc: tensor %s is %llux%llu, expected %llux%u",
                         fn->name ? fn->name : "?", (unsigned long long)fn->ne[0],
                         (unsigned long long)fn->ne[1], (unsigned long long)hd, n_mix);
    float *flat = cpu_scratch(c, CPU_SLOT_FLAT, (size_t)n * hd * sizeof(float));
    float *mix = cpu_scratch(c, CPU_SLOT_MIX, (size_t)n * n_mix * sizeof(float));
    if (!flat || !mix) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in hc for %u tokens", n);
    norm_job nj = {x_hc, hd, rms_eps, flat};
    dsv4_tp_run(c->tp, n, 1, norm_worker, &nj);
    dsv4_status st = cpu_matmul(c, fn, 0, n_mix, flat, hd, n, mix, n_mix, err);
    if (st != DSV4_OK) return st;
    *mix_out = mix;
    return DSV4_OK;
}

/* mix and split of HC pre (shared by the plain and the fused op). */
static dsv4_status hc_pre_split(cpu_ctx *c, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                const dsv4_tensor *base, const float *x_hc, uint32_t n, uint32_t n_hc,
                                uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps, float *split,
                                dsv4_error *err) {
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    if (n_hc > 16) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc: %u streams (at most 16 supported)", n_hc);
    float *mix;
    dsv4_status st = hc_mix(c, fn, x_hc, n, hd, n_mix, rms_eps, &mix, err);
    if (st != DSV4_OK) return st;
    float sbuf[3], bbuf[2 * 16 + 16 * 16];
    const float *sv = scale->ne[0] >= 3 ? cpu_vec_f32(scale, sbuf, 3) : NULL;
    const float *bv = base->ne[0] >= n_mix ? cpu_vec_f32(base, bbuf, n_mix) : NULL;
    if (!sv || !bv)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc: cannot read scale %s / base %s",
                         scale->name ? scale->name : "?", base->name ? base->name : "?");
    for (uint32_t t = 0; t < n; t++)
        cpu_hc_split(mix + (uint64_t)t * n_mix, sv, bv, n_hc, iters, hc_eps, split + (uint64_t)t * n_mix);
    return DSV4_OK;
}

dsv4_status cpu_hc_pre(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                       const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                       float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err) {
    cpu_ctx *c = vctx;
    dsv4_status st =
        hc_pre_split(c, fn, scale, base, x_hc, n, n_hc, n_embd, iters, rms_eps, hc_eps, split, err);
    if (st != DSV4_OK) return st;
    wsum_job wj = {x_hc, split, n_hc, n_embd, 2 * n_hc + n_hc * n_hc, u};
    dsv4_tp_run(c->tp, n, 1, wsum_worker, &wj);
    return DSV4_OK;
}

typedef struct {
    wsum_job ws;
    const float *norm_w;
    float eps;
    float *row; /* per thread: n_embd */
    float *y;
} wsum_norm_job;

/* The weighted sum of one token into a thread row, then that row's weighted RMS norm: the same
 * expressions in the same order as hc_pre followed by rmsnorm, without the round trip of u. */
static void wsum_norm_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    const wsum_norm_job *j = arg;
    float *row = j->row + (uint64_t)th * j->ws.n_embd;
    for (uint64_t t = t0; t < t1; t++) {
        wsum_job one = j->ws;
        one.x += t * (uint64_t)one.n_hc * one.n_embd;
        one.w += t * one.w_stride;
        one.out = row;
        wsum_worker(&one, 0, 1, th);
        cpu_rmsnorm_row(row, j->norm_w, j->ws.n_embd, j->eps, j->y + t * j->ws.n_embd);
    }
}

dsv4_status cpu_hc_pre_norm(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                            const dsv4_tensor *base, const dsv4_tensor *norm_w, const float *x_hc, uint32_t n,
                            uint32_t n_hc, uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                            float *u_normed, float *split, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (!norm_w || norm_w->ne[0] != n_embd)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc_pre_norm: norm weight %s does not have %u values",
                         norm_w && norm_w->name ? norm_w->name : "?", n_embd);
    dsv4_status st =
        hc_pre_split(c, fn, scale, base, x_hc, n, n_hc, n_embd, iters, rms_eps, hc_eps, split, err);
    if (st != DSV4_OK) return st;
    float *wtmp = cpu_scratch(c, CPU_SLOT_VEC, (size_t)n_embd * sizeof(float));
    float *rows = cpu_scratch(c, CPU_SLOT_C, (size_t)dsv4_tp_threads(c->tp) * n_embd * sizeof(float));
    if (!wtmp || !rows) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in hc_pre_norm");
    const float *wv = cpu_vec_f32(norm_w, wtmp, n_embd);
    if (!wv)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc_pre_norm: cannot read weight %s of type %s",
                         norm_w->name ? norm_w->name : "?", dsv4_type_name(norm_w->type));
    wsum_norm_job j = {
        {x_hc, split, n_hc, n_embd, 2 * n_hc + n_hc * n_hc, NULL}, wv, rms_eps, rows, u_normed};
    dsv4_tp_run(c->tp, n, 1, wsum_norm_worker, &j);
    return DSV4_OK;
}

typedef struct {
    const float *f, *x, *split;
    uint32_t n_hc, n_embd;
    float *out;
    const float *f2; /* hc_post_add: f[d] + f2[d] (the add op's sum) in place of f[d]; else NULL */
    uint32_t k;      /* hc_post_slots: f holds k slot rows per token, summed as moe sums them; else 0 */
} post_job;

static void post_worker(void *arg, uint64_t i0, uint64_t i1, uint32_t th) {
    (void)th;
    const post_job *j = arg;
    const uint32_t n_hc = j->n_hc;
    const uint32_t n_mix = 2 * n_hc + n_hc * n_hc;
    const uint64_t hd = (uint64_t)n_hc * j->n_embd;
    for (uint64_t i = i0; i < i1; i++) { /* item = (token, destination stream) */
        const uint64_t t = i / n_hc;
        const uint32_t dst = (uint32_t)(i % n_hc);
        const float *f = j->f + t * (j->k ? j->k : 1) * j->n_embd;
        const float *x = j->x + t * hd;
        const float *post = j->split + t * n_mix + n_hc;
        const float *comb = post + n_hc;
        float *o = j->out + t * hd + (uint64_t)dst * j->n_embd;
        const float *f2 = j->f2 ? j->f2 + t * j->n_embd : NULL;
        for (uint32_t d = 0; d < j->n_embd; d++) {
            float fv = f[d];
            if (j->k) { /* moe's slot sum, from 0 in slot order */
                fv = 0.0f;
                for (uint32_t sl = 0; sl < j->k; sl++) fv += f[(uint64_t)sl * j->n_embd + d];
            }
            const float fd = f2 ? fv + f2[d] : fv;
            float acc = fd * post[dst];
            for (uint32_t src = 0; src < n_hc; src++)
                acc += comb[src * n_hc + dst] * x[(uint64_t)src * j->n_embd + d];
            o[d] = acc;
        }
    }
}

dsv4_status cpu_hc_post(void *vctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                        uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err) {
    (void)err;
    cpu_ctx *c = vctx;
    post_job j = {f, x_hc, split, n_hc, n_embd, out_hc, NULL, 0};
    dsv4_tp_run(c->tp, (uint64_t)n * n_hc, 1, post_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_hc_post_add(void *vctx, const float *a, const float *b, const float *x_hc, const float *split,
                            uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err) {
    (void)err;
    cpu_ctx *c = vctx;
    post_job j = {a, x_hc, split, n_hc, n_embd, out_hc, b, 0};
    dsv4_tp_run(c->tp, (uint64_t)n * n_hc, 1, post_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_hc_post_slots(void *vctx, const float *slots, uint32_t k, const float *b, const float *x_hc,
                              const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc,
                              dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (k == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "hc_post_slots: no slots");
    post_job j = {slots, x_hc, split, n_hc, n_embd, out_hc, b, k};
    dsv4_tp_run(c->tp, (uint64_t)n * n_hc, 1, post_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_hc_head(void *vctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                        const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, float rms_eps,
                        float hc_eps, float *y, dsv4_error *err) {
    cpu_ctx *c = vctx;
    const uint64_t hd = (uint64_t)n_hc * n_embd;
    if (n_hc > 16)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "hc head: %u streams (at most 16 supported)", n_hc);
    float *mix;
    dsv4_status st = hc_mix(c, fn, x_hc, n, hd, n_hc, rms_eps, &mix, err);
    if (st != DSV4_OK) return st;
    float sbuf[1], bbuf[16];
    const float *sv = scale->ne[0] >= 1 ? cpu_vec_f32(scale, sbuf, 1) : NULL;
    const float *bv = base->ne[0] >= n_hc ? cpu_vec_f32(base, bbuf, n_hc) : NULL;
    if (!sv || !bv)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc head: cannot read scale %s / base %s",
                         scale->name ? scale->name : "?", base->name ? base->name : "?");
    for (uint32_t t = 0; t < n; t++) {
        float *m = mix + (uint64_t)t * n_hc; /* weights overwrite the mix in place */
        for (uint32_t h = 0; h < n_hc; h++) m[h] = cpu_sigmoid_stable(m[h] * sv[0] + bv[h]) + hc_eps;
    }
    wsum_job wj = {x_hc, mix, n_hc, n_embd, n_hc, y};
    dsv4_tp_run(c->tp, n, 1, wsum_worker, &wj);
    return DSV4_OK;
}

/* The post then the pre step, in their order: the fused op's reference on every backend. */
dsv4_status cpu_hc_post_pre_norm(void *vctx, const float *f, const float *x_hc, const float *split_old,
                                 float *out_hc, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                 const dsv4_tensor *base, const dsv4_tensor *norm_w, uint32_t n_hc,
                                 uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                                 float *u_normed, float *split_new, dsv4_error *err) {
    if (split_new == split_old)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hc_post_pre_norm: the new split must not overwrite the old");
    const dsv4_status st = cpu_hc_post(vctx, f, x_hc, split_old, 1, n_hc, n_embd, out_hc, err);
    if (st != DSV4_OK) return st;
    return cpu_hc_pre_norm(vctx, fn, scale, base, norm_w, out_hc, 1, n_hc, n_embd, iters, rms_eps, hc_eps,
                           u_normed, split_new, err);
}
