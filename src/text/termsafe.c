/* Control characters out of model text bound for a terminal (see termsafe.h). */
#include "text/termsafe.h"

#include <stdint.h>

#define REPLACEMENT "\xEF\xBF\xBD"

dsv4_status dsv4_term_sanitize(const char *s, size_t n, dsv4_strbuf *out, dsv4_error *err) {
    const uint8_t *p = (const uint8_t *)s;
    size_t run = 0; /* start of the pending run of bytes to copy */
    for (size_t i = 0; i < n; i++) {
        size_t skip = 0;
        if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n') || p[i] == 0x7F)
            skip = 1;
        else if (p[i] == 0xC2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F)
            skip = 2; /* U+0080..U+009F */
        if (!skip) continue;
        dsv4_status st = dsv4_strbuf_append(out, s + run, i - run, err);
        if (st == DSV4_OK) st = dsv4_strbuf_append(out, REPLACEMENT, 3, err);
        if (st != DSV4_OK) return st;
        i += skip - 1;
        run = i + 1;
    }
    return dsv4_strbuf_append(out, s + run, n - run, err);
}
