/* DSML tool calls: the tools block text, the streaming parser (round trips through the chat
 * renderer, split invariance, malformed input, in_structure) and arguments -> JSON (checked by
 * parsing with jansson, an independent JSON implementation). */
#include "common/testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/dsml.h"
#include "text/special.h"
#include "text/utf8.h"

#define D DSV4_DSML_STR

/* ------------------------------------------------------------ recorder ---- */

typedef struct rec_event {
    dsv4_dsml_event_type type;
    size_t call_index;
    char *name;
    bool is_string;
    char *data; /* TEXT/ARG_DELTA payload, or CALL_END/CALLS_END raw */
    size_t len;
} rec_event;

typedef struct recorder {
    rec_event ev[512];
    size_t n;
    bool pieces_whole_utf8; /* every TEXT/ARG_DELTA piece, as delivered, is whole UTF-8 */
    size_t n_pieces;
} recorder;

static bool whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int k = dsv4_utf8_valid_len((const uint8_t *)s + i, n - i, NULL, NULL);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    assert_non_null(d);
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Records events, merging consecutive TEXT and consecutive ARG_DELTA pieces (the only part of
 * the event stream allowed to depend on how input is split). */
static void on_event(void *user, const dsv4_dsml_event *e) {
    recorder *r = user;
    const bool piece = e->type == DSV4_DSML_TEXT || e->type == DSV4_DSML_ARG_DELTA;
    const char *d = piece ? e->data : e->raw;
    size_t n = piece ? e->len : e->raw_len;
    if (piece) {
        assert_true(n > 0);
        r->n_pieces++;
        if (!whole_utf8(d, n)) r->pieces_whole_utf8 = false;
        if (r->n && r->ev[r->n - 1].type == e->type) {
            rec_event *last = &r->ev[r->n - 1];
            last->data = realloc(last->data, last->len + n + 1);
            assert_non_null(last->data);
            memcpy(last->data + last->len, d, n);
            last->len += n;
            last->data[last->len] = '\0';
            return;
        }
    }
    assert_true(r->n < sizeof(r->ev) / sizeof(r->ev[0]));
    rec_event *x = &r->ev[r->n++];
    x->type = e->type;
    x->call_index = e->call_index;
    x->name = e->name ? dup_bytes(e->name, strlen(e->name)) : NULL;
    x->is_string = e->is_string;
    x->data = d ? dup_bytes(d, n) : NULL;
    x->len = d ? n : 0;
}

static void rec_init(recorder *r) {
    memset(r, 0, sizeof(*r));
    r->pieces_whole_utf8 = true;
}

static void rec_free(recorder *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->ev[i].name);
        free(r->ev[i].data);
    }
    r->n = 0;
}

/* Feeds s in chunks of the given sizes (cycled; 0 = everything at once), then finishes. */
static void parse_chunks(const char *s, size_t n, const size_t *sizes, size_t n_sizes, recorder *r) {
    rec_init(r);
    dsv4_error err;
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(on_event, r);
    assert_non_null(p);
    for (size_t i = 0, k = 0; i < n; k++) {
        size_t c = n_sizes ? sizes[k % n_sizes] : n;
        if (c == 0 || c > n - i) c = n - i;
        assert_int_equal(dsv4_dsml_parser_feed(p, s + i, c, &err), DSV4_OK);
        i += c;
    }
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    dsv4_dsml_parser_free(p);
}

static void parse_all(const char *s, recorder *r) { parse_chunks(s, strlen(s), NULL, 0, r); }

static void assert_same_events(const recorder *a, const recorder *b, const char *what) {
    if (a->n != b->n) fprintf(stderr, "%s: %zu vs %zu events\n", what, a->n, b->n);
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const rec_event *x = &a->ev[i], *y = &b->ev[i];
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->len, y->len);
        if (x->len) assert_memory_equal(x->data, y->data, x->len);
        assert_true((x->name == NULL) == (y->name == NULL));
        if (x->name) assert_string_equal(x->name, y->name);
        if (x->type != DSV4_DSML_TEXT) {
            assert_int_equal(x->call_index, y->call_index);
            if (x->type == DSV4_DSML_ARG_BEGIN) assert_int_equal(x->is_string, y->is_string);
        }
    }
}

/* No byte is lost: TEXT payloads and CALLS_END blocks, in order, reproduce the input. */
static void assert_lossless(const recorder *r, const char *s, size_t n) {
    size_t off = 0;
    for (size_t i = 0; i < r->n; i++) {
        const rec_event *e = &r->ev[i];
        if (e->type != DSV4_DSML_TEXT && e->type != DSV4_DSML_CALLS_END) continue;
        assert_true(off + e->len <= n);
        assert_memory_equal(s + off, e->data, e->len);
        off += e->len;
    }
    assert_int_equal(off, n);
}

/* Whole, every 2-way split, byte by byte, and random chunkings give the same events. */
static void check_split_invariance(const char *s, uint64_t seed) {
    const size_t n = strlen(s);
    recorder whole, other;
    parse_all(s, &whole);
    assert_lossless(&whole, s, n);
    const size_t one = 1;
    parse_chunks(s, n, &one, 1, &other);
    assert_same_events(&whole, &other, "byte by byte");
    assert_true(other.pieces_whole_utf8 || !whole_utf8(s, n));
    rec_free(&other);
    for (size_t cut = 1; cut < n; cut++) {
        const size_t sizes[] = {cut, n};
        parse_chunks(s, n, sizes, 2, &other);
        assert_same_events(&whole, &other, "two pieces");
        rec_free(&other);
    }
    uint64_t rng = seed;
    for (int trial = 0; trial < 20; trial++) {
        size_t sizes[16];
        for (size_t k = 0; k < 16; k++) sizes[k] = 1 + (size_t)(test_rng_next(&rng) % 9);
        parse_chunks(s, n, sizes, 16, &other);
        assert_same_events(&whole, &other, "random chunks");
        rec_free(&other);
    }
    rec_free(&whole);
}

/* ----------------------------------------------------------- fixtures ---- */

static const dsv4_tool_arg ARGS_MIXED[] = {
    {"path", "/tmp/a b.txt", true},
    {"count", "42", false},
    {"ratio", "-1.5e3", false},
    {"opts", "{\"deep\": [1, {\"x\": null}], \"s\": \"q\\\"uote\"}", false},
    {"list", "[\"a\",2,true]", false},
    {"flag", "false", false},
    {"none", "null", false},
    {"on", "true", false},
};
static const dsv4_tool_arg ARGS_ESCAPES[] = {
    {"cmd", "a && b > c < d &lt; e", true},
    {"tag", "before</" D "parameter>after</" D "parameter>", true},
    {"json", "{\"v\":\"x</" D "parameter>y\"}", false},
    {"k\"<&>", "quoted key", true},
    {"ends_lt", "trailing <", true},
    {"almost", "</" D "paramete", true},
};
static const dsv4_tool_arg ARGS_UNICODE[] = {
    {"text", "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80 \xef\xbd\x9c", true},
    {"\xe9\x94\xae", "[\"\xe2\x82\xac\"]", false},
    {"multi", "line1\nline2\n\n<tag attr=\"v\">\n", true},
};
static const dsv4_tool_arg ARGS_EMPTY[] = {{"empty", "", true}, {"", "x", true}};

static const dsv4_tool_call CALLS[] = {
    {.name = "read_file", .args = ARGS_MIXED, .n_args = 8},
    {.name = "a\"b<c>&d", .args = ARGS_ESCAPES, .n_args = 6},
    {.name = "uni", .args = ARGS_UNICODE, .n_args = 3},
    {.name = "no_args", .args = NULL, .n_args = 0},
    {.name = "empties", .args = ARGS_EMPTY, .n_args = 2},
};
#define N_CALLS (sizeof(CALLS) / sizeof(CALLS[0]))

static char *render_calls(const dsv4_tool_call *calls, size_t n) {
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_chat_render_tool_calls(calls, n, &sb, &err), DSV4_OK);
    return sb.data;
}

static char *concat3(const char *a, const char *b, const char *c) {
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *s = malloc(na + nb + nc + 1);
    assert_non_null(s);
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    memcpy(s + na + nb, c, nc + 1);
    return s;
}

/* Checks the events of one block against the calls it was rendered from. Returns the index
 * after CALLS_END. */
static size_t expect_calls(const recorder *r, size_t i, const dsv4_tool_call *calls, size_t n,
                           size_t first_index, const char *block) {
    for (size_t c = 0; c < n; c++) {
        assert_true(i < r->n);
        assert_int_equal(r->ev[i].type, DSV4_DSML_CALL_BEGIN);
        assert_string_equal(r->ev[i].name, calls[c].name);
        assert_int_equal(r->ev[i].call_index, first_index + c);
        i++;
        for (size_t a = 0; a < calls[c].n_args; a++) {
            const dsv4_tool_arg *arg = &calls[c].args[a];
            assert_int_equal(r->ev[i].type, DSV4_DSML_ARG_BEGIN);
            assert_string_equal(r->ev[i].name, arg->key);
            assert_int_equal(r->ev[i].is_string, arg->is_string);
            i++;
            if (arg->value[0]) {
                assert_int_equal(r->ev[i].type, DSV4_DSML_ARG_DELTA);
                assert_string_equal(r->ev[i].data, arg->value);
                i++;
            }
            assert_int_equal(r->ev[i].type, DSV4_DSML_ARG_END);
            i++;
        }
        assert_int_equal(r->ev[i].type, DSV4_DSML_CALL_END);
        assert_string_equal(r->ev[i].name, calls[c].name);
        /* the raw invoke is the exact rendering of this call alone, without the block frame */
        char *alone = render_calls(&calls[c], 1);
        const char *inv = alone + strlen("\n\n<" D "tool_calls>\n");
        const char *end = alone + strlen(alone) - strlen("\n</" D "tool_calls>");
        assert_int_equal(r->ev[i].len, (size_t)(end - inv));
        assert_memory_equal(r->ev[i].data, inv, r->ev[i].len);
        free(alone);
        i++;
    }
    assert_int_equal(r->ev[i].type, DSV4_DSML_CALLS_END);
    assert_string_equal(r->ev[i].data, block);
    return i + 1;
}

/* -------------------------------------------------------------- tests ---- */

/* The block text exactly as in ds4_server.c append_tools_prompt_text, typed here with literal
 * U+FF5C characters (the implementation spells them with a macro). */
static const char DS4_TOOLS_PREAMBLE[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user question. You can invoke tools by "
    "writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
    "name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke "
    "name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be "
    "specified as raw text and set `string=\"true\"`. Preserve characters such as `>`, `&`, and `&&` "
    "exactly; "
    "never replace normal string characters with XML or HTML entity escapes. Only if a string value itself "
    "contains the exact closing parameter tag `</｜DSML｜parameter>`, write that tag as "
    "`&lt;/｜DSML｜parameter>` inside the value. For all other types (numbers, booleans, arrays, objects), "
    "pass the value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by "
    "<think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or "
    "final response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n### "
    "Available Tool Schemas\n\n";
static const char DS4_TOOLS_EPILOGUE[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter "
    "schemas to invoke tool calls. Use the exact parameter names from the "
    "schemas.";

static void test_tools_block(void **state) {
    (void)state;
    const char *schemas[] = {"{\"name\":\"a\",\"parameters\":{}}", "", "{\"name\":\"b\"}"};
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_dsml_render_tools_block(schemas, 3, &sb, &err), DSV4_OK);
    char *want = concat3(DS4_TOOLS_PREAMBLE, "{\"name\":\"a\",\"parameters\":{}}\n{\"name\":\"b\"}",
                         DS4_TOOLS_EPILOGUE);
    assert_string_equal(sb.data, want);
    free(want);
    /* appends to what is already there */
    size_t before = sb.len;
    assert_int_equal(dsv4_dsml_render_tools_block(schemas, 1, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len - before,
                     strlen(DS4_TOOLS_PREAMBLE) + strlen(schemas[0]) + strlen(DS4_TOOLS_EPILOGUE));
    dsv4_strbuf_free(&sb);
    /* no schema (or only empty ones): nothing, as in ds4 */
    assert_int_equal(dsv4_dsml_render_tools_block(schemas, 0, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len, 0);
    assert_int_equal(dsv4_dsml_render_tools_block(schemas + 1, 1, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len, 0);
    assert_int_equal(dsv4_dsml_render_tools_block(NULL, 2, &sb, &err), DSV4_ERR_INVALID);
    dsv4_strbuf_free(&sb);
}

static void test_round_trip_each_call(void **state) {
    (void)state;
    for (size_t c = 0; c < N_CALLS; c++) {
        char *block = render_calls(&CALLS[c], 1);
        char *s = concat3("Let me look.", block, "\nDone.");
        recorder r;
        parse_all(s, &r);
        assert_true(r.n >= 3);
        assert_int_equal(r.ev[0].type, DSV4_DSML_TEXT);
        assert_string_equal(r.ev[0].data, "Let me look.");
        size_t i = expect_calls(&r, 1, &CALLS[c], 1, 0, block);
        assert_int_equal(r.ev[i].type, DSV4_DSML_TEXT);
        assert_string_equal(r.ev[i].data, "\nDone.");
        assert_int_equal(i + 1, r.n);
        rec_free(&r);
        check_split_invariance(s, 100 + c);
        free(s);
        free(block);
    }
}

static void test_round_trip_several_calls_and_blocks(void **state) {
    (void)state;
    char *b1 = render_calls(CALLS, N_CALLS);
    char *b2 = render_calls(&CALLS[3], 2);
    char *first = concat3("", b1, "between");
    char *s = concat3(first, b2, "");
    recorder r;
    dsv4_error err;
    rec_init(&r);
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(on_event, &r);
    assert_int_equal(dsv4_dsml_parser_feed(p, s, strlen(s), &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_calls(p), N_CALLS + 2);
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    dsv4_dsml_parser_free(p);
    /* a block at the very start: its leading "\n\n" belongs to it, no empty TEXT */
    size_t i = expect_calls(&r, 0, CALLS, N_CALLS, 0, b1);
    assert_int_equal(r.ev[i].type, DSV4_DSML_TEXT);
    assert_string_equal(r.ev[i].data, "between");
    i = expect_calls(&r, i + 1, &CALLS[3], 2, N_CALLS, b2);
    assert_int_equal(i, r.n);
    rec_free(&r);
    check_split_invariance(s, 7);
    free(first);
    free(s);
    free(b1);
    free(b2);
}

/* Leading newlines: up to two belong to the block; the block may also start without them. */
static void test_block_leading_newlines(void **state) {
    (void)state;
    const dsv4_tool_arg arg = {"x", "1", false};
    const dsv4_tool_call call = {.name = "f", .args = &arg, .n_args = 1};
    char *block = render_calls(&call, 1); /* starts with "\n\n" */
    const char *variants[][2] = {{"", "\n\n\n"}, {"a", "\n"}, {"a", ""}, {"a\n\n", "\n\n"}};
    const char *want_text[] = {"\n", "a", "a", "a\n\n"};
    for (size_t v = 0; v < 4; v++) {
        char *s = concat3(variants[v][0], variants[v][1], block + 2);
        recorder r;
        parse_all(s, &r);
        size_t i = 0;
        if (want_text[v][0]) {
            assert_int_equal(r.ev[0].type, DSV4_DSML_TEXT);
            assert_string_equal(r.ev[0].data, want_text[v]);
            i = 1;
        }
        assert_int_equal(r.ev[i].type, DSV4_DSML_CALL_BEGIN);
        assert_int_equal(r.ev[r.n - 1].type, DSV4_DSML_CALLS_END);
        assert_string_equal(r.ev[r.n - 1].data, s + strlen(want_text[v]));
        assert_lossless(&r, s, strlen(s));
        rec_free(&r);
        check_split_invariance(s, v);
        free(s);
    }
    free(block);
}

/* Whitespace between tags is tolerated (and kept in the raw bytes). */
static void test_whitespace_between_tags(void **state) {
    (void)state;
    const char *s =
        "<" D "tool_calls>  \r\n<" D "invoke name=\"f\">\n\n\t<" D
        "parameter name=\"a\" string=\"true\"> v </" D "parameter>   </" D "invoke>\n\n</" D "tool_calls>";
    recorder r;
    parse_all(s, &r);
    assert_int_equal(r.n, 6);
    assert_int_equal(r.ev[2].type, DSV4_DSML_ARG_DELTA);
    assert_string_equal(r.ev[2].data, " v ");
    assert_int_equal(r.ev[5].type, DSV4_DSML_CALLS_END);
    assert_string_equal(r.ev[5].data, s);
    rec_free(&r);
    check_split_invariance(s, 3);
}

static bool has_type(const recorder *r, dsv4_dsml_event_type t) {
    for (size_t i = 0; i < r->n; i++)
        if (r->ev[i].type == t) return true;
    return false;
}

/* All of s comes back as text: no CALLS_END, and the TEXT events concatenate to s. */
static void expect_all_text(const char *s) {
    recorder r;
    parse_all(s, &r);
    if (has_type(&r, DSV4_DSML_CALLS_END)) fprintf(stderr, "unexpected block in: %s\n", s);
    assert_false(has_type(&r, DSV4_DSML_CALLS_END));
    assert_lossless(&r, s, strlen(s));
    rec_free(&r);
    check_split_invariance(s, strlen(s));
}

static void test_malformed_is_text(void **state) {
    (void)state;
    const char *cases[] = {
        /* marker prefixes at the end of the stream */
        "hello\n",
        "hello\n\n",
        "hello\n\n<",
        "hello\n\n<\xef\xbd",
        "hello <" D "tool_c",
        "<" D "tool_calls>",
        /* missing closing tags */
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\" string=\"true\">v",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\" string=\"true\">v</" D
        "parameter>\n",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n</" D "invoke>\n",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n</" D "invoke>\n</" D "tool_call",
        /* wrong attributes */
        "<" D "tool_calls>\n<" D "invoke nam=\"f\">\n</" D "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name='f'>\n</" D "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"f\" x=\"1\">\n</" D "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\" string=\"yes\">v</" D
        "parameter>\n</" D "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\">v</" D "parameter>\n</" D
        "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"\">\n</" D "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"a\nb\">\n</" D "invoke>\n</" D "tool_calls>",
        /* empty block, stray text inside, wrong close */
        "<" D "tool_calls>\n</" D "tool_calls>",
        "<" D "tool_calls>\nsome words\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n</" D "parameter>\n</" D "tool_calls>",
        /* nested markers in structure */
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "invoke name=\"g\">\n</" D "invoke>\n</" D
        "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"f<" D "tool_calls>\">\n</" D "invoke>\n</" D "tool_calls>",
        /* invalid UTF-8 around a marker */
        "\xff\xfe<" D "tool\xc3",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) expect_all_text(cases[i]);

    /* an over-long name cannot swallow the stream */
    char big[2200];
    int k = snprintf(big, sizeof(big), "<" D "tool_calls>\n<" D "invoke name=\"");
    memset(big + k, 'n', 2000);
    strcpy(big + k + 2000, "\">\n</" D "invoke>\n</" D "tool_calls>");
    expect_all_text(big);
}

/* A block that fails part-way: earlier calls are reported, then void; a valid block that starts
 * where the broken one failed is still found. */
static void test_malformed_then_valid(void **state) {
    (void)state;
    const dsv4_tool_arg arg = {"x", "1", false};
    const dsv4_tool_call call = {.name = "f", .args = &arg, .n_args = 1};
    char *good = render_calls(&call, 1);
    /* a complete invoke, then a new tool_calls marker where an invoke or close was expected */
    char *broken = concat3("<" D "tool_calls>\n<" D "invoke name=\"g\">\n</" D "invoke>", good, "!");
    recorder r;
    dsv4_error err;
    rec_init(&r);
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(on_event, &r);
    assert_int_equal(dsv4_dsml_parser_feed(p, broken, strlen(broken), &err), DSV4_OK);
    /* the void call of the broken block does not count */
    assert_int_equal(dsv4_dsml_parser_calls(p), 1);
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    dsv4_dsml_parser_free(p);
    assert_int_equal(r.ev[0].type, DSV4_DSML_CALL_BEGIN);
    assert_string_equal(r.ev[0].name, "g");
    assert_int_equal(r.ev[1].type, DSV4_DSML_CALL_END);
    assert_int_equal(r.ev[2].type, DSV4_DSML_TEXT);
    assert_string_equal(r.ev[2].data, "<" D "tool_calls>\n<" D "invoke name=\"g\">\n</" D "invoke>");
    /* the valid block keeps call index 0: the void call's index is reused */
    size_t i = expect_calls(&r, 3, &call, 1, 0, good);
    assert_int_equal(r.ev[i].type, DSV4_DSML_TEXT);
    assert_string_equal(r.ev[i].data, "!");
    assert_lossless(&r, broken, strlen(broken));
    rec_free(&r);
    check_split_invariance(broken, 11);
    free(broken);

    /* every truncation of a valid block is text after finish */
    char *s = concat3("pre", good, "");
    for (size_t cut = 0; cut < strlen(s); cut++) {
        char *t = dup_bytes(s, cut);
        recorder rt;
        parse_all(t, &rt);
        assert_false(has_type(&rt, DSV4_DSML_CALLS_END));
        assert_lossless(&rt, t, cut);
        rec_free(&rt);
        free(t);
    }
    free(s);
    free(good);
}

/* Payloads are data: markers other than the parameter close are kept verbatim. */
static void test_markers_inside_payload(void **state) {
    (void)state;
    const dsv4_tool_arg args[] = {
        {"doc", "<" D "tool_calls>\n<" D "invoke name=\"x\">\n</" D "invoke>\n</" D "tool_calls>", true},
        {"s", "&lt; and \\u003c and &lt;/" D "param", true},
        {"j", "[\"&lt;/" D "parameter>\"]", false}, /* an entity in JSON is not an escape */
    };
    const dsv4_tool_call call = {.name = "w", .args = args, .n_args = 3};
    char *block = render_calls(&call, 1);
    recorder r;
    parse_all(block, &r);
    expect_calls(&r, 0, &call, 1, 0, block);
    rec_free(&r);
    check_split_invariance(block, 5);
    free(block);
}

static void test_in_structure(void **state) {
    (void)state;
    const dsv4_tool_arg args[] = {{"a", "xy", true}, {"b", "[1]", false}};
    const dsv4_tool_call call = {.name = "f", .args = args, .n_args = 2};
    char *block = render_calls(&call, 1);
    char *s = concat3("hi", block, "bye");
    const size_t n = strlen(s);
    /* expected, from positions in the text: structure from the byte that completes the opening
     * marker to the byte before the one completing the close marker, minus each payload (from
     * the '>' of the parameter tag to the byte before the last of its close tag) */
    const char *open = strstr(s, "<" D "tool_calls>");
    const size_t open_last = (size_t)(open - s) + strlen("<" D "tool_calls>") - 1;
    const size_t close_last =
        (size_t)(strstr(s, "</" D "tool_calls>") - s) + strlen("</" D "tool_calls>") - 1;
    size_t pay_a[2], pay_b[2];
    const char *q = s;
    for (int k = 0; k < 2; k++) {
        q = strstr(q, "\" string=\"");
        pay_a[k] = (size_t)(strchr(q + 1, '>') - s);
        q = strstr(q, "</" D "parameter>");
        pay_b[k] = (size_t)(q - s) + strlen("</" D "parameter>") - 1;
    }
    recorder r;
    rec_init(&r);
    dsv4_error err;
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(on_event, &r);
    assert_false(dsv4_dsml_parser_in_structure(p));
    size_t n_true = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(dsv4_dsml_parser_feed(p, s + i, 1, &err), DSV4_OK);
        bool want = i >= open_last && i < close_last;
        for (int k = 0; k < 2; k++)
            if (i >= pay_a[k] && i < pay_b[k]) want = false;
        if (dsv4_dsml_parser_in_structure(p) != want) fprintf(stderr, "at byte %zu\n", i);
        assert_int_equal(dsv4_dsml_parser_in_structure(p), want);
        n_true += want;
    }
    assert_true(n_true > 50);
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    assert_false(dsv4_dsml_parser_in_structure(p));
    dsv4_dsml_parser_free(p);
    rec_free(&r);
    free(s);
    free(block);
}

static void test_arg_delta_streams(void **state) {
    (void)state;
    /* the payload arrives in pieces while generation goes on, held back only near a '<' or '&' */
    const char *head =
        "<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\" string=\"true\">";
    recorder r;
    rec_init(&r);
    dsv4_error err;
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(on_event, &r);
    assert_int_equal(dsv4_dsml_parser_feed(p, head, strlen(head), &err), DSV4_OK);
    assert_int_equal(r.ev[r.n - 1].type, DSV4_DSML_ARG_BEGIN); /* CALL_BEGIN came before it */
    assert_int_equal(r.ev[r.n - 2].type, DSV4_DSML_CALL_BEGIN);
    assert_int_equal(dsv4_dsml_parser_feed(p, "abc <x", 6, &err), DSV4_OK);
    assert_int_equal(r.ev[r.n - 1].type, DSV4_DSML_ARG_DELTA);
    assert_string_equal(r.ev[r.n - 1].data, "abc <x");
    assert_int_equal(dsv4_dsml_parser_feed(p, " </" D "par", strlen(" </" D "par"), &err), DSV4_OK);
    assert_string_equal(r.ev[r.n - 1].data, "abc <x "); /* the tag prefix is held */
    assert_int_equal(dsv4_dsml_parser_feed(p, "\xe4\xb8", 2, &err), DSV4_OK);
    assert_string_equal(r.ev[r.n - 1].data, "abc <x </" D "par"); /* half a character is held */
    assert_int_equal(dsv4_dsml_parser_feed(p, "\x96", 1, &err), DSV4_OK);
    assert_string_equal(r.ev[r.n - 1].data, "abc <x </" D "par\xe4\xb8\x96");
    dsv4_dsml_parser_free(p);
    rec_free(&r);

    /* text before a block is emitted as it comes, except a possible marker prefix */
    rec_init(&r);
    p = dsv4_dsml_parser_new(on_event, &r);
    assert_int_equal(dsv4_dsml_parser_feed(p, "Hello\n\n<", 8, &err), DSV4_OK);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.ev[0].data, "Hello");
    assert_int_equal(dsv4_dsml_parser_feed(p, "b>", 2, &err), DSV4_OK);
    assert_string_equal(r.ev[0].data, "Hello\n\n<b>");
    dsv4_dsml_parser_free(p);
    rec_free(&r);
}

/* Random streams built from DSML fragments and text: split invariance and losslessness. */
static void test_random_fragment_streams(void **state) {
    (void)state;
    static const char *const frags[] = {
        "\n",
        "\n\n",
        "<",
        "&lt;",
        "x",
        "\xc3\xa9",
        "\xe4\xb8\x96",
        "<" D "tool_calls>",
        "</" D "tool_calls>",
        "<" D "invoke name=\"f\">",
        "</" D "invoke>",
        "<" D "parameter name=\"k\" string=\"true\">",
        "<" D "parameter name=\"j\" string=\"false\">",
        "</" D "parameter>",
        "&lt;/" D "parameter>",
        "\\u003c/" D "parameter>",
        "<" D,
        "</" D,
        " ",
        "\"",
    };
    const size_t nf = sizeof(frags) / sizeof(frags[0]);
    uint64_t rng = 12345;
    size_t blocks = 0;
    for (int t = 0; t < 80; t++) {
        char s[1024];
        size_t len = 0;
        size_t parts = 1 + test_rng_next(&rng) % 16;
        for (size_t k = 0; k < parts; k++) {
            const char *f = frags[test_rng_next(&rng) % nf];
            /* bias towards well-formed blocks so many streams contain calls */
            uint64_t pick = test_rng_next(&rng) % 8;
            if (pick == 0)
                f = "\n\n<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D
                    "parameter name=\"k\" string=\"true\">";
            else if (pick == 1)
                f = "</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>";
            size_t fl = strlen(f);
            if (len + fl + 1 >= sizeof(s)) break;
            memcpy(s + len, f, fl);
            len += fl;
        }
        s[len] = '\0';
        recorder r;
        parse_all(s, &r);
        blocks += has_type(&r, DSV4_DSML_CALLS_END);
        rec_free(&r);
        check_split_invariance(s, rng);
    }
    fprintf(stderr, "random streams: %zu with a block\n", blocks);
    assert_true(blocks > 0);
}

/* ------------------------------------------------------- args -> JSON ---- */

static json_t *args_json(const char *const *k, const char *const *v, const bool *is_str, size_t n) {
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_dsml_args_to_json(k, v, is_str, n, &sb, &err), DSV4_OK);
    json_error_t jerr;
    json_t *j = json_loads(sb.data ? sb.data : "", 0, &jerr);
    if (!j) fprintf(stderr, "jansson rejected %s: %s\n", sb.data, jerr.text);
    assert_non_null(j);
    assert_true(json_is_object(j));
    dsv4_strbuf_free(&sb);
    return j;
}

static void test_args_to_json(void **state) {
    (void)state;
    char deep[1300];
    size_t d = 0;
    for (int i = 0; i < 300; i++) deep[d++] = '[';
    for (int i = 0; i < 300; i++) deep[d++] = ']';
    deep[d] = '\0';
    const char *k[] = {"s",     "n",   "f",      "o",    "a",    "t",     "z",      "bad",  "ws",
                       "trail", "ctl", "badutf", "deep", "q\"k", "empty", "numstr", "lead0"};
    const char *v[] = {"he said \"hi\"\\",
                       "-12",
                       "3.5e-2",
                       " {\"a\":[1,2,{\"b\":null}]} ",
                       "[true,false]",
                       "true",
                       "null",
                       "abc",
                       "\t7\n",
                       "[1] x",
                       "a\x01\n\tb",
                       "x\xff\xc3(y",
                       deep,
                       "v",
                       "",
                       "12",
                       "012"};
    const bool str[] = {true,  false, false, false, false, false, false, false, false,
                        false, true,  true,  false, true,  false, true,  false};
    const size_t n = sizeof(k) / sizeof(k[0]);
    json_t *j = args_json(k, v, str, n);
    assert_string_equal(json_string_value(json_object_get(j, "s")), "he said \"hi\"\\");
    assert_int_equal(json_integer_value(json_object_get(j, "n")), -12);
    assert_true(json_real_value(json_object_get(j, "f")) == 3.5e-2);
    json_t *o = json_object_get(j, "o");
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(o, "a"), 2), "b")));
    assert_true(json_is_false(json_array_get(json_object_get(j, "a"), 1)));
    assert_true(json_is_true(json_object_get(j, "t")));
    assert_true(json_is_null(json_object_get(j, "z")));
    /* invalid literals fall back to strings */
    assert_string_equal(json_string_value(json_object_get(j, "bad")), "abc");
    assert_int_equal(json_integer_value(json_object_get(j, "ws")), 7);
    assert_string_equal(json_string_value(json_object_get(j, "trail")), "[1] x");
    assert_string_equal(json_string_value(json_object_get(j, "ctl")), "a\x01\n\tb");
    /* ill-formed UTF-8 becomes U+FFFD (one per maximal subpart) */
    assert_string_equal(json_string_value(json_object_get(j, "badutf")), "x\xef\xbf\xbd\xef\xbf\xbd(y");
    assert_string_equal(json_string_value(json_object_get(j, "deep")), deep);
    assert_string_equal(json_string_value(json_object_get(j, "q\"k")), "v");
    assert_true(json_is_string(json_object_get(j, "empty")));
    assert_string_equal(json_string_value(json_object_get(j, "empty")), "");
    assert_string_equal(json_string_value(json_object_get(j, "numstr")), "12");
    assert_string_equal(json_string_value(json_object_get(j, "lead0")), "012");
    assert_int_equal(json_object_size(j), n);
    json_decref(j);

    /* zero args and the exact compact form */
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_dsml_args_to_json(NULL, NULL, NULL, 0, &sb, &err), DSV4_OK);
    assert_string_equal(sb.data, "{}");
    dsv4_strbuf_free(&sb);
    const char *k2[] = {"a", "b"}, *v2[] = {"x", " 1 "};
    const bool s2[] = {true, false};
    assert_int_equal(dsv4_dsml_args_to_json(k2, v2, s2, 2, &sb, &err), DSV4_OK);
    assert_string_equal(sb.data, "{\"a\":\"x\",\"b\":1}");
    dsv4_strbuf_free(&sb);
    assert_int_equal(dsv4_dsml_args_to_json(NULL, v2, s2, 2, &sb, &err), DSV4_ERR_INVALID);
    dsv4_strbuf_free(&sb);
}

/* Collects one call's arguments from the events, for the parse -> JSON round trip. */
typedef struct arg_collector {
    char *keys[16], *vals[16];
    bool is_str[16];
    size_t n;
} arg_collector;

static void collect(const recorder *r, size_t call, arg_collector *c) {
    memset(c, 0, sizeof(*c));
    bool in = false;
    for (size_t i = 0; i < r->n; i++) {
        const rec_event *e = &r->ev[i];
        if (e->type == DSV4_DSML_CALL_BEGIN) in = e->call_index == call;
        if (!in) continue;
        if (e->type == DSV4_DSML_ARG_BEGIN) {
            c->keys[c->n] = e->name;
            c->vals[c->n] = "";
            c->is_str[c->n] = e->is_string;
        } else if (e->type == DSV4_DSML_ARG_DELTA) {
            c->vals[c->n] = e->data;
        } else if (e->type == DSV4_DSML_ARG_END) {
            c->n++;
        }
    }
}

static void test_parse_to_json_round_trip(void **state) {
    (void)state;
    char *block = render_calls(CALLS, 3);
    recorder r;
    parse_all(block, &r);
    for (size_t c = 0; c < 3; c++) {
        arg_collector ac;
        collect(&r, c, &ac);
        assert_int_equal(ac.n, CALLS[c].n_args);
        json_t *j = args_json((const char *const *)ac.keys, (const char *const *)ac.vals, ac.is_str, ac.n);
        for (size_t a = 0; a < ac.n; a++) {
            const dsv4_tool_arg *arg = &CALLS[c].args[a];
            json_t *want =
                arg->is_string ? json_string(arg->value) : json_loads(arg->value, JSON_DECODE_ANY, NULL);
            assert_non_null(want);
            assert_true(json_equal(json_object_get(j, arg->key), want));
            json_decref(want);
        }
        json_decref(j);
    }
    rec_free(&r);
    free(block);
}

static void test_null_arguments(void **state) {
    (void)state;
    dsv4_error err;
    assert_int_equal(dsv4_dsml_parser_feed(NULL, "x", 1, &err), DSV4_ERR_INVALID);
    assert_int_equal(dsv4_dsml_parser_finish(NULL, &err), DSV4_ERR_INVALID);
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(NULL, NULL); /* no callback: events dropped */
    assert_int_equal(dsv4_dsml_parser_feed(p, NULL, 1, &err), DSV4_ERR_INVALID);
    assert_int_equal(dsv4_dsml_parser_feed(p, NULL, 0, &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_feed(p, "a\n\n<", 4, &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_calls(p), 0);
    dsv4_dsml_parser_free(p);
    dsv4_dsml_parser_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_block),
        cmocka_unit_test(test_round_trip_each_call),
        cmocka_unit_test(test_round_trip_several_calls_and_blocks),
        cmocka_unit_test(test_block_leading_newlines),
        cmocka_unit_test(test_whitespace_between_tags),
        cmocka_unit_test(test_malformed_is_text),
        cmocka_unit_test(test_malformed_then_valid),
        cmocka_unit_test(test_markers_inside_payload),
        cmocka_unit_test(test_in_structure),
        cmocka_unit_test(test_arg_delta_streams),
        cmocka_unit_test(test_random_fragment_streams),
        cmocka_unit_test(test_args_to_json),
        cmocka_unit_test(test_parse_to_json_round_trip),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
