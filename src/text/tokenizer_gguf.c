/* Kept apart from tokenizer.c so that users of the in-memory constructor do not link gguf. */
#include <stdlib.h>

#include "text/tokenizer.h"

static dsv4_status string_array(const gguf_file *f, const char *key, const gguf_kv **out, dsv4_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return dsv4_fail(err, DSV4_ERR_NOT_FOUND, "%s: metadata key %s missing", gguf_path(f), key);
    if (kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s: metadata key %s must be an array of strings (is %s of %s)", gguf_path(f), key,
                         gguf_value_type_name(kv->type),
                         kv->type == GGUF_VT_ARRAY ? gguf_value_type_name(kv->arr_type) : "-");
    *out = kv;
    return DSV4_OK;
}

static dsv4_status gather(const gguf_kv *kv, const char ***strs, uint64_t **lens, dsv4_error *err) {
    uint64_t n = kv->arr_len;
    *strs = malloc((n ? n : 1) * sizeof(**strs));
    *lens = malloc((n ? n : 1) * sizeof(**lens));
    if (!*strs || !*lens)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "tokenizer: out of memory (%llu strings)",
                         (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_kv_arr_str(kv, i);
        (*strs)[i] = s.len ? s.ptr : "";
        (*lens)[i] = s.len;
    }
    return DSV4_OK;
}

dsv4_status dsv4_tokenizer_from_gguf(const gguf_file *f, dsv4_tokenizer **out, dsv4_error *err) {
    *out = NULL;
    const gguf_kv *tk = NULL, *mk = NULL;
    dsv4_status st = string_array(f, "tokenizer.ggml.tokens", &tk, err);
    if (st == DSV4_OK) st = string_array(f, "tokenizer.ggml.merges", &mk, err);
    if (st != DSV4_OK) return st;
    const char **ts = NULL, **ms = NULL;
    uint64_t *tl = NULL, *ml = NULL;
    st = gather(tk, &ts, &tl, err);
    if (st == DSV4_OK) st = gather(mk, &ms, &ml, err);
    if (st == DSV4_OK) {
        st = dsv4_tokenizer_from_arrays(ts, tl, tk->arr_len, ms, ml, mk->arr_len, out, err);
        if (st != DSV4_OK) dsv4_error_prefix(err, "%s: ", gguf_path(f));
    }
    free(ts);
    free(tl);
    free(ms);
    free(ml);
    return st;
}
