/* Hashed lookup of keys and tensor names, built once at open time. */
#include <stdlib.h>

#include "gguf/gguf_internal.h"

dsv4_status gguf_hash_init(gguf_hash *h, uint64_t count, dsv4_error *err) {
    h->slots = NULL;
    h->mask = 0;
    uint64_t cap = 8;
    /* Load factor <= 1/2 keeps probes short; count is already bounded by the file size. */
    while (cap < count * 2) {
        if (cap > UINT64_MAX / 2 / sizeof(uint64_t))
            return dsv4_fail(err, DSV4_ERR_NOMEM, "hash table too large");
        cap *= 2;
    }
    if (cap > SIZE_MAX / sizeof(uint64_t)) return dsv4_fail(err, DSV4_ERR_NOMEM, "hash table too large");
    h->slots = calloc((size_t)cap, sizeof(uint64_t));
    if (!h->slots)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for a %llu-slot hash table",
                         (unsigned long long)cap);
    h->mask = cap - 1;
    return DSV4_OK;
}

void gguf_hash_free(gguf_hash *h) {
    free(h->slots);
    h->slots = NULL;
    h->mask = 0;
}

uint64_t *gguf_hash_probe(const gguf_hash *h, const void *key, uint64_t len, gguf_hash_eq_fn eq,
                          const void *ctx) {
    uint64_t i = gguf_hash_bytes(key, len) & h->mask;
    for (;;) {
        uint64_t *slot = &h->slots[i];
        if (*slot == 0 || eq(ctx, *slot - 1, key, len)) return slot;
        i = (i + 1) & h->mask;
    }
}

static bool kv_eq(const void *ctx, uint64_t idx, const void *key, uint64_t len) {
    const gguf_file *f = ctx;
    const gguf_str *k = &f->kvs[idx].key;
    return k->len == len && memcmp(k->ptr, key, len) == 0;
}

static bool tensor_eq(const void *ctx, uint64_t idx, const void *key, uint64_t len) {
    const gguf_file *f = ctx;
    const char *name = f->tensors[idx].name;
    return strlen(name) == len && memcmp(name, key, len) == 0;
}

/* Insert kv idx (already stored in f->kvs); false if its key is already present. */
bool gguf_hash_insert_kv(gguf_file *f, uint64_t idx) {
    uint64_t *slot = gguf_hash_probe(&f->kv_hash, f->kvs[idx].key.ptr, f->kvs[idx].key.len, kv_eq, f);
    if (*slot) return false;
    *slot = idx + 1;
    return true;
}

bool gguf_hash_insert_tensor(gguf_file *f, uint64_t idx) {
    const char *name = f->tensors[idx].name;
    uint64_t *slot = gguf_hash_probe(&f->tensor_hash, name, strlen(name), tensor_eq, f);
    if (*slot) return false;
    *slot = idx + 1;
    return true;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f || !key || !f->kv_hash.slots) return NULL;
    uint64_t *slot = gguf_hash_probe(&f->kv_hash, key, strlen(key), kv_eq, f);
    return *slot ? &f->kvs[*slot - 1] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name || !f->tensor_hash.slots) return NULL;
    uint64_t *slot = gguf_hash_probe(&f->tensor_hash, name, strlen(name), tensor_eq, f);
    return *slot ? &f->tensors[*slot - 1] : NULL;
}
