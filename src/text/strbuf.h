/* A growable byte buffer, always NUL-terminated after a successful append. */
#ifndef DSV4_TEXT_STRBUF_H
#define DSV4_TEXT_STRBUF_H

#include <stddef.h>

#include "common/status.h"

typedef struct dsv4_strbuf {
    char *data;
    size_t len;
    size_t cap;
} dsv4_strbuf;

dsv4_status dsv4_strbuf_append(dsv4_strbuf *b, const void *data, size_t len, dsv4_error *err);
dsv4_status dsv4_strbuf_puts(dsv4_strbuf *b, const char *s, dsv4_error *err); /* NULL = "" */
dsv4_status dsv4_strbuf_reserve(dsv4_strbuf *b, size_t extra, dsv4_error *err);
void dsv4_strbuf_free(dsv4_strbuf *b);

#endif
