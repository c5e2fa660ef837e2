/* The layout table against the spec's inventory (model-moe-gguf-tokenizer.md §1.3, §7.2, §7.3),
 * whose numbers were derived independently from the published files. */
#include "model_testutil.h"

#include "model/layout.h"

static uint64_t tensor_bytes(const dsv4_layout_tensor *t, uint32_t type) {
    uint64_t row = 0;
    assert_true(dsv4_type_row_bytes(type, t->ne[0], &row));
    return row * t->ne[1] * t->ne[2] * t->ne[3];
}

static const dsv4_layout_tensor *find(const dsv4_layout_tensor *ts, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return &ts[i];
    return NULL;
}

static void expect_dims(const dsv4_layout_tensor *ts, size_t n, const char *name, uint64_t a, uint64_t b,
                        uint64_t c) {
    const dsv4_layout_tensor *t = find(ts, n, name);
    if (!t) fail_msg("tensor %s not in layout", name);
    if (t->ne[0] != a || t->ne[1] != b || t->ne[2] != c)
        fail_msg("%s: got [%llu, %llu, %llu]", name, (unsigned long long)t->ne[0],
                 (unsigned long long)t->ne[1], (unsigned long long)t->ne[2]);
}

static void test_flash_inventory(void **state) {
    (void)state;
    dsv4_config c;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("flash", &c, &err), DSV4_OK);
    dsv4_layout_tensor *ts;
    size_t n;
    assert_int_equal(dsv4_layout_build(&c, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    assert_int_equal(n, 1328); /* spec §1.3 */
    /* Shapes from the spec's tables. */
    expect_dims(ts, n, "token_embd.weight", 4096, 129280, 1);
    expect_dims(ts, n, "output.weight", 4096, 129280, 1);
    expect_dims(ts, n, "output_hc_fn.weight", 16384, 4, 1);
    expect_dims(ts, n, "output_hc_scale.weight", 1, 1, 1);
    expect_dims(ts, n, "output_hc_base.weight", 4, 1, 1);
    expect_dims(ts, n, "blk.0.hc_attn_fn.weight", 16384, 24, 1);
    expect_dims(ts, n, "blk.0.hc_ffn_scale.weight", 3, 1, 1);
    expect_dims(ts, n, "blk.0.attn_q_b.weight", 1024, 32768, 1);
    expect_dims(ts, n, "blk.7.attn_kv.weight", 4096, 512, 1);
    expect_dims(ts, n, "blk.7.attn_output_a.weight", 4096, 8192, 1);
    expect_dims(ts, n, "blk.7.attn_output_b.weight", 8192, 4096, 1);
    expect_dims(ts, n, "blk.2.attn_compressor_ape.weight", 1024, 4, 1);
    expect_dims(ts, n, "blk.3.attn_compressor_ape.weight", 512, 128, 1);
    expect_dims(ts, n, "blk.3.attn_compressor_kv.weight", 4096, 512, 1);
    expect_dims(ts, n, "blk.42.attn_compressor_gate.weight", 4096, 1024, 1);
    expect_dims(ts, n, "blk.42.indexer.attn_q_b.weight", 1024, 8192, 1);
    expect_dims(ts, n, "blk.42.indexer.proj.weight", 4096, 64, 1);
    expect_dims(ts, n, "blk.2.indexer_compressor_ape.weight", 256, 4, 1);
    expect_dims(ts, n, "blk.2.indexer_compressor_kv.weight", 4096, 256, 1);
    expect_dims(ts, n, "blk.2.indexer_compressor_norm.weight", 128, 1, 1);
    expect_dims(ts, n, "blk.1.ffn_gate_tid2eid.weight", 6, 129280, 1);
    expect_dims(ts, n, "blk.3.exp_probs_b.bias", 256, 1, 1);
    expect_dims(ts, n, "blk.0.ffn_gate_exps.weight", 4096, 2048, 256);
    expect_dims(ts, n, "blk.0.ffn_down_exps.weight", 2048, 4096, 256);
    expect_dims(ts, n, "blk.0.ffn_down_shexp.weight", 2048, 4096, 1);
    /* Presence rules. */
    assert_null(find(ts, n, "blk.1.attn_compressor_kv.weight"));
    assert_null(find(ts, n, "blk.3.indexer.proj.weight"));
    assert_null(find(ts, n, "blk.3.ffn_gate_tid2eid.weight"));
    assert_null(find(ts, n, "blk.2.exp_probs_b.bias"));
    assert_null(find(ts, n, "blk.43.attn_norm.weight"));

    /* Totals (spec §1.3 / §7.2). */
    dsv4_type_recipe q2, q4;
    assert_true(dsv4_type_recipe_named("q2", &q2));
    assert_true(dsv4_type_recipe_named("q4", &q4));
    uint64_t tot2 = 0, tot4 = 0, group[DSV4_TG_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t b2 = tensor_bytes(&ts[i], dsv4_type_recipe_type(&q2, ts[i].e->cls));
        tot2 += b2;
        tot4 += tensor_bytes(&ts[i], dsv4_type_recipe_type(&q4, ts[i].e->cls));
        group[ts[i].e->group] += b2;
    }
    assert_true(tot2 == 86714775900ull);
    assert_true(tot4 == 164628167004ull);
    assert_true(group[DSV4_TG_ROUTED] == 77913391104ull);
    assert_true(group[DSV4_TG_ATTN_PROJ] == 4886495232ull);
    assert_true(group[DSV4_TG_SHARED] == 1149763584ull);
    assert_true(group[DSV4_TG_EMBD] == 1059061760ull);
    assert_true(group[DSV4_TG_OUTPUT] == 562626560ull);
    assert_true(group[DSV4_TG_COMPRESSOR] == 522887168ull);
    assert_true(group[DSV4_TG_INDEXER_Q] == 363331584ull);
    assert_true(group[DSV4_TG_ROUTER] == 90177536ull);
    assert_true(group[DSV4_TG_IDX_COMPRESSOR] == 88123392ull);
    assert_true(group[DSV4_TG_HC_FN] == 67633152ull + 131072ull); /* + output_hc_fn, which §7.2 leaves out */
    assert_true(group[DSV4_TG_TID2EID] == 9308160ull);
    free(ts);
    dsv4_config_free(&c);
}

static void test_tiny_inventory(void **state) {
    (void)state;
    dsv4_config c;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("tiny", &c, &err), DSV4_OK);
    dsv4_layout_tensor *ts;
    size_t n;
    assert_int_equal(dsv4_layout_build(&c, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    /* 6 global + 6*23 common + 4 compressed layers*4 + 2 indexer layers*6 + 3 tid2eid + 3 bias */
    assert_int_equal(n, 6 + 138 + 16 + 12 + 3 + 3);
    assert_string_equal(ts[0].name, "token_embd.weight");
    assert_string_equal(ts[n - 1].name, "output.weight");
    expect_dims(ts, n, "blk.3.attn_compressor_ape.weight", 128, 16, 1);
    expect_dims(ts, n, "blk.4.attn_compressor_ape.weight", 256, 4, 1);
    expect_dims(ts, n, "blk.0.attn_output_a.weight", 512, 128, 1);
    expect_dims(ts, n, "blk.5.attn_q_b.weight", 64, 1024, 1);
    free(ts);
    size_t nreq, nbind;
    assert_int_equal(dsv4_layout_build(&c, DSV4_LAYOUT_REQUIRED, &ts, &nreq, &err), DSV4_OK);
    free(ts);
    assert_int_equal(dsv4_layout_build(&c, DSV4_LAYOUT_BIND, &ts, &nbind, &err), DSV4_OK);
    assert_int_equal(nreq, n - 3);
    assert_int_equal(nbind, n + 3); /* the binder also looks for the bias on hash layers */
    size_t optional = 0;
    for (size_t i = 0; i < nbind; i++) optional += !ts[i].required;
    assert_int_equal(optional, 6);
    free(ts);
    dsv4_config_free(&c);
}

static void test_lookup(void **state) {
    (void)state;
    int32_t il = 99;
    const dsv4_layout_entry *e = dsv4_layout_lookup("blk.17.indexer.attn_q_b.weight", &il);
    assert_non_null(e);
    assert_int_equal(il, 17);
    assert_string_equal(e->name, "indexer.attn_q_b.weight");
    assert_int_equal(e->cls, DSV4_TC_F16);
    e = dsv4_layout_lookup("output.weight", &il);
    assert_non_null(e);
    assert_int_equal(il, -1);
    assert_int_equal(e->cls, DSV4_TC_DENSE);
    assert_non_null(dsv4_layout_lookup("blk.0.exp_probs_b.bias", &il));
    assert_null(dsv4_layout_lookup("blk.0.exp_probs_b.weight", &il));
    assert_null(dsv4_layout_lookup("blk.x.attn_norm.weight", &il));
    assert_null(dsv4_layout_lookup("blk.3.output.weight", &il)); /* global name under a layer */
    assert_null(dsv4_layout_lookup("attn_norm.weight", &il));    /* layer name without a layer */
    assert_null(dsv4_layout_lookup("mtp.0.e_proj.weight", &il));
}

static void test_classes_and_recipes(void **state) {
    (void)state;
    assert_true(dsv4_class_allows(DSV4_TC_NORM, DSV4_TYPE_F32));
    assert_false(dsv4_class_allows(DSV4_TC_NORM, DSV4_TYPE_F16));
    assert_false(dsv4_class_allows(DSV4_TC_VEC, DSV4_TYPE_BF16));
    assert_true(dsv4_class_allows(DSV4_TC_I32, DSV4_TYPE_I32));
    assert_false(dsv4_class_allows(DSV4_TC_I32, DSV4_TYPE_F32));
    assert_true(dsv4_class_allows(DSV4_TC_F16, DSV4_TYPE_BF16));
    assert_false(dsv4_class_allows(DSV4_TC_F16, DSV4_TYPE_Q8_0));
    assert_true(dsv4_class_allows(DSV4_TC_DENSE, DSV4_TYPE_Q2_K));
    assert_false(dsv4_class_allows(DSV4_TC_DENSE, DSV4_TYPE_IQ2_XXS));
    assert_true(dsv4_class_allows(DSV4_TC_ROUTED_GU, DSV4_TYPE_IQ2_XXS));
    assert_false(dsv4_class_allows(DSV4_TC_ROUTED_DOWN, DSV4_TYPE_BF16));
    dsv4_type_recipe r;
    assert_true(dsv4_type_recipe_named("q2", &r));
    assert_int_equal(r.dense, DSV4_TYPE_Q8_0);
    assert_int_equal(r.f16cls, DSV4_TYPE_F16);
    assert_int_equal(r.routed_gu, DSV4_TYPE_IQ2_XXS);
    assert_int_equal(r.routed_down, DSV4_TYPE_Q2_K);
    assert_true(dsv4_type_recipe_named("f32", &r));
    assert_int_equal(dsv4_type_recipe_type(&r, DSV4_TC_ROUTED_GU), DSV4_TYPE_F32);
    assert_int_equal(dsv4_type_recipe_type(&r, DSV4_TC_I32), DSV4_TYPE_I32);
    assert_false(dsv4_type_recipe_named("q3", &r));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_inventory),
        cmocka_unit_test(test_tiny_inventory),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_classes_and_recipes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
