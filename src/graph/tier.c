/* Tier transitions (decode / batch / no-copy), execution statistics and fusion names. */
#include <string.h>

#include "graph/graph_internal.h"

const char *dsv4_tier_mode_name(dsv4_tier_mode m) {
    static const char *const names[DSV4_TIER_MODES] = {"decode", "batch", "nocopy"};
    return (unsigned)m < DSV4_TIER_MODES ? names[m] : "?";
}

const char *dsv4_fusion_name(dsv4_fused_op op) {
    static const char *const names[DSV4_FUSED_COUNT] = {
        "hc_pre_norm", "q_norm_rope",      "kv_norm_rope_fp8", "parallel_ffn",    "parallel_attn",
        "hc_post_add", "attn_rope",        "moe_sum_post",     "q_norm_rope_idx", "emit_row",
        "router_topk", "hc_post_pre_norm", "attn_chunk_qnr",   "attn_qnr"};
    return (unsigned)op < DSV4_FUSED_COUNT ? names[op] : NULL;
}

dsv4_status dsv4_fusion_mask(const char *list, const char *what, uint32_t *mask, dsv4_error *err) {
    *mask = 0;
    if (!list) return DSV4_OK;
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 3 && strncmp(p, "all", 3) == 0) {
            *mask |= (1u << DSV4_FUSED_COUNT) - 1;
        } else if (len) {
            int found = -1;
            for (int op = 0; op < DSV4_FUSED_COUNT; op++) {
                const char *nm = dsv4_fusion_name((dsv4_fused_op)op);
                if (strlen(nm) == len && strncmp(nm, p, len) == 0) found = op;
            }
            if (found < 0) {
                char known[512] = "";
                for (int op = 0; op < DSV4_FUSED_COUNT; op++) {
                    strncat(known, dsv4_fusion_name((dsv4_fused_op)op), sizeof known - strlen(known) - 1);
                    strncat(known, ", ", sizeof known - strlen(known) - 1);
                }
                return dsv4_fail(err, DSV4_ERR_INVALID, "%s: unknown fusion '%.*s' (known: %sall)", what,
                                 (int)len, p, known);
            }
            *mask |= 1u << found;
        }
        if (!end) break;
        p = end + 1;
    }
    return DSV4_OK;
}

void dsv4_graph_stats(const dsv4_graph *g, dsv4_exec_stats *out) { *out = g->stats; }
void dsv4_graph_stats_reset(dsv4_graph *g) { memset(&g->stats, 0, sizeof g->stats); }

dsv4_status graph_switch_tier(dsv4_graph *g, uint32_t t, dsv4_tier_mode mode, uint32_t n, dsv4_error *err) {
    if (g->n_tiers <= 1) return DSV4_OK; /* one tier: nothing ever switches */
    graph_tier *to = &g->tier[t];
    /* the device may have been changed under us (another tier's preparation): always re-select */
    if (to->b->ops->activate) GB(to->b->ops->activate(to->b->ctx, err));
    if (t == g->active) return DSV4_OK;
    uint64_t bytes = 0;
    if (mode != DSV4_TIER_NOCOPY) {
        const graph_tier *from = &g->tier[g->active];
        bytes = (uint64_t)n * g->cfg->n_hc * g->cfg->n_embd * sizeof(float);
        dsv4_xcopy_path path;
        dsv4_status st = dsv4_backend_copy_xdev(to->b, to->w.hc_cur, from->b, from->w.hc_cur, (size_t)bytes,
                                                &g->bounce, g->force_bounce, &path, err);
        if (st != DSV4_OK) {
            dsv4_error_prefix(err, "tier %u -> %u (%s): ", g->active, t, dsv4_tier_mode_name(mode));
            return st;
        }
        /* the bounce path re-selects each side's device; end on the new tier's */
        if (path == DSV4_XCOPY_BOUNCE && to->b->ops->activate) GB(to->b->ops->activate(to->b->ctx, err));
        g->stats.xcopy[path]++;
    }
    g->stats.tier_switches[mode]++;
    g->stats.tier_bytes[mode] += bytes;
    g->active = t;
    g->b = to->b;
    g->w = to->w;
    /* a step recorded across tiers: the tier's ops join the lead's recording */
    if (g->rec_lead >= 0 && t != (uint32_t)g->rec_lead && !(g->rec_joined & (1u << t))) {
        GB(to->b->ops->step_join(to->b->ctx, g->tier[g->rec_lead].b->ctx, err));
        g->rec_joined |= 1u << t;
    }
    return DSV4_OK;
}
