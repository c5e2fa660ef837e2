/* Per-session KV state layout: every layer's raw window ring, compressed rows, indexer rows and
 * compressor frontiers, at float offsets of one address space in layer order; each tier stores
 * the contiguous range of its layers in its own buffer (graph.h dsv4_kv_state). Counters are derived from the
 * position: n_comp = pos / ratio. */
#ifndef DSV4_GRAPH_KV_H
#define DSV4_GRAPH_KV_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/config.h"

#define DSV4_KV_ABSENT UINT64_MAX

typedef struct dsv4_kv_layer {
    uint32_t ratio, coff, comp_cap;  /* comp_cap = n_ctx / ratio + 2 rows (0 for ratio 0) */
    uint64_t raw;                    /* raw_cap rows x head_dim (ring: position p at row p % raw_cap) */
    uint64_t comp, comp_kv, comp_sc; /* comp_cap x head_dim; frontier coff*ratio x coff*head_dim each */
    uint64_t idx, idx_kv, idx_sc;    /* ratio 4: comp_cap x idx_dim; frontier 8 x 2*idx_dim each */
} dsv4_kv_layer;

typedef struct dsv4_kv_layout {
    uint32_t n_ctx, raw_cap, n_layer;
    uint64_t n_floats;
    dsv4_kv_layer *layers;
} dsv4_kv_layout;

dsv4_status dsv4_kv_layout_init(const dsv4_config *cfg, uint32_t n_ctx, dsv4_kv_layout *out, dsv4_error *err);
void dsv4_kv_layout_free(dsv4_kv_layout *l);
/* Empty state of layers [il0, il1): zeros everywhere, frontier scores at -1e30 (no candidate).
 * buf holds the layout's floats from offset `base` on (the layers' tier buffer). */
dsv4_status dsv4_kv_clear(dsv4_backend *b, const dsv4_kv_layout *l, uint32_t il0, uint32_t il1, float *buf,
                          uint64_t base, dsv4_error *err);

#endif
