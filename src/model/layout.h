/* The one description of every tensor of the DeepSeek V4 family for a given config: GGUF name,
 * dims, which layers carry it, its type class, its size/bandwidth category, how synth fills it and
 * where the binder stores it. The binder (model.c), synth (synth.c) and `dsv4-gguf info` all read
 * this table, so names and shapes cannot drift between them (spec model-attention-hc.md §8). */
#ifndef DSV4_MODEL_LAYOUT_H
#define DSV4_MODEL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/config.h"

/* Type class: which types a tensor may have, and which tensors must share one type. */
typedef enum dsv4_tensor_class {
    DSV4_TC_F16 = 0, /* embedding, HC fns, router, compressor, indexer: F16 | F32 | BF16 */
    DSV4_TC_DENSE,   /* attention projections, shared expert, output: Q8_0 | F16 | F32 | BF16 | Q4_K | Q2_K */
    DSV4_TC_ROUTED_GU,   /* routed gate/up: IQ2_XXS | Q2_K | Q4_K | Q8_0 | F16 | F32 */
    DSV4_TC_ROUTED_DOWN, /* routed down: same set */
    DSV4_TC_NORM,        /* RMSNorm weights: F32 */
    DSV4_TC_VEC,         /* HC scale/base, sinks, router bias: F32 */
    DSV4_TC_I32,         /* tid2eid: I32 */
    DSV4_TC_COUNT
} dsv4_tensor_class;

/* Size category (spec model-moe-gguf-tokenizer.md §7.2). */
typedef enum dsv4_tensor_group {
    DSV4_TG_ROUTED = 0,
    DSV4_TG_ATTN_PROJ,
    DSV4_TG_SHARED,
    DSV4_TG_EMBD,
    DSV4_TG_OUTPUT,
    DSV4_TG_COMPRESSOR,
    DSV4_TG_INDEXER_Q,
    DSV4_TG_ROUTER,
    DSV4_TG_IDX_COMPRESSOR,
    DSV4_TG_HC_FN,
    DSV4_TG_TID2EID,
    DSV4_TG_SMALL, /* norms, sinks, bias, HC scale/base */
    DSV4_TG_COUNT
} dsv4_tensor_group;

/* What one decoded token reads of the tensor (spec §7.3). */
typedef enum dsv4_token_read {
    DSV4_TR_NONE = 0, /* not counted (small vectors, compressor ape, tid2eid) */
    DSV4_TR_ALL,      /* the whole tensor */
    DSV4_TR_USED,     /* n_expert_used of n_expert experts */
    DSV4_TR_ROW,      /* one row (embedding) */
    DSV4_TR_LONG,     /* whole tensor, only when the context exceeds 4*idx_top_k (indexer Q) */
} dsv4_token_read;

/* Which layers carry a per-layer tensor. */
typedef enum dsv4_presence {
    DSV4_PR_ALL = 0,
    DSV4_PR_COMPRESSED, /* ratio != 0 */
    DSV4_PR_INDEXER,    /* ratio == 4 */
    DSV4_PR_HASH,       /* il < n_hash_layer, required there */
    DSV4_PR_OPTIONAL,   /* exp_probs_b: optional everywhere; synth writes it on non-hash layers */
} dsv4_presence;

/* How synth fills a tensor. */
typedef enum dsv4_init {
    DSV4_INIT_MATMUL = 0, /* mean 0, std 1/sqrt(ne0) */
    DSV4_INIT_EMBD,       /* mean 0, std 1 */
    DSV4_INIT_NORM,       /* 1 + U(-0.05, 0.05) */
    DSV4_INIT_HC_SCALE,   /* small positive */
    DSV4_INIT_HC_BASE,    /* small noise */
    DSV4_INIT_SINK,       /* small noise */
    DSV4_INIT_BIAS,       /* router bias, small noise */
    DSV4_INIT_APE,        /* small noise */
    DSV4_INIT_TID2EID,    /* n_expert_used distinct expert ids per token */
} dsv4_init;

/* Symbolic dimensions, resolved against a config. */
typedef enum dsv4_dim {
    DSV4_D_NONE = 0,
    DSV4_D_ONE,
    DSV4_D_THREE,
    DSV4_D_EMBD,
    DSV4_D_VOCAB,
    DSV4_D_HC,
    DSV4_D_HC_DIM, /* n_hc * n_embd */
    DSV4_D_MIX,    /* 2*n_hc + n_hc^2 */
    DSV4_D_Q_LORA,
    DSV4_D_Q_DIM, /* n_head * head_dim */
    DSV4_D_HEAD_DIM,
    DSV4_D_N_HEAD,
    DSV4_D_OA_IN,   /* n_head * head_dim / n_out_group */
    DSV4_D_OA_OUT,  /* n_out_group * o_lora_rank */
    DSV4_D_CMP_DIM, /* coff * head_dim */
    DSV4_D_RATIO,   /* compress ratio of the layer */
    DSV4_D_IDX_Q,   /* idx_n_head * idx_head_dim */
    DSV4_D_IDX_HEADS,
    DSV4_D_IDX_CMP, /* 2 * idx_head_dim */
    DSV4_D_IDX_DIM,
    DSV4_D_EXPERT,
    DSV4_D_EXPERT_USED,
    DSV4_D_FF,
} dsv4_dim;

typedef struct dsv4_layout_entry {
    const char *name; /* full name (global) or suffix after "blk.N." (per layer) */
    bool per_layer;
    bool after_layers; /* globals: written after the layers (output head) */
    dsv4_tensor_class cls;
    dsv4_tensor_group group;
    dsv4_token_read read;
    dsv4_presence presence;
    dsv4_init init;
    uint8_t n_dims;
    dsv4_dim dims[3];
    size_t bind_offset; /* offsetof(dsv4_model, x) or offsetof(dsv4_layer_weights, x) */
} dsv4_layout_entry;

/* One tensor instance of a concrete config. */
typedef struct dsv4_layout_tensor {
    const dsv4_layout_entry *e;
    int32_t layer; /* -1 for globals */
    bool required; /* false only for exp_probs_b */
    char name[48];
    uint32_t n_dims;
    uint64_t ne[4]; /* unused dims are 1 */
} dsv4_layout_tensor;

size_t dsv4_layout_n_entries(void);
const dsv4_layout_entry *dsv4_layout_entry_at(size_t i);

typedef enum dsv4_layout_mode {
    DSV4_LAYOUT_REQUIRED = 0, /* required tensors only */
    DSV4_LAYOUT_SYNTH,        /* + exp_probs_b on non-hash layers (what synth writes) */
    DSV4_LAYOUT_BIND,         /* + exp_probs_b on every layer, marked optional (what the binder looks for) */
} dsv4_layout_mode;

/* Every tensor the config calls for, in file order (token_embd, blk.0 .. blk.N-1, output head).
 * *out is malloc'ed. */
dsv4_status dsv4_layout_build(const dsv4_config *cfg, dsv4_layout_mode mode, dsv4_layout_tensor **out,
                              size_t *n_out, dsv4_error *err);

/* Classify a tensor name: the entry and layer (-1 for globals), or NULL when the name is not part of
 * the family. Does not check that the layer exists in a config. */
const dsv4_layout_entry *dsv4_layout_lookup(const char *name, int32_t *layer);

/* Resolve one entry's dims for layer il. Returns the dim count. */
uint32_t dsv4_layout_dims(const dsv4_config *cfg, const dsv4_layout_entry *e, uint32_t il, uint64_t ne[4]);

/* Whether layer il carries the entry (for DSV4_PR_OPTIONAL: whether synth writes it). */
bool dsv4_layout_in_layer(const dsv4_config *cfg, const dsv4_layout_entry *e, uint32_t il);

const char *dsv4_tensor_class_name(dsv4_tensor_class c); /* "dense", "f16-class", ... */
const char *dsv4_tensor_group_name(dsv4_tensor_group g); /* "Routed experts", ... */
/* Whether a type is allowed for a class. */
bool dsv4_class_allows(dsv4_tensor_class c, uint32_t type);
/* Comma-separated allowed type names. */
const char *dsv4_class_allowed_names(dsv4_tensor_class c);

/* Types per class for writing a model. */
typedef struct dsv4_type_recipe {
    uint32_t f16cls, dense, routed_gu, routed_down;
} dsv4_type_recipe;
/* "q2" | "q4" | "q8" | "f16" | "f32"; false for an unknown name. */
bool dsv4_type_recipe_named(const char *name, dsv4_type_recipe *out);
uint32_t dsv4_type_recipe_type(const dsv4_type_recipe *r, dsv4_tensor_class c);

#endif
