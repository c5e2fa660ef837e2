#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretok.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>

#define N_PASSES 3

static const char *const PASS_PATTERNS[N_PASSES] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+",
};

struct dsv4_pretok {
    pcre2_code *code[N_PASSES];
};

dsv4_status dsv4_pretok_new(dsv4_pretok **out, dsv4_error *err) {
    *out = NULL;
    dsv4_pretok *pt = calloc(1, sizeof(*pt));
    if (!pt) return dsv4_fail(err, DSV4_ERR_NOMEM, "pre-tokenizer: out of memory");
    for (int i = 0; i < N_PASSES; i++) {
        int ec = 0;
        PCRE2_SIZE eo = 0;
        pt->code[i] = pcre2_compile((PCRE2_SPTR)PASS_PATTERNS[i], PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!pt->code[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            dsv4_pretok_free(pt);
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                             "pre-tokenizer: PCRE2 compile of pass %d failed at %zu: %s", i + 1, (size_t)eo,
                             (const char *)msg);
        }
        /* JIT is an optimisation only: without it pcre2_match interprets. */
        (void)pcre2_jit_compile(pt->code[i], PCRE2_JIT_COMPLETE);
    }
    *out = pt;
    return DSV4_OK;
}

void dsv4_pretok_free(dsv4_pretok *pt) {
    if (!pt) return;
    for (int i = 0; i < N_PASSES; i++) pcre2_code_free(pt->code[i]);
    free(pt);
}

typedef struct split_ctx {
    const dsv4_pretok *pt;
    pcre2_match_data *md;
    dsv4_piece_fn fn;
    void *fn_ctx;
} split_ctx;

/* One match of pass `pass` in s[0..n) at or after `start`; false when there is none. */
static dsv4_status find_match(split_ctx *c, int pass, const char *s, size_t n, size_t start, size_t *m0,
                              size_t *m1, int *found, dsv4_error *err) {
    int rc = pcre2_match(c->pt->code[pass], (PCRE2_SPTR)s, n, start, 0, c->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(c->pt->code[pass], (PCRE2_SPTR)s, n, start, PCRE2_NO_JIT, c->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) {
        *found = 0;
        return DSV4_OK;
    }
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        return dsv4_fail(err, DSV4_ERR_INVALID, "pre-tokenizer: pass %d match failed at byte %zu: %s",
                         pass + 1, start, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *m0 = ov[0];
    *m1 = ov[1];
    *found = 1;
    return DSV4_OK;
}

static dsv4_status split_pass(split_ctx *c, int pass, const char *s, size_t n, dsv4_error *err) {
    if (n == 0) return DSV4_OK;
    if (pass == N_PASSES) return c->fn(c->fn_ctx, s, n, err);
    size_t pos = 0;
    while (pos < n) {
        size_t m0 = 0, m1 = 0;
        int found = 0;
        dsv4_status st = find_match(c, pass, s, n, pos, &m0, &m1, &found, err);
        if (st != DSV4_OK) return st;
        if (!found) break;
        if (m1 == m0) { /* no pattern can match empty; guard against looping anyway */
            m1 = m0 + 1;
            if (m1 > n) break;
        }
        st = split_pass(c, pass + 1, s + pos, m0 - pos, err);
        if (st == DSV4_OK) st = split_pass(c, pass + 1, s + m0, m1 - m0, err);
        if (st != DSV4_OK) return st;
        pos = m1;
    }
    return split_pass(c, pass + 1, s + pos, n - pos, err);
}

dsv4_status dsv4_pretok_split(const dsv4_pretok *pt, const char *text, size_t len, dsv4_piece_fn fn,
                              void *ctx, dsv4_error *err) {
    if (len == 0) return DSV4_OK;
    split_ctx c = {.pt = pt, .fn = fn, .fn_ctx = ctx};
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) return dsv4_fail(err, DSV4_ERR_NOMEM, "pre-tokenizer: out of memory");
    dsv4_status st = split_pass(&c, 0, text, len, err);
    pcre2_match_data_free(c.md);
    return st;
}

typedef struct span_vec {
    const char *base;
    dsv4_span *v;
    size_t n, cap;
} span_vec;

static dsv4_status push_span(void *ctx, const char *piece, size_t len, dsv4_error *err) {
    span_vec *sv = ctx;
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 64;
        dsv4_span *p = realloc(sv->v, cap * sizeof(*p));
        if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "pre-tokenizer: out of memory");
        sv->v = p;
        sv->cap = cap;
    }
    sv->v[sv->n++] = (dsv4_span){.off = (size_t)(piece - sv->base), .len = len};
    return DSV4_OK;
}

dsv4_status dsv4_pretok_split_spans(const dsv4_pretok *pt, const char *text, size_t len, dsv4_span **spans,
                                    size_t *n_spans, dsv4_error *err) {
    span_vec sv = {.base = text};
    dsv4_status st = dsv4_pretok_split(pt, text, len, push_span, &sv, err);
    if (st != DSV4_OK) {
        free(sv.v);
        *spans = NULL;
        *n_spans = 0;
        return st;
    }
    *spans = sv.v;
    *n_spans = sv.n;
    return DSV4_OK;
}
