/* Parsing and validation of the key/value section, including nested arrays and the alignment key. */
#include <stdlib.h>

#include "gguf/gguf_internal.h"

/* Growable list of STRING-array item offsets; every STRING array's arr_str_offsets points into it. */
typedef struct offset_pool {
    uint64_t *v;
    uint64_t n, cap;
} offset_pool;

typedef struct kv_ctx {
    gguf_cursor *c;
    gguf_printable key; /* printable key, for messages */
    offset_pool *pool;
    dsv4_error *err;
} kv_ctx;

static dsv4_status pool_push(kv_ctx *k, uint64_t v) {
    offset_pool *p = k->pool;
    if (p->n == p->cap) {
        uint64_t cap = p->cap ? p->cap * 2 : 256;
        if (cap > SIZE_MAX / sizeof(uint64_t))
            return dsv4_fail(k->err, DSV4_ERR_NOMEM, "key '%s': string array too large", k->key.s);
        uint64_t *nv = realloc(p->v, (size_t)cap * sizeof(uint64_t));
        if (!nv)
            return dsv4_fail(k->err, DSV4_ERR_NOMEM, "key '%s': out of memory for string array offsets",
                             k->key.s);
        p->v = nv;
        p->cap = cap;
    }
    p->v[p->n++] = v;
    return DSV4_OK;
}

static dsv4_status truncated(kv_ctx *k, const char *what) {
    return dsv4_fail(k->err, DSV4_ERR_FORMAT, "key '%s': %s extends past end of file (size %llu)", k->key.s,
                     what, (unsigned long long)k->c->size);
}

/* Validate n items of type t at the cursor and step over them. depth is the nesting level of the
 * array holding them (1 = the top-level value). base_pos is where the top-level items start, for
 * string offsets; record is true only for a top-level STRING array. */
static dsv4_status skip_items(kv_ctx *k, uint32_t t, uint64_t n, uint32_t depth, uint64_t base_pos,
                              bool record) {
    gguf_cursor *c = k->c;
    if (t >= GGUF_VT_COUNT)
        return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                         "key '%s': array item type %u is not a GGUF value type (0..12)", k->key.s, t);
    size_t sz = gguf_value_type_size((gguf_value_type)t);
    if (sz) {
        if (n > gguf_cur_left(c) / sz)
            return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                             "key '%s': array of %llu %s items extends past end of file (size %llu)",
                             k->key.s, (unsigned long long)n, gguf_value_type_name((gguf_value_type)t),
                             (unsigned long long)c->size);
        if (t == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                uint8_t b = c->base[c->pos + i];
                if (b > 1)
                    return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                                     "key '%s': bool array item %llu has byte %u (must be 0 or 1)", k->key.s,
                                     (unsigned long long)i, b);
            }
        }
        c->pos += n * sz;
        return DSV4_OK;
    }
    if (t == GGUF_VT_STRING) {
        if (n > gguf_cur_left(c) / 8)
            return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                             "key '%s': array of %llu strings cannot fit in the %llu bytes left", k->key.s,
                             (unsigned long long)n, (unsigned long long)gguf_cur_left(c));
        for (uint64_t i = 0; i < n; i++) {
            uint64_t at = c->pos, len = 0;
            if (!gguf_cur_u64(c, &len)) return truncated(k, "string array item length");
            if (len > gguf_cur_left(c))
                return dsv4_fail(
                    k->err, DSV4_ERR_FORMAT,
                    "key '%s': string array item %llu has length %llu, past end of file (size %llu)",
                    k->key.s, (unsigned long long)i, (unsigned long long)len, (unsigned long long)c->size);
            c->pos += len;
            if (record) {
                dsv4_status st = pool_push(k, at - base_pos);
                if (st != DSV4_OK) return st;
            }
        }
        return DSV4_OK;
    }
    /* Arrays of arrays: each item is (u32 type, u64 len, items). */
    if (depth + 1 > GGUF_MAX_ARRAY_DEPTH)
        return dsv4_fail(k->err, DSV4_ERR_FORMAT, "key '%s': arrays nested deeper than %u levels", k->key.s,
                         GGUF_MAX_ARRAY_DEPTH);
    if (n > gguf_cur_left(c) / 12)
        return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                         "key '%s': array of %llu arrays cannot fit in the %llu bytes left", k->key.s,
                         (unsigned long long)n, (unsigned long long)gguf_cur_left(c));
    for (uint64_t i = 0; i < n; i++) {
        uint32_t it = 0;
        uint64_t len = 0;
        if (!gguf_cur_u32(c, &it) || !gguf_cur_u64(c, &len)) return truncated(k, "nested array header");
        dsv4_status st = skip_items(k, it, len, depth + 1, 0, false);
        if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
}

static dsv4_status parse_value(kv_ctx *k, gguf_kv *kv, uint32_t type) {
    gguf_cursor *c = k->c;
    size_t sz = gguf_value_type_size((gguf_value_type)type);
    kv->type = (gguf_value_type)type;
    if (sz) {
        if (!gguf_cur_has(c, sz)) return truncated(k, "value");
        const uint8_t *p = c->base + c->pos;
        c->pos += sz;
        switch (kv->type) {
        case GGUF_VT_UINT8: kv->v.u64 = p[0]; break;
        case GGUF_VT_INT8: {
            int8_t v;
            memcpy(&v, p, 1);
            kv->v.i64 = v;
            break;
        }
        case GGUF_VT_UINT16: {
            uint16_t v;
            memcpy(&v, p, 2);
            kv->v.u64 = v;
            break;
        }
        case GGUF_VT_INT16: {
            int16_t v;
            memcpy(&v, p, 2);
            kv->v.i64 = v;
            break;
        }
        case GGUF_VT_UINT32: {
            uint32_t v;
            memcpy(&v, p, 4);
            kv->v.u64 = v;
            break;
        }
        case GGUF_VT_INT32: {
            int32_t v;
            memcpy(&v, p, 4);
            kv->v.i64 = v;
            break;
        }
        case GGUF_VT_FLOAT32: {
            float v;
            memcpy(&v, p, 4);
            kv->v.f64 = v;
            break;
        }
        case GGUF_VT_UINT64: memcpy(&kv->v.u64, p, 8); break;
        case GGUF_VT_INT64: memcpy(&kv->v.i64, p, 8); break;
        case GGUF_VT_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
        case GGUF_VT_BOOL:
            if (p[0] > 1)
                return dsv4_fail(k->err, DSV4_ERR_FORMAT, "key '%s': bool value has byte %u (must be 0 or 1)",
                                 k->key.s, p[0]);
            kv->v.b = p[0] == 1;
            break;
        default: break;
        }
        return DSV4_OK;
    }
    if (type == GGUF_VT_STRING) {
        uint64_t len = 0;
        if (!gguf_cur_u64(c, &len)) return truncated(k, "string length");
        if (len > gguf_cur_left(c))
            return dsv4_fail(k->err, DSV4_ERR_FORMAT,
                             "key '%s': string value of length %llu extends past end of file (size %llu)",
                             k->key.s, (unsigned long long)len, (unsigned long long)c->size);
        kv->v.str.ptr = (const char *)c->base + c->pos;
        kv->v.str.len = len;
        c->pos += len;
        return DSV4_OK;
    }
    if (type == GGUF_VT_ARRAY) {
        uint32_t it = 0;
        uint64_t len = 0;
        if (!gguf_cur_u32(c, &it) || !gguf_cur_u64(c, &len)) return truncated(k, "array header");
        kv->arr_type = (gguf_value_type)it;
        kv->arr_len = len;
        kv->arr_data = c->base + c->pos;
        return skip_items(k, it, len, 1, c->pos, it == GGUF_VT_STRING);
    }
    return dsv4_fail(k->err, DSV4_ERR_FORMAT, "key '%s': value type %u is not a GGUF value type (0..12)",
                     k->key.s, type);
}

static dsv4_status parse_key(gguf_cursor *c, uint64_t i, gguf_str *key, dsv4_error *err) {
    uint64_t len = 0;
    if (!gguf_cur_u64(c, &len))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "key #%llu: key length extends past end of file (size %llu)",
                         (unsigned long long)i, (unsigned long long)c->size);
    if (len == 0) return dsv4_fail(err, DSV4_ERR_FORMAT, "key #%llu: key is empty", (unsigned long long)i);
    if (len > GGUF_MAX_NAME_LEN)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "key #%llu: key length %llu exceeds the limit of %u bytes",
                         (unsigned long long)i, (unsigned long long)len, GGUF_MAX_NAME_LEN);
    if (len > gguf_cur_left(c))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "key #%llu: key of length %llu extends past end of file (size %llu)",
                         (unsigned long long)i, (unsigned long long)len, (unsigned long long)c->size);
    key->ptr = (const char *)c->base + c->pos;
    key->len = len;
    c->pos += len;
    if (memchr(key->ptr, 0, len))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "key #%llu '%s': key contains a NUL byte",
                         (unsigned long long)i, gguf_printable_of(key->ptr, len).s);
    return DSV4_OK;
}

static dsv4_status resolve_alignment(gguf_file *f, dsv4_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return DSV4_OK;
    if (kv->type != GGUF_VT_UINT32)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "key 'general.alignment': type is %s, must be u32",
                         gguf_value_type_name(kv->type));
    if (!gguf_is_pow2(kv->v.u64))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "key 'general.alignment': value %llu is not a non-zero power of two",
                         (unsigned long long)kv->v.u64);
    f->alignment = (uint32_t)kv->v.u64;
    return DSV4_OK;
}

dsv4_status gguf_parse_kvs(gguf_file *f, gguf_cursor *c, uint64_t n_kv, dsv4_error *err) {
    if (n_kv > SIZE_MAX / sizeof(gguf_kv))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "too many keys (%llu)", (unsigned long long)n_kv);
    f->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof(gguf_kv));
    if (!f->kvs)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for %llu keys", (unsigned long long)n_kv);
    dsv4_status st = gguf_hash_init(&f->kv_hash, n_kv, err);
    if (st != DSV4_OK) return st;
    offset_pool pool = {NULL, 0, 0};
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        st = parse_key(c, i, &kv->key, err);
        if (st != DSV4_OK) break;
        kv_ctx k = {c, gguf_printable_of(kv->key.ptr, kv->key.len), &pool, err};
        uint32_t type = 0;
        if (!gguf_cur_u32(c, &type)) {
            st = truncated(&k, "value type");
            break;
        }
        st = parse_value(&k, kv, type);
        if (st != DSV4_OK) break;
        f->n_kv = i + 1; /* count only entries that are complete, for lookups below */
        if (!gguf_hash_insert_kv(f, i)) {
            st = dsv4_fail(err, DSV4_ERR_FORMAT, "key '%s': duplicate key (entry #%llu)", k.key.s,
                           (unsigned long long)i);
            break;
        }
    }
    if (st != DSV4_OK) {
        free(pool.v);
        return st;
    }
    /* STRING arrays took consecutive runs of the pool, in key order. */
    f->str_offsets = pool.v;
    uint64_t next = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        if (kv->type == GGUF_VT_ARRAY && kv->arr_type == GGUF_VT_STRING) {
            kv->arr_str_offsets = pool.v ? pool.v + next : NULL;
            next += kv->arr_len;
        }
    }
    return resolve_alignment(f, err);
}
