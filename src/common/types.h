/* Tensor element types, with the ggml/GGUF numeric ids and block geometry.
 * Shared by gguf/ (to size tensor data) and quant/ (to decode it). */
#ifndef DSV4_COMMON_TYPES_H
#define DSV4_COMMON_TYPES_H

#include <stdbool.h>
#include <stdint.h>

typedef enum dsv4_type {
    DSV4_TYPE_F32 = 0,
    DSV4_TYPE_F16 = 1,
    DSV4_TYPE_Q4_0 = 2,
    DSV4_TYPE_Q4_1 = 3,
    DSV4_TYPE_Q5_0 = 6,
    DSV4_TYPE_Q5_1 = 7,
    DSV4_TYPE_Q8_0 = 8,
    DSV4_TYPE_Q8_1 = 9,
    DSV4_TYPE_Q2_K = 10,
    DSV4_TYPE_Q3_K = 11,
    DSV4_TYPE_Q4_K = 12,
    DSV4_TYPE_Q5_K = 13,
    DSV4_TYPE_Q6_K = 14,
    DSV4_TYPE_Q8_K = 15,
    DSV4_TYPE_IQ2_XXS = 16,
    DSV4_TYPE_IQ2_XS = 17,
    DSV4_TYPE_I8 = 24,
    DSV4_TYPE_I16 = 25,
    DSV4_TYPE_I32 = 26,
    DSV4_TYPE_I64 = 27,
    DSV4_TYPE_F64 = 28,
    DSV4_TYPE_BF16 = 30,
    DSV4_TYPE_COUNT = 31
} dsv4_type;

typedef struct dsv4_type_info {
    const char *name;     /* "Q8_0", ... ; NULL for ids we do not know */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
    bool decodable;       /* quant/ can dequantize it */
} dsv4_type_info;

/* NULL for an unknown id. */
const dsv4_type_info *dsv4_type_get(uint32_t type_id);
const char *dsv4_type_name(uint32_t type_id); /* "type#N" storage for unknown ids is static */
/* Bytes of one row of n elements; returns false if n is not a multiple of the block or the type is unknown.
 */
bool dsv4_type_row_bytes(uint32_t type_id, uint64_t n, uint64_t *out_bytes);

#endif
