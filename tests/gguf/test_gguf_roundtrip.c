/* Writer -> reader round trips: every value type, arrays, tensors and alignment; the writer's
 * bytes are also compared with a hand-assembled file. */
#include "builder.h"

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <sys/stat.h>

#include "gguf/gguf.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32_from(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
static double f64_from(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

#define OK(expr)                                                                                             \
    do {                                                                                                     \
        dsv4_status st_ = (expr);                                                                            \
        if (st_ != DSV4_OK) fail_msg("%s -> %s: %s", #expr, dsv4_status_name(st_), err.msg);                 \
    } while (0)

static gguf_file *write_and_open(gguf_writer *w, const char *name) {
    dsv4_error err = {0};
    char *path = tmp_path(name);
    OK(gguf_writer_write_file(w, path, &err));
    gguf_file *f = NULL;
    OK(gguf_open(path, &f, &err));
    assert_string_equal(gguf_path(f), path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal((uint64_t)sb.st_size, gguf_writer_file_size(w));
    assert_int_equal(gguf_file_size(f), gguf_writer_file_size(w));
    free(path);
    return f;
}

static const gguf_kv *need_kv(gguf_file *f, const char *key, gguf_value_type t) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) fail_msg("key %s missing", key);
    assert_true(gguf_str_eq(kv->key, key));
    assert_int_equal(kv->type, t);
    return kv;
}

static void test_scalars(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    const uint32_t qnan_payload = 0x7fc12345u; /* quiet NaN with payload: survives float->double->float */
    const uint64_t snan64 = 0x7ff0000000000001ull;
    OK(gguf_writer_set_u8(w, "u8.max", 255, &err));
    OK(gguf_writer_set_u8(w, "u8.zero", 0, &err));
    OK(gguf_writer_set_i8(w, "i8.min", -128, &err));
    OK(gguf_writer_set_i8(w, "i8.max", 127, &err));
    OK(gguf_writer_set_u16(w, "u16.max", 65535, &err));
    OK(gguf_writer_set_i16(w, "i16.min", -32768, &err));
    OK(gguf_writer_set_u32(w, "u32.max", 0xffffffffu, &err));
    OK(gguf_writer_set_i32(w, "i32.min", INT32_MIN, &err));
    OK(gguf_writer_set_i32(w, "i32.max", INT32_MAX, &err));
    OK(gguf_writer_set_u64(w, "u64.max", UINT64_MAX, &err));
    OK(gguf_writer_set_i64(w, "i64.min", INT64_MIN, &err));
    OK(gguf_writer_set_i64(w, "i64.max", INT64_MAX, &err));
    OK(gguf_writer_set_f32(w, "f32.nan", f32_from(qnan_payload), &err));
    OK(gguf_writer_set_f32(w, "f32.ninf", -INFINITY, &err));
    OK(gguf_writer_set_f32(w, "f32.negzero", -0.0f, &err));
    OK(gguf_writer_set_f32(w, "f32.denorm", f32_from(1), &err));
    OK(gguf_writer_set_f32(w, "f32.max", FLT_MAX, &err));
    OK(gguf_writer_set_f64(w, "f64.snan", f64_from(snan64), &err));
    OK(gguf_writer_set_f64(w, "f64.inf", INFINITY, &err));
    OK(gguf_writer_set_f64(w, "f64.denorm", f64_from(1), &err));
    OK(gguf_writer_set_f64(w, "f64.pi", 3.141592653589793, &err));
    OK(gguf_writer_set_bool(w, "bool.t", true, &err));
    OK(gguf_writer_set_bool(w, "bool.f", false, &err));
    OK(gguf_writer_set_str(w, "str.empty", "", &err));
    OK(gguf_writer_set_str(w, "str.utf8", "h\xc3\xa9llo \xe2\x96\x81world", &err));
    size_t long_len = 100000;
    char *longs = malloc(long_len + 1);
    assert_non_null(longs);
    for (size_t i = 0; i < long_len; i++) longs[i] = (char)('a' + i % 26);
    longs[long_len] = 0;
    OK(gguf_writer_set_str(w, "str.long", longs, &err));

    gguf_file *f = write_and_open(w, "scalars.gguf");
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_alignment(f), 32);
    assert_int_equal(gguf_kv_count(f), 26);
    assert_int_equal(gguf_tensor_count(f), 0);
    /* insertion order is kept */
    assert_true(gguf_str_eq(gguf_kv_at(f, 0)->key, "u8.max"));
    assert_true(gguf_str_eq(gguf_kv_at(f, 25)->key, "str.long"));
    assert_null(gguf_kv_at(f, 26));

    assert_int_equal(need_kv(f, "u8.max", GGUF_VT_UINT8)->v.u64, 255);
    assert_int_equal(need_kv(f, "u8.zero", GGUF_VT_UINT8)->v.u64, 0);
    assert_int_equal(need_kv(f, "i8.min", GGUF_VT_INT8)->v.i64, -128);
    assert_int_equal(need_kv(f, "i8.max", GGUF_VT_INT8)->v.i64, 127);
    assert_int_equal(need_kv(f, "u16.max", GGUF_VT_UINT16)->v.u64, 65535);
    assert_true(need_kv(f, "i16.min", GGUF_VT_INT16)->v.i64 == -32768);
    assert_int_equal(need_kv(f, "u32.max", GGUF_VT_UINT32)->v.u64, 0xffffffffu);
    assert_true(need_kv(f, "i32.min", GGUF_VT_INT32)->v.i64 == INT32_MIN);
    assert_true(need_kv(f, "i32.max", GGUF_VT_INT32)->v.i64 == INT32_MAX);
    assert_true(need_kv(f, "u64.max", GGUF_VT_UINT64)->v.u64 == UINT64_MAX);
    assert_true(need_kv(f, "i64.min", GGUF_VT_INT64)->v.i64 == INT64_MIN);
    assert_true(need_kv(f, "i64.max", GGUF_VT_INT64)->v.i64 == INT64_MAX);
    assert_int_equal(f32_bits((float)need_kv(f, "f32.nan", GGUF_VT_FLOAT32)->v.f64), qnan_payload);
    assert_int_equal(f32_bits((float)need_kv(f, "f32.ninf", GGUF_VT_FLOAT32)->v.f64), 0xff800000u);
    assert_int_equal(f32_bits((float)need_kv(f, "f32.negzero", GGUF_VT_FLOAT32)->v.f64), 0x80000000u);
    assert_int_equal(f32_bits((float)need_kv(f, "f32.denorm", GGUF_VT_FLOAT32)->v.f64), 1);
    assert_int_equal(f32_bits((float)need_kv(f, "f32.max", GGUF_VT_FLOAT32)->v.f64), 0x7f7fffffu);
    assert_true(f64_bits(need_kv(f, "f64.snan", GGUF_VT_FLOAT64)->v.f64) == snan64);
    assert_true(f64_bits(need_kv(f, "f64.inf", GGUF_VT_FLOAT64)->v.f64) == 0x7ff0000000000000ull);
    assert_true(f64_bits(need_kv(f, "f64.denorm", GGUF_VT_FLOAT64)->v.f64) == 1);
    assert_true(need_kv(f, "f64.pi", GGUF_VT_FLOAT64)->v.f64 == 3.141592653589793);
    assert_true(need_kv(f, "bool.t", GGUF_VT_BOOL)->v.b);
    assert_false(need_kv(f, "bool.f", GGUF_VT_BOOL)->v.b);
    gguf_str s = need_kv(f, "str.empty", GGUF_VT_STRING)->v.str;
    assert_int_equal(s.len, 0);
    s = need_kv(f, "str.utf8", GGUF_VT_STRING)->v.str;
    assert_int_equal(s.len, 15);
    assert_memory_equal(s.ptr, "h\xc3\xa9llo \xe2\x96\x81world", 15);
    s = need_kv(f, "str.long", GGUF_VT_STRING)->v.str;
    assert_int_equal(s.len, long_len);
    assert_memory_equal(s.ptr, longs, long_len);
    /* the string points into the map */
    assert_true((const uint8_t *)s.ptr > gguf_base(f) &&
                (const uint8_t *)s.ptr + s.len <= gguf_base(f) + gguf_file_size(f));

    /* missing keys; prefixes and extensions of existing keys */
    assert_null(gguf_find_kv(f, "missing"));
    assert_null(gguf_find_kv(f, "u8"));
    assert_null(gguf_find_kv(f, "u8.max2"));
    assert_null(gguf_find_kv(f, ""));
    assert_null(gguf_find_tensor(f, "u8.max"));
    assert_false(gguf_str_eq(s, "abc"));
    free(longs);
    gguf_close(f);
    gguf_writer_free(w);
}

static void test_arrays(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 0, 127};
    const uint16_t a_u16[] = {0, 65535};
    const int16_t a_i16[] = {-32768, 32767, -1};
    const uint32_t a_u32[] = {0xffffffffu, 7};
    const int32_t a_i32[] = {INT32_MIN, -5, INT32_MAX};
    const float a_f32[] = {1.5f, -0.0f, f32_from(0x7fc00001u), INFINITY};
    const uint8_t a_bool[] = {1, 0, 1, 1};
    const uint64_t a_u64[] = {UINT64_MAX, 0, 1ull << 63, 12345};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -1};
    const double a_f64[] = {-2.25, f64_from(0x7ff0000000000001ull), 1e300, 2.0};
    OK(gguf_writer_set_arr(w, "a.u8", GGUF_VT_UINT8, a_u8, 3, &err));
    OK(gguf_writer_set_arr(w, "a.i8", GGUF_VT_INT8, a_i8, 3, &err));
    OK(gguf_writer_set_arr(w, "a.u16", GGUF_VT_UINT16, a_u16, 2, &err));
    OK(gguf_writer_set_arr(w, "a.i16", GGUF_VT_INT16, a_i16, 3, &err));
    OK(gguf_writer_set_arr(w, "a.u32", GGUF_VT_UINT32, a_u32, 2, &err));
    OK(gguf_writer_set_arr(w, "a.i32", GGUF_VT_INT32, a_i32, 3, &err));
    OK(gguf_writer_set_arr(w, "a.f32", GGUF_VT_FLOAT32, a_f32, 4, &err));
    OK(gguf_writer_set_arr(w, "a.bool", GGUF_VT_BOOL, a_bool, 4, &err));
    OK(gguf_writer_set_arr(w, "a.u64", GGUF_VT_UINT64, a_u64, 4, &err));
    OK(gguf_writer_set_arr(w, "a.i64", GGUF_VT_INT64, a_i64, 3, &err));
    OK(gguf_writer_set_arr(w, "a.f64", GGUF_VT_FLOAT64, a_f64, 4, &err));
    OK(gguf_writer_set_arr(w, "a.empty", GGUF_VT_INT32, NULL, 0, &err));
    const char *strs[] = {"", "hello", "", "\xe2\x96\x81x", ""};
    OK(gguf_writer_set_arr_str(w, "a.str", strs, NULL, 5, &err));
    const char *binstrs[] = {"a\0b", "zz"};
    const uint64_t binlens[] = {3, 0};
    OK(gguf_writer_set_arr_str(w, "a.strbin", binstrs, binlens, 2, &err));
    OK(gguf_writer_set_arr_str(w, "a.strempty", NULL, NULL, 0, &err));
    /* a tokenizer-sized vocabulary */
    const uint64_t nv = 129280;
    char **vocab = malloc(nv * sizeof *vocab);
    assert_non_null(vocab);
    for (uint64_t i = 0; i < nv; i++) {
        vocab[i] = malloc(24);
        assert_non_null(vocab[i]);
        if (i % 1000 == 7)
            vocab[i][0] = 0; /* a few empty tokens */
        else
            snprintf(vocab[i], 24, "tok%llu", (unsigned long long)(i * 2654435761u % 1000003));
    }
    OK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)vocab, NULL, nv, &err));

    gguf_file *f = write_and_open(w, "arrays.gguf");
    struct {
        const char *key;
        gguf_value_type t;
        const void *data;
        uint64_t n;
        size_t sz;
    } cases[] = {
        {"a.u8", GGUF_VT_UINT8, a_u8, 3, 1},     {"a.i8", GGUF_VT_INT8, a_i8, 3, 1},
        {"a.u16", GGUF_VT_UINT16, a_u16, 2, 2},  {"a.i16", GGUF_VT_INT16, a_i16, 3, 2},
        {"a.u32", GGUF_VT_UINT32, a_u32, 2, 4},  {"a.i32", GGUF_VT_INT32, a_i32, 3, 4},
        {"a.f32", GGUF_VT_FLOAT32, a_f32, 4, 4}, {"a.bool", GGUF_VT_BOOL, a_bool, 4, 1},
        {"a.u64", GGUF_VT_UINT64, a_u64, 4, 8},  {"a.i64", GGUF_VT_INT64, a_i64, 3, 8},
        {"a.f64", GGUF_VT_FLOAT64, a_f64, 4, 8}, {"a.empty", GGUF_VT_INT32, NULL, 0, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const gguf_kv *kv = need_kv(f, cases[c].key, GGUF_VT_ARRAY);
        assert_int_equal(kv->arr_type, cases[c].t);
        assert_int_equal(kv->arr_len, cases[c].n);
        assert_int_equal(gguf_value_type_size(cases[c].t), cases[c].sz);
        if (cases[c].n)
            assert_memory_equal(kv->arr_data, cases[c].data, cases[c].n * cases[c].sz); /* bit exact */
        assert_null(kv->arr_str_offsets);
    }
    /* numeric accessors against hand-written expectations */
    double d;
    int64_t v;
    const gguf_kv *kv = gguf_find_kv(f, "a.i8");
    assert_true(gguf_kv_arr_i64(kv, 0, &v) && v == -128);
    assert_true(gguf_kv_arr_f64(kv, 2, &d) && d == 127.0);
    assert_false(gguf_kv_arr_i64(kv, 3, &v)); /* out of range */
    kv = gguf_find_kv(f, "a.u16");
    assert_true(gguf_kv_arr_i64(kv, 1, &v) && v == 65535);
    kv = gguf_find_kv(f, "a.i16");
    assert_true(gguf_kv_arr_i64(kv, 2, &v) && v == -1);
    kv = gguf_find_kv(f, "a.u32");
    assert_true(gguf_kv_arr_i64(kv, 0, &v) && v == 4294967295ll);
    kv = gguf_find_kv(f, "a.i32");
    assert_true(gguf_kv_arr_i64(kv, 0, &v) && v == INT32_MIN);
    assert_true(gguf_kv_arr_f64(kv, 1, &d) && d == -5.0);
    kv = gguf_find_kv(f, "a.u64");
    assert_false(gguf_kv_arr_i64(kv, 0, &v)); /* UINT64_MAX does not fit */
    assert_true(gguf_kv_arr_f64(kv, 0, &d) && d == 18446744073709551616.0);
    assert_true(gguf_kv_arr_i64(kv, 3, &v) && v == 12345);
    kv = gguf_find_kv(f, "a.i64");
    assert_true(gguf_kv_arr_i64(kv, 0, &v) && v == INT64_MIN);
    kv = gguf_find_kv(f, "a.f32");
    assert_true(gguf_kv_arr_f64(kv, 0, &d) && d == 1.5);
    assert_true(gguf_kv_arr_i64(kv, 1, &v) && v == 0);
    assert_false(gguf_kv_arr_i64(kv, 0, &v)); /* 1.5 is not integral */
    assert_false(gguf_kv_arr_i64(kv, 2, &v)); /* NaN */
    assert_false(gguf_kv_arr_i64(kv, 3, &v)); /* inf */
    kv = gguf_find_kv(f, "a.f64");
    assert_true(gguf_kv_arr_i64(kv, 3, &v) && v == 2);
    assert_true(gguf_kv_arr_f64(kv, 0, &d) && d == -2.25);
    assert_false(gguf_kv_arr_i64(kv, 2, &v)); /* 1e300 out of int64 range */
    kv = gguf_find_kv(f, "a.bool");
    assert_false(gguf_kv_arr_f64(kv, 0, &d)); /* bool is not numeric */
    kv = gguf_find_kv(f, "a.str");
    assert_false(gguf_kv_arr_f64(kv, 0, &d));
    assert_false(gguf_kv_arr_i64(kv, 0, &v));
    kv = gguf_find_kv(f, "u8.max");
    assert_null(kv);

    kv = need_kv(f, "a.str", GGUF_VT_ARRAY);
    assert_int_equal(kv->arr_type, GGUF_VT_STRING);
    assert_int_equal(kv->arr_len, 5);
    assert_non_null(kv->arr_str_offsets);
    for (uint64_t i = 0; i < 5; i++) {
        gguf_str s = gguf_kv_arr_str(kv, i);
        assert_true(gguf_str_eq(s, strs[i]));
    }
    kv = need_kv(f, "a.strbin", GGUF_VT_ARRAY);
    gguf_str s = gguf_kv_arr_str(kv, 0);
    assert_int_equal(s.len, 3);
    assert_memory_equal(s.ptr, "a\0b", 3);
    assert_int_equal(gguf_kv_arr_str(kv, 1).len, 0);
    kv = need_kv(f, "a.strempty", GGUF_VT_ARRAY);
    assert_int_equal(kv->arr_type, GGUF_VT_STRING);
    assert_int_equal(kv->arr_len, 0);
    kv = need_kv(f, "tokenizer.ggml.tokens", GGUF_VT_ARRAY);
    assert_int_equal(kv->arr_len, nv);
    for (uint64_t i = 0; i < nv; i++) {
        s = gguf_kv_arr_str(kv, i);
        if (!gguf_str_eq(s, vocab[i])) fail_msg("vocab item %llu differs", (unsigned long long)i);
    }
    for (uint64_t i = 0; i < nv; i++) free(vocab[i]);
    free(vocab);
    gguf_close(f);
    gguf_writer_free(w);
}

/* nbytes per tensor derived by hand from the ggml block layouts */
typedef struct tcase {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[8];
    uint64_t nbytes;
} tcase;

static const tcase tensor_cases[] = {
    {"blk.0.attn_norm.weight", DSV4_TYPE_F32, 1, {7}, 28},
    {"blk.0.f16", DSV4_TYPE_F16, 2, {3, 5}, 30},
    {"blk.0.q8", DSV4_TYPE_Q8_0, 2, {64, 3}, 2 * 34 * 3},
    {"blk.1.q4k", DSV4_TYPE_Q4_K, 3, {256, 2, 2}, 144 * 4},
    {"blk.1.ffn_gate_exps.weight", DSV4_TYPE_IQ2_XXS, 3, {512, 2, 3}, 2 * 66 * 6},
    {"eight_dims", DSV4_TYPE_I32, 8, {1, 2, 1, 1, 1, 1, 1, 3}, 24},
    {"bf", DSV4_TYPE_BF16, 1, {1}, 2},
    {"q2k", DSV4_TYPE_Q2_K, 2, {256, 1}, 84},
};
#define N_TC (sizeof tensor_cases / sizeof tensor_cases[0])

static void fill_random(uint8_t *p, uint64_t n, uint64_t seed) {
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)test_rng_next(&seed);
}

static void check_tensors(gguf_file *f, gguf_writer *w, uint8_t **data, uint32_t align) {
    assert_int_equal(gguf_tensor_count(f), N_TC);
    assert_int_equal(gguf_alignment(f), align);
    assert_int_equal(gguf_data_offset(f), gguf_writer_data_offset(w));
    assert_int_equal(gguf_data_offset(f) % align, 0);
    uint64_t prev_end = gguf_data_offset(f);
    for (uint64_t i = 0; i < N_TC; i++) {
        const tcase *c = &tensor_cases[i];
        const gguf_tensor *t = gguf_tensor_at(f, i);
        assert_non_null(t);
        assert_ptr_equal(gguf_find_tensor(f, c->name), t);
        assert_string_equal(t->name, c->name);
        assert_int_equal(t->n_dims, c->n_dims);
        assert_int_equal(t->type, c->type);
        uint64_t n = 1;
        for (uint32_t d = 0; d < 8; d++) {
            assert_int_equal(t->ne[d], d < c->n_dims ? c->ne[d] : 1);
            n *= t->ne[d];
        }
        assert_int_equal(t->n_elems, n);
        assert_int_equal(t->nbytes, c->nbytes);
        assert_int_equal(gguf_writer_tensor_nbytes(w, i), c->nbytes);
        assert_int_equal(t->offset % align, 0);
        assert_int_equal(t->offset, gguf_writer_tensor_offset(w, i));
        assert_true(t->offset >= prev_end);
        assert_true(t->offset - prev_end < align); /* packed in declaration order */
        prev_end = t->offset + t->nbytes;
        assert_ptr_equal(t->data, gguf_base(f) + t->offset);
        assert_memory_equal(t->data, data[i], c->nbytes);
    }
    /* padding bytes between tensors are zero */
    for (uint64_t i = 0; i + 1 < N_TC; i++) {
        const gguf_tensor *a = gguf_tensor_at(f, i), *b = gguf_tensor_at(f, i + 1);
        for (uint64_t o = a->offset + a->nbytes; o < b->offset; o++) assert_int_equal(gguf_base(f)[o], 0);
    }
    assert_null(gguf_tensor_at(f, N_TC));
    assert_null(gguf_find_tensor(f, "blk.0"));
    assert_null(gguf_find_tensor(f, "blk.0.q8x"));
    assert_null(gguf_find_tensor(f, ""));
}

static void tensors_with_alignment(uint32_t align, bool set_align_last) {
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    if (align != 32 && !set_align_last) OK(gguf_writer_set_alignment(w, align, &err));
    OK(gguf_writer_set_str(w, "general.architecture", "deepseek4", &err));
    uint8_t *data[N_TC];
    for (uint64_t i = 0; i < N_TC; i++) {
        uint64_t idx = 99;
        const tcase *c = &tensor_cases[i];
        OK(gguf_writer_add_tensor(w, c->name, c->type, c->n_dims, c->ne, &idx, &err));
        assert_int_equal(idx, i);
        data[i] = malloc(c->nbytes);
        assert_non_null(data[i]);
        fill_random(data[i], c->nbytes, 1000 + i);
        OK(gguf_writer_set_tensor_data(w, i, data[i], &err));
    }
    /* alignment set after the tensors must still lay them out correctly */
    if (align != 32 && set_align_last) OK(gguf_writer_set_alignment(w, align, &err));
    assert_int_equal(gguf_writer_tensor_count(w), N_TC);
    char name[64];
    snprintf(name, sizeof name, "tensors-%u-%d.gguf", align, (int)set_align_last);
    gguf_file *f = write_and_open(w, name);
    check_tensors(f, w, data, align);
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (align == 32) {
        assert_null(kv);
    } else {
        assert_non_null(kv);
        assert_int_equal(kv->type, GGUF_VT_UINT32);
        assert_int_equal(kv->v.u64, align);
    }
    /* the same bytes through gguf_open_memory */
    gguf_file *m = NULL;
    OK(gguf_open_memory(gguf_base(f), gguf_file_size(f), &m, &err));
    assert_string_equal(gguf_path(m), "<memory>");
    check_tensors(m, w, data, align);
    gguf_close(m);
    gguf_close(f);
    for (uint64_t i = 0; i < N_TC; i++) free(data[i]);
    gguf_writer_free(w);
}

static void test_tensors_default_alignment(void **state) {
    (void)state;
    tensors_with_alignment(32, false);
}
static void test_tensors_alignment_64(void **state) {
    (void)state;
    tensors_with_alignment(64, false);
}
static void test_tensors_alignment_4096_set_last(void **state) {
    (void)state;
    tensors_with_alignment(4096, true);
}
static void test_tensors_alignment_1(void **state) {
    (void)state;
    tensors_with_alignment(1, false);
}

/* The writer's bytes must equal a file assembled by hand from the format description. */
static void test_writer_matches_hand_bytes(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    OK(gguf_writer_set_u32(w, "a.n", 7, &err));
    OK(gguf_writer_set_str(w, "b.s", "xy", &err));
    const char *items[] = {"p", ""};
    OK(gguf_writer_set_arr_str(w, "c.v", items, NULL, 2, &err));
    const int16_t arr[] = {-2, 3};
    OK(gguf_writer_set_arr(w, "d.a", GGUF_VT_INT16, arr, 2, &err));
    const uint64_t ne0[] = {3}, ne1[] = {32, 1};
    uint64_t i0, i1;
    OK(gguf_writer_add_tensor(w, "t0", DSV4_TYPE_F32, 1, ne0, &i0, &err));
    OK(gguf_writer_add_tensor(w, "t1", DSV4_TYPE_Q8_0, 2, ne1, &i1, &err));
    uint8_t d0[12], d1[34];
    fill_random(d0, sizeof d0, 1);
    fill_random(d1, sizeof d1, 2);
    OK(gguf_writer_set_tensor_data(w, i0, d0, &err));
    OK(gguf_writer_set_tensor_data(w, i1, d1, &err));

    tb b = {0};
    tb_u32(&b, 0x46554747u);
    tb_u32(&b, 3);
    tb_u64(&b, 2);
    tb_u64(&b, 4);
    tb_str(&b, "a.n"), tb_u32(&b, 4), tb_u32(&b, 7);
    tb_str(&b, "b.s"), tb_u32(&b, 8), tb_str(&b, "xy");
    tb_str(&b, "c.v"), tb_u32(&b, 9), tb_u32(&b, 8), tb_u64(&b, 2), tb_str(&b, "p"), tb_str(&b, "");
    tb_str(&b, "d.a"), tb_u32(&b, 9), tb_u32(&b, 3), tb_u64(&b, 2), tb_u32(&b, 0x0003fffeu);
    tb_str(&b, "t0"), tb_u32(&b, 1), tb_u64(&b, 3), tb_u32(&b, 0), tb_u64(&b, 0);
    tb_str(&b, "t1"), tb_u32(&b, 2), tb_u64(&b, 32), tb_u64(&b, 1), tb_u32(&b, 8), tb_u64(&b, 32);
    tb_pad(&b, 32);
    size_t data_start = b.n;
    tb_bytes(&b, d0, 12);
    tb_pad(&b, 32);
    tb_bytes(&b, d1, 34);
    tb_pad(&b, 32);
    assert_int_equal(gguf_writer_data_offset(w), data_start);
    assert_int_equal(gguf_writer_tensor_offset(w, 1), data_start + 32);
    assert_int_equal(gguf_writer_file_size(w), b.n);

    char *path = tmp_path("hand.gguf");
    OK(gguf_writer_write_file(w, path, &err));
    size_t n = 0;
    uint8_t *got = read_whole(path, &n);
    assert_int_equal(n, b.n);
    assert_memory_equal(got, b.p, n);
    /* and the hand-made bytes read back */
    gguf_file *f = NULL;
    OK(gguf_open_memory(b.p, b.n, &f, &err));
    assert_int_equal(gguf_find_kv(f, "a.n")->v.u64, 7);
    int64_t v;
    assert_true(gguf_kv_arr_i64(gguf_find_kv(f, "d.a"), 0, &v) && v == -2);
    assert_memory_equal(gguf_find_tensor(f, "t1")->data, d1, 34);
    gguf_close(f);
    free(got);
    free(path);
    tb_free(&b);
    gguf_writer_free(w);
}

/* Tools write the header themselves and pwrite tensor data at the writer's offsets. */
static void test_header_fd_then_pwrite(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    OK(gguf_writer_set_alignment(w, 128, &err));
    uint8_t *data[N_TC];
    for (uint64_t i = 0; i < N_TC; i++) {
        const tcase *c = &tensor_cases[i];
        OK(gguf_writer_add_tensor(w, c->name, c->type, c->n_dims, c->ne, NULL, &err));
        data[i] = malloc(c->nbytes);
        fill_random(data[i], c->nbytes, 77 + i);
    }
    char *path = tmp_path("fd.gguf");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    /* tensors first, in reverse, then the header: order must not matter */
    for (uint64_t i = N_TC; i-- > 0;)
        assert_int_equal(pwrite(fd, data[i], tensor_cases[i].nbytes, (off_t)gguf_writer_tensor_offset(w, i)),
                         (ssize_t)tensor_cases[i].nbytes);
    OK(gguf_writer_write_header_fd(w, fd, &err));
    assert_int_equal(ftruncate(fd, (off_t)gguf_writer_file_size(w)), 0);
    assert_int_equal(close(fd), 0);
    gguf_file *f = NULL;
    OK(gguf_open(path, &f, &err));
    check_tensors(f, w, data, 128);
    gguf_close(f);
    for (uint64_t i = 0; i < N_TC; i++) free(data[i]);
    free(path);
    gguf_writer_free(w);
}

/* Arrays of arrays are valid up to depth 8; they have no item accessors. */
static void nested_image(tb *b, int depth) {
    tb_u32(b, 0x46554747u), tb_u32(b, 3), tb_u64(b, 0), tb_u64(b, 2);
    tb_str(b, "deep"), tb_u32(b, 9);
    for (int d = 1; d < depth; d++) tb_u32(b, 9), tb_u64(b, 1); /* array of one array */
    tb_u32(b, 0), tb_u64(b, 2), tb_u8(b, 5), tb_u8(b, 6);       /* innermost: u8 [5, 6] */
    tb_str(b, "after"), tb_u32(b, 4), tb_u32(b, 42);
}

static void test_nested_arrays_valid(void **state) {
    (void)state;
    for (int depth = 1; depth <= 8; depth++) {
        tb b = {0};
        nested_image(&b, depth);
        dsv4_error err = {0};
        gguf_file *f = NULL;
        OK(gguf_open_memory(b.p, b.n, &f, &err));
        const gguf_kv *kv = gguf_find_kv(f, "deep");
        assert_non_null(kv);
        assert_int_equal(kv->arr_type, depth == 1 ? GGUF_VT_UINT8 : GGUF_VT_ARRAY);
        double d;
        assert_int_equal(gguf_kv_arr_f64(kv, 0, &d), depth == 1);
        assert_int_equal(gguf_kv_arr_str(kv, 0).len, 0);
        assert_int_equal(gguf_find_kv(f, "after")->v.u64, 42); /* parsing resumed at the right byte */
        gguf_close(f);
        tb_free(&b);
    }
    tb b = {0};
    nested_image(&b, 9);
    dsv4_error err = {0};
    gguf_file *f = (gguf_file *)&err;
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, &err), DSV4_ERR_FORMAT);
    assert_null(f);
    assert_non_null(strstr(err.msg, "'deep'"));
    tb_free(&b);
}

static void test_empty_file_no_tensors(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    gguf_file *f = write_and_open(w, "empty.gguf");
    assert_int_equal(gguf_kv_count(f), 0);
    assert_int_equal(gguf_tensor_count(f), 0);
    assert_int_equal(gguf_file_size(f), 32);
    assert_null(gguf_find_kv(f, "x"));
    assert_null(gguf_find_tensor(f, "x"));
    gguf_close(f);
    gguf_writer_free(w);
    (void)err;
}

static void test_open_errors(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_file *f = NULL;
    char *missing = tmp_path("does-not-exist.gguf");
    assert_int_equal(gguf_open(missing, &f, &err), DSV4_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "does-not-exist.gguf"));
    assert_null(f);
    assert_int_not_equal(gguf_open(tmpdir_get(), &f, &err), DSV4_OK); /* a directory */
    assert_true(err.msg[0]);
    char *empty = tmp_path("zero.gguf");
    FILE *fp = fopen(empty, "wb");
    fclose(fp);
    assert_int_equal(gguf_open(empty, &f, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "zero.gguf"));
    assert_int_equal(gguf_open_memory(NULL, 0, &f, &err), DSV4_ERR_FORMAT);
    assert_true(err.msg[0]);
    assert_int_equal(gguf_open_memory(NULL, 5, &f, &err), DSV4_ERR_INVALID);
    assert_int_not_equal(gguf_open(NULL, &f, &err), DSV4_OK);
    free(missing);
    free(empty);
    /* NULL handles are harmless */
    gguf_close(NULL);
    assert_null(gguf_find_kv(NULL, "x"));
    assert_null(gguf_find_tensor(NULL, "x"));
    assert_int_equal(gguf_kv_count(NULL), 0);
}

static void test_value_type_table(void **state) {
    (void)state;
    assert_string_equal(gguf_value_type_name(GGUF_VT_FLOAT64), "f64");
    assert_string_equal(gguf_value_type_name(GGUF_VT_STRING), "string");
    assert_string_equal(gguf_value_type_name((gguf_value_type)13), "unknown");
    assert_int_equal(gguf_value_type_size(GGUF_VT_BOOL), 1);
    assert_int_equal(gguf_value_type_size(GGUF_VT_INT16), 2);
    assert_int_equal(gguf_value_type_size(GGUF_VT_FLOAT32), 4);
    assert_int_equal(gguf_value_type_size(GGUF_VT_UINT64), 8);
    assert_int_equal(gguf_value_type_size(GGUF_VT_STRING), 0);
    assert_int_equal(gguf_value_type_size(GGUF_VT_ARRAY), 0);
    assert_int_equal(gguf_value_type_size((gguf_value_type)99), 0);
}

static int teardown_all(void **state) {
    (void)state;
    tmpdir_remove();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_tensors_default_alignment),
        cmocka_unit_test(test_tensors_alignment_64),
        cmocka_unit_test(test_tensors_alignment_4096_set_last),
        cmocka_unit_test(test_tensors_alignment_1),
        cmocka_unit_test(test_writer_matches_hand_bytes),
        cmocka_unit_test(test_header_fd_then_pwrite),
        cmocka_unit_test(test_nested_arrays_valid),
        cmocka_unit_test(test_empty_file_no_tensors),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_value_type_table),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
