/* The model forward, written once as backend operations (DESIGN.md §1-§3).
 *
 * dsv4_graph_eval runs n tokens at consecutive positions through every layer, layer-major: each
 * layer does the batched HC pre / projections for all n tokens, then the per-token recurrence
 * (RoPE, FP8, cache push, compressor, indexer, attention) in position order, then the batched
 * output projection and FFN. A decode step is n == 1. Every backend op computes each row
 * independently of n, so on the CPU any chunking gives bitwise the same logits and state. */
#ifndef DSV4_GRAPH_H
#define DSV4_GRAPH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "graph/kv.h"
#include "graph/placement.h"
#include "graph/stats.h"
#include "model/model.h"

typedef struct dsv4_graph dsv4_graph;

/* One session's device state and next position. The layout addresses layout.n_bytes bytes;
 * each tier holds the contiguous part of them that belongs to its layers, in its own buffer:
 * layout byte b (tbase[t] <= b < tbase[t] + tbytes[t]) lives at tbuf[t] + (b - tbase[t]). */
typedef struct dsv4_kv_state {
    dsv4_kv_layout layout;
    uint32_t n_tiers;
    unsigned char *tbuf[DSV4_MAX_TIERS];
    uint64_t tbase[DSV4_MAX_TIERS], tbytes[DSV4_MAX_TIERS];
    uint32_t pos;
} dsv4_kv_state;

typedef struct dsv4_graph_params {
    uint32_t chunk_cap; /* initial workspace tokens (grown on demand) */
    /* Tier backends (not owned) and the placement over them; placement NULL = one tier, tiers[0]. */
    dsv4_backend *tiers[DSV4_MAX_TIERS];
    const dsv4_placement *placement;
    bool fusion;             /* global switch: try fused ops when offered */
    uint32_t fusion_disable; /* bit per dsv4_fused_op: never tried */
    uint32_t fusion_fault;   /* bit per dsv4_fused_op: made to fail at run time (test hook) */
    bool force_bounce;       /* cross-tier copies through host memory (DSV4_TIER_BOUNCE=1) */
    bool no_step_record;     /* never ask the backend to record decode steps (step_begin) */
    bool no_step_ahead;      /* record a decode step only when it is evaluated, not one ahead */
    bool no_step_warm;       /* a prefill does not record the decode steps after it (warm_steps) */
    bool prefill_serial;     /* prefill attention token by token, never the batched ops (test switch) */
    dsv4_numerics numerics;  /* the backends' numerics: picks the KV row type (kv.h) */
    bool kv_f32;             /* F32 KV rows in DS4 numerics too (test switch: same results, 2x rows) */
} dsv4_graph_params;

typedef struct dsv4_graph_hooks {
    const atomic_int *cancel; /* checked before every layer; nonzero stops with DSV4_ERR_CANCELLED */
    /* called after each layer of the chunk (il = 0..n_layer-1) */
    void (*on_layer)(void *user, uint32_t il, uint32_t n_layer);
    /* logits of chunk row `row` (host memory, n_vocab floats, valid during the call) */
    void (*on_logits)(void *user, uint32_t row, const float *logits, uint32_t n_vocab);
    /* indexer selection of layer il for the token at absolute position pos: n compressed-row ids,
     * ascending (host memory, valid during the call); NULL costs nothing */
    void (*on_indexer)(void *user, uint32_t il, uint32_t pos, const uint32_t *rows, uint32_t n);
    void *user;
    bool all_logits; /* deliver every row's logits, else only the last row's */
} dsv4_graph_hooks;

/* Checks that the backend can run this model (types, shape constraints) and allocates the
 * workspace for `chunk_cap` tokens (grown on demand). fusion: try fused ops when offered. */
dsv4_status dsv4_graph_create(const dsv4_model *m, dsv4_backend *b, uint32_t chunk_cap, bool fusion,
                              dsv4_graph **out, dsv4_error *err);
dsv4_status dsv4_graph_create_ex(const dsv4_model *m, const dsv4_graph_params *p, dsv4_graph **out,
                                 dsv4_error *err);
void dsv4_graph_free(dsv4_graph *g);
void dsv4_graph_stats(const dsv4_graph *g, dsv4_exec_stats *out);
void dsv4_graph_stats_reset(dsv4_graph *g);
/* Grow the workspace now to hold chunks of n tokens (it otherwise grows on the first such chunk). */
dsv4_status dsv4_graph_reserve(dsv4_graph *g, uint32_t n, dsv4_error *err);
uint32_t dsv4_graph_n_tiers(const dsv4_graph *g);

dsv4_status dsv4_kv_state_init(dsv4_graph *g, uint32_t n_ctx, dsv4_kv_state *kv, dsv4_error *err);
dsv4_status dsv4_kv_state_reset(dsv4_graph *g, dsv4_kv_state *kv, dsv4_error *err);
void dsv4_kv_state_free(dsv4_graph *g, dsv4_kv_state *kv);
/* Host copies of layout bytes [off, off + n), split over the tiers that hold them. */
dsv4_status dsv4_kv_state_read(dsv4_graph *g, const dsv4_kv_state *kv, uint64_t off, uint64_t n, void *host,
                               dsv4_error *err);
dsv4_status dsv4_kv_state_write(dsv4_graph *g, dsv4_kv_state *kv, uint64_t off, uint64_t n, const void *host,
                                dsv4_error *err);

/* Evaluate tokens[0..n) at positions kv->pos.. (kv->pos + n <= n_ctx is the caller's check).
 * On success kv->pos += n. On failure or cancellation after the first layer has run, *damaged
 * is set: the state no longer matches kv->pos and must be reset (or restored) before reuse. */
/* Record a decode step under every step key a decode in kv can meet (kv at position 0, nothing
 * runs), so that no decode step later waits for a graph instantiation. No-op where steps are not
 * recorded or DSV4_STEP_WARM=0. */
void dsv4_graph_warm(dsv4_graph *g, dsv4_kv_state *kv);
dsv4_status dsv4_graph_eval(dsv4_graph *g, dsv4_kv_state *kv, const int32_t *tokens, uint32_t n,
                            const dsv4_graph_hooks *hooks, bool *damaged, dsv4_error *err);

#endif
