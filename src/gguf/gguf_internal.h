/* Private to src/gguf: the reader's handle, a bounds-checked byte cursor, and helpers shared
 * by the parse, lookup and writer files. */
#ifndef DSV4_GGUF_INTERNAL_H
#define DSV4_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf/ reads little-endian fields with memcpy; a big-endian host needs byte swaps"
#endif

/* Longest tensor name or key we accept (ggml itself uses 64 bytes; real keys are < 100). */
#define GGUF_MAX_NAME_LEN (64u * 1024u)
/* Smallest possible encodings, used to bound counts by the bytes that remain. */
#define GGUF_MIN_KV_BYTES 14u     /* u64 key len + 1 key byte + u32 type + 1 value byte */
#define GGUF_MIN_TENSOR_BYTES 33u /* u64 len + 1 name byte + u32 n_dims + 1 dim + u32 type + u64 off */

typedef struct gguf_hash {
    uint64_t *slots; /* index + 1; 0 = empty */
    uint64_t mask;   /* capacity - 1 (capacity is a power of two) */
} gguf_hash;

struct gguf_file {
    char *path;
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when we own an mmap of map_size bytes */
    uint64_t map_size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    gguf_kv *kvs;
    uint64_t *str_offsets; /* pool that every STRING array's arr_str_offsets points into */
    gguf_hash kv_hash;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    char *name_pool; /* every tensor name, NUL-terminated */
    gguf_hash tensor_hash;
};

typedef struct gguf_cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
} gguf_cursor;

static inline uint64_t gguf_cur_left(const gguf_cursor *c) { return c->size - c->pos; }
static inline bool gguf_cur_has(const gguf_cursor *c, uint64_t n) { return n <= c->size - c->pos; }
static inline bool gguf_cur_u32(gguf_cursor *c, uint32_t *v) {
    if (!gguf_cur_has(c, 4)) return false;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return true;
}
static inline bool gguf_cur_u64(gguf_cursor *c, uint64_t *v) {
    if (!gguf_cur_has(c, 8)) return false;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return true;
}

/* Printable rendering of untrusted bytes for error messages (escapes, truncation). */
typedef struct gguf_printable {
    char s[96];
} gguf_printable;
gguf_printable gguf_printable_of(const void *p, uint64_t len);

uint64_t gguf_hash_bytes(const void *p, uint64_t len);
bool gguf_is_pow2(uint64_t v);

/* Parsing steps; each fills err with a message naming the key or tensor. */
dsv4_status gguf_parse_header(gguf_file *f, gguf_cursor *c, uint64_t *n_tensors, uint64_t *n_kv,
                              dsv4_error *err);
dsv4_status gguf_parse_kvs(gguf_file *f, gguf_cursor *c, uint64_t n_kv, dsv4_error *err);
dsv4_status gguf_parse_tensors(gguf_file *f, gguf_cursor *c, uint64_t n_tensors, dsv4_error *err);

/* Open-addressing table of indices; the caller's eq compares entry idx with a key. */
typedef bool (*gguf_hash_eq_fn)(const void *ctx, uint64_t idx, const void *key, uint64_t len);
dsv4_status gguf_hash_init(gguf_hash *h, uint64_t count, dsv4_error *err);
void gguf_hash_free(gguf_hash *h);
/* Slot holding the entry equal to key, or the empty slot where it belongs. */
uint64_t *gguf_hash_probe(const gguf_hash *h, const void *key, uint64_t len, gguf_hash_eq_fn eq,
                          const void *ctx);
/* Insert entry idx into the file's table; false if an equal key/name is already there. */
bool gguf_hash_insert_kv(gguf_file *f, uint64_t idx);
bool gguf_hash_insert_tensor(gguf_file *f, uint64_t idx);

#endif
