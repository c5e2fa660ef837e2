#include <stdio.h>
#include <string.h>

#include "server/dsml_out.h"

static void json_escape(dsv4_strbuf *b, const char *s, size_t n) {
    dsv4_error err;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\', e[1] = (char)c;
            dsv4_strbuf_append(b, e, 2, &err);
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (named)
                dsv4_strbuf_puts(b, named, &err);
            else {
                snprintf(e, sizeof e, "\\u%04x", c);
                dsv4_strbuf_puts(b, e, &err);
            }
        } else {
            dsv4_strbuf_append(b, s + i, 1, &err);
        }
    }
}

static void args_piece(srv_dsml_sink *g, const char *s, size_t n) { srv_out_tool_args(g->out, s, n); }

void srv_dsml_event(void *user, const dsv4_dsml_event *ev) {
    srv_dsml_sink *g = user;
    dsv4_strbuf b = {0};
    dsv4_error err;
    switch (ev->type) {
    case DSV4_DSML_TEXT:
        if (g->in_block) { /* the block turned out malformed: its calls are void */
            srv_out_drop_calls(g->out, g->block_first_call);
            g->in_block = false;
        }
        srv_out_text(g->out, ev->data, ev->len);
        break;
    case DSV4_DSML_CALL_BEGIN:
        if (!g->in_block) {
            g->in_block = true;
            g->block_first_call = g->out->n_calls;
        }
        srv_out_tool_begin(g->out, ev->name);
        g->arg_first = true;
        break;
    case DSV4_DSML_ARG_BEGIN:
        dsv4_strbuf_puts(&b, g->arg_first ? "{\"" : ",\"", &err);
        json_escape(&b, ev->name ? ev->name : "", ev->name ? strlen(ev->name) : 0);
        dsv4_strbuf_puts(&b, ev->is_string ? "\":\"" : "\":", &err);
        args_piece(g, b.data, b.len);
        g->arg_first = false;
        g->arg_string = ev->is_string;
        g->lit.len = 0;
        break;
    case DSV4_DSML_ARG_DELTA:
        if (g->arg_string) {
            json_escape(&b, ev->data, ev->len);
            if (b.len) args_piece(g, b.data, b.len);
        } else {
            dsv4_strbuf_append(&g->lit, ev->data, ev->len, &err);
        }
        break;
    case DSV4_DSML_ARG_END:
        if (g->arg_string) {
            args_piece(g, "\"", 1);
        } else {
            /* a JSON literal is passed through when valid, else as a string */
            const char *p = g->lit.data ? g->lit.data : "";
            size_t n = g->lit.len;
            while (n && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++, n--;
            while (n && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\t' || p[n - 1] == '\r')) n--;
            json_t *v = n ? json_loadb(p, n, JSON_DECODE_ANY, NULL) : NULL;
            if (v) {
                args_piece(g, p, n);
                json_decref(v);
            } else {
                dsv4_strbuf_puts(&b, "\"", &err);
                json_escape(&b, p, n);
                dsv4_strbuf_puts(&b, "\"", &err);
                args_piece(g, b.data, b.len);
            }
        }
        break;
    case DSV4_DSML_CALL_END:
        args_piece(g, g->arg_first ? "{}" : "}", g->arg_first ? 2 : 1);
        srv_out_tool_end(g->out);
        break;
    case DSV4_DSML_CALLS_END:
        for (size_t i = g->block_first_call; i < g->out->n_calls; i++)
            if (g->mem) srv_toolmem_put(g->mem, g->out->calls[i].id, ev->raw, ev->raw_len);
        g->in_block = false;
        break;
    }
    dsv4_strbuf_free(&b);
}

void srv_dsml_sink_free(srv_dsml_sink *k) { dsv4_strbuf_free(&k->lit); }
