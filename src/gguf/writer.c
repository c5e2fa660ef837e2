/* Building a GGUF image in memory: keys, values, tensors and the data layout. */
#include <stdlib.h>

#include "gguf/writer_internal.h"

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    gguf_writer_layout(w);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    free(w->key_at);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static bool buf_reserve(gguf_wbuf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n) return false;
    size_t need = b->n + extra;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* Callers reserve first, so the appends below cannot fail. */
static void put(gguf_wbuf *b, const void *p, size_t n) {
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(gguf_wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gguf_wbuf *b, uint64_t v) { put(b, &v, 8); }

static uint64_t align_up(uint64_t v, uint64_t a, bool *ok) {
    if (v > UINT64_MAX - (a - 1)) {
        *ok = false;
        return 0;
    }
    return (v + a - 1) / a * a;
}

bool gguf_writer_layout(gguf_writer *w) {
    bool ok = true;
    uint64_t a = w->alignment;
    uint64_t head = 24 + (uint64_t)w->kv.n;
    if (w->infos_bytes > UINT64_MAX - head) return false;
    w->data_offset = align_up(head + w->infos_bytes, a, &ok);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < w->n_t && ok; i++) {
        pos = align_up(pos, a, &ok);
        w->t[i].rel = pos;
        if (w->t[i].nbytes > UINT64_MAX - pos)
            ok = false;
        else
            pos += w->t[i].nbytes;
    }
    if (!ok) return false;
    pos = align_up(pos, a, &ok); /* the last tensor is padded too, like ggml does */
    if (!ok || pos > UINT64_MAX - w->data_offset) return false;
    w->file_size = w->data_offset + pos;
    return true;
}

static dsv4_status check_key(gguf_writer *w, const char *key, dsv4_error *err) {
    if (!w) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer is NULL");
    if (!key || !key[0]) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer: key is NULL or empty");
    size_t len = strlen(key);
    if (len > GGUF_MAX_NAME_LEN)
        return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': longer than %u bytes",
                         gguf_printable_of(key, len).s, GGUF_MAX_NAME_LEN);
    /* Linear scan: GGUF files carry tens of keys. */
    for (uint64_t i = 0; i < w->n_kv; i++) {
        uint64_t klen;
        memcpy(&klen, w->kv.p + w->key_at[i], 8);
        if (klen == len && memcmp(w->kv.p + w->key_at[i] + 8, key, len) == 0)
            return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': set twice", gguf_printable_of(key, len).s);
    }
    return DSV4_OK;
}

/* Appends key + type + value_len bytes of value; value is copied from val. */
static dsv4_status add_kv(gguf_writer *w, const char *key, gguf_value_type type, const void *head,
                          size_t head_len, const void *val, size_t val_len, dsv4_error *err) {
    dsv4_status st = check_key(w, key, err);
    if (st != DSV4_OK) return st;
    size_t klen = strlen(key);
    size_t total = 8 + klen + 4;
    if (head_len > SIZE_MAX - total || val_len > SIZE_MAX - total - head_len)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': value too large", gguf_printable_of(key, klen).s);
    total += head_len + val_len;
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        size_t *p =
            cap <= SIZE_MAX / sizeof(size_t) ? realloc(w->key_at, (size_t)cap * sizeof(size_t)) : NULL;
        if (!p)
            return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': out of memory", gguf_printable_of(key, klen).s);
        w->key_at = p;
        w->cap_kv = cap;
    }
    if (!buf_reserve(&w->kv, total))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': out of memory for a %zu-byte value",
                         gguf_printable_of(key, klen).s, total);
    w->key_at[w->n_kv++] = w->kv.n;
    put_u64(&w->kv, klen);
    put(&w->kv, key, klen);
    put_u32(&w->kv, (uint32_t)type);
    put(&w->kv, head, head_len);
    put(&w->kv, val, val_len);
    if (!gguf_writer_layout(w)) return dsv4_fail(err, DSV4_ERR_RANGE, "key '%s': file size overflows", key);
    return DSV4_OK;
}

static dsv4_status scalar(gguf_writer *w, const char *key, gguf_value_type t, const void *v,
                          dsv4_error *err) {
    if (key && strcmp(key, "general.alignment") == 0 && t != GGUF_VT_UINT32)
        return dsv4_fail(err, DSV4_ERR_INVALID, "key 'general.alignment': must be u32, not %s",
                         gguf_value_type_name(t));
    return add_kv(w, key, t, NULL, 0, v, gguf_value_type_size(t), err);
}

dsv4_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, dsv4_error *err) {
    return gguf_writer_set_u32(w, "general.alignment", alignment, err);
}

dsv4_status gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_UINT8, &v, err);
}
dsv4_status gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_INT8, &v, err);
}
dsv4_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_UINT16, &v, err);
}
dsv4_status gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_INT16, &v, err);
}
dsv4_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, dsv4_error *err) {
    bool is_align = key && strcmp(key, "general.alignment") == 0;
    if (is_align && !gguf_is_pow2(v))
        return dsv4_fail(err, DSV4_ERR_INVALID, "key 'general.alignment': %u is not a non-zero power of two",
                         v);
    uint32_t old = w ? w->alignment : 0;
    if (is_align && w) w->alignment = v; /* before add_kv so its layout uses it */
    dsv4_status st = scalar(w, key, GGUF_VT_UINT32, &v, err);
    if (st != DSV4_OK && is_align && w) {
        w->alignment = old;
        gguf_writer_layout(w);
    }
    return st;
}
dsv4_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_INT32, &v, err);
}
dsv4_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_FLOAT32, &v, err);
}
dsv4_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, dsv4_error *err) {
    uint8_t b = v ? 1 : 0;
    return scalar(w, key, GGUF_VT_BOOL, &b, err);
}
dsv4_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_UINT64, &v, err);
}
dsv4_status gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_INT64, &v, err);
}
dsv4_status gguf_writer_set_f64(gguf_writer *w, const char *key, double v, dsv4_error *err) {
    return scalar(w, key, GGUF_VT_FLOAT64, &v, err);
}

dsv4_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, dsv4_error *err) {
    if (!v) return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': string value is NULL", key ? key : "(null)");
    if (key && strcmp(key, "general.alignment") == 0) return scalar(w, key, GGUF_VT_STRING, NULL, err);
    uint64_t len = strlen(v);
    return add_kv(w, key, GGUF_VT_STRING, &len, 8, v, (size_t)len, err);
}

dsv4_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type item_type, const void *data,
                                uint64_t n, dsv4_error *err) {
    const char *k = key ? key : "(null)";
    size_t sz = gguf_value_type_size(item_type);
    if (sz == 0)
        return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': array item type %s is not a fixed-size type", k,
                         gguf_value_type_name(item_type));
    if (key && strcmp(key, "general.alignment") == 0) return scalar(w, key, GGUF_VT_ARRAY, NULL, err);
    if (n && !data) return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': array data is NULL", k);
    if (n > SIZE_MAX / sz)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': array of %llu items too large", k,
                         (unsigned long long)n);
    if (item_type == GGUF_VT_BOOL) {
        const uint8_t *b = data;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': bool item %llu is %u, must be 0 or 1", k,
                                 (unsigned long long)i, b[i]);
    }
    uint8_t head[12];
    uint32_t t = (uint32_t)item_type;
    memcpy(head, &t, 4);
    memcpy(head + 4, &n, 8);
    return add_kv(w, key, GGUF_VT_ARRAY, head, sizeof head, data, (size_t)(n * sz), err);
}

dsv4_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const uint64_t *lens, uint64_t n, dsv4_error *err) {
    const char *k = key ? key : "(null)";
    if (key && strcmp(key, "general.alignment") == 0) return scalar(w, key, GGUF_VT_ARRAY, NULL, err);
    if (n && !strs) return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': string array is NULL", k);
    /* Serialize the items into a scratch buffer first, then append as one value. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = lens ? lens[i] : (strs[i] ? strlen(strs[i]) : 0);
        if (len && !strs[i])
            return dsv4_fail(err, DSV4_ERR_INVALID, "key '%s': string item %llu is NULL", k,
                             (unsigned long long)i);
        if (len > SIZE_MAX - 8 || total > SIZE_MAX - 8 - len)
            return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': string array too large", k);
        total += 8 + len;
    }
    gguf_wbuf items = {NULL, 0, 0};
    if (!buf_reserve(&items, (size_t)total + 12))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "key '%s': out of memory for a string array", k);
    put_u32(&items, GGUF_VT_STRING);
    put_u64(&items, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = lens ? lens[i] : (strs[i] ? strlen(strs[i]) : 0);
        put_u64(&items, len);
        put(&items, strs[i], (size_t)len);
    }
    dsv4_status st = add_kv(w, key, GGUF_VT_ARRAY, NULL, 0, items.p, items.n, err);
    free(items.p);
    return st;
}

dsv4_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, uint64_t *out_index, dsv4_error *err) {
    if (!w) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer is NULL");
    if (!name || !name[0])
        return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer: tensor name is NULL or empty");
    size_t len = strlen(name);
    gguf_printable pname = gguf_printable_of(name, len);
    const char *pn = pname.s;
    if (len > GGUF_MAX_NAME_LEN)
        return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': name longer than %u bytes", pn,
                         GGUF_MAX_NAME_LEN);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': n_dims %u must be 1..%u", pn, n_dims,
                         GGUF_MAX_DIMS);
    const dsv4_type_info *ti = dsv4_type_get(type);
    if (!ti) return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': unknown tensor type id %u", pn, type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': dimension %u is 0", pn, d);
        if (ne[d] > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX / ne[d])
            return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': element count overflows", pn);
        n *= ne[d];
    }
    uint64_t row = 0;
    if (ne[0] % ti->block_elems != 0)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "tensor '%s': ne[0]=%llu is not a multiple of the %s block size %u", pn,
                         (unsigned long long)ne[0], ti->name, ti->block_elems);
    if (!dsv4_type_row_bytes(type, ne[0], &row) || (row && n / ne[0] > UINT64_MAX / row))
        return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': byte size overflows", pn);
    /* Linear scan: a model has a few thousand tensors at most. */
    for (uint64_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == len && memcmp(w->t[i].name, name, len) == 0)
            return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': declared twice", pn);
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        gguf_wtensor *p =
            cap <= SIZE_MAX / sizeof(gguf_wtensor) ? realloc(w->t, (size_t)cap * sizeof(gguf_wtensor)) : NULL;
        if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "tensor '%s': out of memory", pn);
        w->t = p;
        w->cap_t = cap;
    }
    gguf_wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = malloc(len + 1);
    if (!t->name) return dsv4_fail(err, DSV4_ERR_NOMEM, "tensor '%s': out of memory", pn);
    memcpy(t->name, name, len + 1);
    t->name_len = len;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = row * (n / ne[0]);
    uint64_t info = 8 + len + 4 + 8ull * n_dims + 4 + 8;
    w->n_t++;
    w->infos_bytes += info;
    if (!gguf_writer_layout(w)) {
        w->n_t--;
        w->infos_bytes -= info;
        free(t->name);
        gguf_writer_layout(w);
        return dsv4_fail(err, DSV4_ERR_RANGE, "tensor '%s': file size overflows 64 bits", pn);
    }
    if (out_index) *out_index = w->n_t - 1;
    return DSV4_OK;
}

uint64_t gguf_writer_tensor_count(const gguf_writer *w) { return w ? w->n_t : 0; }
uint64_t gguf_writer_data_offset(const gguf_writer *w) { return w ? w->data_offset : 0; }
uint64_t gguf_writer_tensor_offset(const gguf_writer *w, uint64_t index) {
    return w && index < w->n_t ? w->data_offset + w->t[index].rel : 0;
}
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t index) {
    return w && index < w->n_t ? w->t[index].nbytes : 0;
}
uint64_t gguf_writer_file_size(const gguf_writer *w) { return w ? w->file_size : 0; }

dsv4_status gguf_writer_set_tensor_data(gguf_writer *w, uint64_t index, const void *data, dsv4_error *err) {
    if (!w || index >= w->n_t)
        return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer: tensor index %llu out of range",
                         (unsigned long long)index);
    if (!data) return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': data is NULL", w->t[index].name);
    w->t[index].data = data;
    return DSV4_OK;
}
