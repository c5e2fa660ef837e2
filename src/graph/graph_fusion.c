/* The fused-op protocol of graph/: the gate's query, the switches and the result (graph_internal.h). */
#include <math.h>

#include "common/status.h"
#include "graph/graph_internal.h"

#define OPS g->b->ops
#define BCTX g->b->ctx

/* What a fused op's gate is asked: this call's shapes and types, the mode and the placement. */
dsv4_fused_query graph_fused_query(const dsv4_graph *g, uint32_t n, uint32_t width, uint32_t weight_type,
                                   uint32_t aux_type, uint32_t width2) {
    return (dsv4_fused_query){.n_tokens = n,
                              .width = width,
                              .weight_type = weight_type,
                              .mode = g->mode,
                              .n_hc = g->cfg->n_hc,
                              .aux_type = aux_type,
                              .tier = g->active,
                              .n_tiers = g->n_tiers,
                              .width2 = width2};
}

/* Fused-op protocol: ask whether the fused op may run here (switches, then the backend's gate on
 * its device caps, mode, shapes, types and placement); run it; on failure (or an injected fault)
 * the caller runs the unfused sequence, which rewrites every output the fused op may have touched
 * and changes no state, tokens or counters other than this fusion's own. */
bool graph_fusion_wanted(dsv4_graph *g, dsv4_fused_op op, bool offered, const dsv4_fused_query *q) {
    if (!offered || !g->fusion || (g->fusion_disable >> op & 1u) || !OPS->fused_available ||
        !OPS->fused_available(BCTX, op, q)) {
        g->stats.fusion[op].skipped++;
        return false;
    }
    return true;
}

/* After the fused op ran (st): true when its result stands. A fault makes it fail as a partial
 * run would: its outputs are poisoned (NaN) before the fallback overwrites them. */
bool graph_fusion_result(dsv4_graph *g, dsv4_fused_op op, dsv4_status st, float *const *outs,
                         const size_t *n_outs, uint32_t n_out_bufs, dsv4_error *err) {
    if (st == DSV4_OK && (g->fusion_fault >> op & 1u)) {
        for (uint32_t i = 0; i < n_out_bufs; i++)
            if (OPS->fill_f32(BCTX, outs[i], NAN, n_outs[i], err) != DSV4_OK) break;
        g->stats.fusion[op].faulted++;
        st = DSV4_ERR_IO;
    }
    if (st == DSV4_OK) {
        g->stats.fusion[op].selected++;
        return true;
    }
    g->stats.fusion[op].fallback++;
    dsv4_error_clear(err);
    return false;
}
