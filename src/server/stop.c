#include "server/stop.h"

#include <string.h>

void srv_stop_init(srv_stop *s, char *const *stops, size_t n) {
    memset(s, 0, sizeof *s);
    s->stops = stops;
    s->n_stops = n;
}

void srv_stop_free(srv_stop *s) { dsv4_strbuf_free(&s->held); }

/* Longest suffix of buf (len n) that is a proper prefix of some stop string. */
static size_t held_tail(const srv_stop *s, const char *buf, size_t n) {
    size_t best = 0;
    for (size_t k = 0; k < s->n_stops; k++) {
        const size_t sl = strlen(s->stops[k]);
        for (size_t t = sl - 1 < n ? sl - 1 : n; t > best; t--)
            if (memcmp(buf + n - t, s->stops[k], t) == 0) {
                best = t;
                break;
            }
    }
    return best;
}

bool srv_stop_feed(srv_stop *s, const char *text, size_t len, dsv4_strbuf *out) {
    dsv4_error err;
    if (s->hit) return true;
    if (s->n_stops == 0) {
        dsv4_strbuf_append(out, text, len, &err);
        return false;
    }
    dsv4_strbuf_append(&s->held, text, len, &err);
    const char *b = s->held.data;
    const size_t n = s->held.len;
    size_t first = n;
    for (size_t k = 0; k < s->n_stops; k++) {
        const char *m = memmem(b, n, s->stops[k], strlen(s->stops[k]));
        if (m && (size_t)(m - b) < first) {
            first = (size_t)(m - b);
            s->which = k;
        }
    }
    if (first < n) {
        dsv4_strbuf_append(out, b, first, &err);
        s->held.len = 0;
        s->hit = true;
        return true;
    }
    const size_t keep = held_tail(s, b, n);
    dsv4_strbuf_append(out, b, n - keep, &err);
    memmove(s->held.data, b + n - keep, keep);
    s->held.len = keep;
    return false;
}

void srv_stop_flush(srv_stop *s, dsv4_strbuf *out) {
    dsv4_error err;
    if (!s->hit && s->held.len) dsv4_strbuf_append(out, s->held.data, s->held.len, &err);
    s->held.len = 0;
}
