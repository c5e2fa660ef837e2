/* A bound model: config + every tensor looked up by name with its type and shape checked.
 * Weight bytes stay in the GGUF mmap (no copy). */
#ifndef DSV4_MODEL_H
#define DSV4_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/config.h"

/* A view of one tensor in the map. ne[0] is the contiguous (input) dimension: a 2-D weight
 * [in, out] holds `out` rows of `in` values. Unused dims are 1. data == NULL: tensor absent. */
typedef struct dsv4_tensor {
    const char *name;
    uint32_t type; /* dsv4_type */
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t row_bytes; /* bytes of one ne[0] row */
    uint64_t nbytes;
    uint64_t file_offset;
    const void *data;
} dsv4_tensor;

static inline bool dsv4_tensor_present(const dsv4_tensor *t) { return t->data != NULL; }
/* Row r of a 2-D weight, or row r of expert e of a 3-D expert tensor. */
static inline const void *dsv4_tensor_row(const dsv4_tensor *t, uint64_t r) {
    return (const uint8_t *)t->data + r * t->row_bytes;
}
static inline const void *dsv4_tensor_expert_row(const dsv4_tensor *t, uint64_t e, uint64_t r) {
    return (const uint8_t *)t->data + (e * t->ne[1] + r) * t->row_bytes;
}

typedef struct dsv4_layer_weights {
    /* hyper-connections */
    dsv4_tensor hc_attn_fn, hc_attn_scale, hc_attn_base; /* F16 [hc*embd, mix], F32 [3], F32 [mix] */
    dsv4_tensor hc_ffn_fn, hc_ffn_scale, hc_ffn_base;
    /* attention */
    dsv4_tensor attn_norm;      /* F32 [embd] */
    dsv4_tensor attn_q_a;       /* [embd, q_lora] */
    dsv4_tensor attn_q_a_norm;  /* F32 [q_lora] */
    dsv4_tensor attn_q_b;       /* [q_lora, n_head*head_dim] */
    dsv4_tensor attn_kv;        /* [embd, head_dim] */
    dsv4_tensor attn_kv_a_norm; /* F32 [head_dim] */
    dsv4_tensor attn_sinks;     /* F32 [n_head] */
    dsv4_tensor attn_output_a;  /* [n_head*head_dim/groups, groups*o_lora] */
    dsv4_tensor attn_output_b;  /* [groups*o_lora, embd] */
    /* compressor (ratio != 0) */
    dsv4_tensor attn_compressor_ape;  /* F16 [coff*head_dim, ratio] */
    dsv4_tensor attn_compressor_kv;   /* F16 [embd, coff*head_dim] */
    dsv4_tensor attn_compressor_gate; /* F16 [embd, coff*head_dim] */
    dsv4_tensor attn_compressor_norm; /* F32 [head_dim] */
    /* indexer (ratio == 4) */
    dsv4_tensor indexer_attn_q_b;        /* F16 [q_lora, idx_heads*idx_dim] */
    dsv4_tensor indexer_proj;            /* F16 [embd, idx_heads] */
    dsv4_tensor indexer_compressor_ape;  /* F16 [2*idx_dim, 4] */
    dsv4_tensor indexer_compressor_kv;   /* F16 [embd, 2*idx_dim] */
    dsv4_tensor indexer_compressor_gate; /* F16 [embd, 2*idx_dim] */
    dsv4_tensor indexer_compressor_norm; /* F32 [idx_dim] */
    /* FFN */
    dsv4_tensor ffn_norm;                     /* F32 [embd] */
    dsv4_tensor ffn_gate_inp;                 /* F16 [embd, n_expert] (router) */
    dsv4_tensor exp_probs_b;                  /* F32 [n_expert], optional (never used on hash layers) */
    dsv4_tensor ffn_gate_tid2eid;             /* I32 [n_expert_used, n_vocab], hash layers only */
    dsv4_tensor ffn_gate_exps, ffn_up_exps;   /* [embd, n_ff_exp, n_expert] */
    dsv4_tensor ffn_down_exps;                /* [n_ff_exp, embd, n_expert] */
    dsv4_tensor ffn_gate_shexp, ffn_up_shexp; /* [embd, n_ff_exp] */
    dsv4_tensor ffn_down_shexp;               /* [n_ff_exp, embd] */
} dsv4_layer_weights;

typedef struct dsv4_model {
    dsv4_config cfg;
    gguf_file *file;                                           /* owned */
    dsv4_tensor token_embd;                                    /* F16 [embd, vocab] */
    dsv4_tensor output_hc_fn, output_hc_scale, output_hc_base; /* F16 [hc*embd, hc], F32 [1], F32 [hc] */
    dsv4_tensor output_norm;                                   /* F32 [embd] */
    dsv4_tensor output;                                        /* [embd, vocab] */
    dsv4_layer_weights *layers;                                /* [n_layer] */
    uint64_t n_bound_tensors;
    uint64_t n_unexpected_tensors; /* tensors in the file that the family does not use (warned, ignored) */
} dsv4_model;

typedef struct dsv4_model_bind_opts {
    /* Validate tensor contents that have a meaning beyond bytes (tid2eid ids). Default true. */
    bool check_values;
    /* Accept routed experts whose type differs between layers (ds4's `gguf-tools/mixed` splices
     * Q4_K experts into some layers of a q2 file) as long as gate == up within each layer. Default
     * false: every routed gate/up tensor must share one type and every down tensor one type. */
    bool allow_mixed_experts;
} dsv4_model_bind_opts;

static inline dsv4_model_bind_opts dsv4_model_bind_opts_default(void) {
    return (dsv4_model_bind_opts){.check_values = true, .allow_mixed_experts = false};
}

/* Open a GGUF, read the config and bind every tensor. Errors name the key or tensor. */
dsv4_status dsv4_model_load(const char *path, dsv4_model **out, dsv4_error *err);
/* Bind an already opened file (takes ownership of f on success AND on failure). */
dsv4_status dsv4_model_bind(gguf_file *f, dsv4_model **out, dsv4_error *err);
/* Same with options (opts NULL = defaults). */
dsv4_status dsv4_model_bind_ex(gguf_file *f, const dsv4_model_bind_opts *opts, dsv4_model **out,
                               dsv4_error *err);
void dsv4_model_free(dsv4_model *m);

#endif
