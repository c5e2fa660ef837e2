/* Graph object: validation, workspace, chunk evaluation and the output head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

#include "graph/graph_internal.h"
#include "graph/rope.h"

#define OPS g->b->ops
#define BCTX g->b->ctx

static dsv4_status check_weight(const dsv4_graph *g, const dsv4_tensor *t, dsv4_error *err) {
    if (!dsv4_tensor_present(t)) return DSV4_OK;
    if (!OPS->supports_weight_type(BCTX, t->type))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "tensor %s has type %s, which the %s backend cannot run",
                         t->name ? t->name : "?", dsv4_type_name(t->type), OPS->name);
    return DSV4_OK;
}

static dsv4_status check_model(dsv4_graph *g, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_model *m = g->m;
    if (c->n_rot % 2 || c->n_rot > c->head_dim || c->n_rot > 512 || c->n_rot > c->idx_head_dim)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "rope.dimension_count %u does not fit heads of %u / indexer heads of %u", c->n_rot,
                         c->head_dim, c->idx_head_dim);
    if ((c->head_dim - c->n_rot) % 64)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "head_dim - n_rot = %u is not a multiple of the FP8 block (64)",
                         c->head_dim - c->n_rot);
    if (c->idx_head_dim < 32 || (c->idx_head_dim & (c->idx_head_dim - 1)))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "indexer key_length %u is not a power of two >= 32 (Hadamard + FP4)",
                         c->idx_head_dim);
    if (c->n_out_group == 0 || c->n_head % c->n_out_group)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%u heads do not split into %u output groups", c->n_head,
                         c->n_out_group);
    if (c->n_hc == 0 || c->n_hc > 16)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%u HC streams (1..16 supported)", c->n_hc);
    GB(check_weight(g, &m->output, err));
    GB(check_weight(g, &m->output_hc_fn, err));
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const dsv4_layer_weights *l = &m->layers[il];
        const dsv4_tensor *mats[] = {&l->hc_attn_fn,
                                     &l->hc_ffn_fn,
                                     &l->attn_q_a,
                                     &l->attn_q_b,
                                     &l->attn_kv,
                                     &l->attn_output_a,
                                     &l->attn_output_b,
                                     &l->attn_compressor_kv,
                                     &l->attn_compressor_gate,
                                     &l->indexer_attn_q_b,
                                     &l->indexer_proj,
                                     &l->indexer_compressor_kv,
                                     &l->indexer_compressor_gate,
                                     &l->ffn_gate_inp,
                                     &l->ffn_gate_exps,
                                     &l->ffn_up_exps,
                                     &l->ffn_down_exps,
                                     &l->ffn_gate_shexp,
                                     &l->ffn_up_shexp,
                                     &l->ffn_down_shexp};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) GB(check_weight(g, mats[i], err));
        const uint32_t r = c->compress_ratio[il];
        if (r != 0 && !dsv4_tensor_present(&l->attn_compressor_kv))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "layer %u has compress ratio %u but no compressor tensors",
                             il, r);
        if (r == 4 && !dsv4_tensor_present(&l->indexer_compressor_kv))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "layer %u has compress ratio 4 but no indexer tensors",
                             il);
        if (dsv4_cfg_is_hash_layer(c, il) && !dsv4_tensor_present(&l->ffn_gate_tid2eid))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "layer %u is hash-routed but has no tid2eid table", il);
    }
    return DSV4_OK;
}

static void free_tier_ws(graph_tier *t) {
    for (uint32_t i = 0; i < t->n_bufs; i++) t->b->ops->buf_free(t->b->ctx, t->bufs[i]);
    t->n_bufs = 0;
    memset(&t->w, 0, sizeof t->w);
}

static void free_ws(dsv4_graph *g) {
    for (uint32_t t = 0; t < g->n_tiers; t++) free_tier_ws(&g->tier[t]);
    memset(&g->w, 0, sizeof g->w);
    g->cap = 0;
}

static dsv4_status ws_alloc(graph_tier *t, void *slot, uint64_t elems, dsv4_error *err) {
    if (t->n_bufs >= GRAPH_MAX_BUFS)
        return dsv4_fail(err, DSV4_ERR_INVALID, "graph: too many workspace buffers");
    void *p = NULL;
    GB(t->b->ops->buf_alloc(t->b->ctx, (size_t)(elems ? elems : 1) * 4, &p, err));
    t->bufs[t->n_bufs++] = p;
    memcpy(slot, &p, sizeof p);
    return DSV4_OK;
}

/* One tier's workspace for cap tokens (that tier is active: device allocations land on it). */
static dsv4_status alloc_tier_ws(dsv4_graph *g, graph_tier *tr, uint32_t cap, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const uint64_t n = cap, hd = (uint64_t)c->n_hc * c->n_embd, e = c->n_embd;
    const uint64_t mix = dsv4_cfg_hc_mix(c), qd = (uint64_t)c->n_head * c->head_dim;
    const uint64_t hr = g->head_rows;
    graph_ws *w = &tr->w;
    dsv4_status st = DSV4_OK;
#define A(field, count)                                                                                      \
    if (st == DSV4_OK) st = ws_alloc(tr, &w->field, (count), err)
    A(hc_cur, n * hd);
    A(hc_mid, n * hd);
    A(u, n * e);
    A(xn, n * e);
    A(attn_out, n * e);
    A(split, n * mix);
    A(split2, mix);
    A(qa, n * c->q_lora_rank);
    A(qr, n * c->q_lora_rank);
    A(q, n * qd);
    A(heads, n * qd);
    A(kv, n * c->head_dim);
    A(ckv, n * g->comp_width_max);
    A(cg, n * g->comp_width_max);
    A(ikv, n * 2 * c->idx_head_dim);
    A(ig, n * 2 * c->idx_head_dim);
    A(iq, n * c->idx_n_head * c->idx_head_dim);
    A(iw, n * c->idx_n_head);
    A(pooled, c->head_dim > c->idx_head_dim ? c->head_dim : c->idx_head_dim);
    A(crow, c->head_dim > c->idx_head_dim ? c->head_dim : c->idx_head_dim);
    A(erows, n * (c->head_dim > c->idx_head_dim ? c->head_dim : c->idx_head_dim));
    A(isel, n * c->idx_top_k); /* a chunk's selections (the batched indexer) */
    A(low, n * c->n_out_group * c->o_lora_rank);
    A(rlog, n * c->n_expert);
    A(rw, n * c->n_expert_used);
    A(rsel, n * c->n_expert_used);
    A(routed, n * e);
    A(slots, (uint64_t)c->n_expert_used * e);
    A(shared, n * e);
    A(f, n * e);
    A(sg, n * g->shared_ff);
    A(su, n * g->shared_ff);
    A(sm, n * g->shared_ff);
    A(hy, hr * e);
    A(hyn, hr * e);
    A(logits, hr * c->n_vocab);
#undef A
    return st;
}

/* Every tier's workspace for cap tokens. The hidden state does not survive: callers (re)allocate
 * only before the embedding writes it. */
static dsv4_status alloc_ws(dsv4_graph *g, uint32_t cap, dsv4_error *err) {
    free_ws(g);
    dsv4_status st = DSV4_OK;
    for (uint32_t t = 0; st == DSV4_OK && t < g->n_tiers; t++) {
        st = graph_switch_tier(g, t, DSV4_TIER_NOCOPY, 0, err);
        if (st == DSV4_OK) st = alloc_tier_ws(g, &g->tier[t], cap, err);
        if (st != DSV4_OK && g->n_tiers > 1) dsv4_error_prefix(err, "tier %u: ", t);
    }
    if (st != DSV4_OK) {
        free_ws(g);
        dsv4_error_prefix(err, "graph workspace for %u tokens: ", cap);
        return st;
    }
    g->w = g->tier[g->active].w;
    g->cap = cap;
    return DSV4_OK;
}

dsv4_status dsv4_graph_reserve(dsv4_graph *g, uint32_t n, dsv4_error *err) {
    if (n <= g->cap) return DSV4_OK;
    g->prep_valid = false;
    return alloc_ws(g, n, err);
}

dsv4_status dsv4_graph_create(const dsv4_model *m, dsv4_backend *b, uint32_t chunk_cap, bool fusion,
                              dsv4_graph **out, dsv4_error *err) {
    dsv4_graph_params p = {0};
    p.chunk_cap = chunk_cap;
    p.tiers[0] = b;
    p.fusion = fusion;
    return dsv4_graph_create_ex(m, &p, out, err);
}

dsv4_status dsv4_graph_create_ex(const dsv4_model *m, const dsv4_graph_params *p, dsv4_graph **out,
                                 dsv4_error *err) {
    *out = NULL;
    dsv4_graph *g = calloc(1, sizeof(*g));
    if (!g) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the graph");
    g->m = m;
    g->cfg = &m->cfg;
    g->fusion = p->fusion;
    g->fusion_disable = p->fusion_disable;
    g->fusion_fault = p->fusion_fault;
    g->force_bounce = p->force_bounce;
    g->record_steps = !p->no_step_record;
    g->prepare_ahead = !p->no_step_ahead;
    g->warm = !p->no_step_warm;
    g->prefill_serial = p->prefill_serial;
    g->rec_lead = -1;
    g->kv_type = dsv4_kv_row_type(p->numerics, p->kv_f32);
    g->head_rows = 16;
    const dsv4_config *c = g->cfg;
    dsv4_status st = DSV4_OK;
    if (p->placement) {
        g->place = *p->placement;
        st = dsv4_placement_check(&g->place, c->n_layer, err);
    } else {
        st = dsv4_placement_single(c->n_layer, p->tiers[0] ? p->tiers[0]->ops->name : "cpu", 0, &g->place,
                                   err);
    }
    g->n_tiers = g->place.n_tiers;
    for (uint32_t t = 0; st == DSV4_OK && t < g->n_tiers; t++) {
        g->tier[t].b = p->tiers[t];
        if (!p->tiers[t] || !p->tiers[t]->ops)
            st = dsv4_fail(err, DSV4_ERR_INVALID, "graph: tier %u has no backend", t);
    }
    if (st != DSV4_OK) {
        g->n_tiers = 0;
        dsv4_graph_free(g);
        return st;
    }
    g->active = 0;
    g->b = g->tier[0].b;
    g->comp_width_max = c->head_dim;
    for (uint32_t il = 0; il < c->n_layer; il++)
        if (c->compress_ratio[il] == 4) g->comp_width_max = 2 * c->head_dim;
    g->shared_ff =
        dsv4_tensor_present(&m->layers[0].ffn_gate_shexp) ? (uint32_t)m->layers[0].ffn_gate_shexp.ne[1] : 1;
    for (uint32_t il = 1; il < c->n_layer; il++)
        if (dsv4_tensor_present(&m->layers[il].ffn_gate_shexp) &&
            m->layers[il].ffn_gate_shexp.ne[1] > g->shared_ff)
            g->shared_ff = (uint32_t)m->layers[il].ffn_gate_shexp.ne[1];
    /* every tier checks the whole model: tiers of one kind accept the same types */
    for (uint32_t t = 0; st == DSV4_OK && t < g->n_tiers; t++) {
        g->b = g->tier[t].b;
        st = check_model(g, err);
    }
    g->b = g->tier[0].b;
    if (st == DSV4_OK) {
        g->rope = calloc(c->n_layer, sizeof(dsv4_rope));
        g->host_logits = malloc((size_t)g->head_rows * c->n_vocab * sizeof(float));
        g->host_isel_n = (size_t)c->idx_top_k + 1;
        g->host_isel = malloc(g->host_isel_n * sizeof(uint32_t));
        if (!g->rope || !g->host_logits || !g->host_isel)
            st = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the graph");
    }
    if (st == DSV4_OK) {
        for (uint32_t il = 0; il < c->n_layer; il++) g->rope[il] = dsv4_rope_for_layer(c, il);
        st = alloc_ws(g, p->chunk_cap ? p->chunk_cap : 1, err);
    }
    if (st != DSV4_OK) {
        dsv4_graph_free(g);
        return st;
    }
    *out = g;
    return DSV4_OK;
}

void dsv4_graph_free(dsv4_graph *g) {
    if (!g) return;
    free_ws(g);
    dsv4_bounce_free(&g->bounce);
    free(g->rope);
    free(g->host_logits);
    free(g->host_isel);
    free(g);
}

uint32_t dsv4_graph_n_tiers(const dsv4_graph *g) { return g->n_tiers; }

/* Tier t's part of the layout: the layers it runs, as one byte range. */
static void tier_region(const dsv4_graph *g, const dsv4_kv_layout *l, uint32_t t, uint64_t *base,
                        uint64_t *n) {
    uint32_t a, b;
    dsv4_placement_layers(&g->place, t, &a, &b);
    if (a == b) {
        *base = *n = 0;
        return;
    }
    *base = l->layers[a].raw;
    *n = dsv4_kv_layer_end(l, b - 1) - *base;
}

void *graph_kv_ptr(const dsv4_kv_state *kv, uint32_t tier, uint64_t off) {
    return kv->tbuf[tier] + (off - kv->tbase[tier]);
}

dsv4_status dsv4_kv_state_init(dsv4_graph *g, uint32_t n_ctx, dsv4_kv_state *kv, dsv4_error *err) {
    memset(kv, 0, sizeof(*kv));
    GB(dsv4_kv_layout_init(g->cfg, n_ctx, g->kv_type, &kv->layout, err));
    kv->n_tiers = g->n_tiers;
    dsv4_status st = DSV4_OK;
    for (uint32_t t = 0; st == DSV4_OK && t < g->n_tiers; t++) {
        tier_region(g, &kv->layout, t, &kv->tbase[t], &kv->tbytes[t]);
        if (!kv->tbytes[t]) continue;
        st = graph_switch_tier(g, t, DSV4_TIER_NOCOPY, 0, err);
        void *p = NULL;
        if (st == DSV4_OK) st = OPS->buf_alloc(BCTX, (size_t)kv->tbytes[t], &p, err);
        if (st != DSV4_OK && g->n_tiers > 1) dsv4_error_prefix(err, "tier %u: ", t);
        kv->tbuf[t] = p;
    }
    if (st != DSV4_OK) {
        dsv4_error_prefix(err, "KV state for a context of %u tokens: ", n_ctx);
        dsv4_kv_state_free(g, kv);
        return st;
    }
    st = dsv4_kv_state_reset(g, kv, err);
    if (st != DSV4_OK) dsv4_kv_state_free(g, kv);
    return st;
}

dsv4_status dsv4_kv_state_reset(dsv4_graph *g, dsv4_kv_state *kv, dsv4_error *err) {
    kv->pos = 0;
    for (uint32_t t = 0; t < kv->n_tiers; t++) {
        if (!kv->tbytes[t]) continue;
        uint32_t a, b;
        dsv4_placement_layers(&g->place, t, &a, &b);
        GB(graph_switch_tier(g, t, DSV4_TIER_NOCOPY, 0, err));
        GB(dsv4_kv_clear(g->b, &kv->layout, a, b, kv->tbuf[t], kv->tbase[t], err));
    }
    return DSV4_OK;
}

void dsv4_kv_state_free(dsv4_graph *g, dsv4_kv_state *kv) {
    for (uint32_t t = 0; t < kv->n_tiers; t++)
        if (kv->tbuf[t]) g->tier[t].b->ops->buf_free(g->tier[t].b->ctx, kv->tbuf[t]);
    dsv4_kv_layout_free(&kv->layout);
    memset(kv, 0, sizeof(*kv));
}

static dsv4_status kv_xfer(dsv4_graph *g, const dsv4_kv_state *kv, uint64_t off, uint64_t n, void *host,
                           const void *src, dsv4_error *err) {
    if (off > kv->layout.n_bytes || n > kv->layout.n_bytes - off)
        return dsv4_fail(err, DSV4_ERR_RANGE, "KV transfer of %llu bytes at %llu is outside the state",
                         (unsigned long long)n, (unsigned long long)off);
    for (uint32_t t = 0; t < kv->n_tiers; t++) {
        const uint64_t lo = off > kv->tbase[t] ? off : kv->tbase[t];
        const uint64_t e1 = off + n, e2 = kv->tbase[t] + kv->tbytes[t];
        const uint64_t hi = e1 < e2 ? e1 : e2;
        if (lo >= hi) continue;
        GB(graph_switch_tier(g, t, DSV4_TIER_NOCOPY, 0, err));
        void *dev = graph_kv_ptr(kv, t, lo);
        const size_t bytes = (size_t)(hi - lo);
        if (host)
            GB(OPS->read(BCTX, (unsigned char *)host + (lo - off), dev, bytes, err));
        else
            GB(OPS->write(BCTX, dev, (const unsigned char *)src + (lo - off), bytes, err));
    }
    return DSV4_OK;
}

dsv4_status dsv4_kv_state_read(dsv4_graph *g, const dsv4_kv_state *kv, uint64_t off, uint64_t n, void *host,
                               dsv4_error *err) {
    return kv_xfer(g, kv, off, n, host, NULL, err);
}

dsv4_status dsv4_kv_state_write(dsv4_graph *g, dsv4_kv_state *kv, uint64_t off, uint64_t n, const void *host,
                                dsv4_error *err) {
    return kv_xfer(g, kv, off, n, NULL, host, err);
}

/* HC head + final norm + LM head for chunk rows [r0, n), delivered to the hook in batches; a
 * recorded step (issue_only) issues the ops of its one row and returns before reading. */
static dsv4_status output_head(dsv4_graph *g, uint32_t r0, uint32_t n, const dsv4_graph_hooks *h,
                               bool issue_only, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_model *m = g->m;
    const uint64_t hd = (uint64_t)c->n_hc * c->n_embd;
    for (uint32_t r = r0; r < n; r += g->head_rows) {
        const uint32_t nb = n - r < g->head_rows ? n - r : g->head_rows;
        GB(OPS->hc_head(BCTX, &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base, g->w.hc_cur + r * hd,
                        nb, c->n_hc, c->n_embd, c->rms_eps, c->hc_eps, g->w.hy, err));
        GB(OPS->rmsnorm(BCTX, g->w.hy, &m->output_norm, nb, c->n_embd, c->rms_eps, g->w.hyn, err));
        GB(OPS->matmul(BCTX, &m->output, 0, c->n_vocab, g->w.hyn, c->n_embd, nb, g->w.logits, c->n_vocab,
                       err));
        if (issue_only) return DSV4_OK;
        GB(OPS->read(BCTX, g->host_logits, g->w.logits, (size_t)nb * c->n_vocab * sizeof(float), err));
        if (h && h->on_logits)
            for (uint32_t i = 0; i < nb; i++)
                h->on_logits(h->user, r + i, g->host_logits + (uint64_t)i * c->n_vocab, c->n_vocab);
    }
    return DSV4_OK;
}

/* The op sequence of a decode step changes only where a compressor closes a window or the
 * indexer switches on; the step's recording key names that. */
static uint64_t step_key(const dsv4_graph *g, const dsv4_kv_state *kv) {
    const uint32_t p = kv->pos;
    uint64_t key = 1469598103934665603ull; /* FNV-1a over one flag byte per layer */
    for (uint32_t il = 0; il < g->cfg->n_layer; il++) {
        const uint32_t R = kv->layout.layers[il].ratio;
        uint32_t f = 0;
        if (R) f = ((p + 1) % R == 0) | (R == 4 && (p + 1) / R > g->cfg->idx_top_k ? 2u : 0u);
        key = (key ^ f) * 1099511628211ull;
    }
    return key;
}

static void warm_steps(dsv4_graph *g, dsv4_kv_state *kv, uint32_t n);
static bool can_record(const dsv4_graph *g);

/* Every op of the evaluation, embedding to LM head. issue_only (a recorded decode step): stop
 * before reading the logits, leaving kv->pos alone. */
static dsv4_status eval_ops(dsv4_graph *g, dsv4_kv_state *kv, const int32_t *tokens, uint32_t n,
                            const dsv4_graph_hooks *h, bool issue_only, bool *damaged, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    const dsv4_tier_mode mode = n == 1 ? DSV4_TIER_DECODE : DSV4_TIER_BATCH;
    g->mode = mode;
    /* the embedding writes the hidden state fresh on its tier: nothing to carry */
    GB(graph_switch_tier(g, g->place.entry[0], DSV4_TIER_NOCOPY, 0, err));
    GB(OPS->embed(BCTX, &g->m->token_embd, tokens, n, c->n_hc, g->w.hc_cur, err));
    for (uint32_t il = 0; il < c->n_layer; il++) {
        if (h && h->cancel && atomic_load(h->cancel)) {
            *damaged = il > 0 && !issue_only;
            return dsv4_fail(err, DSV4_ERR_CANCELLED, "evaluation cancelled before layer %u of %u", il,
                             c->n_layer);
        }
        GB(graph_switch_tier(g, g->place.entry[1 + il], mode, n, err));
        *damaged = !issue_only;    /* from here on the KV state has moved past kv->pos */
        bool post_pending = false; /* the attention's post is left to the FFN's pre (hc_post_pre_norm) */
        GB(graph_layer_attention(g, kv, il, n, h, &post_pending, err));
        GB(graph_layer_ffn(g, il, tokens, n, post_pending, err));
        if (h && h->on_layer) h->on_layer(h->user, il, c->n_layer);
    }
    GB(graph_switch_tier(g, g->place.entry[c->n_layer + 1], mode, n, err));
    if (!issue_only && n > 1) { /* while the device runs the chunk (the head reads the logits back) */
        warm_steps(g, kv, n);
        g->mode = mode;
    }
    GB(output_head(g, h && h->all_logits ? 0 : n - 1, n, h, issue_only, err));
    if (issue_only) return DSV4_OK;
    /* every tier's queue has drained into the head tier's (each copy waited for its source) */
    GB(OPS->sync(BCTX, err));
    kv->pos += n;
    *damaged = false;
    return DSV4_OK;
}

/* The one row of a recorded decode step, read back from the head's tier and handed to the hook. */
static dsv4_status output_head_read(dsv4_graph *g, const dsv4_graph_hooks *h, dsv4_error *err) {
    const uint32_t nv = g->cfg->n_vocab;
    const graph_tier *ht = &g->tier[g->place.entry[g->cfg->n_layer + 1]];
    if (g->n_tiers > 1 && ht->b->ops->activate) GB(ht->b->ops->activate(ht->b->ctx, err));
    GB(ht->b->ops->read(ht->b->ctx, g->host_logits, ht->w.logits, (size_t)nv * sizeof(float), err));
    if (h && h->on_logits) h->on_logits(h->user, 0, g->host_logits, nv);
    return DSV4_OK;
}

/* The statistics are plain uint64 counters: a recorded step counts what its ops counted when it
 * was issued, applied when it runs. */
static void stats_add_delta(dsv4_exec_stats *s, const dsv4_exec_stats *after, const dsv4_exec_stats *before) {
    _Static_assert(sizeof(dsv4_exec_stats) % sizeof(uint64_t) == 0, "stats are uint64 counters");
    uint64_t *d = (uint64_t *)s;
    const uint64_t *a = (const uint64_t *)after, *b = (const uint64_t *)before;
    for (size_t i = 0; i < sizeof(dsv4_exec_stats) / sizeof(uint64_t); i++) d[i] += a[i] - b[i];
}

/* Record the decode step at kv->pos under its key (hooks: cancel and progress only). On success
 * the backend holds it and *after minus *before is what its ops counted; on failure nothing
 * was recorded, the statistics are as before and err says why. */
static dsv4_status record_step(dsv4_graph *g, dsv4_kv_state *kv, const int32_t *token,
                               const dsv4_graph_hooks *h, uint64_t key, dsv4_exec_stats *after,
                               dsv4_exec_stats *before, dsv4_error *err) {
    *before = g->stats;
    /* the lead tier (the embedding's) records; other tiers join as the step reaches them */
    const uint32_t lead = g->place.entry[0];
    dsv4_backend *lb = g->tier[lead].b;
    dsv4_status st = g->n_tiers > 1 && lb->ops->activate ? lb->ops->activate(lb->ctx, err) : DSV4_OK;
    if (st == DSV4_OK) st = lb->ops->step_begin(lb->ctx, key, err);
    if (st != DSV4_OK) return st;
    g->rec_lead = g->n_tiers > 1 ? (int32_t)lead : -1;
    g->rec_joined = 0;
    bool damaged = false;
    st = eval_ops(g, kv, token, 1, h, true, &damaged, err);
    for (uint32_t t = 0; t < g->n_tiers; t++) {
        if (!(g->rec_joined & (1u << t))) continue;
        dsv4_error lerr = {0};
        const dsv4_status sl = g->tier[t].b->ops->step_leave(g->tier[t].b->ctx, lb->ctx, &lerr);
        if (st == DSV4_OK && sl != DSV4_OK) {
            st = sl;
            *err = lerr;
        }
    }
    g->rec_lead = -1;
    g->rec_joined = 0;
    if (st == DSV4_OK)
        st = lb->ops->step_end(lb->ctx, false, err);
    else
        lb->ops->step_end(lb->ctx, true, NULL);
    *after = g->stats;
    g->stats = *before;
    if (g->n_tiers > 1) g->rec_multi_failures = st == DSV4_OK ? 0 : g->rec_multi_failures + 1;
    return st;
}

/* Record the decode step at position `at` ahead of its evaluation (its token comes at run time);
 * eval_recorded runs it when the step at `at` comes under the same key. Returns the key, or 0 when
 * nothing was recorded. */
static uint64_t prepare_at(dsv4_graph *g, dsv4_kv_state *kv, uint32_t at) {
    g->prep_valid = false;
    if (at >= kv->layout.n_ctx) return 0;
    const uint32_t pos = kv->pos;
    kv->pos = at;
    const uint64_t key = step_key(g, kv);
    const int32_t dummy = 0; /* the recording reads the token from the backend's cell */
    dsv4_error err = {0};
    if (record_step(g, kv, &dummy, NULL, key, &g->prep_after, &g->prep_before, &err) == DSV4_OK) {
        g->prep_valid = true;
        g->prep_kv = kv;
        g->prep_pos = at;
        g->prep_key = key;
    }
    kv->pos = pos;
    return g->prep_valid ? key : 0;
}

/* After running step p, record step p+1 while the device computes. */
static void prepare_next(dsv4_graph *g, dsv4_kv_state *kv) { prepare_at(g, kv, kv->pos + 1); }

static bool warm_key_seen(const dsv4_graph *g, uint64_t key) {
    for (uint32_t i = 0; i < g->n_warm_keys; i++)
        if (g->warm_keys[i] == key) return true;
    return false;
}

/* Give each step key of positions [from, to) that has no graph yet a recording (the backend
 * instantiates a graph once per key, ~10-20 ms of host time for the full model, then updates it in
 * place per step: without this, the first decode step of each new key waits for it). Only the
 * topology matters; the step that later runs under the key records its own arguments. A failed
 * recording only costs its time (the step records again when it comes). Returns the recordings. */
static uint32_t warm_keys(dsv4_graph *g, dsv4_kv_state *kv, uint32_t from, uint32_t to) {
    const uint32_t pos = kv->pos;
    uint32_t n_rec = 0;
    dsv4_exec_stats after, before;
    dsv4_error err = {0};
    const int32_t dummy = 0; /* the recording reads the token from the backend's cell */
    for (uint32_t q = from; q < to && q < kv->layout.n_ctx; q++) {
        if (g->n_warm_keys >= sizeof g->warm_keys / sizeof g->warm_keys[0]) break;
        kv->pos = q;
        const uint64_t key = step_key(g, kv);
        if (warm_key_seen(g, key)) continue;
        n_rec++;
        if (record_step(g, kv, &dummy, NULL, key, &after, &before, &err) != DSV4_OK) {
            /* a recorder that fails here (DSV4_CUDA_GRAPH=0, ...) fails for the other keys too */
            dsv4_log(DSV4_LOG_DEBUG, "warm step at %u not recorded (%s)", q, err.msg);
            break;
        }
        g->warm_keys[g->n_warm_keys++] = key;
    }
    kv->pos = pos;
    return n_rec;
}

static bool warm_allowed(const dsv4_graph *g) {
    return g->warm && g->record_steps && g->prepare_ahead && can_record(g);
}

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* A new session (the device idle): a graph for every step key a decode can meet, the keys of the
 * first positions and, when the context reaches it, those once the indexer is on. */
void dsv4_graph_warm(dsv4_graph *g, dsv4_kv_state *kv) {
    if (!warm_allowed(g) || kv->pos != 0) return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const uint32_t idx_on = 4 * (g->cfg->idx_top_k + 1) - 1; /* first position with the indexer on */
    uint32_t n = warm_keys(g, kv, 1, 131);
    n += warm_keys(g, kv, idx_on, idx_on + 130);
    if (n) dsv4_log(DSV4_LOG_DEBUG, "graph warm: %u step recordings in %.1f ms", n, ms_since(&t0));
}

/* After a prefill chunk is issued (the device is busy with it): the step keys ahead that have no
 * graph yet (none after dsv4_graph_warm), then the first decode step after the chunk, recorded
 * last as prepare_next would, so it runs without waiting for a recording. */
static void warm_steps(dsv4_graph *g, dsv4_kv_state *kv, uint32_t n) {
    if (!warm_allowed(g)) return;
    const uint32_t first = kv->pos + n;
    if ((uint64_t)first >= kv->layout.n_ctx) return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const uint32_t n_rec = warm_keys(g, kv, first + 1, first + 131);
    const uint64_t key = prepare_at(g, kv, first);
    if (g->prep_valid && !warm_key_seen(g, key) &&
        g->n_warm_keys < sizeof g->warm_keys / sizeof g->warm_keys[0])
        g->warm_keys[g->n_warm_keys++] = key;
    dsv4_log(DSV4_LOG_DEBUG, "warm_steps at %u: %u recordings in %.2f ms of host time", first, n_rec + 1,
             ms_since(&t0));
}

/* A decode step through the backend's recorder: use the step recorded ahead when it matches, else
 * record it now; run it with the token; record the next one; then read the logits. DSV4_ERR_UNSUPPORTED
 * (nothing ran): the caller evaluates the step unrecorded. */
static dsv4_status eval_recorded(dsv4_graph *g, dsv4_kv_state *kv, const int32_t *tokens,
                                 const dsv4_graph_hooks *h, bool *damaged, dsv4_error *err) {
    const dsv4_config *c = g->cfg;
    if (tokens[0] < 0 || (uint32_t)tokens[0] >= c->n_vocab)
        return dsv4_fail(err, DSV4_ERR_RANGE, "token id %d is outside the vocabulary (%u)", tokens[0],
                         c->n_vocab);
    const uint64_t key = step_key(g, kv);
    dsv4_exec_stats after, before;
    bool have = g->prep_valid && g->prep_kv == kv && g->prep_pos == kv->pos && g->prep_key == key;
    if (have) {
        after = g->prep_after, before = g->prep_before;
    }
    g->prep_valid = false;
    dsv4_status st = DSV4_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!have) {
            st = record_step(g, kv, tokens, h, key, &after, &before, err);
            if (st != DSV4_OK) return st == DSV4_ERR_CANCELLED ? st : DSV4_ERR_UNSUPPORTED;
        }
        dsv4_backend *lb = g->tier[g->place.entry[0]].b;
        st = lb->ops->step_run(lb->ctx, key, tokens[0], err);
        if (st == DSV4_OK) break;
        if (st != DSV4_ERR_UNSUPPORTED || !have) return DSV4_ERR_UNSUPPORTED; /* nothing ran */
        dsv4_error_clear(err);
        have = false; /* the recording went stale: record it again */
    }
    stats_add_delta(&g->stats, &after, &before);
    g->stats.steps_recorded++;
    *damaged = true;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (g->prepare_ahead) prepare_next(g, kv);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    GB(output_head_read(g, h, err));
    g->stats.step_wait_us += (uint64_t)(ms_since(&t1) * 1e3);
    g->stats.step_prepare_us +=
        (uint64_t)((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3);
    kv->pos += 1;
    *damaged = false;
    return DSV4_OK;
}

/* Whether decode steps can be recorded: every tier offers the step ops; across tiers, all of one
 * backend kind with join/leave, copies that queue on the device (not the host bounce), and the
 * last recordings did not keep failing. */
static bool can_record(const dsv4_graph *g) {
    const dsv4_backend_ops *o0 = g->tier[0].b->ops;
    if (g->n_tiers > 1 && (g->force_bounce || g->rec_multi_failures >= 3)) return false;
    for (uint32_t t = 0; t < g->n_tiers; t++) {
        const dsv4_backend_ops *o = g->tier[t].b->ops;
        if (!o->step_begin || !o->step_end || !o->step_run) return false;
        if (g->n_tiers > 1 && (!o->step_join || !o->step_leave || strcmp(o->name, o0->name) != 0))
            return false;
    }
    return true;
}

dsv4_status dsv4_graph_eval(dsv4_graph *g, dsv4_kv_state *kv, const int32_t *tokens, uint32_t n,
                            const dsv4_graph_hooks *h, bool *damaged, dsv4_error *err) {
    *damaged = false;
    if (n == 0) return DSV4_OK;
    if ((uint64_t)kv->pos + n > kv->layout.n_ctx)
        return dsv4_fail(err, DSV4_ERR_RANGE, "%u tokens at position %u exceed the context of %u tokens", n,
                         kv->pos, kv->layout.n_ctx);
    if (n > g->cap) {
        g->prep_valid = false;
        GB(alloc_ws(g, n, err));
    }
    /* Record a decode step when the backends can (no host read inside the step). Nothing of a
     * recorded step runs before step_run, so a failed recording is evaluated again, unrecorded. */
    if (n == 1 && g->record_steps && can_record(g) && !(h && h->on_indexer)) {
        const dsv4_status st = eval_recorded(g, kv, tokens, h, damaged, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        if (g->n_tiers > 1) /* across tiers a failure is not expected: say why */
            dsv4_log(g->rec_multi_failures >= 3 ? DSV4_LOG_WARN : DSV4_LOG_INFO,
                     "decode step across %u tiers not recorded (%s)%s", g->n_tiers, err->msg,
                     g->rec_multi_failures >= 3 ? "; later steps run op by op" : "");
        else /* an op-by-op step costs about twice a recorded one: say why it happened */
            dsv4_log(DSV4_LOG_INFO, "decode step at position %u not recorded (%s)", kv->pos, err->msg);
        dsv4_error_clear(err);
        g->stats.steps_unrecorded++;
    } else {
        g->prep_valid = false;
    }
    return eval_ops(g, kv, tokens, n, h, false, damaged, err);
}
