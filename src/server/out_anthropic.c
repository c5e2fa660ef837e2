/* Anthropic Messages shapes: the message object and the streamed events (message_start, ping,
 * content_block_start/delta/stop with thinking_delta, text_delta and input_json_delta,
 * message_delta with stop_reason and usage, message_stop). */
#include <string.h>

#include "server/out.h"

static const char *stop_reason(const srv_out *o) {
    if (o->finish == SRV_FINISH_LENGTH) return "max_tokens";
    if (o->finish == SRV_FINISH_TOOLS) return "tool_use";
    return o->stop_seq ? "stop_sequence" : "end_turn";
}

/* input_tokens excludes the prompt tokens read from the cache (Anthropic's accounting). */
static json_t *usage(const srv_out *o, bool with_output) {
    json_t *u = json_pack("{s:I,s:I,s:I}", "input_tokens", (json_int_t)(o->prompt_tokens - o->cached_tokens),
                          "cache_read_input_tokens", (json_int_t)o->cached_tokens,
                          "cache_creation_input_tokens", (json_int_t)0);
    json_object_set_new(u, "output_tokens", json_integer(with_output ? (json_int_t)o->completion_tokens : 0));
    return u;
}

static json_t *tool_input(const srv_call *c) {
    json_t *in = c->args.len ? json_loadb(c->args.data, c->args.len, 0, NULL) : NULL;
    if (!json_is_object(in)) {
        json_decref(in);
        in = json_object();
    }
    return in;
}

static void close_block(srv_out *o) {
    if (o->phase == SRV_PH_NONE) return;
    srv_sse(o, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", o->block));
    o->phase = SRV_PH_NONE;
}

static void open_block(srv_out *o, srv_phase ph) {
    if (o->phase == ph && ph != SRV_PH_TOOL) return;
    close_block(o);
    o->phase = ph;
    o->block = o->n_items++;
    json_t *cb;
    if (ph == SRV_PH_REASONING)
        cb = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
    else if (ph == SRV_PH_TEXT)
        cb = json_pack("{s:s,s:s}", "type", "text", "text", "");
    else
        cb = json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", o->calls[o->n_calls - 1].id, "name",
                       o->calls[o->n_calls - 1].name, "input");
    srv_sse(
        o, "content_block_start",
        json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", o->block, "content_block", cb));
}

static void delta(srv_out *o, json_t *d) {
    srv_sse(o, "content_block_delta",
            json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", o->block, "delta", d));
}

void srv_msg_event(srv_out *o, int what, const char *s, size_t n) {
    switch (what) {
    case SRV_EV_BEGIN: {
        json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", o->id, "type", "message", "role",
                              "assistant", "model", o->model, "content", "stop_reason", "stop_sequence",
                              "usage", usage(o, false));
        srv_sse(o, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", m));
        srv_sse(o, "ping", json_pack("{s:s}", "type", "ping"));
        break;
    }
    case SRV_EV_REASONING:
        open_block(o, SRV_PH_REASONING);
        delta(o, json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", srv_jstrn(s, n)));
        break;
    case SRV_EV_TEXT:
        open_block(o, SRV_PH_TEXT);
        delta(o, json_pack("{s:s,s:o}", "type", "text_delta", "text", srv_jstrn(s, n)));
        break;
    case SRV_EV_TOOL_BEGIN: open_block(o, SRV_PH_TOOL); break;
    case SRV_EV_TOOL_ARGS:
        delta(o, json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", srv_jstrn(s, n)));
        break;
    case SRV_EV_TOOL_END: close_block(o); break;
    case SRV_EV_FINISH:
        close_block(o);
        srv_sse(o, "message_delta",
                json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                          stop_reason(o), "stop_sequence",
                          o->stop_seq ? json_string(o->stop_seq) : json_null(), "usage", usage(o, true)));
        srv_sse(o, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        break;
    }
}

char *srv_msg_body(srv_out *o) {
    json_t *content = json_array();
    if (o->reasoning.len)
        json_array_append_new(content,
                              json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                        srv_jstrn(o->reasoning.data, o->reasoning.len), "signature", ""));
    if (o->content.len || !o->n_calls)
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                 srv_jstrn(o->content.data, o->content.len)));
    for (size_t i = 0; i < o->n_calls; i++)
        json_array_append_new(content,
                              json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", o->calls[i].id, "name",
                                        o->calls[i].name, "input", tool_input(&o->calls[i])));
    json_t *m =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", o->id, "type", "message", "role", "assistant",
                  "model", o->model, "content", content, "stop_reason", stop_reason(o), "stop_sequence",
                  o->stop_seq ? json_string(o->stop_seq) : json_null(), "usage", usage(o, true));
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}
