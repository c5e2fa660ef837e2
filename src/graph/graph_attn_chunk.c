/* The sequential part of a layer's attention for a whole prefill chunk at once (spec
 * model-attention-hc.md §4.3-§4.6), with the backend's batched ops. The per-token loop
 * (graph_layer.c) pushes token t into the raw ring, steps the compressors, emits a compressed
 * row when a window closes, runs the indexer and attends; here each of those runs once for the
 * chunk and every token reads exactly what the loop showed it:
 *  - the chunk's kv rows are f16-rounded in place (f32), so they equal the ring rows they become;
 *    token t reads chunk positions from them and older positions from the ring, untouched until
 *    the end;
 *  - a compressed row is emitted at its window's last token in the loop, and token t only sees
 *    rows (p+1)/ratio, all emitted at or before p: emitting every row of the chunk first changes
 *    nothing a token sees; the rows are pooled and post-processed in f32 scratch (w->erows) and
 *    only the final store writes them, as the KV row type, to the state;
 *  - after attention the ring gets the chunk's last min(n, cap) rows, as the loop leaves it. */
#include <math.h>
#include <stdlib.h>

#include "common/status.h"
#include "graph/graph_internal.h"

#define OPS g->b->ops
#define BCTX g->b->ctx

/* emit_row for n_rows consecutive compressed rows i0.. (row i at position i*ratio): the pooled
 * rows in `rows` (f32 scratch, post-processed in place) are stored to dst as dst_type. */
static dsv4_status emit_rows(dsv4_graph *g, uint32_t il, const dsv4_tensor *norm, uint32_t width, uint32_t i0,
                             uint32_t ratio, uint32_t n_rows, bool indexer, float *rows, void *dst,
                             uint32_t dst_type, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    GB(OPS->rmsnorm(BCTX, rows, norm, n_rows, width, c->rms_eps, rows, err));
    GB(OPS->rope_tail(BCTX, rows, n_rows, 1, width, i0 * ratio, ratio, &g->rope[il], false, err));
    if (indexer) {
        GB(OPS->hadamard_fp4(BCTX, rows, n_rows, width, err));
    } else {
        GB(OPS->fp8_kv(BCTX, rows, n_rows, width, width - c->n_rot, err));
    }
    return OPS->store_f16(BCTX, dst, dst_type, rows, n_rows, width, err);
}

/* The indexer hook, once per token that ran the indexer, in token order (one read of the block). */
static dsv4_status indexer_hook(dsv4_graph *g, uint32_t il, uint32_t p_first, uint32_t m, const int32_t *sel,
                                const dsv4_graph_hooks *h, dsv4_error *err) {
    const uint32_t k = g->cfg->idx_top_k;
    const size_t need = (size_t)m * k;
    if (need > g->host_isel_n) {
        uint32_t *p = realloc(g->host_isel, need * sizeof(uint32_t));
        if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for %u indexer selections", m);
        g->host_isel = p;
        g->host_isel_n = need;
    }
    /* ids are >= 0, so int32 and uint32 share the bytes */
    GB(OPS->read(BCTX, g->host_isel, sel, need * sizeof(int32_t), err));
    for (uint32_t t = 0; t < m; t++) h->on_indexer(h->user, il, p_first + t, g->host_isel + (size_t)t * k, k);
    return DSV4_OK;
}

dsv4_status graph_attention_chunk(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t n, uint32_t t_idx,
                                  const dsv4_graph_hooks *h, bool *roped, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_layer_weights *L = &g->m->layers[il];
    const dsv4_kv_layer *K = &kv->layout.layers[il];
    graph_ws *w = &g->w;
    const uint32_t p0 = kv->pos, R = K->ratio, k = c->idx_top_k;
    const uint32_t Dh = c->head_dim, H = c->n_head;
    const uint32_t Id = c->idx_head_dim, IH = c->idx_n_head, Wc = K->coff * Dh;
    const uint32_t kt = g->active; /* the layer's tier holds its KV state */
#define KVP(off) graph_kv_ptr(kv, kt, (off))
    unsigned char *raw = KVP(K->raw);
    const uint32_t cap = kv->layout.raw_cap, kvt = kv->layout.row_type, es = kv->layout.row_esize;
    const float kq_scale = 1.0f / sqrtf((float)Dh);
    const float iw_scale = 1.0f / sqrtf((float)(Id * IH));

    GB(OPS->store_f16(BCTX, w->kv, DSV4_TYPE_F32, w->kv, n, Dh, err));
    if (R != 0) {
        const uint32_t i0 = p0 / R, n_emit = (p0 + n) / R - i0; /* rows emitted within the chunk */
        GB(OPS->compressor_chunk(BCTX, w->ckv, Wc, w->cg, Wc, &L->attn_compressor_ape, p0, n, R, Dh,
                                 KVP(K->comp_kv), KVP(K->comp_sc), w->erows, err));
        if (n_emit)
            GB(emit_rows(g, il, &L->attn_compressor_norm, Dh, i0, R, n_emit, false, w->erows,
                         KVP(K->comp + (uint64_t)i0 * Dh * es), kvt, err));
        if (R == 4) {
            GB(OPS->compressor_chunk(BCTX, w->ikv, 2 * Id, w->ig, 2 * Id, &L->indexer_compressor_ape, p0, n,
                                     R, Id, KVP(K->idx_kv), KVP(K->idx_sc), w->erows, err));
            if (n_emit)
                GB(emit_rows(g, il, &L->indexer_compressor_norm, Id, i0, R, n_emit, true, w->erows,
                             KVP(K->idx + (uint64_t)i0 * kv->layout.idx_row_bytes), kv->layout.idx_type,
                             err));
        }
    }
    const int32_t *sel = NULL;
    if (R == 4 && t_idx < n) { /* rows t_idx.. see more than top_k compressed rows */
        const uint32_t m = n - t_idx;
        int32_t *s = w->isel + (uint64_t)t_idx * k;
        GB(OPS->indexer_topk_chunk(BCTX, w->iq + (uint64_t)t_idx * IH * Id, w->iw + (uint64_t)t_idx * IH,
                                   iw_scale, IH, Id, kv->layout.idx_type, KVP(K->idx), p0 + t_idx, m, R, k, s,
                                   err));
        sel = w->isel;
        if (h && h->on_indexer) GB(indexer_hook(g, il, p0 + t_idx, m, s, h, err));
    }
    bool done = false;
    *roped = false;
    if (g->q_raw) { /* the queries are raw: normed and rotated inside the attention, else here first */
        g->q_raw = false;
        const dsv4_status st = OPS->attention_chunk_qnr(
            BCTX, w->q, n, H, Dh, p0, w->kv, kvt, raw, cap, R ? KVP(K->comp) : NULL, R, sel, sel ? k : 0,
            &L->attn_sinks, kq_scale, c->rms_eps, &g->rope[il], true, w->heads, err);
        float *const outs[1] = {w->heads};
        const size_t n_outs[1] = {(size_t)n * H * Dh};
        done = graph_fusion_result(g, DSV4_FUSED_ATTN_CHUNK_QNR, st, outs, n_outs, 1, err);
        *roped = done; /* the heads came out with their inverse RoPE */
        if (!done) GB(graph_q_norm_rope(g, L, &g->rope[il], n, p0, err));
    }
    if (!done)
        GB(OPS->attention_chunk(BCTX, w->q, n, H, Dh, p0, w->kv, kvt, raw, cap, R ? KVP(K->comp) : NULL, R,
                                sel, sel ? k : 0, &L->attn_sinks, kq_scale, w->heads, err));

    /* the ring ends as the loop leaves it: the chunk's last min(n, cap) rows, one store per
     * contiguous run of slots */
    const uint32_t m = n < cap ? n : cap;
    if (m) {
        const uint32_t s0 = (p0 + n - m) % cap, l1 = m < cap - s0 ? m : cap - s0;
        GB(OPS->store_f16(BCTX, raw + (uint64_t)s0 * Dh * es, kvt, w->kv + (uint64_t)(n - m) * Dh, l1, Dh,
                          err));
        if (m > l1) GB(OPS->store_f16(BCTX, raw, kvt, w->kv + (uint64_t)(n - m + l1) * Dh, m - l1, Dh, err));
    }
#undef KVP
    return DSV4_OK;
}
