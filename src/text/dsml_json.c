/* DSML arguments -> JSON object text. Non-string parameters are JSON literals written by the
 * model; they are copied verbatim only when they are one well-formed JSON value, so the
 * arguments string handed to clients always parses. */
#include <stdint.h>
#include <string.h>

#include "text/dsml.h"
#include "text/utf8.h"

/* Bounded nesting: the model (or a hostile prompt) can produce arbitrarily deep literals. */
#define JSON_MAX_DEPTH 256

typedef struct jcur {
    const char *s;
    size_t n, i;
} jcur;

static void jws(jcur *c) {
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static bool jlit(jcur *c, const char *w) {
    size_t k = strlen(w);
    if (c->n - c->i < k || memcmp(c->s + c->i, w, k) != 0) return false;
    c->i += k;
    return true;
}

static bool jhex4(jcur *c) {
    if (c->n - c->i < 4) return false;
    for (int k = 0; k < 4; k++) {
        char h = c->s[c->i + k];
        if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
    }
    c->i += 4;
    return true;
}

static bool jstring(jcur *c) {
    if (c->i >= c->n || c->s[c->i] != '"') return false;
    c->i++;
    while (c->i < c->n) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') return c->i++, true;
        if (ch < 0x20) return false;
        if (ch == '\\') {
            if (++c->i >= c->n) return false;
            char e = c->s[c->i++];
            if (e == 'u') {
                if (!jhex4(c)) return false;
            } else if (!strchr("\"\\/bfnrt", e) || e == 0) {
                return false;
            }
            continue;
        }
        int k = dsv4_utf8_valid_len((const uint8_t *)c->s + c->i, c->n - c->i, NULL, NULL);
        if (k <= 0) return false;
        c->i += (size_t)k;
    }
    return false;
}

static bool jdigits(jcur *c) {
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
    return c->i > start;
}

static bool jnumber(jcur *c) {
    if (c->i < c->n && c->s[c->i] == '-') c->i++;
    if (c->i < c->n && c->s[c->i] == '0')
        c->i++;
    else if (!jdigits(c))
        return false;
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        if (!jdigits(c)) return false;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!jdigits(c)) return false;
    }
    return true;
}

static bool jvalue(jcur *c, int depth) {
    jws(c);
    if (c->i >= c->n) return false;
    char ch = c->s[c->i];
    if (ch == '"') return jstring(c);
    if (ch == 't') return jlit(c, "true");
    if (ch == 'f') return jlit(c, "false");
    if (ch == 'n') return jlit(c, "null");
    if (ch == '-' || (ch >= '0' && ch <= '9')) return jnumber(c);
    if (ch != '[' && ch != '{') return false;
    if (depth >= JSON_MAX_DEPTH) return false;
    const char close = ch == '[' ? ']' : '}';
    c->i++;
    jws(c);
    if (c->i < c->n && c->s[c->i] == close) return c->i++, true;
    for (;;) {
        if (close == '}') {
            jws(c);
            if (!jstring(c)) return false;
            jws(c);
            if (c->i >= c->n || c->s[c->i] != ':') return false;
            c->i++;
        }
        if (!jvalue(c, depth + 1)) return false;
        jws(c);
        if (c->i >= c->n) return false;
        if (c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->s[c->i] == close) return c->i++, true;
        return false;
    }
}

/* One complete JSON value, surrounding whitespace allowed; [*b, *e) bounds the value itself. */
static bool json_literal(const char *s, size_t n, size_t *b, size_t *e) {
    jcur c = {s, n, 0};
    jws(&c);
    *b = c.i;
    if (!jvalue(&c, 0)) return false;
    *e = c.i;
    jws(&c);
    return c.i == n;
}

/* JSON string; ill-formed UTF-8 becomes U+FFFD so the output always parses. */
static dsv4_status put_json_string(dsv4_strbuf *out, const char *s, size_t n, dsv4_error *err) {
    static const char hex[] = "0123456789abcdef";
    dsv4_status st = dsv4_strbuf_append(out, "\"", 1, err);
    size_t run = 0; /* start of the pending run of bytes copied verbatim */
    for (size_t i = 0; i < n && st == DSV4_OK;) {
        unsigned char ch = (unsigned char)s[i];
        const char *rep = NULL;
        char u[7];
        size_t step = 1;
        if (ch == '"')
            rep = "\\\"";
        else if (ch == '\\')
            rep = "\\\\";
        else if (ch == '\n')
            rep = "\\n";
        else if (ch == '\r')
            rep = "\\r";
        else if (ch == '\t')
            rep = "\\t";
        else if (ch == '\b')
            rep = "\\b";
        else if (ch == '\f')
            rep = "\\f";
        else if (ch < 0x20) {
            memcpy(u, "\\u00", 4);
            u[4] = hex[ch >> 4], u[5] = hex[ch & 15], u[6] = 0;
            rep = u;
        } else if (ch >= 0x80) {
            size_t bad = 1;
            int k = dsv4_utf8_valid_len((const uint8_t *)s + i, n - i, NULL, &bad);
            if (k > 0) {
                i += (size_t)k;
                continue;
            }
            rep = "\xef\xbf\xbd";
            step = k < 0 ? n - i : bad;
        } else {
            i++;
            continue;
        }
        st = dsv4_strbuf_append(out, s + run, i - run, err);
        if (st == DSV4_OK) st = dsv4_strbuf_puts(out, rep, err);
        i += step;
        run = i;
    }
    if (st == DSV4_OK) st = dsv4_strbuf_append(out, s + run, n - run, err);
    if (st == DSV4_OK) st = dsv4_strbuf_append(out, "\"", 1, err);
    return st;
}

dsv4_status dsv4_dsml_args_to_json(const char *const *keys, const char *const *values, const bool *is_string,
                                   size_t n, dsv4_strbuf *out, dsv4_error *err) {
    if (n && (!keys || !values || !is_string))
        return dsv4_fail(err, DSV4_ERR_INVALID, "DSML arguments: NULL keys/values/is_string array");
    dsv4_status st = dsv4_strbuf_append(out, "{", 1, err);
    for (size_t i = 0; i < n && st == DSV4_OK; i++) {
        const char *k = keys[i] ? keys[i] : "";
        const char *v = values[i] ? values[i] : "";
        size_t vn = strlen(v), b = 0, e = 0;
        if (i) st = dsv4_strbuf_append(out, ",", 1, err);
        if (st == DSV4_OK) st = put_json_string(out, k, strlen(k), err);
        if (st == DSV4_OK) st = dsv4_strbuf_append(out, ":", 1, err);
        if (st != DSV4_OK) break;
        if (!is_string[i] && json_literal(v, vn, &b, &e))
            st = dsv4_strbuf_append(out, v + b, e - b, err);
        else
            st = put_json_string(out, v, vn, err);
    }
    if (st == DSV4_OK) st = dsv4_strbuf_append(out, "}", 1, err);
    return st;
}
