/* OpenAI Responses shapes: the response object and the streamed event lifecycle
 * (response.created, in_progress, output_item.added/done, content_part.added/done,
 * output_text.delta/done, reasoning_text.delta/done, function_call_arguments.delta/done,
 * response.completed | response.incomplete), each event with a sequence_number. */
#include <stdio.h>
#include <string.h>

#include "server/out.h"

static json_t *usage(const srv_out *o) {
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)o->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)o->cached_tokens, "output_tokens",
                     (json_int_t)o->completion_tokens, "output_tokens_details", "reasoning_tokens",
                     (json_int_t)o->reasoning_tokens, "total_tokens",
                     (json_int_t)(o->prompt_tokens + o->completion_tokens));
}

/* Item ids are derived from the response id so streamed and final objects agree. */
static void item_id(const srv_out *o, const char *prefix, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", prefix, o->id + 5);
}

static json_t *reasoning_item(const srv_out *o, bool done) {
    char id[64];
    item_id(o, "rs_", id, sizeof id);
    json_t *it = json_pack("{s:s,s:s,s:[]}", "id", id, "type", "reasoning", "summary");
    if (done)
        json_object_set_new(it, "content",
                            json_pack("[{s:s,s:o}]", "type", "reasoning_text", "text",
                                      srv_jstrn(o->reasoning.data, o->reasoning.len)));
    return it;
}

static json_t *text_part(const srv_out *o, bool done) {
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text",
                     done ? srv_jstrn(o->content.data, o->content.len) : json_string(""), "annotations");
}

static json_t *message_item(const srv_out *o, bool done) {
    char id[64];
    item_id(o, "msg_", id, sizeof id);
    json_t *content = done ? json_pack("[o]", text_part(o, true)) : json_array();
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

static json_t *call_item(const srv_call *c, bool done) {
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "id", c->item_id, "type", "function_call", "status",
                     done ? "completed" : "in_progress", "call_id", c->id, "name", c->name, "arguments",
                     done ? srv_jstrn(c->args.data, c->args.len) : json_string(""));
}

static json_t *response_obj(const srv_out *o, const char *status, bool final) {
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:s,s:n,s:n,s:b,s:s,s:[],s:{s:{s:s}},s:{}}", "id", o->id,
                          "object", "response", "created_at", (json_int_t)o->created, "status", status,
                          "model", o->model, "error", "incomplete_details", "parallel_tool_calls", 1,
                          "tool_choice", "auto", "tools", "text", "format", "type", "text", "metadata");
    json_t *out = json_array();
    if (final) {
        if (o->reasoning.len) json_array_append_new(out, reasoning_item(o, true));
        if (o->content.len || (!o->n_calls && !o->reasoning.len))
            json_array_append_new(out, message_item(o, true));
        for (size_t i = 0; i < o->n_calls; i++) json_array_append_new(out, call_item(&o->calls[i], true));
        json_object_set_new(r, "usage", usage(o));
        if (o->finish == SRV_FINISH_LENGTH)
            json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    } else {
        json_object_set_new(r, "usage", json_null());
    }
    json_object_set_new(r, "output", out);
    return r;
}

static void ev(srv_out *o, const char *type, json_t *data) {
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer((json_int_t)o->seq++));
    srv_sse(o, type, data);
}

static void close_item(srv_out *o) {
    const json_int_t idx = o->block;
    char id[64];
    switch (o->phase) {
    case SRV_PH_REASONING:
        item_id(o, "rs_", id, sizeof id);
        ev(o, "response.reasoning_text.done",
           json_pack("{s:s,s:I,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "text",
                     srv_jstrn(o->reasoning.data, o->reasoning.len)));
        ev(o, "response.output_item.done",
           json_pack("{s:I,s:o}", "output_index", idx, "item", reasoning_item(o, true)));
        break;
    case SRV_PH_TEXT:
        item_id(o, "msg_", id, sizeof id);
        ev(o, "response.output_text.done",
           json_pack("{s:s,s:I,s:i,s:o,s:[]}", "item_id", id, "output_index", idx, "content_index", 0, "text",
                     srv_jstrn(o->content.data, o->content.len), "logprobs"));
        ev(o, "response.content_part.done",
           json_pack("{s:s,s:I,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "part",
                     text_part(o, true)));
        ev(o, "response.output_item.done",
           json_pack("{s:I,s:o}", "output_index", idx, "item", message_item(o, true)));
        break;
    case SRV_PH_TOOL: {
        const srv_call *c = &o->calls[o->n_calls - 1];
        ev(o, "response.function_call_arguments.done",
           json_pack("{s:s,s:I,s:s,s:o}", "item_id", c->item_id, "output_index", idx, "name", c->name,
                     "arguments", srv_jstrn(c->args.data, c->args.len)));
        ev(o, "response.output_item.done",
           json_pack("{s:I,s:o}", "output_index", idx, "item", call_item(c, true)));
        break;
    }
    case SRV_PH_NONE: break;
    }
    o->phase = SRV_PH_NONE;
}

static void open_item(srv_out *o, srv_phase ph) {
    if (o->phase == ph) return;
    close_item(o);
    o->phase = ph;
    o->block = o->n_items++;
    const json_int_t idx = o->block;
    char id[64];
    if (ph == SRV_PH_REASONING) {
        ev(o, "response.output_item.added",
           json_pack("{s:I,s:o}", "output_index", idx, "item", reasoning_item(o, false)));
    } else if (ph == SRV_PH_TEXT) {
        item_id(o, "msg_", id, sizeof id);
        ev(o, "response.output_item.added",
           json_pack("{s:I,s:o}", "output_index", idx, "item", message_item(o, false)));
        ev(o, "response.content_part.added",
           json_pack("{s:s,s:I,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "part",
                     text_part(o, false)));
    } else if (ph == SRV_PH_TOOL) {
        ev(o, "response.output_item.added",
           json_pack("{s:I,s:o}", "output_index", idx, "item", call_item(&o->calls[o->n_calls - 1], false)));
    }
}

void srv_resp_event(srv_out *o, int what, const char *s, size_t n) {
    char id[64];
    switch (what) {
    case SRV_EV_BEGIN:
        ev(o, "response.created", json_pack("{s:o}", "response", response_obj(o, "in_progress", false)));
        ev(o, "response.in_progress", json_pack("{s:o}", "response", response_obj(o, "in_progress", false)));
        break;
    case SRV_EV_REASONING:
        open_item(o, SRV_PH_REASONING);
        item_id(o, "rs_", id, sizeof id);
        ev(o, "response.reasoning_text.delta",
           json_pack("{s:s,s:I,s:i,s:o}", "item_id", id, "output_index", (json_int_t)o->block,
                     "content_index", 0, "delta", srv_jstrn(s, n)));
        break;
    case SRV_EV_TEXT:
        open_item(o, SRV_PH_TEXT);
        item_id(o, "msg_", id, sizeof id);
        ev(o, "response.output_text.delta",
           json_pack("{s:s,s:I,s:i,s:o,s:[]}", "item_id", id, "output_index", (json_int_t)o->block,
                     "content_index", 0, "delta", srv_jstrn(s, n), "logprobs"));
        break;
    case SRV_EV_TOOL_BEGIN:
        close_item(o);
        open_item(o, SRV_PH_TOOL);
        break;
    case SRV_EV_TOOL_ARGS:
        ev(o, "response.function_call_arguments.delta",
           json_pack("{s:s,s:I,s:o}", "item_id", o->calls[o->n_calls - 1].item_id, "output_index",
                     (json_int_t)o->block, "delta", srv_jstrn(s, n)));
        break;
    case SRV_EV_TOOL_END: close_item(o); break;
    case SRV_EV_FINISH: {
        close_item(o);
        const bool incomplete = o->finish == SRV_FINISH_LENGTH;
        const char *st = incomplete ? "incomplete" : "completed";
        ev(o, incomplete ? "response.incomplete" : "response.completed",
           json_pack("{s:o}", "response", response_obj(o, st, true)));
        break;
    }
    }
}

char *srv_resp_body(srv_out *o) {
    json_t *r = response_obj(o, o->finish == SRV_FINISH_LENGTH ? "incomplete" : "completed", true);
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}
