/* OpenAI Responses request bodies: instructions + input (a string or a list of message,
 * function_call, function_call_output and reasoning items), flat function tools, reasoning.effort,
 * max_output_tokens. */
#include <stdio.h>
#include <string.h>

#include "server/req_internal.h"

static const char *const RESP_TEXT_TYPES[] = {"input_text",   "output_text",    "text",
                                              "summary_text", "reasoning_text", NULL};

/* The assistant message that function_call items attach to: the last message if it is an
 * assistant turn with no later user/tool message, else a new one. */
static dsv4_chat_message *assistant_tail(srv_request *r) {
    if (r->n_msgs && r->msgs[r->n_msgs - 1].role == DSV4_ROLE_ASSISTANT) return &r->msgs[r->n_msgs - 1];
    return rq_add_msg(r, DSV4_ROLE_ASSISTANT);
}

typedef struct {
    const char **ids;
    size_t n, cap;
    dsv4_chat_message *owner;
} call_ids;

static void flush_ids(srv_request *r, const srv_parse_ctx *ctx, call_ids *c) {
    if (c->owner && c->n) rq_replay_dsml(r, ctx, c->owner, c->ids, c->n);
    c->n = 0;
    c->owner = NULL;
}

static bool parse_input(json_t *input, const srv_parse_ctx *ctx, srv_request *r, srv_err *e) {
    if (json_is_string(input)) {
        dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_USER);
        if (!m) return rq_oom(e);
        if (!(m->content = rq_strdup(r, json_string_value(input)))) return rq_oom(e);
        return true;
    }
    if (!json_is_array(input)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", "input",
                    "'input' must be a string or an array of items");
        return false;
    }
    call_ids ids = {0};
    const char *pending_reasoning = NULL;
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        char p[64], cp[96];
        rq_path(p, sizeof p, "input[%zu]", i);
        if (!json_is_object(it)) return rq_need(e, p, "must be an object");
        const char *type = NULL, *role_s = NULL;
        if (!rq_string(it, p, "type", &type, e) || !rq_string(it, p, "role", &role_s, e)) return false;
        if (!type) type = role_s ? "message" : "";
        if (!strcmp(type, "message")) {
            dsv4_chat_role role;
            if (!role_s) return rq_need(e, p, "needs a role");
            if (!dsv4_chat_role_from_name(role_s, &role) || role == DSV4_ROLE_TOOL) {
                rq_path(cp, sizeof cp, "%s.role", p);
                srv_err_set(e, 400, "invalid_request_error", "invalid_value", cp,
                            "'%s' must be system, developer, user or assistant", cp);
                return false;
            }
            if (role != DSV4_ROLE_ASSISTANT) flush_ids(r, ctx, &ids);
            dsv4_chat_message *m = rq_add_msg(r, role);
            if (!m) return rq_oom(e);
            rq_path(cp, sizeof cp, "%s.content", p);
            if (!rq_text_content(r, json_object_get(it, "content"), cp, RESP_TEXT_TYPES, &m->content, e))
                return false;
            if (role == DSV4_ROLE_ASSISTANT) {
                m->reasoning = pending_reasoning;
                pending_reasoning = NULL;
            }
        } else if (!strcmp(type, "function_call")) {
            const char *name = NULL, *call_id = NULL;
            if (!rq_string(it, p, "name", &name, e) || !rq_string(it, p, "call_id", &call_id, e))
                return false;
            if (!name || !*name) return rq_need(e, p, "needs a name");
            if (!call_id) return rq_need(e, p, "needs a call_id");
            dsv4_chat_message *m = assistant_tail(r);
            if (!m) return rq_oom(e);
            if (pending_reasoning && !m->reasoning) m->reasoning = pending_reasoning;
            pending_reasoning = NULL;
            json_t *args = json_object_get(it, "arguments");
            rq_path(cp, sizeof cp, "%s.arguments", p);
            if (args && !json_is_null(args) && !json_is_string(args))
                return rq_need(e, cp, "must be a string");
            if (!rq_add_call(r, m, name, args, cp, e)) return false;
            if (ids.owner != m) flush_ids(r, ctx, &ids), ids.owner = m;
            if (ids.n == ids.cap) {
                size_t cap = ids.cap ? ids.cap * 2 : 8;
                const char **nid = rq_own(r, calloc(cap, sizeof *nid));
                if (!nid) return rq_oom(e);
                if (ids.n) memcpy(nid, ids.ids, ids.n * sizeof *nid);
                ids.ids = nid;
                ids.cap = cap;
            }
            ids.ids[ids.n++] = call_id;
        } else if (!strcmp(type, "function_call_output")) {
            const char *call_id = NULL;
            if (!rq_string(it, p, "call_id", &call_id, e)) return false;
            if (!call_id) return rq_need(e, p, "needs a call_id");
            json_t *output = json_object_get(it, "output");
            if (!output || json_is_null(output)) return rq_need(e, p, "needs an output");
            flush_ids(r, ctx, &ids);
            dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_TOOL);
            if (!m) return rq_oom(e);
            rq_path(cp, sizeof cp, "%s.output", p);
            if (!rq_text_content(r, json_object_get(it, "output"), cp, RESP_TEXT_TYPES, &m->content, e))
                return false;
        } else if (!strcmp(type, "reasoning")) {
            const char *text = NULL;
            rq_path(cp, sizeof cp, "%s.content", p);
            json_t *content = json_object_get(it, "content");
            if (content && !json_is_null(content)) {
                if (!rq_text_content(r, content, cp, RESP_TEXT_TYPES, &text, e)) return false;
            } else {
                rq_path(cp, sizeof cp, "%s.summary", p);
                if (!rq_text_content(r, json_object_get(it, "summary"), cp, RESP_TEXT_TYPES, &text, e))
                    return false;
            }
            pending_reasoning = text;
        } else {
            rq_path(cp, sizeof cp, "%s.type", p);
            srv_err_set(e, 400, "invalid_request_error", "invalid_value", cp, "'%s' '%s' is not supported",
                        cp, type);
            return false;
        }
    }
    flush_ids(r, ctx, &ids);
    return true;
}

bool rq_parse_responses(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e) {
    const char *instr = NULL;
    if (!rq_string(root, "", "instructions", &instr, e)) return false;
    if (instr && *instr) {
        dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_SYSTEM);
        if (!m) return rq_oom(e);
        if (!(m->content = rq_strdup(r, instr))) return rq_oom(e);
    }
    json_t *input = json_object_get(root, "input");
    if (!input || json_is_null(input)) return rq_need(e, "input", "is required");
    if (!parse_input(input, ctx, r, e)) return false;
    if (!rq_max_tokens(root, "max_output_tokens", r, NULL, e)) return false;
    if (!rq_stop(root, "stop", r, e)) return false;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return rq_need(e, "tools", "must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            char p[64];
            rq_path(p, sizeof p, "tools[%zu]", i);
            if (!json_is_object(t)) return rq_need(e, p, "must be an object");
            const char *type = NULL;
            if (!rq_string(t, p, "type", &type, e)) return false;
            if (!type || strcmp(type, "function") != 0) continue; /* built-in tools are not offered */
            if (!rq_add_tool(r, json_object_get(t, "name"), json_object_get(t, "description"),
                             json_object_get(t, "parameters"), p, e))
                return false;
        }
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none"))
        r->tool_choice = SRV_TOOLS_NONE;
    else if (json_is_string(tc) && !strcmp(json_string_value(tc), "required")) {
        if (!rq_force_tool(r, NULL, "tool_choice", e)) return false;
    } else if (json_is_object(tc)) {
        /* {"type":"function","name":F}; {"type":"allowed_tools","mode":"required"}; hosted tool
         * choices are accepted and not enforced */
        const char *type = NULL, *name = NULL, *mode = NULL;
        if (!rq_string(tc, "tool_choice", "type", &type, e)) return false;
        if (type && !strcmp(type, "function")) {
            if (!rq_string(tc, "tool_choice", "name", &name, e)) return false;
            if (!name) {
                srv_err_set(e, 400, "invalid_request_error", "invalid_value", "tool_choice.name",
                            "'tool_choice.name' must be a string");
                return false;
            }
            if (!rq_force_tool(r, name, "tool_choice.name", e)) return false;
        } else if (type && !strcmp(type, "allowed_tools")) {
            if (!rq_string(tc, "tool_choice", "mode", &mode, e)) return false;
            if (mode && !strcmp(mode, "required") && !rq_force_tool(r, NULL, "tool_choice", e)) return false;
        }
    } else if (tc && !json_is_null(tc) && !json_is_string(tc)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", "tool_choice",
                    "'tool_choice' must be a string or an object");
        return false;
    }
    const char *effort = NULL;
    json_t *reasoning = json_object_get(root, "reasoning");
    if (reasoning && !json_is_null(reasoning)) {
        if (!json_is_object(reasoning)) {
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", "reasoning",
                        "'reasoning' must be an object");
            return false;
        }
        if (!rq_string(reasoning, "reasoning", "effort", &effort, e)) return false;
    }
    bool think = false, has = false;
    if (!rq_bool(root, "", "think", &think, &has, e)) return false;
    return rq_think(r, ctx, effort, has ? (int)think : -1, "reasoning.effort", e);
}
