/* Per-session KV state layout: every layer's raw window ring, compressed rows, indexer rows and
 * compressor frontiers, at byte offsets of one address space in layer order; each tier stores
 * the contiguous range of its layers in its own buffer (graph.h dsv4_kv_state). Counters are derived from the
 * position: n_comp = pos / ratio.
 *
 * The raw and compressed rows have the element type row_type: DSV4_TYPE_F16 in DS4 numerics,
 * where every row is written f16-rounded (store_f16), so half storage is lossless; DSV4_TYPE_F32
 * in EXACT numerics (no rounding). The indexer rows have idx_type: with F16 rows DSV4_KV_FP4
 * (backend.h; a row after Hadamard + FP4 round trip is exactly 4-bit codes and a power-of-two
 * scale per 32), else F32. The frontiers hold unrounded values and are always F32. Every region
 * starts and ends on a DSV4_KV_ALIGN boundary. */
#ifndef DSV4_GRAPH_KV_H
#define DSV4_GRAPH_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/config.h"

#define DSV4_KV_ABSENT UINT64_MAX
#define DSV4_KV_ALIGN 16u

typedef struct dsv4_kv_layer {
    uint32_t ratio, coff, comp_cap;  /* comp_cap = n_ctx / ratio + 2 rows (0 for ratio 0) */
    uint64_t raw;                    /* raw_cap rows x head_dim (ring: position p at row p % raw_cap) */
    uint64_t comp, comp_kv, comp_sc; /* comp_cap x head_dim; frontier coff*ratio x coff*head_dim each */
    uint64_t idx, idx_kv, idx_sc;    /* ratio 4: comp_cap x idx_dim; frontier 8 x 2*idx_dim each */
} dsv4_kv_layer;

typedef struct dsv4_kv_layout {
    uint32_t n_ctx, raw_cap, n_layer;
    uint32_t row_type;      /* DSV4_TYPE_F16 or DSV4_TYPE_F32: raw and comp rows */
    uint32_t row_esize;     /* bytes per raw / comp row element (2 or 4) */
    uint32_t idx_type;      /* DSV4_KV_FP4 (with F16 rows) or DSV4_TYPE_F32: indexer rows */
    uint32_t idx_row_bytes; /* bytes per indexer row */
    uint64_t n_bytes;
    dsv4_kv_layer *layers;
} dsv4_kv_layout;

/* The row type for a numerics mode: F16 in DS4 (f32_rows forces F32: a test switch), F32 in EXACT. */
uint32_t dsv4_kv_row_type(dsv4_numerics numerics, bool f32_rows);
dsv4_status dsv4_kv_layout_init(const dsv4_config *cfg, uint32_t n_ctx, uint32_t row_type,
                                dsv4_kv_layout *out, dsv4_error *err);
void dsv4_kv_layout_free(dsv4_kv_layout *l);
/* End (byte offset) of layer il's regions: the next layer's start, or n_bytes for the last. */
uint64_t dsv4_kv_layer_end(const dsv4_kv_layout *l, uint32_t il);
/* Empty state of layers [il0, il1): zeros everywhere, frontier scores at -1e30 (no candidate).
 * buf holds the layout's bytes from offset `base` on (the layers' tier buffer). */
dsv4_status dsv4_kv_clear(dsv4_backend *b, const dsv4_kv_layout *l, uint32_t il0, uint32_t il1, void *buf,
                          uint64_t base, dsv4_error *err);

#endif
