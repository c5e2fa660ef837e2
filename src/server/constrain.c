#include "server/constrain.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/special.h"
#include "text/strbuf.h"
#include "text/utf8.h"

#define D DSV4_DSML_STR
#define OPENER "\n\n<" D "tool_calls>\n<" D "invoke name=\""
#define PARAM_CLOSE "</" D "parameter>\n"
#define TAIL "</" D "invoke>\n</" D "tool_calls>"

typedef enum vkind { V_STRING = 0, V_INTEGER, V_NUMBER, V_CHOICE } vkind;

typedef struct param {
    char *key;
    bool is_string; /* string="true" */
    vkind kind;
    char **choices; /* V_CHOICE: value texts as written in DSML */
    size_t n_choices;
} param;

typedef struct tool {
    char *name;
    param *params;
    size_t n_params;
} tool;

typedef enum stage { ST_BEGIN = 0, ST_NAME, ST_PARAM, ST_VALUE, ST_END } stage;

struct srv_constrain {
    const dsv4_tokenizer *t;
    tool *tools;
    size_t n_tools;
    int forced_tool; /* -1: any */
    bool close_think;
    uint32_t cap;
    int32_t special[DSV4_SPECIAL_COUNT];
    dsv4_tokens close; /* tokens of PARAM_CLOSE; close.ids[0] ends a sampled value */

    stage st;
    srv_constrain_mode mode;
    size_t tool_i, param_i;
    dsv4_tokens queue;
    size_t q_pos;
    /* SRV_CM_CHOOSE */
    dsv4_tokens *cand;
    size_t n_cand, cand_k;
    uint8_t *alive;
    bool choosing_tool;
    /* SRV_CM_STRING / SRV_CM_NUMBER */
    uint32_t n_val;
    uint8_t pend[4];
    size_t n_pend;
    char num[SRV_CONSTRAIN_NUMBER_MAX + 1];
    size_t num_len;
    /* scratch for masked sampling */
    float *masked;
    uint8_t *mask;
    uint32_t scratch_n;
};

/* ------------------------------------------------------------ schema ---- */

static void param_free(param *p) {
    free(p->key);
    for (size_t i = 0; i < p->n_choices; i++) free(p->choices[i]);
    free(p->choices);
}

static void tools_free(tool *ts, size_t n) {
    for (size_t i = 0; ts && i < n; i++) {
        free(ts[i].name);
        for (size_t j = 0; j < ts[i].n_params; j++) param_free(&ts[i].params[j]);
        free(ts[i].params);
    }
    free(ts);
}

static dsv4_status oom(dsv4_error *err) {
    return dsv4_fail(err, DSV4_ERR_NOMEM, "tool_choice: out of memory");
}

/* s with every `end` written with its '<' replaced by lt (the renderer's payload guard). */
static char *guarded(const char *s, const char *lt) {
    const char *end = "</" D "parameter>";
    dsv4_strbuf b = {0};
    dsv4_error err;
    dsv4_status st = dsv4_strbuf_puts(&b, "", &err);
    while (st == DSV4_OK && *s) {
        const char *hit = strstr(s, end);
        size_t n = hit ? (size_t)(hit - s) : strlen(s);
        st = dsv4_strbuf_append(&b, s, n, &err);
        if (!hit || st != DSV4_OK) break;
        st = dsv4_strbuf_puts(&b, lt, &err);
        s = hit + 1;
    }
    if (st != DSV4_OK) {
        dsv4_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

static bool add_choice(param *p, char *text) {
    if (!text) return false;
    char **c = realloc(p->choices, (p->n_choices + 1) * sizeof *c);
    if (!c) {
        free(text);
        return false;
    }
    p->choices = c;
    c[p->n_choices++] = text;
    return true;
}

static bool fixed_choice(param *p, const char *text) {
    p->kind = V_CHOICE;
    p->is_string = false;
    return add_choice(p, strdup(text));
}

/* The first type name of "type" (a string, or an array: its first non-"null" entry). */
static const char *type_name(json_t *ps) {
    json_t *ty = json_object_get(ps, "type");
    if (json_is_string(ty)) return json_string_value(ty);
    const char *first = NULL;
    size_t i;
    json_t *v;
    json_array_foreach(ty, i, v) {
        if (!json_is_string(v)) continue;
        if (strcmp(json_string_value(v), "null") != 0) return json_string_value(v);
        first = "null";
    }
    return first;
}

static bool enum_param(param *p, json_t *vals) {
    bool all_strings = true;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v) all_strings = all_strings && json_is_string(v);
    p->kind = V_CHOICE;
    p->is_string = all_strings;
    json_array_foreach(vals, i, v) {
        char *lit =
            all_strings ? strdup(json_string_value(v)) : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!lit) return false;
        char *g = guarded(lit, all_strings ? "&lt;" : "\\u003c");
        free(lit);
        if (!add_choice(p, g)) return false;
    }
    return true;
}

static bool param_from_schema(param *p, json_t *ps) {
    p->kind = V_STRING;
    p->is_string = true;
    if (!json_is_object(ps)) return true;
    json_t *en = json_object_get(ps, "enum");
    if (json_is_array(en) && json_array_size(en) > 0) return enum_param(p, en);
    json_t *cn = json_object_get(ps, "const");
    if (cn) {
        json_t *one = json_array();
        bool ok = one && json_array_append(one, cn) == 0 && enum_param(p, one);
        json_decref(one);
        return ok;
    }
    const char *ty = type_name(ps);
    if (!ty) {
        if (json_object_get(ps, "properties")) return fixed_choice(p, "{}");
        if (json_object_get(ps, "items")) return fixed_choice(p, "[]");
        return true;
    }
    if (!strcmp(ty, "string")) return true;
    p->is_string = false;
    if (!strcmp(ty, "integer"))
        p->kind = V_INTEGER;
    else if (!strcmp(ty, "number"))
        p->kind = V_NUMBER;
    else if (!strcmp(ty, "boolean"))
        return fixed_choice(p, "true") && add_choice(p, strdup("false"));
    else if (!strcmp(ty, "null"))
        return fixed_choice(p, "null");
    else if (!strcmp(ty, "array"))
        return fixed_choice(p, "[]");
    else if (!strcmp(ty, "object"))
        return fixed_choice(p, "{}");
    else
        p->is_string = true; /* unknown type: a string */
    return true;
}

static bool add_param(tool *t, const char *key, json_t *ps) {
    param *np = realloc(t->params, (t->n_params + 1) * sizeof *np);
    if (!np) return false;
    t->params = np;
    param *p = &np[t->n_params];
    memset(p, 0, sizeof *p);
    p->key = strdup(key);
    if (!p->key || !param_from_schema(p, ps)) {
        param_free(p);
        return false;
    }
    t->n_params++;
    return true;
}

static bool is_required(json_t *req, const char *key) {
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), key)) return true;
    return false;
}

static dsv4_status tool_from_schema(tool *t, const char *schema, dsv4_error *err) {
    json_error_t je;
    json_t *root = json_loads(schema, 0, &je);
    if (!root) return dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: tool schema: %s", je.text);
    dsv4_status st = DSV4_OK;
    json_t *name = json_object_get(root, "name");
    t->name = strdup(json_is_string(name) ? json_string_value(name) : "");
    json_t *params = json_object_get(root, "parameters");
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    if (!t->name) st = oom(err);
    /* required first, then the rest, each in schema order */
    for (int pass = 0; pass < 2 && st == DSV4_OK; pass++) {
        const char *key;
        json_t *ps;
        json_object_foreach(props, key, ps) {
            if (is_required(req, key) != (pass == 0)) continue;
            if (!add_param(t, key, ps)) {
                st = oom(err);
                break;
            }
        }
        if (pass == 0 && st == DSV4_OK) {
            size_t i;
            json_t *v;
            json_array_foreach(req, i, v) {
                if (!json_is_string(v) || json_object_get(props, json_string_value(v))) continue;
                bool dup = false;
                for (size_t k = 0; k < t->n_params && !dup; k++)
                    dup = !strcmp(t->params[k].key, json_string_value(v));
                if (!dup && !add_param(t, json_string_value(v), NULL)) {
                    st = oom(err);
                    break;
                }
            }
        }
    }
    json_decref(root);
    return st;
}

/* ---------------------------------------------------------- helpers ---- */

static dsv4_status put_attr(dsv4_strbuf *b, const char *s, dsv4_error *err) {
    dsv4_status st = DSV4_OK;
    for (; *s && st == DSV4_OK; s++) {
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

/* Queues the tokens of rendered text (special strings recognised) and switches to FORCED. */
static dsv4_status force_text(srv_constrain *c, const char *s, size_t n, dsv4_error *err) {
    c->mode = SRV_CM_FORCED;
    return dsv4_tokenize_rendered(c->t, s, n, &c->queue, err);
}

static dsv4_status force_tokens(srv_constrain *c, const int32_t *ids, size_t n, dsv4_error *err) {
    c->mode = SRV_CM_FORCED;
    for (size_t i = 0; i < n; i++)
        if (dsv4_tokens_push(&c->queue, ids[i], err) != DSV4_OK) return DSV4_ERR_NOMEM;
    return DSV4_OK;
}

static void cand_clear(srv_constrain *c) {
    for (size_t i = 0; i < c->n_cand; i++) dsv4_tokens_free(&c->cand[i]);
    free(c->cand);
    free(c->alive);
    c->cand = NULL;
    c->alive = NULL;
    c->n_cand = c->cand_k = 0;
}

static dsv4_status narrow(srv_constrain *c, dsv4_error *err);

/* Starts a choice among texts[i] + suffix. */
static dsv4_status choose(srv_constrain *c, char *const *texts, size_t n, bool attr, const char *suffix,
                          dsv4_error *err) {
    cand_clear(c);
    c->cand = calloc(n, sizeof *c->cand);
    c->alive = calloc(n, 1);
    if (!c->cand || !c->alive) return oom(err);
    c->n_cand = n;
    dsv4_status st = DSV4_OK;
    for (size_t i = 0; i < n && st == DSV4_OK; i++) {
        dsv4_strbuf b = {0};
        st = attr ? put_attr(&b, texts[i], err) : dsv4_strbuf_puts(&b, texts[i], err);
        if (st == DSV4_OK) st = dsv4_strbuf_puts(&b, suffix, err);
        if (st == DSV4_OK) st = dsv4_tokenize_rendered(c->t, b.data, b.len, &c->cand[i], err);
        dsv4_strbuf_free(&b);
        c->alive[i] = c->cand[i].n > 0;
    }
    c->mode = SRV_CM_CHOOSE;
    return st == DSV4_OK ? narrow(c, err) : st;
}

/* Once the remaining candidates agree on the rest (one left, or duplicates), the choice is made:
 * the rest is forced. The candidate text includes what follows it (">\n" or the closing tag). */
static dsv4_status narrow(srv_constrain *c, dsv4_error *err) {
    size_t w = SIZE_MAX;
    for (size_t i = 0; i < c->n_cand; i++) {
        if (!c->alive[i]) continue;
        if (w == SIZE_MAX) {
            w = i;
            continue;
        }
        if (c->cand[i].n != c->cand[w].n ||
            memcmp(c->cand[i].ids, c->cand[w].ids, c->cand[i].n * sizeof *c->cand[i].ids) != 0)
            return DSV4_OK; /* still open */
    }
    if (w == SIZE_MAX) return dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: no candidate left");
    c->queue.n = c->q_pos = 0;
    dsv4_status st = force_tokens(c, c->cand[w].ids + c->cand_k, c->cand[w].n - c->cand_k, err);
    if (c->choosing_tool)
        c->tool_i = w;
    else
        c->param_i++;
    c->st = ST_PARAM;
    cand_clear(c);
    return st;
}

/* Ends the value being sampled: the closing tag (all of it, or the rest after its first token). */
static dsv4_status end_value(srv_constrain *c, bool first_sampled, const char *fill, dsv4_error *err) {
    c->queue.n = c->q_pos = 0;
    dsv4_status st = DSV4_OK;
    if (fill) st = dsv4_tokenize_text(c->t, fill, strlen(fill), &c->queue, err);
    if (st == DSV4_OK) st = force_tokens(c, c->close.ids + first_sampled, c->close.n - first_sampled, err);
    c->param_i++;
    c->st = ST_PARAM;
    return st;
}

/* Moves through the structure until a token is pending or the call is complete. */
static dsv4_status settle(srv_constrain *c, dsv4_error *err) {
    while (c->mode == SRV_CM_FORCED && c->q_pos >= c->queue.n) {
        c->queue.n = c->q_pos = 0;
        dsv4_strbuf b = {0};
        dsv4_status st = DSV4_OK;
        switch (c->st) {
        case ST_BEGIN:
            st = dsv4_strbuf_puts(&b, c->close_think ? DSV4_THINK_END_STR OPENER : OPENER, err);
            if (st == DSV4_OK) st = force_text(c, b.data, b.len, err);
            c->st = ST_NAME;
            break;
        case ST_NAME:
            if (c->forced_tool >= 0) {
                c->tool_i = (size_t)c->forced_tool;
                st = put_attr(&b, c->tools[c->tool_i].name, err);
                if (st == DSV4_OK) st = dsv4_strbuf_puts(&b, "\">\n", err);
                if (st == DSV4_OK) st = force_text(c, b.data, b.len, err);
                c->st = ST_PARAM;
            } else {
                char **names = malloc(c->n_tools * sizeof *names);
                if (!names) return oom(err);
                for (size_t i = 0; i < c->n_tools; i++) names[i] = c->tools[i].name;
                c->choosing_tool = true;
                st = choose(c, names, c->n_tools, true, "\">\n", err);
                free(names);
            }
            break;
        case ST_PARAM: {
            const tool *t = &c->tools[c->tool_i];
            if (c->param_i >= t->n_params) {
                st = force_text(c, TAIL, strlen(TAIL), err);
                c->st = ST_END;
                break;
            }
            const param *p = &t->params[c->param_i];
            st = dsv4_strbuf_puts(&b, "<" D "parameter name=\"", err);
            if (st == DSV4_OK) st = put_attr(&b, p->key, err);
            if (st == DSV4_OK)
                st = dsv4_strbuf_puts(&b, p->is_string ? "\" string=\"true\">" : "\" string=\"false\">", err);
            if (st == DSV4_OK) st = force_text(c, b.data, b.len, err);
            c->st = ST_VALUE;
            break;
        }
        case ST_VALUE: {
            const param *p = &c->tools[c->tool_i].params[c->param_i];
            c->n_val = 0;
            c->n_pend = c->num_len = 0;
            if (p->kind == V_CHOICE) {
                c->choosing_tool = false;
                st = choose(c, p->choices, p->n_choices, false, PARAM_CLOSE, err);
            } else {
                c->mode = p->kind == V_STRING ? SRV_CM_STRING : SRV_CM_NUMBER;
            }
            break;
        }
        case ST_END: c->mode = SRV_CM_DONE; break;
        }
        dsv4_strbuf_free(&b);
        if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
}

/* pend[0..np) + b[0..n) is well-formed UTF-8 up to an incomplete final sequence of *tail bytes. */
static bool utf8_continues(const uint8_t *pend, size_t np, const uint8_t *b, size_t n, size_t *tail) {
    size_t i = 0;
    if (np) {
        uint8_t tmp[4];
        const size_t k = n < 4 - np ? n : 4 - np;
        memcpy(tmp, pend, np);
        memcpy(tmp + np, b, k);
        const int l = dsv4_utf8_valid_len(tmp, np + k, NULL, NULL);
        if (l == 0) return false;
        if (l < 0) {
            *tail = np + k;
            return true;
        }
        i = (size_t)l - np;
    }
    while (i < n) {
        const int l = dsv4_utf8_valid_len(b + i, n - i, NULL, NULL);
        if (l == 0) return false;
        if (l < 0) {
            *tail = n - i;
            return true;
        }
        i += (size_t)l;
    }
    *tail = 0;
    return true;
}

static bool is_special(const srv_constrain *c, int32_t id) {
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++)
        if (c->special[s] == id) return true;
    return false;
}

bool srv_constrain_number_prefix(const char *s, size_t n, bool integer, bool *complete) {
    size_t i = 0;
    *complete = false;
    if (i < n && s[i] == '-') i++;
    if (i == n) return true;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return false;
    }
    if (i == n) return *complete = true;
    if (integer || s[i] != '.') return false;
    i++;
    if (i == n) return true;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n) return false;
    return *complete = true;
}

static bool string_allows(const srv_constrain *c, int32_t id, size_t *tail) {
    if (id == c->close.ids[0]) {
        *tail = 0;
        return c->n_pend == 0;
    }
    if (is_special(c, id)) return false;
    size_t n;
    const uint8_t *b = (const uint8_t *)dsv4_token_bytes(c->t, id, &n);
    if (!n || memchr(b, '<', n) || memchr(b, 0, n)) return false;
    if (!utf8_continues(c->pend, c->n_pend, b, n, tail)) return false;
    return c->n_val < c->cap || *tail == 0; /* past the cap only a character's completion */
}

static bool number_allows(const srv_constrain *c, int32_t id) {
    const bool integer = c->tools[c->tool_i].params[c->param_i].kind == V_INTEGER;
    bool complete;
    if (id == c->close.ids[0])
        return srv_constrain_number_prefix(c->num, c->num_len, integer, &complete) && complete;
    size_t n;
    const char *b = dsv4_token_bytes(c->t, id, &n);
    if (!n || c->num_len + n > SRV_CONSTRAIN_NUMBER_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.')) return false;
    char tmp[SRV_CONSTRAIN_NUMBER_MAX + 1];
    memcpy(tmp, c->num, c->num_len);
    memcpy(tmp + c->num_len, b, n);
    return srv_constrain_number_prefix(tmp, c->num_len + n, integer, &complete);
}

static bool allows(const srv_constrain *c, int32_t id) {
    size_t tail;
    switch (c->mode) {
    case SRV_CM_FORCED: return c->q_pos < c->queue.n && c->queue.ids[c->q_pos] == id;
    case SRV_CM_CHOOSE:
        for (size_t i = 0; i < c->n_cand; i++)
            if (c->alive[i] && c->cand[i].n > c->cand_k && c->cand[i].ids[c->cand_k] == id) return true;
        return false;
    case SRV_CM_STRING: return string_allows(c, id, &tail);
    case SRV_CM_NUMBER: return number_allows(c, id);
    case SRV_CM_DONE: return false;
    }
    return false;
}

/* ------------------------------------------------------------- public ---- */

dsv4_status srv_constrain_new(const dsv4_tokenizer *t, const char *const *schemas, size_t n_tools,
                              const char *tool_name, bool close_think, uint32_t value_cap,
                              srv_constrain **out, dsv4_error *err) {
    *out = NULL;
    if (!n_tools) return dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: no tools to call");
    srv_constrain *c = calloc(1, sizeof *c);
    if (!c) return oom(err);
    c->t = t;
    c->close_think = close_think;
    c->cap = value_cap ? value_cap : SRV_CONSTRAIN_VALUE_CAP;
    c->forced_tool = -1;
    c->mode = SRV_CM_FORCED;
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) c->special[s] = dsv4_tokenizer_special(t, (dsv4_special)s);
    dsv4_status st = DSV4_OK;
    c->tools = calloc(n_tools, sizeof *c->tools);
    if (!c->tools) st = oom(err);
    for (size_t i = 0; i < n_tools && st == DSV4_OK; i++, c->n_tools++) {
        st = tool_from_schema(&c->tools[i], schemas[i], err);
        if (st == DSV4_OK && tool_name && c->forced_tool < 0 && !strcmp(c->tools[i].name, tool_name))
            c->forced_tool = (int)i;
    }
    if (st == DSV4_OK && tool_name && c->forced_tool < 0)
        st = dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: no tool named '%s'", tool_name);
    if (st == DSV4_OK) st = dsv4_tokenize_rendered(t, PARAM_CLOSE, strlen(PARAM_CLOSE), &c->close, err);
    if (st == DSV4_OK && !c->close.n) st = dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: empty closing tag");
    if (st == DSV4_OK) st = settle(c, err);
    if (st != DSV4_OK) {
        srv_constrain_free(c);
        return st;
    }
    *out = c;
    return DSV4_OK;
}

void srv_constrain_free(srv_constrain *c) {
    if (!c) return;
    tools_free(c->tools, c->n_tools);
    dsv4_tokens_free(&c->close);
    dsv4_tokens_free(&c->queue);
    cand_clear(c);
    free(c->masked);
    free(c->mask);
    free(c);
}

srv_constrain_mode srv_constrain_get_mode(const srv_constrain *c) { return c->mode; }

uint32_t srv_constrain_mask(const srv_constrain *c, uint8_t *allowed, uint32_t n) {
    const uint32_t nt = dsv4_tokenizer_n_tokens(c->t);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        allowed[i] = i < nt && allows(c, (int32_t)i);
        k += allowed[i];
    }
    return k;
}

dsv4_status srv_constrain_accept(srv_constrain *c, int32_t id, dsv4_error *err) {
    if (!allows(c, id))
        return dsv4_fail(err, DSV4_ERR_INVALID, "tool_choice: token %d breaks the tool call", id);
    dsv4_status st = DSV4_OK;
    switch (c->mode) {
    case SRV_CM_FORCED: c->q_pos++; break;
    case SRV_CM_CHOOSE:
        for (size_t i = 0; i < c->n_cand; i++)
            c->alive[i] = c->alive[i] && c->cand[i].n > c->cand_k && c->cand[i].ids[c->cand_k] == id;
        c->cand_k++;
        st = narrow(c, err);
        break;
    case SRV_CM_STRING: {
        if (id == c->close.ids[0]) {
            st = end_value(c, true, NULL, err);
            break;
        }
        size_t n, tail = 0;
        const uint8_t *b = (const uint8_t *)dsv4_token_bytes(c->t, id, &n);
        utf8_continues(c->pend, c->n_pend, b, n, &tail);
        /* the new pending bytes: the last `tail` (<= 3) of pend + b */
        uint8_t keep[4];
        const size_t tot = c->n_pend + n;
        for (size_t i = 0; i < tail; i++) {
            const size_t at = tot - tail + i;
            keep[i] = at < c->n_pend ? c->pend[at] : b[at - c->n_pend];
        }
        memcpy(c->pend, keep, tail);
        c->n_pend = tail;
        c->n_val++;
        if (c->n_pend == 0 && c->n_val >= c->cap)
            st = end_value(c, false, NULL, err);
        else if (c->n_val >= c->cap + 4)
            st = end_value(c, false, NULL, err); /* cannot happen: a safety net */
        break;
    }
    case SRV_CM_NUMBER: {
        const bool integer = c->tools[c->tool_i].params[c->param_i].kind == V_INTEGER;
        if (id == c->close.ids[0]) {
            st = end_value(c, true, NULL, err);
            break;
        }
        size_t n;
        const char *b = dsv4_token_bytes(c->t, id, &n);
        memcpy(c->num + c->num_len, b, n);
        c->num_len += n;
        c->num[c->num_len] = 0;
        c->n_val++;
        bool complete;
        srv_constrain_number_prefix(c->num, c->num_len, integer, &complete);
        if (c->n_val >= c->cap || c->num_len >= SRV_CONSTRAIN_NUMBER_MAX)
            st = end_value(c, false, complete ? NULL : "0", err);
        break;
    }
    case SRV_CM_DONE: break;
    }
    if (st == DSV4_OK) st = settle(c, err);
    return st;
}

static bool ensure_scratch(srv_constrain *c, uint32_t n) {
    if (c->scratch_n >= n) return true;
    float *m = realloc(c->masked, (size_t)n * sizeof *m);
    if (m) c->masked = m;
    uint8_t *k = realloc(c->mask, n);
    if (k) c->mask = k;
    if (!m || !k) return false;
    c->scratch_n = n;
    return true;
}

static int32_t masked_argmax(const float *logits, const uint8_t *mask, uint32_t n) {
    int32_t best = -1;
    for (uint32_t i = 0; i < n; i++)
        if (mask[i] && (best < 0 || logits[i] > logits[best])) best = (int32_t)i;
    return best;
}

dsv4_status srv_constrain_next(srv_constrain *c, const float *logits, uint32_t n_vocab, dsv4_sampler *sp,
                               int32_t *id, bool *done, dsv4_error *err) {
    *done = false;
    *id = -1;
    switch (c->mode) {
    case SRV_CM_DONE: *done = true; return DSV4_OK;
    case SRV_CM_FORCED: *id = c->queue.ids[c->q_pos]; break;
    case SRV_CM_CHOOSE: {
        float best = -INFINITY;
        for (size_t i = 0; i < c->n_cand; i++) {
            if (!c->alive[i] || c->cand[i].n <= c->cand_k) continue;
            const int32_t t = c->cand[i].ids[c->cand_k];
            const float v = t >= 0 && (uint32_t)t < n_vocab ? logits[t] : -INFINITY;
            if (*id < 0 || v > best) *id = t, best = v; /* ties: the earlier candidate */
        }
        break;
    }
    case SRV_CM_STRING:
    case SRV_CM_NUMBER: {
        if (!ensure_scratch(c, n_vocab)) return oom(err);
        if (srv_constrain_mask(c, c->mask, n_vocab) == 0) {
            /* nothing fits (cannot happen with a byte-level vocabulary): close the value */
            dsv4_status st = end_value(c, false, c->mode == SRV_CM_NUMBER ? "0" : NULL, err);
            if (st == DSV4_OK) st = settle(c, err);
            if (st != DSV4_OK) return st;
            return srv_constrain_next(c, logits, n_vocab, sp, id, done, err);
        }
        for (uint32_t i = 0; i < n_vocab; i++) c->masked[i] = c->mask[i] ? logits[i] : -INFINITY;
        if (sp) {
            dsv4_status st = dsv4_sampler_sample(sp, c->masked, n_vocab, id, err);
            if (st != DSV4_OK) return st;
        }
        if (!sp || *id < 0 || (uint32_t)*id >= n_vocab || !c->mask[*id])
            *id = masked_argmax(logits, c->mask, n_vocab);
        break;
    }
    }
    return srv_constrain_accept(c, *id, err);
}
