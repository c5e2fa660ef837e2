/* Private to the writer files: the writer's state and its layout computation. */
#ifndef DSV4_GGUF_WRITER_INTERNAL_H
#define DSV4_GGUF_WRITER_INTERNAL_H

#include <stddef.h>

#include "gguf/gguf_internal.h"

typedef struct gguf_wbuf {
    uint8_t *p;
    size_t n, cap;
} gguf_wbuf;

typedef struct gguf_wtensor {
    char *name;
    size_t name_len;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t rel; /* offset inside the data section, set by gguf_writer_layout */
    const void *data;
} gguf_wtensor;

struct gguf_writer {
    gguf_wbuf kv;   /* serialized key/value entries, in insertion order */
    size_t *key_at; /* offset in kv.p of each entry's key length field */
    uint64_t n_kv, cap_kv;
    uint32_t alignment;
    gguf_wtensor *t;
    uint64_t n_t, cap_t;
    uint64_t infos_bytes; /* serialized size of the tensor directory */
    uint64_t data_offset; /* valid after gguf_writer_layout */
    uint64_t file_size;
};

/* Recomputes data_offset, every tensor's rel and file_size; false on 64-bit overflow. */
bool gguf_writer_layout(gguf_writer *w);
/* Serializes header + KV + directory + padding up to data_offset into a new buffer. */
dsv4_status gguf_writer_serialize_header(gguf_writer *w, uint8_t **out, size_t *out_len, dsv4_error *err);

#endif
