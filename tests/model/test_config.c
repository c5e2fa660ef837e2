/* Config loading from deepseek4.* metadata: ds4's getter type rules, missing keys, consistency. */
#include "model_testutil.h"

#include <math.h>

#include "gguf/gguf.h"
#include "model/config.h"

/* Write a metadata-only GGUF: every key of cfg except skip_key, then `extra` adds the substitute. */
typedef dsv4_status (*extra_fn)(gguf_writer *w, dsv4_error *err);

static gguf_file *open_meta(const dsv4_config *cfg, const char *skip_key, extra_fn extra) {
    char path[512];
    mt_path(path, sizeof path, "meta.gguf");
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    dsv4_error err;
    assert_int_equal(dsv4_config_write_metadata(cfg, w, skip_key, &err), DSV4_OK);
    if (extra) assert_int_equal(extra(w, &err), DSV4_OK);
    assert_int_equal(gguf_writer_write_file(w, path, &err), DSV4_OK);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    if (gguf_open(path, &f, &err) != DSV4_OK) fail_msg("gguf_open: %s", err.msg);
    unlink(path);
    return f;
}

static dsv4_status load_with(const char *skip_key, extra_fn extra, dsv4_config *out, dsv4_error *err) {
    dsv4_config tiny;
    assert_int_equal(dsv4_config_preset("tiny", &tiny, err), DSV4_OK);
    gguf_file *f = open_meta(&tiny, skip_key, extra);
    dsv4_error_clear(err);
    dsv4_status st = dsv4_config_load(f, out, err);
    gguf_close(f);
    dsv4_config_free(&tiny);
    return st;
}

static void test_round_trip_tiny_and_flash(void **state) {
    (void)state;
    const char *presets[] = {"tiny", "flash"};
    for (int p = 0; p < 2; p++) {
        dsv4_config c, back;
        dsv4_error err;
        assert_int_equal(dsv4_config_preset(presets[p], &c, &err), DSV4_OK);
        assert_int_equal(dsv4_config_validate(&c, &err), DSV4_OK);
        gguf_file *f = open_meta(&c, NULL, NULL);
        if (dsv4_config_load(f, &back, &err) != DSV4_OK) fail_msg("%s", err.msg);
        gguf_close(f);
        /* Every scalar field identical, arrays identical. */
#define EQ(f) assert_true(c.f == back.f)
        EQ(n_layer);
        EQ(n_embd);
        EQ(n_vocab);
        EQ(n_head);
        EQ(n_head_kv);
        EQ(head_dim);
        EQ(value_dim);
        EQ(n_rot);
        EQ(q_lora_rank);
        EQ(o_lora_rank);
        EQ(n_out_group);
        EQ(n_expert);
        EQ(n_expert_used);
        EQ(n_ff_exp);
        EQ(n_expert_shared);
        EQ(n_hash_layer);
        EQ(expert_group_count);
        EQ(expert_group_used_count);
        EQ(n_swa);
        EQ(idx_n_head);
        EQ(idx_head_dim);
        EQ(idx_top_k);
        EQ(n_hc);
        EQ(hc_sinkhorn_iter);
        EQ(rope_orig_ctx);
        EQ(context_length);
        EQ(rope_freq_base);
        EQ(compress_rope_freq_base);
        EQ(rope_scale_factor);
        EQ(yarn_beta_fast);
        EQ(yarn_beta_slow);
        EQ(expert_weights_scale);
        EQ(rms_eps);
        EQ(hc_eps);
        EQ(expert_weights_norm);
#undef EQ
        assert_memory_equal(c.compress_ratio, back.compress_ratio, c.n_layer * sizeof(uint32_t));
        assert_memory_equal(c.swiglu_clamp, back.swiglu_clamp, c.n_layer * sizeof(float));
        dsv4_config_free(&c);
        dsv4_config_free(&back);
    }
}

static void test_tiny_and_flash_values(void **state) {
    (void)state;
    dsv4_config c;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("tiny", &c, &err), DSV4_OK);
    const uint32_t tiny_ratios[6] = {0, 0, 4, 16, 4, 16};
    assert_int_equal(c.n_layer, 6);
    assert_memory_equal(c.compress_ratio, tiny_ratios, sizeof tiny_ratios);
    assert_int_equal(c.n_embd, 256);
    assert_int_equal(c.n_vocab, 1024);
    assert_int_equal(c.n_hash_layer, 3);
    dsv4_config_free(&c);
    assert_int_equal(dsv4_config_preset("flash", &c, &err), DSV4_OK);
    /* spec §1.3: 0 for il<2, 4 for even il>=2, 128 for odd il>=3 */
    assert_int_equal(c.n_layer, 43);
    for (uint32_t il = 0; il < 43; il++)
        assert_int_equal(c.compress_ratio[il], il < 2 ? 0 : (il % 2 ? 128 : 4));
    assert_int_equal(dsv4_cfg_hc_mix(&c), 24);
    assert_int_equal(dsv4_cfg_hc_dim(&c), 16384);
    dsv4_config_free(&c);
    assert_int_equal(dsv4_config_preset("huge", &c, &err), DSV4_ERR_INVALID);
    assert_contains(err.msg, "huge");
}

/* ---- wrong key types ---- */
static dsv4_status block_count_i32(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_i32(w, "deepseek4.block_count", 6, e);
}
static dsv4_status head_count_u64(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_u64(w, "deepseek4.attention.head_count", 8, e);
}
static dsv4_status orig_ctx_i32(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_i32(w, "deepseek4.rope.scaling.original_context_length", 65536, e);
}
static dsv4_status freq_base_str(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_str(w, "deepseek4.rope.freq_base", "10000", e);
}
static dsv4_status norm_u32(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_u32(w, "deepseek4.expert_weights_norm", 1, e);
}
static dsv4_status ratios_f32(gguf_writer *w, dsv4_error *e) {
    float v[6] = {0, 0, 4, 16, 4, 16};
    return gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_VT_FLOAT32, v, 6, e);
}
static dsv4_status ratios_short(gguf_writer *w, dsv4_error *e) {
    uint32_t v[5] = {0, 0, 4, 16, 4};
    return gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_VT_UINT32, v, 5, e);
}
static dsv4_status ratios_negative(gguf_writer *w, dsv4_error *e) {
    int32_t v[6] = {0, 0, 4, -16, 4, 16};
    return gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_VT_INT32, v, 6, e);
}
static dsv4_status clamp_u32(gguf_writer *w, dsv4_error *e) {
    uint32_t v[6] = {10, 10, 10, 10, 10, 10};
    return gguf_writer_set_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_VT_UINT32, v, 6, e);
}
static dsv4_status clamp_scalar(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_f32(w, "deepseek4.swiglu_clamp_exp", 10, e);
}

static void expect_type_error(const char *key, extra_fn fn, const char *expected, const char *got) {
    dsv4_config c;
    dsv4_error err;
    assert_int_not_equal(load_with(key, fn, &c, &err), DSV4_OK);
    assert_contains(err.msg, key);
    assert_contains(err.msg, expected);
    assert_contains(err.msg, got);
}

static void test_wrong_key_types(void **state) {
    (void)state;
    expect_type_error("deepseek4.block_count", block_count_i32, "expected u32", "got i32");
    expect_type_error("deepseek4.attention.head_count", head_count_u64, "expected u32", "got u64");
    expect_type_error("deepseek4.rope.scaling.original_context_length", orig_ctx_i32, "u64 or u32",
                      "got i32");
    expect_type_error("deepseek4.rope.freq_base", freq_base_str, "f32", "got string");
    expect_type_error("deepseek4.expert_weights_norm", norm_u32, "expected bool", "got u32");
    expect_type_error("deepseek4.attention.compress_ratios", ratios_f32, "array of u32 or i32",
                      "array of f32");
    expect_type_error("deepseek4.attention.compress_ratios", ratios_short, "at least 6", "got 5");
    expect_type_error("deepseek4.attention.compress_ratios", ratios_negative, "entry 3", "-16");
    expect_type_error("deepseek4.swiglu_clamp_exp", clamp_u32, "array of f32 or f64", "array of u32");
    expect_type_error("deepseek4.swiglu_clamp_exp", clamp_scalar, "array of f32 or f64", "got f32");
}

/* ---- accepted alternative encodings (ds4's rules) ---- */
static dsv4_status freq_base_f64(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_f64(w, "deepseek4.rope.freq_base", 12345.5, e);
}
static dsv4_status scale_u32(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_u32(w, "deepseek4.rope.scaling.factor", 8, e);
}
static dsv4_status beta_i32(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_i32(w, "deepseek4.rope.scaling.yarn_beta_fast", 40, e);
}
static dsv4_status orig_ctx_u64(gguf_writer *w, dsv4_error *e) {
    return gguf_writer_set_u64(w, "deepseek4.rope.scaling.original_context_length", 5000000000ull, e);
}
static dsv4_status ratios_i32_long(gguf_writer *w, dsv4_error *e) {
    int32_t v[8] = {0, 0, 4, 8, 4, 8, 99, 99}; /* longer than block_count is fine */
    return gguf_writer_set_arr(w, "deepseek4.attention.compress_ratios", GGUF_VT_INT32, v, 8, e);
}
static dsv4_status clamp_f64(gguf_writer *w, dsv4_error *e) {
    double v[6] = {1.5, 2, 3, 4, 5, 6};
    return gguf_writer_set_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_VT_FLOAT64, v, 6, e);
}

static void test_accepted_alternatives(void **state) {
    (void)state;
    dsv4_config c;
    dsv4_error err;
    assert_int_equal(load_with("deepseek4.rope.freq_base", freq_base_f64, &c, &err), DSV4_OK);
    assert_float_equal(c.rope_freq_base, 12345.5f, 0);
    dsv4_config_free(&c);
    assert_int_equal(load_with("deepseek4.rope.scaling.factor", scale_u32, &c, &err), DSV4_OK);
    assert_float_equal(c.rope_scale_factor, 8.0f, 0);
    dsv4_config_free(&c);
    assert_int_equal(load_with("deepseek4.rope.scaling.yarn_beta_fast", beta_i32, &c, &err), DSV4_OK);
    assert_float_equal(c.yarn_beta_fast, 40.0f, 0);
    dsv4_config_free(&c);
    assert_int_equal(load_with("deepseek4.rope.scaling.original_context_length", orig_ctx_u64, &c, &err),
                     DSV4_OK);
    assert_true(c.rope_orig_ctx == 5000000000ull);
    dsv4_config_free(&c);
    assert_int_equal(load_with("deepseek4.attention.compress_ratios", ratios_i32_long, &c, &err), DSV4_OK);
    const uint32_t want[6] = {0, 0, 4, 8, 4, 8};
    assert_memory_equal(c.compress_ratio, want, sizeof want);
    dsv4_config_free(&c);
    assert_int_equal(load_with("deepseek4.swiglu_clamp_exp", clamp_f64, &c, &err), DSV4_OK);
    assert_float_equal(c.swiglu_clamp[0], 1.5f, 0);
    assert_float_equal(c.swiglu_clamp[5], 6.0f, 0);
    dsv4_config_free(&c);
}

/* ---- missing keys ---- */
static void test_missing_keys(void **state) {
    (void)state;
    static const char *required[] = {
        "deepseek4.block_count",
        "deepseek4.embedding_length",
        "deepseek4.vocab_size",
        "deepseek4.attention.head_count",
        "deepseek4.attention.head_count_kv",
        "deepseek4.attention.key_length",
        "deepseek4.attention.value_length",
        "deepseek4.rope.dimension_count",
        "deepseek4.attention.q_lora_rank",
        "deepseek4.attention.output_lora_rank",
        "deepseek4.attention.output_group_count",
        "deepseek4.expert_count",
        "deepseek4.expert_used_count",
        "deepseek4.expert_feed_forward_length",
        "deepseek4.expert_shared_count",
        "deepseek4.hash_layer_count",
        "deepseek4.attention.sliding_window",
        "deepseek4.attention.indexer.head_count",
        "deepseek4.attention.indexer.key_length",
        "deepseek4.attention.indexer.top_k",
        "deepseek4.hyper_connection.count",
        "deepseek4.hyper_connection.sinkhorn_iterations",
        "deepseek4.attention.compress_ratios",
        "deepseek4.swiglu_clamp_exp",
        "deepseek4.rope.scaling.original_context_length",
        "deepseek4.rope.freq_base",
        "deepseek4.rope.scaling.factor",
        "deepseek4.rope.scaling.yarn_beta_fast",
        "deepseek4.rope.scaling.yarn_beta_slow",
        "deepseek4.attention.compress_rope_freq_base",
        "deepseek4.expert_weights_scale",
        "deepseek4.attention.layer_norm_rms_epsilon",
        "deepseek4.hyper_connection.epsilon",
        "deepseek4.expert_weights_norm",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        dsv4_config c;
        dsv4_error err;
        assert_int_equal(load_with(required[i], NULL, &c, &err), DSV4_ERR_NOT_FOUND);
        assert_contains(err.msg, required[i]);
        assert_contains(err.msg, "missing");
    }
    static const char *optional[] = {"deepseek4.expert_group_count", "deepseek4.expert_group_used_count",
                                     "deepseek4.context_length"};
    for (size_t i = 0; i < 3; i++) {
        dsv4_config c;
        dsv4_error err;
        assert_int_equal(load_with(optional[i], NULL, &c, &err), DSV4_OK);
        if (i == 2) assert_true(c.context_length == 0);
        dsv4_config_free(&c);
    }
}

/* ---- inconsistent values ---- */
typedef void (*mutate_fn)(dsv4_config *c);
static void m_head_small(dsv4_config *c) { c->head_dim = 64; }
static void m_nope(dsv4_config *c) {
    c->head_dim = 160;
    c->value_dim = 160;
}
static void m_rot_odd(dsv4_config *c) { c->n_rot = 63; }
static void m_value(dsv4_config *c) { c->value_dim = 256; }
static void m_idx_pow2(dsv4_config *c) { c->idx_head_dim = 96; }
static void m_idx_small(dsv4_config *c) { c->idx_head_dim = 32; }
static void m_groups(dsv4_config *c) { c->n_out_group = 3; }
static void m_embd(dsv4_config *c) { c->n_embd = 250; }
static void m_ratio1(dsv4_config *c) { c->compress_ratio[3] = 1; }
static void m_used(dsv4_config *c) { c->n_expert_used = 9; }
static void m_hash(dsv4_config *c) { c->n_hash_layer = 7; }
static void m_norm(dsv4_config *c) { c->expert_weights_norm = false; }
static void m_eps(dsv4_config *c) { c->rms_eps = 0; }
static void m_hc_eps(dsv4_config *c) { c->hc_eps = -1; }
static void m_kv(dsv4_config *c) { c->n_head_kv = 2; }
static void m_shared(dsv4_config *c) { c->n_expert_shared = 2; }
static void m_groupcount(dsv4_config *c) { c->expert_group_count = 8; }
static void m_clamp(dsv4_config *c) { c->swiglu_clamp[2] = NAN; }
static void m_qlora(dsv4_config *c) { c->q_lora_rank = 48; }
static void m_ff(dsv4_config *c) { c->n_ff_exp = 100; }
static void m_beta(dsv4_config *c) { c->yarn_beta_slow = 64; }

static void test_inconsistent_values(void **state) {
    (void)state;
    static const struct {
        mutate_fn fn;
        const char *key;
    } cases[] = {
        {m_head_small, "attention.key_length"},
        {m_nope, "multiple of 64"},
        {m_rot_odd, "rope.dimension_count"},
        {m_value, "attention.value_length"},
        {m_idx_pow2, "indexer.key_length"},
        {m_idx_small, "indexer.key_length"},
        {m_groups, "output_group_count"},
        {m_embd, "embedding_length"},
        {m_ratio1, "compress_ratios"},
        {m_used, "expert_used_count"},
        {m_hash, "hash_layer_count"},
        {m_norm, "expert_weights_norm"},
        {m_eps, "layer_norm_rms_epsilon"},
        {m_hc_eps, "hyper_connection.epsilon"},
        {m_kv, "head_count_kv"},
        {m_shared, "expert_shared_count"},
        {m_groupcount, "expert_group_count"},
        {m_clamp, "swiglu_clamp_exp"},
        {m_qlora, "q_lora_rank"},
        {m_ff, "expert_feed_forward_length"},
        {m_beta, "yarn_beta"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsv4_config c;
        dsv4_error err;
        assert_int_equal(dsv4_config_preset("tiny", &c, &err), DSV4_OK);
        cases[i].fn(&c);
        assert_int_not_equal(dsv4_config_validate(&c, &err), DSV4_OK);
        assert_contains(err.msg, cases[i].key);
        /* The loader applies the same check to a file carrying these values. */
        gguf_file *f = open_meta(&c, NULL, NULL);
        dsv4_config back;
        assert_int_not_equal(dsv4_config_load(f, &back, &err), DSV4_OK);
        assert_contains(err.msg, cases[i].key);
        gguf_close(f);
        dsv4_config_free(&c);
    }
}

/* Other shapes of the family are accepted (not only the Flash constants). */
static void test_other_shapes_accepted(void **state) {
    (void)state;
    dsv4_config c;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("tiny", &c, &err), DSV4_OK);
    c.head_dim = c.value_dim = 192; /* nope 128 */
    c.n_rot = 64;
    c.n_hc = 3;
    c.idx_head_dim = 256;
    c.n_expert = 16;
    c.n_expert_used = 16;
    assert_int_equal(dsv4_config_set_layers(&c, 9, 32, 7.0f, &err), DSV4_OK);
    assert_int_equal(c.compress_ratio[8], 4);
    assert_int_equal(c.compress_ratio[7], 32);
    if (dsv4_config_validate(&c, &err) != DSV4_OK) fail_msg("%s", err.msg);
    dsv4_config_free(&c);
}

static int teardown(void **state) {
    (void)state;
    mt_tmpdir_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_tiny_and_flash),
        cmocka_unit_test(test_tiny_and_flash_values),
        cmocka_unit_test(test_wrong_key_types),
        cmocka_unit_test(test_accepted_alternatives),
        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_inconsistent_values),
        cmocka_unit_test(test_other_shapes_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
