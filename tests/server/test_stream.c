/* Streaming pieces of the server without HTTP: stop-string hold-back over arbitrary splits, the
 * tool-call memory LRU, the bounded queue (429 when full, 503 when stopping), and generated DSML
 * -> OpenAI tool_calls / Anthropic tool_use / Responses function_call JSON, streamed argument
 * deltas concatenating to the final arguments. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/testutil.h"
#include "server/dsml_out.h"
#include "server/srv.h"
#include "server/stop.h"
#include "text/special.h"

#define D DSV4_DSML_STR

/* Feeds text split at every position pattern given by cuts; returns emitted text. */
static char *stop_run(char *const *stops, size_t n, const char *text, const size_t *cuts, size_t n_cuts,
                      bool *hit) {
    srv_stop s;
    srv_stop_init(&s, stops, n);
    dsv4_strbuf out = {0};
    dsv4_error err;
    dsv4_strbuf_puts(&out, "", &err);
    size_t at = 0;
    *hit = false;
    for (size_t i = 0; i <= n_cuts && !*hit; i++) {
        const size_t end = i < n_cuts ? cuts[i] : strlen(text);
        *hit = srv_stop_feed(&s, text + at, end - at, &out);
        at = end;
    }
    if (!*hit) srv_stop_flush(&s, &out);
    srv_stop_free(&s);
    return out.data;
}

static void test_stop_holdback(void **state) {
    (void)state;
    char *stops[] = {"END", "<|x|>"};
    const char *text = "hello EN world <|x|> tail END more";
    /* every single split point and a byte-by-byte feed give the same answer */
    for (size_t c = 0; c <= strlen(text); c++) {
        size_t cuts[1] = {c};
        bool hit;
        char *o = stop_run(stops, 2, text, cuts, 1, &hit);
        assert_true(hit);
        assert_string_equal(o, "hello EN world ");
        free(o);
    }
    size_t bytes[64];
    for (size_t i = 0; i < strlen(text); i++) bytes[i] = i + 1;
    bool hit;
    char *o = stop_run(stops, 2, text, bytes, strlen(text) - 1, &hit);
    assert_true(hit);
    assert_string_equal(o, "hello EN world ");
    free(o);
    /* a held prefix that does not complete is emitted, nothing lost */
    srv_stop s;
    srv_stop_init(&s, stops, 2);
    dsv4_strbuf out = {0};
    dsv4_error err;
    dsv4_strbuf_puts(&out, "", &err);
    assert_false(srv_stop_feed(&s, "abcE", 4, &out));
    assert_string_equal(out.data, "abc");
    assert_false(srv_stop_feed(&s, "N", 1, &out));
    assert_string_equal(out.data, "abc");
    assert_false(srv_stop_feed(&s, "x", 1, &out));
    assert_string_equal(out.data, "abcENx");
    assert_false(srv_stop_feed(&s, "<|", 2, &out));
    srv_stop_flush(&s, &out);
    assert_string_equal(out.data, "abcENx<|");
    srv_stop_free(&s);
    dsv4_strbuf_free(&out);
    /* no stops: pass-through */
    o = stop_run(NULL, 0, text, bytes, 3, &hit);
    assert_false(hit);
    assert_string_equal(o, text);
    free(o);
}

static void test_toolmem_lru(void **state) {
    (void)state;
    srv_toolmem m;
    assert_int_equal(srv_toolmem_init(&m, 2), 0);
    srv_toolmem_put(&m, "a", "A", 1);
    srv_toolmem_put(&m, "b", "B", 1);
    char *v = srv_toolmem_get(&m, "a"); /* a is now the most recent */
    assert_string_equal(v, "A");
    free(v);
    srv_toolmem_put(&m, "c", "C", 1); /* evicts b */
    assert_null(srv_toolmem_get(&m, "b"));
    v = srv_toolmem_get(&m, "a");
    assert_string_equal(v, "A");
    free(v);
    v = srv_toolmem_get(&m, "c");
    assert_string_equal(v, "C");
    free(v);
    srv_toolmem_put(&m, "c", "C2", 2); /* replace keeps the count */
    assert_int_equal(srv_toolmem_count(&m), 2);
    v = srv_toolmem_get(&m, "c");
    assert_string_equal(v, "C2");
    free(v);
    srv_toolmem_free(&m);
}

static void test_queue_full(void **state) {
    (void)state;
    dsv4_server s;
    memset(&s, 0, sizeof s);
    s.cfg.queue_max = 2;
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    srv_metrics_init(&s.metrics);
    srv_job *q[2];
    s.queue = q;
    srv_job *j[3];
    for (int i = 0; i < 3; i++) j[i] = srv_job_new();
    assert_int_equal(srv_enqueue(&s, j[0]), 0);
    assert_int_equal(srv_enqueue(&s, j[1]), 0);
    assert_int_equal(srv_enqueue(&s, j[2]), 429);
    assert_int_equal(s.metrics.queue_depth, 2);
    s.q_len = 1; /* one taken by the worker */
    s.q_head = 1;
    srv_job_unref(j[0]);
    assert_int_equal(srv_enqueue(&s, j[2]), 0);
    s.stopping = true;
    srv_job *late = srv_job_new();
    assert_int_equal(srv_enqueue(&s, late), 503);
    srv_job_unref(late);
    /* the queue's references */
    srv_job_unref(j[1]);
    srv_job_unref(j[2]);
    for (int i = 0; i < 3; i++) srv_job_unref(j[i]);
    srv_metrics_free(&s.metrics);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
}

static const char GEN[] = "Let me check.\n\n<" D "tool_calls>\n<" D "invoke name=\"get_weather\">\n<" D
                          "parameter name=\"city\" string=\"true\">Pa\"ris\n</" D "parameter>\n<" D
                          "parameter name=\"days\" string=\"false\">3</" D "parameter>\n<" D
                          "parameter name=\"opts\" string=\"false\">{\"u\": [1, true]}</" D "parameter>\n<" D
                          "parameter name=\"bad\" string=\"false\">not json</" D "parameter>\n</" D
                          "invoke>\n<" D "invoke name=\"noargs\">\n</" D "invoke>\n</" D "tool_calls>";

/* Runs GEN through the DSML parser into a srv_out, fed in pieces of `step` bytes. */
static void run_dsml(srv_out *o, srv_api api, bool stream, size_t step, srv_toolmem *mem) {
    srv_request r;
    memset(&r, 0, sizeof r);
    r.api = api;
    r.stream = stream;
    srv_out_init(o, &r, "m", 42);
    srv_out_begin(o);
    srv_dsml_sink k = {.out = o, .mem = mem};
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(srv_dsml_event, &k);
    dsv4_error err;
    const size_t n = strlen(GEN);
    for (size_t at = 0; at < n; at += step)
        assert_int_equal(dsv4_dsml_parser_feed(p, GEN + at, at + step < n ? step : n - at, &err), DSV4_OK);
    assert_int_equal(dsv4_dsml_parser_finish(p, &err), DSV4_OK);
    dsv4_dsml_parser_free(p);
    srv_dsml_sink_free(&k);
    o->finish = SRV_FINISH_TOOLS;
    srv_out_finish(o);
}

static void check_args(const char *args) {
    json_t *a = json_loads(args, 0, NULL);
    if (!a) fail_msg("arguments are not JSON: %s", args);
    assert_string_equal(json_string_value(json_object_get(a, "city")), "Pa\"ris\n");
    assert_int_equal(json_integer_value(json_object_get(a, "days")), 3);
    assert_true(json_is_true(json_array_get(json_object_get(json_object_get(a, "opts"), "u"), 1)));
    assert_string_equal(json_string_value(json_object_get(a, "bad")),
                        "not json"); /* invalid literal -> string */
    json_decref(a);
}

static void test_dsml_to_openai(void **state) {
    (void)state;
    srv_toolmem mem;
    srv_toolmem_init(&mem, 10);
    srv_out o;
    run_dsml(&o, SRV_API_CHAT, false, 7, &mem);
    char *body = srv_out_body(&o);
    json_t *j = json_loads(body, 0, NULL);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls");
    json_t *msg = json_object_get(choice, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Let me check.");
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *c0 = json_array_get(calls, 0);
    const char *id0 = json_string_value(json_object_get(c0, "id"));
    assert_true(strncmp(id0, "call_", 5) == 0 && strlen(id0) > 12);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "function"), "name")),
                        "get_weather");
    check_args(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(calls, 1), "function"), "arguments")),
                        "{}");
    /* the exact block (with its leading blank line) is remembered under both ids */
    char *raw = srv_toolmem_get(&mem, id0);
    assert_non_null(raw);
    assert_string_equal(raw, strstr(GEN, "\n\n<"));
    free(raw);
    json_decref(j);
    free(body);
    srv_out_free(&o);

    /* streaming: id/name first, argument deltas concatenate to the same JSON, then [DONE] */
    run_dsml(&o, SRV_API_CHAT, true, 3, NULL);
    char *sse = strndup(o.sse.data, o.sse.len);
    dsv4_strbuf args = {0};
    dsv4_error err;
    dsv4_strbuf_puts(&args, "", &err);
    int headers = 0;
    bool done = false;
    for (char *line = strtok(sse, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(strncmp(line, "data: ", 6) == 0);
        if (!strcmp(line + 6, "[DONE]")) {
            done = true;
            continue;
        }
        json_t *c = json_loads(line + 6, 0, NULL);
        assert_non_null(c);
        json_t *tc = json_array_get(
            json_object_get(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta"),
                            "tool_calls"),
            0);
        if (tc && json_integer_value(json_object_get(tc, "index")) == 0) {
            if (json_object_get(tc, "id")) {
                headers++;
                assert_string_equal(
                    json_string_value(json_object_get(json_object_get(tc, "function"), "name")),
                    "get_weather");
            }
            const char *a = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
            if (a) dsv4_strbuf_puts(&args, a, &err);
        }
        json_decref(c);
    }
    assert_true(done);
    assert_int_equal(headers, 1);
    check_args(args.data);
    dsv4_strbuf_free(&args);
    free(sse);
    srv_out_free(&o);
    srv_toolmem_free(&mem);
}

static void test_dsml_to_anthropic_and_responses(void **state) {
    (void)state;
    srv_out o;
    run_dsml(&o, SRV_API_MESSAGES, false, 5, NULL);
    char *body = srv_out_body(&o);
    json_t *j = json_loads(body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    json_t *content = json_object_get(j, "content");
    assert_int_equal(json_array_size(content), 3);
    json_t *tu = json_array_get(content, 1);
    assert_string_equal(json_string_value(json_object_get(tu, "type")), "tool_use");
    assert_true(strncmp(json_string_value(json_object_get(tu, "id")), "toolu_", 6) == 0);
    char *input = json_dumps(json_object_get(tu, "input"), JSON_COMPACT);
    check_args(input);
    free(input);
    json_decref(j);
    free(body);
    srv_out_free(&o);

    /* Anthropic stream: the tool_use block's input_json_delta pieces form the arguments */
    run_dsml(&o, SRV_API_MESSAGES, true, 2, NULL);
    char *sse = strndup(o.sse.data, o.sse.len);
    dsv4_strbuf args = {0};
    dsv4_error err;
    dsv4_strbuf_puts(&args, "", &err);
    int starts = 0;
    for (char *line = strtok(sse, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) != 0) continue;
        json_t *ev = json_loads(line + 6, 0, NULL);
        assert_non_null(ev);
        const char *type = json_string_value(json_object_get(ev, "type"));
        json_t *cb = json_object_get(ev, "content_block");
        if (!strcmp(type, "content_block_start") &&
            !strcmp(json_string_value(json_object_get(cb, "type")), "tool_use"))
            starts++;
        json_t *d = json_object_get(ev, "delta");
        if (!strcmp(type, "content_block_delta") && json_integer_value(json_object_get(ev, "index")) == 1)
            dsv4_strbuf_puts(&args, json_string_value(json_object_get(d, "partial_json")), &err);
        json_decref(ev);
    }
    assert_int_equal(starts, 2);
    check_args(args.data);
    dsv4_strbuf_free(&args);
    free(sse);
    srv_out_free(&o);

    run_dsml(&o, SRV_API_RESPONSES, false, 11, NULL);
    body = srv_out_body(&o);
    j = json_loads(body, 0, NULL);
    json_t *out = json_object_get(j, "output");
    assert_int_equal(json_array_size(out), 3);
    json_t *fc = json_array_get(out, 1);
    assert_string_equal(json_string_value(json_object_get(fc, "type")), "function_call");
    assert_string_equal(json_string_value(json_object_get(fc, "name")), "get_weather");
    check_args(json_string_value(json_object_get(fc, "arguments")));
    json_decref(j);
    free(body);
    srv_out_free(&o);
}

static void test_malformed_dsml_is_text(void **state) {
    (void)state;
    srv_request r;
    memset(&r, 0, sizeof r);
    r.api = SRV_API_CHAT;
    srv_out o;
    srv_out_init(&o, &r, "m", 1);
    srv_dsml_sink k = {.out = &o};
    dsv4_dsml_parser *p = dsv4_dsml_parser_new(srv_dsml_event, &k);
    dsv4_error err;
    const char *bad = "a\n\n<" D "tool_calls>\n<" D "invoke name=\"f\">\nnot a parameter";
    dsv4_dsml_parser_feed(p, bad, strlen(bad), &err);
    dsv4_dsml_parser_finish(p, &err);
    dsv4_dsml_parser_free(p);
    srv_dsml_sink_free(&k);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content.data, bad); /* nothing dropped */
    srv_out_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_holdback),
        cmocka_unit_test(test_toolmem_lru),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_dsml_to_openai),
        cmocka_unit_test(test_dsml_to_anthropic_and_responses),
        cmocka_unit_test(test_malformed_dsml_is_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
