/* Placement: which tier (backend instance) runs each part of the forward (DESIGN.md §3).
 *
 * A placement has n_layer + 2 entries in forward order: [0] the embedding, [1 + il] layer il,
 * [n_layer + 1] the output head. Entries are monotone (tier indices never decrease), so a pass
 * crosses each boundary once and every tier holds one contiguous run of layers (its weights and
 * its KV state). A tier is a CPU backend or a CUDA device; several tiers may name the same
 * device ("virtual tiers": how placement is tested on one machine).
 *
 *   --tiers SPEC     explicit: comma-separated TIER:LAYERS items in layer order, TIER = cpu,
 *                    cudaN or N (CUDA device N), LAYERS = A-B or A. Each item is its own tier;
 *                    together they cover layers 0..n_layer-1 exactly once. The embedding goes
 *                    with layer 0 (first tier), the head with the last layer (last tier).
 *   --tier-mem SPEC  automatic: comma-separated DEV:SIZE budgets (DEV = N, cudaN or cpu; SIZE
 *                    in bytes with K/M/G/T suffixes, binary; `cpu` may omit SIZE = unlimited and
 *                    must come last). Entries are filled greedily in forward order by their
 *                    estimated bytes (weights + KV state for a context): when an entry does not
 *                    fit the current device, move to the next and never go back. */
#ifndef DSV4_GRAPH_PLACEMENT_H
#define DSV4_GRAPH_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

#define DSV4_MAX_TIERS 16
#define DSV4_PLACE_MAX_LAYERS 510

typedef struct dsv4_tier_spec {
    char backend[8]; /* "cpu" or "cuda" */
    int device;      /* CUDA device (0 for cpu) */
} dsv4_tier_spec;

typedef struct dsv4_placement {
    uint32_t n_tiers;
    dsv4_tier_spec tier[DSV4_MAX_TIERS];
    uint32_t n_layer;
    uint8_t entry[DSV4_PLACE_MAX_LAYERS + 2];
} dsv4_placement;

/* Everything on one tier. */
dsv4_status dsv4_placement_single(uint32_t n_layer, const char *backend, int device, dsv4_placement *out,
                                  dsv4_error *err);
dsv4_status dsv4_placement_parse(const char *spec, uint32_t n_layer, dsv4_placement *out, dsv4_error *err);
/* Greedy contiguous fill of entries needing entry_bytes[0 .. n_layer+2) into the budgets of
 * mem_spec. Devices that receive no entry are dropped. */
dsv4_status dsv4_placement_fill(const char *mem_spec, const uint64_t *entry_bytes, uint32_t n_layer,
                                dsv4_placement *out, dsv4_error *err);
/* Bytes per entry of a model: weights, plus each layer's KV state for a context of kv_ctx with
 * rows of kv_type (kv.h dsv4_kv_row_type). */
dsv4_status dsv4_placement_entry_bytes(const dsv4_model *m, uint32_t kv_ctx, uint32_t kv_type, uint64_t *out,
                                       dsv4_error *err);
/* Checks a placement against a model of n_layer layers (programmatic placements). */
dsv4_status dsv4_placement_check(const dsv4_placement *p, uint32_t n_layer, dsv4_error *err);

static inline uint32_t dsv4_placement_layer_tier(const dsv4_placement *p, uint32_t il) {
    return p->entry[1 + il];
}
/* Number of entry-to-entry tier changes along the forward (tier boundaries crossed per pass). */
uint32_t dsv4_placement_boundaries(const dsv4_placement *p);
/* Layers [*first, *end) of tier t (empty when first == end). */
void dsv4_placement_layers(const dsv4_placement *p, uint32_t t, uint32_t *first, uint32_t *end);
/* "cpu:0-1,cpu:2-3,cpu:4-5" style text (with "emb@T"/"head@T" notes when they are not on the
 * tier of the adjacent layer). */
void dsv4_placement_format(const dsv4_placement *p, char *buf, size_t n);
/* Parses a byte size with optional K/M/G/T suffix (binary). */
bool dsv4_parse_bytes(const char *s, size_t len, uint64_t *out);

#endif
