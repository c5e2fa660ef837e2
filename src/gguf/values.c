/* Value-type table, array item accessors and small helpers shared by the reader and writer. */
#include <math.h>
#include <stdio.h>

#include "gguf/gguf_internal.h"

const char *gguf_value_type_name(gguf_value_type t) {
    switch (t) {
    case GGUF_VT_UINT8: return "u8";
    case GGUF_VT_INT8: return "i8";
    case GGUF_VT_UINT16: return "u16";
    case GGUF_VT_INT16: return "i16";
    case GGUF_VT_UINT32: return "u32";
    case GGUF_VT_INT32: return "i32";
    case GGUF_VT_FLOAT32: return "f32";
    case GGUF_VT_BOOL: return "bool";
    case GGUF_VT_STRING: return "string";
    case GGUF_VT_ARRAY: return "array";
    case GGUF_VT_UINT64: return "u64";
    case GGUF_VT_INT64: return "i64";
    case GGUF_VT_FLOAT64: return "f64";
    case GGUF_VT_COUNT: break;
    }
    return "unknown";
}

size_t gguf_value_type_size(gguf_value_type t) {
    switch (t) {
    case GGUF_VT_UINT8:
    case GGUF_VT_INT8:
    case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16:
    case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32:
    case GGUF_VT_INT32:
    case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64:
    case GGUF_VT_INT64:
    case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    if (!cstr) return false;
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

gguf_str gguf_kv_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = {NULL, 0};
    if (!kv || kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING || !kv->arr_str_offsets ||
        i >= kv->arr_len)
        return s;
    const uint8_t *p = kv->arr_data + kv->arr_str_offsets[i];
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

/* Reads item i of a fixed-size numeric array as either a double or an integer. */
static bool arr_item(const gguf_kv *kv, uint64_t i, bool *is_float, double *d, int64_t *s, uint64_t *u,
                     bool *is_unsigned) {
    if (!kv || kv->type != GGUF_VT_ARRAY || i >= kv->arr_len) return false;
    size_t sz = gguf_value_type_size(kv->arr_type);
    if (sz == 0 || kv->arr_type == GGUF_VT_BOOL) return false;
    const uint8_t *p = kv->arr_data + i * sz;
    *is_float = false;
    *is_unsigned = false;
    switch (kv->arr_type) {
    case GGUF_VT_UINT8:
        *u = p[0];
        *is_unsigned = true;
        return true;
    case GGUF_VT_INT8: {
        int8_t v;
        memcpy(&v, p, 1);
        *s = v;
        return true;
    }
    case GGUF_VT_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *u = v;
        *is_unsigned = true;
        return true;
    }
    case GGUF_VT_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *s = v;
        return true;
    }
    case GGUF_VT_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *u = v;
        *is_unsigned = true;
        return true;
    }
    case GGUF_VT_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *s = v;
        return true;
    }
    case GGUF_VT_UINT64:
        memcpy(u, p, 8);
        *is_unsigned = true;
        return true;
    case GGUF_VT_INT64: memcpy(s, p, 8); return true;
    case GGUF_VT_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        *d = v;
        *is_float = true;
        return true;
    }
    case GGUF_VT_FLOAT64:
        memcpy(d, p, 8);
        *is_float = true;
        return true;
    default: return false;
    }
}

bool gguf_kv_arr_f64(const gguf_kv *kv, uint64_t i, double *out) {
    bool is_float, is_unsigned;
    double d = 0;
    int64_t s = 0;
    uint64_t u = 0;
    if (!out || !arr_item(kv, i, &is_float, &d, &s, &u, &is_unsigned)) return false;
    *out = is_float ? d : is_unsigned ? (double)u : (double)s;
    return true;
}

bool gguf_kv_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    bool is_float, is_unsigned;
    double d = 0;
    int64_t s = 0;
    uint64_t u = 0;
    if (!out || !arr_item(kv, i, &is_float, &d, &s, &u, &is_unsigned)) return false;
    if (is_float) {
        /* Only integral values inside the int64 range convert exactly. */
        if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0)
            return false;
        *out = (int64_t)d;
        return true;
    }
    if (is_unsigned) {
        if (u > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)u;
        return true;
    }
    *out = s;
    return true;
}

gguf_printable gguf_printable_of(const void *p, uint64_t len) {
    static const char hex[] = "0123456789abcdef";
    gguf_printable out;
    const uint8_t *b = p;
    size_t o = 0, cap = sizeof out.s - 4; /* room for "..." and NUL */
    for (uint64_t i = 0; i < len; i++) {
        uint8_t ch = b[i];
        size_t need = (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'') ? 1 : 4;
        if (o + need > cap) {
            memcpy(out.s + o, "...", 4);
            return out;
        }
        if (need == 1) {
            out.s[o++] = (char)ch;
        } else {
            out.s[o++] = '\\';
            out.s[o++] = 'x';
            out.s[o++] = hex[ch >> 4];
            out.s[o++] = hex[ch & 15];
        }
    }
    out.s[o] = '\0';
    return out;
}

uint64_t gguf_hash_bytes(const void *p, uint64_t len) {
    /* FNV-1a, then a final mix so the low bits (used as the slot index) depend on every byte. */
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

bool gguf_is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
