/* Forced tool calls (server/constrain.h) on the tiny model's tokenizer (dsv4_bpe_train on
 * data/tiny-corpus.txt, 1024 tokens, as `dsv4-gguf synth --preset tiny` builds it):
 *  - the number grammar against a POSIX regex of full JSON numbers;
 *  - the string / number masks over the whole vocabulary against predicates written here (a
 *    UTF-8 checker from Unicode Table 3-7, the regex), including a pending partial character;
 *  - the generated text of whole calls, driven by a fake model that "wants" a target text (and
 *    strongly prefers '<' tokens, which the masks must refuse), against hand-written DSML;
 *  - random logits with the real sampler: every run is a call the DSML parser accepts, with
 *    arguments that parse as JSON and match the schema's types. */
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/testutil.h"
#include "server/constrain.h"
#include "text/bpe_train.h"
#include "text/dsml.h"
#include "text/special.h"

#define D DSV4_DSML_STR
#define CORPUS "data/tiny-corpus.txt"
#define TINY_VOCAB 1024

static dsv4_tokenizer *g_tok;
static regex_t g_num_re, g_int_re;
static uint32_t g_n;
static int32_t g_close0; /* first token of "</｜DSML｜parameter>\n" */

static int setup(void **state) {
    (void)state;
    FILE *f = fopen(CORPUS, "rb");
    if (!f) return fprintf(stderr, "cannot read %s (run from the repo root)\n", CORPUS), -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n);
    size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (got != (size_t)n) return free(text), -1;
    dsv4_bpe_vocab v;
    dsv4_error err;
    dsv4_status st = dsv4_bpe_train(text, got, TINY_VOCAB, &v, &err);
    free(text);
    if (st != DSV4_OK) return fprintf(stderr, "bpe: %s\n", err.msg), -1;
    st = dsv4_tokenizer_from_arrays((const char *const *)v.tokens, NULL, v.n_tokens,
                                    (const char *const *)v.merges, NULL, v.n_merges, &g_tok, &err);
    dsv4_bpe_vocab_free(&v);
    if (st != DSV4_OK) return fprintf(stderr, "tokenizer: %s\n", err.msg), -1;
    g_n = dsv4_tokenizer_n_tokens(g_tok);
    dsv4_tokens t = {0};
    const char *close = "</" D "parameter>\n";
    if (dsv4_tokenize_rendered(g_tok, close, strlen(close), &t, &err) != DSV4_OK || !t.n) return -1;
    g_close0 = t.ids[0];
    dsv4_tokens_free(&t);
    if (regcomp(&g_num_re, "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?$", REG_EXTENDED | REG_NOSUB) ||
        regcomp(&g_int_re, "^-?(0|[1-9][0-9]*)$", REG_EXTENDED | REG_NOSUB))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dsv4_tokenizer_free(g_tok);
    regfree(&g_num_re);
    regfree(&g_int_re);
    return 0;
}

/* ------------------------------------------------------- predicates ---- */

/* Well-formed UTF-8 (Unicode Table 3-7) except that the last sequence may be cut short; *tail =
 * its length then. */
static bool wf_utf8(const uint8_t *s, size_t n, size_t *tail) {
    size_t i = 0;
    *tail = 0;
    while (i < n) {
        const uint8_t c = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */
        if (c <= 0x7f)
            len = 1;
        else if (c >= 0xc2 && c <= 0xdf)
            len = 2;
        else if (c == 0xe0)
            len = 3, lo = 0xa0;
        else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef)
            len = 3;
        else if (c == 0xed)
            len = 3, hi = 0x9f;
        else if (c == 0xf0)
            len = 4, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3)
            len = 4;
        else if (c == 0xf4)
            len = 4, hi = 0x8f;
        else
            return false;
        for (size_t k = 1; k < len; k++) {
            if (i + k == n) {
                *tail = k;
                return true;
            }
            const uint8_t b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return false;
        }
        i += len;
    }
    return true;
}

static bool full_number(const char *s, bool integer) {
    return regexec(integer ? &g_int_re : &g_num_re, s, 0, NULL, 0) == 0;
}
/* s can still become a number: it is one, or appending "0" makes one (the grammar has no exponent). */
static bool number_prefix_ref(const char *s, bool integer) {
    char t[64];
    const size_t n = strlen(s);
    if (n + 2 > sizeof t) return false;
    memcpy(t, s, n);
    t[n] = '0', t[n + 1] = 0;
    return full_number(s, integer) || full_number(t, integer);
}

static bool is_special(int32_t id) {
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++)
        if (dsv4_tokenizer_special(g_tok, (dsv4_special)s) == id) return true;
    return false;
}

static const char *tbytes(int32_t id, size_t *n) { return dsv4_token_bytes(g_tok, id, n); }

static int32_t find_bytes(const char *s) {
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n;
        const char *b = tbytes((int32_t)i, &n);
        if (n == strlen(s) && !memcmp(b, s, n) && !is_special((int32_t)i)) return (int32_t)i;
    }
    return -1;
}

/* ------------------------------------------------------ fake model ---- */

#define SCHEMA_W                                                                                             \
    "{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":\"object\","             \
    "\"properties\":{"                                                                                       \
    "\"days\":{\"type\":\"integer\"},\"city\":{\"type\":\"string\"},\"metric\":{\"type\":\"boolean\"},"      \
    "\"unit\":{\"enum\":[\"C\",\"F\"]},\"ratio\":{\"type\":[\"number\",\"null\"]},\"tags\":{\"type\":"       \
    "\"array\"}},"                                                                                           \
    "\"required\":[\"unit\",\"city\"]}}"
#define SCHEMA_T                                                                                             \
    "{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":"           \
    "\"string\"}}}}"
#define SCHEMA_G "{\"name\":\"get_weather_x\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}"

static const char *const TOOLS[] = {SCHEMA_T, SCHEMA_W, SCHEMA_G};

#define OPEN "\n\n<" D "tool_calls>\n<" D "invoke name=\""
#define PARAM(k, s) "<" D "parameter name=\"" k "\" string=\"" s "\">"
#define CLOSE "</" D "parameter>\n"
#define TAIL "</" D "invoke>\n</" D "tool_calls>"

/* Logits of a model that wants to write target next (longest matching token best), loves '<'
 * tokens (decoys the masks must refuse) and otherwise prefers ending a value. */
static void want(const char *target, size_t pos, float *logits) {
    const size_t left = strlen(target) - pos;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n;
        const char *b = tbytes((int32_t)i, &n);
        if (n && n <= left && !memcmp(target + pos, b, n))
            logits[i] = 10.0f + (float)n;
        else if ((int32_t)i == g_close0)
            logits[i] = 0.0f;
        else if (n && memchr(b, '<', n))
            logits[i] = 100.0f;
        else
            logits[i] = -1.0f;
    }
}

/* Where the model is in target: after as many closing tags as out has, plus what out has since. */
static size_t target_pos(const char *target, const char *out, size_t len) {
    const char *tag = "</" D "parameter>\n";
    size_t o = 0, t = 0;
    for (const char *h; (h = strstr(out + o, tag)) && (size_t)(h - out) < len;) {
        o = (size_t)(h - out) + strlen(tag);
        const char *th = strstr(target + t, tag);
        t = th ? (size_t)(th - target) + strlen(tag) : strlen(target);
    }
    t += len - o;
    return t < strlen(target) ? t : strlen(target);
}

/* Runs the constraint to completion against want(target); returns the generated bytes. */
static char *drive(srv_constrain *c, const char *target) {
    float *logits = malloc(g_n * sizeof *logits);
    assert_non_null(logits);
    char *out = calloc(1, 8192);
    size_t len = 0;
    for (int step = 0; step < 2000; step++) {
        want(target, target_pos(target, out, len), logits);
        int32_t id;
        bool done;
        dsv4_error err;
        assert_int_equal(srv_constrain_next(c, logits, g_n, NULL, &id, &done, &err), DSV4_OK);
        if (done) break;
        size_t n;
        const char *b = tbytes(id, &n);
        assert_true(len + n < 8192);
        memcpy(out + len, b, n);
        len += n;
    }
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_DONE);
    free(logits);
    return out;
}

/* ------------------------------------------------------ DSML parse ---- */

typedef struct parsed {
    int calls, blocks, text_bytes;
    char name[64];
    char keys[8][32];
    char vals[8][1024];
    bool is_str[8];
    int n_args;
} parsed;

static void on_ev(void *user, const dsv4_dsml_event *ev) {
    parsed *p = user;
    switch (ev->type) {
    case DSV4_DSML_TEXT: p->text_bytes += (int)ev->len; break;
    case DSV4_DSML_CALL_BEGIN:
        p->calls++;
        snprintf(p->name, sizeof p->name, "%s", ev->name);
        break;
    case DSV4_DSML_ARG_BEGIN:
        assert_true(p->n_args < 8);
        snprintf(p->keys[p->n_args], 32, "%s", ev->name);
        p->vals[p->n_args][0] = 0;
        p->is_str[p->n_args] = ev->is_string;
        break;
    case DSV4_DSML_ARG_DELTA: strncat(p->vals[p->n_args], ev->data, ev->len); break;
    case DSV4_DSML_ARG_END: p->n_args++; break;
    case DSV4_DSML_CALLS_END: p->blocks++; break;
    default: break;
    }
}

static parsed parse(const char *text) {
    parsed p;
    memset(&p, 0, sizeof p);
    dsv4_dsml_parser *ps = dsv4_dsml_parser_new(on_ev, &p);
    dsv4_error err;
    assert_int_equal(dsv4_dsml_parser_feed(ps, text, strlen(text), &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_finish(ps, &err), DSV4_OK);
    dsv4_dsml_parser_free(ps);
    return p;
}

static srv_constrain *make(const char *name, bool think, uint32_t cap) {
    srv_constrain *c = NULL;
    dsv4_error err;
    dsv4_status st = srv_constrain_new(g_tok, TOOLS, 3, name, think, cap, &c, &err);
    if (st != DSV4_OK) fail_msg("srv_constrain_new: %s", err.msg);
    return c;
}

/* ------------------------------------------------------------ tests ---- */

static void test_number_grammar(void **state) {
    (void)state;
    /* hand cases */
    bool c;
    assert_true(srv_constrain_number_prefix("", 0, false, &c) && !c);
    assert_true(srv_constrain_number_prefix("-", 1, true, &c) && !c);
    assert_true(srv_constrain_number_prefix("-0", 2, true, &c) && c);
    assert_false(srv_constrain_number_prefix("01", 2, false, &c));
    assert_false(srv_constrain_number_prefix("1.5", 3, true, &c));
    assert_true(srv_constrain_number_prefix("1.", 2, false, &c) && !c);
    assert_true(srv_constrain_number_prefix("10.25", 5, false, &c) && c);
    assert_false(srv_constrain_number_prefix("1.2.", 4, false, &c));
    assert_false(srv_constrain_number_prefix("--1", 3, false, &c));
    /* every string of up to 5 characters over "019-." against the regex */
    const char alpha[] = "019-.";
    char s[8];
    unsigned total = 0;
    for (int len = 0; len <= 5; len++) {
        unsigned combos = 1;
        for (int i = 0; i < len; i++) combos *= 5;
        for (unsigned k = 0; k < combos; k++) {
            unsigned x = k;
            for (int i = 0; i < len; i++, x /= 5) s[i] = alpha[x % 5];
            s[len] = 0;
            for (int integer = 0; integer < 2; integer++) {
                const bool ok = srv_constrain_number_prefix(s, (size_t)len, integer, &c);
                assert_int_equal(ok, number_prefix_ref(s, integer));
                assert_int_equal(ok && c, full_number(s, integer));
                total++;
            }
        }
    }
    assert_true(total > 7000);
}

/* Accepts the forced tokens up to the first value of the named tool; checks their text. */
static void advance_to_value(srv_constrain *c, const char *expect_text) {
    char buf[1024] = {0};
    size_t len = 0;
    dsv4_error err;
    while (srv_constrain_get_mode(c) == SRV_CM_FORCED) {
        uint8_t *m = calloc(g_n, 1);
        assert_int_equal(srv_constrain_mask(c, m, g_n), 1); /* exactly the forced token */
        int32_t id = -1;
        for (uint32_t i = 0; i < g_n; i++)
            if (m[i]) id = (int32_t)i;
        free(m);
        size_t n;
        const char *b = tbytes(id, &n);
        memcpy(buf + len, b, n);
        len += n;
        assert_int_equal(srv_constrain_accept(c, id, &err), DSV4_OK);
    }
    assert_string_equal(buf, expect_text);
}

static void test_string_mask(void **state) {
    (void)state;
    srv_constrain *c = make("get_time", false, 0);
    advance_to_value(c, OPEN "get_time\">\n" PARAM("tz", "true"));
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_STRING);
    uint8_t *m = calloc(g_n, 1);
    uint32_t k = srv_constrain_mask(c, m, g_n), want_k = 0, lt = 0;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n, tail;
        const uint8_t *b = (const uint8_t *)tbytes((int32_t)i, &n);
        bool expect = (int32_t)i == g_close0 || (!is_special((int32_t)i) && n && !memchr(b, '<', n) &&
                                                 !memchr(b, 0, n) && wf_utf8(b, n, &tail));
        lt += n && memchr(b, '<', n) && !is_special((int32_t)i);
        if (m[i] != expect)
            fail_msg("token %u (%.*s): mask %d, want %d", i, (int)n, (const char *)b, m[i], expect);
        want_k += expect;
    }
    assert_int_equal(k, want_k);
    print_message("string mask: %u of %u tokens, %u other tokens with '<' refused\n", k, g_n,
                  lt - (find_bytes("<") == g_close0));
    assert_true(m[g_close0]);
    /* a pending lead byte: only continuations that stay well-formed, and no closing tag */
    const int32_t e4 = find_bytes("\xe4");
    assert_true(e4 >= 0);
    dsv4_error err;
    assert_int_equal(srv_constrain_accept(c, e4, &err), DSV4_OK);
    k = srv_constrain_mask(c, m, g_n);
    want_k = 0;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n, tail;
        const uint8_t *b = (const uint8_t *)tbytes((int32_t)i, &n);
        uint8_t cat[300];
        cat[0] = 0xe4;
        bool expect = false;
        if (n && n < sizeof cat - 1 && !is_special((int32_t)i) && !memchr(b, '<', n) && !memchr(b, 0, n)) {
            memcpy(cat + 1, b, n);
            expect = wf_utf8(cat, n + 1, &tail);
        }
        if (m[i] != expect) fail_msg("after e4, token %u: mask %d, want %d", i, m[i], expect);
        want_k += expect;
    }
    assert_int_equal(k, want_k);
    assert_false(m[g_close0]);
    assert_true(m[find_bytes("\xb8")]);
    assert_false(m[find_bytes("a")]);
    /* a token that is not allowed is refused */
    assert_int_equal(srv_constrain_accept(c, find_bytes("a"), &err), DSV4_ERR_INVALID);
    free(m);
    srv_constrain_free(c);
}

static void check_number_mask(srv_constrain *c, const char *val, bool integer) {
    uint8_t *m = calloc(g_n, 1);
    uint32_t k = srv_constrain_mask(c, m, g_n), want_k = 0;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n;
        const char *b = tbytes((int32_t)i, &n);
        bool expect;
        if ((int32_t)i == g_close0) {
            expect = full_number(val, integer);
        } else {
            char s[64];
            expect = n && strlen(val) + n <= SRV_CONSTRAIN_NUMBER_MAX && strspn(b, "0123456789-.") >= n;
            if (expect) {
                snprintf(s, sizeof s, "%s%.*s", val, (int)n, b);
                expect = number_prefix_ref(s, integer);
            }
        }
        if (m[i] != expect)
            fail_msg("value '%s' token %u (%.*s): mask %d, want %d", val, i, (int)n, b, m[i], expect);
        want_k += expect;
    }
    assert_int_equal(k, want_k);
    assert_true(k >= 3);
    free(m);
}

/* Accepts forced tokens until something else is pending. */
static void skip_forced(srv_constrain *c) {
    dsv4_error err;
    uint8_t *m = calloc(g_n, 1);
    while (srv_constrain_get_mode(c) == SRV_CM_FORCED) {
        assert_int_equal(srv_constrain_mask(c, m, g_n), 1);
        int32_t id = -1;
        for (uint32_t i = 0; i < g_n; i++)
            if (m[i]) id = (int32_t)i;
        assert_int_equal(srv_constrain_accept(c, id, &err), DSV4_OK);
    }
    free(m);
}

static void test_number_mask(void **state) {
    (void)state;
    srv_constrain *c = make("get_weather", false, 0);
    dsv4_error err;
    /* city (a string), then unit: both required, in schema order */
    advance_to_value(c, OPEN "get_weather\">\n" PARAM("city", "true"));
    assert_int_equal(srv_constrain_accept(c, find_bytes("a"), &err), DSV4_OK);
    assert_int_equal(srv_constrain_accept(c, g_close0, &err), DSV4_OK);
    size_t n0;
    tbytes(g_close0, &n0);
    advance_to_value(c, CLOSE PARAM("unit", "true") + n0); /* the closing tag's rest is forced */
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_CHOOSE);
    /* the choice allows the first tokens of "C</..." and "F</..." only */
    uint8_t *m = calloc(g_n, 1);
    assert_int_equal(srv_constrain_mask(c, m, g_n), 2);
    int32_t f = -1;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n;
        const char *b = tbytes((int32_t)i, &n);
        if (m[i]) assert_true(b[0] == 'C' || b[0] == 'F');
        if (m[i] && b[0] == 'F') f = (int32_t)i;
    }
    free(m);
    assert_int_equal(srv_constrain_accept(c, f, &err), DSV4_OK);
    skip_forced(c); /* the rest of "F</...>\n", the days opener */
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_NUMBER);
    check_number_mask(c, "", true);
    assert_int_equal(srv_constrain_accept(c, find_bytes("-"), &err), DSV4_OK);
    check_number_mask(c, "-", true);
    assert_int_equal(srv_constrain_accept(c, find_bytes("7"), &err), DSV4_OK);
    check_number_mask(c, "-7", true);
    assert_int_equal(srv_constrain_accept(c, find_bytes("."), &err), DSV4_ERR_INVALID); /* an integer */
    assert_int_equal(srv_constrain_accept(c, g_close0, &err), DSV4_OK);
    skip_forced(c);
    /* metric: true / false */
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_CHOOSE);
    m = calloc(g_n, 1);
    assert_int_equal(srv_constrain_mask(c, m, g_n), 2);
    f = -1;
    for (uint32_t i = 0; i < g_n; i++) {
        size_t n;
        const char *b = tbytes((int32_t)i, &n);
        if (m[i]) assert_true(b[0] == 't' || b[0] == 'f');
        if (m[i] && b[0] == 'f') f = (int32_t)i;
    }
    free(m);
    assert_int_equal(srv_constrain_accept(c, f, &err), DSV4_OK);
    skip_forced(c);
    /* ratio: a number, "1." is incomplete */
    assert_int_equal(srv_constrain_get_mode(c), SRV_CM_NUMBER);
    assert_int_equal(srv_constrain_accept(c, find_bytes("1"), &err), DSV4_OK);
    assert_int_equal(srv_constrain_accept(c, find_bytes("."), &err), DSV4_OK);
    check_number_mask(c, "1.", false);
    assert_int_equal(srv_constrain_accept(c, g_close0, &err), DSV4_ERR_INVALID);
    srv_constrain_free(c);
}

static void test_forced_text(void **state) {
    (void)state;
    /* any tool, thinking open: the model wants get_weather (sharing "get_" with the others) */
    const char *target = "</think>" OPEN "get_weather\">\n" PARAM("city", "true") "Paris" CLOSE PARAM(
        "unit", "true") "F" CLOSE PARAM("days", "false") "12" CLOSE PARAM("metric", "false") "false" CLOSE
        PARAM("ratio", "false") "-3.25" CLOSE PARAM("tags", "false") "[]" CLOSE TAIL;
    srv_constrain *c = make(NULL, true, 0);
    char *out = drive(c, target);
    assert_string_equal(out, target);
    parsed p = parse(out + strlen("</think>"));
    assert_int_equal(p.calls, 1);
    assert_int_equal(p.blocks, 1);
    assert_int_equal(p.text_bytes, 0);
    assert_string_equal(p.name, "get_weather");
    const char *keys[] = {"city", "unit", "days", "metric", "ratio", "tags"};
    const char *vals[] = {"Paris", "F", "12", "false", "-3.25", "[]"};
    assert_int_equal(p.n_args, 6);
    for (int i = 0; i < 6; i++) {
        assert_string_equal(p.keys[i], keys[i]);
        assert_string_equal(p.vals[i], vals[i]);
        assert_int_equal(p.is_str[i], i < 2);
    }
    free(out);
    srv_constrain_free(c);

    /* the model wants get_weather_x, a longer name sharing get_weather's tokens: the trie goes on */
    c = make(NULL, false, 0);
    target = OPEN "get_weather_x\">\n" TAIL;
    out = drive(c, target);
    assert_string_equal(out, target);
    free(out);
    srv_constrain_free(c);

    /* named tool: the integer stops at "12" ("." refused, the model then prefers to close); "true"
     * chosen; the wanted '<' can only be the closing tag's first token, ending the value there */
    c = make("get_weather", false, 0);
    const char *wanted = OPEN "get_weather\">\n" PARAM("city", "true") "a<b" CLOSE PARAM(
        "unit", "true") "C" CLOSE PARAM("days", "false") "12.5" CLOSE PARAM("metric", "false") "true" CLOSE
        PARAM("ratio", "false") "0" CLOSE PARAM("tags", "false") "[]" CLOSE TAIL;
    out = drive(c, wanted);
    const char *expect = OPEN "get_weather\">\n" PARAM("city", "true") "a" CLOSE PARAM(
        "unit", "true") "C" CLOSE PARAM("days", "false") "12" CLOSE PARAM("metric", "false") "true" CLOSE
        PARAM("ratio", "false") "0" CLOSE PARAM("tags", "false") "[]" CLOSE TAIL;
    assert_string_equal(out, expect);
    free(out);
    srv_constrain_free(c);

    /* the value cap: 2 tokens of a long string, then the server closes it; a number cut by the cap
     * is completed with "0" */
    assert_true(find_bytes("1.") < 0 && find_bytes(".5") < 0 && find_bytes("1") >= 0); /* so "1.5" is 1|.|5 */
    c = make("get_weather", false, 2);
    wanted = OPEN "get_weather\">\n" PARAM("city", "true") "Los Angeles is big" CLOSE PARAM(
        "unit", "true") "C" CLOSE PARAM("days", "false") "1" CLOSE PARAM("metric", "false") "true" CLOSE
        PARAM("ratio", "false") "1.5" CLOSE PARAM("tags", "false") "[]" CLOSE TAIL;
    out = drive(c, wanted);
    p = parse(out);
    assert_int_equal(p.calls, 1);
    assert_int_equal(p.blocks, 1);
    assert_int_equal(p.n_args, 6);
    assert_true(strlen(p.vals[0]) > 0 && strlen(p.vals[0]) < strlen("Los Angeles is big"));
    assert_true(!strncmp(p.vals[0], "Los Angeles is big", strlen(p.vals[0])));
    assert_string_equal(p.vals[1], "C");
    assert_string_equal(p.vals[2], "1");
    assert_string_equal(p.vals[3], "true");
    assert_string_equal(p.vals[4], "1.0");
    dsv4_error err;
    free(out);
    srv_constrain_free(c);

    /* errors */
    srv_constrain *bad = NULL;
    assert_int_equal(srv_constrain_new(g_tok, TOOLS, 3, "nope", false, 0, &bad, &err), DSV4_ERR_INVALID);
    assert_null(bad);
    assert_int_equal(srv_constrain_new(g_tok, TOOLS, 0, NULL, false, 0, &bad, &err), DSV4_ERR_INVALID);
}

/* Random logits through the real sampler (temperature 1): always one well-formed call whose
 * arguments are JSON of the schema's types. */
static void test_random_models(void **state) {
    (void)state;
    float *logits = malloc(g_n * sizeof *logits);
    uint64_t rng = 42;
    for (int run = 0; run < 40; run++) {
        srv_constrain *c = make(run % 2 ? NULL : "get_weather", run % 3 == 0, 0);
        dsv4_sampler sp;
        dsv4_sampler_init(&sp, DSV4_SAMPLING_DEFAULTS, (uint64_t)run + 1);
        dsv4_strbuf text = {0};
        dsv4_error err;
        int steps = 0;
        for (;; steps++) {
            assert_true(steps < 2000);
            for (uint32_t i = 0; i < g_n; i++) logits[i] = (float)(test_rng_uniform(&rng) * 8.0);
            int32_t id;
            bool done;
            assert_int_equal(srv_constrain_next(c, logits, g_n, &sp, &id, &done, &err), DSV4_OK);
            if (done) break;
            size_t n;
            const char *b = tbytes(id, &n);
            assert_int_equal(dsv4_strbuf_append(&text, b, n, &err), DSV4_OK);
        }
        const char *body = text.data;
        if (run % 3 == 0) {
            assert_true(!strncmp(body, "</think>", 8));
            body += 8;
        }
        parsed p = parse(body);
        assert_int_equal(p.calls, 1);
        assert_int_equal(p.blocks, 1);
        assert_int_equal(p.text_bytes, 0);
        if (strcmp(p.name, "get_weather") != 0) {
            assert_true(!strcmp(p.name, "get_time") || !strcmp(p.name, "get_weather_x"));
            dsv4_strbuf_free(&text);
            srv_constrain_free(c);
            dsv4_sampler_free(&sp);
            continue;
        }
        const char *k[8], *v[8];
        bool s[8];
        for (int i = 0; i < p.n_args; i++) k[i] = p.keys[i], v[i] = p.vals[i], s[i] = p.is_str[i];
        dsv4_strbuf js = {0};
        assert_int_equal(dsv4_dsml_args_to_json(k, v, s, (size_t)p.n_args, &js, &err), DSV4_OK);
        json_error_t je;
        json_t *o = json_loads(js.data, 0, &je);
        if (!o) fail_msg("run %d: arguments %s: %s", run, js.data, je.text);
        assert_true(json_is_string(json_object_get(o, "city")));
        assert_true(json_is_string(json_object_get(o, "unit")));
        const char *u = json_string_value(json_object_get(o, "unit"));
        assert_true(!strcmp(u, "C") || !strcmp(u, "F"));
        assert_true(json_is_integer(json_object_get(o, "days")));
        assert_true(json_is_boolean(json_object_get(o, "metric")));
        assert_true(json_is_number(json_object_get(o, "ratio")));
        assert_true(json_is_array(json_object_get(o, "tags")));
        assert_int_equal(json_object_size(o), 6);
        json_decref(o);
        dsv4_strbuf_free(&js);
        dsv4_strbuf_free(&text);
        dsv4_sampler_free(&sp);
        srv_constrain_free(c);
    }
    free(logits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_number_grammar), cmocka_unit_test(test_string_mask),
        cmocka_unit_test(test_number_mask),    cmocka_unit_test(test_forced_text),
        cmocka_unit_test(test_random_models),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
