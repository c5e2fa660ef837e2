#include "text/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

dsv4_status dsv4_strbuf_reserve(dsv4_strbuf *b, size_t extra, dsv4_error *err) {
    if (extra > SIZE_MAX - b->len - 1) return dsv4_fail(err, DSV4_ERR_NOMEM, "string buffer: size overflow");
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return DSV4_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "string buffer: out of memory (%zu bytes)", cap);
    b->data = p;
    b->cap = cap;
    return DSV4_OK;
}

dsv4_status dsv4_strbuf_append(dsv4_strbuf *b, const void *data, size_t len, dsv4_error *err) {
    dsv4_status st = dsv4_strbuf_reserve(b, len, err);
    if (st != DSV4_OK) return st;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return DSV4_OK;
}

dsv4_status dsv4_strbuf_puts(dsv4_strbuf *b, const char *s, dsv4_error *err) {
    return dsv4_strbuf_append(b, s ? s : "", s ? strlen(s) : 0, err);
}

void dsv4_strbuf_free(dsv4_strbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
