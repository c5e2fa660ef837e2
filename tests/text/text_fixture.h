/* Shared helpers for the text tests: a hand-built byte-level vocabulary and corpus loading. */
#ifndef DSV4_TESTS_TEXT_FIXTURE_H
#define DSV4_TESTS_TEXT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/special.h"
#include "text/tokenizer.h"

/* GPT-2 byte -> codepoint, written independently of src/text/bytemap.c. */
static inline unsigned fx_byte_cp(unsigned b) {
    unsigned n = 0;
    for (unsigned x = 0; x < 256; x++) {
        int is_self = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
        if (is_self) {
            if (x == b) return x;
            continue;
        }
        if (x == b) return 256 + n;
        n++;
    }
    return 0;
}

/* UTF-8 of the byte-level symbol for byte b (NUL-terminated, at most 2 bytes + NUL). */
static inline void fx_byte_token(unsigned b, char out[4]) {
    unsigned cp = fx_byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

/* tokens: 7 specials, 256 byte tokens (id 7 + b), then extra[] ; merges as given. */
typedef struct fx_vocab {
    char *tok[512];
    size_t n_tok;
} fx_vocab;

static inline dsv4_tokenizer *fx_build(const char *const *extra, size_t n_extra, const char *const *merges,
                                       size_t n_merges) {
    fx_vocab v = {0};
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) v.tok[v.n_tok++] = strdup(DSV4_SPECIAL_TOKENS[s]);
    for (unsigned b = 0; b < 256; b++) {
        char t[4];
        fx_byte_token(b, t);
        v.tok[v.n_tok++] = strdup(t);
    }
    for (size_t i = 0; i < n_extra; i++) v.tok[v.n_tok++] = strdup(extra[i]);
    dsv4_tokenizer *tk = NULL;
    dsv4_error err;
    dsv4_status st = dsv4_tokenizer_from_arrays((const char *const *)v.tok, NULL, v.n_tok, merges, NULL,
                                                n_merges, &tk, &err);
    if (st != DSV4_OK) fprintf(stderr, "fx_build: %s\n", err.msg);
    for (size_t i = 0; i < v.n_tok; i++) free(v.tok[i]);
    return tk;
}

static inline char *fx_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0, *len = (size_t)n;
    return buf;
}

#define FX_CORPUS "data/tiny-corpus.txt"

#endif
