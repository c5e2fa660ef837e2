/* Readers for the HF-oracle fixtures in tests/fixtures/ (formats: tests/fixtures/README.md):
 * token lists, raw float32 logits, `.meta` key/value files and `.indexer` selection lists. */
#ifndef DSV4_TESTS_ORACLE_FIXTURE_H
#define DSV4_TESTS_ORACLE_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OF_DIR "tests/fixtures"
#define OF_MAX_K 64

/* Whole file, NUL-terminated; NULL if it cannot be read. */
static inline char *of_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        if (n == cap) {
            char *nb = realloc(b, (cap *= 2) + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    if (b && ferror(f)) free(b), b = NULL;
    fclose(f);
    if (b) b[n] = 0;
    if (len) *len = n;
    return b;
}

/* ---- .meta: "key value" lines (value = rest of the line), '#' comments ---- */

/* Value of key (copied into out, at most n-1 bytes); false if absent. */
static inline bool of_meta_get(const char *meta, const char *key, char *out, size_t n) {
    const size_t kl = strlen(key);
    for (const char *p = meta; p && *p;) {
        const char *eol = strchr(p, '\n');
        const size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (ll > kl && !strncmp(p, key, kl) && p[kl] == ' ') {
            size_t vl = ll - kl - 1;
            if (vl >= n) vl = n - 1;
            memcpy(out, p + kl + 1, vl);
            out[vl] = 0;
            return true;
        }
        p = eol ? eol + 1 : NULL;
    }
    return false;
}

static inline bool of_meta_double(const char *meta, const char *key, double *v) {
    char buf[64], *end;
    if (!of_meta_get(meta, key, buf, sizeof buf)) return false;
    *v = strtod(buf, &end);
    return end != buf;
}

/* "pos_top1 <pos> <id> <margin>" lines into margin[n_pos] (NaN where missing). */
static inline void of_meta_margins(const char *meta, uint32_t n_pos, float *margin) {
    for (uint32_t i = 0; i < n_pos; i++) margin[i] = NAN;
    for (const char *p = strstr(meta, "\npos_top1 "); p; p = strstr(p + 1, "\npos_top1 ")) {
        unsigned pos, id;
        float m;
        if (sscanf(p + 10, "%u %u %f", &pos, &id, &m) == 3 && pos < n_pos) margin[pos] = m;
    }
}

/* ---- .tokens: one id per line ---- */
static inline int32_t *of_tokens(const char *path, uint32_t *n) {
    char *t = of_read(path, NULL);
    if (!t) return NULL;
    uint32_t cap = 1024, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    char *p = t, *end;
    while (v) {
        long x = strtol(p, &end, 10);
        if (end == p) break;
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) free(v);
            v = nv;
            if (!v) break;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    free(t);
    *n = k;
    return v;
}

/* ---- .logits.f32: raw little-endian float32 [n_pos][n_vocab] ---- */
static inline float *of_logits(const char *path, size_t expect_floats) {
    size_t len = 0;
    char *b = of_read(path, &len);
    if (!b) return NULL;
    if (len != expect_floats * sizeof(float)) {
        fprintf(stderr, "%s: %zu bytes, expected %zu\n", path, len, expect_floats * sizeof(float));
        free(b);
        return NULL;
    }
    return (float *)b; /* malloc'd: suitably aligned for float */
}

/* ---- .indexer: "layer pos id_1 .. id_k score_k score_k+1" ---- */
typedef struct of_sel {
    uint32_t layer, pos, n;
    uint32_t ids[OF_MAX_K]; /* ascending */
    double score_k, score_k1;
} of_sel;

typedef struct of_sels {
    of_sel *v;
    uint32_t n, cap;
} of_sels;

static inline bool of_sels_push(of_sels *s, const of_sel *x) {
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 256;
        of_sel *nv = realloc(s->v, cap * sizeof *nv);
        if (!nv) return false;
        s->v = nv, s->cap = cap;
    }
    s->v[s->n++] = *x;
    return true;
}

/* Parse an .indexer file with k ids per line; false if absent or malformed. */
static inline bool of_indexer(const char *path, uint32_t k, of_sels *out) {
    memset(out, 0, sizeof *out);
    char *t = of_read(path, NULL);
    if (!t || k > OF_MAX_K) return free(t), false;
    bool ok = true;
    for (char *line = strtok(t, "\n"); line && ok; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == 0) continue;
        of_sel s = {.n = k};
        char *p = line, *end;
        s.layer = (uint32_t)strtoul(p, &end, 10), ok &= end != p, p = end;
        s.pos = (uint32_t)strtoul(p, &end, 10), ok &= end != p, p = end;
        for (uint32_t i = 0; i < k && ok; i++)
            s.ids[i] = (uint32_t)strtoul(p, &end, 10), ok &= end != p, p = end;
        s.score_k = strtod(p, &end), ok &= end != p, p = end;
        s.score_k1 = strtod(p, &end), ok &= end != p;
        ok = ok && of_sels_push(out, &s);
    }
    free(t);
    if (!ok) free(out->v), memset(out, 0, sizeof *out);
    return ok;
}

/* Index of (layer, pos) in s, or -1 (linear: a few thousand lines). */
static inline int64_t of_sels_find(const of_sels *s, uint32_t layer, uint32_t pos) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->v[i].layer == layer && s->v[i].pos == pos) return i;
    return -1;
}

#endif
