/* Chat template (spec §5.4): one-shot encoding, CLI multi-turn, server text rendering, DSML. */
#include "common/testutil.h"

#include <string.h>

#include "text/chat.h"
#include "text_fixture.h"

#define ID_BYTE(b) (7 + (int32_t)(b))
static const char *const EXTRA[] = {"he", "ll", "hell", "hello", "aa"};
enum { ID_HE = 263, ID_LL, ID_HELL, ID_HELLO, ID_AA };
static const char *const MERGES[] = {"h e", "l l", "he ll", "hell o", "a a"};

static dsv4_tokenizer *tk(void) {
    dsv4_tokenizer *t = fx_build(EXTRA, 5, MERGES, 5);
    assert_non_null(t);
    return t;
}

static void assert_tokens(const dsv4_tokens *got, const int32_t *want, size_t n) {
    if (got->n != n) {
        fprintf(stderr, "got %zu tokens:", got->n);
        for (size_t i = 0; i < got->n; i++) fprintf(stderr, " %d", got->ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(got->n, n);
    for (size_t i = 0; i < n; i++) assert_int_equal(got->ids[i], want[i]);
}
#define ASSERT_TOKENS(got, ...)                                                                              \
    do {                                                                                                     \
        const int32_t w_[] = {__VA_ARGS__};                                                                  \
        assert_tokens(got, w_, sizeof(w_) / sizeof(w_[0]));                                                  \
    } while (0)

/* the rendered-text tokenization of a hand-written string, as an independent expectation */
static void assert_same_as_rendered(const dsv4_tokenizer *t, const dsv4_tokens *got, const char *rendered) {
    dsv4_tokens want = {0};
    dsv4_error err;
    assert_int_equal(dsv4_tokenize_rendered(t, rendered, strlen(rendered), &want, &err), DSV4_OK);
    assert_tokens(got, want.ids, want.n);
    dsv4_tokens_free(&want);
}

static const char MAX_PREFIX_FROM_SPEC[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

static void test_think_modes(void **state) {
    (void)state;
    assert_string_equal(DSV4_THINK_MAX_PREFIX, MAX_PREFIX_FROM_SPEC);
    assert_int_equal(dsv4_think_mode_for_context(DSV4_THINK_MAX, 393215), DSV4_THINK_HIGH);
    assert_int_equal(dsv4_think_mode_for_context(DSV4_THINK_MAX, 393216), DSV4_THINK_MAX);
    assert_int_equal(dsv4_think_mode_for_context(DSV4_THINK_MAX, 0), DSV4_THINK_HIGH);
    assert_int_equal(dsv4_think_mode_for_context(DSV4_THINK_HIGH, 10), DSV4_THINK_HIGH);
    assert_int_equal(dsv4_think_mode_for_context(DSV4_THINK_NONE, 1000000), DSV4_THINK_NONE);
    assert_false(dsv4_think_enabled(DSV4_THINK_NONE));
    assert_true(dsv4_think_enabled(DSV4_THINK_HIGH));
    assert_true(dsv4_think_enabled(DSV4_THINK_MAX));
    dsv4_think_mode m = DSV4_THINK_NONE;
    assert_true(dsv4_think_mode_from_effort("max", &m) && m == DSV4_THINK_MAX);
    const char *high[] = {"xhigh", "high", "medium", "low", "minimal"};
    for (int i = 0; i < 5; i++) {
        m = DSV4_THINK_NONE;
        assert_true(dsv4_think_mode_from_effort(high[i], &m) && m == DSV4_THINK_HIGH);
    }
    assert_true(dsv4_think_mode_from_effort("none", &m) && m == DSV4_THINK_NONE);
    assert_false(dsv4_think_mode_from_effort("extreme", &m));
    dsv4_chat_role r;
    assert_true(dsv4_chat_role_from_name("function", &r) && r == DSV4_ROLE_TOOL);
    assert_false(dsv4_chat_role_from_name("narrator", &r));
}

static void test_encode_prompt(void **state) {
    (void)state;
    dsv4_tokenizer *t = tk();
    dsv4_tokens out = {0};
    dsv4_error err;
    /* the test-vector shape: BOS <｜User｜> text <｜Assistant｜> </think> */
    assert_int_equal(dsv4_chat_encode_prompt(t, "", "hello", DSV4_THINK_NONE, &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, DSV4_SPECIAL_BOS, DSV4_SPECIAL_USER, ID_HELLO, DSV4_SPECIAL_ASSISTANT,
                  DSV4_SPECIAL_THINK_END);
    dsv4_tokens_free(&out);
    /* system text is BPE'd right after BOS; thinking ends in <think> */
    assert_int_equal(dsv4_chat_encode_prompt(t, "aa", "hello aa", DSV4_THINK_HIGH, &out, &err), DSV4_OK);
    /* " aa" is one piece: Ġ a a, and only "a a" merges */
    ASSERT_TOKENS(&out, DSV4_SPECIAL_BOS, ID_AA, DSV4_SPECIAL_USER, ID_HELLO, ID_BYTE(' '), ID_AA,
                  DSV4_SPECIAL_ASSISTANT, DSV4_SPECIAL_THINK_START);
    dsv4_tokens_free(&out);
    /* MAX: prefix before the system text */
    assert_int_equal(dsv4_chat_encode_prompt(t, NULL, "hello", DSV4_THINK_MAX, &out, &err), DSV4_OK);
    assert_same_as_rendered(t, &out,
                            DSV4_BOS_STR
                            "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
                            "You MUST be very thorough in your thinking and comprehensively decompose the "
                            "problem to resolve the root cause, rigorously stress-testing your logic "
                            "against all potential paths, edge cases, and adversarial scenarios.\n"
                            "Explicitly write out your entire deliberation process, documenting every "
                            "intermediate step, considered alternative, and rejected hypothesis to "
                            "ensure absolutely no assumption is left unchecked.\n\n" DSV4_USER_STR
                            "hello" DSV4_ASSISTANT_STR DSV4_THINK_START_STR);
    dsv4_tokens_free(&out);
    dsv4_tokenizer_free(t);
}

static void test_encode_prompt_max_with_system(void **state) {
    (void)state;
    dsv4_tokenizer *t = tk();
    dsv4_tokens out = {0};
    dsv4_error err;
    assert_int_equal(
        dsv4_chat_encode_prompt(t, "You are a helpful assistant", "hi", DSV4_THINK_MAX, &out, &err), DSV4_OK);
    dsv4_strbuf want = {0};
    dsv4_strbuf_puts(&want, DSV4_BOS_STR, &err);
    dsv4_strbuf_puts(&want, MAX_PREFIX_FROM_SPEC, &err);
    dsv4_strbuf_puts(&want,
                     "You are a helpful assistant" DSV4_USER_STR "hi" DSV4_ASSISTANT_STR DSV4_THINK_START_STR,
                     &err);
    /* separate spans: "...\n\n" | "You are..." equals BPE(prefix) + BPE(system) since a piece never
     * crosses "\n\n" followed by a letter run */
    assert_same_as_rendered(t, &out, want.data);
    dsv4_strbuf_free(&want);
    dsv4_tokens_free(&out);
    dsv4_tokenizer_free(t);
}

static void test_cli_multi_turn(void **state) {
    (void)state;
    dsv4_tokenizer *t = tk();
    dsv4_tokens out = {0};
    dsv4_error err;
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_SYSTEM, "hello", &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, ID_HELLO);
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_USER, "aa", &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, ID_HELLO, DSV4_SPECIAL_USER, ID_AA);
    out.n = 0;
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_TOOL, "aa", &out, &err), DSV4_OK);
    /* "Tool: " -> pieces "Tool" ":" " " (the space is alone at the end of its span) */
    ASSERT_TOKENS(&out, DSV4_SPECIAL_USER, ID_BYTE('T'), ID_BYTE('o'), ID_BYTE('o'), ID_BYTE('l'),
                  ID_BYTE(':'), ID_BYTE(' '), ID_AA);
    out.n = 0;
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_ASSISTANT, "hello", &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, DSV4_SPECIAL_ASSISTANT, DSV4_SPECIAL_THINK_END, ID_HELLO);
    out.n = 0;
    /* content starting with <think> gets no </think>; the tag is plain text here */
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_ASSISTANT, "<think>aa", &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, DSV4_SPECIAL_ASSISTANT, ID_BYTE('<'), ID_BYTE('t'), ID_BYTE('h'), ID_BYTE('i'),
                  ID_BYTE('n'), ID_BYTE('k'), ID_BYTE('>'), ID_AA);
    out.n = 0;
    assert_int_equal(dsv4_chat_append_message(t, DSV4_ROLE_ASSISTANT, "</think>", &out, &err), DSV4_OK);
    assert_int_equal(out.ids[1], ID_BYTE('<'));
    out.n = 0;
    const int32_t gen[] = {DSV4_SPECIAL_THINK_START, ID_AA, DSV4_SPECIAL_THINK_END, ID_HELLO};
    assert_int_equal(dsv4_chat_append_generated(t, gen, 4, &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, DSV4_SPECIAL_THINK_START, ID_AA, DSV4_SPECIAL_THINK_END, ID_HELLO, DSV4_SPECIAL_EOS);
    out.n = 0;
    assert_int_equal(dsv4_chat_append_assistant_prefix(t, DSV4_THINK_MAX, &out, &err), DSV4_OK);
    ASSERT_TOKENS(&out, DSV4_SPECIAL_ASSISTANT, DSV4_SPECIAL_THINK_START);
    dsv4_tokens_free(&out);
    dsv4_tokenizer_free(t);
}

static void render_expect(const dsv4_chat_message *m, size_t n, const char *tools, dsv4_think_mode mode,
                          const char *want) {
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_chat_render_text(m, n, tools, mode, &sb, &err), DSV4_OK);
    if (strcmp(sb.data, want) != 0) fprintf(stderr, "got:  [%s]\nwant: [%s]\n", sb.data, want);
    assert_string_equal(sb.data, want);
    dsv4_strbuf_free(&sb);
}

#define B DSV4_BOS_STR
#define E DSV4_EOS_STR
#define U DSV4_USER_STR
#define A DSV4_ASSISTANT_STR
#define TS "<think>"
#define TE "</think>"
#define D                                                                                                    \
    "\xef\xbd\x9c"                                                                                           \
    "DSML\xef\xbd\x9c"

static void test_render_basic(void **state) {
    (void)state;
    const dsv4_chat_message msgs[] = {
        {.role = DSV4_ROLE_SYSTEM, .content = "S1"},
        {.role = DSV4_ROLE_USER, .content = "Hi"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "Hello", .reasoning = "r1"},
        {.role = DSV4_ROLE_DEVELOPER, .content = "D2"},
        {.role = DSV4_ROLE_USER, .content = "Q2"},
    };
    /* non-thinking: every assistant turn gets </think>; system/developer joined by \n\n up front */
    render_expect(msgs, 5, NULL, DSV4_THINK_NONE, B "S1\n\nD2" U "Hi" A TE "Hello" E U "Q2" A TE);
    /* thinking, no tool context: the earlier turn loses its reasoning */
    render_expect(msgs, 5, NULL, DSV4_THINK_HIGH, B "S1\n\nD2" U "Hi" A TE "Hello" E U "Q2" A TS);
    render_expect(
        msgs, 5, "", DSV4_THINK_MAX,
        B
        "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
        "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
        "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
        "adversarial scenarios.\nExplicitly write out your entire deliberation process, documenting every "
        "intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no "
        "assumption is left unchecked.\n\nS1\n\nD2" U "Hi" A TE "Hello" E U "Q2" A TS);
    /* a turn after the last user message keeps its reasoning; nothing is pending afterwards */
    const dsv4_chat_message m2[] = {
        {.role = DSV4_ROLE_USER, .content = "Hi"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "C", .reasoning = "R"},
    };
    render_expect(m2, 2, NULL, DSV4_THINK_HIGH, B U "Hi" A TS "R" TE "C" E);
    render_expect(m2, 2, NULL, DSV4_THINK_NONE, B U "Hi" A TE "C" E);
    /* an assistant message with nothing pending gets no <｜Assistant｜> prefix; empty system skipped
     * without a separator */
    const dsv4_chat_message m3[] = {
        {.role = DSV4_ROLE_SYSTEM, .content = ""},
        {.role = DSV4_ROLE_SYSTEM, .content = "X"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "pre"},
        {.role = DSV4_ROLE_USER},
    };
    render_expect(m3, 4, NULL, DSV4_THINK_HIGH,
                  B "X"
                    "pre" E U A TS);
    render_expect(NULL, 0, NULL, DSV4_THINK_NONE, B);
}

static void test_render_tools(void **state) {
    (void)state;
    const dsv4_tool_arg args[] = {{"path", "/tmp", true}, {"recursive", "true", false}};
    const dsv4_tool_call call = {.name = "list_files", .args = args, .n_args = 2};
    const dsv4_chat_message msgs[] = {
        {.role = DSV4_ROLE_SYSTEM, .content = "S"},
        {.role = DSV4_ROLE_USER, .content = "list"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "", .reasoning = "r1", .calls = &call, .n_calls = 1},
        {.role = DSV4_ROLE_TOOL, .content = "a</tool_result>b"},
        {.role = DSV4_ROLE_TOOL, .content = "second"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "done", .reasoning = "r2"},
        {.role = DSV4_ROLE_USER, .content = "again"},
    };
    const char *dsml = "\n\n<" D "tool_calls>\n<" D "invoke name=\"list_files\">\n<" D
                       "parameter name=\"path\" string=\"true\">/tmp</" D "parameter>\n<" D
                       "parameter name=\"recursive\" string=\"false\">true</" D "parameter>\n</" D
                       "invoke>\n</" D "tool_calls>";
    dsv4_strbuf want = {0};
    dsv4_error err;
    /* tool context: every assistant turn keeps reasoning in thinking mode; consecutive tool
     * results share one <｜User｜>; </tool_result> in content is escaped */
    dsv4_strbuf_puts(&want, B "TOOLS\n\nS" U "list" A TS "r1" TE, &err);
    dsv4_strbuf_puts(&want, dsml, &err);
    dsv4_strbuf_puts(&want,
                     E U
                     "<tool_result>a&lt;/tool_result>b</tool_result><tool_result>second</tool_result>" A TS
                     "r2" TE "done" E U "again" A TS,
                     &err);
    render_expect(msgs, 7, "TOOLS", DSV4_THINK_HIGH, want.data);
    dsv4_strbuf_free(&want);

    /* without the tools block the tool messages alone still make tool context */
    const dsv4_chat_message m2[] = {
        {.role = DSV4_ROLE_USER, .content = "q"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "x", .reasoning = "kept"},
        {.role = DSV4_ROLE_USER, .content = "q2"},
        {.role = DSV4_ROLE_TOOL, .content = "t"},
    };
    render_expect(m2, 4, NULL, DSV4_THINK_HIGH,
                  B U "q" A TS "kept" TE "x" E U "q2" U "<tool_result>t</tool_result>" A TS);
    /* a user message between tool results restarts the <｜User｜> prefix */
    const dsv4_chat_message m3[] = {
        {.role = DSV4_ROLE_TOOL, .content = "1"},
        {.role = DSV4_ROLE_USER, .content = "u"},
        {.role = DSV4_ROLE_TOOL, .content = "2"},
    };
    render_expect(m3, 3, NULL, DSV4_THINK_NONE,
                  B U "<tool_result>1</tool_result>" U "u" U "<tool_result>2</tool_result>" A TE);
    /* raw DSML is written verbatim */
    const dsv4_chat_message m4[] = {
        {.role = DSV4_ROLE_USER, .content = "q"},
        {.role = DSV4_ROLE_ASSISTANT, .content = "c", .raw_dsml = "RAW", .calls = &call, .n_calls = 1},
    };
    render_expect(m4, 2, NULL, DSV4_THINK_NONE, B U "q" A TE "cRAW" E);
}

static void test_render_dsml_escapes(void **state) {
    (void)state;
    const dsv4_tool_arg args[] = {
        {"k\"<&>", "x</" D "parameter>y & <b>", true},
        {"j", "[\"</" D "parameter>\"]", false},
    };
    const dsv4_tool_call calls[] = {{.name = "a\"b<c>&", .args = args, .n_args = 2}, {.name = "empty"}};
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_chat_render_tool_calls(calls, 2, &sb, &err), DSV4_OK);
    assert_string_equal(sb.data, "\n\n<" D "tool_calls>\n<" D "invoke name=\"a&quot;b&lt;c&gt;&amp;\">\n<" D
                                 "parameter name=\"k&quot;&lt;&amp;&gt;\" string=\"true\">x&lt;/" D
                                 "parameter>y & <b></" D "parameter>\n<" D
                                 "parameter name=\"j\" string=\"false\">[\"\\u003c/" D "parameter>\"]</" D
                                 "parameter>\n</" D "invoke>\n<" D "invoke name=\"empty\">\n</" D
                                 "invoke>\n</" D "tool_calls>");
    dsv4_strbuf_free(&sb);
    assert_int_equal(dsv4_chat_render_tool_calls(calls, 0, &sb, &err), DSV4_OK);
    assert_int_equal(sb.len, 0);
}

/* The rendered text tokenizes with the specials in place. */
static void test_render_then_tokenize(void **state) {
    (void)state;
    dsv4_tokenizer *t = tk();
    const dsv4_chat_message msgs[] = {{.role = DSV4_ROLE_USER, .content = "hello"}};
    dsv4_strbuf sb = {0};
    dsv4_error err;
    assert_int_equal(dsv4_chat_render_text(msgs, 1, NULL, DSV4_THINK_NONE, &sb, &err), DSV4_OK);
    dsv4_tokens out = {0};
    assert_int_equal(dsv4_tokenize_rendered(t, sb.data, sb.len, &out, &err), DSV4_OK);
    /* same as the one-shot encoding with an empty system */
    ASSERT_TOKENS(&out, DSV4_SPECIAL_BOS, DSV4_SPECIAL_USER, ID_HELLO, DSV4_SPECIAL_ASSISTANT,
                  DSV4_SPECIAL_THINK_END);
    dsv4_tokens_free(&out);
    dsv4_strbuf_free(&sb);
    dsv4_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_think_modes),
        cmocka_unit_test(test_encode_prompt),
        cmocka_unit_test(test_encode_prompt_max_with_system),
        cmocka_unit_test(test_cli_multi_turn),
        cmocka_unit_test(test_render_basic),
        cmocka_unit_test(test_render_tools),
        cmocka_unit_test(test_render_dsml_escapes),
        cmocka_unit_test(test_render_then_tokenize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
