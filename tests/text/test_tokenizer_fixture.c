/* The tokenizer against HF `tokenizers` (tests/fixtures/tokenizer_tiny.jsonl, made by
 * scripts/oracle/tokfix.py from the tiny q2 model's GGUF vocabulary): every sample's ids must be
 * identical.
 *
 * The text module cannot link the synth library (model/), so the vocabulary is built here the way
 * `dsv4-gguf synth --preset tiny` builds it: dsv4_bpe_train on data/tiny-corpus.txt with 1024
 * tokens, written to a GGUF with the same tokenizer.* keys and read back with
 * dsv4_tokenizer_from_gguf. That this equals the fixture model's vocabulary follows from
 * tests/engine/test_oracle.c, which synthesizes the model from the same trainer output and checks
 * its sha256 against the fixtures; when DSV4_TINY_Q2 names that GGUF (as for make_fixtures.sh),
 * the tokens and merges are also compared directly. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"
#include "gguf/gguf.h"
#include "text/bpe_train.h"
#include "text/tokenizer.h"
#include "text_fixture.h"

#define FIXTURE "tests/fixtures/tokenizer_tiny.jsonl"
#define TINY_VOCAB 1024 /* the tiny preset's n_vocab */

static dsv4_bpe_vocab g_bpe;
static dsv4_tokenizer *g_tok;
static char g_dir[64];

static int setup(void **state) {
    (void)state;
    size_t len = 0;
    char *text = fx_read_file(FX_CORPUS, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s (run the test from the repo root)\n", FX_CORPUS);
        return -1;
    }
    dsv4_error err;
    dsv4_status st = dsv4_bpe_train(text, len, TINY_VOCAB, &g_bpe, &err);
    free(text);
    if (st != DSV4_OK) return fprintf(stderr, "bpe: %s\n", err.msg), -1;
    strcpy(g_dir, "/tmp/dsv4-tokfix-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.gguf", g_dir);
    /* the tokenizer keys of dsv4_synth_write_metadata (model/synth.c) */
    gguf_writer *w = gguf_writer_new();
    if (!w) return -1;
    st = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", &err);
    if (st == DSV4_OK) st = gguf_writer_set_str(w, "tokenizer.ggml.pre", "joyai-llm", &err);
    if (st == DSV4_OK)
        st = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)g_bpe.tokens, NULL,
                                     g_bpe.n_tokens, &err);
    if (st == DSV4_OK)
        st = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)g_bpe.merges, NULL,
                                     g_bpe.n_merges, &err);
    if (st == DSV4_OK) st = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0, &err);
    if (st == DSV4_OK) st = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1, &err);
    if (st == DSV4_OK) st = gguf_writer_write_file(w, path, &err);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    if (st == DSV4_OK) st = gguf_open(path, &f, &err);
    if (st == DSV4_OK) st = dsv4_tokenizer_from_gguf(f, &g_tok, &err);
    gguf_close(f);
    unlink(path);
    if (st != DSV4_OK) return fprintf(stderr, "vocabulary GGUF: %s\n", err.msg), -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dsv4_tokenizer_free(g_tok);
    dsv4_bpe_vocab_free(&g_bpe);
    if (g_dir[0]) rmdir(g_dir);
    return 0;
}

static void test_hf_ids_identical(void **state) {
    (void)state;
    size_t len = 0;
    char *all = fx_read_file(FIXTURE, &len);
    if (!all) fail_msg("cannot read %s (run the test from the repo root)", FIXTURE);
    uint32_t n_samples = 0, n_ids = 0, n_bad = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        if (!o) fail_msg("%s line %u: %s", FIXTURE, n_samples + 1, jerr.text);
        const json_t *jt = json_object_get(o, "text"), *ji = json_object_get(o, "ids");
        if (!json_is_string(jt) || !json_is_array(ji))
            fail_msg("%s line %u: no text/ids", FIXTURE, n_samples + 1);
        dsv4_tokens got = {0};
        dsv4_error err;
        assert_int_equal(dsv4_tokenize_text(g_tok, json_string_value(jt), json_string_length(jt), &got, &err),
                         DSV4_OK);
        bool same = got.n == json_array_size(ji);
        for (size_t i = 0; same && i < got.n; i++)
            same = json_integer_value(json_array_get(ji, i)) == got.ids[i];
        if (!same && ++n_bad <= 3)
            print_message("sample %u (%.60s): %zu ids, HF %zu\n", n_samples, json_string_value(jt), got.n,
                          json_array_size(ji));
        n_ids += (uint32_t)got.n;
        n_samples++;
        dsv4_tokens_free(&got);
        json_decref(o);
    }
    free(all);
    print_message("tokenizer fixture: %u samples, %u ids, %u differ from HF tokenizers\n", n_samples, n_ids,
                  n_bad);
    assert_true(n_samples > 0);
    assert_int_equal(n_bad, 0);
}

/* Optional: the trained vocabulary against the fixture model's own GGUF. */
static void test_vocab_equals_fixture_model(void **state) {
    (void)state;
    const char *path = getenv("DSV4_TINY_Q2");
    if (!path || !*path) {
        print_message("skipped: set DSV4_TINY_Q2 to the fixture model's GGUF to compare vocabularies\n");
        return;
    }
    gguf_file *f = NULL;
    dsv4_tokenizer *t = NULL;
    dsv4_error err;
    if (gguf_open(path, &f, &err) != DSV4_OK || dsv4_tokenizer_from_gguf(f, &t, &err) != DSV4_OK)
        fail_msg("%s: %s", path, err.msg);
    assert_int_equal(dsv4_tokenizer_n_tokens(t), g_bpe.n_tokens);
    assert_int_equal(dsv4_tokenizer_n_merges(t), g_bpe.n_merges);
    for (uint64_t i = 0; i < g_bpe.n_tokens; i++) {
        size_t l = 0;
        const char *s = dsv4_tokenizer_token_str(t, (int32_t)i, &l);
        if (l != strlen(g_bpe.tokens[i]) || memcmp(s, g_bpe.tokens[i], l))
            fail_msg("token %llu differs", (unsigned long long)i);
    }
    for (uint64_t i = 0; i < g_bpe.n_merges; i++) {
        const char *m = g_bpe.merges[i], *sp = strchr(m, ' ');
        assert_non_null(sp);
        assert_int_equal(dsv4_tokenizer_merge_rank(t, m, (size_t)(sp - m), sp + 1, strlen(sp + 1)),
                         (int32_t)i);
    }
    dsv4_tokenizer_free(t);
    gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_ids_identical),
        cmocka_unit_test(test_vocab_equals_fixture_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
