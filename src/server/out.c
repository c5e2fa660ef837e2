/* Collects the generation (for the non-streaming body and the final streamed objects) and
 * dispatches streaming events to the API's writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/out.h"
#include "text/sampler.h"

void srv_out_init(srv_out *o, const srv_request *r, const char *model, uint64_t seed) {
    memset(o, 0, sizeof *o);
    o->api = r->api;
    o->stream = r->stream;
    o->include_usage = r->include_usage;
    o->model = model;
    o->created = (int64_t)time(NULL);
    o->rng = seed ^ 0x5deece66dull;
    static const char *const prefix[] = {"chatcmpl-", "cmpl-", "resp_", "msg_"};
    srv_rand_id(o, prefix[r->api], o->id, sizeof o->id);
    o->finish = SRV_FINISH_STOP;
}

void srv_out_free(srv_out *o) {
    for (size_t i = 0; i < o->n_calls; i++) {
        free(o->calls[i].name);
        dsv4_strbuf_free(&o->calls[i].args);
    }
    free(o->calls);
    dsv4_strbuf_free(&o->reasoning);
    dsv4_strbuf_free(&o->content);
    dsv4_strbuf_free(&o->sse);
}

void srv_rand_id(srv_out *o, const char *prefix, char *out, size_t cap) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t p = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && p + 1 < cap; i++) out[p++] = alnum[dsv4_rng_next(&o->rng) % 62];
    out[p < cap ? p : cap - 1] = 0;
}

json_t *srv_jstrn(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    return j ? j : json_string(""); /* invalid UTF-8 never reaches here (detok output) */
}

void srv_sse(srv_out *o, const char *event, json_t *data) {
    dsv4_error err;
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) return;
    if (event) {
        dsv4_strbuf_puts(&o->sse, "event: ", &err);
        dsv4_strbuf_puts(&o->sse, event, &err);
        dsv4_strbuf_puts(&o->sse, "\n", &err);
    }
    dsv4_strbuf_puts(&o->sse, "data: ", &err);
    dsv4_strbuf_puts(&o->sse, s, &err);
    dsv4_strbuf_puts(&o->sse, "\n\n", &err);
    free(s);
}

static void event(srv_out *o, int what, const char *s, size_t n) {
    if (!o->stream) return;
    switch (o->api) {
    case SRV_API_CHAT:
    case SRV_API_COMPLETIONS: srv_chat_event(o, what, s, n); break;
    case SRV_API_RESPONSES: srv_resp_event(o, what, s, n); break;
    case SRV_API_MESSAGES: srv_msg_event(o, what, s, n); break;
    }
}

void srv_out_begin(srv_out *o) {
    if (o->begun) return;
    o->begun = true;
    event(o, SRV_EV_BEGIN, NULL, 0);
}

void srv_out_reasoning(srv_out *o, const char *s, size_t n) {
    dsv4_error err;
    if (!n) return;
    dsv4_strbuf_append(&o->reasoning, s, n, &err);
    event(o, SRV_EV_REASONING, s, n);
}

void srv_out_text(srv_out *o, const char *s, size_t n) {
    dsv4_error err;
    if (!n) return;
    dsv4_strbuf_append(&o->content, s, n, &err);
    event(o, SRV_EV_TEXT, s, n);
}

size_t srv_out_tool_begin(srv_out *o, const char *name) {
    if (o->n_calls == o->cap_calls) {
        size_t cap = o->cap_calls ? o->cap_calls * 2 : 4;
        srv_call *c = realloc(o->calls, cap * sizeof *c);
        if (!c) return SIZE_MAX;
        o->calls = c;
        o->cap_calls = cap;
    }
    srv_call *c = &o->calls[o->n_calls];
    memset(c, 0, sizeof *c);
    srv_rand_id(o, o->api == SRV_API_MESSAGES ? "toolu_" : "call_", c->id, sizeof c->id);
    srv_rand_id(o, "fc_", c->item_id, sizeof c->item_id);
    c->name = strdup(name ? name : "");
    if (!c->name) return SIZE_MAX;
    o->n_calls++;
    event(o, SRV_EV_TOOL_BEGIN, name, strlen(c->name));
    return o->n_calls - 1;
}

void srv_out_tool_args(srv_out *o, const char *s, size_t n) {
    dsv4_error err;
    if (!o->n_calls || !n) return;
    dsv4_strbuf_append(&o->calls[o->n_calls - 1].args, s, n, &err);
    event(o, SRV_EV_TOOL_ARGS, s, n);
}

void srv_out_tool_end(srv_out *o) {
    if (o->n_calls) event(o, SRV_EV_TOOL_END, NULL, 0);
}

void srv_out_drop_calls(srv_out *o, size_t from) {
    while (o->n_calls > from) {
        srv_call *c = &o->calls[--o->n_calls];
        free(c->name);
        dsv4_strbuf_free(&c->args);
    }
}

void srv_out_finish(srv_out *o) { event(o, SRV_EV_FINISH, NULL, 0); }

void srv_out_stream_error(srv_out *o, const srv_err *e) {
    char *body = srv_error_body(o->api, e);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    free(body);
    if (!j) return;
    if (o->api == SRV_API_MESSAGES) {
        srv_sse(o, "error", j);
    } else if (o->api == SRV_API_RESPONSES) {
        json_t *ev = json_object();
        json_object_set_new(ev, "type", json_string("error"));
        json_object_set_new(ev, "sequence_number", json_integer((json_int_t)o->seq++));
        json_object_set(ev, "code", json_object_get(json_object_get(j, "error"), "code"));
        json_object_set(ev, "message", json_object_get(json_object_get(j, "error"), "message"));
        json_object_set_new(ev, "param", json_null());
        json_decref(j);
        srv_sse(o, "error", ev);
    } else {
        srv_sse(o, NULL, j);
        dsv4_error err;
        dsv4_strbuf_puts(&o->sse, "data: [DONE]\n\n", &err);
    }
}

char *srv_out_body(srv_out *o) {
    switch (o->api) {
    case SRV_API_CHAT:
    case SRV_API_COMPLETIONS: return srv_chat_body(o);
    case SRV_API_RESPONSES: return srv_resp_body(o);
    case SRV_API_MESSAGES: return srv_msg_body(o);
    }
    return NULL;
}
