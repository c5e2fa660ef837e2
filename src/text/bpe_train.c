/* Classic byte-level BPE training over the unique pre-tokenizer pieces, weighted by count.
 * Each step merges the most frequent adjacent pair; ties go to the pair whose (left, right)
 * token strings are lexicographically smallest (bytewise, left compared first). A pair whose
 * concatenation is already a token is never chosen, so every merge adds exactly one new token.
 * If the text runs out of pairs, the remaining ids are filled with unreachable
 * "<｜place▁holder▁no▁N｜>" tokens (N = id), so the size is always exactly vocab_size. */
#include "text/bpe_train.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bytemap.h"
#include "text/pretok.h"
#include "text/special.h"
#include "text/strtab.h"
#include "text/utf8.h"

#define N_BASE 258u /* BOS, EOS, 256 bytes */
#define N_TAIL (DSV4_SPECIAL_COUNT - 2u)

typedef struct ivec {
    int32_t *v;
    uint32_t n, cap;
} ivec;

typedef struct pair {
    int32_t a, b;
    int64_t count;
    bool banned;
    ivec words; /* words that contained the pair at some point (may be stale or repeated) */
} pair;

typedef struct trainer {
    const char *text;
    dsv4_strtab piece_tab; /* piece bytes -> word index */
    uint32_t n_words, words_cap;
    int64_t *wcount;
    uint32_t *woff, *wlen; /* symbols of word w: sym[woff[w] .. woff[w]+wlen[w]) */
    uint32_t *stamp;
    int32_t *sym;
    size_t n_sym, sym_cap;

    pair *pairs;
    uint32_t n_pairs, pairs_cap;
    uint64_t *pmap_key; /* open addressing: key (a<<32|b)+1, 0 = empty */
    uint32_t *pmap_val;
    size_t pmap_cap;

    char **tok;
    uint32_t *tok_len;
    uint32_t n_tok;
    dsv4_strtab tok_tab;
} trainer;

static dsv4_status oom(dsv4_error *err) { return dsv4_fail(err, DSV4_ERR_NOMEM, "bpe_train: out of memory"); }

static bool ivec_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        int32_t *p = realloc(v->v, cap * sizeof(*p));
        if (!p) return false;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

/* ---- words ---- */

static dsv4_status add_piece(void *ctx, const char *piece, size_t len, dsv4_error *err) {
    trainer *T = ctx;
    int32_t w = dsv4_strtab_get(&T->piece_tab, piece, len);
    if (w >= 0) {
        T->wcount[w]++;
        return DSV4_OK;
    }
    if (T->n_words == T->words_cap) {
        uint32_t cap = T->words_cap ? T->words_cap * 2 : 1024;
        int64_t *c = realloc(T->wcount, cap * sizeof(*c));
        if (c) T->wcount = c;
        uint32_t *o = realloc(T->woff, cap * sizeof(*o));
        if (o) T->woff = o;
        uint32_t *l = realloc(T->wlen, cap * sizeof(*l));
        if (l) T->wlen = l;
        if (!c || !o || !l) return oom(err);
        T->words_cap = cap;
    }
    if (T->n_sym + len > T->sym_cap) {
        size_t cap = (T->n_sym + len) * 2;
        int32_t *s = realloc(T->sym, cap * sizeof(*s));
        if (!s) return oom(err);
        T->sym = s;
        T->sym_cap = cap;
    }
    if (T->n_sym + len > UINT32_MAX) return dsv4_fail(err, DSV4_ERR_RANGE, "bpe_train: text too large");
    w = (int32_t)T->n_words++;
    T->wcount[w] = 1;
    T->woff[w] = (uint32_t)T->n_sym;
    T->wlen[w] = (uint32_t)len;
    for (size_t i = 0; i < len; i++) T->sym[T->n_sym++] = (int32_t)(2 + (uint8_t)piece[i]);
    return dsv4_strtab_put(&T->piece_tab, piece, len, w, err);
}

/* ---- pair map ---- */

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static bool pmap_grow(trainer *T) {
    size_t cap = T->pmap_cap ? T->pmap_cap * 2 : 4096;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    uint32_t *vals = malloc(cap * sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < T->pmap_cap; i++) {
        if (!T->pmap_key[i]) continue;
        size_t j = (size_t)pair_hash(T->pmap_key[i]) & (cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = T->pmap_key[i];
        vals[j] = T->pmap_val[i];
    }
    free(T->pmap_key);
    free(T->pmap_val);
    T->pmap_key = keys;
    T->pmap_val = vals;
    T->pmap_cap = cap;
    return true;
}

/* Index of pair (a,b), created with count 0 if new; UINT32_MAX on allocation failure. */
static uint32_t pair_get(trainer *T, int32_t a, int32_t b) {
    if ((T->n_pairs + 1) * 2 > T->pmap_cap && !pmap_grow(T)) return UINT32_MAX;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t j = (size_t)pair_hash(key) & (T->pmap_cap - 1);
    while (T->pmap_key[j]) {
        if (T->pmap_key[j] == key) return T->pmap_val[j];
        j = (j + 1) & (T->pmap_cap - 1);
    }
    if (T->n_pairs == T->pairs_cap) {
        uint32_t cap = T->pairs_cap ? T->pairs_cap * 2 : 4096;
        pair *p = realloc(T->pairs, cap * sizeof(*p));
        if (!p) return UINT32_MAX;
        T->pairs = p;
        T->pairs_cap = cap;
    }
    uint32_t idx = T->n_pairs++;
    T->pairs[idx] = (pair){.a = a, .b = b};
    T->pmap_key[j] = key;
    T->pmap_val[j] = idx;
    return idx;
}

/* Adds sign * count(w) for every adjacent pair of word w (registering w with each pair). */
static bool count_word(trainer *T, uint32_t w, int64_t sign) {
    const int32_t *s = T->sym + T->woff[w];
    for (uint32_t i = 0; i + 1 < T->wlen[w]; i++) {
        uint32_t p = pair_get(T, s[i], s[i + 1]);
        if (p == UINT32_MAX) return false;
        T->pairs[p].count += sign * T->wcount[w];
        if (sign > 0) {
            ivec *ws = &T->pairs[p].words;
            if ((ws->n == 0 || ws->v[ws->n - 1] != (int32_t)w) && !ivec_push(ws, (int32_t)w)) return false;
        }
    }
    return true;
}

/* ---- tokens ---- */

static dsv4_status add_token(trainer *T, const char *s, size_t len, dsv4_error *err) {
    char *p = malloc(len + 1);
    if (!p) return oom(err);
    memcpy(p, s, len);
    p[len] = '\0';
    T->tok[T->n_tok] = p;
    T->tok_len[T->n_tok] = (uint32_t)len;
    T->n_tok++;
    return dsv4_strtab_put(&T->tok_tab, p, len, (int32_t)(T->n_tok - 1), err);
}

static int tok_cmp(const trainer *T, int32_t x, int32_t y) {
    uint32_t lx = T->tok_len[x], ly = T->tok_len[y];
    int c = memcmp(T->tok[x], T->tok[y], lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

static bool pair_better(const trainer *T, const pair *p, const pair *q) {
    if (p->count != q->count) return p->count > q->count;
    int c = tok_cmp(T, p->a, q->a);
    if (c) return c < 0;
    return tok_cmp(T, p->b, q->b) < 0;
}

static void trainer_free(trainer *T) {
    dsv4_strtab_free(&T->piece_tab);
    dsv4_strtab_free(&T->tok_tab);
    free(T->wcount);
    free(T->woff);
    free(T->wlen);
    free(T->stamp);
    free(T->sym);
    for (uint32_t i = 0; i < T->n_pairs; i++) free(T->pairs[i].words.v);
    free(T->pairs);
    free(T->pmap_key);
    free(T->pmap_val);
}

/* Merges every (a,b) in word w left to right, updating pair counts. */
static bool merge_word(trainer *T, uint32_t w, int32_t a, int32_t b, int32_t id) {
    int32_t *s = T->sym + T->woff[w];
    uint32_t n = T->wlen[w];
    bool found = false;
    for (uint32_t i = 0; i + 1 < n && !found; i++) found = s[i] == a && s[i + 1] == b;
    if (!found) return true;
    if (!count_word(T, w, -1)) return false;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            s[k++] = id;
            i += 2;
        } else {
            s[k++] = s[i++];
        }
    }
    T->wlen[w] = k;
    return count_word(T, w, +1);
}

dsv4_status dsv4_bpe_train(const char *text, size_t len, uint32_t vocab_size, dsv4_bpe_vocab *out,
                           dsv4_error *err) {
    memset(out, 0, sizeof(*out));
    if (vocab_size < N_BASE + N_TAIL)
        return dsv4_fail(err, DSV4_ERR_INVALID, "bpe_train: vocab_size %u below the minimum %u", vocab_size,
                         N_BASE + N_TAIL);
    const uint32_t n_learn = vocab_size - N_BASE - N_TAIL;
    trainer T = {.text = text};
    dsv4_pretok *pt = NULL;
    dsv4_status st = DSV4_OK;
    T.tok = calloc(vocab_size, sizeof(*T.tok));
    T.tok_len = calloc(vocab_size, sizeof(*T.tok_len));
    out->merges = calloc(n_learn ? n_learn : 1, sizeof(*out->merges));
    if (!T.tok || !T.tok_len || !out->merges) {
        st = oom(err);
        goto done;
    }
    if ((st = dsv4_strtab_init(&T.tok_tab, vocab_size, err)) != DSV4_OK) goto done;
    if ((st = dsv4_strtab_init(&T.piece_tab, 1024, err)) != DSV4_OK) goto done;

    if ((st = add_token(&T, DSV4_BOS_STR, strlen(DSV4_BOS_STR), err)) != DSV4_OK) goto done;
    if ((st = add_token(&T, DSV4_EOS_STR, strlen(DSV4_EOS_STR), err)) != DSV4_OK) goto done;
    for (uint32_t b = 0; b < 256; b++) {
        uint8_t u[4];
        int l = dsv4_utf8_put(u, dsv4_gpt2_byte_to_cp((uint8_t)b));
        if ((st = add_token(&T, (const char *)u, (size_t)l, err)) != DSV4_OK) goto done;
    }

    if ((st = dsv4_pretok_new(&pt, err)) != DSV4_OK) goto done;
    if ((st = dsv4_pretok_split(pt, text, len, add_piece, &T, err)) != DSV4_OK) goto done;
    T.stamp = malloc((T.n_words ? T.n_words : 1) * sizeof(*T.stamp));
    if (!T.stamp) {
        st = oom(err);
        goto done;
    }
    memset(T.stamp, 0xff, (T.n_words ? T.n_words : 1) * sizeof(*T.stamp));
    for (uint32_t w = 0; w < T.n_words; w++)
        if (!count_word(&T, w, +1)) {
            st = oom(err);
            goto done;
        }

    uint32_t m = 0;
    while (m < n_learn) {
        int64_t best = -1;
        for (uint32_t p = 0; p < T.n_pairs; p++) {
            const pair *P = &T.pairs[p];
            if (P->count <= 0 || P->banned) continue;
            if (best < 0 || pair_better(&T, P, &T.pairs[best])) best = p;
        }
        if (best < 0) break;
        pair *P = &T.pairs[best];
        const int32_t a = P->a, b = P->b;
        const uint32_t la = T.tok_len[a], lb = T.tok_len[b];
        if (dsv4_strtab_get3(&T.tok_tab, T.tok[a], la, "", 0, T.tok[b], lb) >= 0) {
            P->banned = true;
            continue;
        }
        char *merge = malloc((size_t)la + lb + 2);
        if (!merge) {
            st = oom(err);
            goto done;
        }
        memcpy(merge, T.tok[a], la);
        merge[la] = ' ';
        memcpy(merge + la + 1, T.tok[b], lb);
        merge[la + 1 + lb] = '\0';
        out->merges[m] = merge;
        out->n_merges = m + 1;
        /* the token string is the merge string without its space */
        char *cat = malloc((size_t)la + lb + 1);
        if (!cat) {
            st = oom(err);
            goto done;
        }
        memcpy(cat, T.tok[a], la);
        memcpy(cat + la, T.tok[b], lb);
        st = add_token(&T, cat, (size_t)la + lb, err);
        free(cat);
        if (st != DSV4_OK) goto done;
        const int32_t id = (int32_t)(T.n_tok - 1);
        /* P may move while counting (pairs realloc): copy the word list out first */
        ivec words = T.pairs[best].words;
        T.pairs[best].words = (ivec){0};
        for (uint32_t i = 0; i < words.n; i++) {
            uint32_t w = (uint32_t)words.v[i];
            if (T.stamp[w] == m) continue;
            T.stamp[w] = m;
            if (!merge_word(&T, w, a, b, id)) {
                free(words.v);
                st = oom(err);
                goto done;
            }
        }
        free(words.v);
        m++;
    }
    for (uint32_t id = T.n_tok; T.n_tok < vocab_size - N_TAIL; id++) {
        char name[96];
        int l = snprintf(name, sizeof(name),
                         "<\xef\xbd\x9cplace\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81%u\xef\xbd\x9c>", id);
        if ((st = add_token(&T, name, (size_t)l, err)) != DSV4_OK) goto done;
    }
    for (int s = 2; s < DSV4_SPECIAL_COUNT; s++)
        if ((st = add_token(&T, DSV4_SPECIAL_TOKENS[s], strlen(DSV4_SPECIAL_TOKENS[s]), err)) != DSV4_OK)
            goto done;

done:
    dsv4_pretok_free(pt);
    out->tokens = T.tok;
    out->n_tokens = T.n_tok;
    T.tok = NULL;
    free(T.tok_len);
    T.tok_len = NULL;
    trainer_free(&T);
    if (st != DSV4_OK) dsv4_bpe_vocab_free(out);
    return st;
}

void dsv4_bpe_vocab_free(dsv4_bpe_vocab *v) {
    if (v->tokens)
        for (uint64_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    if (v->merges)
        for (uint64_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
    memset(v, 0, sizeof(*v));
}
