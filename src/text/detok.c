#include "text/detok.h"

#include <stdbool.h>
#include <string.h>

#include "text/utf8.h"

static const char REPLACEMENT[] = "\xef\xbf\xbd";

void dsv4_detok_init(dsv4_detok *d) { memset(d, 0, sizeof(*d)); }
size_t dsv4_detok_pending(const dsv4_detok *d) { return d->n_pend; }

/* Emits the valid prefix of s[0..n) and returns how many bytes were consumed; stops before an
 * incomplete tail (only when at_end is false). */
static dsv4_status emit_valid(const uint8_t *s, size_t n, bool at_end, size_t *consumed, dsv4_strbuf *out,
                              dsv4_error *err) {
    size_t p = 0, run = 0; /* run: start of pending valid bytes not yet appended */
    dsv4_status st = DSV4_OK;
    while (p < n) {
        size_t bad = 1;
        int l = dsv4_utf8_valid_len(s + p, n - p, NULL, &bad);
        if (l > 0) {
            p += (size_t)l;
            continue;
        }
        if (l < 0 && !at_end) break;
        if (l < 0) bad = n - p; /* incomplete at the end of the stream: one replacement */
        if ((st = dsv4_strbuf_append(out, s + run, p - run, err)) != DSV4_OK) return st;
        if ((st = dsv4_strbuf_append(out, REPLACEMENT, 3, err)) != DSV4_OK) return st;
        p += bad;
        run = p;
    }
    if ((st = dsv4_strbuf_append(out, s + run, p - run, err)) != DSV4_OK) return st;
    *consumed = p;
    return DSV4_OK;
}

dsv4_status dsv4_detok_push(dsv4_detok *d, const char *bytes, size_t len, dsv4_strbuf *out, dsv4_error *err) {
    const uint8_t *in = (const uint8_t *)bytes;
    size_t used = 0;
    dsv4_status st;
    /* Resolve the held-back prefix one byte at a time; it never grows past 4 bytes. */
    while (d->n_pend && used < len) {
        d->pend[d->n_pend++] = in[used++];
        size_t c = 0;
        if ((st = emit_valid(d->pend, d->n_pend, false, &c, out, err)) != DSV4_OK) return st;
        memmove(d->pend, d->pend + c, d->n_pend - c);
        d->n_pend = (uint8_t)(d->n_pend - c);
    }
    if (used == len) return DSV4_OK;
    size_t c = 0;
    if ((st = emit_valid(in + used, len - used, false, &c, out, err)) != DSV4_OK) return st;
    used += c;
    memcpy(d->pend, in + used, len - used); /* an incomplete sequence: at most 3 bytes */
    d->n_pend = (uint8_t)(len - used);
    return DSV4_OK;
}

dsv4_status dsv4_detok_push_token(dsv4_detok *d, const dsv4_tokenizer *t, int32_t id, dsv4_strbuf *out,
                                  dsv4_error *err) {
    size_t l;
    const char *b = dsv4_token_bytes(t, id, &l);
    return dsv4_detok_push(d, b, l, out, err);
}

dsv4_status dsv4_detok_flush(dsv4_detok *d, dsv4_strbuf *out, dsv4_error *err) {
    size_t c = 0;
    dsv4_status st = emit_valid(d->pend, d->n_pend, true, &c, out, err);
    d->n_pend = 0;
    return st;
}
