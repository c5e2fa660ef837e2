/* Synthetic byte-level BPE vocabulary for large synthesized models: every merge joins two existing
 * tokens into a new, unique string, so the merge list is a valid BPE table a tokenizer can load. */
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"
#include "text/special.h"

/* GPT-2 byte -> codepoint (spec §5.1): printable ranges map to themselves, the other 68 bytes
 * map to 256, 257, ... in ascending byte order. */
static uint32_t byte_cp(uint8_t b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    uint32_t k = 0;
    for (uint32_t x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) k++;
    return 256 + k;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2; /* every mapped codepoint is < 0x800 */
}

typedef struct str_set {
    const char **slots;
    uint64_t mask;
} str_set;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Inserts s; false if already present. */
static bool set_insert(str_set *st, const char *s) {
    for (uint64_t i = fnv1a(s) & st->mask;; i = (i + 1) & st->mask) {
        if (!st->slots[i]) {
            st->slots[i] = s;
            return true;
        }
        if (strcmp(st->slots[i], s) == 0) return false;
    }
}

void dsv4_synth_vocab_free(dsv4_synth_vocab *v) {
    if (!v) return;
    for (uint64_t i = 0; v->tokens && i < v->n_tokens; i++) free(v->tokens[i]);
    for (uint64_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

/* Byte order for the merge candidates: letters, space, digits, punctuation first. */
static void byte_order(uint8_t order[256]) {
    static const char first[] = "etaoinshrdlucmfwypvbgkjqxz ETAOINSHRDLUCMFWYPVBGKJQXZ0123456789.,'-!?:;\n";
    bool used[256] = {false};
    size_t n = 0;
    for (const char *p = first; *p; p++) {
        order[n++] = (uint8_t)*p;
        used[(uint8_t)*p] = true;
    }
    for (unsigned b = 0; b < 256; b++)
        if (!used[b]) order[n++] = (uint8_t)b;
}

dsv4_status dsv4_synth_vocab_make(uint32_t n_vocab, dsv4_synth_vocab *out, dsv4_error *err) {
    memset(out, 0, sizeof *out);
    const uint32_t n_special = DSV4_SPECIAL_COUNT;
    if (n_vocab < 256 + n_special)
        return dsv4_fail(err, DSV4_ERR_INVALID, "synthetic vocabulary needs at least %u tokens, got %u",
                         256 + n_special, n_vocab);
    uint32_t n_merges = n_vocab - 256 - n_special;
    out->tokens = calloc(n_vocab, sizeof *out->tokens);
    out->merges = calloc(n_merges ? n_merges : 1, sizeof *out->merges);
    /* L: non-special token ids in candidate order (bytes by frequency, then merges as created). */
    uint32_t *L = calloc(256 + (size_t)n_merges, sizeof *L);
    uint64_t cap = 1;
    while (cap < 2ull * n_vocab) cap <<= 1;
    str_set set = {calloc(cap, sizeof(char *)), cap - 1};
    if (!out->tokens || !out->merges || !L || !set.slots) goto nomem;
    out->n_tokens = n_vocab;
    out->bos_id = 0;
    out->eos_id = 1;
    out->tokens[0] = strdup(DSV4_SPECIAL_TOKENS[DSV4_SPECIAL_BOS]);
    out->tokens[1] = strdup(DSV4_SPECIAL_TOKENS[DSV4_SPECIAL_EOS]);
    for (uint32_t s = 2; s < n_special; s++)
        out->tokens[n_vocab - n_special + s] = strdup(DSV4_SPECIAL_TOKENS[s]);
    for (uint32_t b = 0; b < 256; b++) {
        char buf[4] = {0};
        put_utf8(buf, byte_cp((uint8_t)b));
        out->tokens[2 + b] = strdup(buf);
    }
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (i >= 258 && i < n_vocab - n_special + 2) continue; /* merge slots */
        if (!out->tokens[i]) goto nomem;
        set_insert(&set, out->tokens[i]);
    }
    uint8_t order[256];
    byte_order(order);
    size_t nl = 0;
    for (int i = 0; i < 256; i++) L[nl++] = 2 + order[i];
    /* Enumerate pairs (L[i], L[j]) along anti-diagonals i + j = d, so short, frequent-byte pairs come first
     * and the list can grow while it is walked (d < nl always holds). */
    uint32_t next_id = 258;
    for (uint64_t d = 0; next_id < 258 + n_merges; d++) {
        if (d >= nl) { /* cannot happen: every diagonal adds tokens faster than d grows */
            free(L);
            free(set.slots);
            dsv4_synth_vocab_free(out);
            return dsv4_fail(err, DSV4_ERR_INVALID, "synthetic vocabulary: merge generation stalled");
        }
        for (uint64_t i = 0; i <= d && next_id < 258 + n_merges; i++) {
            const char *a = out->tokens[L[i]], *b = out->tokens[L[d - i]];
            size_t la = strlen(a), lb = strlen(b);
            char *t = malloc(la + lb + 1);
            char *m = malloc(la + lb + 2);
            if (!t || !m) {
                free(t);
                free(m);
                goto nomem;
            }
            memcpy(t, a, la);
            memcpy(t + la, b, lb + 1);
            if (!set_insert(&set, t)) {
                free(t);
                free(m);
                continue;
            }
            memcpy(m, a, la);
            m[la] = ' ';
            memcpy(m + la + 1, b, lb + 1);
            out->tokens[next_id] = t;
            out->merges[out->n_merges++] = m;
            L[nl++] = next_id++;
        }
    }
    free(L);
    free(set.slots);
    return DSV4_OK;
nomem:
    free(L);
    free(set.slots);
    dsv4_synth_vocab_free(out);
    return dsv4_fail(err, DSV4_ERR_NOMEM, "synthetic vocabulary: out of memory for %u tokens", n_vocab);
}
