/* BPE training (text/bpe_train.h), then the trained tokenizer on the committed corpus:
 * byte-exact round trip, pieces respected, speed with a full-size vocabulary. */
#include "common/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/bpe_train.h"
#include "text/pretok.h"
#include "text/tokenizer.h"
#include "text_fixture.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLOW 10.0 /* sanitizers: only catch pathologies */
#else
#define SLOW 1.0
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define G "\xc4\xa0"

static void check_layout(const dsv4_bpe_vocab *v, uint32_t size) {
    assert_int_equal(v->n_tokens, size);
    assert_string_equal(v->tokens[0], DSV4_BOS_STR);
    assert_string_equal(v->tokens[1], DSV4_EOS_STR);
    for (unsigned b = 0; b < 256; b++) {
        char t[4];
        fx_byte_token(b, t);
        assert_string_equal(v->tokens[2 + b], t);
    }
    for (int s = 2; s < DSV4_SPECIAL_COUNT; s++)
        assert_string_equal(v->tokens[size - 7 + s], DSV4_SPECIAL_TOKENS[s]);
}

static void test_train_hand_example(void **state) {
    (void)state;
    dsv4_bpe_vocab v;
    dsv4_error err;
    /* words: "ab" x1, "Ġab" x2, "Ġcd" x1. (a,b)=3 wins; then (Ġ,ab)=2. */
    const char *text = "ab ab ab cd";
    assert_int_equal(dsv4_bpe_train(text, strlen(text), 265, &v, &err), DSV4_OK);
    check_layout(&v, 265);
    assert_int_equal(v.n_merges, 2);
    assert_string_equal(v.merges[0], "a b");
    assert_string_equal(v.merges[1], G " ab");
    assert_string_equal(v.tokens[258], "ab");
    assert_string_equal(v.tokens[259], G "ab");
    dsv4_bpe_vocab_free(&v);

    /* all counts 1: ties by token strings, 'a' < 'c' < 'Ġ' (0xc4) */
    text = "ab cd";
    assert_int_equal(dsv4_bpe_train(text, strlen(text), 265, &v, &err), DSV4_OK);
    assert_int_equal(v.n_merges, 2);
    assert_string_equal(v.merges[0], "a b");
    assert_string_equal(v.merges[1], "c d");
    dsv4_bpe_vocab_free(&v);

    /* out of pairs: unreachable placeholders keep the size exact */
    text = "ab";
    assert_int_equal(dsv4_bpe_train(text, strlen(text), 266, &v, &err), DSV4_OK);
    check_layout(&v, 266);
    assert_int_equal(v.n_merges, 1);
    assert_string_equal(v.tokens[259], "<\xef\xbd\x9cplace\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81"
                                       "259\xef\xbd\x9c>");
    dsv4_bpe_vocab_free(&v);

    /* "aaaa": (a,a)=3 -> aa; then words [aa aa]: (aa,aa) -> aaaa */
    text = "aaaa";
    assert_int_equal(dsv4_bpe_train(text, strlen(text), 265, &v, &err), DSV4_OK);
    assert_string_equal(v.merges[0], "a a");
    assert_string_equal(v.merges[1], "aa aa");
    dsv4_bpe_vocab_free(&v);

    assert_int_equal(dsv4_bpe_train("x", 1, 262, &v, &err), DSV4_ERR_INVALID);
}

static dsv4_tokenizer *tokenizer_from(const dsv4_bpe_vocab *v) {
    dsv4_tokenizer *t = NULL;
    dsv4_error err;
    dsv4_status st = dsv4_tokenizer_from_arrays((const char *const *)v->tokens, NULL, v->n_tokens,
                                                (const char *const *)v->merges, NULL, v->n_merges, &t, &err);
    if (st != DSV4_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, DSV4_OK);
    return t;
}

static void test_train_corpus_and_round_trip(void **state) {
    (void)state;
    size_t len = 0;
    char *text = fx_read_file(FX_CORPUS, &len);
    assert_non_null(text);
    assert_true(len > 100000);
    dsv4_bpe_vocab v, v2;
    dsv4_error err;
    double t0 = now();
    assert_int_equal(dsv4_bpe_train(text, len, 2048, &v, &err), DSV4_OK);
    double dt = now() - t0;
    fprintf(stderr, "trained 2048 tokens from %zu bytes in %.2f s\n", len, dt);
    assert_true(dt < 5.0 * SLOW);
    check_layout(&v, 2048);
    assert_int_equal(v.n_merges, 2048 - 263);
    /* each merge joins two earlier tokens into the next id */
    for (uint64_t m = 0; m < v.n_merges; m++) {
        const char *sp = strchr(v.merges[m], ' ');
        assert_non_null(sp);
        size_t la = (size_t)(sp - v.merges[m]);
        char joined[256];
        snprintf(joined, sizeof(joined), "%.*s%s", (int)la, v.merges[m], sp + 1);
        assert_string_equal(v.tokens[258 + m], joined);
        int found_a = 0, found_b = 0;
        for (uint64_t i = 2; i < 258 + m; i++) {
            found_a |= strlen(v.tokens[i]) == la && !memcmp(v.tokens[i], v.merges[m], la);
            found_b |= !strcmp(v.tokens[i], sp + 1);
        }
        assert_true(found_a && found_b);
        for (uint64_t i = 0; i < 258 + m; i++) assert_string_not_equal(v.tokens[i], joined);
    }
    /* deterministic */
    assert_int_equal(dsv4_bpe_train(text, len, 2048, &v2, &err), DSV4_OK);
    for (uint64_t i = 0; i < v.n_tokens; i++) assert_string_equal(v.tokens[i], v2.tokens[i]);
    dsv4_bpe_vocab_free(&v2);

    dsv4_tokenizer *t = tokenizer_from(&v);
    dsv4_tokens toks = {0};
    t0 = now();
    assert_int_equal(dsv4_tokenize_text(t, text, len, &toks, &err), DSV4_OK);
    fprintf(stderr, "encoded %zu bytes into %zu tokens in %.3f s\n", len, toks.n, now() - t0);
    assert_true(toks.n < len / 2.5); /* merges actually compress (2.86 bytes/token here) */
    dsv4_strbuf sb = {0};
    assert_int_equal(dsv4_detokenize(t, toks.ids, toks.n, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len, len);
    assert_memory_equal(sb.data, text, len);

    /* no token crosses a pre-tokenizer piece boundary */
    dsv4_pretok *pt = NULL;
    dsv4_span *sp = NULL;
    size_t nsp = 0;
    assert_int_equal(dsv4_pretok_new(&pt, &err), DSV4_OK);
    assert_int_equal(dsv4_pretok_split_spans(pt, text, len, &sp, &nsp, &err), DSV4_OK);
    size_t pos = 0, piece = 0;
    for (size_t i = 0; i < toks.n; i++) {
        size_t l;
        dsv4_token_bytes(t, toks.ids[i], &l);
        while (piece < nsp && sp[piece].off + sp[piece].len <= pos) piece++;
        assert_true(piece < nsp);
        assert_true(pos + l <= sp[piece].off + sp[piece].len);
        pos += l;
    }
    free(sp);
    dsv4_pretok_free(pt);

    /* the spec's self-check sentence splits into its 14 pieces and never merges across them */
    const char *q = "Answer with only the number: 2048 divided by 128 is";
    dsv4_tokens qt = {0};
    assert_int_equal(dsv4_tokenize_text(t, q, strlen(q), &qt, &err), DSV4_OK);
    sb.len = 0;
    assert_int_equal(dsv4_detokenize(t, qt.ids, qt.n, &sb, &err), DSV4_OK);
    assert_string_equal(sb.data, q);
    assert_true(qt.n >= 14);
    dsv4_tokens_free(&qt);

    dsv4_strbuf_free(&sb);
    dsv4_tokens_free(&toks);
    dsv4_tokenizer_free(t);
    dsv4_bpe_vocab_free(&v);
    free(text);
}

/* Full-size tables: the trained vocabulary padded to 129280 tokens and 128000 merges (fillers
 * that never fire), then 1 MB of text. */
static void test_full_size_speed(void **state) {
    (void)state;
    size_t len = 0;
    char *text = fx_read_file(FX_CORPUS, &len);
    assert_non_null(text);
    dsv4_bpe_vocab v;
    dsv4_error err;
    assert_int_equal(dsv4_bpe_train(text, len, 4096, &v, &err), DSV4_OK);
    const uint64_t NT = 129280, NM = 128000;
    char **tok = calloc(NT, sizeof(*tok));
    char **mer = calloc(NM, sizeof(*mer));
    assert_non_null(tok);
    assert_non_null(mer);
    for (uint64_t i = 0; i < NT; i++) {
        char b[64];
        if (i < v.n_tokens)
            tok[i] = strdup(v.tokens[i]);
        else
            snprintf(b, sizeof(b), "<filler_%llu>", (unsigned long long)i), tok[i] = strdup(b);
    }
    for (uint64_t i = 0; i < NM; i++) {
        char b[64];
        if (i < v.n_merges)
            mer[i] = strdup(v.merges[i]);
        else
            snprintf(b, sizeof(b), "<filler_%llu> <filler_%llu>", (unsigned long long)(i + 5000),
                     (unsigned long long)(i + 5001)),
                mer[i] = strdup(b);
    }
    double t0 = now();
    dsv4_tokenizer *t = NULL;
    assert_int_equal(dsv4_tokenizer_from_arrays((const char *const *)tok, NULL, NT, (const char *const *)mer,
                                                NULL, NM, &t, &err),
                     DSV4_OK);
    double t_build = now() - t0;
    const size_t reps = (1u << 20) / len + 1;
    char *big = malloc(len * reps);
    for (size_t r = 0; r < reps; r++) memcpy(big + r * len, text, len);
    dsv4_tokens toks = {0};
    t0 = now();
    assert_int_equal(dsv4_tokenize_text(t, big, len * reps, &toks, &err), DSV4_OK);
    double t_enc = now() - t0;
    fprintf(stderr, "129280-token vocab: build %.3f s, encode %zu bytes -> %zu tokens in %.3f s\n", t_build,
            len * reps, toks.n, t_enc);
    assert_true(t_enc < SLOW);
    dsv4_strbuf sb = {0};
    assert_int_equal(dsv4_detokenize(t, toks.ids, toks.n, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len, len * reps);
    assert_memory_equal(sb.data, big, sb.len);
    dsv4_strbuf_free(&sb);
    dsv4_tokens_free(&toks);
    dsv4_tokenizer_free(t);
    for (uint64_t i = 0; i < NT; i++) free(tok[i]);
    for (uint64_t i = 0; i < NM; i++) free(mer[i]);
    free(tok);
    free(mer);
    free(big);
    dsv4_bpe_vocab_free(&v);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_hand_example),
        cmocka_unit_test(test_train_corpus_and_round_trip),
        cmocka_unit_test(test_full_size_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
