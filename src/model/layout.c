#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define G(field) offsetof(dsv4_model, field)
#define L(field) offsetof(dsv4_layer_weights, field)

/* clang-format off */
static const dsv4_layout_entry k_entries[] = {
    /* name, per_layer, after_layers, class, group, token read, presence, init, n_dims, dims, bind */
    {"token_embd.weight", false, false, DSV4_TC_F16, DSV4_TG_EMBD, DSV4_TR_ROW, DSV4_PR_ALL, DSV4_INIT_EMBD, 2, {DSV4_D_EMBD, DSV4_D_VOCAB}, G(token_embd)},

    {"hc_attn_fn.weight", true, false, DSV4_TC_F16, DSV4_TG_HC_FN, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_HC_DIM, DSV4_D_MIX}, L(hc_attn_fn)},
    {"hc_attn_scale.weight", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_SCALE, 1, {DSV4_D_THREE}, L(hc_attn_scale)},
    {"hc_attn_base.weight", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_BASE, 1, {DSV4_D_MIX}, L(hc_attn_base)},
    {"hc_ffn_fn.weight", true, false, DSV4_TC_F16, DSV4_TG_HC_FN, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_HC_DIM, DSV4_D_MIX}, L(hc_ffn_fn)},
    {"hc_ffn_scale.weight", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_SCALE, 1, {DSV4_D_THREE}, L(hc_ffn_scale)},
    {"hc_ffn_base.weight", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_BASE, 1, {DSV4_D_MIX}, L(hc_ffn_base)},

    {"attn_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_NORM, 1, {DSV4_D_EMBD}, L(attn_norm)},
    {"attn_q_a.weight", true, false, DSV4_TC_DENSE, DSV4_TG_ATTN_PROJ, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_Q_LORA}, L(attn_q_a)},
    {"attn_q_a_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_NORM, 1, {DSV4_D_Q_LORA}, L(attn_q_a_norm)},
    {"attn_q_b.weight", true, false, DSV4_TC_DENSE, DSV4_TG_ATTN_PROJ, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_Q_LORA, DSV4_D_Q_DIM}, L(attn_q_b)},
    {"attn_kv.weight", true, false, DSV4_TC_DENSE, DSV4_TG_ATTN_PROJ, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_HEAD_DIM}, L(attn_kv)},
    {"attn_kv_a_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_NORM, 1, {DSV4_D_HEAD_DIM}, L(attn_kv_a_norm)},
    {"attn_sinks.weight", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_SINK, 1, {DSV4_D_N_HEAD}, L(attn_sinks)},
    {"attn_output_a.weight", true, false, DSV4_TC_DENSE, DSV4_TG_ATTN_PROJ, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_OA_IN, DSV4_D_OA_OUT}, L(attn_output_a)},
    {"attn_output_b.weight", true, false, DSV4_TC_DENSE, DSV4_TG_ATTN_PROJ, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_OA_OUT, DSV4_D_EMBD}, L(attn_output_b)},

    {"attn_compressor_ape.weight", true, false, DSV4_TC_F16, DSV4_TG_COMPRESSOR, DSV4_TR_NONE, DSV4_PR_COMPRESSED, DSV4_INIT_APE, 2, {DSV4_D_CMP_DIM, DSV4_D_RATIO}, L(attn_compressor_ape)},
    {"attn_compressor_kv.weight", true, false, DSV4_TC_F16, DSV4_TG_COMPRESSOR, DSV4_TR_ALL, DSV4_PR_COMPRESSED, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_CMP_DIM}, L(attn_compressor_kv)},
    {"attn_compressor_gate.weight", true, false, DSV4_TC_F16, DSV4_TG_COMPRESSOR, DSV4_TR_ALL, DSV4_PR_COMPRESSED, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_CMP_DIM}, L(attn_compressor_gate)},
    {"attn_compressor_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_COMPRESSED, DSV4_INIT_NORM, 1, {DSV4_D_HEAD_DIM}, L(attn_compressor_norm)},

    {"indexer.attn_q_b.weight", true, false, DSV4_TC_F16, DSV4_TG_INDEXER_Q, DSV4_TR_LONG, DSV4_PR_INDEXER, DSV4_INIT_MATMUL, 2, {DSV4_D_Q_LORA, DSV4_D_IDX_Q}, L(indexer_attn_q_b)},
    {"indexer.proj.weight", true, false, DSV4_TC_F16, DSV4_TG_INDEXER_Q, DSV4_TR_LONG, DSV4_PR_INDEXER, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_IDX_HEADS}, L(indexer_proj)},
    {"indexer_compressor_ape.weight", true, false, DSV4_TC_F16, DSV4_TG_IDX_COMPRESSOR, DSV4_TR_NONE, DSV4_PR_INDEXER, DSV4_INIT_APE, 2, {DSV4_D_IDX_CMP, DSV4_D_RATIO}, L(indexer_compressor_ape)},
    {"indexer_compressor_kv.weight", true, false, DSV4_TC_F16, DSV4_TG_IDX_COMPRESSOR, DSV4_TR_ALL, DSV4_PR_INDEXER, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_IDX_CMP}, L(indexer_compressor_kv)},
    {"indexer_compressor_gate.weight", true, false, DSV4_TC_F16, DSV4_TG_IDX_COMPRESSOR, DSV4_TR_ALL, DSV4_PR_INDEXER, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_IDX_CMP}, L(indexer_compressor_gate)},
    {"indexer_compressor_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_INDEXER, DSV4_INIT_NORM, 1, {DSV4_D_IDX_DIM}, L(indexer_compressor_norm)},

    {"ffn_norm.weight", true, false, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_NORM, 1, {DSV4_D_EMBD}, L(ffn_norm)},
    {"ffn_gate_inp.weight", true, false, DSV4_TC_F16, DSV4_TG_ROUTER, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_EXPERT}, L(ffn_gate_inp)},
    {"exp_probs_b.bias", true, false, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_OPTIONAL, DSV4_INIT_BIAS, 1, {DSV4_D_EXPERT}, L(exp_probs_b)},
    {"ffn_gate_tid2eid.weight", true, false, DSV4_TC_I32, DSV4_TG_TID2EID, DSV4_TR_NONE, DSV4_PR_HASH, DSV4_INIT_TID2EID, 2, {DSV4_D_EXPERT_USED, DSV4_D_VOCAB}, L(ffn_gate_tid2eid)},
    {"ffn_gate_exps.weight", true, false, DSV4_TC_ROUTED_GU, DSV4_TG_ROUTED, DSV4_TR_USED, DSV4_PR_ALL, DSV4_INIT_MATMUL, 3, {DSV4_D_EMBD, DSV4_D_FF, DSV4_D_EXPERT}, L(ffn_gate_exps)},
    {"ffn_up_exps.weight", true, false, DSV4_TC_ROUTED_GU, DSV4_TG_ROUTED, DSV4_TR_USED, DSV4_PR_ALL, DSV4_INIT_MATMUL, 3, {DSV4_D_EMBD, DSV4_D_FF, DSV4_D_EXPERT}, L(ffn_up_exps)},
    {"ffn_down_exps.weight", true, false, DSV4_TC_ROUTED_DOWN, DSV4_TG_ROUTED, DSV4_TR_USED, DSV4_PR_ALL, DSV4_INIT_MATMUL, 3, {DSV4_D_FF, DSV4_D_EMBD, DSV4_D_EXPERT}, L(ffn_down_exps)},
    {"ffn_gate_shexp.weight", true, false, DSV4_TC_DENSE, DSV4_TG_SHARED, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_FF}, L(ffn_gate_shexp)},
    {"ffn_up_shexp.weight", true, false, DSV4_TC_DENSE, DSV4_TG_SHARED, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_FF}, L(ffn_up_shexp)},
    {"ffn_down_shexp.weight", true, false, DSV4_TC_DENSE, DSV4_TG_SHARED, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_FF, DSV4_D_EMBD}, L(ffn_down_shexp)},

    {"output_hc_base.weight", false, true, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_BASE, 1, {DSV4_D_HC}, G(output_hc_base)},
    {"output_hc_fn.weight", false, true, DSV4_TC_F16, DSV4_TG_HC_FN, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_HC_DIM, DSV4_D_HC}, G(output_hc_fn)},
    {"output_hc_scale.weight", false, true, DSV4_TC_VEC, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_HC_SCALE, 1, {DSV4_D_ONE}, G(output_hc_scale)},
    {"output_norm.weight", false, true, DSV4_TC_NORM, DSV4_TG_SMALL, DSV4_TR_NONE, DSV4_PR_ALL, DSV4_INIT_NORM, 1, {DSV4_D_EMBD}, G(output_norm)},
    {"output.weight", false, true, DSV4_TC_DENSE, DSV4_TG_OUTPUT, DSV4_TR_ALL, DSV4_PR_ALL, DSV4_INIT_MATMUL, 2, {DSV4_D_EMBD, DSV4_D_VOCAB}, G(output)},
};
/* clang-format on */

#define N_ENTRIES (sizeof k_entries / sizeof k_entries[0])

size_t dsv4_layout_n_entries(void) { return N_ENTRIES; }
const dsv4_layout_entry *dsv4_layout_entry_at(size_t i) { return i < N_ENTRIES ? &k_entries[i] : NULL; }

static uint64_t dim_value(const dsv4_config *c, dsv4_dim d, uint32_t il) {
    switch (d) {
    case DSV4_D_NONE: return 1;
    case DSV4_D_ONE: return 1;
    case DSV4_D_THREE: return 3;
    case DSV4_D_EMBD: return c->n_embd;
    case DSV4_D_VOCAB: return c->n_vocab;
    case DSV4_D_HC: return c->n_hc;
    case DSV4_D_HC_DIM: return (uint64_t)c->n_hc * c->n_embd;
    case DSV4_D_MIX: return 2ull * c->n_hc + (uint64_t)c->n_hc * c->n_hc;
    case DSV4_D_Q_LORA: return c->q_lora_rank;
    case DSV4_D_Q_DIM: return (uint64_t)c->n_head * c->head_dim;
    case DSV4_D_HEAD_DIM: return c->head_dim;
    case DSV4_D_N_HEAD: return c->n_head;
    case DSV4_D_OA_IN: return c->n_out_group ? (uint64_t)c->n_head * c->head_dim / c->n_out_group : 0;
    case DSV4_D_OA_OUT: return (uint64_t)c->n_out_group * c->o_lora_rank;
    case DSV4_D_CMP_DIM: return (uint64_t)dsv4_cfg_coff(c, il) * c->head_dim;
    case DSV4_D_RATIO: return c->compress_ratio[il];
    case DSV4_D_IDX_Q: return (uint64_t)c->idx_n_head * c->idx_head_dim;
    case DSV4_D_IDX_HEADS: return c->idx_n_head;
    case DSV4_D_IDX_CMP: return 2ull * c->idx_head_dim;
    case DSV4_D_IDX_DIM: return c->idx_head_dim;
    case DSV4_D_EXPERT: return c->n_expert;
    case DSV4_D_EXPERT_USED: return c->n_expert_used;
    case DSV4_D_FF: return c->n_ff_exp;
    }
    return 0;
}

uint32_t dsv4_layout_dims(const dsv4_config *cfg, const dsv4_layout_entry *e, uint32_t il, uint64_t ne[4]) {
    for (int i = 0; i < 4; i++) ne[i] = 1;
    for (uint32_t i = 0; i < e->n_dims; i++) ne[i] = dim_value(cfg, e->dims[i], il);
    return e->n_dims;
}

bool dsv4_layout_in_layer(const dsv4_config *cfg, const dsv4_layout_entry *e, uint32_t il) {
    switch (e->presence) {
    case DSV4_PR_ALL: return true;
    case DSV4_PR_COMPRESSED: return cfg->compress_ratio[il] != 0;
    case DSV4_PR_INDEXER: return cfg->compress_ratio[il] == 4;
    case DSV4_PR_HASH: return il < cfg->n_hash_layer;
    case DSV4_PR_OPTIONAL: return il >= cfg->n_hash_layer;
    }
    return false;
}

static void fill_tensor(dsv4_layout_tensor *t, const dsv4_config *cfg, const dsv4_layout_entry *e,
                        int32_t il) {
    memset(t, 0, sizeof *t);
    t->e = e;
    t->layer = il;
    t->required = e->presence != DSV4_PR_OPTIONAL;
    if (il >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", il, e->name);
    else
        snprintf(t->name, sizeof t->name, "%s", e->name);
    t->n_dims = dsv4_layout_dims(cfg, e, il >= 0 ? (uint32_t)il : 0, t->ne);
}

dsv4_status dsv4_layout_build(const dsv4_config *cfg, dsv4_layout_mode mode, dsv4_layout_tensor **out,
                              size_t *n_out, dsv4_error *err) {
    *out = NULL;
    *n_out = 0;
    size_t cap = N_ENTRIES * ((size_t)cfg->n_layer + 1);
    dsv4_layout_tensor *v = calloc(cap, sizeof *v);
    if (!v) return dsv4_fail(err, DSV4_ERR_NOMEM, "layout: out of memory for %zu tensors", cap);
    size_t n = 0;
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (!k_entries[i].per_layer && !k_entries[i].after_layers)
            fill_tensor(&v[n++], cfg, &k_entries[i], -1);
    for (uint32_t il = 0; il < cfg->n_layer; il++) {
        for (size_t i = 0; i < N_ENTRIES; i++) {
            const dsv4_layout_entry *e = &k_entries[i];
            if (!e->per_layer) continue;
            if (e->presence == DSV4_PR_OPTIONAL) {
                if (mode == DSV4_LAYOUT_REQUIRED) continue;
                if (mode == DSV4_LAYOUT_SYNTH && !dsv4_layout_in_layer(cfg, e, il)) continue;
            } else if (!dsv4_layout_in_layer(cfg, e, il)) {
                continue;
            }
            fill_tensor(&v[n++], cfg, e, (int32_t)il);
        }
    }
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (!k_entries[i].per_layer && k_entries[i].after_layers)
            fill_tensor(&v[n++], cfg, &k_entries[i], -1);
    *out = v;
    *n_out = n;
    return DSV4_OK;
}

const dsv4_layout_entry *dsv4_layout_lookup(const char *name, int32_t *layer) {
    const char *suffix = name;
    int32_t il = -1;
    if (strncmp(name, "blk.", 4) == 0) {
        const char *p = name + 4;
        long v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 9) v = v * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || *p != '.') return NULL;
        il = (int32_t)v;
        suffix = p + 1;
    }
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (k_entries[i].per_layer != (il >= 0)) continue;
        if (strcmp(k_entries[i].name, suffix) == 0) {
            if (layer) *layer = il;
            return &k_entries[i];
        }
    }
    return NULL;
}

const char *dsv4_tensor_class_name(dsv4_tensor_class c) {
    switch (c) {
    case DSV4_TC_F16: return "f16-class";
    case DSV4_TC_DENSE: return "dense";
    case DSV4_TC_ROUTED_GU: return "routed gate/up";
    case DSV4_TC_ROUTED_DOWN: return "routed down";
    case DSV4_TC_NORM: return "norm";
    case DSV4_TC_VEC: return "f32 vector";
    case DSV4_TC_I32: return "i32";
    case DSV4_TC_COUNT: break;
    }
    return "?";
}

const char *dsv4_tensor_group_name(dsv4_tensor_group g) {
    switch (g) {
    case DSV4_TG_ROUTED: return "Routed experts";
    case DSV4_TG_ATTN_PROJ: return "Attention projections q_a, q_b, kv, out_a, out_b";
    case DSV4_TG_SHARED: return "Shared experts";
    case DSV4_TG_EMBD: return "token_embd";
    case DSV4_TG_OUTPUT: return "output.weight";
    case DSV4_TG_COMPRESSOR: return "Compressor kv/gate/ape";
    case DSV4_TG_INDEXER_Q: return "Indexer q_b + proj";
    case DSV4_TG_ROUTER: return "Router ffn_gate_inp";
    case DSV4_TG_IDX_COMPRESSOR: return "Indexer compressor";
    case DSV4_TG_HC_FN: return "HC fns";
    case DSV4_TG_TID2EID: return "tid2eid";
    case DSV4_TG_SMALL: return "Norms, sinks, bias, HC scale/base";
    case DSV4_TG_COUNT: break;
    }
    return "?";
}

bool dsv4_class_allows(dsv4_tensor_class c, uint32_t t) {
    switch (c) {
    case DSV4_TC_F16: return t == DSV4_TYPE_F16 || t == DSV4_TYPE_F32 || t == DSV4_TYPE_BF16;
    case DSV4_TC_DENSE:
        return t == DSV4_TYPE_Q8_0 || t == DSV4_TYPE_F16 || t == DSV4_TYPE_F32 || t == DSV4_TYPE_BF16 ||
               t == DSV4_TYPE_Q4_K || t == DSV4_TYPE_Q2_K;
    case DSV4_TC_ROUTED_GU:
    case DSV4_TC_ROUTED_DOWN:
        return t == DSV4_TYPE_IQ2_XXS || t == DSV4_TYPE_Q2_K || t == DSV4_TYPE_Q4_K || t == DSV4_TYPE_Q8_0 ||
               t == DSV4_TYPE_F16 || t == DSV4_TYPE_F32;
    case DSV4_TC_NORM:
    case DSV4_TC_VEC: return t == DSV4_TYPE_F32;
    case DSV4_TC_I32: return t == DSV4_TYPE_I32;
    case DSV4_TC_COUNT: break;
    }
    return false;
}

const char *dsv4_class_allowed_names(dsv4_tensor_class c) {
    switch (c) {
    case DSV4_TC_F16: return "F16, F32, BF16";
    case DSV4_TC_DENSE: return "Q8_0, F16, F32, BF16, Q4_K, Q2_K";
    case DSV4_TC_ROUTED_GU:
    case DSV4_TC_ROUTED_DOWN: return "IQ2_XXS, Q2_K, Q4_K, Q8_0, F16, F32";
    case DSV4_TC_NORM:
    case DSV4_TC_VEC: return "F32";
    case DSV4_TC_I32: return "I32";
    case DSV4_TC_COUNT: break;
    }
    return "";
}

bool dsv4_type_recipe_named(const char *name, dsv4_type_recipe *r) {
    if (strcmp(name, "q2") == 0) {
        *r = (dsv4_type_recipe){DSV4_TYPE_F16, DSV4_TYPE_Q8_0, DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K};
    } else if (strcmp(name, "q4") == 0) {
        *r = (dsv4_type_recipe){DSV4_TYPE_F16, DSV4_TYPE_Q8_0, DSV4_TYPE_Q4_K, DSV4_TYPE_Q4_K};
    } else if (strcmp(name, "q8") == 0) {
        *r = (dsv4_type_recipe){DSV4_TYPE_F16, DSV4_TYPE_Q8_0, DSV4_TYPE_Q8_0, DSV4_TYPE_Q8_0};
    } else if (strcmp(name, "f16") == 0) {
        *r = (dsv4_type_recipe){DSV4_TYPE_F16, DSV4_TYPE_F16, DSV4_TYPE_F16, DSV4_TYPE_F16};
    } else if (strcmp(name, "f32") == 0) {
        *r = (dsv4_type_recipe){DSV4_TYPE_F32, DSV4_TYPE_F32, DSV4_TYPE_F32, DSV4_TYPE_F32};
    } else {
        return false;
    }
    return true;
}

uint32_t dsv4_type_recipe_type(const dsv4_type_recipe *r, dsv4_tensor_class c) {
    switch (c) {
    case DSV4_TC_F16: return r->f16cls;
    case DSV4_TC_DENSE: return r->dense;
    case DSV4_TC_ROUTED_GU: return r->routed_gu;
    case DSV4_TC_ROUTED_DOWN: return r->routed_down;
    case DSV4_TC_NORM:
    case DSV4_TC_VEC: return DSV4_TYPE_F32;
    case DSV4_TC_I32: return DSV4_TYPE_I32;
    case DSV4_TC_COUNT: break;
    }
    return DSV4_TYPE_F32;
}
