#include "text/strtab.h"

#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv_feed(uint64_t h, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * FNV_PRIME;
    return h;
}

dsv4_status dsv4_strtab_init(dsv4_strtab *t, size_t expected, dsv4_error *err) {
    size_t cap = 16;
    while (cap < expected * 2 + 1) cap *= 2;
    t->slots = calloc(cap, sizeof(*t->slots));
    if (!t->slots) return dsv4_fail(err, DSV4_ERR_NOMEM, "hash table: out of memory (%zu slots)", cap);
    t->cap = cap;
    t->count = 0;
    return DSV4_OK;
}

void dsv4_strtab_free(dsv4_strtab *t) {
    free(t->slots);
    t->slots = NULL;
    t->cap = t->count = 0;
}

static dsv4_strtab_slot *find_slot(dsv4_strtab_slot *slots, size_t cap, uint64_t h, const char *key,
                                   size_t len) {
    size_t i = (size_t)h & (cap - 1);
    for (;;) {
        dsv4_strtab_slot *s = &slots[i];
        if (!s->key) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
        i = (i + 1) & (cap - 1);
    }
}

static dsv4_status grow(dsv4_strtab *t, dsv4_error *err) {
    size_t cap = t->cap * 2;
    dsv4_strtab_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots) return dsv4_fail(err, DSV4_ERR_NOMEM, "hash table: out of memory (%zu slots)", cap);
    for (size_t i = 0; i < t->cap; i++) {
        const dsv4_strtab_slot *s = &t->slots[i];
        if (s->key) *find_slot(slots, cap, s->hash, s->key, s->len) = *s;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return DSV4_OK;
}

dsv4_status dsv4_strtab_put(dsv4_strtab *t, const char *key, size_t len, int32_t value, dsv4_error *err) {
    if (len > UINT32_MAX)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hash table: key of %zu bytes too long", len);
    if ((t->count + 1) * 2 > t->cap) {
        dsv4_status st = grow(t, err);
        if (st != DSV4_OK) return st;
    }
    uint64_t h = fnv_feed(FNV_OFFSET, key, len);
    dsv4_strtab_slot *s = find_slot(t->slots, t->cap, h, key, len);
    if (!s->key) {
        s->key = key;
        s->len = (uint32_t)len;
        s->hash = h;
        t->count++;
    }
    s->value = value;
    return DSV4_OK;
}

int32_t dsv4_strtab_get(const dsv4_strtab *t, const char *key, size_t len) {
    if (!t->cap) return -1;
    uint64_t h = fnv_feed(FNV_OFFSET, key, len);
    const dsv4_strtab_slot *s = find_slot(t->slots, t->cap, h, key, len);
    return s->key ? s->value : -1;
}

int32_t dsv4_strtab_get3(const dsv4_strtab *t, const char *a, size_t alen, const char *sep, size_t seplen,
                         const char *b, size_t blen) {
    if (!t->cap) return -1;
    uint64_t h = fnv_feed(fnv_feed(fnv_feed(FNV_OFFSET, a, alen), sep, seplen), b, blen);
    size_t len = alen + seplen + blen;
    size_t i = (size_t)h & (t->cap - 1);
    for (;;) {
        const dsv4_strtab_slot *s = &t->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, a, alen) == 0 &&
            memcmp(s->key + alen, sep, seplen) == 0 && memcmp(s->key + alen + seplen, b, blen) == 0)
            return s->value;
        i = (i + 1) & (t->cap - 1);
    }
}
