/* BPE merging, special tokens, detokenisation and streaming detok on a hand-made vocabulary. */
#include "common/testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "text/detok.h"
#include "text/tokenizer.h"
#include "text_fixture.h"

#define G "\xc4\xa0" /* 'Ġ' = byte-level space */
#define ID_BYTE(b) (7 + (int32_t)(b))

static const char *const EXTRA[] = {"he",    "ll", "hell",    "hello", G "w", "or",
                                    G "wor", "ld", G "world", "aa",    "bc",  "ab"};
enum { ID_HE = 263, ID_LL, ID_HELL, ID_HELLO, ID_GW, ID_OR, ID_GWOR, ID_LD, ID_GWORLD, ID_AA, ID_BC, ID_AB };
static const char *const MERGES[] = {
    "h e", "l l", "he ll", "hell o", G " w", "o r", G "w or", "l d", G "wor ld", /* ranks 0..8 */
    "b c",                                                                       /* 9 */
    "a b",                                                                       /* 10 */
    "a a",                                                                       /* 11 */
    "x y", /* 12: its result "xy" is not a token -> byte fallback */
};

static dsv4_tokenizer *small(void) {
    dsv4_tokenizer *t =
        fx_build(EXTRA, sizeof(EXTRA) / sizeof(EXTRA[0]), MERGES, sizeof(MERGES) / sizeof(MERGES[0]));
    assert_non_null(t);
    return t;
}

static void expect_tokens(const dsv4_tokenizer *t, const char *text, const int32_t *want, size_t n_want,
                          int rendered) {
    dsv4_tokens out = {0};
    dsv4_error err;
    dsv4_status st = rendered ? dsv4_tokenize_rendered(t, text, strlen(text), &out, &err)
                              : dsv4_tokenize_text(t, text, strlen(text), &out, &err);
    assert_int_equal(st, DSV4_OK);
    if (out.n != n_want) {
        fprintf(stderr, "for \"%s\" got %zu tokens:", text, out.n);
        for (size_t i = 0; i < out.n; i++) fprintf(stderr, " %d", out.ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(out.n, n_want);
    for (size_t i = 0; i < n_want; i++) assert_int_equal(out.ids[i], want[i]);
    dsv4_tokens_free(&out);
}
#define EXPECT(t, text, rendered, ...)                                                                       \
    do {                                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                                  \
        expect_tokens(t, text, w_, sizeof(w_) / sizeof(w_[0]), rendered);                                    \
    } while (0)

static void test_lookup_and_specials(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    assert_int_equal(dsv4_tokenizer_n_tokens(t), 7 + 256 + 12);
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++)
        assert_int_equal(dsv4_tokenizer_special(t, (dsv4_special)s), s);
    assert_int_equal(dsv4_tokenizer_find(t, G "world", strlen(G "world")), ID_GWORLD);
    assert_int_equal(dsv4_tokenizer_find(t, "world", 5), -1);
    assert_int_equal(dsv4_tokenizer_merge_rank(t, "he", 2, "ll", 2), 2);
    assert_int_equal(dsv4_tokenizer_merge_rank(t, "ll", 2, "he", 2), -1);
    dsv4_tokenizer_free(t);
}

static void test_bpe_hand_merges(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    /* h e l l o: he(0) -> [he l l o]; ll(1) -> [he ll o]; he ll(2); hell o(3) */
    EXPECT(t, "hello", 0, ID_HELLO);
    /* Ġ w o r l d: Ġw(4), or(5), Ġw or(6), ld(7), Ġwor ld(8) */
    EXPECT(t, "hello world", 0, ID_HELLO, ID_GWORLD);
    /* a b c: bc (9) beats ab (10) although ab is further left */
    EXPECT(t, "abc", 0, ID_BYTE('a'), ID_BC);
    /* equal ranks: leftmost first. aaa -> [aa a], aaaa -> [aa aa] */
    EXPECT(t, "aaa", 0, ID_AA, ID_BYTE('a'));
    EXPECT(t, "aaaa", 0, ID_AA, ID_AA);
    EXPECT(t, "aaaaa", 0, ID_AA, ID_AA, ID_BYTE('a'));
    /* merged symbol missing from the vocab: each byte looked up alone */
    EXPECT(t, "xy", 0, ID_BYTE('x'), ID_BYTE('y'));
    /* pieces never merge across the pre-tokenizer split: "hello123" -> "hello" | "123" */
    EXPECT(t, "hello123", 0, ID_HELLO, ID_BYTE('1'), ID_BYTE('2'), ID_BYTE('3'));
    /* "helloworld" is one piece but "Ġw" needs the space: only the first merges apply */
    EXPECT(t, "helloworld", 0, ID_HELLO, ID_BYTE('w'), ID_OR, ID_LD);
    /* multi-byte: é = c3 a9 -> two byte tokens */
    EXPECT(t, "\xc3\xa9", 0, ID_BYTE(0xc3), ID_BYTE(0xa9));
    /* empty text: nothing */
    dsv4_tokens out = {0};
    dsv4_error err;
    assert_int_equal(dsv4_tokenize_text(t, "", 0, &out, &err), DSV4_OK);
    assert_int_equal(out.n, 0);
    dsv4_tokenizer_free(t);
}

static void test_rendered_specials(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    /* specials anywhere, spans between BPE'd separately */
    EXPECT(t,
           DSV4_USER_STR "hello" DSV4_THINK_START_STR
                         "aa" DSV4_THINK_END_STR DSV4_DSML_STR DSV4_ASSISTANT_STR,
           1, DSV4_SPECIAL_USER, ID_HELLO, DSV4_SPECIAL_THINK_START, ID_AA, DSV4_SPECIAL_THINK_END,
           DSV4_SPECIAL_DSML, DSV4_SPECIAL_ASSISTANT);
    EXPECT(t, DSV4_BOS_STR DSV4_EOS_STR, 1, DSV4_SPECIAL_BOS, DSV4_SPECIAL_EOS);
    /* "<｜DSML｜x>": '<' alone, the DSML special, then "x>" (x then '>', split by the pre-tokenizer) */
    EXPECT(t, "<" DSV4_DSML_STR "x>", 1, ID_BYTE('<'), DSV4_SPECIAL_DSML, ID_BYTE('x'), ID_BYTE('>'));
    /* plain text does not recognise specials */
    EXPECT(t, "<think>", 0, ID_BYTE('<'), ID_BYTE('t'), ID_BYTE('h'), ID_BYTE('i'), ID_BYTE('n'),
           ID_BYTE('k'), ID_BYTE('>'));
    /* other DeepSeek specials are plain text even in rendered mode */
    const char *other = "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>";
    dsv4_tokens out = {0};
    dsv4_error err;
    assert_int_equal(dsv4_tokenize_rendered(t, other, strlen(other), &out, &err), DSV4_OK);
    for (size_t i = 0; i < out.n; i++) assert_true(out.ids[i] >= 7);
    dsv4_strbuf sb = {0};
    assert_int_equal(dsv4_detokenize(t, out.ids, out.n, &sb, &err), DSV4_OK);
    assert_string_equal(sb.data, other);
    dsv4_strbuf_free(&sb);
    dsv4_tokens_free(&out);
    /* a truncated special at the end is text */
    EXPECT(t, "<think", 1, ID_BYTE('<'), ID_BYTE('t'), ID_BYTE('h'), ID_BYTE('i'), ID_BYTE('n'),
           ID_BYTE('k'));
    dsv4_tokenizer_free(t);
}

static void test_token_bytes(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    size_t n;
    const char *b = dsv4_token_bytes(t, ID_GWORLD, &n);
    assert_int_equal(n, 6);
    assert_memory_equal(b, " world", 6);
    b = dsv4_token_bytes(t, ID_BYTE(0), &n);
    assert_int_equal(n, 1);
    assert_int_equal(b[0], 0);
    b = dsv4_token_bytes(t, ID_BYTE(0xff), &n);
    assert_int_equal(n, 1);
    assert_int_equal((uint8_t)b[0], 0xff);
    /* specials with U+FF5C are literal; <think> maps through the byte map to itself */
    b = dsv4_token_bytes(t, DSV4_SPECIAL_BOS, &n);
    assert_int_equal(n, strlen(DSV4_BOS_STR));
    assert_memory_equal(b, DSV4_BOS_STR, n);
    b = dsv4_token_bytes(t, DSV4_SPECIAL_THINK_START, &n);
    assert_int_equal(n, 7);
    assert_memory_equal(b, "<think>", 7);
    b = dsv4_token_bytes(t, -1, &n);
    assert_int_equal(n, 0);
    b = dsv4_token_bytes(t, 100000, &n);
    assert_int_equal(n, 0);
    dsv4_tokenizer_free(t);
}

/* A vocabulary string with a raw space and a codepoint outside the map: both are dropped. */
static void test_detok_drops_unmapped(void **state) {
    (void)state;
    const char *extra[] = {"a b\xe2\x82\xac"
                           "c"};
    dsv4_tokenizer *t = fx_build(extra, 1, NULL, 0);
    assert_non_null(t);
    size_t n;
    const char *b = dsv4_token_bytes(t, 263, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(b, "abc", 3);
    dsv4_tokenizer_free(t);
}

static void test_missing_special_is_an_error(void **state) {
    (void)state;
    const char *toks[] = {DSV4_BOS_STR, DSV4_EOS_STR, DSV4_USER_STR, "a"};
    dsv4_tokenizer *t = NULL;
    dsv4_error err;
    assert_int_equal(dsv4_tokenizer_from_arrays(toks, NULL, 4, NULL, NULL, 0, &t, &err), DSV4_ERR_NOT_FOUND);
    assert_null(t);
    assert_non_null(strstr(err.msg, DSV4_ASSISTANT_STR));
    assert_int_equal(dsv4_tokenizer_from_arrays(toks, NULL, 0, NULL, NULL, 0, &t, &err), DSV4_ERR_INVALID);
}

/* Later duplicates win, for tokens and merges alike (ds4's hash tables). */
static void test_duplicates_later_wins(void **state) {
    (void)state;
    const char *extra[] = {"ab", "ab"};
    const char *merges[] = {"a b", "x y", "a b"};
    dsv4_tokenizer *t = fx_build(extra, 2, merges, 3);
    assert_non_null(t);
    assert_int_equal(dsv4_tokenizer_find(t, "ab", 2), 264);
    assert_int_equal(dsv4_tokenizer_merge_rank(t, "a", 1, "b", 1), 2);
    EXPECT(t, "ab", 0, 264);
    dsv4_tokenizer_free(t);
}

static int utf8_complete(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] >> 6) != 2) return 0;
        i += l;
    }
    return 1;
}

static void test_streaming_detok(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    /* "a😀b": the emoji has no merges so it arrives as four byte tokens */
    const char *text = "a\xf0\x9f\x98\x80"
                       "b\xe4\xb8\xad";
    dsv4_tokens toks = {0};
    dsv4_error err;
    assert_int_equal(dsv4_tokenize_text(t, text, strlen(text), &toks, &err), DSV4_OK);
    assert_int_equal(toks.n, 1 + 4 + 1 + 3);
    dsv4_detok d;
    dsv4_detok_init(&d);
    dsv4_strbuf out = {0};
    const size_t expect_len[] = {1, 1, 1, 1, 5, 6, 6, 6, 9};
    for (size_t i = 0; i < toks.n; i++) {
        assert_int_equal(dsv4_detok_push_token(&d, t, toks.ids[i], &out, &err), DSV4_OK);
        assert_int_equal(out.len, expect_len[i]);
        assert_true(utf8_complete(out.data, out.len));
    }
    assert_int_equal(dsv4_detok_flush(&d, &out, &err), DSV4_OK);
    assert_string_equal(out.data, text);
    dsv4_strbuf_free(&out);

    /* invalid bytes become U+FFFD (maximal subparts); a dangling prefix at flush is one U+FFFD */
    dsv4_detok_init(&d);
    assert_int_equal(dsv4_detok_push(&d, "x\xff", 2, &out, &err), DSV4_OK);
    assert_string_equal(out.data, "x\xef\xbf\xbd");
    assert_int_equal(dsv4_detok_push(&d, "\xe2\x82", 2, &out, &err), DSV4_OK);
    assert_int_equal(dsv4_detok_pending(&d), 2);
    assert_int_equal(dsv4_detok_push(&d, "A\xe2", 2, &out, &err), DSV4_OK);
    assert_string_equal(out.data, "x\xef\xbf\xbd\xef\xbf\xbd"
                                  "A");
    assert_int_equal(dsv4_detok_flush(&d, &out, &err), DSV4_OK);
    assert_string_equal(out.data, "x\xef\xbf\xbd\xef\xbf\xbd"
                                  "A\xef\xbf\xbd");
    assert_int_equal(dsv4_detok_pending(&d), 0);
    dsv4_strbuf_free(&out);

    /* byte-by-byte feeding of random valid text reproduces it exactly, never emitting a partial char */
    uint64_t seed = 11;
    static const char *const chars[] = {"a", " ", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\n"};
    dsv4_strbuf src = {0};
    for (int i = 0; i < 400; i++) dsv4_strbuf_puts(&src, chars[test_rng_next(&seed) % 6], &err);
    dsv4_detok_init(&d);
    for (size_t i = 0; i < src.len;) {
        size_t step = 1 + (size_t)(test_rng_next(&seed) % 5);
        if (step > src.len - i) step = src.len - i;
        assert_int_equal(dsv4_detok_push(&d, src.data + i, step, &out, &err), DSV4_OK);
        assert_true(utf8_complete(out.data ? out.data : "", out.len));
        i += step;
    }
    assert_int_equal(dsv4_detok_flush(&d, &out, &err), DSV4_OK);
    assert_int_equal(out.len, src.len);
    assert_memory_equal(out.data, src.data, src.len);
    dsv4_strbuf_free(&out);
    dsv4_strbuf_free(&src);
    dsv4_tokens_free(&toks);
    dsv4_tokenizer_free(t);
}

/* With only byte tokens and no merges every byte is one token: round trip of arbitrary bytes. */
static void test_round_trip_bytes(void **state) {
    (void)state;
    dsv4_tokenizer *t = fx_build(NULL, 0, NULL, 0);
    assert_non_null(t);
    uint64_t seed = 3;
    dsv4_error err;
    for (int iter = 0; iter < 50; iter++) {
        char buf[300];
        size_t len = (size_t)(test_rng_next(&seed) % sizeof(buf));
        for (size_t i = 0; i < len; i++) buf[i] = (char)(test_rng_next(&seed) & 0xff);
        dsv4_tokens toks = {0};
        assert_int_equal(dsv4_tokenize_text(t, buf, len, &toks, &err), DSV4_OK);
        assert_int_equal(toks.n, len);
        for (size_t i = 0; i < len; i++) assert_int_equal(toks.ids[i], ID_BYTE((uint8_t)buf[i]));
        dsv4_strbuf sb = {0};
        assert_int_equal(dsv4_detokenize(t, toks.ids, toks.n, &sb, &err), DSV4_OK);
        assert_int_equal(sb.len, len);
        if (len) assert_memory_equal(sb.data, buf, len);
        dsv4_strbuf_free(&sb);
        dsv4_tokens_free(&toks);
    }
    dsv4_tokenizer_free(t);
}

typedef struct job {
    const dsv4_tokenizer *t;
    const char *text;
    size_t len;
    dsv4_tokens out;
    dsv4_status st;
} job;

static void *encode_job(void *arg) {
    job *j = arg;
    dsv4_error err;
    j->st = dsv4_tokenize_rendered(j->t, j->text, j->len, &j->out, &err);
    return NULL;
}

/* One tokenizer shared by threads gives the same result as a single thread. */
static void test_concurrent_encode(void **state) {
    (void)state;
    dsv4_tokenizer *t = small();
    dsv4_strbuf text = {0};
    dsv4_error err;
    uint64_t seed = 5;
    static const char *const words[] = {"hello", " world", " abc",        "aaaa",
                                        " 123",  "\n",     DSV4_USER_STR, "\xe4\xb8\xad"};
    for (int i = 0; i < 20000; i++) dsv4_strbuf_puts(&text, words[test_rng_next(&seed) % 8], &err);
    job ref = {.t = t, .text = text.data, .len = text.len};
    encode_job(&ref);
    assert_int_equal(ref.st, DSV4_OK);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){.t = t, .text = text.data, .len = text.len};
        assert_int_equal(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].st, DSV4_OK);
        assert_int_equal(jobs[i].out.n, ref.out.n);
        assert_memory_equal(jobs[i].out.ids, ref.out.ids, ref.out.n * sizeof(int32_t));
        dsv4_tokens_free(&jobs[i].out);
    }
    dsv4_tokens_free(&ref.out);
    dsv4_strbuf_free(&text);
    dsv4_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_and_specials),   cmocka_unit_test(test_bpe_hand_merges),
        cmocka_unit_test(test_rendered_specials),     cmocka_unit_test(test_token_bytes),
        cmocka_unit_test(test_detok_drops_unmapped),  cmocka_unit_test(test_missing_special_is_an_error),
        cmocka_unit_test(test_duplicates_later_wins), cmocka_unit_test(test_streaming_detok),
        cmocka_unit_test(test_round_trip_bytes),      cmocka_unit_test(test_concurrent_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
