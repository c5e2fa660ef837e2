/* Streaming DSML tool-call parser. The grammar is exactly what text/chat.c renders
 * (dsv4_chat_render_tool_calls), with whitespace tolerated between tags:
 *
 *   block  := ["\n" | "\n\n"] "<｜DSML｜tool_calls>" ws invoke+ "</｜DSML｜tool_calls>"
 *   invoke := "<｜DSML｜invoke name=\"" ATTR "\">" ws (param ws)* "</｜DSML｜invoke>" ws
 *   param  := "<｜DSML｜parameter name=\"" ATTR "\" string=\"" ("true"|"false") "\">" VALUE
 *             "</｜DSML｜parameter>"
 *
 * ATTR inverts the renderer's attribute escape (&amp; &lt; &gt; &quot;) and may not contain
 * '<', '>' or '\n'. VALUE inverts the payload escape: "&lt;/｜DSML｜parameter>" in strings and
 * "\u003c/｜DSML｜parameter>" in JSON literals both decode to the closing tag.
 *
 * The parser works byte by byte, so its events do not depend on how the input is split (only
 * TEXT and ARG_DELTA pieces may be cut differently). Invariant: the concatenation of all TEXT
 * payloads and all CALLS_END raw blocks equals the input. A block that turns out malformed is
 * returned as TEXT; call events already emitted for it are then void (a consumer sees TEXT
 * arrive after CALL_BEGIN without CALLS_END). */
#include <stdlib.h>
#include <string.h>

#include "text/dsml.h"
#include "text/special.h"
#include "text/utf8.h"

#define D DSV4_DSML_STR
#define LIT(s)                                                                                               \
    { s, sizeof(s) - 1 }

typedef struct lit {
    const char *s;
    size_t n;
} lit;

static const lit OPEN = LIT("<" D "tool_calls>");
static const lit CLOSE = LIT("</" D "tool_calls>");
static const lit INVOKE_OPEN = LIT("<" D "invoke name=\"");
static const lit INVOKE_CLOSE = LIT("</" D "invoke>");
static const lit PARAM_OPEN = LIT("<" D "parameter name=\"");
static const lit PARAM_CLOSE = LIT("</" D "parameter>");
static const lit TYPE_TRUE = LIT(" string=\"true\">");
static const lit TYPE_FALSE = LIT(" string=\"false\">");
static const lit ESC_STRING = LIT("&lt;/" D "parameter>");
static const lit ESC_JSON = LIT("\\u003c/" D "parameter>");

/* Longer names are treated as malformed so a missing quote cannot swallow the stream. */
#define ATTR_MAX 1024

typedef enum pstate {
    ST_TEXT = 0,
    ST_TAGS_INVOKES, /* before an invoke or the block close */
    ST_INVOKE_NAME,
    ST_INVOKE_GT,
    ST_TAGS_PARAMS, /* before a parameter or the invoke close */
    ST_PARAM_NAME,
    ST_PARAM_TYPE,
    ST_VALUE,
} pstate;

typedef enum step_result { STEP_OK = 0, STEP_FAIL, STEP_ERROR } step_result;

struct dsv4_dsml_parser {
    dsv4_dsml_callback cb;
    void *user;
    pstate state;
    dsv4_strbuf hold;  /* ST_TEXT: bytes that may start a block */
    dsv4_strbuf text;  /* pending TEXT */
    dsv4_strbuf raw;   /* the open block's bytes */
    dsv4_strbuf tok;   /* current tag prefix, or (ST_VALUE) a possible close/escape prefix */
    dsv4_strbuf delta; /* pending ARG_DELTA */
    dsv4_strbuf attr;  /* attribute bytes as written */
    dsv4_strbuf name;  /* current call name, decoded */
    dsv4_strbuf key;   /* current parameter key, decoded */
    size_t tok_start;  /* raw offset of the whitespace + tag being matched (refed on failure) */
    size_t invoke_start;
    size_t invokes_in_block;
    size_t calls_done;
    size_t calls_at_block;
    size_t call_index;
    bool is_string;
    dsv4_error *err;
};

dsv4_dsml_parser *dsv4_dsml_parser_new(dsv4_dsml_callback cb, void *user) {
    dsv4_dsml_parser *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->cb = cb;
    p->user = user;
    return p;
}

void dsv4_dsml_parser_free(dsv4_dsml_parser *p) {
    if (!p) return;
    dsv4_strbuf *bufs[] = {&p->hold, &p->text, &p->raw, &p->tok, &p->delta, &p->attr, &p->name, &p->key};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) dsv4_strbuf_free(bufs[i]);
    free(p);
}

bool dsv4_dsml_parser_in_structure(const dsv4_dsml_parser *p) {
    return p && p->state != ST_TEXT && p->state != ST_VALUE;
}

size_t dsv4_dsml_parser_calls(const dsv4_dsml_parser *p) { return p ? p->calls_done : 0; }

/* ------------------------------------------------------------ helpers ---- */

static void clear(dsv4_strbuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

static void drop_front(dsv4_strbuf *b, size_t n) {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

static bool is_prefix_of(const char *s, size_t n, lit l) { return n <= l.n && memcmp(s, l.s, n) == 0; }
static bool equals(const char *s, size_t n, lit l) { return n == l.n && memcmp(s, l.s, n) == 0; }
static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Bytes at the end of s that are a valid but incomplete UTF-8 sequence (held for the next feed
 * so streamed pieces stay whole characters). */
static size_t utf8_cut_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80) continue;
        if (c < 0x80) return 0;
        return dsv4_utf8_valid_len((const uint8_t *)s + n - k, k, NULL, NULL) == -1 ? k : 0;
    }
    return 0;
}

static void emit(dsv4_dsml_parser *p, dsv4_dsml_event_type type, const char *data, size_t len,
                 const char *raw, size_t raw_len) {
    const char *name = NULL;
    if (type == DSV4_DSML_CALL_BEGIN || type == DSV4_DSML_CALL_END)
        name = p->name.data ? p->name.data : "";
    else if (type != DSV4_DSML_TEXT && type != DSV4_DSML_CALLS_END)
        name = p->key.data ? p->key.data : "";
    dsv4_dsml_event ev = {.type = type,
                          .call_index = p->call_index,
                          .name = name,
                          .is_string = p->is_string,
                          .data = data,
                          .len = len,
                          .raw = raw,
                          .raw_len = raw_len};
    if (p->cb) p->cb(p->user, &ev);
}

/* Emits the pending piece of b as `type`, keeping an incomplete UTF-8 tail unless `all`. */
static void flush_piece(dsv4_dsml_parser *p, dsv4_strbuf *b, dsv4_dsml_event_type type, bool all) {
    size_t keep = all ? 0 : utf8_cut_tail(b->data, b->len);
    if (b->len > keep) {
        emit(p, type, b->data, b->len - keep, NULL, 0);
        drop_front(b, b->len - keep);
    }
}

static void flush_text(dsv4_dsml_parser *p) { flush_piece(p, &p->text, DSV4_DSML_TEXT, true); }

/* "\n{0,2}" + a prefix of OPEN; *complete when that prefix is all of OPEN. */
static bool block_prefix(const char *s, size_t n, bool *complete) {
    size_t k = 0;
    while (k < n && k < 2 && s[k] == '\n') k++;
    *complete = equals(s + k, n - k, OPEN);
    return is_prefix_of(s + k, n - k, OPEN);
}

static dsv4_status unescape_attr(const dsv4_strbuf *in, dsv4_strbuf *out, dsv4_error *err) {
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}};
    clear(out);
    dsv4_status st = dsv4_strbuf_append(out, "", 0, err);
    for (size_t i = 0; i < in->len && st == DSV4_OK;) {
        size_t step = 1;
        char c = in->data[i];
        for (size_t e = 0; e < sizeof(ents) / sizeof(ents[0]) && c == '&'; e++) {
            size_t l = strlen(ents[e].ent);
            if (in->len - i >= l && memcmp(in->data + i, ents[e].ent, l) == 0) {
                c = ents[e].c;
                step = l;
                break;
            }
        }
        st = dsv4_strbuf_append(out, &c, 1, err);
        i += step;
    }
    return st;
}

/* ---------------------------------------------------------------- steps ---- */

#define TRY(expr)                                                                                            \
    do {                                                                                                     \
        if ((expr) != DSV4_OK) return STEP_ERROR;                                                            \
    } while (0)

static void enter_tags(dsv4_dsml_parser *p, pstate s) {
    p->state = s;
    p->tok_start = p->raw.len;
    clear(&p->tok);
}

static step_result step_text(dsv4_dsml_parser *p, char c) {
    TRY(dsv4_strbuf_append(&p->hold, &c, 1, p->err));
    bool complete = false;
    while (!block_prefix(p->hold.data, p->hold.len, &complete)) {
        size_t i = 1;
        bool ignored;
        while (i < p->hold.len && !block_prefix(p->hold.data + i, p->hold.len - i, &ignored)) i++;
        TRY(dsv4_strbuf_append(&p->text, p->hold.data, i, p->err));
        drop_front(&p->hold, i);
    }
    if (!complete) return STEP_OK;
    flush_text(p);
    clear(&p->raw);
    TRY(dsv4_strbuf_append(&p->raw, p->hold.data, p->hold.len, p->err));
    clear(&p->hold);
    p->calls_at_block = p->calls_done;
    p->invokes_in_block = 0;
    enter_tags(p, ST_TAGS_INVOKES);
    return STEP_OK;
}

/* Whitespace, then one of the tags in alts (n_alts of them); *hit = the index matched, or -1. */
static step_result step_tags(dsv4_dsml_parser *p, char c, const lit *alts, size_t n_alts, int *hit) {
    *hit = -1;
    if (p->tok.len == 0 && is_ws(c)) return STEP_OK;
    TRY(dsv4_strbuf_append(&p->tok, &c, 1, p->err));
    bool partial = false;
    for (size_t a = 0; a < n_alts; a++) {
        if (equals(p->tok.data, p->tok.len, alts[a])) {
            *hit = (int)a;
            return STEP_OK;
        }
        partial = partial || is_prefix_of(p->tok.data, p->tok.len, alts[a]);
    }
    return partial ? STEP_OK : STEP_FAIL;
}

static step_result step_attr(dsv4_dsml_parser *p, char c, dsv4_strbuf *decoded, bool allow_empty,
                             bool *done) {
    *done = false;
    if (c == '"') {
        if (!allow_empty && p->attr.len == 0) return STEP_FAIL;
        TRY(unescape_attr(&p->attr, decoded, p->err));
        *done = true;
        return STEP_OK;
    }
    if (c == '<' || c == '>' || c == '\n' || p->attr.len >= ATTR_MAX) return STEP_FAIL;
    TRY(dsv4_strbuf_append(&p->attr, &c, 1, p->err));
    return STEP_OK;
}

static step_result step_value(dsv4_dsml_parser *p, char c) {
    const lit esc = p->is_string ? ESC_STRING : ESC_JSON;
    TRY(dsv4_strbuf_append(&p->tok, &c, 1, p->err));
    for (;;) {
        const char *t = p->tok.data;
        size_t n = p->tok.len;
        if (equals(t, n, PARAM_CLOSE)) {
            flush_piece(p, &p->delta, DSV4_DSML_ARG_DELTA, true);
            emit(p, DSV4_DSML_ARG_END, NULL, 0, NULL, 0);
            enter_tags(p, ST_TAGS_PARAMS);
            return STEP_OK;
        }
        if (equals(t, n, esc)) {
            TRY(dsv4_strbuf_append(&p->delta, PARAM_CLOSE.s, PARAM_CLOSE.n, p->err));
            clear(&p->tok);
            return STEP_OK;
        }
        if (is_prefix_of(t, n, PARAM_CLOSE) || is_prefix_of(t, n, esc)) return STEP_OK;
        size_t i = 1;
        while (i < n && !is_prefix_of(t + i, n - i, PARAM_CLOSE) && !is_prefix_of(t + i, n - i, esc)) i++;
        TRY(dsv4_strbuf_append(&p->delta, t, i, p->err));
        drop_front(&p->tok, i);
        if (p->tok.len == 0) return STEP_OK;
    }
}

static step_result step_block(dsv4_dsml_parser *p, char c) {
    int hit = -1;
    bool done = false;
    step_result r;
    TRY(dsv4_strbuf_append(&p->raw, &c, 1, p->err));
    switch (p->state) {
    case ST_TAGS_INVOKES: {
        const lit alts[] = {INVOKE_OPEN, CLOSE};
        if ((r = step_tags(p, c, alts, p->invokes_in_block ? 2 : 1, &hit)) != STEP_OK) return r;
        if (hit == 0) {
            p->invoke_start = p->raw.len - INVOKE_OPEN.n;
            clear(&p->attr);
            p->state = ST_INVOKE_NAME;
        } else if (hit == 1) {
            p->calls_at_block = p->calls_done;
            p->state = ST_TEXT;
            emit(p, DSV4_DSML_CALLS_END, NULL, 0, p->raw.data, p->raw.len);
            clear(&p->raw);
        }
        return STEP_OK;
    }
    case ST_INVOKE_NAME:
        if ((r = step_attr(p, c, &p->name, false, &done)) != STEP_OK || !done) return r;
        p->call_index = p->calls_done;
        emit(p, DSV4_DSML_CALL_BEGIN, NULL, 0, NULL, 0);
        p->state = ST_INVOKE_GT;
        return STEP_OK;
    case ST_INVOKE_GT:
        if (c != '>') return STEP_FAIL;
        enter_tags(p, ST_TAGS_PARAMS);
        return STEP_OK;
    case ST_TAGS_PARAMS: {
        const lit alts[] = {PARAM_OPEN, INVOKE_CLOSE};
        if ((r = step_tags(p, c, alts, 2, &hit)) != STEP_OK) return r;
        if (hit == 0) {
            clear(&p->attr);
            p->state = ST_PARAM_NAME;
        } else if (hit == 1) {
            p->calls_done++;
            p->invokes_in_block++;
            emit(p, DSV4_DSML_CALL_END, NULL, 0, p->raw.data + p->invoke_start, p->raw.len - p->invoke_start);
            enter_tags(p, ST_TAGS_INVOKES);
        }
        return STEP_OK;
    }
    case ST_PARAM_NAME:
        if ((r = step_attr(p, c, &p->key, true, &done)) != STEP_OK || !done) return r;
        clear(&p->tok);
        p->state = ST_PARAM_TYPE;
        return STEP_OK;
    case ST_PARAM_TYPE: {
        const lit alts[] = {TYPE_TRUE, TYPE_FALSE};
        TRY(dsv4_strbuf_append(&p->tok, &c, 1, p->err));
        for (int a = 0; a < 2; a++)
            if (equals(p->tok.data, p->tok.len, alts[a])) {
                p->is_string = a == 0;
                emit(p, DSV4_DSML_ARG_BEGIN, NULL, 0, NULL, 0);
                clear(&p->tok);
                clear(&p->delta);
                p->state = ST_VALUE;
                return STEP_OK;
            }
        return is_prefix_of(p->tok.data, p->tok.len, TYPE_TRUE) ||
                       is_prefix_of(p->tok.data, p->tok.len, TYPE_FALSE)
                   ? STEP_OK
                   : STEP_FAIL;
    }
    case ST_VALUE: return step_value(p, c);
    case ST_TEXT: break;
    }
    return STEP_FAIL;
}

/* The open block is not DSML: its bytes up to the current tag become text, and the tag's
 * bytes are parsed again as text (a real block may start there). */
static dsv4_status process(dsv4_dsml_parser *p, const char *s, size_t n);

static dsv4_status abort_block(dsv4_dsml_parser *p) {
    size_t start = p->tok_start <= p->raw.len ? p->tok_start : p->raw.len;
    size_t again = p->raw.len - start;
    char *copy = malloc(again ? again : 1);
    if (!copy) return dsv4_fail(p->err, DSV4_ERR_NOMEM, "DSML parser: out of memory");
    memcpy(copy, p->raw.data + start, again);
    dsv4_status st = dsv4_strbuf_append(&p->text, p->raw.data, start, p->err);
    p->state = ST_TEXT;
    p->calls_done = p->calls_at_block;
    clear(&p->raw);
    clear(&p->tok);
    clear(&p->delta);
    if (st == DSV4_OK) st = process(p, copy, again);
    free(copy);
    return st;
}

static dsv4_status process(dsv4_dsml_parser *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        step_result r = p->state == ST_TEXT ? step_text(p, s[i]) : step_block(p, s[i]);
        if (r == STEP_ERROR) return p->err && p->err->code != DSV4_OK ? p->err->code : DSV4_ERR_NOMEM;
        if (r == STEP_FAIL) {
            dsv4_status st = abort_block(p);
            if (st != DSV4_OK) return st;
        }
    }
    return DSV4_OK;
}

dsv4_status dsv4_dsml_parser_feed(dsv4_dsml_parser *p, const char *bytes, size_t n, dsv4_error *err) {
    if (!p) return dsv4_fail(err, DSV4_ERR_INVALID, "DSML parser: NULL parser");
    if (n && !bytes) return dsv4_fail(err, DSV4_ERR_INVALID, "DSML parser: NULL input with length %zu", n);
    dsv4_error local;
    dsv4_error_clear(&local);
    p->err = err ? err : &local;
    if (err) dsv4_error_clear(err);
    dsv4_status st = process(p, bytes, n);
    if (st == DSV4_OK) {
        flush_piece(p, &p->text, DSV4_DSML_TEXT, false);
        if (p->state == ST_VALUE) flush_piece(p, &p->delta, DSV4_DSML_ARG_DELTA, false);
    }
    p->err = NULL;
    return st;
}

dsv4_status dsv4_dsml_parser_finish(dsv4_dsml_parser *p, dsv4_error *err) {
    if (!p) return dsv4_fail(err, DSV4_ERR_INVALID, "DSML parser: NULL parser");
    dsv4_status st = DSV4_OK;
    if (p->state == ST_TEXT) {
        st = dsv4_strbuf_append(&p->text, p->hold.data, p->hold.len, err);
        clear(&p->hold);
    } else { /* unterminated block: all of it is text */
        st = dsv4_strbuf_append(&p->text, p->raw.data, p->raw.len, err);
        p->calls_done = p->calls_at_block;
        p->state = ST_TEXT;
        clear(&p->raw);
        clear(&p->tok);
        clear(&p->delta);
    }
    if (st == DSV4_OK) flush_text(p);
    return st;
}
