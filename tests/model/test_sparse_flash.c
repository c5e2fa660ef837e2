/* Full Flash-shape files, written sparse (header + tid2eid only; the data is a hole), checked
 * against the spec's inventory: 1328 tensors, 86,714,775,900 B (q2) and 164,628,167,004 B (q4).
 * The binder must accept them without touching the hole. */
#include "model_testutil.h"

#include <sys/stat.h>

#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/synth.h"

static void check_flash(const char *recipe, uint64_t want_bytes, const char *want_gu, const char *want_down) {
    dsv4_config cfg;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("flash", &cfg, &err), DSV4_OK);
    dsv4_synth_opts o = {.cfg = &cfg, .seed = 3, .n_threads = 2, .sparse = true, .name = "flash-sparse"};
    assert_true(dsv4_type_recipe_named(recipe, &o.types));
    char path[512];
    mt_path(path, sizeof path, "flash.gguf");
    dsv4_synth_stats st;
    if (dsv4_synth_write(&o, path, &st, &err) != DSV4_OK) fail_msg("%s: %s", recipe, err.msg);
    assert_int_equal(st.n_tensors, 1328);
    assert_true(st.tensor_bytes == want_bytes);

    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true((uint64_t)sb.st_size == st.file_size);
    assert_true((uint64_t)sb.st_size > want_bytes);
    /* Only the header (vocabulary) and 3 tid2eid tables (3 x 3.1 MB) were written. */
    assert_true((uint64_t)sb.st_blocks * 512 < 64ull << 20);

    gguf_file *f = NULL;
    if (gguf_open(path, &f, &err) != DSV4_OK) fail_msg("gguf_open: %s", err.msg);
    assert_int_equal(gguf_tensor_count(f), 1328);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) sum += gguf_tensor_at(f, i)->nbytes;
    assert_true(sum == want_bytes);
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    assert_non_null(kv);
    assert_int_equal(kv->arr_len, 129280);
    dsv4_model *m = NULL;
    if (dsv4_model_bind(f, &m, &err) != DSV4_OK) fail_msg("bind %s: %s", recipe, err.msg);
    assert_int_equal(m->n_bound_tensors, 1328);
    assert_string_equal(dsv4_type_name(m->layers[42].ffn_gate_exps.type), want_gu);
    assert_string_equal(dsv4_type_name(m->layers[42].ffn_down_exps.type), want_down);
    assert_true(m->layers[42].ffn_down_exps.nbytes ==
                (!strcmp(recipe, "q2") ? 2752512ull : 4718592ull) * 256);
    dsv4_model_free(m);
    assert_int_equal(unlink(path), 0);
    dsv4_config_free(&cfg);
}

static void test_flash_q2_sparse(void **state) {
    (void)state;
    check_flash("q2", 86714775900ull, "IQ2_XXS", "Q2_K");
}

static void test_flash_q4_sparse(void **state) {
    (void)state;
    check_flash("q4", 164628167004ull, "Q4_K", "Q4_K");
}

static bool all_zero(const unsigned char *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* --sparse-experts: the routed expert tensors read as zeros, every other tensor is byte-identical
 * to the fully written file of the same seed (the generator seeds by tensor and row). */
static void test_sparse_experts_tiny(void **state) {
    (void)state;
    dsv4_config cfg;
    dsv4_error err;
    assert_int_equal(dsv4_config_preset("tiny", &cfg, &err), DSV4_OK);
    char full[512], part[512];
    mt_path(full, sizeof full, "tiny-full.gguf");
    mt_path(part, sizeof part, "tiny-sparse-experts.gguf");
    dsv4_synth_opts o = {.cfg = &cfg, .seed = 7, .n_threads = 2, .name = "tiny"};
    assert_true(dsv4_type_recipe_named("q2", &o.types));
    if (dsv4_synth_write(&o, full, NULL, &err) != DSV4_OK) fail_msg("full: %s", err.msg);
    o.sparse_experts = true;
    if (dsv4_synth_write(&o, part, NULL, &err) != DSV4_OK) fail_msg("sparse experts: %s", err.msg);
    gguf_file *a = NULL, *b = NULL;
    assert_int_equal(gguf_open(full, &a, &err), DSV4_OK);
    assert_int_equal(gguf_open(part, &b, &err), DSV4_OK);
    assert_int_equal(gguf_tensor_count(a), gguf_tensor_count(b));
    unsigned n_routed = 0, n_other = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        assert_string_equal(ta->name, tb->name);
        assert_true(ta->nbytes == tb->nbytes && ta->offset == tb->offset);
        int32_t layer;
        const dsv4_layout_entry *e = dsv4_layout_lookup(ta->name, &layer);
        assert_non_null(e);
        if (e->group == DSV4_TG_ROUTED) {
            assert_false(all_zero(ta->data, ta->nbytes));
            assert_true(all_zero(tb->data, tb->nbytes));
            n_routed++;
        } else {
            assert_memory_equal(ta->data, tb->data, ta->nbytes);
            n_other++;
        }
    }
    assert_int_equal(n_routed, 3 * cfg.n_layer);
    assert_true(n_other > n_routed);
    gguf_close(a);
    gguf_close(b);
    unlink(full);
    unlink(part);
    dsv4_config_free(&cfg);
}

static void test_synthetic_vocab(void **state) {
    (void)state;
    dsv4_synth_vocab v;
    dsv4_error err;
    assert_int_equal(dsv4_synth_vocab_make(129280, &v, &err), DSV4_OK);
    assert_int_equal(v.n_tokens, 129280);
    assert_int_equal(v.n_merges, 129280 - 256 - 7);
    assert_string_equal(v.tokens[0], "<\xef\xbd\x9c"
                                     "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    assert_string_equal(v.tokens[2 + 'a'], "a");
    assert_string_equal(v.tokens[2 + ' '], "\xc4\xa0");  /* U+0120 'Ġ' */
    assert_string_equal(v.tokens[2 + '\n'], "\xc4\x8a"); /* U+010A */
    assert_string_equal(v.tokens[129279], "\xef\xbd\x9c"
                                          "DSML\xef\xbd\x9c");
    /* every merge "A B" joins two earlier tokens into the token of its rank */
    for (uint64_t r = 0; r < v.n_merges; r += 97) {
        const char *m = v.merges[r];
        const char *sp = strchr(m, ' ');
        assert_non_null(sp);
        char joined[256];
        snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - m), m, sp + 1);
        assert_string_equal(joined, v.tokens[258 + r]);
    }
    dsv4_synth_vocab_free(&v);
    assert_int_not_equal(dsv4_synth_vocab_make(100, &v, &err), DSV4_OK);
}

static int teardown(void **state) {
    (void)state;
    mt_tmpdir_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_vocab),
        cmocka_unit_test(test_sparse_experts_tiny),
        cmocka_unit_test(test_flash_q2_sparse),
        cmocka_unit_test(test_flash_q4_sparse),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
