#include "text/utf8.h"

int dsv4_utf8_valid_len(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad) {
    if (bad) *bad = 1;
    if (n == 0) return -1;
    const uint8_t c = s[0];
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    }
    int need;
    uint32_t v, lo, hi;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2, v = c & 0x1fu, lo = 0x80, hi = 0x7ff;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3, v = c & 0x0fu, lo = 0x800, hi = 0xffff;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4, v = c & 0x07u, lo = 0x10000, hi = 0x10ffff;
    } else {
        return 0;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return -1;
        if ((s[i] & 0xc0) != 0x80) return 0;
        /* overlongs and surrogates are decided by the second byte */
        if (i == 1 && ((need == 3 && c == 0xe0 && s[1] < 0xa0) || (need == 3 && c == 0xed && s[1] >= 0xa0) ||
                       (need == 4 && c == 0xf0 && s[1] < 0x90) || (need == 4 && c == 0xf4 && s[1] >= 0x90)))
            return 0;
        v = (v << 6) | (s[i] & 0x3fu);
        if (bad) *bad = (size_t)i + 1;
    }
    if (v < lo || v > hi) return 0;
    if (cp) *cp = v;
    return need;
}

int dsv4_utf8_put(uint8_t *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xc0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}
