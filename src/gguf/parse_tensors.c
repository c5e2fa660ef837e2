/* Parsing and validation of the tensor directory: names, shapes, types, sizes and data layout. */
#include <stdlib.h>

#include "gguf/gguf_internal.h"

typedef struct span {
    uint64_t off, end, idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static dsv4_status parse_name(gguf_cursor *c, uint64_t i, gguf_str *name, dsv4_error *err) {
    uint64_t len = 0;
    if (!gguf_cur_u64(c, &len))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "tensor #%llu: name length extends past end of file (size %llu)",
                         (unsigned long long)i, (unsigned long long)c->size);
    if (len == 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor #%llu: name is empty", (unsigned long long)i);
    if (len > GGUF_MAX_NAME_LEN)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor #%llu: name length %llu exceeds the limit of %u bytes",
                         (unsigned long long)i, (unsigned long long)len, GGUF_MAX_NAME_LEN);
    if (len > gguf_cur_left(c))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "tensor #%llu: name of length %llu extends past end of file (size %llu)",
                         (unsigned long long)i, (unsigned long long)len, (unsigned long long)c->size);
    name->ptr = (const char *)c->base + c->pos;
    name->len = len;
    c->pos += len;
    if (memchr(name->ptr, 0, len))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor #%llu '%s': name contains a NUL byte",
                         (unsigned long long)i, gguf_printable_of(name->ptr, len).s);
    return DSV4_OK;
}

/* Reads one tensor info after its name; t->offset holds the relative offset on return. */
static dsv4_status parse_info(gguf_cursor *c, const char *nm, uint32_t alignment, gguf_tensor *t,
                              dsv4_error *err) {
    unsigned long long size = c->size;
    if (!gguf_cur_u32(c, &t->n_dims))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': n_dims extends past end of file (size %llu)", nm,
                         size);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': n_dims is %u, must be 1..%u", nm, t->n_dims,
                         GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (!gguf_cur_u64(c, &t->ne[d]))
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "tensor '%s': dimension %u extends past end of file (size %llu)", nm, d, size);
        if (t->ne[d] == 0) return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': dimension %u is 0", nm, d);
        /* ggml stores dims and element counts as int64. */
        if (t->ne[d] > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX / t->ne[d])
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "tensor '%s': element count overflows at dimension %u (ne=%llu)", nm, d,
                             (unsigned long long)t->ne[d]);
        n *= t->ne[d];
    }
    t->n_elems = n;
    if (!gguf_cur_u32(c, &t->type))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': type extends past end of file (size %llu)", nm,
                         size);
    const dsv4_type_info *ti = dsv4_type_get(t->type);
    if (!ti) return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': unknown tensor type id %u", nm, t->type);
    uint64_t row = 0;
    if (t->ne[0] % ti->block_elems != 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "tensor '%s': ne[0]=%llu is not a multiple of the %s block size %u", nm,
                         (unsigned long long)t->ne[0], ti->name, ti->block_elems);
    uint64_t rows = n / t->ne[0];
    if (!dsv4_type_row_bytes(t->type, t->ne[0], &row) || (row != 0 && rows > UINT64_MAX / row))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': byte size overflows", nm);
    t->nbytes = row * rows;
    if (!gguf_cur_u64(c, &t->offset))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': offset extends past end of file (size %llu)", nm,
                         size);
    if (t->offset % alignment != 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "tensor '%s': offset %llu is not a multiple of the alignment %u", nm,
                         (unsigned long long)t->offset, alignment);
    return DSV4_OK;
}

/* Copies names into one pool and checks they are unique. */
static dsv4_status bind_names(gguf_file *f, const gguf_str *names, dsv4_error *err) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) total += names[i].len + 1; /* bounded by the file size */
    if (total > SIZE_MAX) return dsv4_fail(err, DSV4_ERR_NOMEM, "tensor names too large");
    f->name_pool = malloc(total ? (size_t)total : 1);
    if (!f->name_pool) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for tensor names");
    dsv4_status st = gguf_hash_init(&f->tensor_hash, f->n_tensors, err);
    if (st != DSV4_OK) return st;
    char *p = f->name_pool;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        memcpy(p, names[i].ptr, names[i].len);
        p[names[i].len] = '\0';
        f->tensors[i].name = p;
        p += names[i].len + 1;
        if (!gguf_hash_insert_tensor(f, i))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': duplicate tensor name (entry #%llu)",
                             gguf_printable_of(names[i].ptr, names[i].len).s, (unsigned long long)i);
    }
    return DSV4_OK;
}

static dsv4_status place_data(gguf_file *f, const gguf_str *names, dsv4_error *err) {
    uint64_t ds = f->data_offset, size = f->size;
    span *s = malloc(f->n_tensors ? (size_t)f->n_tensors * sizeof(span) : 1);
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the tensor layout check");
    dsv4_status st = DSV4_OK;
    for (uint64_t i = 0; i < f->n_tensors && st == DSV4_OK; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t rel = t->offset;
        if (rel > UINT64_MAX - ds) {
            st =
                dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': offset %llu overflows past the data start %llu",
                          gguf_printable_of(names[i].ptr, names[i].len).s, (unsigned long long)rel,
                          (unsigned long long)ds);
            break;
        }
        if (ds > size || rel > size - ds || t->nbytes > size - ds - rel) {
            uint64_t abs = ds + rel; /* the end saturates instead of wrapping */
            uint64_t end = t->nbytes > UINT64_MAX - abs ? UINT64_MAX : abs + t->nbytes;
            st = dsv4_fail(err, DSV4_ERR_FORMAT,
                           "tensor '%s': data [%llu, %llu) extends past end of file (size %llu)",
                           gguf_printable_of(names[i].ptr, names[i].len).s, (unsigned long long)abs,
                           (unsigned long long)end, (unsigned long long)size);
            break;
        }
        t->offset = ds + rel;
        t->data = f->base + t->offset;
        s[i] = (span){t->offset, t->offset + t->nbytes, i};
    }
    if (st == DSV4_OK && f->n_tensors > 1) {
        qsort(s, (size_t)f->n_tensors, sizeof(span), span_cmp);
        for (uint64_t i = 1; i < f->n_tensors; i++) {
            if (s[i].off < s[i - 1].end) {
                const gguf_str *a = &names[s[i - 1].idx], *b = &names[s[i].idx];
                st = dsv4_fail(err, DSV4_ERR_FORMAT,
                               "tensor '%s': data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                               gguf_printable_of(b->ptr, b->len).s, (unsigned long long)s[i].off,
                               (unsigned long long)s[i].end, gguf_printable_of(a->ptr, a->len).s,
                               (unsigned long long)s[i - 1].off, (unsigned long long)s[i - 1].end);
                break;
            }
        }
    }
    free(s);
    return st;
}

dsv4_status gguf_parse_tensors(gguf_file *f, gguf_cursor *c, uint64_t n_tensors, dsv4_error *err) {
    if (n_tensors > SIZE_MAX / sizeof(gguf_tensor))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "too many tensors (%llu)", (unsigned long long)n_tensors);
    f->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof(gguf_tensor));
    gguf_str *names = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof(gguf_str));
    if (!f->tensors || !names) {
        free(names);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for %llu tensors",
                         (unsigned long long)n_tensors);
    }
    dsv4_status st = DSV4_OK;
    for (uint64_t i = 0; i < n_tensors && st == DSV4_OK; i++) {
        st = parse_name(c, i, &names[i], err);
        if (st == DSV4_OK)
            st = parse_info(c, gguf_printable_of(names[i].ptr, names[i].len).s, f->alignment, &f->tensors[i],
                            err);
    }
    if (st == DSV4_OK) {
        uint64_t a = f->alignment, pos = c->pos;
        if (pos > UINT64_MAX - (a - 1)) {
            st = dsv4_fail(err, DSV4_ERR_FORMAT, "data section offset overflows");
        } else {
            f->data_offset = (pos + a - 1) / a * a;
            f->n_tensors = n_tensors;
            st = bind_names(f, names, err);
        }
    }
    if (st == DSV4_OK) st = place_data(f, names, err);
    if (st != DSV4_OK) f->n_tensors = 0; /* the handle is being discarded; nothing is half-visible */
    free(names);
    return st;
}
