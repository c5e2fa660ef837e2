/* Request parsing entry point, error bodies, JSON depth pre-scan and the shared field helpers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/req_internal.h"

void srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->n_prompt_tokens = e->n_ctx = -1;
}

char *srv_error_body(srv_api api, const srv_err *e) {
    json_t *inner = json_object(), *root = json_object();
    if (!inner || !root) {
        json_decref(inner);
        json_decref(root);
        return NULL;
    }
    if (api == SRV_API_MESSAGES) {
        json_object_set_new(inner, "type", json_string(e->type));
        json_object_set_new(inner, "message", json_string(e->message));
        json_object_set_new(root, "type", json_string("error"));
        json_object_set_new(root, "error", inner);
    } else {
        json_object_set_new(inner, "message", json_string(e->message));
        json_object_set_new(inner, "type", json_string(e->type));
        json_object_set_new(inner, "param", e->param[0] ? json_string(e->param) : json_null());
        json_object_set_new(inner, "code", e->code ? json_string(e->code) : json_null());
        if (e->n_prompt_tokens >= 0) {
            json_object_set_new(inner, "n_prompt_tokens", json_integer(e->n_prompt_tokens));
            json_object_set_new(inner, "n_ctx", json_integer(e->n_ctx));
        }
        json_object_set_new(root, "error", inner);
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

int srv_json_depth(const char *body, size_t len, int max) {
    int depth = 0, deepest = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < len; i++) {
        const char c = body[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max) return -1;
            if (depth > deepest) deepest = depth;
        } else if (c == ']' || c == '}') {
            if (depth > 0) depth--;
        }
    }
    return deepest;
}

void rq_path(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

/* ---- ownership ---- */

void *rq_own(srv_request *r, void *s) {
    if (!s) return NULL;
    if (r->n_owned == r->cap_owned) {
        size_t cap = r->cap_owned ? r->cap_owned * 2 : 32;
        void **p = realloc(r->owned, cap * sizeof *p);
        if (!p) {
            free(s);
            return NULL;
        }
        r->owned = p;
        r->cap_owned = cap;
    }
    r->owned[r->n_owned++] = s;
    return s;
}

char *rq_strdup(srv_request *r, const char *s) { return rq_own(r, strdup(s ? s : "")); }

dsv4_chat_message *rq_add_msg(srv_request *r, dsv4_chat_role role) {
    if (r->n_msgs == r->cap_msgs) {
        size_t cap = r->cap_msgs ? r->cap_msgs * 2 : 8;
        dsv4_chat_message *p = realloc(r->msgs, cap * sizeof *p);
        if (!p) return NULL;
        r->msgs = p;
        r->cap_msgs = cap;
    }
    dsv4_chat_message *m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

bool rq_oom(srv_err *e) {
    srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory while parsing the request");
    return false;
}

void srv_request_free(srv_request *r) {
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->msgs);
    free(r->stop);
    free(r->tool_schemas);
    memset(r, 0, sizeof *r);
}

/* ---- typed getters ---- */

static bool bad_type(srv_err *e, const char *path, const char *key, const char *what) {
    char p[96];
    rq_path(p, sizeof p, "%s%s%s", path, *path ? "." : "", key);
    srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be %s", p, what);
    return false;
}

static bool out_of_range(srv_err *e, const char *path, const char *key, const char *what) {
    char p[96];
    rq_path(p, sizeof p, "%s%s%s", path, *path ? "." : "", key);
    srv_err_set(e, 400, "invalid_request_error", "invalid_value", p, "'%s' must be %s", p, what);
    return false;
}

bool rq_need(srv_err *e, const char *path, const char *what) {
    srv_err_set(e, 400, "invalid_request_error", "invalid_value", path, "'%s' %s", path, what);
    return false;
}

bool rq_messages(json_t *root, json_t **out, srv_err *e) {
    json_t *msgs = json_object_get(root, "messages");
    *out = msgs;
    if (!msgs || json_is_null(msgs)) return rq_need(e, "messages", "is required");
    if (!json_is_array(msgs)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", "messages",
                    "'messages' must be an array");
        return false;
    }
    if (json_array_size(msgs) == 0) return rq_need(e, "messages", "must not be empty");
    return true;
}

bool rq_string(json_t *o, const char *path, const char *key, const char **out, srv_err *e) {
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) return bad_type(e, path, key, "a string");
    *out = json_string_value(v);
    return true;
}

bool rq_bool(json_t *o, const char *path, const char *key, bool *out, bool *present, srv_err *e) {
    json_t *v = json_object_get(o, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return bad_type(e, path, key, "a boolean");
    *out = json_is_true(v);
    if (present) *present = true;
    return true;
}

bool rq_number(json_t *o, const char *path, const char *key, double lo, double hi, double *out, bool *present,
               srv_err *e) {
    json_t *v = json_object_get(o, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return bad_type(e, path, key, "a number");
    const double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        char what[64];
        rq_path(what, sizeof what, "between %g and %g", lo, hi);
        return out_of_range(e, path, key, what);
    }
    *out = d;
    if (present) *present = true;
    return true;
}

bool rq_int(json_t *o, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
            srv_err *e) {
    json_t *v = json_object_get(o, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) return bad_type(e, path, key, "an integer");
    const int64_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char what[64];
        rq_path(what, sizeof what, "between %lld and %lld", (long long)lo, (long long)hi);
        return out_of_range(e, path, key, what);
    }
    *out = x;
    if (present) *present = true;
    return true;
}

bool rq_text_content(srv_request *r, json_t *v, const char *path, const char *const *types, const char **out,
                     srv_err *e) {
    *out = "";
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) {
        if (!(*out = rq_strdup(r, json_string_value(v)))) return rq_oom(e);
        return true;
    }
    if (!json_is_array(v)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", path,
                    "'%s' must be a string or an array", path);
        return false;
    }
    dsv4_strbuf b = {0};
    dsv4_error de;
    size_t i;
    json_t *part;
    json_array_foreach(v, i, part) {
        char p[96];
        rq_path(p, sizeof p, "%s[%zu]", path, i);
        if (json_is_string(part)) { /* a bare string part is accepted as text */
            if (b.len) dsv4_strbuf_puts(&b, "\n", &de);
            dsv4_strbuf_puts(&b, json_string_value(part), &de);
            continue;
        }
        if (!json_is_object(part)) {
            dsv4_strbuf_free(&b);
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be an object", p);
            return false;
        }
        const char *type = NULL, *text = NULL;
        if (!rq_string(part, p, "type", &type, e) || !rq_string(part, p, "text", &text, e)) {
            dsv4_strbuf_free(&b);
            return false;
        }
        bool ok = false;
        for (size_t k = 0; type && types[k]; k++) ok |= strcmp(type, types[k]) == 0;
        if (!ok) {
            dsv4_strbuf_free(&b);
            srv_err_set(e, 400, "invalid_request_error", "unsupported_content", p,
                        "'%s.type' %s%s%s is not supported (only text content)", p, type ? "'" : "",
                        type ? type : "is missing", type ? "'" : "");
            return false;
        }
        if (!text) {
            dsv4_strbuf_free(&b);
            srv_err_set(e, 400, "invalid_request_error", "missing_field", p, "'%s.text' is required", p);
            return false;
        }
        if (b.len && dsv4_strbuf_puts(&b, "\n", &de) != DSV4_OK) break;
        if (dsv4_strbuf_puts(&b, text, &de) != DSV4_OK) break;
    }
    if (i < json_array_size(v)) {
        dsv4_strbuf_free(&b);
        return rq_oom(e);
    }
    *out = b.data ? rq_own(r, b.data) : "";
    if (!*out) return rq_oom(e);
    return true;
}

bool rq_sampling(json_t *root, srv_request *r, srv_err *e) {
    r->sampling = DSV4_SAMPLING_DEFAULTS;
    double d;
    bool has;
    int64_t x;
    if (!rq_number(root, "", "temperature", 0.0, 2.0, &d, &has, e)) return false;
    if (has) r->sampling.temperature = (float)d;
    if (!rq_number(root, "", "top_p", 0.0, 1.0, &d, &has, e)) return false;
    if (has) r->sampling.top_p = (float)d;
    if (!rq_number(root, "", "min_p", 0.0, 1.0, &d, &has, e)) return false;
    if (has) r->sampling.min_p = (float)d;
    if (!rq_int(root, "", "top_k", 0, 1000000, &x, &has, e)) return false;
    if (has) r->sampling.top_k = (int32_t)(x > DSV4_SAMPLER_MAX_TOP_K ? DSV4_SAMPLER_MAX_TOP_K : x);
    if (!rq_int(root, "", "seed", INT64_MIN, INT64_MAX, &x, &has, e)) return false;
    if (has) r->seed = (uint64_t)x;
    if (!rq_int(root, "", "n", 1, 1, &x, &has, e)) return false;
    return true;
}

bool rq_stop(json_t *root, const char *key, srv_request *r, srv_err *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v))
        return bad_type(e, "", key, "a string or an array of strings");
    if (n > RQ_MAX_STOP) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_value", key, "'%s' has %zu entries, at most %d",
                    key, n, RQ_MAX_STOP);
        return false;
    }
    r->stop = calloc(n ? n : 1, sizeof *r->stop);
    if (!r->stop) return rq_oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) {
            char p[64];
            rq_path(p, sizeof p, "%s[%zu]", key, i);
            srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be a string", p);
            return false;
        }
        const size_t len = json_string_length(s);
        if (len == 0) continue; /* an empty stop string would stop before the first byte */
        if (len > RQ_MAX_STOP_LEN) {
            srv_err_set(e, 400, "invalid_request_error", "invalid_value", key,
                        "'%s' entries are at most %d bytes", key, RQ_MAX_STOP_LEN);
            return false;
        }
        if (!(r->stop[r->n_stop++] = rq_strdup(r, json_string_value(s)))) return rq_oom(e);
    }
    return true;
}

bool rq_max_tokens(json_t *root, const char *key, srv_request *r, bool *present, srv_err *e) {
    int64_t x;
    bool has = false;
    if (!rq_int(root, "", key, 1, RQ_MAX_TOKENS_LIMIT, &x, &has, e)) return false;
    if (has) r->max_tokens = x;
    if (present) *present = *present || has;
    return true;
}

bool rq_call_args(srv_request *r, json_t *args, const char *path, dsv4_tool_call *call, srv_err *e) {
    json_t *obj = args, *parsed = NULL;
    if (json_is_string(args)) {
        const char *s = json_string_value(args);
        size_t n = json_string_length(args);
        /* an empty arguments string means no arguments */
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++)
            blank = s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r';
        if (blank) {
            call->args = NULL;
            call->n_args = 0;
            return true;
        }
        if (srv_json_depth(s, n, SRV_JSON_MAX_DEPTH) < 0 || !(parsed = json_loadb(s, n, 0, NULL))) {
            srv_err_set(e, 400, "invalid_request_error", "invalid_value", path, "'%s' is not valid JSON",
                        path);
            return false;
        }
        obj = parsed;
    }
    if (!obj || json_is_null(obj)) {
        call->n_args = 0;
        return true;
    }
    if (!json_is_object(obj)) {
        json_decref(parsed);
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", path, "'%s' must be a JSON object",
                    path);
        return false;
    }
    const size_t n = json_object_size(obj);
    dsv4_tool_arg *a = rq_own(r, calloc(n ? n : 1, sizeof *a));
    if (!a) {
        json_decref(parsed);
        return rq_oom(e);
    }
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(obj, key, val) {
        a[i].key = rq_strdup(r, key);
        if (json_is_string(val)) {
            a[i].value = rq_strdup(r, json_string_value(val));
            a[i].is_string = true;
        } else {
            a[i].value = rq_own(r, json_dumps(val, JSON_COMPACT | JSON_ENCODE_ANY));
            a[i].is_string = false;
        }
        if (!a[i].key || !a[i].value) {
            json_decref(parsed);
            return rq_oom(e);
        }
        i++;
    }
    json_decref(parsed);
    call->args = a;
    call->n_args = n;
    return true;
}

bool rq_add_call(srv_request *r, dsv4_chat_message *m, const char *name, json_t *args, const char *path,
                 srv_err *e) {
    /* calls arrays are owned by r: grow by copying into a new owned array */
    dsv4_tool_call *c = rq_own(r, malloc((m->n_calls + 1) * sizeof *c));
    if (!c) return rq_oom(e);
    if (m->n_calls) memcpy(c, m->calls, m->n_calls * sizeof *c);
    dsv4_tool_call *nc = &c[m->n_calls];
    memset(nc, 0, sizeof *nc);
    if (!(nc->name = rq_strdup(r, name))) return rq_oom(e);
    if (!rq_call_args(r, args, path, nc, e)) return false;
    m->calls = c;
    m->n_calls++;
    return true;
}

bool rq_add_tool(srv_request *r, json_t *name, json_t *desc, json_t *params, const char *path, srv_err *e) {
    char p[96];
    if (!json_is_string(name) || json_string_length(name) == 0) {
        rq_path(p, sizeof p, "%s.name", path);
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be a non-empty string", p);
        return false;
    }
    if (desc && !json_is_null(desc) && !json_is_string(desc)) {
        rq_path(p, sizeof p, "%s.description", path);
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be a string", p);
        return false;
    }
    if (params && !json_is_null(params) && !json_is_object(params)) {
        rq_path(p, sizeof p, "%s.parameters", path);
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", p, "'%s' must be an object", p);
        return false;
    }
    json_t *s = json_object();
    if (!s) return rq_oom(e);
    json_object_set(s, "name", name);
    if (desc && json_is_string(desc)) json_object_set(s, "description", desc);
    if (params && json_is_object(params)) json_object_set(s, "parameters", params);
    char *text = json_dumps(s, JSON_COMPACT);
    json_decref(s);
    if (!text || !rq_own(r, text)) return rq_oom(e);
    char **t = realloc(r->tool_schemas, (r->n_tools + 1) * sizeof *t);
    if (!t) return rq_oom(e);
    r->tool_schemas = t;
    t[r->n_tools++] = text;
    return true;
}

bool rq_force_tool(srv_request *r, const char *name, const char *path, srv_err *e) {
    if (!r->n_tools) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_value", path,
                    "'%s' requires a tool call but no function tools are given", path);
        return false;
    }
    r->tool_choice = SRV_TOOLS_REQUIRED;
    r->tool_force = NULL;
    if (!name) return true;
    for (size_t i = 0; i < r->n_tools; i++) {
        json_t *s = json_loads(r->tool_schemas[i], 0, NULL);
        const char *n = json_string_value(json_object_get(s, "name"));
        const bool same = n && !strcmp(n, name);
        json_decref(s);
        if (same) {
            r->tool_force = rq_strdup(r, name);
            return r->tool_force ? true : rq_oom(e);
        }
    }
    srv_err_set(e, 400, "invalid_request_error", "invalid_value", path, "'%s' names no given tool ('%.64s')",
                path, name);
    return false;
}

void rq_replay_dsml(srv_request *r, const srv_parse_ctx *ctx, dsv4_chat_message *m, const char *const *ids,
                    size_t n_ids) {
    if (!ctx || !ctx->lookup || n_ids == 0) return;
    char *first = NULL;
    for (size_t i = 0; i < n_ids; i++) {
        char *raw = ids[i] ? ctx->lookup(ctx->lookup_user, ids[i]) : NULL;
        if (!raw || (first && strcmp(raw, first) != 0)) {
            free(raw);
            free(first);
            return;
        }
        if (!first)
            first = raw;
        else
            free(raw);
    }
    m->raw_dsml = rq_own(r, first);
}

bool rq_think(srv_request *r, const srv_parse_ctx *ctx, const char *effort, int enabled,
              const char *effort_path, srv_err *e) {
    dsv4_think_mode m = DSV4_THINK_HIGH;
    if (r->model && (strcmp(r->model, "deepseek-chat") == 0 || strstr(r->model, "-nothink")))
        m = DSV4_THINK_NONE;
    if (effort && !dsv4_think_mode_from_effort(effort, &m)) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_value", effort_path,
                    "'%s' must be one of none, minimal, low, medium, high, xhigh, max", effort_path);
        return false;
    }
    if (enabled == 0) m = DSV4_THINK_NONE;
    if (enabled == 1 && m == DSV4_THINK_NONE) m = DSV4_THINK_HIGH;
    r->think = dsv4_think_mode_for_context(m, ctx ? ctx->n_ctx : 0);
    return true;
}

void rq_finish_sampling(srv_request *r) {
    if (dsv4_think_enabled(r->think)) r->sampling = DSV4_SAMPLING_DEFAULTS;
}

bool srv_request_parse(srv_api api, const char *body, size_t len, const srv_parse_ctx *ctx, srv_request *r,
                       srv_err *e) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->max_tokens = -1;
    r->sampling = DSV4_SAMPLING_DEFAULTS;
    if (srv_json_depth(body, len, SRV_JSON_MAX_DEPTH) < 0) {
        srv_err_set(e, 400, "invalid_request_error", "json_too_deep", NULL,
                    "request body nests arrays/objects deeper than %d levels", SRV_JSON_MAX_DEPTH);
        return false;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        srv_err_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                    "request body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return false;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        srv_err_set(e, 400, "invalid_request_error", "invalid_type", NULL,
                    "request body must be a JSON object");
        return false;
    }
    const char *model = NULL;
    bool ok = rq_string(root, "", "model", &model, e);
    if (ok && model && !(r->model = rq_strdup(r, model))) ok = rq_oom(e);
    if (ok && !r->model && !(r->model = rq_strdup(r, ctx && ctx->model_id ? ctx->model_id : "dsv4")))
        ok = rq_oom(e);
    if (ok) ok = rq_bool(root, "", "stream", &r->stream, NULL, e);
    if (ok) ok = rq_sampling(root, r, e);
    if (ok) {
        switch (api) {
        case SRV_API_CHAT: ok = rq_parse_chat(root, ctx, r, e); break;
        case SRV_API_COMPLETIONS: ok = rq_parse_completions(root, ctx, r, e); break;
        case SRV_API_RESPONSES: ok = rq_parse_responses(root, ctx, r, e); break;
        case SRV_API_MESSAGES: ok = rq_parse_messages(root, ctx, r, e); break;
        }
    }
    if (ok) rq_finish_sampling(r);
    json_decref(root);
    if (!ok) srv_request_free(r);
    return ok;
}
