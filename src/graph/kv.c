#include "graph/kv.h"

#include <stdlib.h>

#define KV_NEG_INF (-1e30f)

dsv4_status dsv4_kv_layout_init(const dsv4_config *cfg, uint32_t n_ctx, dsv4_kv_layout *out,
                                dsv4_error *err) {
    out->layers = NULL;
    if (n_ctx == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "context size must be at least 1 token");
    dsv4_kv_layer *ls = calloc(cfg->n_layer, sizeof(*ls));
    if (!ls) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the KV layout");
    const uint64_t dh = cfg->head_dim, di = cfg->idx_head_dim;
    out->n_ctx = n_ctx;
    out->raw_cap = cfg->n_swa < n_ctx ? cfg->n_swa : n_ctx; /* ds4: min(sliding window, ctx) */
    if (out->raw_cap == 0) out->raw_cap = 1;
    out->n_layer = cfg->n_layer;
    uint64_t off = 0;
    for (uint32_t il = 0; il < cfg->n_layer; il++) {
        dsv4_kv_layer *l = &ls[il];
        l->ratio = cfg->compress_ratio[il];
        l->coff = l->ratio == 4 ? 2 : 1;
        l->comp = l->comp_kv = l->comp_sc = l->idx = l->idx_kv = l->idx_sc = DSV4_KV_ABSENT;
        l->raw = off;
        off += (uint64_t)out->raw_cap * dh;
        if (l->ratio == 0) continue;
        l->comp_cap = n_ctx / l->ratio + 2;
        const uint64_t frontier = (uint64_t)l->coff * l->ratio * l->coff * dh;
        l->comp = off, off += (uint64_t)l->comp_cap * dh;
        l->comp_kv = off, off += frontier;
        l->comp_sc = off, off += frontier;
        if (l->ratio == 4) {
            const uint64_t ifr = 8 * 2 * di;
            l->idx = off, off += (uint64_t)l->comp_cap * di;
            l->idx_kv = off, off += ifr;
            l->idx_sc = off, off += ifr;
        }
    }
    out->n_floats = off;
    out->layers = ls;
    return DSV4_OK;
}

void dsv4_kv_layout_free(dsv4_kv_layout *l) {
    if (!l) return;
    free(l->layers);
    l->layers = NULL;
}

dsv4_status dsv4_kv_clear(dsv4_backend *b, const dsv4_kv_layout *l, uint32_t il0, uint32_t il1, float *buf,
                          uint64_t base, dsv4_error *err) {
    if (il0 >= il1) return DSV4_OK;
    const uint64_t end = il1 < l->n_layer ? l->layers[il1].raw : l->n_floats;
    const uint64_t first = l->layers[il0].raw;
    dsv4_status st = b->ops->fill_f32(b->ctx, buf + (first - base), 0.0f, end - first, err);
    for (uint32_t il = il0; st == DSV4_OK && il < il1; il++) {
        const dsv4_kv_layer *ly = &l->layers[il];
        /* score frontiers follow their kv frontiers and have the same size */
        if (ly->comp_sc != DSV4_KV_ABSENT)
            st = b->ops->fill_f32(b->ctx, buf + (ly->comp_sc - base), KV_NEG_INF, ly->comp_sc - ly->comp_kv,
                                  err);
        if (st == DSV4_OK && ly->idx_sc != DSV4_KV_ABSENT)
            st =
                b->ops->fill_f32(b->ctx, buf + (ly->idx_sc - base), KV_NEG_INF, ly->idx_sc - ly->idx_kv, err);
    }
    return st;
}
