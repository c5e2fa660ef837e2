/* OpenAI Chat Completions (chat.completion / chat.completion.chunk) and legacy Completions
 * (text_completion) shapes. */
#include <string.h>

#include "server/out.h"

static const char *finish_name(const srv_out *o) {
    return o->finish == SRV_FINISH_LENGTH ? "length" : o->finish == SRV_FINISH_TOOLS ? "tool_calls" : "stop";
}

static json_t *usage(const srv_out *o) {
    return json_pack("{s:I,s:I,s:I,s:{s:I},s:{s:I}}", "prompt_tokens", (json_int_t)o->prompt_tokens,
                     "completion_tokens", (json_int_t)o->completion_tokens, "total_tokens",
                     (json_int_t)(o->prompt_tokens + o->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)o->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)o->reasoning_tokens);
}

static json_t *base(const srv_out *o, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", o->id, "object", object, "created",
                     (json_int_t)o->created, "model", o->model, "system_fingerprint", "dsv4");
}

static void chunk(srv_out *o, json_t *delta, const char *finish) {
    const bool chat = o->api == SRV_API_CHAT;
    json_t *c = base(o, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i,s:n,s:o}", "index", 0, "logprobs", "finish_reason",
                               finish ? json_string(finish) : json_null());
    if (chat) {
        json_object_set_new(choice, "delta", delta);
    } else {
        json_t *t = json_object_get(delta, "content");
        json_object_set_new(choice, "text", t ? json_incref(t) : json_string(""));
        json_decref(delta);
    }
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    if (o->include_usage) json_object_set_new(c, "usage", json_null());
    srv_sse(o, NULL, c);
}

void srv_chat_event(srv_out *o, int what, const char *s, size_t n) {
    dsv4_error err;
    switch (what) {
    case SRV_EV_BEGIN:
        if (o->api == SRV_API_CHAT)
            chunk(o, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL);
        break;
    case SRV_EV_REASONING:
        if (o->api == SRV_API_CHAT) chunk(o, json_pack("{s:o}", "reasoning_content", srv_jstrn(s, n)), NULL);
        break;
    case SRV_EV_TEXT: chunk(o, json_pack("{s:o}", "content", srv_jstrn(s, n)), NULL); break;
    case SRV_EV_TOOL_BEGIN: {
        const srv_call *c = &o->calls[o->n_calls - 1];
        json_t *tc = json_pack("{s:I,s:s,s:s,s:{s:s,s:s}}", "index", (json_int_t)(o->n_calls - 1), "id",
                               c->id, "type", "function", "function", "name", c->name, "arguments", "");
        chunk(o, json_pack("{s:[o]}", "tool_calls", tc), NULL);
        break;
    }
    case SRV_EV_TOOL_ARGS: {
        json_t *tc = json_pack("{s:I,s:{s:o}}", "index", (json_int_t)(o->n_calls - 1), "function",
                               "arguments", srv_jstrn(s, n));
        chunk(o, json_pack("{s:[o]}", "tool_calls", tc), NULL);
        break;
    }
    case SRV_EV_TOOL_END: break;
    case SRV_EV_FINISH:
        chunk(o, json_object(), finish_name(o));
        if (o->include_usage) {
            json_t *c = base(o, o->api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(c, "choices", json_array());
            json_object_set_new(c, "usage", usage(o));
            srv_sse(o, NULL, c);
        }
        dsv4_strbuf_puts(&o->sse, "data: [DONE]\n\n", &err);
        break;
    }
}

char *srv_chat_body(srv_out *o) {
    const bool chat = o->api == SRV_API_CHAT;
    json_t *r = base(o, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_pack("{s:i,s:n,s:s}", "index", 0, "logprobs", "finish_reason", finish_name(o));
    if (chat) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content",
                            o->content.len || !o->n_calls ? srv_jstrn(o->content.data, o->content.len)
                                                          : json_null());
        if (o->reasoning.len)
            json_object_set_new(msg, "reasoning_content", srv_jstrn(o->reasoning.data, o->reasoning.len));
        if (o->n_calls) {
            json_t *calls = json_array();
            for (size_t i = 0; i < o->n_calls; i++) {
                const srv_call *c = &o->calls[i];
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", c->id, "type",
                                                       "function", "function", "name", c->name, "arguments",
                                                       srv_jstrn(c->args.data, c->args.len)));
            }
            json_object_set_new(msg, "tool_calls", calls);
        }
        json_object_set_new(choice, "message", msg);
    } else {
        json_object_set_new(choice, "text", srv_jstrn(o->content.data, o->content.len));
    }
    json_object_set_new(r, "choices", json_pack("[o]", choice));
    json_object_set_new(r, "usage", usage(o));
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}
