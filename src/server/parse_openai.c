/* OpenAI Chat Completions and (legacy) Completions request bodies. */
#include <stdio.h>
#include <string.h>

#include "server/req_internal.h"

static const char *const CHAT_TEXT_TYPES[] = {"text", "input_text", "output_text", NULL};

/* "think": false/true (ds4 extension) */
static bool think_switch(json_t *root, int *enabled, srv_err *e) {
    bool v = false, has = false;
    if (!rq_bool(root, "", "think", &v, &has, e)) return false;
    *enabled = has ? (int)v : -1;
    return true;
}

static bool parse_tools_openai(json_t *root, srv_request *r, srv_err *e) {
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
            if (type && strcmp(type, "function") != 0)
                return rq_need(e, p, "has an unsupported type (only function)");
            json_t *fn = json_object_get(t, "function");
            char fp[80];
            rq_path(fp, sizeof fp, "%s.function", p);
            if (!json_is_object(fn)) return rq_need(e, fp, "must be an object");
            if (!rq_add_tool(r, json_object_get(fn, "name"), json_object_get(fn, "description"),
                             json_object_get(fn, "parameters"), fp, e))
                return false;
        }
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "none"))
                r->tool_choice = SRV_TOOLS_NONE;
            else if (!strcmp(s, "required")) {
                if (!rq_force_tool(r, NULL, "tool_choice", e)) return false;
            } else if (strcmp(s, "auto") != 0)
                return rq_need(e, "tool_choice", "must be none, auto, required or a function object");
        } else if (json_is_object(tc)) {
            /* {"type":"function","function":{"name":F}}, or {"type":"allowed_tools",
             * "allowed_tools":{"mode":"auto"|"required",...}} (the subset is not enforced) */
            const char *type = NULL, *name = NULL;
            if (!rq_string(tc, "tool_choice", "type", &type, e)) return false;
            json_t *fn = json_object_get(tc, "function"), *at = json_object_get(tc, "allowed_tools");
            if (type && !strcmp(type, "function")) {
                if (json_is_object(fn) && !rq_string(fn, "tool_choice.function", "name", &name, e))
                    return false;
                if (!name) return rq_need(e, "tool_choice.function.name", "must be a string");
                if (!rq_force_tool(r, name, "tool_choice.function.name", e)) return false;
            } else if (type && !strcmp(type, "allowed_tools") && json_is_object(at)) {
                const char *mode = NULL;
                if (!rq_string(at, "tool_choice.allowed_tools", "mode", &mode, e)) return false;
                if (mode && !strcmp(mode, "required") && !rq_force_tool(r, NULL, "tool_choice", e))
                    return false;
            } else {
                return rq_need(e, "tool_choice", "must be none, auto, required or a function object");
            }
        } else {
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", "tool_choice",
                        "'tool_choice' must be a string or an object");
            return false;
        }
    }
    return true;
}

static bool parse_assistant_calls(srv_request *r, const srv_parse_ctx *ctx, json_t *calls, const char *path,
                                  dsv4_chat_message *m, srv_err *e) {
    if (!calls || json_is_null(calls)) return true;
    if (!json_is_array(calls)) return rq_need(e, path, "must be an array");
    const size_t n = json_array_size(calls);
    const char **ids = rq_own(r, calloc(n ? n : 1, sizeof *ids));
    if (!ids) return rq_oom(e);
    for (size_t j = 0; j < n; j++) {
        json_t *c = json_array_get(calls, j);
        char p[96], fp[112];
        rq_path(p, sizeof p, "%s[%zu]", path, j);
        if (!json_is_object(c)) return rq_need(e, p, "must be an object");
        if (!rq_string(c, p, "id", &ids[j], e)) return false;
        json_t *fn = json_object_get(c, "function");
        rq_path(fp, sizeof fp, "%s.function", p);
        if (!json_is_object(fn)) return rq_need(e, fp, "must be an object");
        const char *name = NULL;
        if (!rq_string(fn, fp, "name", &name, e)) return false;
        if (!name || !*name) return rq_need(e, fp, "needs a non-empty name");
        json_t *args = json_object_get(fn, "arguments");
        rq_path(fp, sizeof fp, "%s.function.arguments", p);
        if (args && !json_is_null(args) && !json_is_string(args) && !json_is_object(args))
            return rq_need(e, fp, "must be a JSON string");
        if (!rq_add_call(r, m, name, args, fp, e)) return false;
    }
    rq_replay_dsml(r, ctx, m, ids, n);
    return true;
}

bool rq_parse_chat(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e) {
    json_t *msgs;
    if (!rq_messages(root, &msgs, e)) return false;
    size_t i;
    json_t *mj;
    json_array_foreach(msgs, i, mj) {
        char p[64], cp[80];
        rq_path(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(mj)) return rq_need(e, p, "must be an object");
        const char *role_s = NULL;
        if (!rq_string(mj, p, "role", &role_s, e)) return false;
        dsv4_chat_role role;
        if (!role_s) return rq_need(e, p, "needs a role");
        if (!dsv4_chat_role_from_name(role_s, &role)) {
            rq_path(cp, sizeof cp, "%s.role", p);
            srv_err_set(e, 400, "invalid_request_error", "invalid_value", cp,
                        "'%s' must be system, developer, user, assistant, tool or function", cp);
            return false;
        }
        dsv4_chat_message *m = rq_add_msg(r, role);
        if (!m) return rq_oom(e);
        rq_path(cp, sizeof cp, "%s.content", p);
        if (!rq_text_content(r, json_object_get(mj, "content"), cp, CHAT_TEXT_TYPES, &m->content, e))
            return false;
        if (role == DSV4_ROLE_ASSISTANT) {
            const char *reasoning = NULL;
            if (!rq_string(mj, p, "reasoning_content", &reasoning, e)) return false;
            if (!reasoning && !rq_string(mj, p, "reasoning", &reasoning, e)) return false;
            if (reasoning && !(m->reasoning = rq_strdup(r, reasoning))) return rq_oom(e);
            rq_path(cp, sizeof cp, "%s.tool_calls", p);
            if (!parse_assistant_calls(r, ctx, json_object_get(mj, "tool_calls"), cp, m, e)) return false;
        }
    }
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", "stream_options",
                        "'stream_options' must be an object");
            return false;
        }
        if (!rq_bool(so, "stream_options", "include_usage", &r->include_usage, NULL, e)) return false;
    }
    if (!rq_max_tokens(root, "max_tokens", r, NULL, e)) return false;
    if (!rq_max_tokens(root, "max_completion_tokens", r, NULL, e)) return false;
    if (!rq_stop(root, "stop", r, e)) return false;
    if (!parse_tools_openai(root, r, e)) return false;
    const char *effort = NULL;
    if (!rq_string(root, "", "reasoning_effort", &effort, e)) return false;
    const char *epath = "reasoning_effort";
    json_t *reasoning = json_object_get(root, "reasoning");
    if (!effort && json_is_object(reasoning)) {
        if (!rq_string(reasoning, "reasoning", "effort", &effort, e)) return false;
        epath = "reasoning.effort";
    }
    int enabled;
    if (!think_switch(root, &enabled, e)) return false;
    return rq_think(r, ctx, effort, enabled, epath, e);
}

bool rq_parse_completions(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return rq_need(e, "prompt", "is required");
    const char *text = NULL;
    if (json_is_string(p)) {
        text = json_string_value(p);
    } else if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) {
        text = json_string_value(json_array_get(p, 0));
    } else {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", "prompt",
                    "'prompt' must be a string (or an array of one string)");
        return false;
    }
    if (!(r->raw_prompt = rq_strdup(r, text))) return rq_oom(e);
    json_t *so = json_object_get(root, "stream_options");
    if (json_is_object(so) && !rq_bool(so, "stream_options", "include_usage", &r->include_usage, NULL, e))
        return false;
    if (!rq_max_tokens(root, "max_tokens", r, NULL, e)) return false;
    if (!rq_stop(root, "stop", r, e)) return false;
    bool echo = false;
    if (!rq_bool(root, "", "echo", &echo, NULL, e)) return false;
    /* a raw prompt has no chat template: the mode only matters for the sampling defaults */
    r->think = DSV4_THINK_NONE;
    (void)ctx;
    return true;
}
