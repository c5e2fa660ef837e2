/* Request parsing -> rendered prompt text for each API (golden strings derived by hand from the
 * server rendering rules, spec §5.4), cross-API equivalence of the same conversation, exact DSML
 * replay, think-mode and sampling rules, strict type errors naming the field, and both error
 * body shapes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/testutil.h"
#include "server/request.h"
#include "text/special.h"

#define BOS DSV4_BOS_STR
#define EOS DSV4_EOS_STR
#define USER DSV4_USER_STR
#define ASSIST DSV4_ASSISTANT_STR
#define D DSV4_DSML_STR

static const srv_parse_ctx CTX = {4096, "deepseek-v4-flash", NULL, NULL};

static char *render(srv_api api, const char *body, const srv_parse_ctx *ctx) {
    srv_request r;
    srv_err e;
    if (!srv_request_parse(api, body, strlen(body), ctx ? ctx : &CTX, &r, &e))
        fail_msg("parse: %s", e.message);
    dsv4_strbuf out = {0};
    dsv4_error err;
    assert_int_equal(srv_request_render(&r, &out, &err), DSV4_OK);
    srv_request_free(&r);
    return out.data;
}

static void expect_render(srv_api api, const char *body, const char *want) {
    char *got = render(api, body, NULL);
    if (strcmp(got, want) != 0) fail_msg("rendered\n[%s]\nwant\n[%s]", got, want);
    free(got);
}

static void test_chat_render(void **state) {
    (void)state;
    /* non-thinking: every assistant turn gets </think>; the prompt ends with <｜Assistant｜></think> */
    expect_render(
        SRV_API_CHAT,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S1\"},{\"role\":\"developer\",\"content\":\"S2\"},"
        "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":"
        "\"b\"}]}],"
        "\"think\":false}",
        BOS "S1\n\nS2" USER "Hi" ASSIST "</think>Hello" EOS USER "a\nb" ASSIST "</think>");
    /* thinking (default): an earlier turn without tool context drops its reasoning */
    expect_render(
        SRV_API_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\","
        "\"reasoning_content\":\"hmm\"},{\"role\":\"user\",\"content\":\"Q\"}]}",
        BOS USER "Hi" ASSIST "</think>Hello" EOS USER "Q" ASSIST "<think>");
    /* reasoning_effort none = no thinking */
    expect_render(SRV_API_CHAT,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"none\"}",
                  BOS USER "x" ASSIST "</think>");
    /* raw completions: BOS + text, BOS not doubled */
    expect_render(SRV_API_COMPLETIONS, "{\"prompt\":\"abc\"}", BOS "abc");
    expect_render(SRV_API_COMPLETIONS, "{\"prompt\":\"" BOS "abc\"}", BOS "abc");
}

#define CALL_DSML                                                                                            \
    "\n\n<" D "tool_calls>\n<" D "invoke name=\"get\">\n<" D                                                 \
    "parameter name=\"city\" string=\"true\">Paris</" D "parameter>\n<" D                                    \
    "parameter name=\"n\" string=\"false\">3</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>"

static void test_tool_render_all_apis(void **state) {
    (void)state;
    const char *chat =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"W?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"n\\\":3}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny </tool_result> x\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\"}}}],\"think\":false}";
    char *c = render(SRV_API_CHAT, chat, NULL);
    /* tools block first in the system region, then the system text */
    assert_true(strncmp(c, BOS "## Tools\n\n", strlen(BOS "## Tools\n\n")) == 0);
    assert_non_null(
        strstr(c, "\n{\"name\":\"get\",\"description\":\"d\",\"parameters\":{\"type\":\"object\"}}\n"));
    const char *tail = USER "W?" ASSIST "</think>" CALL_DSML EOS USER
                            "<tool_result>sunny &lt;/tool_result> x</tool_result>" ASSIST "</think>";
    assert_non_null(strstr(c, "\n\nS" USER));
    assert_string_equal(c + strlen(c) - strlen(tail), tail);

    const char *anth =
        "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],\"messages\":[{\"role\":\"user\","
        "\"content\":\"W?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get\","
        "\"input\":{\"city\":\"Paris\",\"n\":3}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
        "\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"sunny </tool_result> "
        "x\"}]}]}],"
        "\"tools\":[{\"name\":\"get\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"thinking\":{\"type\":\"disabled\"}}";
    char *a = render(SRV_API_MESSAGES, anth, NULL);
    assert_string_equal(a, c);

    const char *resp =
        "{\"instructions\":\"S\",\"input\":[{\"role\":\"user\",\"content\":\"W?\"},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get\",\"arguments\":\"{\\\"city\\\":"
        "\\\"Paris\\\",\\\"n\\\":3}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny </tool_result> x\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get\",\"description\":\"d\",\"parameters\":{\"type\":"
        "\"object\"}}],"
        "\"reasoning\":{\"effort\":\"none\"}}";
    char *r = render(SRV_API_RESPONSES, resp, NULL);
    assert_string_equal(r, c);
    free(c), free(a), free(r);
}

static char *fake_lookup(void *user, const char *id) {
    return strcmp(id, "call_X") == 0 ? strdup((const char *)user) : NULL;
}

static void test_exact_dsml_replay(void **state) {
    (void)state;
    /* the remembered bytes differ from the canonical rendering (spacing): they are used verbatim */
    const char *raw =
        "\n\n<" D "tool_calls>\n<" D "invoke name=\"get\">\n<" D
        "parameter name=\"n\" string=\"false\"> 3 </" D "parameter>\n</" D "invoke>\n</" D "tool_calls>";
    srv_parse_ctx ctx = {4096, "m", fake_lookup, (void *)raw};
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"id\":\"call_X\",\"type\":\"function\",\"function\":{\"name\":\"get\","
        "\"arguments\":\"{\\\"n\\\":3}\"}}]},{\"role\":\"tool\",\"content\":\"r\"}],\"think\":false}";
    char *got = render(SRV_API_CHAT, body, &ctx);
    assert_non_null(strstr(got, raw));
    free(got);
    /* an unknown id falls back to the canonical rendering */
    const char *body2 =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"id\":\"call_Y\",\"type\":\"function\",\"function\":{\"name\":\"get\","
        "\"arguments\":\"{\\\"n\\\":3}\"}}]},{\"role\":\"tool\",\"content\":\"r\"}],\"think\":false}";
    got = render(SRV_API_CHAT, body2, &ctx);
    assert_null(strstr(got, raw));
    assert_non_null(strstr(got, "string=\"false\">3</" D "parameter>"));
    free(got);
}

static srv_request parse_ok(srv_api api, const char *body, uint32_t n_ctx) {
    srv_request r;
    srv_err e;
    srv_parse_ctx ctx = CTX;
    ctx.n_ctx = n_ctx;
    if (!srv_request_parse(api, body, strlen(body), &ctx, &r, &e)) fail_msg("parse: %s", e.message);
    return r;
}

static void test_think_and_sampling(void **state) {
    (void)state;
    srv_request r = parse_ok(
        SRV_API_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":0.2,\"top_k\":5}", 4096);
    /* thinking by default: the client's sampling knobs are ignored */
    assert_int_equal(r.think, DSV4_THINK_HIGH);
    assert_true(r.sampling.temperature == 1.0f && r.sampling.min_p == 0.05f && r.sampling.top_k == 0);
    srv_request_free(&r);
    r = parse_ok(SRV_API_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":0.2,\"top_k\":5000,"
                 "\"top_p\":0.5,"
                 "\"min_p\":0.1,\"seed\":9,\"max_completion_tokens\":7,\"stop\":\"END\",\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true},\"model\":\"deepseek-chat\"}",
                 4096);
    assert_int_equal(r.think, DSV4_THINK_NONE);
    assert_true(r.sampling.temperature == 0.2f && r.sampling.top_p == 0.5f && r.sampling.min_p == 0.1f);
    assert_int_equal(r.sampling.top_k, 1024); /* capped */
    assert_int_equal(r.seed, 9);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "END");
    assert_true(r.stream && r.include_usage);
    srv_request_free(&r);
    /* max effort needs a 384K context, else HIGH */
    r = parse_ok(SRV_API_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}", 4096);
    assert_int_equal(r.think, DSV4_THINK_HIGH);
    srv_request_free(&r);
    r = parse_ok(SRV_API_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}",
                 DSV4_THINK_MAX_MIN_CONTEXT);
    assert_int_equal(r.think, DSV4_THINK_MAX);
    srv_request_free(&r);
    r = parse_ok(SRV_API_MESSAGES,
                 "{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":{"
                 "\"type\":\"enabled\","
                 "\"budget_tokens\":100},\"stop_sequences\":[\"a\",\"b\"]}",
                 4096);
    assert_int_equal(r.think, DSV4_THINK_HIGH);
    assert_int_equal(r.max_tokens, 3);
    assert_int_equal(r.n_stop, 2);
    srv_request_free(&r);
}

typedef struct {
    srv_api api;
    const char *body;
    int status;
    const char *param; /* NULL: not checked */
} bad_case;

static void test_errors(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {SRV_API_CHAT, "{", 400, NULL},
        {SRV_API_CHAT, "[]", 400, NULL},
        {SRV_API_CHAT, "{}", 400, "messages"},
        {SRV_API_CHAT, "{\"messages\":{}}", 400, "messages"},
        {SRV_API_CHAT, "{\"messages\":[]}", 400, "messages"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"god\",\"content\":\"x\"}]}", 400, "messages[0].role"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
         "messages[0].content[0]"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400,
         "temperature"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":7}", 400,
         "temperature"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", 400,
         "max_tokens"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1e30}", 400,
         "max_tokens"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":99999999999}",
         400, "max_tokens"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", 400,
         "stream"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", 400, "stop[0]"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", 400, "n"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"huge\"}",
         400, "reasoning_effort"},
        {SRV_API_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
         "\"function\":{}}]}",
         400, "tools[0].function.name"},
        {SRV_API_CHAT,
         "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\","
         "\"arguments\":\"{bad\"}}]}]}",
         400, "messages[0].tool_calls[0].function.arguments"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]}", 400, NULL},
        {SRV_API_COMPLETIONS, "{\"prompt\":7}", 400, "prompt"},
        {SRV_API_RESPONSES, "{\"input\":[{\"type\":\"computer_call\"}]}", 400, "input[0].type"},
        {SRV_API_RESPONSES, "{\"input\":\"x\",\"max_output_tokens\":-1}", 400, "max_output_tokens"},
        {SRV_API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens"},
        {SRV_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", 400,
         "messages[0].role"},
        {SRV_API_MESSAGES,
         "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":{\"type\":"
         "\"sometimes\"}}",
         400, "thinking.type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        srv_request r;
        srv_err e;
        if (srv_request_parse(cases[i].api, cases[i].body, strlen(cases[i].body), &CTX, &r, &e))
            fail_msg("case %zu accepted: %s", i, cases[i].body);
        if (e.status != cases[i].status) fail_msg("case %zu: status %d", i, e.status);
        if (cases[i].param && strcmp(e.param, cases[i].param) != 0)
            fail_msg("case %zu: param '%s', want '%s' (%s)", i, e.param, cases[i].param, e.message);
        assert_true(strlen(e.message) > 0);
    }
    /* invalid UTF-8 inside a string is rejected by the JSON parser */
    const char bad_utf8[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}";
    srv_request r;
    srv_err e;
    assert_false(srv_request_parse(SRV_API_CHAT, bad_utf8, sizeof bad_utf8 - 1, &CTX, &r, &e));
    assert_int_equal(e.status, 400);
}

/* tool_choice in every API's shape: what is forced (and which function), and the 400s. */
static void tool_choice_case(srv_api api, const char *body, int want_status, srv_tool_choice want_choice,
                             const char *want_name, const char *want_param) {
    srv_request r;
    srv_err e;
    const bool ok = srv_request_parse(api, body, strlen(body), &CTX, &r, &e);
    if (want_status) {
        if (ok) fail_msg("accepted: %s", body);
        assert_int_equal(e.status, want_status);
        assert_string_equal(e.param, want_param);
        return;
    }
    if (!ok) fail_msg("parse: %s (%s)", e.message, body);
    assert_int_equal(r.tool_choice, want_choice);
    if (want_name)
        assert_string_equal(r.tool_force, want_name);
    else
        assert_null(r.tool_force);
    srv_request_free(&r);
}

static void test_tool_choice(void **state) {
    (void)state;
#define CT                                                                                                   \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{" \
    "\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]"
#define RT                                                                                                   \
    "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"function\",\"name\":"    \
    "\"g\"}]"
#define AT                                                                                                   \
    "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\"},{"   \
    "\"name\":\"g\"}]"
    tool_choice_case(SRV_API_CHAT, CT "}", 0, SRV_TOOLS_AUTO, NULL, NULL);
    tool_choice_case(SRV_API_CHAT, CT ",\"tool_choice\":\"auto\"}", 0, SRV_TOOLS_AUTO, NULL, NULL);
    tool_choice_case(SRV_API_CHAT, CT ",\"tool_choice\":\"required\"}", 0, SRV_TOOLS_REQUIRED, NULL, NULL);
    tool_choice_case(SRV_API_CHAT,
                     CT ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", 0,
                     SRV_TOOLS_REQUIRED, "g", NULL);
    tool_choice_case(SRV_API_CHAT,
                     CT ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}", 400, 0,
                     NULL, "tool_choice.function.name");
    tool_choice_case(SRV_API_CHAT, CT ",\"tool_choice\":{\"type\":\"function\"}}", 400, 0, NULL,
                     "tool_choice.function.name");
    tool_choice_case(
        SRV_API_CHAT,
        CT ",\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"required\"}}}", 0,
        SRV_TOOLS_REQUIRED, NULL, NULL);
    tool_choice_case(SRV_API_CHAT,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
                     400, 0, NULL, "tool_choice");
    tool_choice_case(SRV_API_RESPONSES, RT ",\"tool_choice\":\"required\"}", 0, SRV_TOOLS_REQUIRED, NULL,
                     NULL);
    tool_choice_case(SRV_API_RESPONSES, RT ",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}", 0,
                     SRV_TOOLS_REQUIRED, "f", NULL);
    tool_choice_case(SRV_API_RESPONSES, RT ",\"tool_choice\":{\"type\":\"function\",\"name\":\"zz\"}}", 400,
                     0, NULL, "tool_choice.name");
    tool_choice_case(SRV_API_RESPONSES, RT ",\"tool_choice\":\"none\"}", 0, SRV_TOOLS_NONE, NULL, NULL);
    tool_choice_case(SRV_API_MESSAGES, AT ",\"tool_choice\":{\"type\":\"any\"}}", 0, SRV_TOOLS_REQUIRED, NULL,
                     NULL);
    tool_choice_case(SRV_API_MESSAGES, AT ",\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", 0,
                     SRV_TOOLS_REQUIRED, "g", NULL);
    tool_choice_case(SRV_API_MESSAGES, AT ",\"tool_choice\":{\"type\":\"tool\",\"name\":\"q\"}}", 400, 0,
                     NULL, "tool_choice.name");
    tool_choice_case(SRV_API_MESSAGES, AT ",\"tool_choice\":{\"type\":\"auto\"}}", 0, SRV_TOOLS_AUTO, NULL,
                     NULL);
    tool_choice_case(
        SRV_API_MESSAGES,
        "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":"
        "\"any\"}}",
        400, 0, NULL, "tool_choice");
#undef CT
#undef RT
#undef AT
}

static void test_depth_limit(void **state) {
    (void)state;
    char buf[512];
    size_t n = 0;
    for (int i = 0; i < 70; i++) buf[n++] = '[';
    for (int i = 0; i < 70; i++) buf[n++] = ']';
    assert_int_equal(srv_json_depth(buf, n, 64), -1);
    assert_int_equal(srv_json_depth(buf, n, 100), 70);
    /* brackets inside strings (with escaped quotes) do not count */
    const char *s = "{\"a\":\"[[[[\\\"[[[[\",\"b\":[{}]}";
    assert_int_equal(srv_json_depth(s, strlen(s), 64), 3);
    srv_request r;
    srv_err e;
    memcpy(buf, "{\"messages\":", 12);
    n = 12;
    for (int i = 0; i < 65; i++) buf[n++] = '[';
    for (int i = 0; i < 65; i++) buf[n++] = ']';
    buf[n++] = '}';
    assert_false(srv_request_parse(SRV_API_CHAT, buf, n, &CTX, &r, &e));
    assert_string_equal(e.code, "json_too_deep");
}

static void test_error_shapes(void **state) {
    (void)state;
    srv_err e;
    srv_err_set(&e, 400, "invalid_request_error", "context_length_exceeded", "messages", "too long");
    e.n_prompt_tokens = 300;
    e.n_ctx = 256;
    char *s = srv_error_body(SRV_API_CHAT, &e);
    json_t *j = json_loads(s, 0, NULL);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "too long");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "messages");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "context_length_exceeded");
    assert_int_equal(json_integer_value(json_object_get(err, "n_prompt_tokens")), 300);
    assert_int_equal(json_integer_value(json_object_get(err, "n_ctx")), 256);
    json_decref(j);
    free(s);
    srv_err_set(&e, 401, "authentication_error", NULL, NULL, "no key");
    s = srv_error_body(SRV_API_MESSAGES, &e);
    j = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
    err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "authentication_error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "no key");
    assert_int_equal(json_object_size(j), 2);
    json_decref(j);
    free(s);
    s = srv_error_body(SRV_API_RESPONSES, &e);
    j = json_loads(s, 0, NULL);
    assert_true(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    assert_true(json_is_null(json_object_get(json_object_get(j, "error"), "code")));
    json_decref(j);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_render),
        cmocka_unit_test(test_tool_render_all_apis),
        cmocka_unit_test(test_exact_dsml_replay),
        cmocka_unit_test(test_think_and_sampling),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tool_choice),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_error_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
