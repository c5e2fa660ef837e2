/* GGUF v3: a strictly validating reader over mmap, and a writer for tools and tests.
 * The reader checks every count, length, type, dimension, offset, alignment and overlap against
 * the file size before use; errors name the key or tensor. Strings point into the map and are
 * NOT NUL-terminated (use the len). Tensor names are copied and NUL-terminated. */
#ifndef DSV4_GGUF_H
#define DSV4_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/types.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_VERSION 3u
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 8u
#define GGUF_MAX_ARRAY_DEPTH 8u

typedef enum gguf_value_type {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT = 13
} gguf_value_type;

typedef struct gguf_str {
    const char *ptr; /* into the map; not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_value_type type;
    /* scalar value (type != ARRAY); integers widened, floats widened to double */
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        bool b;
        gguf_str str;
    } v;
    /* array value (type == ARRAY) */
    gguf_value_type arr_type;
    uint64_t arr_len;
    const uint8_t *arr_data; /* first item in the map (fixed-size items are packed) */
    const uint64_t
        *arr_str_offsets; /* STRING arrays: byte offset of item i's u64 length, relative to arr_data */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;                 /* NUL-terminated copy */
    uint32_t n_dims;            /* 1..GGUF_MAX_DIMS */
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    uint32_t type;              /* dsv4_type id */
    uint64_t n_elems;
    uint64_t offset; /* absolute offset in the file */
    uint64_t nbytes;
    const void *data; /* base + offset */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Open and validate a GGUF file (read-only mmap). */
dsv4_status gguf_open(const char *path, gguf_file **out, dsv4_error *err);
/* Validate a GGUF image already in memory (not copied; must outlive the handle). Used by fuzzing. */
dsv4_status gguf_open_memory(const void *data, size_t size, gguf_file **out, dsv4_error *err);
void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f); /* "<memory>" for memory images */
uint64_t gguf_file_size(const gguf_file *f);
const uint8_t *gguf_base(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f);

uint64_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
bool gguf_str_eq(gguf_str s, const char *cstr);
/* STRING array item i (bounds are the caller's job; i < arr_len). */
gguf_str gguf_kv_arr_str(const gguf_kv *kv, uint64_t i);
/* Numeric array item i converted to double/int64 (false for non-numeric item types).
 * BOOL, STRING and ARRAY items are not numeric. _i64 also fails for floats that are not integral
 * or out of range (NaN, inf, 1.5) and for u64 values above INT64_MAX. */
bool gguf_kv_arr_f64(const gguf_kv *kv, uint64_t i, double *out);
bool gguf_kv_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
const char *gguf_value_type_name(gguf_value_type t);
size_t gguf_value_type_size(gguf_value_type t); /* 0 for STRING/ARRAY/unknown */

uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* hashed lookup */

/* ---------------------------------------------------------------- writer ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Sets general.alignment (u32) too. Must be a power of two. */
dsv4_status gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, dsv4_error *err);

/* Scalars. A key set twice is an error. */
dsv4_status gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v, dsv4_error *err);
dsv4_status gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v, dsv4_error *err);
dsv4_status gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v, dsv4_error *err);
dsv4_status gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v, dsv4_error *err);
dsv4_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, dsv4_error *err);
dsv4_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, dsv4_error *err);
dsv4_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v, dsv4_error *err);
dsv4_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, dsv4_error *err);
dsv4_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, dsv4_error *err);
dsv4_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, dsv4_error *err);
dsv4_status gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v, dsv4_error *err);
dsv4_status gguf_writer_set_f64(gguf_writer *w, const char *key, double v, dsv4_error *err);
/* Arrays of fixed-size items (item_type not STRING/ARRAY); data is n packed little-endian items. */
dsv4_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_value_type item_type, const void *data,
                                uint64_t n, dsv4_error *err);
/* Arrays of strings; lens may be NULL for NUL-terminated strings. */
dsv4_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                    const uint64_t *lens, uint64_t n, dsv4_error *err);

/* Declare a tensor; offsets are assigned in declaration order, each aligned. Returns its index. */
dsv4_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, uint64_t *out_index, dsv4_error *err);
uint64_t gguf_writer_tensor_count(const gguf_writer *w);
/* After all keys and tensors are declared: header size (= absolute offset of the data section). */
uint64_t gguf_writer_data_offset(const gguf_writer *w);
uint64_t gguf_writer_tensor_offset(const gguf_writer *w, uint64_t index); /* absolute */
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t index);
uint64_t gguf_writer_file_size(const gguf_writer *w);

/* Serialize header + KV + tensor directory + padding to the data offset into fd at offset 0. */
dsv4_status gguf_writer_write_header_fd(gguf_writer *w, int fd, dsv4_error *err);
/* Attach data for a tensor (not copied; must stay valid until write_file). */
dsv4_status gguf_writer_set_tensor_data(gguf_writer *w, uint64_t index, const void *data, dsv4_error *err);
/* Write a whole file (header + all attached tensor data, zero padding between). Writes to a temp
 * file beside path and renames it; on error (e.g. disk full) the partial file is removed. */
dsv4_status gguf_writer_write_file(gguf_writer *w, const char *path, dsv4_error *err);

#endif
