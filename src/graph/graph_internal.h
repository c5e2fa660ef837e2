/* Workspace and per-layer steps shared by the graph files. */
#ifndef DSV4_GRAPH_INTERNAL_H
#define DSV4_GRAPH_INTERNAL_H

#include "graph/graph.h"

/* Device scratch for one chunk of up to `cap` tokens. */
typedef struct graph_ws {
    float *hc_cur, *hc_mid;     /* cap x n_hc*n_embd */
    float *u, *xn, *attn_out;   /* cap x n_embd */
    float *split;               /* cap x mix */
    float *split2;              /* mix: the FFN's split when hc_post_pre_norm made it (split still holds the
                                   attention's, which its fallback needs) */
    float *qa, *qr;             /* cap x q_lora */
    float *q, *heads;           /* cap x n_head*head_dim */
    float *kv;                  /* cap x head_dim */
    float *ckv, *cg;            /* cap x max compressor width */
    float *ikv, *ig;            /* cap x 2*idx_dim */
    float *iq, *iw;             /* cap x idx_heads*idx_dim, cap x idx_heads */
    float *pooled, *crow;       /* head_dim */
    float *erows;               /* cap x max(head_dim, idx_dim): a chunk's emitted rows before the KV store */
    int32_t *isel;              /* cap x idx_top_k */
    float *low;                 /* cap x groups*o_lora */
    float *rlog, *rw;           /* cap x n_expert, cap x n_used */
    int32_t *rsel;              /* cap x n_used */
    float *routed, *shared, *f; /* cap x n_embd */
    float *slots;               /* n_used x n_embd: one token's routed slots (moe_sum_post) */
    float *sg, *su, *sm;        /* cap x shared ff */
    float *hy, *hyn, *logits;   /* head_rows x n_embd / n_vocab */
} graph_ws;

#define GRAPH_MAX_BUFS 48

/* One tier: its backend and its own workspace (scratch is replicated per tier). */
typedef struct graph_tier {
    dsv4_backend *b;
    graph_ws w;
    void *bufs[GRAPH_MAX_BUFS];
    uint32_t n_bufs;
} graph_tier;

struct dsv4_graph {
    const dsv4_model *m;
    const dsv4_config *cfg;
    dsv4_backend *b; /* the active tier's backend */
    graph_ws w;      /* the active tier's workspace */
    uint32_t active; /* active tier */
    uint32_t n_tiers;
    graph_tier tier[DSV4_MAX_TIERS];
    dsv4_placement place;
    bool force_bounce;
    dsv4_bounce bounce;
    bool fusion;
    bool q_raw; /* this layer's queries in w.q are raw: attention_chunk_qnr / attention_qnr norm and rotate
                   them */
    uint32_t fusion_disable, fusion_fault;
    bool record_steps;  /* decode steps go through step_begin/step_end when the backend offers them */
    bool prepare_ahead; /* record decode step p+1 while step p runs */
    bool warm;          /* warm_steps after a prefill chunk */
    /* the step recorded ahead: for this KV state at this position under this key, and the
     * statistics its ops counted (applied when it runs) */
    bool prep_valid;
    const dsv4_kv_state *prep_kv;
    uint32_t prep_pos;
    uint64_t prep_key;
    dsv4_exec_stats prep_after, prep_before;
    /* step keys whose recordings were made during a prefill (warm_steps): their graphs exist */
    uint64_t warm_keys[16];
    uint32_t n_warm_keys;
    /* a step being recorded across tiers: the lead tier (-1: none) and the tiers joined so far */
    int32_t rec_lead;
    uint32_t rec_joined;
    uint32_t rec_multi_failures; /* consecutive failed recordings across tiers (3: stop trying) */
    bool prefill_serial;         /* prefill attention token by token even where batched ops are offered */
    uint32_t kv_type;            /* KV row type of new sessions (kv.h) */
    dsv4_exec_stats stats;
    uint32_t mode;      /* dsv4_tier_mode of the chunk being evaluated (decode / batch) */
    uint32_t cap;       /* tokens the workspace holds */
    uint32_t head_rows; /* rows per output-head batch */
    uint32_t comp_width_max, shared_ff;
    float *host_logits;  /* head_rows x n_vocab */
    uint32_t *host_isel; /* indexer selections handed to hooks (host_isel_n entries) */
    size_t host_isel_n;
    dsv4_rope *rope; /* per layer */
};

/* Run B(op(...)) and return on failure. */
#define GB(call)                                                                                             \
    do {                                                                                                     \
        dsv4_status st_ = (call);                                                                            \
        if (st_ != DSV4_OK) return st_;                                                                      \
    } while (0)

/* Make tier t active. mode DECODE / BATCH copies the n rows of hc_cur from the active tier's
 * workspace to t's; NOCOPY copies nothing. Counted only when the tier changes. */
dsv4_status graph_switch_tier(dsv4_graph *g, uint32_t t, dsv4_tier_mode mode, uint32_t n, dsv4_error *err);
/* The fused-op protocol (graph_fusion.c): the query a fused op's gate is asked (this call's shapes and
 * types, the mode and the placement); whether the fused op may run (the switches, then the backend's
 * gate); after it ran with status st, whether its result stands (else the caller runs the unfused
 * sequence; an injected fault poisons the n_out_bufs outputs first). */
dsv4_fused_query graph_fused_query(const dsv4_graph *g, uint32_t n, uint32_t width, uint32_t weight_type,
                                   uint32_t aux_type, uint32_t width2);
bool graph_fusion_wanted(dsv4_graph *g, dsv4_fused_op op, bool offered, const dsv4_fused_query *q);
bool graph_fusion_result(dsv4_graph *g, dsv4_fused_op op, dsv4_status st, float *const *outs,
                         const size_t *n_outs, uint32_t n_out_bufs, dsv4_error *err);
/* q_norm_rope of a chunk's (or token's) query heads in g->w.q: the fused op when it may, else rmsnorm +
 * rope_tail (graph_layer.c) */
dsv4_status graph_q_norm_rope(dsv4_graph *g, const dsv4_layer_weights *L, const dsv4_rope *rope, uint32_t n,
                              uint32_t p0, dsv4_error *err);

/* Layer il's KV pointer for layout byte offset off (on the layer's tier). */
void *graph_kv_ptr(const dsv4_kv_state *kv, uint32_t tier, uint64_t off);

/* *post_pending (may be NULL: never): set when the layer's HC post was left to the FFN's pre step
 * (one decode token, the hc_post_pre_norm fusion wanted); graph_layer_ffn then runs it. */
dsv4_status graph_layer_attention(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t n,
                                  const dsv4_graph_hooks *h, bool *post_pending, dsv4_error *err);
/* The sequential part of layer il's attention for a chunk of n > 1 tokens with the batched ops
 * (compressor_chunk, indexer_topk_chunk, attention_chunk): the same KV state, head outputs and
 * on_indexer calls as the per-token loop. t_idx: the first chunk row that runs the indexer. *roped: the
 * heads came out with their inverse RoPE (attn_chunk_qnr took them). */
dsv4_status graph_attention_chunk(dsv4_graph *g, dsv4_kv_state *kv, uint32_t il, uint32_t n, uint32_t t_idx,
                                  const dsv4_graph_hooks *h, bool *roped, dsv4_error *err);
dsv4_status graph_layer_ffn(dsv4_graph *g, uint32_t il, const int32_t *tokens, uint32_t n, bool post_pending,
                            dsv4_error *err);

#endif
