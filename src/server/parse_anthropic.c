/* Anthropic Messages request bodies: system (string or text blocks), user/assistant messages
 * with text, thinking, tool_use and tool_result blocks, tools with input_schema, thinking
 * {type: enabled|disabled}, stop_sequences, required max_tokens. */
#include <stdio.h>
#include <string.h>

#include "server/req_internal.h"

static const char *const TEXT_TYPES[] = {"text", NULL};

static bool user_blocks(srv_request *r, json_t *content, const char *path, srv_err *e) {
    dsv4_strbuf text = {0};
    dsv4_error de;
    size_t i;
    json_t *b;
    bool ok = true;
    json_array_foreach(content, i, b) {
        char p[96], cp[112];
        rq_path(p, sizeof p, "%s[%zu]", path, i);
        const char *type = NULL;
        if (!json_is_object(b) || !rq_string(b, p, "type", &type, e) || !type) {
            if (!json_is_object(b) || !type)
                ok = rq_need(e, p, "must be an object with a type");
            else
                ok = false;
            break;
        }
        if (!strcmp(type, "text")) {
            const char *t = NULL;
            if (!(ok = rq_string(b, p, "text", &t, e))) break;
            if (text.len) dsv4_strbuf_puts(&text, "\n", &de);
            if (dsv4_strbuf_puts(&text, t ? t : "", &de) != DSV4_OK) {
                ok = rq_oom(e);
                break;
            }
        } else if (!strcmp(type, "tool_result")) {
            const char *use_id = NULL;
            if (!(ok = rq_string(b, p, "tool_use_id", &use_id, e))) break;
            if (!use_id) {
                ok = rq_need(e, p, "needs a tool_use_id");
                break;
            }
            dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_TOOL);
            if (!m) {
                ok = rq_oom(e);
                break;
            }
            rq_path(cp, sizeof cp, "%s.content", p);
            if (!(ok = rq_text_content(r, json_object_get(b, "content"), cp, TEXT_TYPES, &m->content, e)))
                break;
        } else {
            rq_path(cp, sizeof cp, "%s.type", p);
            srv_err_set(e, 400, "invalid_request_error", "unsupported_content", cp,
                        "'%s' '%s' is not supported in user messages", cp, type);
            ok = false;
            break;
        }
    }
    if (ok && text.len) {
        dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_USER);
        if (!m || !(m->content = rq_own(r, text.data))) return rq_oom(e);
        return true;
    }
    dsv4_strbuf_free(&text);
    return ok;
}

static bool assistant_blocks(srv_request *r, const srv_parse_ctx *ctx, json_t *content, const char *path,
                             srv_err *e) {
    dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_ASSISTANT);
    if (!m) return rq_oom(e);
    const size_t n = json_array_size(content);
    const char **ids = rq_own(r, calloc(n ? n : 1, sizeof *ids));
    if (!ids) return rq_oom(e);
    size_t n_ids = 0;
    dsv4_strbuf text = {0}, thinking = {0};
    dsv4_error de;
    for (size_t i = 0; i < n; i++) {
        json_t *b = json_array_get(content, i);
        char p[96], cp[112];
        rq_path(p, sizeof p, "%s[%zu]", path, i);
        const char *type = NULL;
        if (!json_is_object(b)) goto bad_obj;
        if (!rq_string(b, p, "type", &type, e)) goto fail;
        if (!type) goto bad_obj;
        if (!strcmp(type, "text") || !strcmp(type, "thinking")) {
            const bool th = type[1] == 'h';
            const char *t = NULL;
            if (!rq_string(b, p, th ? "thinking" : "text", &t, e)) goto fail;
            dsv4_strbuf *dst = th ? &thinking : &text;
            if (dsv4_strbuf_puts(dst, t ? t : "", &de) != DSV4_OK) goto oom;
        } else if (!strcmp(type, "redacted_thinking")) {
            continue;
        } else if (!strcmp(type, "tool_use")) {
            const char *name = NULL;
            if (!rq_string(b, p, "name", &name, e) || !rq_string(b, p, "id", &ids[n_ids], e)) goto fail;
            if (!name || !*name || !ids[n_ids]) {
                rq_need(e, p, "needs a name and an id");
                goto fail;
            }
            n_ids++;
            json_t *input = json_object_get(b, "input");
            rq_path(cp, sizeof cp, "%s.input", p);
            if (input && !json_is_null(input) && !json_is_object(input)) {
                rq_need(e, cp, "must be an object");
                goto fail;
            }
            if (!rq_add_call(r, m, name, input, cp, e)) goto fail;
        } else {
            rq_path(cp, sizeof cp, "%s.type", p);
            srv_err_set(e, 400, "invalid_request_error", "unsupported_content", cp,
                        "'%s' '%s' is not supported in assistant messages", cp, type);
            goto fail;
        }
        continue;
    bad_obj:
        rq_need(e, p, "must be an object with a type");
        goto fail;
    }
    if (text.data && !(m->content = rq_own(r, text.data))) goto oom_owned;
    text.data = NULL;
    if (thinking.data && !(m->reasoning = rq_own(r, thinking.data))) goto oom_owned;
    thinking.data = NULL;
    rq_replay_dsml(r, ctx, m, ids, n_ids);
    return true;
oom:
    dsv4_strbuf_free(&text);
    dsv4_strbuf_free(&thinking);
    return rq_oom(e);
oom_owned:
    return rq_oom(e);
fail:
    dsv4_strbuf_free(&text);
    dsv4_strbuf_free(&thinking);
    return false;
}

bool rq_parse_messages(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e) {
    bool has_max = false;
    if (!rq_max_tokens(root, "max_tokens", r, &has_max, e)) return false;
    if (!has_max) return rq_need(e, "max_tokens", "is required");
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        dsv4_chat_message *m = rq_add_msg(r, DSV4_ROLE_SYSTEM);
        if (!m) return rq_oom(e);
        if (!rq_text_content(r, sys, "system", TEXT_TYPES, &m->content, e)) return false;
    }
    json_t *msgs;
    if (!rq_messages(root, &msgs, e)) return false;
    size_t i;
    json_t *mj;
    json_array_foreach(msgs, i, mj) {
        char p[64], cp[80];
        rq_path(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(mj)) return rq_need(e, p, "must be an object");
        const char *role = NULL;
        if (!rq_string(mj, p, "role", &role, e)) return false;
        rq_path(cp, sizeof cp, "%s.role", p);
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return rq_need(e, cp, "must be user or assistant");
        json_t *content = json_object_get(mj, "content");
        rq_path(cp, sizeof cp, "%s.content", p);
        const bool user = role[0] == 'u';
        if (json_is_string(content)) {
            dsv4_chat_message *m = rq_add_msg(r, user ? DSV4_ROLE_USER : DSV4_ROLE_ASSISTANT);
            if (!m) return rq_oom(e);
            if (!(m->content = rq_strdup(r, json_string_value(content)))) return rq_oom(e);
        } else if (json_is_array(content)) {
            if (!(user ? user_blocks(r, content, cp, e) : assistant_blocks(r, ctx, content, cp, e)))
                return false;
        } else {
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", cp,
                        "'%s' must be a string or an array of content blocks", cp);
            return false;
        }
    }
    if (!rq_stop(root, "stop_sequences", r, e)) return false;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return rq_need(e, "tools", "must be an array");
        json_t *t;
        json_array_foreach(tools, i, t) {
            char p[64];
            rq_path(p, sizeof p, "tools[%zu]", i);
            if (!json_is_object(t)) return rq_need(e, p, "must be an object");
            json_t *schema = json_object_get(t, "input_schema");
            char sp[80];
            rq_path(sp, sizeof sp, "%s.input_schema", p);
            if (schema && !json_is_null(schema) && !json_is_object(schema))
                return rq_need(e, sp, "must be an object");
            if (!rq_add_tool(r, json_object_get(t, "name"), json_object_get(t, "description"), schema, p, e))
                return false;
        }
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (json_is_object(tc)) {
        const char *type = NULL;
        if (!rq_string(tc, "tool_choice", "type", &type, e)) return false;
        if (type && !strcmp(type, "none")) r->tool_choice = SRV_TOOLS_NONE;
        if (type && !strcmp(type, "any") && !rq_force_tool(r, NULL, "tool_choice", e)) return false;
        if (type && !strcmp(type, "tool")) {
            const char *name = NULL;
            if (!rq_string(tc, "tool_choice", "name", &name, e)) return false;
            if (!name) {
                srv_err_set(e, 400, "invalid_request_error", "invalid_value", "tool_choice.name",
                            "'tool_choice.name' must be a string");
                return false;
            }
            if (!rq_force_tool(r, name, "tool_choice.name", e)) return false;
        }
    } else if (tc && !json_is_null(tc)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", "tool_choice",
                    "'tool_choice' must be an object");
        return false;
    }
    int enabled = -1;
    json_t *th = json_object_get(root, "thinking");
    if (th && !json_is_null(th)) {
        if (!json_is_object(th)) {
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", "thinking",
                        "'thinking' must be an object");
            return false;
        }
        const char *type = NULL;
        if (!rq_string(th, "thinking", "type", &type, e)) return false;
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive")))
            return rq_need(e, "thinking.type", "must be enabled or disabled");
        enabled = strcmp(type, "disabled") != 0;
        int64_t budget;
        if (!rq_int(th, "thinking", "budget_tokens", 0, RQ_MAX_TOKENS_LIMIT, &budget, NULL, e)) return false;
    }
    bool think = false, has = false;
    if (!rq_bool(root, "", "think", &think, &has, e)) return false;
    if (has) enabled = think;
    const char *effort = NULL;
    json_t *oc = json_object_get(root, "output_config");
    if (json_is_object(oc) && !rq_string(oc, "output_config", "effort", &effort, e)) return false;
    return rq_think(r, ctx, effort, enabled, "output_config.effort", e);
}
