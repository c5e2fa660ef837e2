#include "graph/kv.h"

#include <stdlib.h>

#define KV_NEG_INF (-1e30f)

uint32_t dsv4_kv_row_type(dsv4_numerics numerics, bool f32_rows) {
    return numerics == DSV4_NUMERICS_DS4 && !f32_rows ? DSV4_TYPE_F16 : DSV4_TYPE_F32;
}

/* Claims a region of `bytes` at *off (aligned both ends) and returns its start. */
static uint64_t take(uint64_t *off, uint64_t bytes) {
    const uint64_t at = *off;
    *off = (at + bytes + DSV4_KV_ALIGN - 1) / DSV4_KV_ALIGN * DSV4_KV_ALIGN;
    return at;
}

dsv4_status dsv4_kv_layout_init(const dsv4_config *cfg, uint32_t n_ctx, uint32_t row_type,
                                dsv4_kv_layout *out, dsv4_error *err) {
    out->layers = NULL;
    if (n_ctx == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "context size must be at least 1 token");
    if (row_type != DSV4_TYPE_F16 && row_type != DSV4_TYPE_F32)
        return dsv4_fail(err, DSV4_ERR_INVALID, "KV rows of type %s (F16 or F32 only)",
                         dsv4_type_name(row_type));
    dsv4_kv_layer *ls = calloc(cfg->n_layer, sizeof(*ls));
    if (!ls) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the KV layout");
    const uint64_t es = row_type == DSV4_TYPE_F16 ? 2 : 4, fs = sizeof(float);
    const uint64_t dh = cfg->head_dim, di = cfg->idx_head_dim;
    out->n_ctx = n_ctx;
    out->raw_cap = cfg->n_swa < n_ctx ? cfg->n_swa : n_ctx; /* ds4: min(sliding window, ctx) */
    if (out->raw_cap == 0) out->raw_cap = 1;
    out->n_layer = cfg->n_layer;
    out->row_type = row_type;
    out->row_esize = (uint32_t)es;
    out->idx_type = row_type == DSV4_TYPE_F16 ? DSV4_KV_FP4 : DSV4_TYPE_F32;
    out->idx_row_bytes = (uint32_t)(row_type == DSV4_TYPE_F16 ? di / 32 * DSV4_KV_FP4_BLOCK_BYTES : di * fs);
    uint64_t off = 0;
    for (uint32_t il = 0; il < cfg->n_layer; il++) {
        dsv4_kv_layer *l = &ls[il];
        l->ratio = cfg->compress_ratio[il];
        l->coff = l->ratio == 4 ? 2 : 1;
        l->comp = l->comp_kv = l->comp_sc = l->idx = l->idx_kv = l->idx_sc = DSV4_KV_ABSENT;
        l->raw = take(&off, (uint64_t)out->raw_cap * dh * es);
        if (l->ratio == 0) continue;
        l->comp_cap = n_ctx / l->ratio + 2;
        const uint64_t frontier = (uint64_t)l->coff * l->ratio * l->coff * dh * fs;
        l->comp = take(&off, (uint64_t)l->comp_cap * dh * es);
        l->comp_kv = take(&off, frontier);
        l->comp_sc = take(&off, frontier);
        if (l->ratio == 4) {
            const uint64_t ifr = 8 * 2 * di * fs;
            l->idx = take(&off, (uint64_t)l->comp_cap * out->idx_row_bytes);
            l->idx_kv = take(&off, ifr);
            l->idx_sc = take(&off, ifr);
        }
    }
    out->n_bytes = off;
    out->layers = ls;
    return DSV4_OK;
}

void dsv4_kv_layout_free(dsv4_kv_layout *l) {
    if (!l) return;
    free(l->layers);
    l->layers = NULL;
}

uint64_t dsv4_kv_layer_end(const dsv4_kv_layout *l, uint32_t il) {
    return il + 1 < l->n_layer ? l->layers[il + 1].raw : l->n_bytes;
}

dsv4_status dsv4_kv_clear(dsv4_backend *b, const dsv4_kv_layout *l, uint32_t il0, uint32_t il1, void *buf,
                          uint64_t base, dsv4_error *err) {
    if (il0 >= il1) return DSV4_OK;
    unsigned char *p = buf;
    const uint64_t end = dsv4_kv_layer_end(l, il1 - 1), first = l->layers[il0].raw;
    /* all-zero bits are 0 in f16 and f32; every region is a whole number of floats */
    dsv4_status st = b->ops->fill_f32(b->ctx, (float *)(p + (first - base)), 0.0f, (end - first) / 4, err);
    for (uint32_t il = il0; st == DSV4_OK && il < il1; il++) {
        const dsv4_kv_layer *ly = &l->layers[il];
        /* score frontiers follow their kv frontiers and have the same size */
        if (ly->comp_sc != DSV4_KV_ABSENT)
            st = b->ops->fill_f32(b->ctx, (float *)(p + (ly->comp_sc - base)), KV_NEG_INF,
                                  (ly->comp_sc - ly->comp_kv) / 4, err);
        if (st == DSV4_OK && ly->idx_sc != DSV4_KV_ABSENT)
            st = b->ops->fill_f32(b->ctx, (float *)(p + (ly->idx_sc - base)), KV_NEG_INF,
                                  (ly->idx_sc - ly->idx_kv) / 4, err);
    }
    return st;
}
