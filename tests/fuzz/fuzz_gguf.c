/* libFuzzer target for the GGUF reader: every accepted image must keep every accessor inside the
 * image, and lookups must find what iteration finds. Violations trap so the fuzzer reports them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

#define CHECK(c)                                                                                             \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static void touch(const gguf_file *f, const void *p, uint64_t n) {
    const uint8_t *b = p, *base = gguf_base(f);
    uint64_t size = gguf_file_size(f);
    if (n == 0) return;
    CHECK(b >= base && (uint64_t)(b - base) <= size && n <= size - (uint64_t)(b - base));
    sink += b[0] + b[n - 1];
}

static void touch_kv(const gguf_file *f, const gguf_kv *kv) {
    touch(f, kv->key.ptr, kv->key.len);
    char *k = malloc(kv->key.len + 1);
    if (k) {
        memcpy(k, kv->key.ptr, kv->key.len);
        k[kv->key.len] = 0;
        CHECK(gguf_find_kv(f, k) == kv);
        free(k);
    }
    if (kv->type == GGUF_VT_STRING)
        touch(f, kv->v.str.ptr, kv->v.str.len);
    else if (kv->type != GGUF_VT_ARRAY)
        sink += kv->v.u64;
    if (kv->type != GGUF_VT_ARRAY) return;
    size_t sz = gguf_value_type_size(kv->arr_type);
    if (sz) {
        touch(f, kv->arr_data, kv->arr_len * sz);
        for (uint64_t i = 0; i < kv->arr_len; i++) {
            double d;
            int64_t v;
            if (gguf_kv_arr_f64(kv, i, &d)) sink += (uint64_t)(d == d);
            if (gguf_kv_arr_i64(kv, i, &v)) sink += (uint64_t)v;
        }
    } else if (kv->arr_type == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < kv->arr_len; i++) {
            gguf_str s = gguf_kv_arr_str(kv, i);
            CHECK(s.ptr != NULL);
            touch(f, s.ptr - 8, 8);
            touch(f, s.ptr, s.len);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    dsv4_error err;
    err.msg[0] = 0;
    if (gguf_open_memory(data, size, &f, &err) != DSV4_OK) {
        CHECK(f == NULL && err.msg[0] != 0);
        return 0;
    }
    CHECK(gguf_version(f) == GGUF_VERSION);
    uint32_t a = gguf_alignment(f);
    CHECK(a != 0 && (a & (a - 1)) == 0);
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) touch_kv(f, gguf_kv_at(f, i));
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
        CHECK(t->offset >= gguf_data_offset(f) && t->offset % a == 0);
        CHECK(gguf_find_tensor(f, t->name) == t);
        touch(f, t->data, t->nbytes);
    }
    gguf_close(f);
    return 0;
}
