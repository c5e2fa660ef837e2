/* Model shape and hyper-parameters, read from `deepseek4.*` GGUF metadata with ds4's key names
 * and type rules (spec model-moe-gguf-tokenizer.md §1.1-1.2). Any shape of the family is
 * accepted as long as it is self-consistent; nothing here is a global constant. */
#ifndef DSV4_MODEL_CONFIG_H
#define DSV4_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"

typedef struct dsv4_config {
    uint32_t n_layer;         /* block_count */
    uint32_t n_embd;          /* embedding_length (width of one HC stream) */
    uint32_t n_vocab;         /* vocab_size (logit count) */
    uint32_t n_head;          /* attention.head_count */
    uint32_t n_head_kv;       /* attention.head_count_kv (1) */
    uint32_t head_dim;        /* attention.key_length */
    uint32_t value_dim;       /* attention.value_length (== head_dim) */
    uint32_t n_rot;           /* rope.dimension_count: rotated tail dims of each head */
    uint32_t q_lora_rank;     /* attention.q_lora_rank */
    uint32_t o_lora_rank;     /* attention.output_lora_rank */
    uint32_t n_out_group;     /* attention.output_group_count */
    uint32_t n_expert;        /* expert_count */
    uint32_t n_expert_used;   /* expert_used_count */
    uint32_t n_ff_exp;        /* expert_feed_forward_length */
    uint32_t n_expert_shared; /* expert_shared_count (1) */
    uint32_t n_hash_layer;    /* hash_layer_count: layers [0, n_hash_layer) route by tid2eid */
    uint32_t expert_group_count, expert_group_used_count; /* must be 0 */
    uint32_t n_swa;                /* attention.sliding_window (raw window, includes current token) */
    uint32_t idx_n_head;           /* attention.indexer.head_count */
    uint32_t idx_head_dim;         /* attention.indexer.key_length */
    uint32_t idx_top_k;            /* attention.indexer.top_k */
    uint32_t n_hc;                 /* hyper_connection.count */
    uint32_t hc_sinkhorn_iter;     /* hyper_connection.sinkhorn_iterations */
    uint32_t *compress_ratio;      /* [n_layer]: 0 (raw only), 4 (two lanes + indexer) or R>=2 (one lane) */
    float *swiglu_clamp;           /* [n_layer] */
    uint64_t rope_orig_ctx;        /* rope.scaling.original_context_length */
    uint64_t context_length;       /* deepseek4.context_length (0 if absent) */
    float rope_freq_base;          /* layers with ratio 0 */
    float compress_rope_freq_base; /* layers with ratio != 0 (with YaRN) */
    float rope_scale_factor;       /* YaRN factor */
    float yarn_beta_fast, yarn_beta_slow;
    float expert_weights_scale;
    float rms_eps;            /* attention.layer_norm_rms_epsilon */
    float hc_eps;             /* hyper_connection.epsilon */
    bool expert_weights_norm; /* must be true */
} dsv4_config;

/* Read and validate the config from GGUF metadata. On success cfg owns its arrays. */
dsv4_status dsv4_config_load(const gguf_file *f, dsv4_config *cfg, dsv4_error *err);
void dsv4_config_free(dsv4_config *cfg);
/* Check internal consistency (divisibility, ranges) of a config built in memory (used by synth). */
dsv4_status dsv4_config_validate(const dsv4_config *cfg, dsv4_error *err);

/* Write every `deepseek4.*` key of cfg with the types ds4 reads (u32 counts, u32/f32 arrays, f32
 * floats, bool). skip_key (a full key name, or NULL) is left out, so tests can substitute it. */
dsv4_status dsv4_config_write_metadata(const dsv4_config *cfg, gguf_writer *w, const char *skip_key,
                                       dsv4_error *err);
/* Fill cfg with a named shape: "tiny" (the CI model) or "flash" (DeepSeek V4 Flash). */
dsv4_status dsv4_config_preset(const char *name, dsv4_config *cfg, dsv4_error *err);
/* Deep copy (dst owns new arrays). */
dsv4_status dsv4_config_copy(dsv4_config *dst, const dsv4_config *src, dsv4_error *err);
/* Change the layer count and rebuild the per-layer arrays with the family's schedule: ratio 0 for
 * layers 0-1, then 4 on even and long_ratio on odd layers; every clamp = clamp. */
dsv4_status dsv4_config_set_layers(dsv4_config *cfg, uint32_t n_layer, uint32_t long_ratio, float clamp,
                                   dsv4_error *err);

/* Derived quantities. */
static inline uint32_t dsv4_cfg_hc_dim(const dsv4_config *c) { return c->n_hc * c->n_embd; }
static inline uint32_t dsv4_cfg_hc_mix(const dsv4_config *c) { return 2 * c->n_hc + c->n_hc * c->n_hc; }
static inline uint32_t dsv4_cfg_nope(const dsv4_config *c) { return c->head_dim - c->n_rot; }
static inline bool dsv4_cfg_is_hash_layer(const dsv4_config *c, uint32_t il) { return il < c->n_hash_layer; }
static inline uint32_t dsv4_cfg_ratio(const dsv4_config *c, uint32_t il) { return c->compress_ratio[il]; }
static inline bool dsv4_cfg_has_indexer(const dsv4_config *c, uint32_t il) {
    return c->compress_ratio[il] == 4;
}
/* Compressor lane factor: 2 for ratio 4 (overlapping windows), else 1. */
static inline uint32_t dsv4_cfg_coff(const dsv4_config *c, uint32_t il) {
    return c->compress_ratio[il] == 4 ? 2 : 1;
}

#endif
