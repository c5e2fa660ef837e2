/* One layer as backend ops: the attention half (spec model-attention-hc.md §4-§5) and the FFN
 * half (model-moe-gguf-tokenizer.md §2). */
#include <math.h>

#include "common/status.h"
#include "graph/graph_internal.h"

#define OPS g->b->ops
#define BCTX g->b->ctx

/* Independent products in one backend call when the backend offers it (same values). */
static dsv4_status matmuls(dsv4_graph *g, const dsv4_matmul_item *it, uint32_t n_items, uint32_t n,
                           dsv4_error *err) {
    if (OPS->matmul_multi) return OPS->matmul_multi(BCTX, it, n_items, n, err);
    for (uint32_t i = 0; i < n_items; i++)
        GB(OPS->matmul(BCTX, it[i].w, it[i].row0, it[i].n_out, it[i].x, it[i].x_stride, n, it[i].y,
                       it[i].y_stride, err));
    return DSV4_OK;
}

/* hc_pre then the sublayer norm: the fused op when it may and succeeds, else the unfused pair. */
static dsv4_status hc_pre_normed(dsv4_graph *g, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                 const dsv4_tensor *base, const dsv4_tensor *norm, const float *x_hc,
                                 uint32_t n, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_fused_query fq = graph_fused_query(g, n, c->n_embd, fn->type, norm->type, 0);
    if (graph_fusion_wanted(g, DSV4_FUSED_HC_PRE_NORM, OPS->hc_pre_norm != NULL, &fq)) {
        const dsv4_status st =
            OPS->hc_pre_norm(BCTX, fn, scale, base, norm, x_hc, n, c->n_hc, c->n_embd, c->hc_sinkhorn_iter,
                             c->rms_eps, c->hc_eps, g->w.xn, g->w.split, err);
        float *const outs[2] = {g->w.xn, g->w.split};
        const size_t n_outs[2] = {(size_t)n * c->n_embd, (size_t)n * dsv4_cfg_hc_mix(c)};
        if (graph_fusion_result(g, DSV4_FUSED_HC_PRE_NORM, st, outs, n_outs, 2, err)) return DSV4_OK;
    }
    GB(OPS->hc_pre(BCTX, fn, scale, base, x_hc, n, c->n_hc, c->n_embd, c->hc_sinkhorn_iter, c->rms_eps,
                   c->hc_eps, g->w.u, g->w.split, err));
    return OPS->rmsnorm(BCTX, g->w.u, norm, n, c->n_embd, c->rms_eps, g->w.xn, err);
}

/* The fused ops below work in place on the projection's output, so a failed (or faulted) fused op
 * leaves nothing to redo the unfused ops from: the fallback runs the projection again (same
 * operands, same values) and then the unfused ops. */

/* q = attn_q_b . qr, then the per-head norm (no weight) and RoPE of q: fused when it may. With
 * `idx`, the indexer's queries iq = indexer_attn_q_b . qr of every row come from the same call
 * (one launch on backends with matmul_multi; a product's values do not depend on its company). */
static dsv4_status q_projected(dsv4_graph *g, const dsv4_layer_weights *L, const dsv4_rope *rope, uint32_t n,
                               uint32_t p0, bool idx, bool *idx_done, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const uint32_t Dh = c->head_dim, H = c->n_head, QL = c->q_lora_rank, QD = H * Dh;
    const uint32_t IQD = c->idx_n_head * c->idx_head_dim;
    const dsv4_matmul_item it[2] = {{&L->attn_q_b, 0, QD, g->w.qr, QL, g->w.q, QD},
                                    {&L->indexer_attn_q_b, 0, IQD, g->w.qr, QL, g->w.iq, IQD}};
    GB(matmuls(g, it, idx ? 2 : 1, n, err));
    *idx_done = false;
    /* one decode token with the indexer: its queries' RoPE and Hadamard/FP4 in the query heads'
     * norm + RoPE pass (one launch instead of three); in place, so the fallback redoes both products */
    const dsv4_fused_query iq = graph_fused_query(g, n, Dh, DSV4_TYPE_F32, DSV4_TYPE_F32, c->idx_head_dim);
    if (idx && n == 1 &&
        graph_fusion_wanted(g, DSV4_FUSED_Q_NORM_ROPE_IDX, OPS->q_norm_rope_idx != NULL, &iq)) {
        const dsv4_status st = OPS->q_norm_rope_idx(BCTX, g->w.q, H, Dh, c->rms_eps, g->w.iq, c->idx_n_head,
                                                    c->idx_head_dim, p0, rope, err);
        float *const outs[2] = {g->w.q, g->w.iq};
        const size_t n_outs[2] = {QD, IQD};
        if (graph_fusion_result(g, DSV4_FUSED_Q_NORM_ROPE_IDX, st, outs, n_outs, 2, err)) {
            *idx_done = true;
            return DSV4_OK;
        }
        GB(matmuls(g, it, 2, n, err));
    }
    if (g->q_raw) return DSV4_OK; /* normed and rotated inside attention_chunk_qnr (or before the pair) */
    return graph_q_norm_rope(g, L, rope, n, p0, err);
}

dsv4_status graph_q_norm_rope(dsv4_graph *g, const dsv4_layer_weights *L, const dsv4_rope *rope, uint32_t n,
                              uint32_t p0, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const uint32_t Dh = c->head_dim, H = c->n_head, QL = c->q_lora_rank, QD = H * Dh;
    const dsv4_fused_query fq = graph_fused_query(g, n, Dh, DSV4_TYPE_F32, DSV4_TYPE_F32, 0);
    if (graph_fusion_wanted(g, DSV4_FUSED_Q_NORM_ROPE, OPS->q_norm_rope != NULL, &fq)) {
        const dsv4_status st = OPS->q_norm_rope(BCTX, g->w.q, n, H, Dh, c->rms_eps, p0, 1, rope, err);
        float *const outs[1] = {g->w.q};
        const size_t n_outs[1] = {(size_t)n * QD};
        if (graph_fusion_result(g, DSV4_FUSED_Q_NORM_ROPE, st, outs, n_outs, 1, err)) return DSV4_OK;
        GB(OPS->matmul(BCTX, &L->attn_q_b, 0, QD, g->w.qr, QL, n, g->w.q, QD, err));
    }
    GB(OPS->rmsnorm(BCTX, g->w.q, NULL, n * H, Dh, c->rms_eps, g->w.q, err)); /* per-head norm, no weight */
    return OPS->rope_tail(BCTX, g->w.q, n, H, Dh, p0, 1, rope, false, err);
}

/* kv = attn_kv . xn (already computed by the caller), then its weighted norm, RoPE and FP8 round
 * trip: fused when it may. */
static dsv4_status kv_projected(dsv4_graph *g, const dsv4_layer_weights *L, const dsv4_rope *rope, uint32_t n,
                                uint32_t p0, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const uint32_t E = c->n_embd, Dh = c->head_dim, nope = Dh - c->n_rot;
    const dsv4_tensor *norm = &L->attn_kv_a_norm;
    const dsv4_fused_query fq = graph_fused_query(g, n, Dh, L->attn_kv.type, norm->type, 0);
    if (graph_fusion_wanted(g, DSV4_FUSED_KV_NORM_ROPE_FP8, OPS->kv_norm_rope_fp8 != NULL, &fq)) {
        const dsv4_status st =
            OPS->kv_norm_rope_fp8(BCTX, g->w.kv, norm, n, Dh, c->rms_eps, p0, 1, rope, nope, err);
        float *const outs[1] = {g->w.kv};
        const size_t n_outs[1] = {(size_t)n * Dh};
        if (graph_fusion_result(g, DSV4_FUSED_KV_NORM_ROPE_FP8, st, outs, n_outs, 1, err)) return DSV4_OK;
        GB(OPS->matmul(BCTX, &L->attn_kv, 0, Dh, g->w.xn, E, n, g->w.kv, Dh, err));
    }
    GB(OPS->rmsnorm(BCTX, g->w.kv, norm, n, Dh, c->rms_eps, g->w.kv, err));
    GB(OPS->rope_tail(BCTX, g->w.kv, n, 1, Dh, p0, 1, rope, false, err));
    return OPS->fp8_kv(BCTX, g->w.kv, n, Dh, nope, err);
}

/* Compressed-row post-processing: norm, RoPE at the window start, FP8 (attention rows) or
 * Hadamard+FP4 (indexer rows), f16 store. */
static dsv4_status emit_row(dsv4_graph *g, uint32_t il, const dsv4_tensor *norm, uint32_t width, uint32_t pos,
                            bool indexer, void *dst, uint32_t dst_type, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    /* the four ops in one pass; out of place (pooled stays), so the fallback simply runs them */
    const dsv4_fused_query fq = graph_fused_query(g, 1, width, DSV4_TYPE_F32, norm->type, dst_type);
    if (graph_fusion_wanted(g, DSV4_FUSED_EMIT_ROW, OPS->emit_row != NULL, &fq)) {
        const dsv4_status st =
            OPS->emit_row(BCTX, g->w.pooled, norm, width, c->rms_eps, pos, &g->rope[il], indexer,
                          indexer ? 0 : width - c->n_rot, g->w.crow, dst, dst_type, err);
        float *const outs[1] = {g->w.crow}; /* the cache row is rewritten whole by the fallback's store */
        const size_t n_outs[1] = {width};
        if (graph_fusion_result(g, DSV4_FUSED_EMIT_ROW, st, outs, n_outs, 1, err)) return DSV4_OK;
    }
    GB(OPS->rmsnorm(BCTX, g->w.pooled, norm, 1, width, c->rms_eps, g->w.crow, err));
    GB(OPS->rope_tail(BCTX, g->w.crow, 1, 1, width, pos, 0, &g->rope[il], false, err));
    if (indexer) {
        GB(OPS->hadamard_fp4(BCTX, g->w.crow, 1, width, err));
    } else {
        GB(OPS->fp8_kv(BCTX, g->w.crow, 1, width, width - c->n_rot, err));
    }
    return OPS->store_f16(BCTX, dst, dst_type, g->w.crow, 1, width, err);
}

/* Token t's KV side: the cache push (the current token is stored before attention, so it attends
 * to itself) and the compressors with the rows they emit at p0 + t. */
static dsv4_status kv_push(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t t, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_layer_weights *L = &g->m->layers[il];
    const dsv4_kv_layer *K = &kv->layout.layers[il];
    graph_ws *w = &g->w;
    const uint32_t p = kv->pos + t, R = K->ratio;
    const uint32_t Dh = c->head_dim, Id = c->idx_head_dim, Wc = K->coff * Dh;
    const uint32_t kt = g->active; /* the layer's tier holds its KV state */
#define KVP(off) graph_kv_ptr(kv, kt, (off))
    const uint32_t cap = kv->layout.raw_cap, kvt = kv->layout.row_type, es = kv->layout.row_esize;
    GB(OPS->store_f16(BCTX, KVP(K->raw) + (uint64_t)(p % cap) * Dh * es, kvt, w->kv + (uint64_t)t * Dh, 1, Dh,
                      err));
    if (R == 0) return DSV4_OK;
    const bool emit = (p + 1) % R == 0;
    GB(OPS->compressor_step(BCTX, w->ckv + (uint64_t)t * Wc, w->cg + (uint64_t)t * Wc,
                            &L->attn_compressor_ape, p, R, Dh, KVP(K->comp_kv), KVP(K->comp_sc), w->pooled,
                            err));
    if (emit) {
        const uint32_t i = (p + 1) / R - 1;
        GB(emit_row(g, il, &L->attn_compressor_norm, Dh, i * R, false, KVP(K->comp + (uint64_t)i * Dh * es),
                    kvt, err));
    }
    if (R == 4) {
        GB(OPS->compressor_step(BCTX, w->ikv + (uint64_t)t * 2 * Id, w->ig + (uint64_t)t * 2 * Id,
                                &L->indexer_compressor_ape, p, R, Id, KVP(K->idx_kv), KVP(K->idx_sc),
                                w->pooled, err));
        if (emit) {
            const uint32_t i = (p + 1) / R - 1;
            GB(emit_row(g, il, &L->indexer_compressor_norm, Id, i * R, true,
                        KVP(K->idx + (uint64_t)i * kv->layout.idx_row_bytes), kv->layout.idx_type, err));
        }
    }
#undef KVP
    return DSV4_OK;
}

/* The sequential part of the attention, one token at a time: the cache push and compressors
 * (kv_push; already done when `pushed`, n = 1), the indexer and the attention of token t see exactly
 * the state the tokens before it left. */
static dsv4_status attention_per_token(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t n, bool pushed,
                                       const dsv4_graph_hooks *h, bool *roped, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_layer_weights *L = &g->m->layers[il];
    const dsv4_kv_layer *K = &kv->layout.layers[il];
    graph_ws *w = &g->w;
    const uint32_t p0 = kv->pos, R = K->ratio;
    const uint32_t Dh = c->head_dim, H = c->n_head, QD = H * Dh;
    const uint32_t Id = c->idx_head_dim, IH = c->idx_n_head;
    const uint32_t kt = g->active; /* the layer's tier holds its KV state */
#define KVP(off) graph_kv_ptr(kv, kt, (off))
    unsigned char *raw = KVP(K->raw);
    const uint32_t cap = kv->layout.raw_cap, kvt = kv->layout.row_type;
    const float kq_scale = 1.0f / sqrtf((float)Dh);
    const float iw_scale = 1.0f / sqrtf((float)(Id * IH));
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t p = p0 + t;
        if (!pushed) GB(kv_push(g, kv, il, t, err));
        const uint32_t n_comp = R ? (p + 1) / R : 0; /* includes a row emitted at p itself */
        const int32_t *sel = NULL;
        uint32_t n_sel = 0;
        if (R == 4 && n_comp > c->idx_top_k) {
            GB(OPS->indexer_topk(BCTX, w->iq + (uint64_t)t * IH * Id, w->iw + (uint64_t)t * IH, iw_scale, IH,
                                 Id, kv->layout.idx_type, KVP(K->idx), n_comp, c->idx_top_k, w->isel, err));
            sel = w->isel;
            n_sel = c->idx_top_k;
            if (h && h->on_indexer) { /* ids are >= 0, so int32 and uint32 share the bytes */
                GB(OPS->read(BCTX, g->host_isel, w->isel, (size_t)n_sel * sizeof(int32_t), err));
                h->on_indexer(h->user, il, p, g->host_isel, n_sel);
            }
        }
        const uint32_t n_raw = p + 1 < cap ? p + 1 : cap;
        const uint32_t raw_start = (p + 1 - n_raw) % cap;
        /* one decode token: its heads' inverse RoPE inside the attention (the same rotation of the
         * same values); attention is a pure function of q and the cache, so the fallback redoes it */
        if (n == 1 && g->q_raw) { /* the raw query normed and rotated inside the attention (attn_qnr) */
            g->q_raw = false;
            const dsv4_status st = OPS->attention_qnr(
                BCTX, w->q, H, Dh, kvt, raw, cap, raw_start, n_raw, R ? KVP(K->comp) : NULL, n_comp, sel,
                n_sel, &L->attn_sinks, kq_scale, c->rms_eps, p, &g->rope[il], w->heads, err);
            float *const outs[1] = {w->heads};
            const size_t n_outs[1] = {(size_t)QD};
            if (graph_fusion_result(g, DSV4_FUSED_ATTN_QNR, st, outs, n_outs, 1, err)) {
                *roped = true;
                continue;
            }
            GB(graph_q_norm_rope(g, L, &g->rope[il], 1, p, err));
        }
        if (n == 1) {
            const dsv4_fused_query fq = {.n_tokens = 1,
                                         .width = Dh,
                                         .weight_type = kvt,
                                         .mode = g->mode,
                                         .n_hc = H,
                                         .aux_type = kvt,
                                         .tier = g->active,
                                         .n_tiers = g->n_tiers};
            if (graph_fusion_wanted(g, DSV4_FUSED_ATTN_ROPE, OPS->attention_rope != NULL, &fq)) {
                const dsv4_status st = OPS->attention_rope(
                    BCTX, w->q, H, Dh, kvt, raw, cap, raw_start, n_raw, R ? KVP(K->comp) : NULL, n_comp, sel,
                    n_sel, &L->attn_sinks, kq_scale, p, &g->rope[il], w->heads, err);
                float *const outs[1] = {w->heads};
                const size_t n_outs[1] = {(size_t)QD};
                if (graph_fusion_result(g, DSV4_FUSED_ATTN_ROPE, st, outs, n_outs, 1, err)) {
                    *roped = true;
                    continue;
                }
            }
        }
        GB(OPS->attention(BCTX, w->q + (uint64_t)t * QD, H, Dh, kvt, raw, cap, raw_start, n_raw,
                          R ? KVP(K->comp) : NULL, n_comp, sel, n_sel, &L->attn_sinks, kq_scale,
                          w->heads + (uint64_t)t * QD, err));
    }

#undef KVP
    return DSV4_OK;
}

/* The query side of the projections: the q_a norm, q (norm + RoPE), and the indexer's queries
 * (and head weights, unless the batched products made them) from row t_idx on. */
static dsv4_status query_side(dsv4_graph *g, const dsv4_layer_weights *L, const dsv4_rope *rope, uint32_t n,
                              uint32_t p0, uint32_t t_idx, bool iw_done, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    graph_ws *w = &g->w;
    const uint32_t E = c->n_embd, QL = c->q_lora_rank, Id = c->idx_head_dim, IH = c->idx_n_head;
    GB(OPS->rmsnorm(BCTX, w->qa, &L->attn_q_a_norm, n, QL, c->rms_eps, w->qr, err));
    /* every row runs the indexer (decode past its start): its queries' product beside q's */
    const bool idx_with_q = t_idx == 0 && n > 0;
    bool idx_done = false; /* the indexer's queries' RoPE and Hadamard/FP4 ran with q's (q_norm_rope_idx) */
    GB(q_projected(g, L, rope, n, p0, idx_with_q, &idx_done, err));
    if (t_idx < n) {
        const uint32_t m = n - t_idx, IQD = IH * Id;
        if (!idx_with_q)
            GB(OPS->matmul(BCTX, &L->indexer_attn_q_b, 0, IQD, w->qr + (uint64_t)t_idx * QL, QL, m,
                           w->iq + (uint64_t)t_idx * IQD, IQD, err));
        if (!idx_done) {
            GB(OPS->rope_tail(BCTX, w->iq + (uint64_t)t_idx * IQD, m, IH, Id, p0 + t_idx, 1, rope, false,
                              err));
            GB(OPS->hadamard_fp4(BCTX, w->iq + (uint64_t)t_idx * IQD, m * IH, Id, err));
        }
        if (!iw_done)
            GB(OPS->matmul(BCTX, &L->indexer_proj, 0, IH, w->xn + (uint64_t)t_idx * E, E, m,
                           w->iw + (uint64_t)t_idx * IH, IH, err));
    }
    return DSV4_OK;
}

dsv4_status graph_layer_attention(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t n,
                                  const dsv4_graph_hooks *h, bool *post_pending, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_layer_weights *L = &g->m->layers[il];
    const dsv4_kv_layer *K = &kv->layout.layers[il];
    const dsv4_rope *rope = &g->rope[il];
    graph_ws *w = &g->w;
    const uint32_t p0 = kv->pos, R = K->ratio;
    const uint32_t E = c->n_embd, Dh = c->head_dim, H = c->n_head, QL = c->q_lora_rank;
    const uint32_t QD = H * Dh;
    const uint32_t Id = c->idx_head_dim, IH = c->idx_n_head, Wc = K->coff * Dh;

    /* ---- batched: HC pre, norms, projections, RoPE, FP8 ---- */
    GB(hc_pre_normed(g, &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, &L->attn_norm, w->hc_cur, n,
                     err));
    uint32_t t_idx = n; /* first chunk row whose query runs the indexer */
    if (R == 4) {
        /* The indexer runs only once more than top_k compressed rows are visible: from the row
         * whose position p has (p+1)/4 > top_k (n_comp only grows). */
        const uint64_t p_first = 4ull * (c->idx_top_k + 1) - 1;
        if (p_first < (uint64_t)p0 + n) t_idx = p_first > p0 ? (uint32_t)(p_first - p0) : 0;
    }
    /* Every product of xn at once: q_a, kv, the compressor pairs and (when every row runs the
     * indexer) the indexer head weights. Their order does not change a value. */
    dsv4_matmul_item it[7];
    uint32_t ni = 0;
    it[ni++] = (dsv4_matmul_item){&L->attn_q_a, 0, QL, w->xn, E, w->qa, QL};
    it[ni++] = (dsv4_matmul_item){&L->attn_kv, 0, Dh, w->xn, E, w->kv, Dh};
    if (R != 0) {
        it[ni++] = (dsv4_matmul_item){&L->attn_compressor_kv, 0, Wc, w->xn, E, w->ckv, Wc};
        it[ni++] = (dsv4_matmul_item){&L->attn_compressor_gate, 0, Wc, w->xn, E, w->cg, Wc};
    }
    if (R == 4) {
        it[ni++] = (dsv4_matmul_item){&L->indexer_compressor_kv, 0, 2 * Id, w->xn, E, w->ikv, 2 * Id};
        it[ni++] = (dsv4_matmul_item){&L->indexer_compressor_gate, 0, 2 * Id, w->xn, E, w->ig, 2 * Id};
    }
    const bool iw_done = R == 4 && t_idx == 0;
    if (iw_done) it[ni++] = (dsv4_matmul_item){&L->indexer_proj, 0, IH, w->xn, E, w->iw, IH};
    GB(matmuls(g, it, ni, n, err));
    const bool chunked = n > 1 && !g->prefill_serial && OPS->compressor_chunk && OPS->indexer_topk_chunk &&
                         OPS->attention_chunk;
    /* a chunk's queries normed and rotated inside the attention (they stay raw in w->q until then) */
    const dsv4_fused_query aq = graph_fused_query(g, n, Dh, DSV4_TYPE_F32, DSV4_TYPE_F32, H);
    g->q_raw =
        chunked && graph_fusion_wanted(g, DSV4_FUSED_ATTN_CHUNK_QNR, OPS->attention_chunk_qnr != NULL, &aq);
    if (n == 1 && t_idx != 0) { /* a decode token without the indexer: the same, in attention_qnr */
        const dsv4_fused_query dq = {.n_tokens = 1,
                                     .width = Dh,
                                     .weight_type = kv->layout.row_type,
                                     .mode = g->mode,
                                     .n_hc = H,
                                     .aux_type = kv->layout.row_type,
                                     .tier = g->active,
                                     .n_tiers = g->n_tiers};
        g->q_raw = graph_fusion_wanted(g, DSV4_FUSED_ATTN_QNR, OPS->attention_qnr != NULL, &dq);
    }
    bool pushed = false; /* token 0's KV side done on a lane (decode) */
    if (n == 1) {
        /* The KV side (norm, RoPE, FP8, cache push, compressors) shares no buffer with the query
         * side, so on a side lane it runs while the query projections do: the same ops on the same
         * operands. It advances KV state, so it cannot be redone: the fusion fails (and falls back)
         * only before it starts (the lanes not opened, or an injected fault); an op's error after
         * that is returned, as in the unfused sequence. */
        const dsv4_fused_query fq = graph_fused_query(g, n, Dh, L->attn_kv.type, L->attn_kv_a_norm.type, 0);
        if (graph_fusion_wanted(g, DSV4_FUSED_PARALLEL_ATTN, OPS->lanes != NULL, &fq)) {
            dsv4_status st = g->fusion_fault >> DSV4_FUSED_PARALLEL_ATTN & 1u ? DSV4_ERR_IO : DSV4_OK;
            if (st != DSV4_OK) g->stats.fusion[DSV4_FUSED_PARALLEL_ATTN].faulted++;
            if (st == DSV4_OK) st = OPS->lanes(BCTX, DSV4_LANE_SIDE, err);
            if (st == DSV4_OK) {
                st = kv_projected(g, L, rope, n, p0, err);
                if (st == DSV4_OK) st = kv_push(g, kv, il, 0, err);
                dsv4_error e2 = {0};
                const dsv4_status sm = OPS->lanes(BCTX, DSV4_LANE_MAIN, &e2);
                if (st == DSV4_OK && sm != DSV4_OK) return dsv4_fail(err, sm, "%s", e2.msg);
                if (st == DSV4_OK) st = query_side(g, L, rope, n, p0, t_idx, iw_done, err);
                const dsv4_status sj = OPS->lanes(BCTX, DSV4_LANE_JOIN, &e2);
                if (st != DSV4_OK) return st;
                if (sj != DSV4_OK) return dsv4_fail(err, sj, "%s", e2.msg);
                g->stats.fusion[DSV4_FUSED_PARALLEL_ATTN].selected++;
                pushed = true;
            } else {
                g->stats.fusion[DSV4_FUSED_PARALLEL_ATTN].fallback++;
                dsv4_error_clear(err);
            }
        }
    }
    if (!pushed) {
        GB(query_side(g, L, rope, n, p0, t_idx, iw_done, err));
        GB(kv_projected(g, L, rope, n, p0, err));
    }

    /* ---- per chunk (batched ops) or per token: cache push, compressors, indexer, attention ---- */
    bool roped = false; /* the heads came out of the attention with their inverse RoPE (attn_rope) */
    if (chunked) {
        GB(graph_attention_chunk(g, kv, il, n, t_idx, h, &roped, err));
        g->stats.attn_chunks++;
    } else {
        GB(attention_per_token(g, kv, il, n, pushed, h, &roped, err));
        g->stats.attn_serial_tokens += n;
    }
    /* ---- batched: inverse RoPE, grouped output projection, HC post ---- */
    if (!roped) GB(OPS->rope_tail(BCTX, w->heads, n, H, Dh, p0, 1, rope, true, err));
    const uint32_t G = c->n_out_group, OL = c->o_lora_rank, gdim = QD / G;
    if (OPS->matmul_grouped && L->attn_output_a.ne[0] == gdim) {
        GB(OPS->matmul_grouped(BCTX, &L->attn_output_a, G, w->heads, QD, n, w->low, (uint64_t)G * OL, err));
    } else {
        for (uint32_t gi = 0; gi < G; gi++)
            GB(OPS->matmul(BCTX, &L->attn_output_a, (uint64_t)gi * OL, OL, w->heads + (uint64_t)gi * gdim, QD,
                           n, w->low + (uint64_t)gi * OL, (uint64_t)G * OL, err));
    }
    GB(OPS->matmul(BCTX, &L->attn_output_b, 0, E, w->low, (uint64_t)G * OL, n, w->attn_out, E, err));
    /* one decode token: the post is formed inside the FFN's pre step (its fallback runs it there) */
    const dsv4_fused_query pq = graph_fused_query(g, n, E, L->hc_ffn_fn.type, L->ffn_norm.type, 0);
    if (n == 1 && post_pending &&
        graph_fusion_wanted(g, DSV4_FUSED_HC_POST_PRE_NORM, OPS->hc_post_pre_norm != NULL, &pq)) {
        *post_pending = true;
        return DSV4_OK;
    }
    return OPS->hc_post(BCTX, w->attn_out, w->hc_cur, w->split, n, c->n_hc, E, w->hc_mid, err);
}

/* The routed experts: their k slot rows into w->slots when *slots (moe_sum_post; a failure there is
 * the fusion's: counted, then the unfused moe runs and *slots turns false), else their sum into
 * w->routed. */
static dsv4_status routed_experts(dsv4_graph *g, const dsv4_layer_weights *L, uint32_t n, uint32_t k,
                                  float clamp, bool *slots, dsv4_error *err) {
    graph_ws *w = &g->w;
    if (*slots) {
        const dsv4_status st = OPS->moe_slots(BCTX, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                                              w->xn, n, w->rsel, w->rw, k, clamp, w->slots, err);
        if (st == DSV4_OK) return DSV4_OK;
        *slots = false;
        g->stats.fusion[DSV4_FUSED_MOE_SUM_POST].fallback++;
        dsv4_error_clear(err);
    }
    return OPS->moe(BCTX, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, w->xn, n, w->rsel, w->rw, k,
                    clamp, w->routed, err);
}

dsv4_status graph_layer_ffn(dsv4_graph *g, uint32_t il, const int32_t *tokens, uint32_t n, bool post_pending,
                            dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_layer_weights *L = &g->m->layers[il];
    graph_ws *w = &g->w;
    const uint32_t E = c->n_embd, k = c->n_expert_used;
    const float clamp = c->swiglu_clamp ? c->swiglu_clamp[il] : 0.0f;
    const float *split = w->split; /* the FFN's HC split (split2 when the fused op made it) */
    bool pre_done = false;
    if (post_pending) { /* the attention's post, inside this pre step (hc_post_pre_norm) */
        const dsv4_status st =
            OPS->hc_post_pre_norm(BCTX, w->attn_out, w->hc_cur, w->split, w->hc_mid, &L->hc_ffn_fn,
                                  &L->hc_ffn_scale, &L->hc_ffn_base, &L->ffn_norm, c->n_hc, E,
                                  c->hc_sinkhorn_iter, c->rms_eps, c->hc_eps, w->xn, w->split2, err);
        float *const outs[3] = {w->hc_mid, w->xn, w->split2};
        const size_t n_outs[3] = {(size_t)c->n_hc * E, E, dsv4_cfg_hc_mix(c)};
        pre_done = graph_fusion_result(g, DSV4_FUSED_HC_POST_PRE_NORM, st, outs, n_outs, 3, err);
        if (pre_done)
            split = w->split2;
        else
            GB(OPS->hc_post(BCTX, w->attn_out, w->hc_cur, w->split, n, c->n_hc, E, w->hc_mid, err));
    }
    if (!pre_done)
        GB(hc_pre_normed(g, &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base, &L->ffn_norm, w->hc_mid, n,
                         err));

    /* the router and the shared expert's gate and up: all products of xn, in one call */
    const bool shared = dsv4_tensor_present(&L->ffn_gate_shexp);
    const uint32_t ff = shared ? (uint32_t)L->ffn_gate_shexp.ne[1] : 0;
    const dsv4_matmul_item it[3] = {{&L->ffn_gate_inp, 0, c->n_expert, w->xn, E, w->rlog, c->n_expert},
                                    {&L->ffn_gate_shexp, 0, ff, w->xn, E, w->sg, ff},
                                    {&L->ffn_up_shexp, 0, ff, w->xn, E, w->su, ff}};
    const bool hash = dsv4_cfg_is_hash_layer(c, il) && dsv4_tensor_present(&L->ffn_gate_tid2eid);
    const dsv4_tensor *bias = !hash && dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
    /* one decode token of a top-k layer: the selection inside the products' call */
    const dsv4_fused_query rq =
        graph_fused_query(g, n, c->n_expert, L->ffn_gate_inp.type, bias ? bias->type : DSV4_TYPE_F32, k);
    bool routed = false;
    if (n == 1 && !hash && graph_fusion_wanted(g, DSV4_FUSED_ROUTER_TOPK, OPS->matmuls_router != NULL, &rq)) {
        const dsv4_status st = OPS->matmuls_router(BCTX, it, shared ? 3 : 1, n, c->n_expert, k, bias,
                                                   c->expert_weights_scale, w->rsel, w->rw, err);
        /* the ids are poisoned as floats (NaN bits: no expert), the fallback rewrites them */
        float *const outs[3] = {w->rlog, w->rw, (float *)w->rsel};
        const size_t n_outs[3] = {c->n_expert, k, k};
        routed = graph_fusion_result(g, DSV4_FUSED_ROUTER_TOPK, st, outs, n_outs, 3, err);
    }
    if (!routed) {
        GB(matmuls(g, it, shared ? 3 : 1, n, err));
        GB(OPS->router_select(BCTX, w->rlog, n, c->n_expert, k, bias, hash ? &L->ffn_gate_tid2eid : NULL,
                              tokens, c->expert_weights_scale, w->rsel, w->rw, err));
    }
    if (!shared) {
        GB(OPS->moe(BCTX, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, w->xn, n, w->rsel, w->rw, k,
                    clamp, w->routed, err));
        return OPS->hc_post(BCTX, w->routed, w->hc_mid, split, n, c->n_hc, E, w->hc_cur, err);
    }
    /* One decode token: the routed slots summed inside the FFN's post (moe_sum_post), one launch
     * less; the unfused moe and post below when it may not run or fails. */
    const dsv4_fused_query sq = graph_fused_query(g, n, E, L->ffn_down_exps.type, L->ffn_gate_exps.type,
                                                  (uint32_t)L->ffn_gate_exps.ne[1]);
    bool slots = n == 1 && k * E > 0 &&
                 graph_fusion_wanted(g, DSV4_FUSED_MOE_SUM_POST, OPS->moe_slots && OPS->hc_post_slots, &sq);
    /* The shared expert on a side lane while the routed experts run: the same ops on disjoint
     * buffers, so the same values; a failure joins the lanes and reruns both in order. */
    const dsv4_fused_query fq = graph_fused_query(g, n, E, L->ffn_down_shexp.type, L->ffn_gate_exps.type, 0);
    bool done = false;
    if (graph_fusion_wanted(g, DSV4_FUSED_PARALLEL_FFN, OPS->lanes != NULL, &fq)) {
        dsv4_status st = OPS->lanes(BCTX, DSV4_LANE_SIDE, err);
        const bool forked = st == DSV4_OK;
        if (st == DSV4_OK) st = OPS->swiglu(BCTX, w->sg, w->su, (size_t)n * ff, clamp, w->sm, err);
        if (st == DSV4_OK) st = OPS->matmul(BCTX, &L->ffn_down_shexp, 0, E, w->sm, ff, n, w->shared, E, err);
        if (forked) {
            dsv4_error e2 = {0};
            const dsv4_status sm = OPS->lanes(BCTX, DSV4_LANE_MAIN, &e2);
            if (sm != DSV4_OK) return dsv4_fail(err, sm, "%s", e2.msg);
        }
        if (st == DSV4_OK) st = routed_experts(g, L, n, k, clamp, &slots, err);
        if (forked) {
            dsv4_error e2 = {0};
            const dsv4_status sj = OPS->lanes(BCTX, DSV4_LANE_JOIN, &e2);
            if (sj != DSV4_OK) return dsv4_fail(err, sj, "%s", e2.msg);
        }
        float *const outs[3] = {w->sm, w->shared, slots ? w->slots : w->routed};
        const size_t n_outs[3] = {(size_t)n * ff, (size_t)n * E, (size_t)n * (slots ? k : 1) * E};
        done = graph_fusion_result(g, DSV4_FUSED_PARALLEL_FFN, st, outs, n_outs, 3, err);
    }
    if (!done) {
        GB(routed_experts(g, L, n, k, clamp, &slots, err));
        GB(OPS->swiglu(BCTX, w->sg, w->su, (size_t)n * ff, clamp, w->sm, err));
        GB(OPS->matmul(BCTX, &L->ffn_down_shexp, 0, E, w->sm, ff, n, w->shared, E, err));
    }
    if (slots) {
        const dsv4_status st =
            OPS->hc_post_slots(BCTX, w->slots, k, w->shared, w->hc_mid, split, n, c->n_hc, E, w->hc_cur, err);
        float *const outs[1] = {w->hc_cur};
        const size_t n_outs[1] = {(size_t)n * c->n_hc * E};
        if (graph_fusion_result(g, DSV4_FUSED_MOE_SUM_POST, st, outs, n_outs, 1, err)) return DSV4_OK;
        /* the unfused sequence from the routed sum on (moe is a function of its inputs) */
        GB(OPS->moe(BCTX, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, w->xn, n, w->rsel, w->rw, k,
                    clamp, w->routed, err));
    }
    /* routed + shared inside the HC post (the add's float sums, then the post's expression) */
    const dsv4_fused_query pq = graph_fused_query(g, n, E, L->ffn_down_shexp.type, L->ffn_down_exps.type, 0);
    if (graph_fusion_wanted(g, DSV4_FUSED_HC_POST_ADD, OPS->hc_post_add != NULL, &pq)) {
        const dsv4_status st =
            OPS->hc_post_add(BCTX, w->routed, w->shared, w->hc_mid, split, n, c->n_hc, E, w->hc_cur, err);
        float *const outs[1] = {w->hc_cur};
        const size_t n_outs[1] = {(size_t)n * c->n_hc * E};
        if (graph_fusion_result(g, DSV4_FUSED_HC_POST_ADD, st, outs, n_outs, 1, err)) return DSV4_OK;
    }
    GB(OPS->add(BCTX, w->routed, w->shared, (size_t)n * E, w->f, err));
    return OPS->hc_post(BCTX, w->f, w->hc_mid, split, n, c->n_hc, E, w->hc_cur, err);
}
