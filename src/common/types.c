#include "common/types.h"

#include <stddef.h>

static const dsv4_type_info type_table[DSV4_TYPE_COUNT] = {
    [DSV4_TYPE_F32] = {"F32", 1, 4, true},
    [DSV4_TYPE_F16] = {"F16", 1, 2, true},
    [DSV4_TYPE_Q4_0] = {"Q4_0", 32, 18, false},
    [DSV4_TYPE_Q4_1] = {"Q4_1", 32, 20, false},
    [DSV4_TYPE_Q5_0] = {"Q5_0", 32, 22, false},
    [DSV4_TYPE_Q5_1] = {"Q5_1", 32, 24, false},
    [DSV4_TYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [DSV4_TYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [DSV4_TYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [DSV4_TYPE_Q3_K] = {"Q3_K", 256, 110, false},
    [DSV4_TYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [DSV4_TYPE_Q5_K] = {"Q5_K", 256, 176, false},
    [DSV4_TYPE_Q6_K] = {"Q6_K", 256, 210, false},
    [DSV4_TYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [DSV4_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, true},
    [DSV4_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, false},
    [DSV4_TYPE_I8] = {"I8", 1, 1, false},
    [DSV4_TYPE_I16] = {"I16", 1, 2, false},
    [DSV4_TYPE_I32] = {"I32", 1, 4, true},
    [DSV4_TYPE_I64] = {"I64", 1, 8, false},
    [DSV4_TYPE_F64] = {"F64", 1, 8, false},
    [DSV4_TYPE_BF16] = {"BF16", 1, 2, true},
};

const dsv4_type_info *dsv4_type_get(uint32_t type_id) {
    if (type_id >= DSV4_TYPE_COUNT || !type_table[type_id].name) return NULL;
    return &type_table[type_id];
}

const char *dsv4_type_name(uint32_t type_id) {
    const dsv4_type_info *t = dsv4_type_get(type_id);
    return t ? t->name : "unknown";
}

bool dsv4_type_row_bytes(uint32_t type_id, uint64_t n, uint64_t *out_bytes) {
    const dsv4_type_info *t = dsv4_type_get(type_id);
    if (!t || n % t->block_elems != 0) return false;
    uint64_t blocks = n / t->block_elems;
    if (blocks > UINT64_MAX / t->block_bytes) return false;
    *out_bytes = blocks * t->block_bytes;
    return true;
}
