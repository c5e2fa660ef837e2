/* deepseek4.* metadata -> dsv4_config, with ds4's getter type rules (spec model-moe-gguf-tokenizer.md
 * §1.1-1.2): required_u32 = u32 exactly, u64 accepts u64|u32, float accepts f32|f64|u32|i32, bool = bool.
 * One key table drives loading and writing so the two cannot disagree. */
#include "model/config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "deepseek4."

typedef enum key_kind { K_U32, K_U64, K_F32, K_BOOL, K_RATIOS, K_CLAMPS } key_kind;

typedef struct key_def {
    const char *key; /* without the prefix */
    key_kind kind;
    bool optional; /* missing = 0 */
    size_t off;
} key_def;

#define O(f) offsetof(dsv4_config, f)
/* Order: block_count first (the arrays are checked against it). */
static const key_def k_keys[] = {
    {"block_count", K_U32, false, O(n_layer)},
    {"embedding_length", K_U32, false, O(n_embd)},
    {"vocab_size", K_U32, false, O(n_vocab)},
    {"attention.head_count", K_U32, false, O(n_head)},
    {"attention.head_count_kv", K_U32, false, O(n_head_kv)},
    {"attention.key_length", K_U32, false, O(head_dim)},
    {"attention.value_length", K_U32, false, O(value_dim)},
    {"rope.dimension_count", K_U32, false, O(n_rot)},
    {"attention.q_lora_rank", K_U32, false, O(q_lora_rank)},
    {"attention.output_lora_rank", K_U32, false, O(o_lora_rank)},
    {"attention.output_group_count", K_U32, false, O(n_out_group)},
    {"expert_count", K_U32, false, O(n_expert)},
    {"expert_used_count", K_U32, false, O(n_expert_used)},
    {"expert_feed_forward_length", K_U32, false, O(n_ff_exp)},
    {"expert_shared_count", K_U32, false, O(n_expert_shared)},
    {"hash_layer_count", K_U32, false, O(n_hash_layer)},
    {"expert_group_count", K_U32, true, O(expert_group_count)},
    {"expert_group_used_count", K_U32, true, O(expert_group_used_count)},
    {"attention.sliding_window", K_U32, false, O(n_swa)},
    {"attention.indexer.head_count", K_U32, false, O(idx_n_head)},
    {"attention.indexer.key_length", K_U32, false, O(idx_head_dim)},
    {"attention.indexer.top_k", K_U32, false, O(idx_top_k)},
    {"hyper_connection.count", K_U32, false, O(n_hc)},
    {"hyper_connection.sinkhorn_iterations", K_U32, false, O(hc_sinkhorn_iter)},
    {"attention.compress_ratios", K_RATIOS, false, O(compress_ratio)},
    {"swiglu_clamp_exp", K_CLAMPS, false, O(swiglu_clamp)},
    {"rope.scaling.original_context_length", K_U64, false, O(rope_orig_ctx)},
    {"context_length", K_U64, true, O(context_length)},
    {"rope.freq_base", K_F32, false, O(rope_freq_base)},
    {"rope.scaling.factor", K_F32, false, O(rope_scale_factor)},
    {"rope.scaling.yarn_beta_fast", K_F32, false, O(yarn_beta_fast)},
    {"rope.scaling.yarn_beta_slow", K_F32, false, O(yarn_beta_slow)},
    {"attention.compress_rope_freq_base", K_F32, false, O(compress_rope_freq_base)},
    {"expert_weights_scale", K_F32, false, O(expert_weights_scale)},
    {"attention.layer_norm_rms_epsilon", K_F32, false, O(rms_eps)},
    {"hyper_connection.epsilon", K_F32, false, O(hc_eps)},
    {"expert_weights_norm", K_BOOL, false, O(expert_weights_norm)},
};
#undef O
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

static const char *kind_name(key_kind k) {
    switch (k) {
    case K_U32: return "u32";
    case K_U64: return "u64 or u32";
    case K_F32: return "f32, f64, u32 or i32";
    case K_BOOL: return "bool";
    case K_RATIOS: return "array of u32 or i32";
    case K_CLAMPS: return "array of f32 or f64";
    }
    return "?";
}

static const char *kv_type_desc(const gguf_kv *kv, char *buf, size_t n) {
    if (kv->type == GGUF_VT_ARRAY)
        snprintf(buf, n, "array of %s", gguf_value_type_name(kv->arr_type));
    else
        snprintf(buf, n, "%s", gguf_value_type_name(kv->type));
    return buf;
}

static dsv4_status wrong_type(const key_def *k, const gguf_kv *kv, dsv4_error *err) {
    char got[64];
    return dsv4_fail(err, DSV4_ERR_FORMAT, "metadata key '" PREFIX "%s': expected %s, got %s", k->key,
                     kind_name(k->kind), kv_type_desc(kv, got, sizeof got));
}

static dsv4_status load_key(const gguf_file *f, const key_def *k, dsv4_config *cfg, dsv4_error *err) {
    char full[128];
    snprintf(full, sizeof full, PREFIX "%s", k->key);
    const gguf_kv *kv = gguf_find_kv(f, full);
    uint8_t *dst = (uint8_t *)cfg + k->off;
    if (!kv) {
        if (k->optional) return DSV4_OK; /* stays 0 */
        return dsv4_fail(err, DSV4_ERR_NOT_FOUND, "metadata key '%s' (%s) is missing", full,
                         kind_name(k->kind));
    }
    switch (k->kind) {
    case K_U32:
        if (kv->type != GGUF_VT_UINT32) return wrong_type(k, kv, err);
        *(uint32_t *)dst = (uint32_t)kv->v.u64;
        return DSV4_OK;
    case K_U64:
        if (kv->type != GGUF_VT_UINT64 && kv->type != GGUF_VT_UINT32) return wrong_type(k, kv, err);
        *(uint64_t *)dst = kv->v.u64;
        return DSV4_OK;
    case K_F32: {
        double v;
        if (kv->type == GGUF_VT_FLOAT32 || kv->type == GGUF_VT_FLOAT64)
            v = kv->v.f64;
        else if (kv->type == GGUF_VT_UINT32)
            v = (double)kv->v.u64;
        else if (kv->type == GGUF_VT_INT32)
            v = (double)kv->v.i64;
        else
            return wrong_type(k, kv, err);
        *(float *)dst = (float)v;
        return DSV4_OK;
    }
    case K_BOOL:
        if (kv->type != GGUF_VT_BOOL) return wrong_type(k, kv, err);
        *(bool *)dst = kv->v.b;
        return DSV4_OK;
    case K_RATIOS:
    case K_CLAMPS: {
        bool ratios = k->kind == K_RATIOS;
        if (kv->type != GGUF_VT_ARRAY) return wrong_type(k, kv, err);
        if (ratios ? (kv->arr_type != GGUF_VT_UINT32 && kv->arr_type != GGUF_VT_INT32)
                   : (kv->arr_type != GGUF_VT_FLOAT32 && kv->arr_type != GGUF_VT_FLOAT64))
            return wrong_type(k, kv, err);
        if (kv->arr_len < cfg->n_layer)
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "metadata key '%s': expected at least %u entries (block_count), got %llu", full,
                             cfg->n_layer, (unsigned long long)kv->arr_len);
        size_t n = cfg->n_layer ? cfg->n_layer : 1;
        void *arr = calloc(n, 4);
        if (!arr) return dsv4_fail(err, DSV4_ERR_NOMEM, "metadata key '%s': out of memory", full);
        for (uint32_t i = 0; i < cfg->n_layer; i++) {
            if (ratios) {
                int64_t v = 0;
                if (!gguf_kv_arr_i64(kv, i, &v) || v < 0 || v > UINT32_MAX) {
                    free(arr);
                    return dsv4_fail(err, DSV4_ERR_FORMAT,
                                     "metadata key '%s': entry %u = %lld is not a valid ratio", full, i,
                                     (long long)v);
                }
                ((uint32_t *)arr)[i] = (uint32_t)v;
            } else {
                double v = 0;
                if (!gguf_kv_arr_f64(kv, i, &v)) {
                    free(arr);
                    return dsv4_fail(err, DSV4_ERR_FORMAT, "metadata key '%s': entry %u is not a number",
                                     full, i);
                }
                ((float *)arr)[i] = (float)v;
            }
        }
        if (ratios)
            cfg->compress_ratio = arr;
        else
            cfg->swiglu_clamp = arr;
        return DSV4_OK;
    }
    }
    return DSV4_OK;
}

dsv4_status dsv4_config_load(const gguf_file *f, dsv4_config *cfg, dsv4_error *err) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_KEYS; i++) {
        dsv4_status st = load_key(f, &k_keys[i], cfg, err);
        if (st != DSV4_OK) {
            dsv4_config_free(cfg);
            return st;
        }
    }
    dsv4_status st = dsv4_config_validate(cfg, err);
    if (st != DSV4_OK) dsv4_config_free(cfg);
    return st;
}

void dsv4_config_free(dsv4_config *cfg) {
    if (!cfg) return;
    free(cfg->compress_ratio);
    free(cfg->swiglu_clamp);
    cfg->compress_ratio = NULL;
    cfg->swiglu_clamp = NULL;
}

/* ---------------------------------------------------------------- validation ---- */

#define BAD(...) return dsv4_fail(err, DSV4_ERR_FORMAT, __VA_ARGS__)
#define K(name) "'" PREFIX name "'"

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
static bool pos_finite(float v) { return isfinite(v) && v > 0.0f; }

dsv4_status dsv4_config_validate(const dsv4_config *c, dsv4_error *err) {
    if (c->n_layer < 1) BAD(K("block_count") " must be >= 1, got %u", c->n_layer);
    if (!c->compress_ratio || !c->swiglu_clamp) BAD("config: per-layer arrays are missing");
    if (c->n_embd < 32 || c->n_embd % 32)
        BAD(K("embedding_length") " must be a positive multiple of 32, got %u", c->n_embd);
    if (c->n_vocab < 2) BAD(K("vocab_size") " must be >= 2, got %u", c->n_vocab);
    if (c->n_head < 1) BAD(K("attention.head_count") " must be >= 1, got %u", c->n_head);
    if (c->n_head_kv != 1)
        BAD(K("attention.head_count_kv") " must be 1 (one shared KV head), got %u", c->n_head_kv);
    if (c->n_rot < 2 || c->n_rot % 2)
        BAD(K("rope.dimension_count") " must be even and >= 2, got %u", c->n_rot);
    if (c->head_dim <= c->n_rot)
        BAD(K("attention.key_length") " (%u) must exceed " K("rope.dimension_count") " (%u)", c->head_dim,
            c->n_rot);
    if ((c->head_dim - c->n_rot) % 64)
        BAD(K("attention.key_length") " - " K(
                "rope.dimension_count") " must be a multiple of 64 (FP8 blocks), got %u - %u",
            c->head_dim, c->n_rot);
    if (c->value_dim != c->head_dim)
        BAD(K("attention.value_length") " must equal " K("attention.key_length") " (%u), got %u", c->head_dim,
            c->value_dim);
    if (c->q_lora_rank < 32 || c->q_lora_rank % 32)
        BAD(K("attention.q_lora_rank") " must be a positive multiple of 32, got %u", c->q_lora_rank);
    if (c->o_lora_rank < 1) BAD(K("attention.output_lora_rank") " must be >= 1, got %u", c->o_lora_rank);
    if (c->n_out_group < 1 || c->n_head % c->n_out_group)
        BAD(K("attention.output_group_count") " must divide " K("attention.head_count") " (%u), got %u",
            c->n_head, c->n_out_group);
    if (((uint64_t)c->n_head * c->head_dim / c->n_out_group) % 32)
        BAD(K("attention.output_group_count") ": head_count*key_length/groups = %llu must be a multiple of "
                                              "32",
            (unsigned long long)((uint64_t)c->n_head * c->head_dim / c->n_out_group));
    if (((uint64_t)c->n_out_group * c->o_lora_rank) % 32)
        BAD(K("attention.output_lora_rank") ": groups*output_lora_rank = %llu must be a multiple of 32",
            (unsigned long long)((uint64_t)c->n_out_group * c->o_lora_rank));
    if (c->n_expert < 1) BAD(K("expert_count") " must be >= 1, got %u", c->n_expert);
    if (c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
        BAD(K("expert_used_count") " must be in [1, expert_count=%u], got %u", c->n_expert, c->n_expert_used);
    if (c->n_ff_exp < 32 || c->n_ff_exp % 32)
        BAD(K("expert_feed_forward_length") " must be a positive multiple of 32, got %u", c->n_ff_exp);
    if (c->n_expert_shared != 1) BAD(K("expert_shared_count") " must be 1, got %u", c->n_expert_shared);
    if (c->n_hash_layer > c->n_layer)
        BAD(K("hash_layer_count") " (%u) must not exceed " K("block_count") " (%u)", c->n_hash_layer,
            c->n_layer);
    if (c->expert_group_count != 0)
        BAD(K("expert_group_count") " must be 0 or absent, got %u", c->expert_group_count);
    if (c->expert_group_used_count != 0)
        BAD(K("expert_group_used_count") " must be 0 or absent, got %u", c->expert_group_used_count);
    if (c->n_swa < 1) BAD(K("attention.sliding_window") " must be >= 1, got %u", c->n_swa);
    if (c->idx_n_head < 1) BAD(K("attention.indexer.head_count") " must be >= 1, got %u", c->idx_n_head);
    if (!is_pow2(c->idx_head_dim) || c->idx_head_dim < 64)
        BAD(K("attention.indexer.key_length") " must be a power of two >= 64 (Hadamard, FP4 blocks), got %u",
            c->idx_head_dim);
    if (c->idx_head_dim <= c->n_rot)
        BAD(K("attention.indexer.key_length") " (%u) must exceed " K("rope.dimension_count") " (%u)",
            c->idx_head_dim, c->n_rot);
    if (c->idx_top_k < 1) BAD(K("attention.indexer.top_k") " must be >= 1, got %u", c->idx_top_k);
    if (c->n_hc < 1) BAD(K("hyper_connection.count") " must be >= 1, got %u", c->n_hc);
    if (c->hc_sinkhorn_iter < 1)
        BAD(K("hyper_connection.sinkhorn_iterations") " must be >= 1, got %u", c->hc_sinkhorn_iter);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        if (c->compress_ratio[il] == 1)
            BAD(K("attention.compress_ratios") " entry %u must be 0 or >= 2, got 1", il);
        if (!pos_finite(c->swiglu_clamp[il]))
            BAD(K("swiglu_clamp_exp") " entry %u must be a positive finite number, got %g", il,
                (double)c->swiglu_clamp[il]);
    }
    if (c->rope_orig_ctx < 1)
        BAD(K("rope.scaling.original_context_length") " must be >= 1, got %llu",
            (unsigned long long)c->rope_orig_ctx);
    if (!pos_finite(c->rope_freq_base))
        BAD(K("rope.freq_base") " must be > 0, got %g", (double)c->rope_freq_base);
    if (!pos_finite(c->compress_rope_freq_base))
        BAD(K("attention.compress_rope_freq_base") " must be > 0, got %g",
            (double)c->compress_rope_freq_base);
    if (!pos_finite(c->rope_scale_factor))
        BAD(K("rope.scaling.factor") " must be > 0, got %g", (double)c->rope_scale_factor);
    if (!isfinite(c->yarn_beta_fast) || !isfinite(c->yarn_beta_slow) ||
        c->yarn_beta_fast <= c->yarn_beta_slow)
        BAD(K("rope.scaling.yarn_beta_fast") " (%g) must be finite and exceed " K(
                "rope.scaling.yarn_beta_slow") " (%g)",
            (double)c->yarn_beta_fast, (double)c->yarn_beta_slow);
    if (!pos_finite(c->expert_weights_scale))
        BAD(K("expert_weights_scale") " must be > 0, got %g", (double)c->expert_weights_scale);
    if (!pos_finite(c->rms_eps))
        BAD(K("attention.layer_norm_rms_epsilon") " must be > 0, got %g", (double)c->rms_eps);
    if (!pos_finite(c->hc_eps)) BAD(K("hyper_connection.epsilon") " must be > 0, got %g", (double)c->hc_eps);
    if (!c->expert_weights_norm) BAD(K("expert_weights_norm") " must be true, got false");
    return DSV4_OK;
}

/* ---------------------------------------------------------------- writing ---- */

dsv4_status dsv4_config_write_metadata(const dsv4_config *cfg, gguf_writer *w, const char *skip_key,
                                       dsv4_error *err) {
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &k_keys[i];
        char full[128];
        snprintf(full, sizeof full, PREFIX "%s", k->key);
        if (skip_key && strcmp(skip_key, full) == 0) continue;
        const uint8_t *src = (const uint8_t *)cfg + k->off;
        dsv4_status st = DSV4_OK;
        switch (k->kind) {
        case K_U32: st = gguf_writer_set_u32(w, full, *(const uint32_t *)src, err); break;
        case K_U64: {
            /* Published files store these as u32 (gguf-py's add_*_length). */
            uint64_t v = *(const uint64_t *)src;
            if (k->optional && v == 0) break;
            st = v <= UINT32_MAX ? gguf_writer_set_u32(w, full, (uint32_t)v, err)
                                 : gguf_writer_set_u64(w, full, v, err);
            break;
        }
        case K_F32: st = gguf_writer_set_f32(w, full, *(const float *)src, err); break;
        case K_BOOL: st = gguf_writer_set_bool(w, full, *(const bool *)src, err); break;
        case K_RATIOS:
            st = gguf_writer_set_arr(w, full, GGUF_VT_UINT32, cfg->compress_ratio, cfg->n_layer, err);
            break;
        case K_CLAMPS:
            st = gguf_writer_set_arr(w, full, GGUF_VT_FLOAT32, cfg->swiglu_clamp, cfg->n_layer, err);
            break;
        }
        if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
}

/* ---------------------------------------------------------------- presets ---- */

dsv4_status dsv4_config_set_layers(dsv4_config *cfg, uint32_t n_layer, uint32_t long_ratio, float clamp,
                                   dsv4_error *err) {
    if (n_layer < 1) return dsv4_fail(err, DSV4_ERR_INVALID, "layer count must be >= 1");
    uint32_t *r = calloc(n_layer, sizeof *r);
    float *cl = calloc(n_layer, sizeof *cl);
    if (!r || !cl) {
        free(r);
        free(cl);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "config: out of memory for %u layers", n_layer);
    }
    for (uint32_t il = 0; il < n_layer; il++) {
        r[il] = il < 2 ? 0 : (il % 2 == 0 ? 4 : long_ratio);
        cl[il] = clamp;
    }
    free(cfg->compress_ratio);
    free(cfg->swiglu_clamp);
    cfg->compress_ratio = r;
    cfg->swiglu_clamp = cl;
    cfg->n_layer = n_layer;
    return DSV4_OK;
}

dsv4_status dsv4_config_preset(const char *name, dsv4_config *cfg, dsv4_error *err) {
    memset(cfg, 0, sizeof *cfg);
    uint32_t long_ratio;
    if (strcmp(name, "tiny") == 0) {
        *cfg = (dsv4_config){
            .n_embd = 256,
            .n_vocab = 1024,
            .n_head = 8,
            .n_head_kv = 1,
            .head_dim = 128,
            .value_dim = 128,
            .n_rot = 64,
            .q_lora_rank = 64,
            .o_lora_rank = 64,
            .n_out_group = 2,
            .n_expert = 8,
            .n_expert_used = 2,
            .n_ff_exp = 256,
            .n_expert_shared = 1,
            .n_hash_layer = 3,
            .n_swa = 16,
            .idx_n_head = 4,
            .idx_head_dim = 128,
            .idx_top_k = 8,
            .n_hc = 4,
            .hc_sinkhorn_iter = 20,
            .context_length = 4096,
        };
        long_ratio = 16;
        dsv4_status st = dsv4_config_set_layers(cfg, 6, long_ratio, 10.0f, err);
        if (st != DSV4_OK) return st;
    } else if (strcmp(name, "flash") == 0) {
        *cfg = (dsv4_config){
            .n_embd = 4096,
            .n_vocab = 129280,
            .n_head = 64,
            .n_head_kv = 1,
            .head_dim = 512,
            .value_dim = 512,
            .n_rot = 64,
            .q_lora_rank = 1024,
            .o_lora_rank = 1024,
            .n_out_group = 8,
            .n_expert = 256,
            .n_expert_used = 6,
            .n_ff_exp = 2048,
            .n_expert_shared = 1,
            .n_hash_layer = 3,
            .n_swa = 128,
            .idx_n_head = 64,
            .idx_head_dim = 128,
            .idx_top_k = 512,
            .n_hc = 4,
            .hc_sinkhorn_iter = 20,
            .context_length = 1048576,
        };
        long_ratio = 128;
        dsv4_status st = dsv4_config_set_layers(cfg, 43, long_ratio, 10.0f, err);
        if (st != DSV4_OK) return st;
    } else {
        return dsv4_fail(err, DSV4_ERR_INVALID, "unknown preset '%s' (expected tiny or flash)", name);
    }
    cfg->rope_orig_ctx = 65536;
    cfg->rope_freq_base = 10000.0f;
    cfg->compress_rope_freq_base = 160000.0f;
    cfg->rope_scale_factor = 16.0f;
    cfg->yarn_beta_fast = 32.0f;
    cfg->yarn_beta_slow = 1.0f;
    cfg->expert_weights_scale = 1.5f;
    cfg->rms_eps = 1e-6f;
    cfg->hc_eps = 1e-6f;
    cfg->expert_weights_norm = true;
    return DSV4_OK;
}

dsv4_status dsv4_config_copy(dsv4_config *dst, const dsv4_config *src, dsv4_error *err) {
    *dst = *src;
    dst->compress_ratio = NULL;
    dst->swiglu_clamp = NULL;
    size_t n = src->n_layer ? src->n_layer : 1;
    dst->compress_ratio = calloc(n, sizeof(uint32_t));
    dst->swiglu_clamp = calloc(n, sizeof(float));
    if (!dst->compress_ratio || !dst->swiglu_clamp) {
        dsv4_config_free(dst);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "config: out of memory");
    }
    if (src->compress_ratio)
        memcpy(dst->compress_ratio, src->compress_ratio, src->n_layer * sizeof(uint32_t));
    if (src->swiglu_clamp) memcpy(dst->swiglu_clamp, src->swiglu_clamp, src->n_layer * sizeof(float));
    return DSV4_OK;
}
