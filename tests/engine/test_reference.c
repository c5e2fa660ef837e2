/* The engine against an independent, deliberately naive forward written straight from the spec
 * (model-attention-hc.md §3-§5, model-moe-gguf-tokenizer.md §2-§3) on an all-F32 tiny model, so
 * no activation quantization is involved: token-at-a-time, double accumulation, RoPE angles from
 * the closed form, the compressor pooled from the full per-token history by the window
 * definition (no frontier), Sinkhorn and routing written out. It shares only the KV rounding
 * primitives (FP8, FP4, Hadamard, f16) with the engine; those are tested in quant/.
 *
 * The FP8/FP4/f16 round trips are step functions: a 1e-6 difference between two correct
 * implementations flips an element to the next grid value now and then, and the flip propagates
 * (~1e-3 of the logits, more when it changes an indexer selection). So the strict comparison runs
 * the graph on a backend whose rounding ops are the identity (and the reference skips them too):
 * what is left is a smooth function, and any structural error (window, lane, orientation, stride,
 * selection) shows up far above float noise. A second comparison with the real roundings only
 * checks the same ballpark. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine_testutil.h"
#include "graph/graph.h"
#include "model/model.h"
#include "quant/quant.h"

#define NT 60 /* past the window (16), 15 ratio-4 rows (selection from position 35), 3 ratio-16 rows */

static bool g_smooth; /* skip the FP8/FP4/f16 round trips (Hadamard stays: it is linear) */

static void fp8(float *x, uint32_t n) {
    if (!g_smooth) dsv4_fp8_roundtrip_blocks64(x, n);
}
static void fp4(float *x, uint32_t n) {
    if (!g_smooth) dsv4_fp4_roundtrip_blocks32(x, n);
}
static float f16r(float x) { return g_smooth ? x : dsv4_f16_round(x); }

typedef struct {
    const dsv4_model *m;
    const dsv4_config *c;
    float *raw[16], *comp[16], *icomp[16];    /* per layer: all rows so far */
    float *ca[16], *cs[16], *ia[16], *is[16]; /* per layer, per token: compressor kv / score */
} ref_t;

static const float *W(const dsv4_tensor *t) {
    assert_int_equal(t->type, DSV4_TYPE_F32);
    return (const float *)t->data;
}

/* y[o] = sum_i W[row0 + o][i] x[i] */
static void mv(const dsv4_tensor *t, uint64_t row0, uint64_t n_out, const float *x, float *y) {
    const uint64_t in = t->ne[0];
    const float *w = W(t);
    for (uint64_t o = 0; o < n_out; o++) {
        double acc = 0;
        for (uint64_t i = 0; i < in; i++) acc += (double)w[(row0 + o) * in + i] * x[i];
        y[o] = (float)acc;
    }
}

static void rms(const float *x, const dsv4_tensor *w, uint64_t n, float eps, float *y) {
    double ss = 0;
    for (uint64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (uint64_t i = 0; i < n; i++) y[i] = (float)(x[i] * s * (w ? W(w)[i] : 1.0));
}

static double sigm(double z) { return 1.0 / (1.0 + exp(-z)); }

/* Closed-form RoPE angle of pair k (spec §4.3). */
static double angle(const ref_t *r, uint32_t il, uint32_t pos, uint32_t k) {
    const dsv4_config *c = r->c;
    const bool comp = c->compress_ratio[il] != 0;
    const double base = comp ? c->compress_rope_freq_base : c->rope_freq_base;
    const double ext = pos * pow(base, -2.0 * k / c->n_rot);
    if (!comp) return ext;
    const double corr_fast =
        c->n_rot * log(c->rope_orig_ctx / (c->yarn_beta_fast * 2 * M_PI)) / (2 * log(base));
    const double corr_slow =
        c->n_rot * log(c->rope_orig_ctx / (c->yarn_beta_slow * 2 * M_PI)) / (2 * log(base));
    const double lo = fmax(0, floor(corr_fast)), hi = fmin(c->n_rot - 1, ceil(corr_slow));
    const double ramp = 1 - fmin(1, fmax(0, (k - lo) / fmax(0.001, hi - lo)));
    return ext / c->rope_scale_factor * (1 - ramp) + ext * ramp;
}

static void rope(const ref_t *r, uint32_t il, float *x, uint32_t n_head, uint32_t hd, uint32_t pos,
                 bool inv) {
    const uint32_t nr = r->c->n_rot;
    for (uint32_t h = 0; h < n_head; h++)
        for (uint32_t k = 0; k < nr / 2; k++) {
            float *p = x + h * hd + hd - nr + 2 * k;
            const double a = angle(r, il, pos, k) * (inv ? -1 : 1), x0 = p[0], x1 = p[1];
            p[0] = (float)(x0 * cos(a) - x1 * sin(a));
            p[1] = (float)(x0 * sin(a) + x1 * cos(a));
        }
}

/* HC pre: returns u (n_embd) and pre/post/comb (comb[r][c] at r*nh + c) */
static void hc_pre(const ref_t *r, const dsv4_tensor *fn, const dsv4_tensor *sc, const dsv4_tensor *bs,
                   const float *X, float *u, double *post, double comb[16][16]) {
    const dsv4_config *c = r->c;
    const uint32_t nh = c->n_hc, E = c->n_embd, nmix = 2 * nh + nh * nh;
    float *flat = malloc(sizeof(float) * nh * E), mix[64];
    rms(X, NULL, (uint64_t)nh * E, c->rms_eps, flat);
    mv(fn, 0, nmix, flat, mix);
    const float *s = W(sc), *b = W(bs);
    double pre[16];
    for (uint32_t h = 0; h < nh; h++) {
        pre[h] = sigm(mix[h] * (double)s[0] + b[h]) + c->hc_eps;
        post[h] = 2 * sigm(mix[nh + h] * (double)s[1] + b[nh + h]);
    }
    for (uint32_t i = 0; i < nh; i++) { /* row softmax over destinations, + eps */
        double z[16], mx = -1e300, sum = 0;
        for (uint32_t j = 0; j < nh; j++)
            z[j] = mix[2 * nh + i * nh + j] * (double)s[2] + b[2 * nh + i * nh + j];
        for (uint32_t j = 0; j < nh; j++) mx = fmax(mx, z[j]);
        for (uint32_t j = 0; j < nh; j++) sum += exp(z[j] - mx);
        for (uint32_t j = 0; j < nh; j++) comb[i][j] = exp(z[j] - mx) / sum + c->hc_eps;
    }
    for (uint32_t it = 0; it < c->hc_sinkhorn_iter; it++) {
        if (it > 0)
            for (uint32_t i = 0; i < nh; i++) {
                double sum = 0;
                for (uint32_t j = 0; j < nh; j++) sum += comb[i][j];
                for (uint32_t j = 0; j < nh; j++) comb[i][j] /= sum + c->hc_eps;
            }
        for (uint32_t j = 0; j < nh; j++) {
            double sum = 0;
            for (uint32_t i = 0; i < nh; i++) sum += comb[i][j];
            for (uint32_t i = 0; i < nh; i++) comb[i][j] /= sum + c->hc_eps;
        }
    }
    for (uint32_t d = 0; d < E; d++) {
        double acc = 0;
        for (uint32_t h = 0; h < nh; h++) acc += X[h * E + d] * pre[h];
        u[d] = (float)acc;
    }
    free(flat);
}

static void hc_post(const ref_t *r, const float *f, float *X, const double *post, double comb[16][16]) {
    const uint32_t nh = r->c->n_hc, E = r->c->n_embd;
    float *old = malloc(sizeof(float) * nh * E);
    memcpy(old, X, sizeof(float) * nh * E);
    for (uint32_t dst = 0; dst < nh; dst++)
        for (uint32_t d = 0; d < E; d++) {
            double acc = f[d] * post[dst];
            for (uint32_t src = 0; src < nh; src++) acc += comb[src][dst] * old[src * E + d];
            X[dst * E + d] = (float)acc;
        }
    free(old);
}

static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double silu(double x) { return x * sigm(x); }

/* Compressed row i of a ratio-R instance from the per-token history (spec §4.4 window definition). */
static void compress_row(const ref_t *r, uint32_t il, uint32_t R, uint32_t dc, const float *a, const float *s,
                         const dsv4_tensor *norm, bool indexer, uint32_t i, float *out) {
    const uint32_t Wd = (R == 4 ? 2 : 1) * dc;
    float *pooled = malloc(sizeof(float) * dc);
    for (uint32_t j = 0; j < dc; j++) {
        double v[256], sc[256];
        int n = 0;
        if (R == 4) {
            for (uint32_t t = i > 0 ? 4 * i - 4 : 0; i > 0 && t < 4 * i; t++)
                v[n] = a[t * Wd + j], sc[n++] = s[t * Wd + j];
            for (uint32_t t = 4 * i; t < 4 * i + 4; t++)
                v[n] = a[t * Wd + dc + j], sc[n++] = s[t * Wd + dc + j];
        } else {
            for (uint32_t t = i * R; t < (i + 1) * R; t++) v[n] = a[t * Wd + j], sc[n++] = s[t * Wd + j];
        }
        double mx = -1e300, num = 0, den = 0;
        for (int k = 0; k < n; k++) mx = fmax(mx, sc[k]);
        for (int k = 0; k < n; k++) num += exp(sc[k] - mx) * v[k], den += exp(sc[k] - mx);
        pooled[j] = (float)(num / den);
    }
    rms(pooled, norm, dc, r->c->rms_eps, out);
    rope(r, il, out, 1, dc, i * R, false);
    if (indexer) {
        dsv4_hadamard_inplace(out, dc);
        fp4(out, dc);
    } else {
        fp8(out, dc - r->c->n_rot);
    }
    for (uint32_t j = 0; j < dc; j++) out[j] = f16r(out[j]);
    free(pooled);
}

/* top-k of scores (ties to the lower index) as a mask */
static void topk_mask(const double *s, uint32_t n, uint32_t k, bool *mask) {
    memset(mask, 0, n);
    for (uint32_t m = 0; m < k; m++) {
        int best = -1;
        for (uint32_t i = 0; i < n; i++)
            if (!mask[i] && (best < 0 || s[i] > s[best])) best = (int)i;
        mask[best] = true;
    }
}

static void attention_sub(ref_t *r, uint32_t il, float *X, int32_t tok, uint32_t pos) {
    (void)tok;
    const dsv4_config *c = r->c;
    const dsv4_layer_weights *L = &r->m->layers[il];
    const uint32_t E = c->n_embd, Dh = c->head_dim, H = c->n_head, QL = c->q_lora_rank,
                   R = c->compress_ratio[il];
    const uint32_t Id = c->idx_head_dim, IH = c->idx_n_head, nope = Dh - c->n_rot;
    float *u = malloc(4 * E), *xn = malloc(4 * E), *qa = malloc(4 * QL), *qr = malloc(4 * QL);
    float *q = malloc(4 * H * Dh), *o = malloc(4 * H * Dh), *kv = malloc(4 * Dh), *out = malloc(4 * E);
    double post[16], comb[16][16];
    hc_pre(r, &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, X, u, post, comb);
    rms(u, &L->attn_norm, E, c->rms_eps, xn);
    mv(&L->attn_q_a, 0, QL, xn, qa);
    rms(qa, &L->attn_q_a_norm, QL, c->rms_eps, qr);
    mv(&L->attn_q_b, 0, H * Dh, qr, q);
    for (uint32_t h = 0; h < H; h++) rms(q + h * Dh, NULL, Dh, c->rms_eps, q + h * Dh);
    rope(r, il, q, H, Dh, pos, false);
    mv(&L->attn_kv, 0, Dh, xn, kv);
    rms(kv, &L->attn_kv_a_norm, Dh, c->rms_eps, kv);
    rope(r, il, kv, 1, Dh, pos, false);
    fp8(kv, nope);
    for (uint32_t j = 0; j < Dh; j++) r->raw[il][pos * Dh + j] = f16r(kv[j]);
    uint32_t n_comp = 0;
    bool *mask = NULL;
    if (R) {
        const uint32_t Wc = (R == 4 ? 2 : 1) * Dh;
        mv(&L->attn_compressor_kv, 0, Wc, xn, r->ca[il] + pos * Wc);
        mv(&L->attn_compressor_gate, 0, Wc, xn, r->cs[il] + pos * Wc);
        for (uint32_t j = 0; j < Wc; j++)
            r->cs[il][pos * Wc + j] += W(&L->attn_compressor_ape)[(pos % R) * Wc + j];
        n_comp = (pos + 1) / R;
        if ((pos + 1) % R == 0)
            compress_row(r, il, R, Dh, r->ca[il], r->cs[il], &L->attn_compressor_norm, false, n_comp - 1,
                         r->comp[il] + (n_comp - 1) * Dh);
        if (R == 4) {
            mv(&L->indexer_compressor_kv, 0, 2 * Id, xn, r->ia[il] + pos * 2 * Id);
            mv(&L->indexer_compressor_gate, 0, 2 * Id, xn, r->is[il] + pos * 2 * Id);
            for (uint32_t j = 0; j < 2 * Id; j++)
                r->is[il][pos * 2 * Id + j] += W(&L->indexer_compressor_ape)[(pos % 4) * 2 * Id + j];
            if ((pos + 1) % 4 == 0)
                compress_row(r, il, 4, Id, r->ia[il], r->is[il], &L->indexer_compressor_norm, true,
                             n_comp - 1, r->icomp[il] + (n_comp - 1) * Id);
            if (n_comp > c->idx_top_k) {
                float *qi = malloc(4 * IH * Id), wv[64];
                mv(&L->indexer_attn_q_b, 0, IH * Id, qr, qi);
                rope(r, il, qi, IH, Id, pos, false);
                for (uint32_t h = 0; h < IH; h++) {
                    dsv4_hadamard_inplace(qi + h * Id, Id);
                    fp4(qi + h * Id, Id);
                }
                mv(&L->indexer_proj, 0, IH, xn, wv);
                double *sc = calloc(n_comp, sizeof(double));
                for (uint32_t i = 0; i < n_comp; i++)
                    for (uint32_t h = 0; h < IH; h++) {
                        double d = 0;
                        for (uint32_t j = 0; j < Id; j++)
                            d += (double)r->icomp[il][i * Id + j] * qi[h * Id + j];
                        sc[i] += fmax(d, 0.0) * wv[h] / sqrt((double)Id * IH);
                    }
                mask = malloc(n_comp);
                topk_mask(sc, n_comp, c->idx_top_k, mask);
                free(sc);
                free(qi);
            }
        }
    }
    const float *sinks = W(&L->attn_sinks);
    const uint32_t first = pos + 1 > c->n_swa ? pos + 1 - c->n_swa : 0;
    for (uint32_t h = 0; h < H; h++) {
        const float *qh = q + h * Dh;
        double s[1024], mx = sinks[h];
        const float *rows[1024];
        uint32_t n = 0;
        for (uint32_t t = first; t <= pos; t++) rows[n++] = r->raw[il] + t * Dh;
        for (uint32_t i = 0; i < n_comp; i++)
            if (!mask || mask[i]) rows[n++] = r->comp[il] + i * Dh;
        for (uint32_t k = 0; k < n; k++) {
            double d = 0;
            for (uint32_t j = 0; j < Dh; j++) d += (double)qh[j] * rows[k][j];
            s[k] = d / sqrt((double)Dh);
            mx = fmax(mx, s[k]);
        }
        double den = exp(sinks[h] - mx), acc[1024] = {0};
        for (uint32_t k = 0; k < n; k++) {
            const double wk = exp(s[k] - mx);
            den += wk;
            for (uint32_t j = 0; j < Dh; j++) acc[j] += wk * rows[k][j];
        }
        for (uint32_t j = 0; j < Dh; j++) o[h * Dh + j] = (float)(acc[j] / den);
    }
    free(mask);
    rope(r, il, o, H, Dh, pos, true);
    const uint32_t G = c->n_out_group, OL = c->o_lora_rank, gd = H * Dh / G;
    float *low = malloc(4 * G * OL);
    for (uint32_t g = 0; g < G; g++) mv(&L->attn_output_a, g * OL, OL, o + g * gd, low + g * OL);
    mv(&L->attn_output_b, 0, E, low, out);
    hc_post(r, out, X, post, comb);
    free(low), free(u), free(xn), free(qa), free(qr), free(q), free(o), free(kv), free(out);
}

static void ffn_sub(ref_t *r, uint32_t il, float *X, int32_t tok) {
    const dsv4_config *c = r->c;
    const dsv4_layer_weights *L = &r->m->layers[il];
    const uint32_t E = c->n_embd, NE = c->n_expert, K = c->n_expert_used, FF = c->n_ff_exp;
    const double clamp = c->swiglu_clamp[il];
    float *v = malloc(4 * E), *vn = malloc(4 * E), *lg = malloc(4 * NE), *g = malloc(4 * FF),
          *u = malloc(4 * FF);
    float *mid = malloc(4 * FF), *y = malloc(4 * E);
    double *f = calloc(E, sizeof(double)), post[16], comb[16][16];
    hc_pre(r, &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base, X, v, post, comb);
    rms(v, &L->ffn_norm, E, c->rms_eps, vn);
    mv(&L->ffn_gate_inp, 0, NE, vn, lg);
    double p[256], score[256], sum = 0;
    int32_t sel[16];
    for (uint32_t e = 0; e < NE; e++) p[e] = sqrt(softplus(lg[e]));
    if (il < c->n_hash_layer) {
        for (uint32_t k = 0; k < K; k++) sel[k] = ((const int32_t *)L->ffn_gate_tid2eid.data)[tok * K + k];
    } else {
        bool used[256] = {0};
        for (uint32_t e = 0; e < NE; e++)
            score[e] = p[e] + (dsv4_tensor_present(&L->exp_probs_b) ? W(&L->exp_probs_b)[e] : 0);
        for (uint32_t k = 0; k < K; k++) {
            int best = -1;
            for (uint32_t e = 0; e < NE; e++)
                if (!used[e] && (best < 0 || score[e] > score[best])) best = (int)e;
            used[best] = true;
            sel[k] = best;
        }
    }
    for (uint32_t k = 0; k < K; k++) sum += p[sel[k]];
    sum = fmax(sum, 6.103515625e-5);
    for (uint32_t k = 0; k < K; k++) {
        const double wk = p[sel[k]] / sum * c->expert_weights_scale;
        mv(&L->ffn_gate_exps, (uint64_t)sel[k] * FF, FF, vn, g);
        mv(&L->ffn_up_exps, (uint64_t)sel[k] * FF, FF, vn, u);
        for (uint32_t j = 0; j < FF; j++)
            mid[j] = (float)(silu(fmin(g[j], clamp)) * fmax(-clamp, fmin(u[j], clamp)) * wk);
        mv(&L->ffn_down_exps, (uint64_t)sel[k] * E, E, mid, y);
        for (uint32_t d = 0; d < E; d++) f[d] += y[d];
    }
    mv(&L->ffn_gate_shexp, 0, FF, vn, g);
    mv(&L->ffn_up_shexp, 0, FF, vn, u);
    for (uint32_t j = 0; j < FF; j++)
        mid[j] = (float)(silu(fmin(g[j], clamp)) * fmax(-clamp, fmin(u[j], clamp)));
    mv(&L->ffn_down_shexp, 0, E, mid, y);
    for (uint32_t d = 0; d < E; d++) y[d] = (float)(f[d] + y[d]);
    hc_post(r, y, X, post, comb);
    free(v), free(vn), free(lg), free(g), free(u), free(mid), free(y), free(f);
}

static void head(const ref_t *r, const float *X, float *logits) {
    const dsv4_config *c = r->c;
    const dsv4_model *m = r->m;
    const uint32_t nh = c->n_hc, E = c->n_embd;
    float *flat = malloc(4 * nh * E), pre[16], *y = malloc(4 * E), *yn = malloc(4 * E);
    rms(X, NULL, (uint64_t)nh * E, c->rms_eps, flat);
    mv(&m->output_hc_fn, 0, nh, flat, pre);
    for (uint32_t d = 0; d < E; d++) {
        double acc = 0;
        for (uint32_t h = 0; h < nh; h++)
            acc += X[h * E + d] *
                   (sigm(pre[h] * (double)W(&m->output_hc_scale)[0] + W(&m->output_hc_base)[h]) + c->hc_eps);
        y[d] = (float)acc;
    }
    rms(y, &m->output_norm, E, c->rms_eps, yn);
    mv(&m->output, 0, c->n_vocab, yn, logits);
    free(flat), free(y), free(yn);
}

/* Backend whose KV rounding ops are the identity (Hadamard kept), for the smooth comparison. */
static dsv4_status id_fp8(void *ctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope,
                          dsv4_error *err) {
    (void)ctx, (void)x, (void)n_rows, (void)width, (void)n_nope, (void)err;
    return DSV4_OK;
}
static dsv4_status had_only(void *ctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err) {
    (void)ctx, (void)err;
    for (uint32_t r = 0; r < n_rows; r++) dsv4_hadamard_inplace(x + (uint64_t)r * width, width);
    return DSV4_OK;
}
static dsv4_status copy_rows(void *ctx, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                             uint32_t width, dsv4_error *err) {
    (void)ctx;
    if (dst_type != DSV4_TYPE_F32) return dsv4_fail(err, DSV4_ERR_INVALID, "smooth rows must be F32");
    if (dst != src) memmove(dst, src, (size_t)n_rows * width * sizeof(float));
    return DSV4_OK;
}

typedef struct {
    float *out;
    uint32_t base, vocab;
} sink_t;
static void take_logits(void *user, uint32_t row, const float *l, uint32_t n_vocab) {
    sink_t *s = user;
    memcpy(s->out + (size_t)(s->base + row) * n_vocab, l, (size_t)n_vocab * sizeof(float));
}

/* All positions' logits through the graph on backend b, in chunks of 16 tokens. */
static void graph_logits(const dsv4_model *m, dsv4_backend *b, const int32_t *tok, uint32_t n, float *out) {
    dsv4_error err;
    dsv4_graph *g;
    dsv4_kv_state kv;
    dsv4_graph_params gp = {.chunk_cap = 16, .tiers = {b}, .kv_f32 = true}; /* smooth rows stay f32 */
    if (dsv4_graph_create_ex(m, &gp, &g, &err) != DSV4_OK) fail_msg("graph: %s", err.msg);
    assert_int_equal(dsv4_kv_state_init(g, n, &kv, &err), DSV4_OK);
    sink_t s = {out, 0, m->cfg.n_vocab};
    dsv4_graph_hooks h = {.on_logits = take_logits, .user = &s, .all_logits = true};
    for (uint32_t i = 0; i < n; i += 16) {
        bool damaged;
        s.base = i;
        if (dsv4_graph_eval(g, &kv, tok + i, n - i < 16 ? n - i : 16, &h, &damaged, &err) != DSV4_OK)
            fail_msg("eval: %s", err.msg);
    }
    dsv4_kv_state_free(g, &kv);
    dsv4_graph_free(g);
}

/* Run the reference over tok and compare with eng; returns the worst relative difference. */
static double compare(const dsv4_model *m, const int32_t *tok, const float *eng, double tol) {
    ref_t r = {.m = m, .c = &m->cfg};
    const dsv4_config *c = r.c;
    assert_true(c->n_layer <= 16);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        r.raw[il] = calloc((size_t)NT * c->head_dim, 4);
        r.comp[il] = calloc((size_t)NT * c->head_dim, 4);
        r.icomp[il] = calloc((size_t)NT * c->idx_head_dim, 4);
        r.ca[il] = calloc((size_t)NT * 2 * c->head_dim, 4);
        r.cs[il] = calloc((size_t)NT * 2 * c->head_dim, 4);
        r.ia[il] = calloc((size_t)NT * 2 * c->idx_head_dim, 4);
        r.is[il] = calloc((size_t)NT * 2 * c->idx_head_dim, 4);
    }
    const uint32_t V = c->n_vocab, HD = c->n_hc * c->n_embd;
    float *ref = malloc((size_t)V * 4), *X = malloc((size_t)HD * 4);
    double worst = 0;
    for (uint32_t pos = 0; pos < NT; pos++) {
        const float *emb = W(&m->token_embd) + (uint64_t)tok[pos] * c->n_embd;
        for (uint32_t h = 0; h < c->n_hc; h++) memcpy(X + h * c->n_embd, emb, 4 * c->n_embd);
        for (uint32_t il = 0; il < c->n_layer; il++) {
            attention_sub(&r, il, X, tok[pos], pos);
            ffn_sub(&r, il, X, tok[pos]);
        }
        head(&r, X, ref);
        double md = 0, mref = 0;
        for (uint32_t j = 0; j < V; j++) {
            md = fmax(md, fabs((double)eng[(size_t)pos * V + j] - ref[j]));
            mref = fmax(mref, fabs(ref[j]));
        }
        worst = fmax(worst, md / mref);
        if (getenv("REF_VERBOSE")) fprintf(stderr, "pos %u: max diff %.3g, max logit %.3g\n", pos, md, mref);
        if (md > tol * mref)
            fail_msg("position %u: max |engine - reference| = %.3g (max |logit| %.3g)", pos, md, mref);
    }
    for (uint32_t il = 0; il < c->n_layer; il++) {
        free(r.raw[il]), free(r.comp[il]), free(r.icomp[il]), free(r.ca[il]), free(r.cs[il]), free(r.ia[il]);
        free(r.is[il]);
    }
    free(ref), free(X);
    return worst;
}

static char g_path[512];
static int32_t g_tok[NT];

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("f32", 11, "tiny-f32.gguf", g_path, sizeof g_path)) return -1;
    uint64_t s = 4242;
    for (int i = 0; i < NT; i++) g_tok[i] = (int32_t)(test_rng_next(&s) % 1024);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    et_tmpdir_cleanup();
    return 0;
}

static void test_graph_matches_reference_without_rounding(void **state) {
    (void)state;
    dsv4_error err;
    dsv4_model *m;
    if (dsv4_model_load(g_path, &m, &err) != DSV4_OK) fail_msg("load: %s", err.msg);
    dsv4_backend cpu;
    assert_int_equal(dsv4_backend_cpu_create(2, &cpu, &err), DSV4_OK);
    dsv4_backend_ops ops = *cpu.ops;
    ops.fp8_kv = id_fp8;
    ops.hadamard_fp4 = had_only;
    ops.store_f16 = copy_rows;
    dsv4_backend smooth = {&ops, cpu.ctx};
    float *eng = malloc((size_t)NT * m->cfg.n_vocab * 4);
    graph_logits(m, &smooth, g_tok, NT, eng);
    g_smooth = true;
    const double worst = compare(m, g_tok, eng, 2e-5);
    print_message("smooth: worst relative logit difference over %d positions: %.3g\n", NT, worst);
    free(eng);
    dsv4_backend_destroy(&cpu);
    dsv4_model_free(m);
}

static void test_engine_near_reference_with_rounding(void **state) {
    (void)state;
    dsv4_error err;
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = 2;
    dsv4_engine *e;
    if (dsv4_engine_open(g_path, &p, &e, &err) != DSV4_OK) fail_msg("open: %s", err.msg);
    const uint32_t V = dsv4_engine_config(e)->n_vocab;
    float *eng = malloc((size_t)NT * V * 4);
    assert_int_equal(dsv4_eval_all_logits(e, g_tok, NT, 0, 16, eng, &err), DSV4_OK);
    g_smooth = false;
    const double worst = compare(dsv4_engine_model(e), g_tok, eng, 0.1);
    print_message("rounded: worst relative logit difference over %d positions: %.3g\n", NT, worst);
    free(eng);
    dsv4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_matches_reference_without_rounding),
        cmocka_unit_test(test_engine_near_reference_with_rounding),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
