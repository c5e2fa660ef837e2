#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "text/bytemap.h"
#include "text/pretok.h"
#include "text/strtab.h"
#include "text/utf8.h"

struct dsv4_tokenizer {
    dsv4_pretok *pretok;
    uint32_t n_tokens, n_merges;
    char *arena; /* token strings, then merge strings */
    const char **tok;
    uint32_t *tok_len;
    dsv4_strtab tok_tab;   /* token string -> id */
    dsv4_strtab merge_tab; /* "A B" -> rank */
    char *dec;             /* decoded bytes of every token, concatenated */
    uint64_t *dec_off;     /* n_tokens + 1 offsets into dec */
    int32_t special[DSV4_SPECIAL_COUNT];
    uint8_t byte_enc[256][2]; /* GPT-2 codepoint of each byte as UTF-8 (always 1-2 bytes) */
    uint8_t byte_enc_len[256];
};

dsv4_status dsv4_tokens_push(dsv4_tokens *v, int32_t id, dsv4_error *err) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof(*p));
        if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "token list: out of memory (%zu tokens)", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return DSV4_OK;
}

void dsv4_tokens_free(dsv4_tokens *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

void dsv4_tokenizer_free(dsv4_tokenizer *t) {
    if (!t) return;
    dsv4_pretok_free(t->pretok);
    dsv4_strtab_free(&t->tok_tab);
    dsv4_strtab_free(&t->merge_tab);
    free(t->arena);
    free(t->tok);
    free(t->tok_len);
    free(t->dec);
    free(t->dec_off);
    free(t);
}

static bool has_fullwidth_bar(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if ((uint8_t)s[i] == 0xef && (uint8_t)s[i + 1] == 0xbd && (uint8_t)s[i + 2] == 0x9c) return true;
    return false;
}

/* Decoded bytes never outnumber the string's bytes, so dec can be sized by the arena. */
static size_t decode_token_into(const char *s, size_t n, char *out) {
    if (has_fullwidth_bar(s, n)) {
        memcpy(out, s, n);
        return n;
    }
    size_t k = 0;
    for (size_t p = 0; p < n;) {
        uint32_t cp = 0;
        int l = dsv4_utf8_valid_len((const uint8_t *)s + p, n - p, &cp, NULL);
        if (l <= 0) { /* not UTF-8: the byte is dropped like any unmapped codepoint */
            p++;
            continue;
        }
        p += (size_t)l;
        int b = dsv4_gpt2_cp_to_byte(cp);
        if (b >= 0) out[k++] = (char)b;
    }
    return k;
}

dsv4_status dsv4_tokenizer_from_arrays(const char *const *tokens, const uint64_t *token_lens,
                                       uint64_t n_tokens, const char *const *merges,
                                       const uint64_t *merge_lens, uint64_t n_merges, dsv4_tokenizer **out,
                                       dsv4_error *err) {
    *out = NULL;
    if (n_tokens == 0 || n_tokens > INT32_MAX)
        return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: vocabulary size %llu out of range",
                         (unsigned long long)n_tokens);
    if (n_merges > INT32_MAX)
        return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: merge count %llu out of range",
                         (unsigned long long)n_merges);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n_tokens; i++) {
        if (!tokens[i])
            return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: token %llu is NULL", (unsigned long long)i);
        uint64_t l = token_lens ? token_lens[i] : strlen(tokens[i]);
        if (l > UINT32_MAX)
            return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: token %llu too long", (unsigned long long)i);
        total += l;
    }
    uint64_t tok_total = total;
    for (uint64_t i = 0; i < n_merges; i++) {
        if (!merges[i])
            return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: merge %llu is NULL", (unsigned long long)i);
        uint64_t l = merge_lens ? merge_lens[i] : strlen(merges[i]);
        if (l > UINT32_MAX)
            return dsv4_fail(err, DSV4_ERR_INVALID, "tokenizer: merge %llu too long", (unsigned long long)i);
        total += l;
    }

    dsv4_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory");
    dsv4_status st = dsv4_pretok_new(&t->pretok, err);
    if (st != DSV4_OK) goto fail;
    t->n_tokens = (uint32_t)n_tokens;
    t->n_merges = (uint32_t)n_merges;
    t->arena = malloc(total ? total : 1);
    t->tok = malloc(n_tokens * sizeof(*t->tok));
    t->tok_len = malloc(n_tokens * sizeof(*t->tok_len));
    t->dec = malloc(tok_total ? tok_total : 1);
    t->dec_off = malloc((n_tokens + 1) * sizeof(*t->dec_off));
    if (!t->arena || !t->tok || !t->tok_len || !t->dec || !t->dec_off) {
        st = dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory (%llu tokens)",
                       (unsigned long long)n_tokens);
        goto fail;
    }
    if ((st = dsv4_strtab_init(&t->tok_tab, n_tokens, err)) != DSV4_OK) goto fail;
    if ((st = dsv4_strtab_init(&t->merge_tab, n_merges, err)) != DSV4_OK) goto fail;

    char *p = t->arena;
    uint64_t dk = 0;
    for (uint64_t i = 0; i < n_tokens; i++) {
        size_t l = token_lens ? (size_t)token_lens[i] : strlen(tokens[i]);
        if (l) memcpy(p, tokens[i], l);
        t->tok[i] = p;
        t->tok_len[i] = (uint32_t)l;
        if ((st = dsv4_strtab_put(&t->tok_tab, p, l, (int32_t)i, err)) != DSV4_OK) goto fail;
        t->dec_off[i] = dk;
        dk += decode_token_into(p, l, t->dec + dk);
        p += l;
    }
    t->dec_off[n_tokens] = dk;
    for (uint64_t i = 0; i < n_merges; i++) {
        size_t l = merge_lens ? (size_t)merge_lens[i] : strlen(merges[i]);
        if (l) memcpy(p, merges[i], l);
        if ((st = dsv4_strtab_put(&t->merge_tab, p, l, (int32_t)i, err)) != DSV4_OK) goto fail;
        p += l;
    }
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) {
        const char *str = DSV4_SPECIAL_TOKENS[s];
        t->special[s] = dsv4_strtab_get(&t->tok_tab, str, strlen(str));
        if (t->special[s] < 0) {
            st = dsv4_fail(err, DSV4_ERR_NOT_FOUND, "tokenizer: special token %s missing from the vocabulary",
                           str);
            goto fail;
        }
    }
    for (int b = 0; b < 256; b++)
        t->byte_enc_len[b] = (uint8_t)dsv4_utf8_put(t->byte_enc[b], dsv4_gpt2_byte_to_cp((uint8_t)b));
    *out = t;
    return DSV4_OK;
fail:
    dsv4_tokenizer_free(t);
    return st;
}

uint32_t dsv4_tokenizer_n_tokens(const dsv4_tokenizer *t) { return t->n_tokens; }
uint32_t dsv4_tokenizer_n_merges(const dsv4_tokenizer *t) { return t->n_merges; }
int32_t dsv4_tokenizer_special(const dsv4_tokenizer *t, dsv4_special which) {
    return (unsigned)which < DSV4_SPECIAL_COUNT ? t->special[which] : -1;
}
int32_t dsv4_tokenizer_find(const dsv4_tokenizer *t, const char *s, size_t len) {
    return dsv4_strtab_get(&t->tok_tab, s, len);
}
const char *dsv4_tokenizer_token_str(const dsv4_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok_len[id];
    return t->tok[id];
}
int32_t dsv4_tokenizer_merge_rank(const dsv4_tokenizer *t, const char *a, size_t alen, const char *b,
                                  size_t blen) {
    return dsv4_strtab_get3(&t->merge_tab, a, alen, " ", 1, b, blen);
}

const char *dsv4_token_bytes(const dsv4_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_tokens) {
        *len = 0;
        return "";
    }
    *len = (size_t)(t->dec_off[id + 1] - t->dec_off[id]);
    return t->dec + t->dec_off[id];
}

dsv4_status dsv4_detokenize(const dsv4_tokenizer *t, const int32_t *ids, size_t n, dsv4_strbuf *out,
                            dsv4_error *err) {
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *b = dsv4_token_bytes(t, ids[i], &l);
        dsv4_status st = dsv4_strbuf_append(out, b, l, err);
        if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
}

/* ------------------------------------------------------------------ BPE ---- */

/* One symbol of the piece being merged: a span of the byte-encoded piece. Merging only ever
 * grows the left symbol over its right neighbour, so a (left, llen, rlen) triple identifies a
 * pair exactly and stale heap entries are detected by comparing lengths. */
typedef struct sym {
    uint32_t start, len; /* len 0 = merged away */
    int32_t prev, next;
} sym;

typedef struct cand {
    int32_t rank;
    uint32_t left, llen, rlen;
} cand;

typedef struct bpe_ctx {
    const dsv4_tokenizer *t;
    dsv4_tokens *out;
    uint8_t *enc;
    size_t enc_cap;
    sym *syms;
    size_t syms_cap;
    cand *heap;
    size_t heap_n, heap_cap;
} bpe_ctx;

static bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_ctx *c, cand v) {
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&v, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = v;
}

static cand heap_pop(bpe_ctx *c) {
    cand top = c->heap[0];
    cand last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && cand_less(&c->heap[l + 1], &c->heap[l])) ? l + 1 : l;
        if (!cand_less(&c->heap[m], &last)) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static void push_pair(bpe_ctx *c, int32_t left) {
    const sym *a = &c->syms[left];
    if (a->next < 0) return;
    const sym *b = &c->syms[a->next];
    int32_t r = dsv4_strtab_get3(&c->t->merge_tab, (const char *)c->enc + a->start, a->len, " ", 1,
                                 (const char *)c->enc + b->start, b->len);
    if (r < 0) return;
    heap_push(c, (cand){.rank = r, .left = (uint32_t)left, .llen = a->len, .rlen = b->len});
}

static dsv4_status grow_scratch(bpe_ctx *c, size_t n, dsv4_error *err) {
    if (n * 2 > c->enc_cap) {
        size_t cap = n * 2 + 64;
        uint8_t *e = realloc(c->enc, cap);
        if (!e) return dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory");
        c->enc = e;
        c->enc_cap = cap;
    }
    if (n > c->syms_cap) {
        size_t cap = n + 64;
        sym *s = realloc(c->syms, cap * sizeof(*s));
        if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory");
        c->syms = s;
        cand *h = realloc(c->heap, 3 * cap * sizeof(*h)); /* n-1 initial pairs + 2 per merge */
        if (!h) return dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory");
        c->heap = h;
        c->syms_cap = c->heap_cap = cap;
    }
    return DSV4_OK;
}

static dsv4_status emit_symbol(bpe_ctx *c, const sym *s, dsv4_error *err) {
    const char *p = (const char *)c->enc + s->start;
    int32_t id = dsv4_strtab_get(&c->t->tok_tab, p, s->len);
    if (id >= 0) return dsv4_tokens_push(c->out, id, err);
    /* spec §5.3 fallback: each byte as a 1-byte token, bytes without one are dropped */
    for (uint32_t i = 0; i < s->len; i++) {
        id = dsv4_strtab_get(&c->t->tok_tab, p + i, 1);
        if (id >= 0) {
            dsv4_status st = dsv4_tokens_push(c->out, id, err);
            if (st != DSV4_OK) return st;
        }
    }
    return DSV4_OK;
}

static dsv4_status bpe_piece(void *ctx, const char *piece, size_t n, dsv4_error *err) {
    bpe_ctx *c = ctx;
    if (n == 0) return DSV4_OK;
    if (n > UINT32_MAX / 2)
        return dsv4_fail(err, DSV4_ERR_RANGE, "tokenizer: piece of %zu bytes too long", n);
    dsv4_status st = grow_scratch(c, n, err);
    if (st != DSV4_OK) return st;
    const dsv4_tokenizer *t = c->t;
    uint32_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)piece[i];
        memcpy(c->enc + off, t->byte_enc[b], t->byte_enc_len[b]);
        c->syms[i] = (sym){.start = off,
                           .len = t->byte_enc_len[b],
                           .prev = (int32_t)i - 1,
                           .next = i + 1 < n ? (int32_t)i + 1 : -1};
        off += t->byte_enc_len[b];
    }
    c->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(c, (int32_t)i);
    while (c->heap_n) {
        cand top = heap_pop(c);
        sym *a = &c->syms[top.left];
        if (a->len != top.llen || a->next < 0) continue;
        sym *b = &c->syms[a->next];
        if (b->len != top.rlen) continue;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) c->syms[a->next].prev = (int32_t)top.left;
        if (a->prev >= 0) push_pair(c, a->prev);
        push_pair(c, (int32_t)top.left);
    }
    for (int32_t i = 0; i >= 0; i = c->syms[i].next)
        if ((st = emit_symbol(c, &c->syms[i], err)) != DSV4_OK) return st;
    return DSV4_OK;
}

dsv4_status dsv4_tokenize_text(const dsv4_tokenizer *t, const char *text, size_t len, dsv4_tokens *out,
                               dsv4_error *err) {
    bpe_ctx c = {.t = t, .out = out};
    dsv4_status st = dsv4_pretok_split(t->pretok, text, len, bpe_piece, &c, err);
    free(c.enc);
    free(c.syms);
    free(c.heap);
    return st;
}

dsv4_status dsv4_tokenize_rendered(const dsv4_tokenizer *t, const char *text, size_t len, dsv4_tokens *out,
                                   dsv4_error *err) {
    size_t slen[DSV4_SPECIAL_COUNT];
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) slen[s] = strlen(DSV4_SPECIAL_TOKENS[s]);
    size_t span = 0;
    for (size_t p = 0; p < len; p++) {
        uint8_t c = (uint8_t)text[p];
        if (c != '<' && c != 0xef) continue; /* every special starts with '<' or U+FF5C */
        for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) {
            if (slen[s] > len - p || memcmp(text + p, DSV4_SPECIAL_TOKENS[s], slen[s]) != 0) continue;
            dsv4_status st = dsv4_tokenize_text(t, text + span, p - span, out, err);
            if (st == DSV4_OK) st = dsv4_tokens_push(out, t->special[s], err);
            if (st != DSV4_OK) return st;
            p += slen[s];
            span = p;
            p--; /* the loop's p++ lands on the byte after the special */
            break;
        }
    }
    return dsv4_tokenize_text(t, text + span, len - span, out, err);
}
