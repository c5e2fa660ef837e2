#include "text/chat.h"

#include <string.h>

const char DSV4_THINK_MAX_PREFIX[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

bool dsv4_think_enabled(dsv4_think_mode m) { return m == DSV4_THINK_HIGH || m == DSV4_THINK_MAX; }

dsv4_think_mode dsv4_think_mode_for_context(dsv4_think_mode m, uint64_t ctx) {
    return (m == DSV4_THINK_MAX && ctx < DSV4_THINK_MAX_MIN_CONTEXT) ? DSV4_THINK_HIGH : m;
}

bool dsv4_think_mode_from_effort(const char *effort, dsv4_think_mode *out) {
    static const char *const high[] = {"xhigh", "high", "medium", "low", "minimal"};
    if (!effort) return false;
    if (!strcmp(effort, "max")) return *out = DSV4_THINK_MAX, true;
    if (!strcmp(effort, "none")) return *out = DSV4_THINK_NONE, true;
    for (size_t i = 0; i < sizeof(high) / sizeof(high[0]); i++)
        if (!strcmp(effort, high[i])) return *out = DSV4_THINK_HIGH, true;
    return false;
}

bool dsv4_chat_role_from_name(const char *name, dsv4_chat_role *out) {
    static const struct {
        const char *name;
        dsv4_chat_role role;
    } roles[] = {{"system", DSV4_ROLE_SYSTEM}, {"developer", DSV4_ROLE_DEVELOPER},
                 {"user", DSV4_ROLE_USER},     {"assistant", DSV4_ROLE_ASSISTANT},
                 {"tool", DSV4_ROLE_TOOL},     {"function", DSV4_ROLE_TOOL}};
    if (!name) return false;
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
        if (!strcmp(name, roles[i].name)) return *out = roles[i].role, true;
    return false;
}

/* ------------------------------------------------------------- tokens ---- */

static dsv4_status push_special(const dsv4_tokenizer *t, dsv4_special s, dsv4_tokens *out, dsv4_error *err) {
    return dsv4_tokens_push(out, dsv4_tokenizer_special(t, s), err);
}

static dsv4_status bpe(const dsv4_tokenizer *t, const char *s, dsv4_tokens *out, dsv4_error *err) {
    return s ? dsv4_tokenize_text(t, s, strlen(s), out, err) : DSV4_OK;
}

dsv4_status dsv4_chat_encode_prompt(const dsv4_tokenizer *t, const char *system, const char *prompt,
                                    dsv4_think_mode mode, dsv4_tokens *out, dsv4_error *err) {
    dsv4_status st = push_special(t, DSV4_SPECIAL_BOS, out, err);
    if (st == DSV4_OK && mode == DSV4_THINK_MAX) st = bpe(t, DSV4_THINK_MAX_PREFIX, out, err);
    if (st == DSV4_OK && system && system[0]) st = bpe(t, system, out, err);
    if (st == DSV4_OK) st = push_special(t, DSV4_SPECIAL_USER, out, err);
    if (st == DSV4_OK) st = bpe(t, prompt, out, err);
    if (st == DSV4_OK) st = dsv4_chat_append_assistant_prefix(t, mode, out, err);
    return st;
}

dsv4_status dsv4_chat_append_assistant_prefix(const dsv4_tokenizer *t, dsv4_think_mode mode, dsv4_tokens *out,
                                              dsv4_error *err) {
    dsv4_status st = push_special(t, DSV4_SPECIAL_ASSISTANT, out, err);
    if (st == DSV4_OK)
        st = push_special(t, dsv4_think_enabled(mode) ? DSV4_SPECIAL_THINK_START : DSV4_SPECIAL_THINK_END,
                          out, err);
    return st;
}

dsv4_status dsv4_chat_append_message(const dsv4_tokenizer *t, dsv4_chat_role role, const char *text,
                                     dsv4_tokens *out, dsv4_error *err) {
    if (!text) text = "";
    dsv4_status st = DSV4_OK;
    switch (role) {
    case DSV4_ROLE_SYSTEM:
    case DSV4_ROLE_DEVELOPER: return bpe(t, text, out, err);
    case DSV4_ROLE_ASSISTANT:
        st = push_special(t, DSV4_SPECIAL_ASSISTANT, out, err);
        if (st == DSV4_OK && strncmp(text, "<think>", 7) != 0 && strncmp(text, "</think>", 8) != 0)
            st = push_special(t, DSV4_SPECIAL_THINK_END, out, err);
        break;
    case DSV4_ROLE_TOOL:
        st = push_special(t, DSV4_SPECIAL_USER, out, err);
        if (st == DSV4_OK) st = bpe(t, "Tool: ", out, err);
        break;
    case DSV4_ROLE_USER:
    default: st = push_special(t, DSV4_SPECIAL_USER, out, err); break;
    }
    if (st == DSV4_OK) st = bpe(t, text, out, err);
    return st;
}

dsv4_status dsv4_chat_append_generated(const dsv4_tokenizer *t, const int32_t *ids, size_t n,
                                       dsv4_tokens *out, dsv4_error *err) {
    for (size_t i = 0; i < n; i++) {
        dsv4_status st = dsv4_tokens_push(out, ids[i], err);
        if (st != DSV4_OK) return st;
    }
    return push_special(t, DSV4_SPECIAL_EOS, out, err);
}

/* ----------------------------------------------------------------- text ---- */

#define DSML_PARAM_END "</" DSV4_DSML_STR "parameter>"
#define TOOL_RESULT_END "</tool_result>"

/* Copies s, replacing the '<' of every occurrence of `end` by `lt`. */
static dsv4_status put_guarded(dsv4_strbuf *b, const char *s, const char *end, const char *lt,
                               dsv4_error *err) {
    dsv4_status st = DSV4_OK;
    for (s = s ? s : ""; *s && st == DSV4_OK;) {
        const char *hit = strstr(s, end);
        size_t n = hit ? (size_t)(hit - s) : strlen(s);
        st = dsv4_strbuf_append(b, s, n, err);
        if (!hit || st != DSV4_OK) break;
        st = dsv4_strbuf_puts(b, lt, err);
        s = hit + 1;
    }
    return st;
}

static dsv4_status put_attr(dsv4_strbuf *b, const char *s, dsv4_error *err) {
    dsv4_status st = DSV4_OK;
    for (s = s ? s : ""; *s && st == DSV4_OK; s++) {
        switch (*s) {
        case '&': st = dsv4_strbuf_puts(b, "&amp;", err); break;
        case '<': st = dsv4_strbuf_puts(b, "&lt;", err); break;
        case '>': st = dsv4_strbuf_puts(b, "&gt;", err); break;
        case '"': st = dsv4_strbuf_puts(b, "&quot;", err); break;
        default: st = dsv4_strbuf_append(b, s, 1, err); break;
        }
    }
    return st;
}

#define PUTS(s)                                                                                              \
    do {                                                                                                     \
        if ((st = dsv4_strbuf_puts(out, (s), err)) != DSV4_OK) return st;                                    \
    } while (0)
#define CHECK(expr)                                                                                          \
    do {                                                                                                     \
        if ((st = (expr)) != DSV4_OK) return st;                                                             \
    } while (0)

dsv4_status dsv4_chat_render_tool_calls(const dsv4_tool_call *calls, size_t n, dsv4_strbuf *out,
                                        dsv4_error *err) {
    dsv4_status st = DSV4_OK;
    if (n == 0) return st;
    PUTS("\n\n<" DSV4_DSML_STR "tool_calls>\n");
    for (size_t i = 0; i < n; i++) {
        PUTS("<" DSV4_DSML_STR "invoke name=\"");
        CHECK(put_attr(out, calls[i].name, err));
        PUTS("\">\n");
        for (size_t a = 0; a < calls[i].n_args; a++) {
            const dsv4_tool_arg *arg = &calls[i].args[a];
            PUTS("<" DSV4_DSML_STR "parameter name=\"");
            CHECK(put_attr(out, arg->key, err));
            PUTS(arg->is_string ? "\" string=\"true\">" : "\" string=\"false\">");
            CHECK(put_guarded(out, arg->value, DSML_PARAM_END, arg->is_string ? "&lt;" : "\\u003c", err));
            PUTS(DSML_PARAM_END "\n");
        }
        PUTS("</" DSV4_DSML_STR "invoke>\n");
    }
    PUTS("</" DSV4_DSML_STR "tool_calls>");
    return st;
}

static bool is_system(dsv4_chat_role r) { return r == DSV4_ROLE_SYSTEM || r == DSV4_ROLE_DEVELOPER; }
static bool is_user_like(dsv4_chat_role r) { return r == DSV4_ROLE_USER || r == DSV4_ROLE_TOOL; }

dsv4_status dsv4_chat_render_text(const dsv4_chat_message *msgs, size_t n, const char *tools_block,
                                  dsv4_think_mode mode, dsv4_strbuf *out, dsv4_error *err) {
    dsv4_status st = DSV4_OK;
    const bool think = dsv4_think_enabled(mode);
    const bool has_tools = tools_block && tools_block[0];
    bool tool_context = has_tools;
    size_t last_user = SIZE_MAX; /* none */
    for (size_t i = 0; i < n; i++) {
        if ((msgs[i].role == DSV4_ROLE_ASSISTANT &&
             (msgs[i].n_calls > 0 || (msgs[i].raw_dsml && msgs[i].raw_dsml[0]))) ||
            msgs[i].role == DSV4_ROLE_TOOL)
            tool_context = true;
        if (is_user_like(msgs[i].role)) last_user = i;
    }

    PUTS(DSV4_BOS_STR);
    if (mode == DSV4_THINK_MAX) PUTS(DSV4_THINK_MAX_PREFIX);
    /* system region: tools first, then system/developer contents, "\n\n"-joined */
    bool system_started = false;
    if (has_tools) {
        PUTS(tools_block);
        system_started = true;
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_system(msgs[i].role)) continue;
        const char *c = msgs[i].content ? msgs[i].content : "";
        if (system_started) PUTS("\n\n");
        PUTS(c);
        system_started = system_started || c[0];
    }

    bool pending_assistant = false, pending_tool_result = false;
    for (size_t i = 0; i < n; i++) {
        const dsv4_chat_message *m = &msgs[i];
        switch (m->role) {
        case DSV4_ROLE_SYSTEM:
        case DSV4_ROLE_DEVELOPER: break;
        case DSV4_ROLE_USER:
            PUTS(DSV4_USER_STR);
            PUTS(m->content);
            pending_assistant = true;
            pending_tool_result = false;
            break;
        case DSV4_ROLE_TOOL:
            if (!pending_tool_result) PUTS(DSV4_USER_STR);
            PUTS("<tool_result>");
            CHECK(put_guarded(out, m->content, TOOL_RESULT_END, "&lt;", err));
            PUTS(TOOL_RESULT_END);
            pending_assistant = true;
            pending_tool_result = true;
            break;
        case DSV4_ROLE_ASSISTANT:
            if (pending_assistant) {
                PUTS(DSV4_ASSISTANT_STR);
                if (think && (tool_context || last_user == SIZE_MAX || i > last_user)) {
                    PUTS(DSV4_THINK_START_STR);
                    PUTS(m->reasoning);
                }
                PUTS(DSV4_THINK_END_STR);
            }
            PUTS(m->content);
            if (m->raw_dsml && m->raw_dsml[0])
                PUTS(m->raw_dsml);
            else
                CHECK(dsv4_chat_render_tool_calls(m->calls, m->n_calls, out, err));
            PUTS(DSV4_EOS_STR);
            pending_assistant = false;
            pending_tool_result = false;
            break;
        }
    }
    if (pending_assistant) {
        PUTS(DSV4_ASSISTANT_STR);
        PUTS(think ? DSV4_THINK_START_STR : DSV4_THINK_END_STR);
    }
    return st;
}
